//! `GET /api/home`: what the home screen shows live, in one answer: `{instances, attention,
//! overview}`, the bodies of `GET /api/instances?probe=1`, `GET /api/attention` and
//! `GET /api/workflow-overview`, read at once. The home screen polls this one route (every 4 s
//! while it is visible) instead of those three; they stay for other clients.

use crate::Hub;
use crate::http::{Resp, json};
use hyper::StatusCode;
use std::sync::Arc;

/// Answers `GET /api/home`.
pub async fn get(hub: &Arc<Hub>) -> Resp {
    let (instances, attention, overview) = tokio::join!(
        super::instances::listing(hub, true),
        crate::attention::body(hub),
        crate::overview::body(hub)
    );
    json(
        StatusCode::OK,
        &serde_json::json!({"instances": instances, "attention": attention, "overview": overview}),
    )
}
