//! The loopback settings mount: `/settings/*` (the same routes and semantics as the hub's
//! `/api/settings/*`, relayed per instance by the hub as `/api/instances/{id}/settings/*`)
//! and `POST /backend/restart`. The routes themselves are [`zcode_shared::settings::api`];
//! this bridge adds what only it knows: its agent's report, its `needs-restart` count (hooks,
//! MCP, subagent writes alike) and, for `all`, its usage recorder's payload.

use crate::http::{Resp, full, text};
use crate::router::Event;
use crate::router::settings::{SettingsEvent, SettingsHandle};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use serde_json::{Value, json};
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use zcode_shared::settings::{Host, MAX_BODY, Mount, Settings, api, is_all};
use zcode_shared::store::usage::UsageRange;

/// How long a settings body may take to arrive.
const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a restart may take (cancelled turns' grace, then the group's stop).
const RESTART_TIMEOUT: Duration = Duration::from_secs(15);

/// What the mount needs.
pub struct Mounted {
    /// Where the files are.
    pub settings: Settings,
    /// The router's published view.
    pub handle: SettingsHandle,
    /// The usage recorder: the `usage` section of `all`.
    pub usage: crate::usage::Recorder,
}

/// `* /settings/{rest}`.
pub async fn route(req: Request<Incoming>, m: &Mounted, rest: &str) -> Resp {
    let method = req.method().as_str().to_owned();
    let query = req.uri().query().map(str::to_owned);
    let rest = rest.to_owned();
    let body = match read_body(req).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    let usage = match is_all(&method, &rest) {
        true => Some(m.usage.report(UsageRange::Week).await),
        false => None,
    };
    let host = Host {
        mount: Mount::Bridge,
        agent: m.handle.report.borrow().clone(),
        live_agents: Vec::new(),
        pending_restart: m.handle.pending.load(Ordering::SeqCst),
        usage,
    };
    let settings = m.settings.clone();
    let reply = tokio::task::spawn_blocking(move || {
        api::handle(&settings, &host, &method, &rest, query.as_deref(), &body)
    })
    .await;
    match reply {
        Ok(r) => {
            if r.needs_restart {
                m.handle.pending.fetch_add(1, Ordering::SeqCst);
            }
            json_resp(r.status, &r.body)
        }
        Err(_) => json_resp(500, &json!({"ok": false, "error": "the settings request failed"})),
    }
}

/// `POST /backend/restart`: `{ok, cancelledTurns, closed}`.
pub async fn restart(events: &mpsc::Sender<Event>) -> Resp {
    let (tx, rx) = oneshot::channel();
    if events.send(Event::Settings(SettingsEvent::Restart(tx))).await.is_err() {
        return text(StatusCode::SERVICE_UNAVAILABLE, "bridge shutting down");
    }
    match tokio::time::timeout(RESTART_TIMEOUT, rx).await {
        Ok(Ok(Ok(o))) => {
            json_resp(200, &json!({"ok": true, "cancelledTurns": o.cancelled_turns, "closed": o.closed}))
        }
        Ok(Ok(Err(why))) => json_resp(409, &json!({"ok": false, "error": why})),
        _ => json_resp(504, &json!({"ok": false, "error": "the restart did not finish in time"})),
    }
}

fn json_resp(status: u16, body: &Value) -> Resp {
    let mut r = Response::new(full(body.to_string()));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// The body, at most 256 KiB (413 announced or actual), within 10 s (408).
async fn read_body(req: Request<Incoming>) -> Result<Vec<u8>, Resp> {
    let too_big = || json_resp(413, &json!({"ok": false, "error": "body too large (256 KiB at most)"}));
    let announced =
        req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
    if announced.is_some_and(|n| n > MAX_BODY as u64) {
        return Err(too_big());
    }
    let body = Limited::new(req.into_body(), MAX_BODY);
    match tokio::time::timeout(BODY_TIMEOUT, body.collect()).await {
        Err(_) => Err(json_resp(408, &json!({"ok": false, "error": "body too slow"}))),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(too_big()),
        Ok(Err(_)) => Err(json_resp(400, &json!({"ok": false, "error": "body could not be read"}))),
        Ok(Ok(c)) => Ok(c.to_bytes().to_vec()),
    }
}
