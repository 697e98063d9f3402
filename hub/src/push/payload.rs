//! What a push says: the JSON the service worker turns into a notification (or into closing
//! one). A wait with the request's details (the bridge's `/attention` row) names the tool and
//! its command or path and carries what Allow and Deny send; without them it says only that
//! the session waits.

use super::{Event, Kind};
use serde_json::{Value, json};

/// `encodeURIComponent`: what the web client puts in its links.
pub fn uri_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z'
            | b'a'..=b'z'
            | b'0'..=b'9'
            | b'-'
            | b'_'
            | b'.'
            | b'!'
            | b'~'
            | b'*'
            | b'\''
            | b'('
            | b')' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// At most `max` characters of `s` (control characters made spaces), with an ellipsis when cut.
pub fn clip(s: &str, max: usize) -> String {
    let s: String = s.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    match s.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s,
    }
}

/// What a person decides on, from a pending row's `params`: `(label, what)` such as
/// `("Run", "cargo test")`, `("Edit", "src/main.rs")`.
fn asked(params: &Value, workspace: &str) -> (String, String) {
    let tool = &params["toolCall"];
    let kind = tool["kind"].as_str().unwrap_or("other");
    let label = match kind {
        "execute" => "Run",
        "edit" => "Edit",
        "read" => "Read",
        "delete" => "Delete",
        "move" => "Move",
        "fetch" => "Fetch",
        "search" => "Search",
        _ => "Use a tool",
    };
    let input = &tool["rawInput"];
    let command = match &input["command"] {
        Value::String(c) => Some(c.clone()),
        Value::Array(parts) => Some(parts.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" ")),
        _ => None,
    };
    let root = format!("{}/", workspace.trim_end_matches('/'));
    let path = tool["locations"][0]["path"]
        .as_str()
        .or(input["file_path"].as_str())
        .or(input["path"].as_str())
        .map(|p| p.strip_prefix(root.as_str()).unwrap_or(p).to_owned());
    let title = tool["title"].as_str().map(str::to_owned);
    let what = match kind {
        "execute" => command.or(title).or(path),
        _ => path.or(command).or(title),
    };
    (label.to_owned(), what.unwrap_or_else(|| "a tool call".to_owned()))
}

/// The option ids Allow and Deny send: the first `allow_once` (else `allow_always`) and the first
/// `reject_once` (else `reject_always`); `None` unless both are offered.
fn quick_options(params: &Value) -> Option<(String, String)> {
    let opts = params["options"].as_array()?;
    let pick = |kinds: [&str; 2]| {
        kinds.iter().find_map(|k| {
            opts.iter().find(|o| o["kind"] == *k).and_then(|o| o["optionId"].as_str()).map(str::to_owned)
        })
    };
    Some((pick(["allow_once", "allow_always"])?, pick(["reject_once", "reject_always"])?))
}

impl Event {
    /// The JSON the service worker receives: `{title, body, url, tag, kind, pending}`, and for a
    /// permission with Allow and Deny, `answer: {path, allow, deny}`. `url` is the web client's
    /// session route; `tag` is per session, so a turn's end or a withdrawal (`kind:
    /// "withdraw"`, which closes the notification) replaces its wait. `pending` is how many
    /// sessions wait for an answer (the app badge).
    pub fn payload(&self) -> Value {
        let session = clip(self.title.as_deref().filter(|t| !t.trim().is_empty()).unwrap_or("A session"), 80);
        let project = self.workspace.trim_end_matches('/').rsplit('/').next().filter(|p| !p.is_empty());
        let mut url = format!("/s/{}/{}", uri_component(&self.instance), uri_component(&self.session));
        if !self.workspace.is_empty() {
            url.push_str(&format!("?cwd={}", uri_component(&self.workspace)));
        }
        let tag = format!("session:{}", self.session);
        let at = |s: String| match project {
            Some(p) => format!("{s} · {}", clip(p, 60)),
            None => s,
        };
        let mut p = match (self.kind, &self.request) {
            (Kind::Withdrawn, _) => {
                json!({"title": "Answered", "body": at(format!("{session} was answered")),
                                           "kind": "withdraw"})
            }
            (Kind::TurnEnded, _) => {
                json!({"title": "Turn finished", "body": at(format!("{session} finished its turn")),
                                           "kind": "turnEnd"})
            }
            (Kind::Waiting, Some(row)) if row["method"] == "session/request_permission" => {
                let (label, what) = asked(&row["params"], &self.workspace);
                let mut p = json!({"title": clip(&format!("{session} asks: {label}"), 100),
                                   "body": at(format!("{label}: {}", clip(&what, 200))), "kind": "waiting"});
                if let (Some((allow, deny)), Some(id)) =
                    (quick_options(&row["params"]), row["requestId"].as_u64())
                {
                    let path = format!(
                        "/api/instances/{}/sessions/{}/permissions/{id}",
                        uri_component(&self.instance),
                        uri_component(&self.session)
                    );
                    p["answer"] = json!({"path": path, "allow": allow, "deny": deny});
                }
                p
            }
            (Kind::Waiting, Some(row)) => {
                let question = clip(row["params"]["message"].as_str().unwrap_or("a question"), 200);
                json!({"title": clip(&format!("{session} asks you"), 100), "body": at(question), "kind": "waiting"})
            }
            (Kind::Waiting, None) => {
                json!({"title": "Waiting for you", "body": at(format!("{session} needs your answer")),
                                            "kind": "waiting"})
            }
        };
        p["url"] = url.into();
        p["tag"] = tag.into();
        p["pending"] = self.pending.into();
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: Kind) -> Event {
        Event {
            kind,
            instance: "42".into(),
            session: "s:1".into(),
            title: None,
            workspace: "/home/me/my proj/".into(),
            ..Event::default()
        }
    }

    #[test]
    fn the_payload_opens_the_session() {
        let e = event(Kind::Waiting);
        let p = e.payload();
        assert_eq!(p["url"], "/s/42/s%3A1?cwd=%2Fhome%2Fme%2Fmy%20proj%2F");
        assert_eq!(p["title"], "Waiting for you");
        assert_eq!(p["body"], "A session needs your answer · my proj");
        assert_eq!(p["tag"], "session:s:1");
        assert_eq!(p.get("answer"), None);
        assert_eq!(e.topic().len(), 32);
        assert!(e.topic().bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        let long = Event { title: Some("x".repeat(500)), ..event(Kind::TurnEnded) };
        assert!(long.payload()["body"].as_str().unwrap().chars().count() < 150);
        assert_eq!(event(Kind::Withdrawn).payload()["kind"], "withdraw");
    }

    #[test]
    fn a_permission_names_its_command_or_path_and_what_allow_and_deny_send() {
        let options = json!([{"optionId": "yes", "kind": "allow_always"}, {"optionId": "once", "kind": "allow_once"},
                             {"optionId": "no", "kind": "reject_once"}]);
        let run = json!({"method": "session/request_permission", "requestId": 7, "params": {"options": options,
            "toolCall": {"kind": "execute", "title": "Run tests", "rawInput": {"command": "cargo test\u{1b}[2J"}}}});
        let p =
            Event { request: Some(run), title: Some("Fix login".into()), ..event(Kind::Waiting) }.payload();
        assert_eq!(p["title"], "Fix login asks: Run");
        assert_eq!(p["body"], "Run: cargo test [2J · my proj");
        assert_eq!(
            p["answer"],
            json!({"path": "/api/instances/42/sessions/s%3A1/permissions/7", "allow": "once", "deny": "no"})
        );
        let edit = json!({"method": "session/request_permission", "requestId": 8, "params": {"options": [],
            "toolCall": {"kind": "edit", "locations": [{"path": "/home/me/my proj/src/a.rs"}]}}});
        let p = Event { request: Some(edit), ..event(Kind::Waiting) }.payload();
        assert_eq!(p["body"], "Edit: src/a.rs · my proj");
        assert_eq!(p.get("answer"), None, "no options to offer");
    }
}
