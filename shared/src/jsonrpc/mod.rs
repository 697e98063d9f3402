//! The JSON-RPC 2.0 envelope: the only code that reads or writes it. [`RawMessage`] parses and
//! classifies what arrives (payloads kept as received text); the builders here make new
//! messages, as `Value`s ([`request`], [`notification`], [`response`], [`error_response`]) or,
//! when a payload must pass byte for byte, as lines ([`response_line`], [`notification_line`]).
//! Ids are kept as the JSON value they arrived as, so the number `92` and the string `"92"`
//! never collide.

use serde_json::{Map, Value, json};
use std::fmt;

#[cfg(test)]
mod fuzz;
mod raw;
pub use raw::{ParseError, RawKind, RawMessage, notification_line, raw, response_line};

/// Invalid JSON was received.
pub const PARSE_ERROR: i64 = -32700;
/// The JSON sent is not a valid request object.
pub const INVALID_REQUEST: i64 = -32600;
/// The method does not exist.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Invalid method parameters.
pub const INVALID_PARAMS: i64 = -32602;
/// Internal error.
pub const INTERNAL_ERROR: i64 = -32603;
/// ACP: the request was cancelled (`$/cancel_request`).
pub const REQUEST_CANCELLED: i64 = -32800;
/// ACP: authentication required.
pub const AUTH_REQUIRED: i64 = -32000;
/// ACP: resource not found.
pub const RESOURCE_NOT_FOUND: i64 = -32002;

/// A request id: a JSON number or string, kept distinct (`92` ≠ `"92"`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Id {
    /// A numeric id, kept in its JSON spelling so `1` and `1.0` stay what the peer sent.
    Number(String),
    /// A string id.
    String(String),
}

impl Id {
    /// Reads an id from its JSON value; `None` for null, objects, arrays and booleans.
    pub fn from_value(v: &Value) -> Option<Id> {
        match v {
            Value::Number(n) => Some(Id::Number(n.to_string())),
            Value::String(s) => Some(Id::String(s.clone())),
            _ => None,
        }
    }

    /// The id as the JSON value to put on the wire.
    pub fn to_value(&self) -> Value {
        match self {
            Id::Number(n) => serde_json::from_str(n).unwrap_or(Value::Null),
            Id::String(s) => Value::String(s.clone()),
        }
    }
}

impl From<u64> for Id {
    fn from(n: u64) -> Id {
        Id::Number(n.to_string())
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Id::Number(n) => f.write_str(n),
            Id::String(s) => write!(f, "{s:?}"),
        }
    }
}

/// Why a line is JSON but not a JSON-RPC message.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum EnvelopeError {
    /// Not a JSON object at all.
    #[error("a JSON-RPC message must be a JSON object")]
    NotAnObject,
    /// An object with neither `method` nor `result`/`error`.
    #[error("not a JSON-RPC request, notification or response")]
    Unrecognised,
    /// `method` present but not a string.
    #[error("`method` must be a string")]
    BadMethod,
    /// An id that is neither a number nor a string.
    #[error("`id` must be a number or a string")]
    BadId,
}

/// A request envelope.
pub fn request(id: &Id, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id.to_value(), "method": method, "params": params})
}

/// A notification envelope.
pub fn notification(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

/// A success response to `id`.
pub fn response(id: &Id, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id.to_value(), "result": result})
}

/// An error response; `id` is `None` when the request's id could not be read.
pub fn error_response(id: Option<&Id>, err: &RpcError) -> Value {
    let mut e = Map::new();
    e.insert("code".into(), err.code.into());
    e.insert("message".into(), err.message.clone().into());
    if let Some(data) = &err.data {
        e.insert("data".into(), data.clone());
    }
    json!({"jsonrpc": "2.0", "id": id.map_or(Value::Null, Id::to_value), "error": e})
}

/// A JSON-RPC error object.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{message} ({code})")]
pub struct RpcError {
    /// The error code.
    pub code: i64,
    /// A message a person can read.
    pub message: String,
    /// Optional structured detail.
    pub data: Option<Value>,
}

impl RpcError {
    /// An error with a code and message.
    pub fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError { code, message: message.into(), data: None }
    }

    /// `-32602` for a missing or malformed parameter, naming it.
    pub fn invalid_params(message: impl Into<String>) -> RpcError {
        RpcError::new(INVALID_PARAMS, message)
    }

    /// `-32601` naming the method.
    pub fn method_not_found(method: &str) -> RpcError {
        RpcError::new(METHOD_NOT_FOUND, format!("method not found: {method}"))
    }

    /// `-32603` with a message.
    pub fn internal(message: impl Into<String>) -> RpcError {
        RpcError::new(INTERNAL_ERROR, message)
    }

    /// Reads the `error` member of a response, if it is well formed.
    pub fn from_response(msg: &Value) -> Option<RpcError> {
        let e = msg.get("error")?;
        Some(RpcError {
            code: e.get("code")?.as_i64()?,
            message: e.get("message").and_then(Value::as_str).unwrap_or("").to_owned(),
            data: e.get("data").cloned(),
        })
    }
}

/// Reads a required string field of a params object, or a `-32602` naming it.
pub fn required_str<'a>(params: &'a Value, field: &str) -> Result<&'a str, RpcError> {
    match params.get(field) {
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(RpcError::invalid_params(format!("`{field}` must be a string"))),
        None => Err(RpcError::invalid_params(format!("missing required field `{field}`"))),
    }
}

/// Reads a required field of any type, or a `-32602` naming it.
pub fn required<'a>(params: &'a Value, field: &str) -> Result<&'a Value, RpcError> {
    params.get(field).ok_or_else(|| RpcError::invalid_params(format!("missing required field `{field}`")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn number_and_string_ids_stay_distinct() {
        let n = Id::from_value(&json!(92)).unwrap();
        let s = Id::from_value(&json!("92")).unwrap();
        assert_ne!(n, s);
        assert_eq!(n.to_value(), json!(92));
        assert_eq!(s.to_value(), json!("92"));
    }

    #[test]
    fn error_response_keeps_null_id() {
        let e = error_response(None, &RpcError::new(PARSE_ERROR, "bad json"));
        assert_eq!(e["id"], Value::Null);
        assert_eq!(e["error"]["code"], json!(-32700));
    }

    #[test]
    fn required_fields_are_named() {
        let p = json!({"cwd": 3});
        assert!(required_str(&p, "cwd").unwrap_err().message.contains("`cwd`"));
        assert!(required(&p, "mcpServers").unwrap_err().message.contains("`mcpServers`"));
    }
}
