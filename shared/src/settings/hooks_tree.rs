//! The hooks tree of `config.json` (`hooks`): parsed and validated into [`Tree`] when a
//! bridge's agent (re)starts (the bridge's hooks runner), and before every settings write of
//! the tree ([`super::hooks`]). Every error names the offending key.

use regex_automata::meta::Regex;
use serde_json::{Map, Value};
use std::time::Duration;

/// The seven events, in the contract's order.
pub const EVENTS: [HookEvent; 7] = [
    HookEvent::SessionStart,
    HookEvent::UserPromptSubmit,
    HookEvent::PreToolUse,
    HookEvent::PermissionRequest,
    HookEvent::PostToolUse,
    HookEvent::PostToolUseFailure,
    HookEvent::Stop,
];

/// One of the events a hook can be attached to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HookEvent {
    /// `session/new|load|resume` answered by the agent.
    SessionStart,
    /// `session/prompt`, before it reaches the agent (can refuse or add context).
    UserPromptSubmit,
    /// A `tool_call` update.
    PreToolUse,
    /// `session/request_permission` (can answer it).
    PermissionRequest,
    /// A `tool_call_update` with status `completed`.
    PostToolUse,
    /// A `tool_call_update` with status `failed`.
    PostToolUseFailure,
    /// The prompt's response.
    Stop,
}

impl HookEvent {
    /// Its name in the tree and in `hook_event_name`.
    pub fn name(self) -> &'static str {
        match self {
            HookEvent::SessionStart => "SessionStart",
            HookEvent::UserPromptSubmit => "UserPromptSubmit",
            HookEvent::PreToolUse => "PreToolUse",
            HookEvent::PermissionRequest => "PermissionRequest",
            HookEvent::PostToolUse => "PostToolUse",
            HookEvent::PostToolUseFailure => "PostToolUseFailure",
            HookEvent::Stop => "Stop",
        }
    }

    /// The event named `name`, if it is one of the seven.
    pub fn from_name(name: &str) -> Option<HookEvent> {
        EVENTS.into_iter().find(|e| e.name() == name)
    }
}

/// Default per-hook timeout (Claude Code's).
pub const DEFAULT_TIMEOUT_MS: u64 = 60_000;
/// Longest timeout accepted: an hour.
pub const MAX_TIMEOUT_MS: u64 = 3_600_000;
/// Default cap on each of a hook's stdout and stderr.
pub const DEFAULT_MAX_OUTPUT: u64 = 64 * 1024;
/// Largest output cap accepted.
pub const MAX_OUTPUT: u64 = 16 * 1024 * 1024;
/// Longest command or matcher accepted (they come from a settings route too).
const MAX_TEXT: usize = 16 * 1024;

/// The parsed tree. An absent `hooks` key is an empty, enabled tree: nothing runs.
#[derive(Clone, Debug, Default)]
pub struct Tree {
    /// `enabled` (default true): false runs nothing.
    pub enabled: bool,
    /// `maxOutputBytes`: the cap on each of stdout and stderr.
    pub max_output: usize,
    /// Groups per event, in file order.
    pub events: Vec<(HookEvent, Vec<Group>)>,
}

/// `{matcher?, hooks: [...]}`.
#[derive(Clone, Debug)]
pub struct Group {
    /// `None`: matches everything.
    pub matcher: Option<Matcher>,
    /// Its enabled commands.
    pub hooks: Vec<Command>,
}

/// One `{type: "command", command, enabled?, timeoutMs?}` that is enabled.
#[derive(Clone, Debug)]
pub struct Command {
    /// Run with `sh -c`.
    pub command: String,
    /// Killed (its whole process group) after this long.
    pub timeout: Duration,
}

/// A compiled `matcher`: a regular expression searched in the tool's kind, title and name.
#[derive(Clone, Debug)]
pub struct Matcher(Regex);

impl Matcher {
    /// Whether any of `subjects` contains a match.
    pub fn matches(&self, subjects: &[&str]) -> bool {
        subjects.iter().any(|s| self.0.is_match(*s))
    }
}

impl Tree {
    /// Parses the value of `hooks` (`None`: the key is absent). Errors name the key.
    pub fn parse(hooks: Option<&Value>) -> Result<Tree, String> {
        let Some(v) = hooks.filter(|v| !v.is_null()) else {
            return Ok(Tree { enabled: true, max_output: DEFAULT_MAX_OUTPUT as usize, events: vec![] });
        };
        let o = v.as_object().ok_or("`hooks` must be an object")?;
        let enabled = opt_bool(o, "enabled", "hooks.enabled")?.unwrap_or(true);
        let timeout = opt_ms(o, "timeoutMs", "hooks.timeoutMs")?.unwrap_or(DEFAULT_TIMEOUT_MS);
        let max_output = match o.get("maxOutputBytes") {
            None | Some(Value::Null) => DEFAULT_MAX_OUTPUT,
            Some(v) => v.as_u64().filter(|n| *n <= MAX_OUTPUT).ok_or_else(|| {
                format!("`hooks.maxOutputBytes` must be an integer 0-{MAX_OUTPUT}, found {v}")
            })?,
        };
        let mut events = vec![];
        match o.get("events") {
            None | Some(Value::Null) => {}
            Some(Value::Object(map)) => {
                for (name, groups) in map {
                    let event = HookEvent::from_name(name).ok_or_else(|| {
                        let names: Vec<&str> = EVENTS.iter().map(|e| e.name()).collect();
                        format!("`hooks.events.{name}` is not an event; the events are {}", names.join(", "))
                    })?;
                    events.push((event, parse_groups(name, groups, timeout)?));
                }
            }
            Some(_) => return Err("`hooks.events` must be an object".into()),
        }
        Ok(Tree { enabled, max_output: max_output as usize, events })
    }

    /// The groups of `event` (empty when disabled or unconfigured).
    pub fn groups(&self, event: HookEvent) -> &[Group] {
        if !self.enabled {
            return &[];
        }
        self.events.iter().find(|(e, _)| *e == event).map_or(&[], |(_, g)| g.as_slice())
    }

    /// Whether anything would run for `event`.
    pub fn wants(&self, event: HookEvent) -> bool {
        self.groups(event).iter().any(|g| !g.hooks.is_empty())
    }

    /// The commands to run for `event` whose matcher finds one of `subjects`.
    pub fn commands(&self, event: HookEvent, subjects: &[&str]) -> Vec<Command> {
        self.groups(event)
            .iter()
            .filter(|g| g.matcher.as_ref().is_none_or(|m| m.matches(subjects)))
            .flat_map(|g| g.hooks.iter().cloned())
            .collect()
    }
}

fn parse_groups(event: &str, v: &Value, timeout: u64) -> Result<Vec<Group>, String> {
    let arr = v.as_array().ok_or_else(|| format!("`hooks.events.{event}` must be an array"))?;
    let mut out = vec![];
    for (i, g) in arr.iter().enumerate() {
        let at = format!("hooks.events.{event}[{i}]");
        let o = g.as_object().ok_or_else(|| format!("`{at}` must be an object"))?;
        let matcher = match o.get("matcher") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.is_empty() || s == "*" => None,
            Some(Value::String(s)) if s.len() > MAX_TEXT => {
                return Err(format!("`{at}.matcher` is longer than {MAX_TEXT} bytes"));
            }
            Some(Value::String(s)) => Some(Matcher(
                Regex::new(s)
                    .map_err(|e| format!("`{at}.matcher` is not a valid regular expression: {e}"))?,
            )),
            Some(_) => return Err(format!("`{at}.matcher` must be a string")),
        };
        let hooks = o
            .get("hooks")
            .and_then(Value::as_array)
            .ok_or_else(|| format!("`{at}.hooks` must be an array"))?;
        let mut commands = vec![];
        for (j, h) in hooks.iter().enumerate() {
            if let Some(c) = parse_command(&format!("{at}.hooks[{j}]"), h, timeout)? {
                commands.push(c);
            }
        }
        out.push(Group { matcher, hooks: commands });
    }
    Ok(out)
}

/// One hook entry; `None` when it is disabled (it is still validated).
fn parse_command(at: &str, h: &Value, timeout: u64) -> Result<Option<Command>, String> {
    let o = h.as_object().ok_or_else(|| format!("`{at}` must be an object"))?;
    match o.get("type") {
        Some(Value::String(t)) if t == "command" => {}
        Some(v) => return Err(format!("`{at}.type` must be \"command\", found {v}")),
        None => return Err(format!("`{at}.type` is missing (it must be \"command\")")),
    }
    let command = match o.get("command") {
        Some(Value::String(s)) if !s.trim().is_empty() && s.len() <= MAX_TEXT && !s.contains('\0') => {
            s.clone()
        }
        Some(Value::String(_)) => {
            return Err(format!(
                "`{at}.command` must be a non-empty command line of at most {MAX_TEXT} bytes"
            ));
        }
        _ => return Err(format!("`{at}.command` must be a string")),
    };
    let enabled = opt_bool(o, "enabled", &format!("{at}.enabled"))?.unwrap_or(true);
    let ms = opt_ms(o, "timeoutMs", &format!("{at}.timeoutMs"))?.unwrap_or(timeout);
    Ok(enabled.then(|| Command { command, timeout: Duration::from_millis(ms) }))
}

fn opt_bool(o: &Map<String, Value>, key: &str, at: &str) -> Result<Option<bool>, String> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(format!("`{at}` must be true or false, found {v}")),
    }
}

fn opt_ms(o: &Map<String, Value>, key: &str, at: &str) -> Result<Option<u64>, String> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().filter(|n| (1..=MAX_TIMEOUT_MS).contains(n)).map(Some).ok_or_else(|| {
            format!("`{at}` must be an integer of milliseconds 1-{MAX_TIMEOUT_MS}, found {v}")
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_tree_parses_with_defaults_and_matchers() {
        let t = Tree::parse(Some(&json!({"timeoutMs": 500, "events": {
            "PreToolUse": [{"matcher": "^read$|Bash", "hooks": [
                {"type": "command", "command": "true"},
                {"type": "command", "command": "off", "enabled": false},
                {"type": "command", "command": "slow", "timeoutMs": 9, "extra": 1}]}],
            "Stop": [{"hooks": [{"type": "command", "command": "stop"}]}]}})))
        .unwrap();
        assert!(t.enabled);
        assert_eq!(t.max_output, DEFAULT_MAX_OUTPUT as usize);
        let c = t.commands(HookEvent::PreToolUse, &["read", "Read README.md"]);
        assert_eq!(c.len(), 2, "the disabled entry does not run");
        assert_eq!(c[0].timeout, Duration::from_millis(500));
        assert_eq!(c[1].timeout, Duration::from_millis(9));
        assert!(t.commands(HookEvent::PreToolUse, &["edit", "Write a.txt"]).is_empty());
        assert_eq!(t.commands(HookEvent::PreToolUse, &["execute", "x", "Bash"]).len(), 2);
        assert_eq!(t.commands(HookEvent::Stop, &[]).len(), 1);
        assert!(!t.wants(HookEvent::SessionStart));
        let off = Tree::parse(Some(&json!({"enabled": false, "events": {"Stop": [{"hooks": [
            {"type": "command", "command": "stop"}]}]}})))
        .unwrap();
        assert!(!off.wants(HookEvent::Stop), "a disabled tree runs nothing");
        assert!(Tree::parse(None).unwrap().events.is_empty());
    }

    #[test]
    fn malformed_trees_are_refused_naming_the_key() {
        let cases = [
            (json!([]), "`hooks` must be an object"),
            (json!({"enabled": "yes"}), "hooks.enabled"),
            (json!({"timeoutMs": 0}), "hooks.timeoutMs"),
            (json!({"maxOutputBytes": -1}), "hooks.maxOutputBytes"),
            (json!({"events": {"OnSave": []}}), "`hooks.events.OnSave` is not an event"),
            (json!({"events": {"Stop": {}}}), "`hooks.events.Stop` must be an array"),
            (json!({"events": {"Stop": [{"matcher": "(", "hooks": []}]}}), "hooks.events.Stop[0].matcher"),
            (
                json!({"events": {"Stop": [{"hooks": [{"command": "x"}]}]}}),
                "hooks.events.Stop[0].hooks[0].type",
            ),
            (json!({"events": {"Stop": [{"hooks": [{"type": "command", "command": " "}]}]}}), ".command"),
            (
                json!({"events": {"Stop": [{"hooks": [{"type": "command", "command": "x", "timeoutMs": "1"}]}]}}),
                "hooks.events.Stop[0].hooks[0].timeoutMs",
            ),
        ];
        for (tree, needle) in cases {
            let err = Tree::parse(Some(&tree)).expect_err(&tree.to_string());
            assert!(err.contains(needle), "{tree}: {err}");
        }
    }
}
