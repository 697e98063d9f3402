//! The one order-preserving raw-JSON object: a JSON object kept as the text it was read as.
//! Each member's key and value are the exact bytes received (number spellings, big integers,
//! escapes), in their order; an edit changes one member and renders the rest untouched. The
//! settings writes use it so keys they do not know survive a write byte for byte (pretty,
//! [`Ordered::render`]); the journal's merger so it never decodes and re-encodes a value it
//! does not itself change (compact, [`Ordered::compact`]).

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;
use std::fmt;

/// One member: its name decoded (for lookups), its key and value as read.
#[derive(Clone, Debug)]
struct Member {
    name: String,
    key: Box<RawValue>,
    value: Box<RawValue>,
}

/// An object whose members are kept as read.
#[derive(Clone, Debug, Default)]
pub struct Ordered {
    members: Vec<Member>,
}

impl Ordered {
    /// Parses a file's text: as [`Ordered::parse`], but blank text is an empty object (as an
    /// empty file is).
    pub fn parse_file(text: &str) -> Result<Ordered, String> {
        if text.trim().is_empty() {
            return Ok(Ordered::default());
        }
        Ordered::parse(text)
    }

    /// Parses `text`; `Err` says why it is not a JSON object.
    pub fn parse(text: &str) -> Result<Ordered, String> {
        serde_json::from_str(text).map_err(|e| {
            // Read as a value, the error says what is wrong and where.
            match serde_json::from_str::<Value>(text) {
                Err(e) => e.to_string(),
                Ok(v) if !v.is_object() => "expected a JSON object at the top".to_owned(),
                Ok(_) => e.to_string(),
            }
        })
    }

    /// A member's raw value (the last one, if the name repeats, as JSON parsers do).
    pub fn get(&self, name: &str) -> Option<&RawValue> {
        self.members.iter().rev().find(|m| m.name == name).map(|m| &*m.value)
    }

    /// A member decoded, if present.
    pub fn value(&self, name: &str) -> Option<Value> {
        self.get(name).and_then(|v| serde_json::from_str(v.get()).ok())
    }

    /// A member decoded as a string, if it is one.
    pub fn str(&self, name: &str) -> Option<String> {
        self.get(name).and_then(|v| serde_json::from_str(v.get()).ok())
    }

    /// A member that is itself an object, as an [`Ordered`] (empty when absent or not one).
    pub fn object(&self, name: &str) -> Ordered {
        self.get(name).and_then(|v| Ordered::parse(v.get()).ok()).unwrap_or_default()
    }

    /// The members' names, in order, each once.
    pub fn names(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for m in &self.members {
            if !out.contains(&m.name) {
                out.push(m.name.clone());
            }
        }
        out
    }

    /// Sets a member: in place if present (its position kept), else appended.
    pub fn set(&mut self, name: &str, value: &Value) {
        self.set_raw(name, raw(value.to_string()));
    }

    /// Sets a member to already-encoded JSON text.
    pub fn set_raw(&mut self, name: &str, value: Box<RawValue>) {
        // Duplicates collapse into the last spelling's position, as a parser reads them.
        match self.members.iter().rposition(|m| m.name == name) {
            Some(i) => {
                self.members[i].value = value;
                let mut j = 0;
                self.members.retain(|m| {
                    j += 1;
                    m.name != name || j - 1 == i
                });
            }
            None => {
                let key = raw(Value::from(name).to_string());
                self.members.push(Member { name: name.to_owned(), key, value });
            }
        }
    }

    /// Sets a member that is an object to `inner` rendered at `depth`.
    pub fn set_object(&mut self, name: &str, inner: &Ordered, depth: usize) {
        self.set_raw(name, raw(inner.render(depth)));
    }

    /// Every member of `other` but `except` set on this one, values (and the keys of new
    /// members) as `other` has them.
    pub fn overlay(&mut self, other: &Ordered, except: &str) {
        for m in other.members.iter().filter(|m| m.name != except) {
            if self.get(&m.name).is_some() {
                self.set_raw(&m.name, m.value.clone());
            } else {
                self.members.push(m.clone());
            }
        }
    }

    /// Removes a member; whether it was there.
    pub fn remove(&mut self, name: &str) -> bool {
        let before = self.members.len();
        self.members.retain(|m| m.name != name);
        before != self.members.len()
    }

    /// The object as pretty JSON whose own members are indented for `depth` (0: a file's top
    /// level); each key and value is written as it was read.
    pub fn render(&self, depth: usize) -> String {
        if self.members.is_empty() {
            return "{}".to_owned();
        }
        let pad = "  ".repeat(depth + 1);
        let mut out = String::from("{\n");
        for (i, m) in self.members.iter().enumerate() {
            if i > 0 {
                out.push_str(",\n");
            }
            out.push_str(&pad);
            out.push_str(m.key.get());
            out.push_str(": ");
            out.push_str(m.value.get());
        }
        out.push('\n');
        out.push_str(&"  ".repeat(depth));
        out.push('}');
        out
    }

    /// The object as compact JSON: `{key:value,...}`, keys and values as read.
    pub fn compact(&self) -> String {
        let mut out = String::with_capacity(
            2 + self.members.iter().map(|m| m.key.get().len() + m.value.get().len() + 2).sum::<usize>(),
        );
        out.push('{');
        for (i, m) in self.members.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(m.key.get());
            out.push(':');
            out.push_str(m.value.get());
        }
        out.push('}');
        out
    }
}

/// `value` as pretty JSON text for a member at `depth` (nested lines indented to fit).
pub fn pretty(value: &Value, depth: usize) -> Box<RawValue> {
    let text = serde_json::to_string_pretty(value).expect("a JSON value always serializes");
    raw(text.replace('\n', &format!("\n{}", "  ".repeat(depth))))
}

/// JSON text the caller built itself, as a raw value.
///
/// # Panics
/// When `text` is not JSON: a bug of the caller.
pub fn raw(text: String) -> Box<RawValue> {
    RawValue::from_string(text).expect("built JSON is JSON")
}

/// The characters between the quotes of a raw JSON string, escapes as read; `None` if `v` is
/// not a string. Two such runs joined and quoted are the JSON of the joined strings.
pub fn string_body(v: &RawValue) -> Option<&str> {
    let t = v.get();
    (t.len() >= 2 && t.starts_with('"') && t.ends_with('"')).then(|| &t[1..t.len() - 1])
}

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Ordered, D::Error> {
        struct Members;
        impl<'de> Visitor<'de> for Members {
            type Value = Ordered;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Ordered, A::Error> {
                let mut members = vec![];
                while let Some((key, value)) = map.next_entry::<Box<RawValue>, Box<RawValue>>()? {
                    let name: String = serde_json::from_str(key.get()).map_err(serde::de::Error::custom)?;
                    members.push(Member { name, key, value });
                }
                Ok(Ordered { members })
            }
        }
        d.deserialize_map(Members)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn members_keep_their_bytes_and_order() {
        let text = r#"{ "z" : [1.50, 2e3], "\u0061":123456789012345678901234567890,"s":"\u00e9"}"#;
        let mut o = Ordered::parse(text).unwrap();
        assert_eq!(o.compact(), r#"{"z":[1.50, 2e3],"\u0061":123456789012345678901234567890,"s":"\u00e9"}"#);
        assert_eq!(o.get("a").unwrap().get(), "123456789012345678901234567890");
        assert_eq!(o.str("s").as_deref(), Some("é"));
        assert_eq!(string_body(o.get("s").unwrap()), Some(r"\u00e9"));
        o.set_raw("a", raw("-0.0".into()));
        o.set_raw("new", raw("1E+2".into()));
        assert_eq!(o.compact(), r#"{"z":[1.50, 2e3],"\u0061":-0.0,"s":"\u00e9","new":1E+2}"#);
    }

    #[test]
    fn untouched_members_keep_their_bytes_and_order_when_pretty() {
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
    fn overlay_replaces_in_place_and_appends_the_rest() {
        let mut o = Ordered::parse(r#"{"id":"t","status":"pending","x":1}"#).unwrap();
        let u = Ordered::parse(r#"{"id":"other","status":"done","\u0079":2.0}"#).unwrap();
        o.overlay(&u, "id");
        assert_eq!(o.compact(), r#"{"id":"t","status":"done","x":1,"\u0079":2.0}"#);
    }

    #[test]
    fn not_an_object_is_refused_with_why() {
        assert_eq!(Ordered::parse("[1]").unwrap_err(), "expected a JSON object at the top");
        assert!(Ordered::parse("{\"a\":").unwrap_err().contains("EOF"));
        assert!(Ordered::parse("{").is_err());
        assert!(Ordered::parse("  ").is_err());
        assert!(Ordered::parse_file("  ").unwrap().names().is_empty());
    }

    /// A JSON value spelled in one of the ways a re-encoder would change.
    fn spelled() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("1.50".to_owned()),
            Just("1E+2".to_owned()),
            Just("-0.0".to_owned()),
            Just("123456789012345678901234567890".to_owned()),
            Just(r#""\u00e9\n""#.to_owned()),
            Just("[ 1 ,2e3 ]".to_owned()),
            Just(r#"{"b": 1, "a" :2}"#.to_owned()),
            "[a-z]{0,6}".prop_map(|s| format!("{s:?}")),
            any::<i64>().prop_map(|n| n.to_string()),
        ]
    }

    fn key() -> impl Strategy<Value = String> {
        prop_oneof![Just(r#""\u0061""#.to_owned()), "[a-c]{1,2}".prop_map(|s| format!("{s:?}"))]
    }

    proptest! {
        /// Parsed and rendered compact, any object is its members' bytes in order; setting one
        /// member changes that member only (duplicates of its name collapse into it).
        #[test]
        fn compact_is_the_bytes_read_and_set_touches_one_member(
            members in proptest::collection::vec((key(), spelled()), 0..8),
            new in spelled(),
        ) {
            let text = format!(
                "{{ {} }}",
                members.iter().map(|(k, v)| format!("{k} : {v}")).collect::<Vec<_>>().join(" , ")
            );
            let mut o = Ordered::parse(&text).unwrap();
            let expect: Vec<String> = members.iter().map(|(k, v)| format!("{k}:{v}")).collect();
            prop_assert_eq!(o.compact(), format!("{{{}}}", expect.join(",")));
            let pretty: Value = serde_json::from_str(&o.render(1)).unwrap();
            let plain: Value = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(&pretty, &plain);

            o.set_raw("b", raw(new.clone()));
            let names: Vec<String> =
                members.iter().map(|(k, _)| serde_json::from_str::<String>(k).unwrap()).collect();
            let last_b = names.iter().rposition(|n| n == "b");
            let mut expect = Vec::new();
            for (i, (k, v)) in members.iter().enumerate() {
                match (names[i] == "b", Some(i) == last_b) {
                    (true, true) => expect.push(format!("{k}:{new}")),
                    (true, false) => {}
                    _ => expect.push(format!("{k}:{v}")),
                }
            }
            if last_b.is_none() {
                expect.push(format!("\"b\":{new}"));
            }
            prop_assert_eq!(o.compact(), format!("{{{}}}", expect.join(",")));
        }
    }
}
