//! The routing table, by hand: every request passes here once. CORS goes on every API answer,
//! any `OPTIONS` is a 204 without auth, `GET /api/health` and the web client's pages need no
//! token, registration may carry its token in a (small) body, and everything else needs the
//! token before it is even routed. No route reads a byte of body before the token is checked,
//! except registration's at most 8 KiB. A request that authenticates takes its connection out
//! of the pre-auth pool ([`zcode_shared::slots::Slot::authenticate`]); the token-carrying
//! WebSocket subprotocol is removed from the request right after the check. The token may be
//! the machine's or a paired device's ([`crate::devices`]); a `watch` device gets 403 for
//! anything that changes something, and changes are recorded in the audit trail.
//!
//! | route | module |
//! | --- | --- |
//! | `GET|HEAD /api/health` | here |
//! | `POST /api/register`, `POST /api/unregister` | [`register`] |
//! | `GET /api/instances[?probe=1]` | [`instances`] |
//! | `* /api/instances/{id}/{rest}` | [`instance_relay`] (to the bridge's `/{rest}`; a permission answered over HTTP is `POST …/sessions/{sid}/permissions/{requestId}`) |
//! | `POST /api/instances` | [`create`] (a new bridge for a project) |
//! | `GET /api/agents` | [`agents`] (the agents a create may name) |
//! | `GET /api/projects`, `GET /api/projects/sessions`, `POST /api/projects/delete`, `GET /api/fs/list` | [`projects`] |
//! | `GET /api/quota`, `GET /api/settings/quota` | [`quota`] |
//! | `GET /api/push/vapid-public-key`, `POST|DELETE /api/push/subscriptions`, `POST /api/push/mute` | [`push`] |
//! | `GET /api/settings/usage` | [`usage`] |
//! | `* /api/settings/{rest}`, `POST /api/backend/restart` (501) | [`settings`] |
//! | `GET /api/version`, `POST /api/upgrade` | [`version`], [`crate::upgrade`] |
//! | `GET /api/attention` | [`crate::attention`] |
//! | `GET /api/workflow-overview` | [`crate::overview`] |
//! | `GET /api/home` (the three above in one) | [`home`] |
//! | `POST /api/pairing`, `POST /api/pair`, `/api/pair/challenge`, `/api/pair/token` (no token), `POST /api/pair/key`, `GET /api/devices`, `PATCH|DELETE /api/devices/{id}`, `GET /api/audit` | [`devices`] |
//! | `GET /acp?instance={id}` (WebSocket) | [`acp`] (a whole upgrade head in the first bytes before hyper: `acp::direct`) |
//! | `GET|HEAD` of any other path (no token) | [`crate::web`]: the web client |

pub mod acp;
pub mod agents;
pub mod create;
pub mod devices;
pub mod home;
pub mod instance_relay;
pub mod instances;
pub mod projects;
pub mod push;
pub mod quota;
pub mod register;
pub mod settings;
pub mod usage;
pub mod version;

use crate::Hub;
use crate::auth::{self, Principal, Scope};
use crate::http::{self, Resp, text};
use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use zcode_shared::slots::Slot;

/// Answers one request (the hyper service function).
pub async fn handle(
    req: Request<Incoming>,
    hub: Arc<Hub>,
    peer: SocketAddr,
    slot: Arc<Slot>,
) -> Result<Resp, Infallible> {
    let method = req.method().clone();
    // The web client's files are read by the page itself, never across origins: no CORS
    // headers on them (a first visit fetches thirty of them).
    let page = matches!(method, Method::GET | Method::HEAD) && !crate::web::is_api(req.uri().path());
    // Only a redacted URI is ever logged: `?token=` must not reach a log file.
    let uri = tracing::enabled!(tracing::Level::DEBUG).then(|| http::redacted(req.uri()));
    let mut resp = if method == Method::OPTIONS {
        http::empty(StatusCode::NO_CONTENT)
    } else {
        dispatch(req, &hub, peer, &slot).await
    };
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS && !page {
        http::cors(resp.headers_mut());
    }
    if let Some(uri) = uri {
        tracing::debug!(%method, %uri, status = resp.status().as_u16(), "request");
    }
    Ok(resp)
}

/// Takes an authenticated request's connection out of the pre-auth pool: the 503 when the
/// pool of authenticated connections is full.
pub fn admit(slot: &Slot) -> Result<(), Box<Resp>> {
    match slot.authenticate() {
        true => Ok(()),
        false => Err(Box::new(text(StatusCode::SERVICE_UNAVAILABLE, "too many connections"))),
    }
}

async fn dispatch(mut req: Request<Incoming>, hub: &Arc<Hub>, peer: SocketAddr, slot: &Slot) -> Resp {
    match (req.method(), req.uri().path()) {
        (&Method::GET | &Method::HEAD, "/api/health") => return text(StatusCode::OK, "ok"),
        (&Method::POST, "/api/register") => return register::register(req, hub, peer, slot).await,
        (&Method::POST, "/api/unregister") => return register::unregister(req, hub, peer, slot).await,
        _ => {}
    }
    // The web client's assets need no token: the page carries it (see `crate::web`). A
    // WebSocket upgrade is never answered with a page: on a wrong path it is a plain 404.
    let upgrade = req.headers().contains_key(hyper::header::UPGRADE);
    if let Some(page) = crate::web::serve(req.method(), req.uri().path(), req.headers()).filter(|_| !upgrade)
    {
        return page;
    }
    let addr = auth::client_addr(req.headers(), peer, hub.cfg.remote.client_address_header.as_deref());
    match (req.method(), req.uri().path()) {
        (&Method::POST, "/api/pair") => return devices::pair(req, hub, addr).await,
        (&Method::POST, "/api/pair/challenge") => return devices::challenge(hub, addr),
        (&Method::POST, "/api/pair/token") => return devices::access_token(req, hub, addr).await,
        _ => {}
    }
    let who = {
        let token = auth::presented(req.headers(), req.uri());
        match crate::devices::authenticate(hub, token.as_deref(), addr).await {
            Ok(who) => who,
            Err(refused) => return refused.response(),
        }
    };
    if let Err(full) = admit(slot) {
        return *full;
    }
    crate::devices::hold(hub, slot.id, &who);
    auth::strip_subprotocol_token(req.headers_mut());
    let audited = crate::devices::audit::action_of(req.method(), req.uri().path());
    let resp = if who.scope() == Scope::Watch && !crate::devices::watch_may(req.method(), req.uri().path()) {
        http::json(StatusCode::FORBIDDEN, &serde_json::json!({"error": "this device can only watch"}))
    } else {
        route(req, hub, peer, slot, &who).await
    };
    if let Some((action, target)) = audited {
        crate::devices::audit::record(hub, &who, action, target, Some(resp.status().as_u16())).await;
    }
    resp
}

/// Routes an authenticated request (`who` may make it).
async fn route(
    req: Request<Incoming>,
    hub: &Arc<Hub>,
    peer: SocketAddr,
    slot: &Slot,
    who: &Principal,
) -> Resp {
    let path = req.uri().path();
    if path == "/api/instances" {
        return match *req.method() {
            Method::GET => instances::list(&req, hub).await,
            Method::POST => create::create(req, hub).await,
            _ => text(StatusCode::NOT_FOUND, "not found"),
        };
    }
    match (req.method(), path) {
        (&Method::GET, "/api/projects") => return projects::list(hub).await,
        (&Method::GET, "/api/agents") => return agents::list(hub),
        (&Method::GET, "/api/projects/sessions") => return projects::sessions(&req, hub).await,
        (&Method::POST, "/api/projects/delete") => return projects::delete(req, hub).await,
        (&Method::GET, "/api/fs/list") => return projects::fs_list(&req, hub).await,
        (&Method::GET, "/api/settings/usage") => return usage::usage(&req, hub).await,
        (&Method::GET, "/api/quota" | "/api/settings/quota") => return quota::quota(hub).await,
        (&Method::GET, "/api/push/vapid-public-key") => return push::vapid_public_key(hub).await,
        (&Method::POST, "/api/push/subscriptions") => return push::subscribe(req, hub, who).await,
        (&Method::POST, "/api/pairing") => return devices::new_code(req, hub).await,
        (&Method::POST, "/api/pair/key") => return devices::register_key(req, hub, who).await,
        (&Method::GET, "/api/devices") => return devices::list(hub, who).await,
        (&Method::GET, "/api/audit") => return devices::audit(&req, hub).await,
        (&Method::DELETE, "/api/push/subscriptions") => return push::unsubscribe(req, hub).await,
        (&Method::POST, "/api/push/mute") => return push::mute(req, hub).await,
        (&Method::GET, "/api/version") => return version::get(&req, hub).await,
        (&Method::GET, "/api/attention") => return crate::attention::get(hub).await,
        (&Method::GET, "/api/workflow-overview") => return crate::overview::get(hub).await,
        (&Method::GET, "/api/home") => return home::get(hub).await,
        (&Method::POST, "/api/upgrade") => return crate::upgrade::post(hub).await,
        _ => {}
    }
    if let Some(rest) = path.strip_prefix("/api/settings/") {
        let rest = rest.to_owned();
        return settings::route(req, hub, &rest).await;
    }
    if path == "/api/backend/restart" {
        return settings::hub_restart();
    }
    if let Some(id) = path.strip_prefix("/api/devices/") {
        let id = id.to_owned();
        return devices::one(req, hub, &id).await;
    }
    if let Some(tail) = path.strip_prefix("/api/instances/") {
        return match tail.split_once('/') {
            Some((id, rest)) if !id.is_empty() && !rest.is_empty() => {
                let (id, rest) = (id.to_owned(), rest.to_owned());
                instance_relay::relay(req, hub, &id, &rest, who.scope(), who.device_id()).await
            }
            _ => text(StatusCode::NOT_FOUND, "not found"),
        };
    }
    if path == "/acp" && req.method() == Method::GET {
        return acp::upgrade(req, hub, slot.id, peer, who).await;
    }
    text(StatusCode::NOT_FOUND, "not found")
}
