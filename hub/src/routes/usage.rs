//! `GET /api/settings/usage?range=7d|30d|all`: the contract's usage payload, read from the
//! machine's store that every bridge records token usage into (`zcode_shared::store::usage`).
//! A bad `range` is a 400 `{ok:false, error}`; a store that cannot be used a 503.

use crate::Hub;
use crate::http::{self, Resp};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Request, StatusCode};
use serde_json::json;
use zcode_shared::store::usage::{UsageRange, range_param};

/// `GET /api/settings/usage`.
pub async fn usage(req: &Request<Incoming>, hub: &Hub) -> Resp {
    let range = match range_param(http::query_param(req.uri(), "range").as_deref()) {
        Ok(r) => r,
        Err(e) => return http::json(StatusCode::BAD_REQUEST, &json!({"ok": false, "error": e})),
    };
    let mut resp = match report(hub, range).await {
        Ok(v) => http::json(StatusCode::OK, &v),
        Err(e) => unavailable(e),
    };
    resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// The usage payload for `range` from the hub's store; `Err`: why the store could not answer
/// (also the `usage` section of `GET /api/settings/all`).
pub async fn report(hub: &Hub, range: UsageRange) -> Result<serde_json::Value, String> {
    let now = zcode_shared::time::now_ms();
    match hub.store.run(move |st| st.read(|s| s.usage_report(range, now))).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.to_string()),
        Err(e) => Err(e),
    }
}

fn unavailable(reason: String) -> Resp {
    let error = format!("the usage store is unavailable: {reason}");
    http::json(StatusCode::SERVICE_UNAVAILABLE, &json!({"ok": false, "error": error}))
}
