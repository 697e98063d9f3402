//! `GET /api/quota` (token-gated): the plan quota payload of the machine's configured
//! credentials (`zcode_shared::quota`), `Cache-Control: no-store`. A provider's failure is its
//! section's `kind`; only a query that could not run at all answers 502 `quota query failed`.
//! The providers and their caches live in [`crate::Hub::quota`], rebuilt when `quota` in
//! `config.json` changes.

use crate::Hub;
use crate::http::{Resp, json, text};
use hyper::StatusCode;
use hyper::header::{CACHE_CONTROL, HeaderValue};

/// `GET /api/quota`.
pub async fn quota(hub: &Hub) -> Resp {
    let mut resp = match hub.account.quota(&hub.config()).payload().await {
        Ok(payload) => json(StatusCode::OK, &payload),
        Err(e) => {
            tracing::warn!("GET /api/quota: {e}");
            text(StatusCode::BAD_GATEWAY, "quota query failed")
        }
    };
    resp.headers_mut().insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}
