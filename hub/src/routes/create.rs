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
    // The path checks and the store's answers, off the async workers.
    let checked = hub
        .store
        .run(move |st| {
            let path = std::fs::canonicalize(&ws).ok().filter(|p| p.is_dir())?;
            let creatable = catalog::creatable(st, &cfg, &path);
            let deleted = sid.as_ref().map(|s| st.read(|st| st.is_deleted(s)));
            // A resume runs the agent that made the session, unless told otherwise.
            let recorded = match (chosen, &sid) {
                (false, Some(s)) => st.read(|st| st.session_agent(s)).ok().flatten(),
                _ => None,
            };
            Some((path, creatable, deleted, recorded.filter(|a| cfg.agents.knows(a))))
        })
        .await;
    let (path, agent) = match checked {
        Err(e) => return store_unavailable(e),
        Ok(None) => return say(StatusCode::FORBIDDEN, "unknown project"),
        Ok(Some((path, creatable, deleted, recorded))) => {
            match creatable {
                Ok(true) => {}
                Ok(false) => return say(StatusCode::FORBIDDEN, "unknown project"),
                Err(e) => return store_unavailable(e),
            }
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
