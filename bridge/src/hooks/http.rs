//! The loopback server's `/settings/hooks…` routes (relayed by the hub as
//! `/api/instances/{id}/settings/hooks…`): the body bounded and parsed here, the rest is
//! [`super::routes::serve_file`] on this bridge's `config.json`, on the blocking pool.

use crate::files::{Resp, full};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use serde_json::{Value, json};

/// The largest settings body (the contract's 256 KiB).
pub const BODY_MAX: usize = 256 * 1024;

/// `None` when the path is not under `/settings/hooks`.
pub async fn route(req: Request<Incoming>) -> Option<Resp> {
    let rest = req.uri().path().strip_prefix("/settings/hooks")?.to_owned();
    if !(rest.is_empty() || rest.starts_with('/')) {
        return None;
    }
    let method = req.method().as_str().to_owned();
    let body = if method == "GET" {
        Value::Null
    } else {
        match read_body(req).await {
            Ok(v) => v,
            Err(msg) => return Some(json_resp(400, &json!({"ok": false, "error": msg}))),
        }
    };
    let file = match zcode_shared::paths::Paths::resolve(&zcode_shared::config::ProcessEnv) {
        Ok(p) => p.config_file,
        Err(e) => return Some(json_resp(500, &json!({"ok": false, "error": e.to_string()}))),
    };
    let answer =
        tokio::task::spawn_blocking(move || super::routes::serve_file(&method, &rest, &file, &body)).await;
    Some(match answer {
        Ok(Some((status, v))) => json_resp(status, &v),
        Ok(None) => json_resp(404, &json!({"ok": false, "error": "unknown route"})),
        Err(_) => json_resp(500, &json!({"ok": false, "error": "the settings writer failed"})),
    })
}

async fn read_body(req: Request<Incoming>) -> Result<Value, String> {
    let too_big = || format!("body too large ({} KiB at most)", BODY_MAX / 1024);
    let announced =
        req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
    if announced.is_some_and(|n| n > BODY_MAX) {
        return Err(too_big());
    }
    let body =
        http_body_util::Limited::new(req.into_body(), BODY_MAX).collect().await.map_err(|_| too_big())?;
    serde_json::from_slice(&body.to_bytes()).map_err(|e| format!("invalid JSON body: {e}"))
}

fn json_resp(status: u16, v: &Value) -> Resp {
    let mut r = Response::new(full(v.to_string()));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}
