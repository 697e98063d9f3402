//! How `zcode-acp chat` shows a session in a terminal: replies streamed as they come, thoughts
//! dimmed, tool calls and plans on lines of their own, other devices' prompts marked: in the
//! history `you › …`, live `› other device: …` (the bridge does not say which device; every
//! live user message is another client's, our own are never echoed back).
//!
//! Everything the agent or another client wrote goes through [`inert`] first: only the chat's
//! own styling reaches the terminal as control sequences.

use serde_json::Value;
use std::collections::HashMap;
use std::fmt::Write as _;
use zcode_shared::text::strip_controls as inert;

/// Turns `session/update`s into terminal text.
#[derive(Default)]
pub struct Renderer {
    /// What kind of text the last output was, to know when a new line is needed.
    last: Option<&'static str>,
    tools: HashMap<String, String>,
    color: bool,
    /// The `messageId` of the user message being shown (its next chunk continues it).
    user_msg: Option<String>,
    /// The session is loaded: user messages are other devices' prompts, not history.
    pub live: bool,
}

impl Renderer {
    /// A renderer; `color` adds ANSI styles.
    pub fn new(color: bool) -> Renderer {
        Renderer { color, ..Renderer::default() }
    }

    fn style(&self, code: &str, text: &str) -> String {
        if self.color { format!("\x1b[{code}m{text}\x1b[0m") } else { text.to_owned() }
    }

    /// Starts a line of its own if the previous output was mid-line.
    fn line(&mut self, out: &mut String, kind: &'static str) {
        if self.last.is_some() && self.last != Some(kind) {
            out.push('\n');
        }
        self.last = Some(kind);
    }

    /// Text for one update (possibly empty).
    pub fn update(&mut self, u: &Value) -> String {
        let mut out = String::new();
        let text = inert(u.pointer("/content/text").and_then(Value::as_str).unwrap_or(""));
        let text = text.as_str();
        match u["sessionUpdate"].as_str().unwrap_or("") {
            "agent_message_chunk" => {
                self.line(&mut out, "agent");
                out.push_str(text);
            }
            "agent_thought_chunk" => {
                self.line(&mut out, "thought");
                out.push_str(&self.style("2", text));
            }
            "user_message_chunk" => {
                let id = u["messageId"].as_str().map(str::to_owned);
                let continues = self.last == Some("user") && id == self.user_msg;
                if self.last == Some("user") && !continues {
                    out.push('\n');
                }
                self.line(&mut out, "user");
                if !continues {
                    let label = if self.live { "› other device:" } else { "you ›" };
                    let _ = write!(out, "{} ", self.style("1;36", label));
                }
                out.push_str(text);
                self.user_msg = id;
            }
            "tool_call" => {
                let title = zcode_shared::text::title(u["title"].as_str().unwrap_or("tool"));
                if let Some(id) = u["toolCallId"].as_str() {
                    self.tools.insert(id.to_owned(), title.clone());
                }
                self.line(&mut out, "tool");
                let status = inert(u["status"].as_str().unwrap_or("pending"));
                let _ = writeln!(out, "{}", self.style("33", &format!("⚙ {title} ({status})")));
                self.last = None;
            }
            "tool_call_update" => {
                let status = u["status"].as_str().unwrap_or("");
                if matches!(status, "completed" | "failed") {
                    let title = u["toolCallId"]
                        .as_str()
                        .and_then(|id| self.tools.get(id))
                        .cloned()
                        .unwrap_or_default();
                    self.line(&mut out, "tool");
                    let mark = if status == "completed" { "✓" } else { "✗" };
                    let _ = writeln!(out, "{}", self.style("33", &format!("{mark} {title} ({status})")));
                    self.last = None;
                }
            }
            "plan" => {
                self.line(&mut out, "plan");
                for e in u["entries"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
                    let mark = match e["status"].as_str() {
                        Some("completed") => "☑",
                        Some("in_progress") => "▸",
                        _ => "☐",
                    };
                    let _ = writeln!(
                        out,
                        "{}",
                        self.style("34", &format!("{mark} {}", inert(e["content"].as_str().unwrap_or(""))))
                    );
                }
                self.last = None;
            }
            _ => {}
        }
        out
    }

    /// Ends whatever line is open (before a prompt or a question).
    pub fn break_line(&mut self) -> &'static str {
        if self.last.take().is_some() { "\n" } else { "" }
    }
}

/// A permission question, numbered options.
pub fn permission_question(params: &Value) -> (String, Vec<String>) {
    let title =
        params.pointer("/toolCall/title").and_then(Value::as_str).unwrap_or("the agent asks for permission");
    let options = params["options"].as_array().cloned().unwrap_or_default();
    let mut q = format!("🔐 {}\n", inert(title));
    let mut ids = Vec::new();
    for (i, o) in options.iter().enumerate() {
        let _ = writeln!(q, "  {}) {}", i + 1, zcode_shared::text::title(o["name"].as_str().unwrap_or("?")));
        ids.push(o["optionId"].as_str().unwrap_or("").to_owned());
    }
    q.push_str("answer with a number: ");
    (q, ids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn renders_a_turn() {
        let mut r = Renderer::new(false);
        let mut s = String::new();
        s += &r.update(
            &json!({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "hm"}}),
        );
        s += &r.update(
            &json!({"sessionUpdate": "tool_call", "toolCallId": "c", "title": "Read a", "status": "pending"}),
        );
        s += &r
            .update(&json!({"sessionUpdate": "tool_call_update", "toolCallId": "c", "status": "completed"}));
        s += &r.update(
            &json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Hel"}}),
        );
        s += &r.update(
            &json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "lo"}}),
        );
        s += r.break_line();
        assert_eq!(s, "hm\n⚙ Read a (pending)\n✓ Read a (completed)\nHello\n");
        let (q, ids) = permission_question(&json!({"toolCall": {"title": "Edit x"}, "options": [
            {"optionId": "allow", "name": "Allow"}, {"optionId": "reject", "name": "Reject"}]}));
        assert!(q.contains("1) Allow") && q.contains("2) Reject"));
        assert_eq!(ids, ["allow", "reject"]);
    }

    #[test]
    fn what_others_wrote_is_inert_and_our_styling_stays() {
        let mut r = Renderer::new(true);
        let mut s = r.update(&json!({"sessionUpdate": "user_message_chunk",
            "content": {"type": "text", "text": "hi\x1b]0;pwned\x07\x1b[2J\u{9b}1m"}}));
        s += &r.update(&json!({"sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": "a\x1bPq\x1b\\b\x07\r"}}));
        s += &r.update(&json!({"sessionUpdate": "tool_call", "toolCallId": "c",
            "title": "t\x1b[31m\n", "status": "x\x1b[5m"}));
        s += &r.update(&json!({"sessionUpdate": "plan", "entries": [{"content": "p\x1b]2;x\x07"}]}));
        assert_eq!(s, "\x1b[1;36myou ›\x1b[0m hi\nab\n\x1b[33m⚙ t (x)\x1b[0m\n\x1b[34m☐ p\x1b[0m\n");
        let (q, _) = permission_question(&json!({"toolCall": {"title": "e\x1b[8m"},
            "options": [{"optionId": "a", "name": "A\x1b]0;x\x07"}]}));
        assert_eq!(q, "🔐 e\n  1) A\nanswer with a number: ");
    }

    #[test]
    fn a_live_prompt_from_another_device_is_labelled_once_per_message() {
        let mut r = Renderer::new(false);
        let chunk = |id: &str, t: &str| {
            json!({"sessionUpdate": "user_message_chunk", "messageId": id,
            "content": {"type": "text", "text": t}})
        };
        let mut s = r.update(&chunk("m0", "old"));
        s += &r.update(
            &json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "ok"}}),
        );
        s += r.break_line();
        r.live = true;
        s += &r.update(&chunk("uprompt_1", "look at "));
        s += &r.update(&chunk("uprompt_1", "this"));
        s += &r.update(&chunk("uprompt_2", "and that"));
        s += &r.update(
            &json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "done"}}),
        );
        s += r.break_line();
        assert_eq!(s, "you › old\nok\n› other device: look at this\n› other device: and that\ndone\n");
    }
}
