//! What a machine-wide glance needs from this bridge, read from the router's memory (no agent
//! RPC): the permission requests and elicitations waiting for a client (`GET /attention`, the
//! hub's inbox) and the turns running, waiting or queued (`GET /turns`, the hub's board).
//! Bounded: at most [`MAX_ROWS`] of each, and a request's params over [`MAX_PARAMS`] bytes are
//! cut down to what a person decides on.

use super::ClientId;
use super::clients::Clients;
use super::requests::Requests;
use super::session::Sessions;
use serde::Serialize;
use serde_json::{Value, json};

/// Rows of each kind one bridge reports at most.
pub const MAX_ROWS: usize = 100;
/// A request's params larger than this (serialized) are summarized.
pub const MAX_PARAMS: usize = 16 * 1024;

/// One pending permission request or elicitation.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingRow {
    /// Its session.
    pub session_id: String,
    /// The session's title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The id an attached client receives the request under (and answers).
    pub request_id: u64,
    /// `session/request_permission` or `elicitation/create`.
    pub method: String,
    /// The request's params (summarized when large).
    pub params: Value,
    /// When the agent asked, epoch ms.
    pub since: u64,
}

/// One turn: running, waiting for a client, or queued behind another.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnRow {
    /// Its session.
    pub session_id: String,
    /// The session's title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// `running`, `waiting` (a permission or elicitation pending) or `pending` (queued).
    pub status: &'static str,
    /// When it started (queued: when it was queued), epoch ms.
    pub started_at: u64,
    /// `editor` or `remote:<client id>`.
    pub prompted_by: String,
    /// The prompting client's `clientInfo.name`, when it gave one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_name: Option<String>,
}

/// Both lists, oldest first, and how many rows were left out past [`MAX_ROWS`].
#[derive(Clone, Debug, Default, Serialize)]
pub struct Glance {
    /// Pending requests.
    pub pending: Vec<PendingRow>,
    /// Pending requests left out.
    pub pending_truncated: usize,
    /// Turns.
    pub turns: Vec<TurnRow>,
    /// Turns left out.
    pub turns_truncated: usize,
}

/// The glance, from the router's memory.
pub(super) fn glance(requests: &Requests, sessions: &Sessions, clients: &Clients) -> Glance {
    let mut pending: Vec<PendingRow> = requests
        .iter()
        .filter(|(_, r)| r.broadcast)
        .filter_map(|(key, r)| {
            let sid = r.session.as_ref()?;
            Some(PendingRow {
                session_id: sid.clone(),
                title: sessions.get(sid).and_then(|s| s.title.clone()),
                request_id: *key,
                method: r.msg.method().to_owned(),
                params: bounded(r.msg.params_value()),
                since: r.since,
            })
        })
        .collect();
    pending.sort_by_key(|p| (p.since, p.request_id));
    let mut turns = Vec::new();
    for s in sessions.values() {
        if let (true, Some(start)) = (s.running, &s.turn_start) {
            let status = if s.requests.is_empty() { "running" } else { "waiting" };
            turns.push(turn_row(clients, &s.id, &s.title, status, start.at, start.by.clone()));
        }
        for q in &s.queue {
            let by = clients.turn_start(q.client).by;
            turns.push(turn_row(clients, &s.id, &s.title, "pending", q.queued_at, by));
        }
    }
    turns.sort_by(|a, b| a.started_at.cmp(&b.started_at).then_with(|| a.session_id.cmp(&b.session_id)));
    let (pending_truncated, turns_truncated) =
        (pending.len().saturating_sub(MAX_ROWS), turns.len().saturating_sub(MAX_ROWS));
    pending.truncate(MAX_ROWS);
    turns.truncate(MAX_ROWS);
    Glance { pending, pending_truncated, turns, turns_truncated }
}

fn turn_row(
    clients: &Clients,
    sid: &str,
    title: &Option<String>,
    status: &'static str,
    at: u64,
    prompted_by: String,
) -> TurnRow {
    // `remote:<client id>` (the turn record's spelling): that client's name, if it is here.
    let id = match prompted_by.as_str() {
        "editor" => Some(super::EDITOR),
        by => by.strip_prefix("remote:").and_then(|n| n.parse::<ClientId>().ok()),
    };
    let client = id.and_then(|id| clients.get(&id));
    TurnRow {
        session_id: sid.to_owned(),
        title: title.clone(),
        status,
        started_at: at,
        prompted_by,
        client_name: client.and_then(|c| c.name.clone()),
    }
}

/// `params`, or when it serializes past [`MAX_PARAMS`], what a person decides on: the
/// message, the options, the tool call's id, title and kind, the mode and the form's schema
/// when small; `truncated: true` says so.
fn bounded(params: Value) -> Value {
    if params.to_string().len() <= MAX_PARAMS {
        return params;
    }
    let tool = &params["toolCall"];
    let mut out = json!({
        "sessionId": params["sessionId"],
        "options": params["options"],
        "toolCall": {"toolCallId": tool["toolCallId"], "title": tool["title"], "kind": tool["kind"]},
        "message": params["message"],
        "mode": params["mode"],
        "truncated": true,
    });
    if out.to_string().len() > MAX_PARAMS {
        out = json!({"sessionId": params["sessionId"], "truncated": true});
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_params_are_cut_to_what_a_person_decides_on() {
        let small = json!({"sessionId": "s", "toolCall": {"title": "t"}});
        assert_eq!(bounded(small.clone()), small);
        let big = json!({"sessionId": "s", "options": [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}],
            "toolCall": {"toolCallId": "c", "title": "Edit", "kind": "edit", "content": "x".repeat(100_000)}});
        let cut = bounded(big);
        assert_eq!(cut["truncated"], true);
        assert_eq!(cut["toolCall"]["title"], "Edit");
        assert_eq!(cut["options"][0]["optionId"], "allow");
        assert!(cut.to_string().len() < MAX_PARAMS);
        let huge = json!({"sessionId": "s", "message": "m".repeat(100_000)});
        assert_eq!(bounded(huge), json!({"sessionId": "s", "truncated": true}));
    }
}
