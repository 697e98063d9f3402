//! What the router shows the usage recorder, and what it makes of it: per session the model
//! in use and the tool calls of the running turn; a `usage_update` becomes a context record,
//! a `session/prompt` answer's `usage` a turn record.
//!
//! The prompt answer's `usage` is read as the turn's own counts, in the draft's camelCase
//! (`totalTokens`, `inputTokens`, `outputTokens`, `thoughtTokens`, `cachedReadTokens`,
//! `cachedWriteTokens`) or the first RFD's snake_case (`reasoning_tokens`, …). A missing total
//! is input + output + thought. Each count is capped at 10^12, so no agent can overflow the
//! store's sums.

use super::Recorder;
use serde_json::Value;
use std::collections::HashMap;
use zcode_shared::jsonrpc::RawMessage;
use zcode_shared::store::usage::{ContextUsage, TurnUsage};

/// The model of a session the agent never named.
pub const UNKNOWN_MODEL: &str = "unknown";

/// The most a single count may be (a trillion tokens in one turn is not real).
const MAX_COUNT: u64 = 1_000_000_000_000;

/// Requests whose answers are awaited, at most (an agent that dies leaves some unanswered).
const MAX_AWAITED: usize = 1024;

#[derive(Default)]
struct Seen {
    model: Option<String>,
    tool_calls: u64,
}

/// Per-session usage state of one bridge (owned by the router).
pub struct Tracker {
    recorder: Recorder,
    sessions: HashMap<String, Seen>,
    /// Model switches in flight: bridge request id → (session, the `modelId` a `set_model` asked).
    awaited: HashMap<u64, (String, Option<String>)>,
}

impl Tracker {
    /// A tracker recording through `recorder`.
    pub fn new(recorder: Recorder) -> Tracker {
        Tracker { recorder, sessions: HashMap::new(), awaited: HashMap::new() }
    }

    /// The model a session is on, as far as the agent said.
    pub fn model(&self, session: &str) -> &str {
        self.sessions.get(session).and_then(|s| s.model.as_deref()).unwrap_or(UNKNOWN_MODEL)
    }

    /// A client request the router sent upstream under bridge id `id`.
    pub fn sent(&mut self, id: u64, msg: &RawMessage) {
        let method = msg.method();
        if method != "session/set_config_option" && method != "session/set_model" {
            return;
        }
        let Some(sid) = msg.session_id() else { return };
        if self.awaited.len() >= MAX_AWAITED {
            self.awaited.clear();
        }
        let asked = (method == "session/set_model")
            .then(|| msg.params_value()["modelId"].as_str().map(clean))
            .flatten();
        self.awaited.insert(id, (sid, asked));
    }

    /// The agent's answer to bridge request `id`: `session` is the session it concerns when the
    /// router knows it (a load, a prompt), `prompt` whether it ends a turn.
    pub fn answered(&mut self, id: u64, session: Option<&str>, prompt: bool, msg: &RawMessage) {
        let awaited = self.awaited.remove(&id);
        let result = msg.result_as::<Value>().filter(|_| msg.error.is_none());
        let session = session
            .map(str::to_owned)
            .or_else(|| awaited.as_ref().map(|(s, _)| s.clone()))
            .or_else(|| result.as_ref().and_then(|r| r["sessionId"].as_str().map(str::to_owned)));
        let Some(session) = session else { return };
        let seen = self.sessions.entry(session.clone()).or_default();
        let Some(result) = result else {
            if prompt {
                seen.tool_calls = 0;
            }
            return;
        };
        if let Some(model) = model_of(&result).or_else(|| awaited.and_then(|(_, asked)| asked)) {
            seen.model = Some(model);
        }
        if prompt {
            let tool_calls = std::mem::take(&mut seen.tool_calls);
            if let Some(mut u) = turn_usage(&result["usage"]) {
                u.session = session;
                u.model = seen.model.clone().unwrap_or_else(|| UNKNOWN_MODEL.to_owned());
                u.tool_calls = tool_calls;
                self.recorder.turn(u);
            }
        }
    }

    /// A live `session/update` of `session` (`running`: a turn is in flight).
    pub fn update(&mut self, session: &str, msg: &RawMessage, running: bool) {
        // Cheap test first: this runs for every streamed chunk.
        let text = msg.params.as_ref().map_or("", |p| p.get());
        if !(text.contains("usage_update")
            || text.contains("config_option_update")
            || text.contains("\"tool_call\""))
        {
            return;
        }
        let params = msg.params_value();
        let update = &params["update"];
        let seen = self.sessions.entry(session.to_owned()).or_default();
        match update["sessionUpdate"].as_str() {
            Some("tool_call") => seen.tool_calls += 1,
            Some("config_option_update") => {
                if let Some(model) = model_of(update) {
                    seen.model = Some(model);
                }
            }
            Some("usage_update") => {
                let cost = update["cost"]["amount"]
                    .as_f64()
                    .filter(|a| a.is_finite() && *a >= 0.0)
                    .map(|a| (a.min(1e12), currency(&update["cost"]["currency"])));
                self.recorder.context(ContextUsage {
                    at: 0,
                    session: session.to_owned(),
                    model: seen.model.clone().unwrap_or_else(|| UNKNOWN_MODEL.to_owned()),
                    running,
                    used: count(&update["used"]),
                    size: count(&update["size"]),
                    cost,
                });
            }
            _ => {}
        }
    }
}

/// The current model named by an answer or a `config_option_update`: the `currentValue` of
/// the config option of category `model`, else the `models` state's `currentModelId`.
fn model_of(v: &Value) -> Option<String> {
    let from_options = v["configOptions"].as_array().and_then(|opts| {
        opts.iter().find(|o| o["category"] == "model").and_then(|o| o["currentValue"].as_str())
    });
    from_options.or_else(|| v["models"]["currentModelId"].as_str()).map(clean).filter(|m| !m.is_empty())
}

/// A model id as shown and stored: control characters out, at most 128 characters.
fn clean(s: &str) -> String {
    zcode_shared::text::strip_controls(s).trim().chars().take(128).collect()
}

/// An ISO 4217 code, or `?` for anything else.
fn currency(v: &Value) -> String {
    match v.as_str() {
        Some(c) if (1..=8).contains(&c.len()) && c.bytes().all(|b| b.is_ascii_alphanumeric()) => {
            c.to_ascii_uppercase()
        }
        _ => "?".to_owned(),
    }
}

/// A token count: a non-negative number (fractions dropped), capped.
fn count(v: &Value) -> Option<u64> {
    let n = v.as_u64().or_else(|| v.as_f64().filter(|f| f.is_finite() && *f >= 0.0).map(|f| f as u64))?;
    Some(n.min(MAX_COUNT))
}

/// The first of `names` present as a count.
fn field(usage: &Value, names: &[&str]) -> Option<u64> {
    names.iter().find_map(|n| count(&usage[*n]))
}

/// A prompt answer's `usage`, or `None` when it reports no tokens.
fn turn_usage(usage: &Value) -> Option<TurnUsage> {
    if !usage.is_object() {
        return None;
    }
    let input = field(usage, &["inputTokens", "input_tokens"]);
    let output = field(usage, &["outputTokens", "output_tokens"]);
    let reasoning = field(usage, &["thoughtTokens", "thought_tokens", "reasoningTokens", "reasoning_tokens"]);
    let total = field(usage, &["totalTokens", "total_tokens"]);
    if input.is_none() && output.is_none() && total.is_none() {
        return None;
    }
    let (input, output, reasoning) = (input.unwrap_or(0), output.unwrap_or(0), reasoning.unwrap_or(0));
    Some(TurnUsage {
        input,
        output,
        reasoning,
        cache_read: field(usage, &["cachedReadTokens", "cached_read_tokens"]).unwrap_or(0),
        cache_write: field(usage, &["cachedWriteTokens", "cached_write_tokens"]).unwrap_or(0),
        total: total.unwrap_or(input + output + reasoning),
        ..TurnUsage::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn usage_in_either_spelling() {
        let u = turn_usage(&json!({"totalTokens": 53, "inputTokens": 35, "outputTokens": 12,
            "thoughtTokens": 5, "cachedReadTokens": 4, "cachedWriteTokens": 1}))
        .unwrap();
        assert_eq!(
            (u.total, u.input, u.output, u.reasoning, u.cache_read, u.cache_write),
            (53, 35, 12, 5, 4, 1)
        );
        let u = turn_usage(&json!({"input_tokens": 10, "output_tokens": 2, "reasoning_tokens": 3})).unwrap();
        assert_eq!((u.total, u.reasoning), (15, 3), "a missing total is input + output + thought");
        assert!(turn_usage(&json!({})).is_none());
        assert!(turn_usage(&json!("lots")).is_none());
        assert!(turn_usage(&Value::Null).is_none());
        let huge =
            turn_usage(&json!({"inputTokens": u64::MAX, "outputTokens": -5, "totalTokens": 1e300})).unwrap();
        assert_eq!((huge.input, huge.output, huge.total), (MAX_COUNT, 0, MAX_COUNT));
    }

    #[test]
    fn models_from_config_options_or_model_state() {
        let opts = json!({"configOptions": [
            {"id": "mode", "category": "mode", "currentValue": "ask"},
            {"id": "model", "category": "model", "currentValue": "glm-5\u{1b}[2J"}]});
        assert_eq!(model_of(&opts).as_deref(), Some("glm-5"), "control sequences are dropped");
        let state = json!({"models": {"currentModelId": "sonnet", "availableModels": []}});
        assert_eq!(model_of(&state).as_deref(), Some("sonnet"));
        assert_eq!(model_of(&json!({"configOptions": [{"category": "mode", "currentValue": "x"}]})), None);
        assert_eq!(currency(&json!("usd")), "USD");
        assert_eq!(currency(&json!("<script>")), "?");
    }

    fn answer(id: u64, result: Value) -> RawMessage {
        RawMessage::parse(
            &zcode_shared::jsonrpc::response(&zcode_shared::jsonrpc::Id::from(id), result).to_string(),
        )
        .unwrap()
    }

    #[test]
    fn a_model_nobody_named_is_unknown_and_a_refused_switch_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let recorder = Recorder::start(dir.path().to_owned(), std::time::Duration::ZERO);
        let mut t = Tracker::new(recorder.clone());
        t.answered(1, None, false, &answer(1, json!({"sessionId": "s"})));
        assert_eq!(t.model("s"), UNKNOWN_MODEL);
        t.answered(
            2,
            Some("s"),
            true,
            &answer(2, json!({"stopReason": "end_turn", "usage": {"totalTokens": 7}})),
        );
        let set = RawMessage::parse(
            &zcode_shared::jsonrpc::request(
                &zcode_shared::jsonrpc::Id::from(3),
                "session/set_model",
                json!({"sessionId": "s", "modelId": "m2"}),
            )
            .to_string(),
        )
        .unwrap();
        t.sent(3, &set);
        let refused = RawMessage::parse(
            &zcode_shared::jsonrpc::error_response(
                Some(&zcode_shared::jsonrpc::Id::from(3)),
                &zcode_shared::jsonrpc::RpcError::invalid_params("no such model"),
            )
            .to_string(),
        )
        .unwrap();
        t.answered(3, None, false, &refused);
        assert_eq!(t.model("s"), UNKNOWN_MODEL, "a refused switch changes nothing");
        t.sent(4, &set);
        t.answered(4, None, false, &answer(4, json!({})));
        assert_eq!(t.model("s"), "m2", "an accepted set_model names the model asked for");
        recorder.flush();
        let st = zcode_shared::store::Store::open_in(dir.path()).unwrap();
        let r = st
            .usage_report(zcode_shared::store::usage::UsageRange::All, zcode_shared::time::now_ms())
            .unwrap();
        assert_eq!(r["models"][0]["modelId"], UNKNOWN_MODEL);
        assert_eq!(r["models"][0]["totalTokens"], 7);
    }
}
