//! The project APIs: `GET /api/projects` (the known-project list, which is also the create
//! whitelist), `GET /api/projects/sessions` (a project's history, paged, with the headless
//! serve instance that serves it), `POST /api/projects/delete`, and `GET /api/fs/list` (browse
//! directories to create in).

// The errors here are the HTTP answers to send, built once on a cold path: boxing them would
// only add noise.
#![allow(clippy::result_large_err)]

use crate::Hub;
use crate::http::{self, Resp, json};
use hyper::body::Incoming;
use hyper::{Request, StatusCode};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use zcode_shared::config::Config;
use zcode_shared::store::Store;

/// A `text/plain` answer with a message of our own.
pub fn say(status: StatusCode, msg: impl Into<String>) -> Resp {
    let mut r = json(status, &Value::Null);
    *r.body_mut() = http::full(msg.into());
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// The configuration as it is now (project roots are read live).
pub fn live_config(hub: &Hub) -> Config {
    Config::load().unwrap_or_else(|_| hub.cfg.clone())
}

/// Opens the machine's store (read/write; the hub is one more writer among the bridges).
pub fn store(hub: &Hub) -> Result<Store, Resp> {
    Store::open_in(&hub.cfg.paths.data_dir)
        .map_err(|e| say(StatusCode::SERVICE_UNAVAILABLE, format!("tasks index unavailable: {e}")))
}

/// Whether `p` lies under one of the configured project roots (or is one).
fn under_root(cfg: &Config, p: &Path) -> bool {
    cfg.remote.project_roots.iter().filter_map(|r| std::fs::canonicalize(r).ok()).any(|r| p.starts_with(&r))
}

/// Trees a project list never shows: system temp dirs and our own files (unless a configured
/// root says otherwise).
fn hidden(cfg: &Config, p: &Path) -> bool {
    if under_root(cfg, p) {
        return false;
    }
    let temp = [
        std::env::temp_dir(),
        PathBuf::from("/tmp"),
        PathBuf::from("/var/tmp"),
        PathBuf::from("/private/var/folders"),
    ];
    let ours = [&cfg.paths.data_dir, &cfg.paths.log_dir, &cfg.paths.run_dir];
    temp.iter().any(|t| p.starts_with(t))
        || ours.iter().any(|o| p.starts_with(o))
        || cfg.paths.config_file.parent().is_some_and(|c| p.starts_with(c))
}

/// The known projects: workspaces that ran a session, filtered, newest first.
pub fn known_projects(hub: &Hub, cfg: &Config) -> Result<Vec<(String, i64, i64)>, Resp> {
    let rows = store(hub)?.projects().map_err(|e| say(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?;
    Ok(rows
        .into_iter()
        .filter(|r| {
            let p = Path::new(&r.workspace);
            p.is_dir() && !hidden(cfg, p)
        })
        .map(|r| (r.workspace, r.sessions, r.last_active))
        .collect())
}

/// Whether a new session may start in `p` (a realpath): a known project or under a root.
pub fn creatable(hub: &Hub, cfg: &Config, p: &Path) -> Result<bool, Resp> {
    if under_root(cfg, p) {
        return Ok(true);
    }
    let s = p.display().to_string();
    Ok(known_projects(hub, cfg)?.iter().any(|(w, _, _)| *w == s))
}

/// `GET /api/projects`.
pub fn list(hub: &Hub) -> Resp {
    let cfg = live_config(hub);
    match known_projects(hub, &cfg) {
        Ok(rows) => json(
            StatusCode::OK,
            &Value::Array(
                rows.into_iter()
                    .map(|(w, n, t)| json!({"workspacePath": w, "sessions": n, "lastActive": t}))
                    .collect(),
            ),
        ),
        Err(r) => r,
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
    let ws = std::fs::canonicalize(ws).map(|p| p.display().to_string()).unwrap_or_else(|_| ws.to_owned());
    let mut st = match store(hub) {
        Ok(s) => s,
        Err(r) => return r,
    };
    match st.write(|w| w.delete_project(&ws)) {
        Ok(n) => json(StatusCode::OK, &json!({"ok": true, "deletedTasks": n})),
        Err(e) => say(StatusCode::SERVICE_UNAVAILABLE, format!("tasks index unavailable: {e}")),
    }
}

/// `GET /api/fs/list?path=`: one directory level, subdirectories only.
pub fn fs_list(req: &Request<Incoming>, hub: &Hub) -> Resp {
    let cfg = live_config(hub);
    let requested = http::query_param(req.uri(), "path").map(|p| p.into_owned()).filter(|p| !p.is_empty());
    let requested = requested.or_else(|| std::env::var("HOME").ok()).unwrap_or_else(|| "/".into());
    if !requested.starts_with('/') || requested.contains('\0') {
        return say(StatusCode::BAD_REQUEST, "absolute path required");
    }
    let Ok(path) = std::fs::canonicalize(&requested) else {
        return say(StatusCode::NOT_FOUND, "directory not found");
    };
    let Ok(entries) = std::fs::read_dir(&path) else {
        return say(StatusCode::NOT_FOUND, "directory not found");
    };
    let mut names: Vec<Vec<u8>> = entries
        .flatten()
        .filter(|e| std::fs::metadata(e.path()).is_ok_and(|m| m.is_dir()))
        .map(|e| std::os::unix::ffi::OsStrExt::as_bytes(e.file_name().as_os_str()).to_vec())
        .collect();
    names.sort();
    let truncated = names.len() > 2000;
    names.truncate(2000);
    let creatable = match creatable(hub, &cfg, &path) {
        Ok(c) => c,
        Err(r) => return r,
    };
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
    let cfg = live_config(hub);
    let Ok(path) = std::fs::canonicalize(&ws) else { return say(StatusCode::FORBIDDEN, "unknown project") };
    let path_s = path.display().to_string();
    match known_projects(hub, &cfg) {
        Ok(known) if known.iter().any(|(w, _, _)| *w == path_s) => {}
        Ok(_) => return say(StatusCode::FORBIDDEN, "unknown project"),
        Err(r) => return r,
    }
    // The headless serve bridge that serves this project's history (incubated if none runs).
    let instance = match super::create::headless_for(hub, &path).await {
        Ok(id) => id,
        Err(r) => return r,
    };
    let live: Vec<String> = hub.registry().sessions_in(&path_s, std::time::Instant::now());
    let st = match store(hub) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let rows =
        match st.project_sessions(&path_s, before.as_ref().map(|(t, id)| (*t, id.as_str())), limit, &live) {
            Ok(r) => r,
            Err(e) => return say(StatusCode::BAD_GATEWAY, format!("broken list: {e}")),
        };
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
            json!({"sessionId": r.session_id, "title": r.title, "cwd": r.cwd,
                   "updatedAt": zcode_shared::time::iso8601(r.updated_at.max(0) as u64), "live": false, "running": false})
        })
        .collect();
    json(
        StatusCode::OK,
        &json!({"workspacePath": path_s, "instance": {"id": instance, "origin": "serve"}, "sessions": sessions, "nextCursor": next}),
    )
}
