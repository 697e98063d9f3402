//! Resume by number: every session-scoped message a remote client gets carries
//! `_meta.zcode.seq` (per session, from 1, up by one) and `_meta.zcode.epoch` (which numbering).
//! A message is numbered once, when it is sent (to nobody, to the editor, to remotes alike);
//! its remote form (the original with `_meta.zcode` spliced into `params`) is what remotes get
//! live and what the session's backlog holds for a `session/load` with `_meta.zcode.afterSeq`.
//! The editor always gets the original bytes.

use bytes::Bytes;
use serde_json::Value;
use serde_json::value::RawValue;
use std::collections::VecDeque;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use zcode_shared::jsonrpc::{RawMessage, RpcError};

/// Messages a session's backlog holds at most (the oldest go first).
const HOLD_MESSAGES: usize = 8192;
/// Bytes (remote forms) a session's backlog holds at most (the oldest go first).
const HOLD_BYTES: usize = 4 * 1024 * 1024;

/// One numbered message.
struct Entry {
    seq: u64,
    /// The remote form.
    line: Bytes,
    /// The agent request it is (its key), re-sent on resume only while still pending.
    request: Option<u64>,
}

/// A session's numbering and the last messages in their remote form.
pub struct Backlog {
    epoch: String,
    last: u64,
    ring: VecDeque<Entry>,
    bytes: usize,
    max_messages: usize,
}

/// What a `session/load` asked to resume from: `_meta.zcode.afterSeq` and `.epoch`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resume {
    /// The last number the client has.
    pub after: u64,
    /// The numbering it is from.
    pub epoch: String,
}

/// Why a resume fell back to the tail replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fallback {
    /// Another numbering (the bridge restarted, or the session was dropped and reloaded).
    Epoch,
    /// The messages after the client's number are no longer held (or it is ahead of ours).
    Gap,
}

impl Fallback {
    /// The contract's `reason`.
    pub fn reason(self) -> &'static str {
        match self {
            Fallback::Epoch => "epoch",
            Fallback::Gap => "gap",
        }
    }
}

/// Reads `_meta.zcode.afterSeq` / `.epoch` of a `session/load` (`None`: a plain load).
pub fn resume_of(params: &Value) -> Result<Option<Resume>, RpcError> {
    let z = params.pointer("/_meta/zcode");
    let after = z.and_then(|z| z.get("afterSeq")).filter(|v| !v.is_null());
    let Some(after) = after else { return Ok(None) };
    let Some(after) = after.as_u64() else {
        return Err(RpcError::invalid_params(format!(
            "`_meta.zcode.afterSeq` must be a non-negative integer (the last `_meta.zcode.seq` you have), got {after}"
        )));
    };
    let Some(epoch) = z.and_then(|z| z["epoch"].as_str()) else {
        return Err(RpcError::invalid_params(
            "`_meta.zcode.afterSeq` needs `_meta.zcode.epoch` (a string: the `epoch` your numbers are from)",
        ));
    };
    Ok(Some(Resume { after, epoch: epoch.to_owned() }))
}

/// A numbering no other session of any bridge process shares: the process's start and id,
/// and a counter (a session dropped and loaded again starts a new numbering).
fn new_epoch() -> String {
    static BOOT: OnceLock<String> = OnceLock::new();
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let boot = BOOT.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        format!("{}{}", base36(nanos), base36(u64::from(std::process::id())))
    });
    format!("{boot}.{}", base36(COUNT.fetch_add(1, Ordering::Relaxed)))
}

fn base36(mut n: u64) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

impl Default for Backlog {
    fn default() -> Backlog {
        Backlog::new()
    }
}

impl Backlog {
    /// A new numbering, nothing held.
    pub fn new() -> Backlog {
        // A test makes the backlog small to reach the "gap" fallback.
        let max_messages =
            zcode_shared::env::test_knob(&zcode_shared::env::ProcessEnv, "ZCODE_ACP_TEST_BACKLOG")
                .and_then(|v| v.parse().ok())
                .unwrap_or(HOLD_MESSAGES);
        Backlog { epoch: new_epoch(), last: 0, ring: VecDeque::new(), bytes: 0, max_messages }
    }

    /// This numbering's name.
    pub fn epoch(&self) -> &str {
        &self.epoch
    }

    /// The last number given (0: none yet).
    pub fn last(&self) -> u64 {
        self.last
    }

    /// Numbers `line` (the original, as the editor gets it) and holds its remote form, which
    /// it returns. `request`: the agent request's key, when it is one.
    pub fn number(&mut self, line: &[u8], request: Option<u64>) -> Bytes {
        self.last += 1;
        let remote = Bytes::from(numbered(line, self.last, &self.epoch));
        self.bytes += remote.len();
        self.ring.push_back(Entry { seq: self.last, line: remote.clone(), request });
        while self.ring.len() > self.max_messages || (self.bytes > HOLD_BYTES && self.ring.len() > 1) {
            if let Some(e) = self.ring.pop_front() {
                self.bytes -= e.line.len();
            }
        }
        remote
    }

    /// The messages numbered after `r.after`, oldest first (with the request key of those
    /// that are agent requests), or why they cannot be given.
    pub fn after(&self, r: &Resume) -> Result<Vec<(Bytes, Option<u64>)>, Fallback> {
        if r.epoch != self.epoch {
            return Err(Fallback::Epoch);
        }
        let first = self.ring.front().map_or(self.last + 1, |e| e.seq);
        if r.after + 1 < first || r.after > self.last {
            return Err(Fallback::Gap);
        }
        let skip = (r.after + 1 - first) as usize;
        Ok(self.ring.iter().skip(skip).map(|e| (e.line.clone(), e.request)).collect())
    }
}

/// `line` with `_meta.zcode.seq` and `.epoch` in its `params`. Spliced in front of the other
/// fields when `params` has no `_meta` (the common case: no re-encoding); merged otherwise.
pub fn numbered(line: &[u8], seq: u64, epoch: &str) -> String {
    let Ok(text) = std::str::from_utf8(line) else { return String::from_utf8_lossy(line).into_owned() };
    let text = text.trim_end();
    // The common case without a parse: `params` is an object and nothing in the line is a
    // `_meta` key. A `,"params":{` cannot occur inside a JSON string (its quote would be
    // escaped), and the members written before `params` (`jsonrpc`, `id`, `method`) are
    // scalars, so the first one is the envelope's. Three parses per message cost ~30 % of the
    // bridge's CPU per fanned-out update (`scripts/bench-bridge`, 2026-12-03).
    const PARAMS: &str = ",\"params\":{";
    if let Some(at) = text.find(PARAMS).filter(|_| text.starts_with('{') && !text.contains("\"_meta\"")) {
        let (head, rest) = text.split_at(at + PARAMS.len());
        let sep = if rest.trim_start().starts_with('}') { "" } else { "," };
        let epoch = Value::from(epoch);
        return format!(r#"{head}"_meta":{{"zcode":{{"seq":{seq},"epoch":{epoch}}}}}{sep}{rest}"#);
    }
    numbered_parsed(text, seq, epoch)
}

/// [`numbered`] by parsing: for a line with a `_meta` to merge into, or an unusual shape.
fn numbered_parsed(text: &str, seq: u64, epoch: &str) -> String {
    let Ok(msg) = RawMessage::parse(text) else { return text.to_owned() };
    let zcode = format!(r#"{{"seq":{seq},"epoch":{}}}"#, Value::from(epoch));
    let params = msg.params.as_deref().map_or("{}", RawValue::get);
    #[derive(serde::Deserialize)]
    struct Top<'a> {
        #[serde(rename = "_meta", borrow, default)]
        meta: Option<&'a RawValue>,
    }
    let spliced = match serde_json::from_str::<Top<'_>>(params) {
        Ok(Top { meta: None }) if params.starts_with('{') => {
            let rest = &params[1..];
            let sep = if rest.trim_start().starts_with('}') { "" } else { "," };
            format!(r#"{{"_meta":{{"zcode":{zcode}}}{sep}{rest}"#)
        }
        Ok(_) => {
            let mut p: Value = serde_json::from_str(params).unwrap_or_default();
            if !p["_meta"].is_object() {
                p["_meta"] = serde_json::json!({});
            }
            if !p["_meta"]["zcode"].is_object() {
                p["_meta"]["zcode"] = serde_json::json!({});
            }
            p["_meta"]["zcode"]["seq"] = Value::from(seq);
            p["_meta"]["zcode"]["epoch"] = Value::from(epoch);
            p.to_string()
        }
        // Params that are not an object (not an ACP session message): left as they are.
        Err(_) => return text.to_owned(),
    };
    let Ok(params) = RawValue::from_string(spliced) else { return text.to_owned() };
    RawMessage { params: Some(params), ..msg }.to_line()
}

/// The `replayMeta` fields of numbering: `epoch` and `lastSeq`.
pub fn meta(b: &Backlog) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    m.insert("epoch".into(), Value::from(b.epoch()));
    m.insert("lastSeq".into(), Value::from(b.last()));
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn params(line: &str) -> Value {
        serde_json::from_str::<Value>(line).unwrap()["params"].clone()
    }

    #[test]
    fn the_unparsed_splice_gives_the_bytes_the_parsed_one_gives() {
        let lines = [
            r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"x":1.50}}}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"session/request_permission","params":{"a":{"b":[1,{"c":"}"}]}}}"#,
            r#"{"jsonrpc":"2.0","id":"x\",\"params\":{","method":"m","params":{"t":"é \" ,\"params\":{"}}"#,
            r#"{"jsonrpc":"2.0","method":"m","params":{}}"#,
            r#"{"jsonrpc":"2.0","method":"m","params":{ }}"#,
        ];
        for line in lines {
            let fast = numbered(line.as_bytes(), 3, "e.9");
            assert_eq!(fast, numbered_parsed(line, 3, "e.9"), "{line}");
            assert_eq!(params(&fast)["_meta"]["zcode"], json!({"seq": 3, "epoch": "e.9"}), "{fast}");
        }
        // A `_meta` already there is merged, by the parse.
        let line = r#"{"jsonrpc":"2.0","method":"m","params":{"_meta":{"k":1},"v":2}}"#;
        let p = params(&numbered(line.as_bytes(), 4, "e"));
        assert_eq!((p["_meta"]["k"].clone(), p["_meta"]["zcode"]["seq"].clone()), (json!(1), json!(4)));
    }

    #[test]
    fn numbers_are_spliced_into_params() {
        let line =
            r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"x":1.50}}}"#;
        let out = numbered(line.as_bytes(), 7, "e.1");
        let p = params(&out);
        assert_eq!(p["_meta"]["zcode"], json!({"seq": 7, "epoch": "e.1"}));
        assert_eq!(p["sessionId"], "s");
        // The rest of params is kept byte for byte (no re-encoding).
        assert!(out.contains(r#""update":{"x":1.50}"#), "{out}");
        let existing = r#"{"jsonrpc":"2.0","id":3,"method":"session/request_permission","params":{"_meta":{"a":1,"zcode":{"b":2}},"sessionId":"s"}}"#;
        let p = params(&numbered(existing.as_bytes(), 1, "e"));
        assert_eq!(p["_meta"], json!({"a": 1, "zcode": {"b": 2, "seq": 1, "epoch": "e"}}));
        let v: Value = serde_json::from_str(&numbered(existing.as_bytes(), 1, "e")).unwrap();
        assert_eq!(v["id"], 3);
        let empty = r#"{"jsonrpc":"2.0","method":"x","params":{}}"#;
        assert_eq!(params(&numbered(empty.as_bytes(), 2, "e"))["_meta"]["zcode"]["seq"], 2);
    }

    #[test]
    fn resume_gives_what_follows_or_says_why_not() {
        let mut b = Backlog::new();
        b.max_messages = 3;
        for i in 0..5 {
            b.number(format!(r#"{{"jsonrpc":"2.0","method":"m","params":{{"i":{i}}}}}"#).as_bytes(), None);
        }
        let epoch = b.epoch().to_owned();
        let at = |after| b.after(&Resume { after, epoch: epoch.clone() }).map(|v| v.len());
        assert_eq!(at(5), Ok(0));
        assert_eq!(at(2), Ok(3));
        assert_eq!(at(1), Err(Fallback::Gap), "message 2 is no longer held");
        assert_eq!(at(6), Err(Fallback::Gap), "ahead of the numbering");
        assert_eq!(b.after(&Resume { after: 5, epoch: "other".into() }), Err(Fallback::Epoch));
        assert_ne!(Backlog::new().epoch(), b.epoch());
    }

    #[test]
    fn resume_asks_are_validated() {
        assert_eq!(resume_of(&json!({})).unwrap(), None);
        let ok = json!({"_meta": {"zcode": {"afterSeq": 4, "epoch": "e"}}});
        assert_eq!(resume_of(&ok).unwrap(), Some(Resume { after: 4, epoch: "e".into() }));
        assert!(resume_of(&json!({"_meta": {"zcode": {"afterSeq": -1, "epoch": "e"}}})).is_err());
        assert!(resume_of(&json!({"_meta": {"zcode": {"afterSeq": 4}}})).is_err());
    }
}
