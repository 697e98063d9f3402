//! `GET /settings/usage?range=7d|30d|all` on the bridge's loopback server: the contract's
//! usage payload, read from the machine's store (so every bridge and the hub answer alike).
//! A bad `range` is a 400 `{ok:false, error}`; a store that cannot be opened a 503.

use super::Recorder;
use crate::http::query::Query;
use crate::http::{Resp, full};
use hyper::StatusCode;
use hyper::header::{self, HeaderValue};
use serde_json::{Value, json};

/// Answers the route.
pub async fn usage(query: Option<&str>, recorder: &Recorder) -> Resp {
    let range = Query::parse(query)
        .and_then(|q| q.str("range").map(|r| r.map(str::to_owned)))
        .and_then(|r| zcode_shared::store::usage::range_param(r.as_deref()));
    let range = match range {
        Ok(r) => r,
        Err(e) => return json(StatusCode::BAD_REQUEST, &json!({"ok": false, "error": e})),
    };
    match recorder.report(range).await {
        Ok(v) => json(StatusCode::OK, &v),
        Err(e) => json(StatusCode::SERVICE_UNAVAILABLE, &json!({"ok": false, "error": e})),
    }
}

fn json(status: StatusCode, v: &Value) -> Resp {
    let mut r = hyper::Response::new(full(v.to_string()));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}
