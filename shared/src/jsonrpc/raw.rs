//! A message as received: the envelope parsed, params/result/error kept as raw JSON text.
//!
//! The bridge forwards what it received and rewrites only ids, so payloads are never
//! re-serialized: `_meta`, unknown fields, unknown `sessionUpdate` kinds and number spellings
//! pass through byte for byte. Typed reads (`params_as`) parse a copy.

use super::{EnvelopeError, Id};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use std::fmt::Write as _;

/// A JSON-RPC message with raw payloads.
#[derive(Clone, Debug)]
pub struct RawMessage {
    /// The id: requests and responses; `None` for notifications and null-id responses.
    pub id: Option<Id>,
    /// The method: requests and notifications.
    pub method: Option<String>,
    /// The params, as received.
    pub params: Option<Box<RawValue>>,
    /// The result of a success response, as received.
    pub result: Option<Box<RawValue>>,
    /// The error of an error response, as received.
    pub error: Option<Box<RawValue>>,
}

/// Why a line is not a JSON-RPC message.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// Not JSON (answer `-32700`).
    #[error("parse error: {0}")]
    Json(String),
    /// JSON, but not a JSON-RPC message (answer `-32600`).
    #[error("invalid request: {0}")]
    Envelope(EnvelopeError),
    /// A line over the reader's size limit, refused unread: what to tell its sender (answer
    /// `-32600`).
    #[error("{0}")]
    TooLarge(String),
}

impl ParseError {
    /// The JSON-RPC error code to answer with.
    pub fn code(&self) -> i64 {
        match self {
            ParseError::Json(_) => super::PARSE_ERROR,
            ParseError::Envelope(_) | ParseError::TooLarge(_) => super::INVALID_REQUEST,
        }
    }
}

#[derive(Deserialize)]
struct Wire {
    #[serde(default, deserialize_with = "present")]
    id: Option<Box<RawValue>>,
    #[serde(default, deserialize_with = "present")]
    method: Option<Box<RawValue>>,
    #[serde(default, deserialize_with = "present")]
    params: Option<Box<RawValue>>,
    #[serde(default, deserialize_with = "present")]
    result: Option<Box<RawValue>>,
    #[serde(default, deserialize_with = "present")]
    error: Option<Box<RawValue>>,
}

/// A member that is present is kept, even when it is `null` (`"result": null` is a result).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Box<RawValue>>, D::Error> {
    Box::<RawValue>::deserialize(d).map(Some)
}

/// What a raw message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawKind {
    /// `method` and `id`.
    Request,
    /// `method`, no `id`.
    Notification,
    /// `result` or `error`.
    Response,
}

impl RawMessage {
    /// Parses one line (or frame) of JSON-RPC.
    pub fn parse(text: &str) -> Result<RawMessage, ParseError> {
        let trimmed = text.trim_start();
        if !trimmed.starts_with('{') {
            // Valid JSON that is not an object is an invalid request; anything else a parse error.
            return match serde_json::from_str::<serde::de::IgnoredAny>(text) {
                Ok(_) => Err(ParseError::Envelope(EnvelopeError::NotAnObject)),
                Err(e) => Err(ParseError::Json(e.to_string())),
            };
        }
        let wire: Wire = serde_json::from_str(text).map_err(|e| ParseError::Json(e.to_string()))?;
        let method = match wire.method {
            None => None,
            Some(m) => Some(
                serde_json::from_str::<String>(m.get())
                    .map_err(|_| ParseError::Envelope(EnvelopeError::BadMethod))?,
            ),
        };
        let id = match wire.id.as_deref().map(RawValue::get) {
            None | Some("null") => None,
            Some(raw) => Some(id_from_raw(raw).ok_or(ParseError::Envelope(EnvelopeError::BadId))?),
        };
        let msg = RawMessage { id, method, params: wire.params, result: wire.result, error: wire.error };
        if msg.method.is_none() && msg.result.is_none() && msg.error.is_none() {
            return Err(ParseError::Envelope(EnvelopeError::Unrecognised));
        }
        Ok(msg)
    }

    /// Request, notification or response.
    pub fn kind(&self) -> RawKind {
        match (&self.method, &self.id) {
            (Some(_), Some(_)) => RawKind::Request,
            (Some(_), None) => RawKind::Notification,
            (None, _) => RawKind::Response,
        }
    }

    /// The method, or `""` for responses.
    pub fn method(&self) -> &str {
        self.method.as_deref().unwrap_or("")
    }

    /// A typed copy of the params, if they parse as `T`.
    pub fn params_as<T: DeserializeOwned>(&self) -> Option<T> {
        serde_json::from_str(self.params.as_deref()?.get()).ok()
    }

    /// The params as a `Value` (a copy), `Null` when absent.
    pub fn params_value(&self) -> serde_json::Value {
        self.params_as().unwrap_or(serde_json::Value::Null)
    }

    /// A typed copy of the result, if it parses as `T`.
    pub fn result_as<T: DeserializeOwned>(&self) -> Option<T> {
        serde_json::from_str(self.result.as_deref()?.get()).ok()
    }

    /// Its size in bytes, near enough to bound a queue by (the method and the raw members).
    pub fn size(&self) -> usize {
        let raw = [&self.params, &self.result, &self.error];
        self.method.as_ref().map_or(0, String::len)
            + raw.iter().filter_map(|r| r.as_ref()).map(|r| r.get().len()).sum::<usize>()
    }

    /// The `sessionId` in the params, if any.
    pub fn session_id(&self) -> Option<String> {
        #[derive(Deserialize)]
        struct S {
            #[serde(rename = "sessionId")]
            session_id: String,
        }
        self.params_as::<S>().map(|s| s.session_id)
    }

    /// The message serialized, with its own id.
    pub fn to_line(&self) -> String {
        self.line_with_id(self.id.as_ref())
    }

    /// The message serialized with `id` in place of its own (the only rewrite the bridge does).
    pub fn line_with_id(&self, id: Option<&Id>) -> String {
        let members: Vec<(&str, &str)> =
            [("params", &self.params), ("result", &self.result), ("error", &self.error)]
                .into_iter()
                .filter_map(|(name, part)| part.as_deref().map(|r| (name, r.get())))
                .collect();
        // A response whose id could not be read answers with `"id": null`.
        let null_id = id.is_none() && self.method.is_none();
        envelope(id, null_id, self.method.as_deref(), &members)
    }
}

/// A response line to `id`: a result passed through byte for byte, or an error object the
/// caller built.
pub fn response_line(id: &Id, result: Result<&RawValue, serde_json::Value>) -> String {
    match result {
        Ok(raw) => envelope(Some(id), false, None, &[("result", raw.get())]),
        Err(err) => envelope(Some(id), false, None, &[("error", &err.to_string())]),
    }
}

/// A notification line whose params are the JSON text `params`, not re-serialized (so number
/// spellings and unknown fields stay as they are). `params` must be a JSON object's text.
pub fn notification_line(method: &str, params: &str) -> String {
    envelope(None, false, Some(method), &[("params", params)])
}

/// The one place a JSON-RPC envelope is written as text: `jsonrpc`, the id (or `null`), the
/// method, then each `(member, JSON text)` as given.
fn envelope(id: Option<&Id>, null_id: bool, method: Option<&str>, members: &[(&str, &str)]) -> String {
    let payload_len = members.iter().map(|(_, text)| text.len()).sum::<usize>();
    let mut out = String::with_capacity(payload_len + 64);
    out.push_str("{\"jsonrpc\":\"2.0\"");
    if let Some(id) = id {
        out.push_str(",\"id\":");
        id.write_json(&mut out);
    } else if null_id {
        out.push_str(",\"id\":null");
    }
    if let Some(m) = method {
        out.push_str(",\"method\":");
        out.push_str(&serde_json::Value::from(m).to_string());
    }
    for (name, text) in members {
        let _ = write!(out, ",\"{name}\":{text}");
    }
    out.push('}');
    out
}

fn id_from_raw(raw: &str) -> Option<Id> {
    match raw.as_bytes().first()? {
        b'"' => serde_json::from_str::<String>(raw).ok().map(Id::String),
        b'-' | b'0'..=b'9' => Some(Id::Number(raw.to_owned())),
        _ => None,
    }
}

impl Id {
    /// Appends the id's JSON spelling to `out`.
    pub fn write_json(&self, out: &mut String) {
        match self {
            Id::Number(n) => out.push_str(n),
            Id::String(s) => out.push_str(&serde_json::Value::from(s.as_str()).to_string()),
        }
    }
}

/// Serializes a raw JSON text into a `Box<RawValue>` (for params the bridge itself builds).
pub fn raw(value: &serde_json::Value) -> Box<RawValue> {
    RawValue::from_string(value.to_string()).expect("a Value always serializes to valid JSON")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn payloads_pass_through_byte_for_byte() {
        let line = r#"{"jsonrpc":"2.0","id":7,"method":"session/update","params":{"z":1,"a":{"_meta":{"x":[1.50,2e3]}},"big":123456789012345678901234567890}}"#;
        let m = RawMessage::parse(line).unwrap();
        assert_eq!(m.kind(), RawKind::Request);
        assert_eq!(m.to_line(), line);
        let rewritten = m.line_with_id(Some(&Id::String("c-1".into())));
        assert!(rewritten.contains(r#""id":"c-1""#));
        assert!(rewritten.ends_with(r#""big":123456789012345678901234567890}}"#));
    }

    #[test]
    fn ids_keep_their_type() {
        let n = RawMessage::parse(r#"{"id":92,"result":null}"#).unwrap();
        let s = RawMessage::parse(r#"{"id":"92","result":null}"#).unwrap();
        assert_ne!(n.id, s.id);
        let back: Value = serde_json::from_str(&n.to_line()).unwrap();
        assert_eq!(back["id"], json!(92));
        let back: Value = serde_json::from_str(&s.to_line()).unwrap();
        assert_eq!(back["id"], json!("92"));
        assert_eq!(back["result"], Value::Null);
    }

    #[test]
    fn bad_input_is_classified() {
        assert_eq!(RawMessage::parse("{oops").unwrap_err().code(), -32700);
        assert_eq!(RawMessage::parse("[1]").unwrap_err().code(), -32600);
        assert_eq!(RawMessage::parse("{\"id\":1}").unwrap_err().code(), -32600);
        assert_eq!(RawMessage::parse("{\"id\":{},\"method\":\"x\"}").unwrap_err().code(), -32600);
        assert_eq!(RawMessage::parse("{\"method\":3}").unwrap_err().code(), -32600);
        assert_eq!(RawMessage::parse("").unwrap_err().code(), -32700);
    }

    #[test]
    fn built_lines_keep_payloads_byte_for_byte() {
        let result = RawValue::from_string(r#"{"x":[1.50,2e3]}"#.into()).unwrap();
        assert_eq!(
            response_line(&Id::from(3), Ok(&result)),
            r#"{"jsonrpc":"2.0","id":3,"result":{"x":[1.50,2e3]}}"#
        );
        assert_eq!(
            response_line(&Id::String("a".into()), Err(json!({"code": -1, "message": "no"}))),
            r#"{"jsonrpc":"2.0","id":"a","error":{"code":-1,"message":"no"}}"#
        );
        let line = notification_line("session/update", r#"{"v":123456789012345678901234567890}"#);
        assert_eq!(
            line,
            r#"{"jsonrpc":"2.0","method":"session/update","params":{"v":123456789012345678901234567890}}"#
        );
        assert_eq!(RawMessage::parse(&line).unwrap().kind(), RawKind::Notification);
    }

    #[test]
    fn typed_reads_are_copies() {
        let m = RawMessage::parse(r#"{"method":"session/cancel","params":{"sessionId":"s1"}}"#).unwrap();
        assert_eq!(m.kind(), RawKind::Notification);
        assert_eq!(m.session_id().as_deref(), Some("s1"));
        assert_eq!(m.to_line(), r#"{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s1"}}"#);
    }
}
