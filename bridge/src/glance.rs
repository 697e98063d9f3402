//! `GET /attention` and `GET /turns` on the loopback server: what the hub's inbox and turn
//! board read from each bridge (see `router::glance`). Answered from the router's memory, so
//! they are cheap; a router that does not answer within 2 s is `503 bridge busy`.

use crate::http::{Resp, full, text};
use crate::router::{Event, Glance};
use bytes::Bytes;
use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Which list a route answers.
#[derive(Clone, Copy, Debug)]
pub enum Part {
    /// `/attention`: `{pending, truncated}`.
    Attention,
    /// `/turns`: `{turns, truncated}`.
    Turns,
}

/// Answers `/attention` or `/turns`.
pub async fn answer(events: &mpsc::Sender<Event>, part: Part) -> Resp {
    let (tx, rx) = oneshot::channel();
    if events.send(Event::Glance(tx)).await.is_err() {
        return text(StatusCode::SERVICE_UNAVAILABLE, "bridge shutting down");
    }
    let Ok(Ok(g)) = tokio::time::timeout(Duration::from_secs(2), rx).await else {
        return text(StatusCode::SERVICE_UNAVAILABLE, "bridge busy");
    };
    let Glance { pending, pending_truncated, turns, turns_truncated } = g;
    let body = match part {
        Part::Attention => serde_json::json!({"pending": pending, "truncated": pending_truncated}),
        Part::Turns => serde_json::json!({"turns": turns, "truncated": turns_truncated}),
    };
    let mut r = Response::new(full(Bytes::from(body.to_string())));
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}
