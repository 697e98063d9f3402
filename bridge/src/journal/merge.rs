//! Turning a stream of `session/update`s into the contract's messages: a user prompt, a merged
//! run of agent (or thought) chunks, a tool call merged with its updates, a plan's latest state;
//! and the session's latest state updates kept apart.
//!
//! Pure: the [`Merger`] of one session takes updates as the raw text received and says which
//! messages to create or rewrite, with their bodies as JSON text. What it does not merge it
//! keeps byte for byte; what it merges it edits member by member ([`zcode_shared::ordered::Ordered`]), so every
//! value it does not itself produce comes back as sent (docs/ARCHITECTURE.md, "Replay equals
//! the live stream").

use std::collections::VecDeque;
use zcode_shared::ordered::{Ordered, raw, string_body};

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
    /// A new message.
    New {
        /// The merger's key for it (the journal maps keys to seqs).
        key: u64,
        /// Its stable id.
        msg_id: String,
        /// `user`, `agent`, `thought`, `tool`, `plan` or `other`.
        kind: &'static str,
        /// The merged `update` object, JSON text.
        body: String,
    },
    /// Message `key`'s merged body changed.
    Update {
        /// Which message.
        key: u64,
        /// The new merged body, JSON text.
        body: String,
    },
    /// The latest state update of a kind.
    State {
        /// The `sessionUpdate` kind.
        kind: String,
        /// The update object exactly as received.
        body: String,
    },
}

/// The run of text chunks that a next chunk may continue.
#[derive(Debug)]
struct Run {
    key: u64,
    kind: &'static str,
    /// The agent's messageId, if it gave one.
    agent_id: Option<String>,
    /// The first chunk, `messageId` added if it had none.
    head: Ordered,
    /// Its `content` block.
    content: Ordered,
    /// The joined texts, escapes as received (between the quotes).
    text: String,
    /// The first chunk with an empty text: a chunk continues the run only if it is the same
    /// but for its text, so merging drops no member of any chunk.
    shape: String,
}

impl Run {
    fn body(&self) -> String {
        let mut content = self.content.clone();
        content.set_raw("text", raw(format!("\"{}\"", self.text)));
        let mut head = self.head.clone();
        head.set_raw("content", raw(content.compact()));
        head.compact()
    }
}

/// A chunk's shape: the chunk with its content's text emptied, compact.
fn shape(obj: &Ordered, content: &Ordered) -> String {
    let mut content = content.clone();
    content.set_raw("text", raw("\"\"".into()));
    let mut obj = obj.clone();
    obj.set_raw("content", raw(content.compact()));
    obj.compact()
}

/// The merging state of one session.
#[derive(Debug, Default)]
pub struct Merger {
    next_key: u64,
    run: Option<Run>,
    tools: VecDeque<(String, u64, Ordered)>,
    plan: Option<u64>,
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
        keys.extend(self.plan);
        keys
    }

    fn key(&mut self) -> u64 {
        self.next_key += 1;
        self.next_key
    }

    fn gen_id(&mut self, what: &str) -> String {
        format!("{what}_{}_{}", self.id_prefix, self.next_key + 1)
    }

    /// Applies one update object (the `update` member of `session/update`, as received).
    pub fn apply(&mut self, update: &str) -> Vec<Effect> {
        let Ok(obj) = Ordered::parse(update) else { return vec![] };
        let kind = obj.str("sessionUpdate").unwrap_or_default();
        if STATE_KINDS.contains(&kind.as_str()) {
            return vec![Effect::State { kind, body: update.to_owned() }];
        }
        match kind.as_str() {
            "user_message_chunk" => self.chunk("user", update, obj),
            "agent_message_chunk" => self.chunk("agent", update, obj),
            "agent_thought_chunk" => self.chunk("thought", update, obj),
            "tool_call" => self.tool_call(update.to_owned(), obj),
            "tool_call_update" => self.tool_call_update(obj),
            "plan" => self.plan(update),
            _ => {
                self.run = None;
                let key = self.key();
                let msg_id = self.gen_id("other");
                vec![Effect::New { key, msg_id, kind: "other", body: update.to_owned() }]
            }
        }
    }

    fn chunk(&mut self, kind: &'static str, update: &str, mut obj: Ordered) -> Vec<Effect> {
        let agent_id = obj.str("messageId");
        let content = text_content(&obj);
        let text = content.as_ref().and_then(|c| c.get("text")).and_then(string_body).map(str::to_owned);
        if let (Some(run), Some(content), Some(text)) = (&mut self.run, &content, &text) {
            if run.kind == kind && run.agent_id == agent_id && run.shape == shape(&obj, content) {
                run.text.push_str(text);
                return vec![Effect::Update { key: run.key, body: run.body() }];
            }
        }
        if kind == "user" {
            // A prompt starts a turn: the previous turn's plan is final.
            self.plan = None;
        }
        let key = self.key();
        let msg_id = agent_id.clone().unwrap_or_else(|| self.gen_id(kind));
        // The shape is taken before a generated messageId is added: later chunks have none.
        let run_shape = content.as_ref().map(|c| shape(&obj, c)).unwrap_or_default();
        let body = if agent_id.is_some() {
            update.to_owned()
        } else {
            obj.set_raw("messageId", raw(serde_json::Value::from(msg_id.as_str()).to_string()));
            obj.compact()
        };
        self.run = match (content, text) {
            (Some(content), Some(text)) => {
                Some(Run { key, kind, agent_id, head: obj, content, text, shape: run_shape })
            }
            _ => None,
        };
        vec![Effect::New { key, msg_id, kind, body }]
    }

    fn tool_call(&mut self, body: String, obj: Ordered) -> Vec<Effect> {
        self.run = None;
        let key = self.key();
        let id = obj.str("toolCallId");
        let msg_id = id.clone().unwrap_or_else(|| self.gen_id("tool"));
        if let Some(id) = id {
            self.tools.retain(|(t, _, _)| *t != id);
            self.tools.push_back((id, key, obj));
            if self.tools.len() > OPEN_TOOLS {
                self.tools.pop_front();
            }
        }
        vec![Effect::New { key, msg_id, kind: "tool", body }]
    }

    fn tool_call_update(&mut self, obj: Ordered) -> Vec<Effect> {
        let id = obj.str("toolCallId").unwrap_or_default();
        if let Some((_, key, call)) = self.tools.iter_mut().find(|(t, _, _)| *t == id) {
            call.overlay(&obj, "sessionUpdate");
            return vec![Effect::Update { key: *key, body: call.compact() }];
        }
        // An update for a call we never saw (it began before this bridge): keep it as the call.
        let mut obj = obj;
        obj.set_raw("sessionUpdate", raw("\"tool_call\"".into()));
        self.tool_call(obj.compact(), obj)
    }

    fn plan(&mut self, update: &str) -> Vec<Effect> {
        let body = update.to_owned();
        if let Some(key) = self.plan {
            return vec![Effect::Update { key, body }];
        }
        self.run = None;
        let key = self.key();
        let msg_id = self.gen_id("plan");
        self.plan = Some(key);
        vec![Effect::New { key, msg_id, kind: "plan", body }]
    }
}

/// The chunk's `content` if it is a text block.
fn text_content(obj: &Ordered) -> Option<Ordered> {
    let c = Ordered::parse(obj.get("content")?.get()).ok()?;
    (c.str("type").as_deref() == Some("text")).then_some(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

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
                    out.push((*key, msg_id.clone(), kind, serde_json::from_str(body).unwrap()))
                }
                Effect::Update { key, body } => {
                    out.iter_mut().find(|m| m.0 == *key).expect("update of a known message").3 =
                        serde_json::from_str(body).unwrap();
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
            fx.extend(m.apply(&u.to_string()));
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
        fx.extend(m.apply(&chunk("user_message_chunk", "q1", None).to_string()));
        fx.extend(m.apply(&json!({"sessionUpdate": "plan", "entries": [1]}).to_string()));
        fx.extend(m.apply(&json!({"sessionUpdate": "plan", "entries": [1, 2]}).to_string()));
        fx.extend(m.apply(&chunk("user_message_chunk", "q2", None).to_string()));
        fx.extend(m.apply(&json!({"sessionUpdate": "plan", "entries": [3]}).to_string()));
        fx.extend(m.apply(&json!({"sessionUpdate": "session_info_update", "title": "T"}).to_string()));
        fx.extend(m.apply(&json!({"sessionUpdate": "zz_unknown", "x": 1}).to_string()));
        let msgs = messages(&fx);
        let kinds: Vec<&str> = msgs.iter().map(|m| m.1).collect();
        assert_eq!(kinds, ["user", "plan", "user", "plan", "other"]);
        assert_eq!(msgs[1].2["entries"], json!([1, 2]));
        assert_eq!(msgs[3].2["entries"], json!([3]));
        assert!(fx.iter().any(|e| matches!(e, Effect::State { kind, .. } if kind == "session_info_update")));
    }

    #[test]
    fn chunks_merge_only_when_alike_but_for_their_text_and_keep_escapes() {
        let mut m = Merger::new("t".into());
        let a = r#"{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"caf\u00e9"},"_meta":{"n":1.50}}"#;
        let b = r#"{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":" \""},"_meta":{"n":1.5}}"#;
        let c = r#"{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"\ud83d\ude00"},"_meta":{"n":1.5}}"#;
        let mut fx = m.apply(a);
        fx.extend(m.apply(b));
        fx.extend(m.apply(c));
        let news: Vec<&Effect> = fx.iter().filter(|e| matches!(e, Effect::New { .. })).collect();
        assert_eq!(news.len(), 2, "a chunk whose _meta differs (as sent) starts a message: {fx:#?}");
        let Some(Effect::Update { body, .. }) = fx.last() else { panic!("{fx:#?}") };
        assert!(
            body.starts_with(
                r#"{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":" \"\ud83d\ude00"},"_meta":{"n":1.5},"messageId":""#
            ),
            "{body}"
        );
        let Effect::New { body, .. } = news[0] else { unreachable!() };
        assert!(body.contains(r#""text":"caf\u00e9"},"_meta":{"n":1.50}"#), "{body}");
    }

    #[test]
    fn tool_call_updates_replace_members_in_place_values_as_sent() {
        let mut m = Merger::new("t".into());
        m.apply(r#"{"sessionUpdate":"tool_call","toolCallId":"c","status":"pending","rawInput":{"n":2e3}}"#);
        let fx = m.apply(
            r#"{"sessionUpdate":"tool_call_update","toolCallId":"c","status":"completed","_meta":{"big":123456789012345678901234567890}}"#,
        );
        let [Effect::Update { body, .. }] = &fx[..] else { panic!("{fx:#?}") };
        assert_eq!(
            body,
            r#"{"sessionUpdate":"tool_call","toolCallId":"c","status":"completed","rawInput":{"n":2e3},"_meta":{"big":123456789012345678901234567890}}"#
        );
        // An update for a call never seen becomes the call.
        let fx = m.apply(r#"{"sessionUpdate":"tool_call_update","toolCallId":"d","x":-0.0}"#);
        let [Effect::New { body, kind: "tool", .. }] = &fx[..] else { panic!("{fx:#?}") };
        assert_eq!(body, r#"{"sessionUpdate":"tool_call","toolCallId":"d","x":-0.0}"#);
    }

    #[test]
    fn non_text_chunks_are_messages_of_their_own() {
        let mut m = Merger::new("t".into());
        let mut fx = m.apply(&chunk("agent_message_chunk", "a", None).to_string());
        fx.extend(
            m.apply(
                &json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "image", "data": "x"}})
                    .to_string(),
            ),
        );
        fx.extend(m.apply(&chunk("agent_message_chunk", "b", None).to_string()));
        assert_eq!(messages(&fx).len(), 3);
    }
}
