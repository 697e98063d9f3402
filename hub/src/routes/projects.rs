//! The project APIs: `GET /api/projects` (the known-project list, which is also the create
//! whitelist), `GET /api/projects/sessions` (a project's history, paged, with the headless
//! serve instance that serves it), `POST /api/projects/delete`, and `GET /api/fs/list` (browse
//! directories to create in).

// The errors here are the HTTP answers to send, built once on a cold path: boxing them would
// only add noise.
#![allow(clippy::result_large_err)]

use crate::Hub;
use crate::catalog;
use crate::http::{self, Resp, json, say, store_unavailable};
use hyper::body::Incoming;
use hyper::{Request, StatusCode};
use serde_json::{Value, json};
use std::sync::Arc;

/// `GET /api/projects`.
pub async fn list(hub: &Hub) -> Resp {
    match catalog::known_projects(&hub.store, hub.config()).await {
        Ok(rows) => json(
            StatusCode::OK,
            &Value::Array(
                rows.into_iter()
                    .map(|(w, n, t)| json!({"workspacePath": w, "sessions": n, "lastActive": t}))
                    .collect(),
            ),
        ),
        Err(e) => store_unavailable(e),
    }
}

/// `POST /api/projects/delete {workspacePath}`: soft-deletes every session of the project.
pub async fn delete(req: Request<Incoming>, hub: &Hub) -> Resp {
    let body = match http::read_json(req).await {
        Ok(b) => b,
        Err(e) => return e.response(),
    };
    let Some(ws) = body["workspacePath"].as_str().filter(|w| !w.is_empty()) else {
        return say(StatusCode::BAD_REQUEST, "workspacePath required");
    };
    let ws = ws.to_owned();
    let resolved = tokio::task::spawn_blocking(move || {
        std::fs::canonicalize(&ws).map(|p| p.display().to_string()).unwrap_or(ws)
    });
    let Ok(ws) = resolved.await else {
        return say(StatusCode::INTERNAL_SERVER_ERROR, "the path check failed (see the hub's log)");
    };
    let deleted = hub.store.run(move |st| st.write(|w| w.delete_project(&ws))).await;
    match deleted {
        Ok(Ok(n)) => json(StatusCode::OK, &json!({"ok": true, "deletedTasks": n})),
        Ok(Err(e)) => store_unavailable(e),
        Err(e) => store_unavailable(e),
    }
}

/// `GET /api/fs/list?path=`: one directory level, subdirectories only.
pub async fn fs_list(req: &Request<Incoming>, hub: &Hub) -> Resp {
    let cfg = hub.config();
    let requested = http::query_param(req.uri(), "path").map(|p| p.into_owned()).filter(|p| !p.is_empty());
    let requested = requested.or_else(|| std::env::var("HOME").ok()).unwrap_or_else(|| "/".into());
    if !requested.starts_with('/') || requested.contains('\0') {
        return say(StatusCode::BAD_REQUEST, "absolute path required");
    }
    // Listing a directory (a stat per entry, thousands of them) on the blocking pool: never on
    // an async worker, and never on the store thread, where it would stall every query.
    let listed = tokio::task::spawn_blocking(move || {
        crate::hold::point("fs-list");
        let path = std::fs::canonicalize(&requested).ok()?;
        let entries = std::fs::read_dir(&path).ok()?;
        let mut names: Vec<Vec<u8>> = entries
            .flatten()
            .filter(|e| std::fs::metadata(e.path()).is_ok_and(|m| m.is_dir()))
            .map(|e| std::os::unix::ffi::OsStrExt::as_bytes(e.file_name().as_os_str()).to_vec())
            .collect();
        names.sort();
        Some((path, names))
    });
    let (path, mut names) = match listed.await {
        Err(e) => return say(StatusCode::INTERNAL_SERVER_ERROR, format!("listing failed: {e}")),
        Ok(None) => return say(StatusCode::NOT_FOUND, "directory not found"),
        Ok(Some(l)) => l,
    };
    let rows = match hub.store.run(catalog::project_rows).await {
        Ok(Ok(rows)) => rows,
        Ok(Err(e)) => return store_unavailable(e),
        Err(e) => return store_unavailable(e),
    };
    let at = path.clone();
    let creatable = tokio::task::spawn_blocking(move || catalog::creatable(&rows, &cfg, &at)).await;
    let Ok(creatable) = creatable else {
        return say(StatusCode::INTERNAL_SERVER_ERROR, "the project check failed (see the hub's log)");
    };
    let truncated = names.len() > 2000;
    names.truncate(2000);
    json(
        StatusCode::OK,
        &json!({
            "path": path.display().to_string(),
            "parent": path.parent().map(|p| p.display().to_string()),
            "creatable": creatable,
            "entries": names.iter().map(|n| json!({"name": String::from_utf8_lossy(n)})).collect::<Vec<_>>(),
            "truncated": truncated,
        }),
    )
}

/// `GET /api/projects/sessions?workspacePath=&limit=&before=&beforeId=`.
pub async fn sessions(req: &Request<Incoming>, hub: &Arc<Hub>) -> Resp {
    let uri = req.uri();
    let Some(ws) = http::query_param(uri, "workspacePath").map(|w| w.into_owned()).filter(|w| !w.is_empty())
    else {
        return say(StatusCode::BAD_REQUEST, "workspacePath required");
    };
    let limit = match http::query_param(uri, "limit") {
        None => 20,
        Some(l) => match l.parse::<i64>() {
            Ok(n) if (1..=200).contains(&n) => n,
            _ => return say(StatusCode::BAD_REQUEST, format!("invalid limit {l:?}: 1 to 200")),
        },
    };
    let before = match (http::query_param(uri, "before"), http::query_param(uri, "beforeId")) {
        (None, None) => None,
        (Some(b), id) => match b.parse::<i64>() {
            Ok(t) if t >= 0 => Some((t, id.map(|i| i.into_owned()).unwrap_or_default())),
            _ => {
                return say(
                    StatusCode::BAD_REQUEST,
                    format!("invalid before {b:?}: epoch milliseconds expected"),
                );
            }
        },
        (None, Some(_)) => return say(StatusCode::BAD_REQUEST, "invalid before: beforeId needs before"),
    };
    let known = match catalog::known_projects(&hub.store, hub.config()).await {
        Ok(known) => known,
        Err(e) => return store_unavailable(e),
    };
    let path = tokio::task::spawn_blocking(move || std::fs::canonicalize(&ws).ok()).await.ok().flatten();
    let Some(path) = path.filter(|p| known.iter().any(|(w, _, _)| *w == p.display().to_string())) else {
        return say(StatusCode::FORBIDDEN, "unknown project");
    };
    let path_s = path.display().to_string();
    // The headless serve bridge that serves this project's history (incubated if none runs).
    let instance = match crate::launch::headless_for(hub, &path).await {
        Ok(id) => id,
        Err(r) => return r,
    };
    let live: Vec<String> = hub.bridges.registry().sessions_in(&path_s, std::time::Instant::now());
    let ws = path_s.clone();
    let rows = hub
        .store
        .run(move |st| {
            st.read(|st| {
                st.project_sessions(&ws, before.as_ref().map(|(t, id)| (*t, id.as_str())), limit, &live)
            })
        })
        .await;
    let rows = match rows {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return say(StatusCode::BAD_GATEWAY, format!("broken list: {e}")),
        Err(e) => return store_unavailable(e),
    };
    let agent = hub.bridges.registry().agent_of(&instance, std::time::Instant::now());
    let more = rows.len() as i64 > limit;
    let rows = &rows[..rows.len().min(limit as usize)];
    let next = if more {
        rows.last().map(|r| json!({"before": r.updated_at, "beforeId": r.session_id})).unwrap_or(Value::Null)
    } else {
        Value::Null
    };
    let sessions: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!({"sessionId": r.session_id, "title": r.title, "cwd": r.cwd, "agent": r.agent,
                   "updatedAt": zcode_shared::time::iso8601(r.updated_at.max(0) as u64), "live": false, "running": false})
        })
        .collect();
    json(
        StatusCode::OK,
        &json!({"workspacePath": path_s, "instance": {"id": instance, "origin": "serve", "agent": agent}, "sessions": sessions, "nextCursor": next}),
    )
}
