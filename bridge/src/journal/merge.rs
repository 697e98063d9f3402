//! Turning a stream of `session/update`s into the contract's messages: a user prompt, a merged
//! run of agent (or thought) chunks, a tool call merged with its updates, a plan's latest state;
//! and the session's latest state updates kept apart.
//!
//! Pure: the [`Merger`] of one session takes updates and says which messages to create or
//! rewrite. The journal thread turns that into SQL.

use serde_json::{Map, Value};
use std::collections::VecDeque;

/// Update kinds kept as the session's latest state rather than as messages.
pub const STATE_KINDS: [&str; 5] = [
    "available_commands_update",
    "current_mode_update",
    "config_option_update",
    "session_info_update",
    "usage_update",
];

/// Tool calls remembered per session for merging their updates.
const OPEN_TOOLS: usize = 256;

/// What one update does to the journal.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// A new message (its body follows in `body` of the merger's view).
    New {
        /// The merger's key for it (the journal maps keys to seqs).
        key: u64,
        /// Its stable id.
        msg_id: String,
        /// `user`, `agent`, `thought`, `tool`, `plan` or `other`.
        kind: &'static str,
        /// The merged `update` object.
        body: Value,
    },
    /// Message `key`'s merged body changed.
    Update {
        /// Which message.
        key: u64,
        /// The new merged body.
        body: Value,
    },
    /// The latest state update of a kind.
    State {
        /// The `sessionUpdate` kind.
        kind: String,
        /// The update object.
        body: Value,
    },
}

/// The run of chunks that a next chunk may continue.
#[derive(Debug)]
struct Run {
    key: u64,
    kind: &'static str,
    /// The agent's messageId, if it gave one.
    agent_id: Option<String>,
    body: Value,
}

/// The merging state of one session.
#[derive(Debug, Default)]
pub struct Merger {
    next_key: u64,
    run: Option<Run>,
    tools: VecDeque<(String, u64, Value)>,
    plan: Option<(u64, Value)>,
    id_prefix: String,
}

impl Merger {
    /// A merger whose generated ids start with `id_prefix` (unique per process and session).
    pub fn new(id_prefix: String) -> Merger {
        Merger { id_prefix, ..Merger::default() }
    }

    /// Keys of messages that later updates may still rewrite.
    pub fn open_keys(&self) -> Vec<u64> {
        let mut keys: Vec<u64> = self.tools.iter().map(|(_, k, _)| *k).collect();
        keys.extend(self.run.as_ref().map(|r| r.key));
        keys.extend(self.plan.as_ref().map(|(k, _)| *k));
        keys
    }

    fn key(&mut self) -> u64 {
        self.next_key += 1;
        self.next_key
    }

    fn gen_id(&mut self, what: &str) -> String {
        format!("{what}_{}_{}", self.id_prefix, self.next_key + 1)
    }

    /// Applies one update object (the `update` member of `session/update`).
    pub fn apply(&mut self, update: Value) -> Vec<Effect> {
        let Value::Object(obj) = update else { return vec![] };
        let kind = obj.get("sessionUpdate").and_then(Value::as_str).unwrap_or("").to_owned();
        if STATE_KINDS.contains(&kind.as_str()) {
            return vec![Effect::State { kind, body: Value::Object(obj) }];
        }
        match kind.as_str() {
            "user_message_chunk" => self.chunk("user", obj),
            "agent_message_chunk" => self.chunk("agent", obj),
            "agent_thought_chunk" => self.chunk("thought", obj),
            "tool_call" => self.tool_call(obj),
            "tool_call_update" => self.tool_call_update(obj),
            "plan" => self.plan(obj),
            _ => {
                self.run = None;
                let key = self.key();
                let msg_id = self.gen_id("other");
                vec![Effect::New { key, msg_id, kind: "other", body: Value::Object(obj) }]
            }
        }
    }

    fn chunk(&mut self, kind: &'static str, mut obj: Map<String, Value>) -> Vec<Effect> {
        let agent_id = obj.get("messageId").and_then(Value::as_str).map(str::to_owned);
        let text = text_of(&obj).map(str::to_owned);
        if let (Some(run), Some(text)) = (&mut self.run, &text) {
            if run.kind == kind && run.agent_id == agent_id && text_of_body(&run.body).is_some() {
                if let Some(Value::String(acc)) = run.body.pointer_mut("/content/text") {
                    acc.push_str(text);
                }
                return vec![Effect::Update { key: run.key, body: run.body.clone() }];
            }
        }
        if kind == "user" {
            // A prompt starts a turn: the previous turn's plan is final.
            self.plan = None;
        }
        let key = self.key();
        let msg_id = agent_id.clone().unwrap_or_else(|| self.gen_id(kind));
        obj.insert("messageId".into(), Value::String(msg_id.clone()));
        let body = Value::Object(obj);
        self.run = text.map(|_| Run { key, kind, agent_id, body: body.clone() });
        vec![Effect::New { key, msg_id, kind, body }]
    }

    fn tool_call(&mut self, obj: Map<String, Value>) -> Vec<Effect> {
        self.run = None;
        let key = self.key();
        let id = obj.get("toolCallId").and_then(Value::as_str).map(str::to_owned);
        let msg_id = id.clone().unwrap_or_else(|| self.gen_id("tool"));
        let body = Value::Object(obj);
        if let Some(id) = id {
            self.tools.retain(|(t, _, _)| *t != id);
            self.tools.push_back((id, key, body.clone()));
            if self.tools.len() > OPEN_TOOLS {
                self.tools.pop_front();
            }
        }
        vec![Effect::New { key, msg_id, kind: "tool", body }]
    }

    fn tool_call_update(&mut self, obj: Map<String, Value>) -> Vec<Effect> {
        let id = obj.get("toolCallId").and_then(Value::as_str).unwrap_or("").to_owned();
        if let Some((_, key, body)) = self.tools.iter_mut().find(|(t, _, _)| *t == id) {
            if let Value::Object(target) = body {
                for (k, v) in obj {
                    if k != "sessionUpdate" {
                        target.insert(k, v);
                    }
                }
            }
            return vec![Effect::Update { key: *key, body: body.clone() }];
        }
        // An update for a call we never saw (it began before this bridge): keep it as the call.
        let mut obj = obj;
        obj.insert("sessionUpdate".into(), Value::String("tool_call".into()));
        self.tool_call(obj)
    }

    fn plan(&mut self, obj: Map<String, Value>) -> Vec<Effect> {
        let body = Value::Object(obj);
        if let Some((key, current)) = &mut self.plan {
            *current = body.clone();
            return vec![Effect::Update { key: *key, body }];
        }
        self.run = None;
        let key = self.key();
        let msg_id = self.gen_id("plan");
        self.plan = Some((key, body.clone()));
        vec![Effect::New { key, msg_id, kind: "plan", body }]
    }
}

fn text_of(obj: &Map<String, Value>) -> Option<&str> {
    let c = obj.get("content")?;
    if c.get("type")? == "text" { c.get("text")?.as_str() } else { None }
}

fn text_of_body(body: &Value) -> Option<&str> {
    body.as_object().and_then(text_of)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chunk(kind: &str, text: &str, id: Option<&str>) -> Value {
        let mut v = json!({"sessionUpdate": kind, "content": {"type": "text", "text": text}});
        if let Some(id) = id {
            v["messageId"] = json!(id);
        }
        v
    }

    /// Replays effects into (msg_id, kind, final body) in message order.
    fn messages(effects: &[Effect]) -> Vec<(String, &'static str, Value)> {
        let mut out: Vec<(u64, String, &'static str, Value)> = vec![];
        for e in effects {
            match e {
                Effect::New { key, msg_id, kind, body } => {
                    out.push((*key, msg_id.clone(), kind, body.clone()))
                }
                Effect::Update { key, body } => {
                    out.iter_mut().find(|m| m.0 == *key).expect("update of a known message").3 = body.clone();
                }
                Effect::State { .. } => {}
            }
        }
        out.into_iter().map(|(_, id, k, b)| (id, k, b)).collect()
    }

    #[test]
    fn chunks_merge_by_message_id_or_uninterrupted_run() {
        let mut m = Merger::new("t".into());
        let mut fx = vec![];
        for u in [
            chunk("user_message_chunk", "hi", Some("uprompt_1")),
            chunk("agent_message_chunk", "Hel", None),
            chunk("agent_message_chunk", "lo", None),
            json!({"sessionUpdate": "usage_update", "used": 1}),
            chunk("agent_message_chunk", "!", None),
            json!({"sessionUpdate": "tool_call", "toolCallId": "c1", "status": "pending", "title": "t"}),
            chunk("agent_message_chunk", "after", None),
            json!({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "completed"}),
            chunk("agent_message_chunk", " tool", None),
            chunk("agent_message_chunk", "A", Some("m1")),
            chunk("agent_message_chunk", "B", Some("m2")),
            chunk("agent_message_chunk", "C", Some("m2")),
        ] {
            fx.extend(m.apply(u));
        }
        let msgs = messages(&fx);
        let texts: Vec<(&str, &str)> = msgs
            .iter()
            .map(|(_, k, b)| (*k, b.pointer("/content/text").and_then(Value::as_str).unwrap_or("-")))
            .collect();
        assert_eq!(
            texts,
            [
                ("user", "hi"),
                ("agent", "Hello!"),
                ("tool", "-"),
                ("agent", "after tool"),
                ("agent", "A"),
                ("agent", "BC")
            ]
        );
        assert_eq!(msgs[2].2["status"], "completed", "the tool call carries its final status");
        assert_eq!(msgs[2].2["sessionUpdate"], "tool_call");
        assert_eq!(msgs[0].0, "uprompt_1");
        assert_eq!(msgs[5].0, "m2");
        assert!(
            msgs.iter().all(|(id, _, b)| !id.is_empty()
                && (b.get("messageId").is_none() || b["messageId"] == id.as_str()))
        );
    }

    #[test]
    fn plans_keep_their_latest_state_per_turn_and_state_kinds_are_apart() {
        let mut m = Merger::new("t".into());
        let mut fx = vec![];
        fx.extend(m.apply(chunk("user_message_chunk", "q1", None)));
        fx.extend(m.apply(json!({"sessionUpdate": "plan", "entries": [1]})));
        fx.extend(m.apply(json!({"sessionUpdate": "plan", "entries": [1, 2]})));
        fx.extend(m.apply(chunk("user_message_chunk", "q2", None)));
        fx.extend(m.apply(json!({"sessionUpdate": "plan", "entries": [3]})));
        fx.extend(m.apply(json!({"sessionUpdate": "session_info_update", "title": "T"})));
        fx.extend(m.apply(json!({"sessionUpdate": "zz_unknown", "x": 1})));
        let msgs = messages(&fx);
        let kinds: Vec<&str> = msgs.iter().map(|m| m.1).collect();
        assert_eq!(kinds, ["user", "plan", "user", "plan", "other"]);
        assert_eq!(msgs[1].2["entries"], json!([1, 2]));
        assert_eq!(msgs[3].2["entries"], json!([3]));
        assert!(fx.iter().any(|e| matches!(e, Effect::State { kind, .. } if kind == "session_info_update")));
    }

    #[test]
    fn non_text_chunks_are_messages_of_their_own() {
        let mut m = Merger::new("t".into());
        let mut fx = m.apply(chunk("agent_message_chunk", "a", None));
        fx.extend(m.apply(
            json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "image", "data": "x"}}),
        ));
        fx.extend(m.apply(chunk("agent_message_chunk", "b", None)));
        assert_eq!(messages(&fx).len(), 3);
    }
}
