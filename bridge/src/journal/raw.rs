//! JSON objects kept as the text they arrived as: each member's key and value are the exact
//! bytes received (number spellings, big integers, escapes), in their order. The merger edits
//! members of these; it never decodes and re-encodes a value it does not itself change.

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use std::fmt;

/// One member: its name decoded (for lookups), its key and value as received.
#[derive(Clone, Debug)]
struct Member {
    name: String,
    key: Box<RawValue>,
    value: Box<RawValue>,
}

/// An object whose members are kept byte for byte.
#[derive(Clone, Debug, Default)]
pub struct RawObject {
    members: Vec<Member>,
}

impl RawObject {
    /// Parses `text` if it is a JSON object.
    pub fn parse(text: &str) -> Option<RawObject> {
        serde_json::from_str(text).ok()
    }

    /// A member's value as received (the last one, if the name repeats, as JSON parsers do).
    pub fn get(&self, name: &str) -> Option<&RawValue> {
        self.members.iter().rev().find(|m| m.name == name).map(|m| &*m.value)
    }

    /// A member's value decoded as a string, if it is one.
    pub fn str(&self, name: &str) -> Option<String> {
        self.get(name).and_then(|v| serde_json::from_str(v.get()).ok())
    }

    /// Sets a member to `value` (raw JSON text): in place if present, else appended.
    pub fn set(&mut self, name: &str, value: Box<RawValue>) {
        if let Some(m) = self.members.iter_mut().rev().find(|m| m.name == name) {
            m.value = value;
            return;
        }
        let key = RawValue::from_string(serde_json::Value::from(name).to_string())
            .expect("an encoded string is JSON");
        self.members.push(Member { name: name.to_owned(), key, value });
    }

    /// Every member of `other` but `except` set on this one (a tool call's update: each field
    /// it carries replaces the call's, as received).
    pub fn overlay(&mut self, other: &RawObject, except: &str) {
        for m in other.members.iter().filter(|m| m.name != except) {
            match self.members.iter_mut().rev().find(|t| t.name == m.name) {
                Some(t) => t.value = m.value.clone(),
                None => self.members.push(m.clone()),
            }
        }
    }

    /// The object as compact JSON: `{key:value,...}`, keys and values as received.
    pub fn render(&self) -> String {
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

/// Raw JSON text for a value the merger builds itself.
pub fn raw(text: String) -> Box<RawValue> {
    RawValue::from_string(text).expect("the merger builds valid JSON")
}

/// The characters between the quotes of a raw JSON string, escapes as received; `None` if
/// `v` is not a string. Two such runs joined and quoted are the JSON of the joined strings.
pub fn string_body(v: &RawValue) -> Option<&str> {
    let t = v.get();
    (t.len() >= 2 && t.starts_with('"') && t.ends_with('"')).then(|| &t[1..t.len() - 1])
}

impl<'de> Deserialize<'de> for RawObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RawObject, D::Error> {
        struct Members;
        impl<'de> Visitor<'de> for Members {
            type Value = RawObject;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawObject, A::Error> {
                let mut members = vec![];
                while let Some((key, value)) = map.next_entry::<Box<RawValue>, Box<RawValue>>()? {
                    let name: String = serde_json::from_str(key.get()).map_err(serde::de::Error::custom)?;
                    members.push(Member { name, key, value });
                }
                Ok(RawObject { members })
            }
        }
        d.deserialize_map(Members)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_keep_their_bytes_and_order() {
        let text = r#"{ "z" : [1.50, 2e3], "\u0061":123456789012345678901234567890,"s":"\u00e9"}"#;
        let mut o = RawObject::parse(text).unwrap();
        assert_eq!(o.render(), r#"{"z":[1.50, 2e3],"\u0061":123456789012345678901234567890,"s":"\u00e9"}"#);
        assert_eq!(o.get("a").unwrap().get(), "123456789012345678901234567890");
        assert_eq!(o.str("s").as_deref(), Some("é"));
        assert_eq!(string_body(o.get("s").unwrap()), Some(r"\u00e9"));
        o.set("a", raw("-0.0".into()));
        o.set("new", raw("1E+2".into()));
        assert_eq!(o.render(), r#"{"z":[1.50, 2e3],"\u0061":-0.0,"s":"\u00e9","new":1E+2}"#);
        assert!(RawObject::parse("[1]").is_none());
        assert!(RawObject::parse("{").is_none());
    }
}
