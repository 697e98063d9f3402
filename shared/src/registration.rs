//! The registration payload between a bridge and its hub (`POST /api/register`): one
//! definition for both sides. The bridge builds a [`Registration`] and sends
//! [`Registration::to_json`]; the hub validates a body with [`Registration::parse`] (its error
//! is the 400 answer's text). Fields per ORIGINAL-NOTES: token, id (the bridge's pid), port,
//! pid, startedAt, workspace, origin (`editor` | `serve`), sessions, nonce?, version, and
//! launcher? (`up`: the serve bridge `zcode-acp up` runs, which clients label as such; the
//! contract's `origin` stays `serve`), and agentError? (why its agent is down: clients show it), journalError? (why the
//! bridge's history is not being saved, while it is not).

use serde_json::{Map, Value, json};

/// One bridge's registration, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct Registration {
    /// The instance id (the bridge's pid, as a string).
    pub id: String,
    /// Its loopback port.
    pub port: u16,
    /// Its process id.
    pub pid: u32,
    /// The bridge's own boot instant (epoch ms); the first value seen for an instance is kept.
    pub started_at: u64,
    /// Its working directory.
    pub workspace: String,
    /// `editor` or `serve`.
    pub origin: &'static str,
    /// The sessions it advertises.
    pub sessions: Vec<SessionRow>,
    /// Pairs a registration with the hub's spawn of it (serve bridges).
    pub nonce: Option<String>,
    /// The bridge's version.
    pub version: Option<String>,
    /// What started a serve bridge when it was not the hub: `up` (else absent).
    pub launcher: Option<&'static str>,
    /// The agent it runs: its `config.json` name, else its command line (one clean line).
    pub agent: Option<String>,
    /// Why its agent is down ("claude: command not found: claude-code-acp"), while it is.
    pub agent_error: Option<String>,
    /// Why the bridge's journal cannot commit (its store locked or unwritable), while it cannot.
    pub journal_error: Option<String>,
}

/// The longest `agentError` a hub keeps, in bytes (a bridge sends at most 20 lines / 4 KiB of
/// its agent's stderr after the message).
const AGENT_ERROR_MAX: usize = 6144;

/// One advertised session.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionRow {
    /// The ACP session id.
    pub session_id: String,
    /// Its title, when it has one.
    pub title: Option<String>,
    /// `running`, `waiting` (a turn blocked on the user) or `idle`; any other value was
    /// dropped. The hub's listing shows `waiting` as `running` (the contract's two values).
    pub status: Option<&'static str>,
    /// Last activity, epoch ms.
    pub updated_at: u64,
    /// How many requests of the session (permissions, elicitations) wait for an answer: 0
    /// unless `waiting` (a bridge that does not say counts 1 for a waiting session).
    pub pending: u32,
}

/// Ids and session ids are used in paths: this is the contract's accepted pattern.
pub fn valid_id(s: &str) -> bool {
    !s.is_empty() && s.len() <= 256 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.:-".contains(&b))
}

impl Registration {
    /// Validates a registration body (the token is checked by the caller). The error is the
    /// 400 answer's text.
    pub fn parse(v: &Value) -> Result<Registration, &'static str> {
        let o = v.as_object().ok_or("registration must be a JSON object")?;
        let id = match o.get("id") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            _ => return Err("id required"),
        };
        if !valid_id(&id) {
            return Err("invalid id");
        }
        let port = o
            .get("port")
            .and_then(Value::as_u64)
            .filter(|p| (1..=65535).contains(p))
            .ok_or("port must be 1-65535")?;
        let pid = match o.get("pid") {
            None | Some(Value::Null) => id.parse().unwrap_or(0),
            Some(p) => p.as_u64().and_then(|p| u32::try_from(p).ok()).ok_or("pid must be a process id")?,
        };
        let started_at = match o.get("startedAt") {
            None | Some(Value::Null) => crate::time::now_ms(),
            Some(t) => t.as_u64().ok_or("startedAt must be epoch milliseconds")?,
        };
        let origin = match o.get("origin").map(|v| v.as_str()) {
            None | Some(Some("editor")) => "editor",
            Some(Some("serve")) => "serve",
            Some(_) => return Err("origin must be editor or serve"),
        };
        let sessions = match o.get("sessions") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => a.iter().map(SessionRow::parse).collect::<Result<_, _>>()?,
            Some(_) => return Err("sessions must be an array"),
        };
        let text = |k: &str| o.get(k).and_then(Value::as_str).map(str::to_owned);
        Ok(Registration {
            id,
            port: port as u16,
            pid,
            started_at,
            workspace: text("workspace").unwrap_or_default(),
            origin,
            sessions,
            nonce: text("nonce"),
            version: text("version"),
            // A label only: a value this hub does not know is dropped, never refused.
            launcher: (text("launcher").as_deref() == Some("up")).then_some("up"),
            agent: text("agent").map(|a| crate::text::title(&a)).filter(|a| !a.is_empty()),
            agent_error: text("agentError").map(|e| agent_error(&e)).filter(|e| !e.is_empty()),
            journal_error: text("journalError").map(|e| agent_error(&e)).filter(|e| !e.is_empty()),
        })
    }
}

impl Registration {
    /// The payload a bridge POSTs (`/api/register`), with the machine's `token`; what
    /// [`Registration::parse`] reads back.
    pub fn to_json(&self, token: &str) -> Value {
        let mut v = json!({
            "token": token,
            "id": self.id,
            "port": self.port,
            "pid": self.pid,
            "startedAt": self.started_at,
            "workspace": self.workspace,
            "origin": self.origin,
            "sessions": self.sessions.iter().map(SessionRow::to_json).collect::<Vec<_>>(),
        });
        if let Some(n) = &self.nonce {
            v["nonce"] = n.clone().into();
        }
        if let Some(ver) = &self.version {
            v["version"] = ver.clone().into();
        }
        if let Some(l) = self.launcher {
            v["launcher"] = l.into();
        }
        if let Some(a) = &self.agent {
            v["agent"] = a.as_str().into();
        }
        if let Some(e) = &self.agent_error {
            v["agentError"] = e.clone().into();
        }
        if let Some(e) = &self.journal_error {
            v["journalError"] = e.clone().into();
        }
        v
    }
}

/// An `agentError` as a hub keeps it: no control sequences (a phone shows it), bounded.
fn agent_error(text: &str) -> String {
    let mut e = crate::text::strip_controls(text);
    if e.len() > AGENT_ERROR_MAX {
        let mut cut = AGENT_ERROR_MAX;
        while !e.is_char_boundary(cut) {
            cut -= 1;
        }
        e.truncate(cut);
    }
    e
}

impl SessionRow {
    /// Validates one advertised session.
    pub fn parse(v: &Value) -> Result<SessionRow, &'static str> {
        let session_id = v
            .get("sessionId")
            .and_then(Value::as_str)
            .filter(|s| valid_id(s))
            .ok_or("every session needs a valid sessionId")?;
        let status = match v.get("status").and_then(Value::as_str) {
            Some("running") => Some("running"),
            Some("idle") => Some("idle"),
            // A permission or elicitation is pending: the hub's Web Push wakes the user.
            Some("waiting") => Some("waiting"),
            _ => None,
        };
        Ok(SessionRow {
            session_id: session_id.to_owned(),
            title: v.get("title").and_then(Value::as_str).map(str::to_owned),
            status,
            updated_at: v.get("updatedAt").and_then(Value::as_u64).unwrap_or(0),
            pending: match status {
                Some("waiting") => v
                    .get("pending")
                    .and_then(Value::as_u64)
                    .map_or(1, |n| u32::try_from(n).unwrap_or(u32::MAX).max(1)),
                _ => 0,
            },
        })
    }

    /// The row as the payload and the listing carry it.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("sessionId".into(), self.session_id.clone().into());
        if let Some(t) = &self.title {
            m.insert("title".into(), t.clone().into());
        }
        if let Some(s) = self.status {
            m.insert("status".into(), s.into());
        }
        m.insert("updatedAt".into(), self.updated_at.into());
        if self.pending > 0 {
            m.insert("pending".into(), self.pending.into());
        }
        Value::Object(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_payloads_are_refused() {
        let ok = json!({"id": "7", "port": 8378, "sessions": []});
        assert!(Registration::parse(&ok).is_ok());
        for bad in [
            json!([]),
            json!({"port": 8378}),
            json!({"id": "", "port": 8378}),
            json!({"id": "a/b", "port": 8378}),
            json!({"id": "7", "port": 0}),
            json!({"id": "7", "port": 70000}),
            json!({"id": "7", "port": "8378"}),
            json!({"id": "7", "port": 8378, "sessions": {}}),
            json!({"id": "7", "port": 8378, "sessions": [{"title": "no id"}]}),
            json!({"id": "7", "port": 8378, "origin": "phone"}),
            json!({"id": "7", "port": 8378, "startedAt": -1}),
        ] {
            assert!(Registration::parse(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn unknown_status_values_are_dropped() {
        let r = Registration::parse(&json!({"id": "7", "port": 1, "sessions": [
            {"sessionId": "a", "status": "running"}, {"sessionId": "b", "status": "exploded"}
        ]}))
        .unwrap();
        assert_eq!(r.sessions[0].status, Some("running"));
        assert_eq!(r.sessions[1].status, None);
        assert_eq!(r.origin, "editor");
        assert_eq!(r.pid, 7, "pid defaults to the id");
    }

    #[test]
    fn what_a_bridge_sends_is_what_the_hub_reads() {
        let reg = Registration {
            id: "4242".into(),
            port: 8379,
            pid: 4242,
            started_at: 1_700_000_000_000,
            workspace: "/home/me/project".into(),
            origin: "serve",
            launcher: Some("up"),
            agent: Some("zcode-acp demo-agent".into()),
            sessions: vec![
                SessionRow {
                    session_id: "s-1".into(),
                    title: Some("Fix it".into()),
                    status: Some("running"),
                    updated_at: 9,
                    pending: 0,
                },
                // Two requests waiting together: the count travels (the app badge's).
                SessionRow {
                    session_id: "s-3".into(),
                    title: None,
                    status: Some("waiting"),
                    updated_at: 10,
                    pending: 2,
                },
                SessionRow {
                    session_id: "s-2".into(),
                    title: None,
                    status: Some("idle"),
                    updated_at: 3,
                    pending: 0,
                },
            ],
            nonce: Some("n0nce".into()),
            version: Some(crate::VERSION.into()),
            agent_error: Some("fast: exited with status 3\nits last lines on stderr:\nboom".into()),
            journal_error: Some("history is not being saved: database is locked".into()),
        };
        let body = reg.to_json("the-token");
        assert_eq!(body["token"], "the-token");
        assert_eq!(Registration::parse(&body), Ok(reg));
    }

    #[test]
    fn an_agent_error_is_kept_inert_and_bounded() {
        let long = "x".repeat(10_000);
        let r = Registration::parse(
            &json!({"id": "7", "port": 1, "agentError": format!("\x1b]0;pwned\x07a: b{long}")}),
        )
        .unwrap();
        let e = r.agent_error.unwrap();
        assert!(e.starts_with("a: bxx") && e.len() == AGENT_ERROR_MAX, "{}", &e[..20]);
        let none = Registration::parse(&json!({"id": "7", "port": 1, "agentError": ""})).unwrap();
        assert_eq!(none.agent_error, None);
    }
}
