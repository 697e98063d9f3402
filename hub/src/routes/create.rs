//! `POST /api/instances {workspacePath[, sessionId][, agent]}`: a NEW bridge for a known
//! project, in a terminal window (or headless), answered once it registers (see
//! [`crate::launch`] for the joining of identical creates and the caps). `agent` names one of
//! `GET /api/agents`; without it a resume runs the agent the tasks index recorded for the
//! session (when it is still configured), anything else the default.

use crate::Hub;
use crate::catalog;
use crate::http::{self, Resp, json, say, store_unavailable};
use crate::launch::launch;
use hyper::body::Incoming;
use hyper::{Request, StatusCode};
use serde_json::json;
use std::sync::Arc;

/// `POST /api/instances`.
pub async fn create(req: Request<Incoming>, hub: &Arc<Hub>) -> Resp {
    let body = match http::read_json(req).await {
        Ok(b) => b,
        Err(e) => return e.response(),
    };
    let Some(ws) = body["workspacePath"].as_str().filter(|w| !w.is_empty()) else {
        return say(StatusCode::BAD_REQUEST, "workspacePath required");
    };
    let session = match body.get("sessionId") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) if valid_id(s) => Some(s.clone()),
        Some(_) => return say(StatusCode::BAD_REQUEST, "invalid sessionId — session id expected"),
    };
    if !ws.starts_with('/') || ws.contains('\0') {
        return say(StatusCode::FORBIDDEN, "unknown project");
    }
    let cfg = hub.config();
    let agent = match body.get("agent") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(a)) if cfg.agents.knows(a) => Some(a.clone()),
        Some(other) => {
            let known = cfg.agents.choices().into_iter().map(|(n, _)| n).collect::<Vec<_>>();
            let named = other.as_str().map_or_else(|| other.to_string(), |a| format!("{a:?}"));
            return say(
                StatusCode::BAD_REQUEST,
                format!("unknown agent {named}: the agents to choose from are {}", known.join(", ")),
            );
        }
    };
    let (ws, sid, chosen) = (ws.to_owned(), session.clone(), agent.is_some());
    // The store's answers on the store thread (SQL only), the path checks on the blocking pool.
    let answers = hub
        .store
        .run(move |st| {
            let rows = catalog::project_rows(st);
            let deleted = sid.as_ref().map(|s| st.read(|st| st.is_deleted(s)));
            // A resume runs the agent that made the session, unless told otherwise.
            let recorded = match (chosen, &sid) {
                (false, Some(s)) => st.read(|st| st.session_agent(s)).ok().flatten(),
                _ => None,
            };
            (rows, deleted, recorded)
        })
        .await;
    let (rows, deleted, recorded) = match answers {
        Err(e) => return store_unavailable(e),
        Ok((Err(e), _, _)) => return store_unavailable(e),
        Ok((Ok(rows), deleted, recorded)) => (rows, deleted, recorded.filter(|a| cfg.agents.knows(a))),
    };
    let checked = tokio::task::spawn_blocking(move || {
        let path = std::fs::canonicalize(&ws).ok().filter(|p| p.is_dir())?;
        catalog::creatable(&rows, &cfg, &path).then_some(path)
    })
    .await;
    let (path, agent) = match checked {
        Err(_) => {
            return say(StatusCode::INTERNAL_SERVER_ERROR, "the project check failed (see the hub's log)");
        }
        Ok(None) => return say(StatusCode::FORBIDDEN, "unknown project"),
        Ok(Some(path)) => {
            match deleted {
                Some(Ok(Some(true))) => return say(StatusCode::NOT_FOUND, "session deleted"),
                Some(Err(e)) => return store_unavailable(e),
                _ => {}
            }
            (path, agent.or(recorded))
        }
    };
    match launch(hub, &path, session, agent, false).await {
        Ok(id) => json(StatusCode::OK, &json!({"id": id, "reused": false})),
        Err((status, msg)) => say(status, msg),
    }
}

fn valid_id(s: &str) -> bool {
    !s.is_empty() && s.len() <= 256 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.:-".contains(&b))
}
