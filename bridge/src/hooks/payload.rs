//! The event JSON a hook reads on stdin, with Claude Code's field names where one exists
//! (`hook_event_name`, `session_id`, `cwd`, `prompt`, `tool_name`, `tool_input`,
//! `tool_response`, `permission_options`, `stop_reason`), and what a matcher is matched
//! against: the tool's kind, title and the name the agent gives it in `_meta`.

use super::HookEvent;
use serde_json::{Map, Value, json};
use std::path::Path;

/// The fields every event carries.
pub fn base(event: HookEvent, session: &str, cwd: &Path) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("hook_event_name".into(), json!(event.name()));
    m.insert("session_id".into(), json!(session));
    m.insert("cwd".into(), json!(cwd.display().to_string()));
    m.insert("instance_id".into(), json!(std::process::id().to_string()));
    m
}

/// What is known of one tool call: kept from its `tool_call` until it completes, so the
/// completion (an update that carries little) is matched and described like the call.
#[derive(Clone, Debug, Default)]
pub struct Tool {
    /// `toolCallId`.
    pub id: String,
    /// `kind` (`read`, `edit`, `execute`, …).
    pub kind: String,
    /// `title`.
    pub title: String,
    /// The name in `_meta` (`_meta.toolName` or `_meta.<vendor>.toolName`), if any.
    pub name: Option<String>,
    /// `rawInput`.
    pub input: Value,
    /// `locations`.
    pub locations: Value,
}

impl Tool {
    /// Reads a `tool_call` (or a permission's `toolCall`), completed by what `known` had.
    pub fn from_call(call: &Value, known: Option<&Tool>) -> Tool {
        let s = |k: &str| call[k].as_str().map(str::to_owned);
        let base = known.cloned().unwrap_or_default();
        Tool {
            id: s("toolCallId").unwrap_or(base.id),
            kind: s("kind").unwrap_or(base.kind),
            title: s("title").unwrap_or(base.title),
            name: meta_tool_name(&call["_meta"]).or(base.name),
            input: Some(call["rawInput"].clone()).filter(|v| !v.is_null()).unwrap_or(base.input),
            locations: Some(call["locations"].clone()).filter(|v| !v.is_null()).unwrap_or(base.locations),
        }
    }

    /// What a matcher is searched in.
    pub fn subjects(&self) -> Vec<&str> {
        let mut v = vec![self.kind.as_str(), self.title.as_str()];
        v.extend(self.name.as_deref());
        v
    }

    /// The tool's fields of the event JSON.
    pub fn fill(&self, m: &mut Map<String, Value>) {
        let name = self
            .name
            .clone()
            .unwrap_or_else(|| if self.title.is_empty() { self.kind.clone() } else { self.title.clone() });
        m.insert("tool_name".into(), json!(name));
        m.insert("tool_kind".into(), json!(self.kind));
        m.insert("tool_title".into(), json!(self.title));
        m.insert("tool_call_id".into(), json!(self.id));
        m.insert("tool_input".into(), self.input.clone());
        m.insert("tool_locations".into(), self.locations.clone());
    }
}

/// `_meta.toolName`, else the first `_meta.<vendor>.toolName` (claude-agent-acp's
/// `_meta.claudeCode.toolName`).
fn meta_tool_name(meta: &Value) -> Option<String> {
    let o = meta.as_object()?;
    if let Some(n) = o.get("toolName").and_then(Value::as_str) {
        return Some(n.to_owned());
    }
    o.values().find_map(|v| v.get("toolName").and_then(Value::as_str)).map(str::to_owned)
}

/// The `tool_response` of a completed or failed call: `rawOutput`, else its `content`.
pub fn tool_response(update: &Value) -> Value {
    match &update["rawOutput"] {
        Value::Null => update["content"].clone(),
        v => v.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_completion_is_described_like_its_call() {
        let call = json!({"toolCallId": "t1", "kind": "read", "title": "Read a.txt", "rawInput": {"path": "a.txt"},
            "_meta": {"claudeCode": {"toolName": "Read"}}});
        let first = Tool::from_call(&call, None);
        assert_eq!(first.subjects(), vec!["read", "Read a.txt", "Read"]);
        let done = Tool::from_call(&json!({"toolCallId": "t1", "status": "completed"}), Some(&first));
        let mut m = Map::new();
        done.fill(&mut m);
        assert_eq!(m["tool_name"], "Read");
        assert_eq!(m["tool_input"], json!({"path": "a.txt"}));
        let plain = Tool::from_call(&json!({"toolCallId": "t2", "kind": "edit", "title": "Write b"}), None);
        let mut m = Map::new();
        plain.fill(&mut m);
        assert_eq!(m["tool_name"], "Write b", "without a name in _meta, the title names the tool");
        assert_eq!(tool_response(&json!({"content": [1]})), json!([1]));
    }
}
