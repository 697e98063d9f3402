//! `POST /api/instances {workspacePath[, sessionId]}`: a NEW bridge for a known project, in a
//! terminal window (or headless), answered once it registers (see [`crate::launch`] for the
//! joining of identical creates and the caps).

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
    let (ws, sid) = (ws.to_owned(), session.clone());
    // The path checks and the store's answers, off the async workers.
    let checked = hub
        .store
        .run(move |st| {
            let path = std::fs::canonicalize(&ws).ok().filter(|p| p.is_dir())?;
            let creatable = catalog::creatable(st, &cfg, &path);
            let deleted = sid.map(|s| st.read(|st| st.is_deleted(&s)));
            Some((path, creatable, deleted))
        })
        .await;
    let path = match checked {
        Err(e) => return store_unavailable(e),
        Ok(None) => return say(StatusCode::FORBIDDEN, "unknown project"),
        Ok(Some((path, creatable, deleted))) => {
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
            path
        }
    };
    match launch(hub, &path, session, false).await {
        Ok(id) => json(StatusCode::OK, &json!({"id": id, "reused": false})),
        Err((status, msg)) => say(status, msg),
    }
}

fn valid_id(s: &str) -> bool {
    !s.is_empty() && s.len() <= 256 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.:-".contains(&b))
}
