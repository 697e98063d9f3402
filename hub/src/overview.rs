//! `GET /api/workflow-overview`: the machine's turn board, in the contract's envelope
//! (`{ok, groups, activeRuns}` plus `recentRuns`), where a run is a TURN.
//!
//! - `groups`: one per workspace. Editor and serve bridges of one project render once; the
//!   freshest-started bridge is the group's `instanceId`, its siblings in `instanceIds`. A
//!   bridge that fails to answer (dead, busy, too slow) degrades only its own group, which
//!   carries the `error`; the other bridges' runs are still served.
//! - `activeRuns`: every turn running, waiting for a permission or elicitation, or queued
//!   (`pending`), from each bridge's memory (`GET /turns`, asked all at once within the same
//!   8 s budget as the inbox, [`crate::attention::ask_all`]); `ownerInstanceId` is the bridge
//!   the turn runs in (stop and detail go there). Oldest first.
//! - `recentRuns`: the last 20 finished turns of the machine from the journal's turn records
//!   (stop reason, duration, the turn's first `prompt`), newest first, each with the live bridge listing its session
//!   when there is one.

use crate::Hub;
use crate::http::{Resp, json};
use hyper::StatusCode;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

/// How many finished turns `recentRuns` holds.
pub const RECENT: u32 = 20;

/// One workspace's group while it is assembled.
#[derive(Default)]
struct Group {
    /// (startedAt, id, origin) of its bridges.
    bridges: Vec<(u64, String, &'static str)>,
    errors: Vec<String>,
    runs: usize,
}

/// `GET /api/workflow-overview`.
pub async fn get(hub: &Arc<Hub>) -> Resp {
    json(StatusCode::OK, &body(hub).await)
}

/// The body of `GET /api/workflow-overview` (also part of `GET /api/home`).
pub async fn body(hub: &Arc<Hub>) -> Value {
    let answers = crate::attention::ask_all(hub, "/turns").await;
    let mut groups: BTreeMap<String, Group> = BTreeMap::new();
    let mut active = Vec::new();
    for (reg, answer) in &answers {
        let g = groups.entry(reg.workspace.clone()).or_default();
        g.bridges.push((reg.started_at, reg.id.clone(), reg.origin));
        let rows = answer.as_ref().map_err(Clone::clone).and_then(|v| {
            v["turns"].as_array().cloned().ok_or_else(|| "the bridge answered garbage".to_owned())
        });
        match rows {
            Ok(rows) => {
                for row in rows.into_iter().filter(Value::is_object) {
                    g.runs += 1;
                    active.push(run(reg, row));
                }
            }
            Err(e) => g.errors.push(format!("instance {}: {e}", reg.id)),
        }
    }
    active.sort_by_key(|r| r["startedAt"].as_u64().unwrap_or(0));
    let recent = recent_runs(hub).await;
    let groups: Vec<Value> = groups.into_iter().map(|(w, g)| group(&w, g)).collect();
    let mut body = json!({"ok": true, "groups": groups, "activeRuns": active});
    match recent {
        Ok(rows) => body["recentRuns"] = Value::Array(rows),
        Err(e) => {
            body["recentRuns"] = json!([]);
            body["recentRunsError"] = Value::String(e);
        }
    }
    body
}

fn group(workspace: &str, mut g: Group) -> Value {
    // The freshest-started bridge first: it answers for the project.
    g.bridges.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let ids: Vec<&str> = g.bridges.iter().map(|b| b.1.as_str()).collect();
    let mut origins: Vec<&str> = g.bridges.iter().map(|b| b.2).collect();
    origins.sort_unstable();
    origins.dedup();
    json!({
        "instanceId": ids.first(),
        "instanceIds": ids,
        "scope": "project",
        "workspace": workspace,
        "origins": origins,
        "activeRuns": g.runs,
        "error": (!g.errors.is_empty()).then(|| g.errors.join("; ")),
    })
}

/// One active run: the bridge's turn row with where it runs.
fn run(reg: &zcode_shared::registration::Registration, row: Value) -> Value {
    let sid = row["sessionId"].as_str().unwrap_or_default();
    let started = row["startedAt"].as_u64().unwrap_or(0);
    let status = row["status"].as_str().unwrap_or("running");
    json!({
        "runId": format!("{}:{sid}:{started}:{status}", reg.id),
        "sessionId": sid,
        "title": row["title"],
        "ownerInstanceId": reg.id,
        "workspace": reg.workspace,
        "status": status,
        "startedAt": started,
        "promptedBy": row["promptedBy"],
        "clientName": row["clientName"],
    })
}

/// The last [`RECENT`] finished turns from the journal, newest first.
async fn recent_runs(hub: &Arc<Hub>) -> Result<Vec<Value>, String> {
    let rows = hub.store.run(|st| st.read(|s| s.recent_turns(RECENT))).await?.map_err(|e| e.to_string())?;
    let owners = hub.bridges.registry().registrations(Instant::now());
    Ok(rows
        .into_iter()
        .map(|t| {
            let r = &t.record;
            let owner = owners
                .iter()
                .filter(|reg| reg.sessions.iter().any(|s| s.session_id == r.session_id))
                .max_by_key(|reg| reg.started_at)
                .map(|reg| reg.id.clone());
            json!({
                "sessionId": r.session_id,
                "title": t.title,
                "prompt": t.prompt,
                "workspace": t.workspace,
                "ownerInstanceId": owner,
                "turn": r.turn,
                "status": "finished",
                "stopReason": r.stop_reason,
                "error": r.error,
                "startedAt": r.started_at,
                "endedAt": r.ended_at,
                "durationMs": (r.ended_at - r.started_at).max(0),
                "promptedBy": r.prompted_by,
            })
        })
        .collect())
}
