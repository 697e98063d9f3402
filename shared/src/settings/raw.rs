//! A JSON object kept as the text it was read as: members in their order, each value the exact
//! bytes of the file. A settings write edits one member and renders the rest untouched, so keys
//! it does not know (and the spelling of every value it does not change) survive byte for byte.

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;
use std::fmt;

/// An object whose members are kept as read.
#[derive(Clone, Debug, Default)]
pub struct Ordered {
    members: Vec<(String, Box<RawValue>)>,
}

impl Ordered {
    /// Parses `text`; `Err` says why it is not a JSON object.
    pub fn parse(text: &str) -> Result<Ordered, String> {
        if text.trim().is_empty() {
            return Ok(Ordered::default());
        }
        // Checked as a value first: the error then says what is wrong and where.
        let v: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if !v.is_object() {
            return Err("expected a JSON object at the top".to_owned());
        }
        serde_json::from_str(text).map_err(|e| e.to_string())
    }

    /// A member's raw value (the last one, if the name repeats, as JSON parsers do).
    pub fn get(&self, name: &str) -> Option<&RawValue> {
        self.members.iter().rev().find(|(n, _)| n == name).map(|(_, v)| &**v)
    }

    /// A member decoded, if present.
    pub fn value(&self, name: &str) -> Option<Value> {
        self.get(name).and_then(|v| serde_json::from_str(v.get()).ok())
    }

    /// A member that is itself an object, as an [`Ordered`] (empty when absent or not one).
    pub fn object(&self, name: &str) -> Ordered {
        self.get(name).and_then(|v| Ordered::parse(v.get()).ok()).unwrap_or_default()
    }

    /// The members' names, in order, each once.
    pub fn names(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for (n, _) in &self.members {
            if !out.contains(n) {
                out.push(n.clone());
            }
        }
        out
    }

    /// Sets a member: in place if present (its position kept), else appended.
    pub fn set(&mut self, name: &str, value: &Value) {
        self.set_raw(name, raw(value));
    }

    /// Sets a member to already-encoded JSON text.
    pub fn set_raw(&mut self, name: &str, value: Box<RawValue>) {
        // Duplicates collapse into the last spelling's position, as a parser reads them.
        match self.members.iter().rposition(|(n, _)| n == name) {
            Some(i) => {
                self.members[i].1 = value;
                let mut j = 0;
                self.members.retain(|(n, _)| {
                    j += 1;
                    n != name || j - 1 == i
                });
            }
            None => self.members.push((name.to_owned(), value)),
        }
    }

    /// Sets a member that is an object to `inner` rendered at `depth`.
    pub fn set_object(&mut self, name: &str, inner: &Ordered, depth: usize) {
        let text = inner.render(depth);
        self.set_raw(name, RawValue::from_string(text).expect("a rendered object is JSON"));
    }

    /// Removes a member; whether it was there.
    pub fn remove(&mut self, name: &str) -> bool {
        let before = self.members.len();
        self.members.retain(|(n, _)| n != name);
        before != self.members.len()
    }

    /// The object as pretty JSON whose own members are indented for `depth` (0: a file's top
    /// level); each value is written as it was read.
    pub fn render(&self, depth: usize) -> String {
        if self.members.is_empty() {
            return "{}".to_owned();
        }
        let pad = "  ".repeat(depth + 1);
        let mut out = String::from("{\n");
        for (i, (name, value)) in self.members.iter().enumerate() {
            if i > 0 {
                out.push_str(",\n");
            }
            out.push_str(&pad);
            out.push_str(&Value::from(name.as_str()).to_string());
            out.push_str(": ");
            out.push_str(value.get());
        }
        out.push('\n');
        out.push_str(&"  ".repeat(depth));
        out.push('}');
        out
    }
}

/// `value` as pretty JSON text for a member at `depth` (nested lines indented to fit).
pub fn pretty(value: &Value, depth: usize) -> Box<RawValue> {
    let text = serde_json::to_string_pretty(value).expect("a JSON value always serializes");
    let text = text.replace('\n', &format!("\n{}", "  ".repeat(depth)));
    RawValue::from_string(text).expect("serialized JSON is JSON")
}

fn raw(value: &Value) -> Box<RawValue> {
    RawValue::from_string(value.to_string()).expect("serialized JSON is JSON")
}

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Ordered, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Ordered;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Ordered, A::Error> {
                let mut members = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Box<RawValue>>()? {
                    members.push((k, v));
                }
                Ok(Ordered { members })
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untouched_members_keep_their_bytes_and_order() {
        let text = r#"{"z": 1.50, "unknown": {"deep":  [1,2e3]}, "a": "x"}"#;
        let mut o = Ordered::parse(text).unwrap();
        o.set("a", &Value::from("y"));
        o.set("new", &Value::from(true));
        let out = o.render(0);
        assert_eq!(
            out,
            "{\n  \"z\": 1.50,\n  \"unknown\": {\"deep\":  [1,2e3]},\n  \"a\": \"y\",\n  \"new\": true\n}"
        );
        assert!(o.remove("z"));
        assert_eq!(o.names(), vec!["unknown", "a", "new"]);
    }

    #[test]
    fn not_an_object_is_refused() {
        assert!(Ordered::parse("[1]").is_err());
        assert!(Ordered::parse("{\"a\":").is_err());
        assert!(Ordered::parse("  ").unwrap().names().is_empty());
    }
}
