//! What the two deciding events' hooks said. `UserPromptSubmit`: exit 2 (reason: stderr) or
//! JSON `{"decision":"block","reason"}` refuses the prompt, JSON `additionalContext` (also
//! under `hookSpecificOutput`, Claude Code's spelling) adds context. `PermissionRequest`: JSON
//! `{"decision":"allow"|"deny","optionId"?}`. A refusal or a deny wins over the others; a hook
//! that failed, timed out or printed no JSON decides nothing.

use super::Record;
use serde_json::Value;

/// A prompt's fate.
#[derive(Debug, PartialEq, Eq)]
pub enum PromptVerdict {
    /// Goes to the agent, with these texts prepended (each a text block).
    Pass(Vec<String>),
    /// Refused, with this reason.
    Block(String),
}

/// The JSON object a hook printed on stdout, if it printed one (it may follow other lines).
fn json_out(r: &Record) -> Option<serde_json::Map<String, Value>> {
    if r.outcome.timed_out || r.outcome.exit != Some(0) {
        return None;
    }
    let text = r.outcome.stdout.trim();
    let start = text.find('{')?;
    match serde_json::from_str::<Value>(&text[start..]) {
        Ok(Value::Object(o)) => Some(o),
        _ => None,
    }
}

/// Reads the records of a `UserPromptSubmit`.
pub fn prompt(records: &[Record]) -> PromptVerdict {
    let mut context = vec![];
    for r in records {
        if r.outcome.exit == Some(2) && !r.outcome.timed_out {
            let reason = r.outcome.stderr.trim();
            let reason = if reason.is_empty() { "refused by a UserPromptSubmit hook" } else { reason };
            return PromptVerdict::Block(reason.to_owned());
        }
        let Some(o) = json_out(r) else { continue };
        if o.get("decision").and_then(Value::as_str) == Some("block") {
            let reason =
                o.get("reason").and_then(Value::as_str).unwrap_or("refused by a UserPromptSubmit hook");
            return PromptVerdict::Block(reason.to_owned());
        }
        let extra = o
            .get("additionalContext")
            .or_else(|| o.get("hookSpecificOutput").and_then(|h| h.get("additionalContext")))
            .and_then(Value::as_str);
        if let Some(c) = extra.filter(|c| !c.is_empty()) {
            context.push(c.to_owned());
        }
    }
    PromptVerdict::Pass(context)
}

/// A permission answered by hooks: (`allow` or `deny`, the option chosen).
pub fn permission(records: &[Record], options: &Value) -> Option<(&'static str, String)> {
    let mut allow = None;
    for r in records {
        let Some(o) = json_out(r) else { continue };
        let asked = o.get("optionId").and_then(Value::as_str);
        match o.get("decision").and_then(Value::as_str) {
            Some("deny") => {
                if let Some(id) = option(options, asked, &["reject_once", "reject_always"]) {
                    return Some(("deny", id));
                }
            }
            Some("allow") if allow.is_none() => {
                allow = option(options, asked, &["allow_once", "allow_always"]).map(|id| ("allow", id));
            }
            _ => {}
        }
    }
    allow
}

/// The option the hook named (it must be one of the request's and of the right kind), else the
/// first option of the first kind in `kinds`.
fn option(options: &Value, asked: Option<&str>, kinds: &[&str]) -> Option<String> {
    let list = options.as_array()?;
    let kind_ok = |o: &Value| o["kind"].as_str().is_some_and(|k| kinds.contains(&k));
    if let Some(id) = asked {
        return list.iter().find(|o| o["optionId"] == id && kind_ok(o)).map(|_| id.to_owned());
    }
    kinds
        .iter()
        .find_map(|k| list.iter().find(|o| o["kind"] == *k))
        .and_then(|o| o["optionId"].as_str())
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::{HookEvent, run::Outcome};
    use serde_json::json;

    fn rec(exit: i32, stdout: &str, stderr: &str) -> Record {
        let outcome =
            Outcome { exit: Some(exit), stdout: stdout.into(), stderr: stderr.into(), ..Outcome::default() };
        Record { event: HookEvent::UserPromptSubmit, command: "x".into(), outcome }
    }

    #[test]
    fn prompts_are_blocked_by_exit_2_or_json_and_get_context() {
        assert_eq!(prompt(&[rec(2, "", "no production\n")]), PromptVerdict::Block("no production".into()));
        let j = rec(0, r#"{"decision":"block","reason":"mentions prod"}"#, "");
        assert_eq!(prompt(&[j]), PromptVerdict::Block("mentions prod".into()));
        let c = rec(0, "log line\n{\"additionalContext\":\"branch: main\"}", "");
        let h = rec(0, r#"{"hookSpecificOutput":{"additionalContext":"tz: UTC"}}"#, "");
        assert_eq!(
            prompt(&[c, h, rec(1, "{\"decision\":\"block\"}", "")]),
            PromptVerdict::Pass(vec!["branch: main".into(), "tz: UTC".into()])
        );
    }

    #[test]
    fn permissions_pick_an_option_of_the_right_kind_and_deny_wins() {
        let opts = json!([{"optionId": "a", "kind": "allow_once"}, {"optionId": "aa", "kind": "allow_always"},
            {"optionId": "r", "kind": "reject_once"}]);
        assert_eq!(permission(&[rec(0, r#"{"decision":"allow"}"#, "")], &opts), Some(("allow", "a".into())));
        assert_eq!(
            permission(&[rec(0, r#"{"decision":"allow","optionId":"aa"}"#, "")], &opts),
            Some(("allow", "aa".into()))
        );
        assert_eq!(
            permission(&[rec(0, r#"{"decision":"allow","optionId":"r"}"#, "")], &opts),
            None,
            "a reject is no allow"
        );
        let both = [rec(0, r#"{"decision":"allow"}"#, ""), rec(0, r#"{"decision":"deny"}"#, "")];
        assert_eq!(permission(&both, &opts), Some(("deny", "r".into())));
        assert_eq!(permission(&[rec(0, "yes", ""), rec(3, r#"{"decision":"allow"}"#, "")], &opts), None);
    }
}
