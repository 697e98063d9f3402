//! `{hub}/api/settings/hooks…`: the hooks tree of this machine's `config.json` (the same
//! routes as a bridge's loopback `/settings/hooks…`, through the same
//! [`zcode_bridge::hooks::routes::serve_file`], on the blocking pool).

use crate::Hub;
use crate::http::{self, Resp};
use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use serde_json::{Value, json};
use std::sync::Arc;

/// `rest` is the path after `/api/settings/hooks`.
pub async fn route(req: Request<Incoming>, hub: &Arc<Hub>, rest: &str) -> Resp {
    if !(rest.is_empty() || rest.starts_with('/')) {
        return http::text(StatusCode::NOT_FOUND, "not found");
    }
    let method = req.method().as_str().to_owned();
    let body = if req.method() == Method::GET {
        Value::Null
    } else {
        match http::read_json(req).await {
            Ok(v) => v,
            Err(e) => return e.response(),
        }
    };
    let (rest, file) = (rest.to_owned(), hub.config().paths.config_file.clone());
    let served = tokio::task::spawn_blocking(move || {
        zcode_bridge::hooks::routes::serve_file(&method, &rest, &file, &body)
    })
    .await;
    let (status, v) = match served {
        Ok(Some(answer)) => answer,
        Ok(None) => (404, json!({"ok": false, "error": "unknown route"})),
        Err(_) => (500, json!({"ok": false, "error": "the settings writer failed"})),
    };
    http::json(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), &v)
}
