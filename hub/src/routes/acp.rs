//! `GET /acp?instance=<id>`: the WebSocket relay's front door. Everything that can refuse the
//! client happens BEFORE the upgrade is accepted, as a plain HTTP status: not a WebSocket
//! upgrade 400, unknown instance 404, the bridge cannot be dialed 502 (the token was checked
//! by the routing table: 401). Only then does the client get its 101 and the relay task start.
//! A client that offers the `zcode-acp` subprotocol (a browser carrying the token in the
//! subprotocol list offers it next to the token's value) gets it back: the token-carrying
//! value is never echoed, and the bridge's own dial carries no client header at all.

use crate::auth;
use crate::http::{Resp, empty, query_param, text};
use crate::relay;
use crate::upstream;
use crate::{Hub, RelayGuard};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::upgrade::OnUpgrade;
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tracing::{Instrument, Span};

/// Relays open at once, at most (each holds two sockets).
pub const MAX_RELAYS: usize = 16_384;

/// The cap: [`MAX_RELAYS`], or in a debug build `ZCODE_ACP_TEST_MAX_RELAYS` (the burst test's).
fn max_relays() -> usize {
    static MAX: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *MAX.get_or_init(|| {
        let knob = zcode_shared::env::test_knob(&zcode_shared::env::ProcessEnv, "ZCODE_ACP_TEST_MAX_RELAYS");
        knob.and_then(|v| v.trim().parse().ok()).unwrap_or(MAX_RELAYS)
    })
}

/// Whose a relay is, for its log lines: `conn{id=7 peer=…}:relay{instance=…}`. Kept as
/// fields, the span made when a line is logged: a span held for an idle relay's life would cost
/// the subscriber a few hundred bytes (an idle relay is ~1.3 KiB in all).
struct Whose {
    conn: u64,
    peer: SocketAddr,
    instance: String,
}

impl Whose {
    fn span(&self) -> Span {
        let conn = tracing::info_span!(parent: None, "conn", id = self.conn, peer = %self.peer);
        tracing::info_span!(parent: &conn, "relay", instance = self.instance.as_str())
    }
}

/// Dials the bridge for `who`'s scope (which the bridge enforces), then accepts the client's
/// upgrade and starts the relay (`conn`, `peer`: the client's connection, for the relay's log
/// lines; `who`: whose credential it is, cut when that credential is revoked or rotated).
pub async fn upgrade(
    mut req: Request<Incoming>,
    hub: &Arc<Hub>,
    conn: u64,
    peer: SocketAddr,
    who: &crate::auth::Principal,
) -> Resp {
    let Some(accept) = accept_key(&req) else {
        return text(StatusCode::BAD_REQUEST, "a WebSocket upgrade (version 13) is required");
    };
    let id = query_param(req.uri(), "instance").map(|c| c.into_owned()).unwrap_or_default();
    let Some(port) = hub.bridges.registry().port_of(&id, Instant::now()) else {
        return text(StatusCode::NOT_FOUND, "unknown instance");
    };
    // Counted before the dial is awaited: a relay being dialed holds its place under the cap.
    let Some(guard) = hub.bridges.relay_guard(max_relays()) else {
        return text(StatusCode::SERVICE_UNAVAILABLE, "too many connections");
    };
    let bridge = match upstream::dial_ws(port, &hub.auth.token.token(), who.scope(), who.device_id()).await {
        Ok(ws) => ws,
        Err(e) => {
            tracing::debug!(instance = %id, port, "cannot dial the bridge: {e}");
            return text(StatusCode::BAD_GATEWAY, "bridge unreachable");
        }
    };
    // Decided before the request is handed over: browsers fail a handshake whose offered
    // subprotocols got no answer.
    let offered = auth::subprotocols(req.headers()).any(|p| p == auth::SUBPROTOCOL);
    let on_upgrade = hyper::upgrade::on(&mut req);
    // Inside the connection's span (current here); `Whose` makes it again for the relay's end.
    let span = tracing::info_span!("relay", instance = id.as_str());
    let whose = Arc::new(Whose { conn, peer, instance: id });
    let cred = who.credential.clone();
    hub.life.tracker.spawn(relay_task(hub.clone(), on_upgrade, bridge, whose, guard, cred).instrument(span));
    let mut r = empty(StatusCode::SWITCHING_PROTOCOLS);
    let h = r.headers_mut();
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    if offered {
        h.insert(header::SEC_WEBSOCKET_PROTOCOL, HeaderValue::from_static(auth::SUBPROTOCOL));
    }
    r
}

/// The `Sec-WebSocket-Accept` answer to a valid version-13 upgrade request.
fn accept_key(req: &Request<Incoming>) -> Option<HeaderValue> {
    let h = req.headers();
    let has_token = |name: header::HeaderName, token: &str| {
        h.get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    };
    if !has_token(header::UPGRADE, "websocket") || !has_token(header::CONNECTION, "upgrade") {
        return None;
    }
    if h.get(header::SEC_WEBSOCKET_VERSION).is_none_or(|v| v != "13") {
        return None;
    }
    let key = h.get(header::SEC_WEBSOCKET_KEY)?;
    HeaderValue::from_str(&derive_accept_key(key.as_bytes())).ok()
}

/// Waits for the client's upgrade, then hands both sockets to the relay thread.
async fn relay_task(
    hub: Arc<Hub>,
    on_upgrade: OnUpgrade,
    bridge: (TcpStream, Vec<u8>),
    whose: Arc<Whose>,
    guard: RelayGuard,
    cred: crate::auth::Credential,
) {
    let upgraded = match on_upgrade.await {
        Ok(u) => u,
        Err(e) => {
            tracing::debug!("client upgrade failed: {e}");
            return;
        }
    };
    // The bare socket (hyper's boxed IO unwrapped) plus whatever the client sent early. The
    // early bytes are copied out and hyper's buffer dropped HERE: a `Bytes` kept alive for the
    // relay's lifetime would pin hyper's whole 8 KiB read buffer.
    let Ok(hyper::upgrade::Parts { io, read_buf, .. }) = upgraded.downcast::<TokioIo<TcpStream>>() else {
        tracing::warn!("unexpected connection type after upgrade");
        return;
    };
    let client_early = read_buf.to_vec();
    drop(read_buf);
    // Out of tokio (deregistered, still non-blocking) and into the relay thread's loop.
    let (client, bridge_io) = match (io.into_inner().into_std(), bridge.0.into_std()) {
        (Ok(c), Ok(b)) => (c, b),
        (Err(e), _) | (_, Err(e)) => {
            tracing::warn!("cannot hand the relay's sockets over: {e}");
            return;
        }
    };
    tracing::debug!("relay open");
    let token = hub.life.tracker.token();
    let id = hub.devices.holds.relay(&cred);
    let ended = hub.clone();
    hub.bridges.relay.open(relay::Open {
        id,
        client,
        client_early,
        bridge: bridge_io,
        bridge_early: bridge.1,
        whose: {
            let whose = whose.clone();
            Arc::new(move || whose.span())
        },
        on_end: Box::new(move |end| {
            whose.span().in_scope(|| log_end(end));
            ended.devices.holds.relay_ended(id);
            drop((guard, token));
        }),
    });
    // Revoked while it was being opened: closed now (see `crate::devices::holds`).
    crate::devices::recheck(&hub, &cred);
}

/// How a relay ended: a leg that broke the rules at info (the other leg was told why), the
/// rest at debug.
fn log_end(end: relay::End) {
    use relay::{End, Side};
    let who = |side| match side {
        Side::Client => "the client",
        Side::Bridge => "the bridge",
    };
    match end {
        End::TooBig(side) => tracing::info!("relay closed: {} sent a message over 32 MiB", who(side)),
        End::Protocol(side) => tracing::info!("relay closed: {} broke the WebSocket framing", who(side)),
        end => tracing::debug!(?end, "relay closed"),
    }
}
