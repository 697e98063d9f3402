//! `GET /acp?instance=<id>`: the WebSocket relay's front door. Everything that can refuse the
//! client happens BEFORE the upgrade is accepted, as a plain HTTP status: not a WebSocket
//! upgrade 400, unknown instance 404, the bridge cannot be dialed 502 (the token was checked
//! by the routing table: 401). Only then does the client get its 101 and the relay task start.
//! A client that offers the `zcode-acp` subprotocol (a browser carrying the token in the
//! subprotocol list offers it next to the token's value) gets it back: the token-carrying
//! value is never echoed, and the bridge's own dial carries no client header at all.

pub mod direct;

use crate::auth;
use crate::auth::Principal;
use crate::http::{Resp, empty, query_param, text};
use crate::relay;
use crate::upstream;
use crate::{Hub, RelayGuard};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::upgrade::OnUpgrade;
use hyper::{Request, StatusCode, Uri};
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

/// A relay whose bridge leg is open: what the client's 101 says, and what the relay starts
/// with.
pub struct Dialed {
    /// The `Sec-WebSocket-Accept` answer to the client's key.
    accept: HeaderValue,
    /// The client offered the `zcode-acp` subprotocol (it gets it back).
    offered: bool,
    /// The bridge leg, and the bytes the bridge sent after its 101.
    bridge: (TcpStream, Vec<u8>),
    /// Holds the relay's place under the cap.
    guard: RelayGuard,
    instance: String,
}

/// Everything that can refuse a relay, before any answer goes to the client: not a WebSocket
/// upgrade 400, unknown instance 404, too many relays 503, the bridge cannot be dialed 502.
/// Dials the bridge for `who`'s scope (which the bridge enforces).
pub async fn dial(headers: &HeaderMap, uri: &Uri, hub: &Arc<Hub>, who: &Principal) -> Result<Dialed, Resp> {
    let Some(accept) = accept_key(headers) else {
        return Err(text(StatusCode::BAD_REQUEST, "a WebSocket upgrade (version 13) is required"));
    };
    let id = query_param(uri, "instance").map(|c| c.into_owned()).unwrap_or_default();
    let Some(port) = hub.bridges.registry().port_of(&id, Instant::now()) else {
        return Err(text(StatusCode::NOT_FOUND, "unknown instance"));
    };
    // Counted before the dial is awaited: a relay being dialed holds its place under the cap.
    let Some(guard) = hub.bridges.relay_guard(max_relays()) else {
        return Err(text(StatusCode::SERVICE_UNAVAILABLE, "too many connections"));
    };
    let bridge = match upstream::dial_ws(port, &hub.auth.token.token(), who.scope(), who.device_id()).await {
        Ok(ws) => ws,
        Err(e) => {
            tracing::debug!(instance = %id, port, "cannot dial the bridge: {e}");
            return Err(text(StatusCode::BAD_GATEWAY, "bridge unreachable"));
        }
    };
    // Decided before the request is handed over: browsers fail a handshake whose offered
    // subprotocols got no answer.
    let offered = auth::subprotocols(headers).any(|p| p == auth::SUBPROTOCOL);
    Ok(Dialed { accept, offered, bridge, guard, instance: id })
}

/// How an upgrade the front door answers itself ([`direct`]) went on.
pub enum Way {
    /// The client's socket is the bridge's now: it answers the upgrade and serves it.
    Handed,
    /// Relayed: the bridge leg is open, the client's 101 and the relay are the caller's.
    Dialed(Dialed),
}

/// Everything that can refuse the upgrade of `client` (its head read off), as [`dial`]; then
/// the client's socket is handed to its bridge ([`crate::handoff`]), or, where that fails, the
/// bridge is dialed for a relay.
pub async fn open(
    headers: &HeaderMap,
    uri: &Uri,
    hub: &Arc<Hub>,
    who: &Principal,
    client: std::os::fd::BorrowedFd<'_>,
) -> Result<Way, Resp> {
    let (port, msg) = hand_over(headers, uri, hub, who).map_err(|refused| *refused)?;
    // A bridge's connection holds as many hand-overs as its send buffer does: in a burst the
    // hub waits for the bridge to take them, a millisecond at a time, before it relays instead.
    let handoff = &hub.bridges.handoff;
    for _ in 0..HAND_OVER_TRIES {
        match handoff.give(port, client, &msg) {
            Ok(()) => return Ok(Way::Handed),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
            Err(e) => {
                tracing::debug!(port, "relayed, not handed over: {e}");
                break;
            }
        }
    }
    dial(headers, uri, hub, who).await.map(Way::Dialed)
}

/// How many times a hand-over is tried while its bridge's connection is full.
const HAND_OVER_TRIES: usize = 50;

/// The bridge's port and the hand-over to send it, or the refusal (400, 404) [`dial`] would
/// give.
fn hand_over(
    headers: &HeaderMap,
    uri: &Uri,
    hub: &Arc<Hub>,
    who: &Principal,
) -> Result<(u16, zcode_shared::handoff::Message), Box<Resp>> {
    let Some(accept) = accept_key(headers) else {
        return Err(Box::new(text(StatusCode::BAD_REQUEST, "a WebSocket upgrade (version 13) is required")));
    };
    let id = query_param(uri, "instance").unwrap_or_default();
    let Some(port) = hub.bridges.registry().port_of(&id, Instant::now()) else {
        return Err(Box::new(text(StatusCode::NOT_FOUND, "unknown instance")));
    };
    let offered = auth::subprotocols(headers).any(|p| p == auth::SUBPROTOCOL);
    let answer = crate::http::head_bytes("HTTP/1.1 101 Switching Protocols", &switching(accept, offered));
    let handoff = &hub.bridges.handoff;
    let msg = zcode_shared::handoff::Client {
        token: hub.auth.token.token(),
        scope: who.scope().as_str().to_owned(),
        device: who.device_id().to_owned(),
        cred: crate::devices::handed_cred(&who.credential),
        hub: handoff.id(),
        answer: String::from_utf8_lossy(&answer).into_owned(),
        cap: max_relays(),
        busy: direct::busy().to_owned(),
        ping_ms: u64::try_from(handoff.ping().as_millis()).unwrap_or(u64::MAX),
    };
    Ok((port, zcode_shared::handoff::Message::Client(Box::new(msg))))
}

/// Dials the bridge for `who`'s scope (which the bridge enforces), then accepts the client's
/// upgrade and starts the relay (`conn`, `peer`: the client's connection, for the relay's log
/// lines; `who`: whose credential it is, cut when that credential is revoked or rotated).
/// The way in for an upgrade hyper read; most come by [`direct`].
pub async fn upgrade(
    mut req: Request<Incoming>,
    hub: &Arc<Hub>,
    conn: u64,
    peer: SocketAddr,
    who: &crate::auth::Principal,
) -> Resp {
    let dialed = match dial(req.headers(), req.uri(), hub, who).await {
        Ok(d) => d,
        Err(refused) => return refused,
    };
    let on_upgrade = hyper::upgrade::on(&mut req);
    let mut r = empty(StatusCode::SWITCHING_PROTOCOLS);
    *r.headers_mut() = switching_headers(&dialed);
    // Inside the connection's span (current here); `Whose` makes it again for the relay's end.
    let span = tracing::info_span!("relay", instance = dialed.instance.as_str());
    let cred = who.credential.clone();
    hub.life.tracker.spawn(relay_task(hub.clone(), on_upgrade, dialed, conn, peer, cred).instrument(span));
    r
}

/// The headers of the 101 a relayed client gets, whichever way it came in.
fn switching_headers(dialed: &Dialed) -> HeaderMap {
    switching(dialed.accept.clone(), dialed.offered)
}

/// The headers of every 101 (relayed or handed over): the key's `accept`, and the `zcode-acp`
/// subprotocol when the client `offered` it.
fn switching(accept: HeaderValue, offered: bool) -> HeaderMap {
    let mut h = HeaderMap::with_capacity(4);
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    if offered {
        h.insert(header::SEC_WEBSOCKET_PROTOCOL, HeaderValue::from_static(auth::SUBPROTOCOL));
    }
    h
}

/// The head of that 101, for [`direct`], which writes it itself (hyper writes it for
/// [`upgrade`]).
pub fn switching_head(dialed: &Dialed) -> Vec<u8> {
    crate::http::head_bytes("HTTP/1.1 101 Switching Protocols", &switching_headers(dialed))
}

/// The `Sec-WebSocket-Accept` answer to a valid version-13 upgrade request.
fn accept_key(h: &HeaderMap) -> Option<HeaderValue> {
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
    dialed: Dialed,
    conn: u64,
    peer: SocketAddr,
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
    let client = match io.into_inner().into_std() {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!("cannot hand the relay's sockets over: {e}");
            return;
        }
    };
    start(&hub, client, client_early, dialed, conn, peer, cred);
}

/// Hands the client's socket (out of tokio, still non-blocking, its 101 written) and the
/// dialed bridge leg to the relay thread: `client_early`, what the client sent after its
/// upgrade request, goes to the bridge.
pub fn start(
    hub: &Arc<Hub>,
    client: std::net::TcpStream,
    client_early: Vec<u8>,
    dialed: Dialed,
    conn: u64,
    peer: SocketAddr,
    cred: crate::auth::Credential,
) {
    let Dialed { bridge: (bridge, bridge_early), guard, instance, .. } = dialed;
    let bridge = match bridge.into_std() {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!("cannot hand the relay's sockets over: {e}");
            return;
        }
    };
    tracing::debug!("relay open");
    let whose = Arc::new(Whose { conn, peer, instance });
    let token = hub.life.tracker.token();
    let id = hub.devices.holds.relay(&cred);
    let ended = hub.clone();
    hub.bridges.relay.open(relay::Open {
        id,
        client,
        client_early,
        bridge,
        bridge_early,
        whose: {
            let whose = whose.clone();
            Arc::new(move || whose.span())
        },
        on_end: Box::new(move |end| {
            log_end(&whose, end);
            ended.devices.holds.relay_ended(id);
            drop((guard, token));
        }),
    });
    // Revoked while it was being opened: closed now (see `crate::devices::holds`).
    crate::devices::recheck(hub, &cred);
}

/// How a relay ended, in its span: a leg that broke the rules at info (the other leg was told
/// why), the rest at debug (the span made only for a line that is logged: most relays end
/// with none).
fn log_end(whose: &Whose, end: relay::End) {
    use relay::{End, Side};
    let who = |side| match side {
        Side::Client => "the client",
        Side::Bridge => "the bridge",
    };
    match end {
        End::TooBig(side) => {
            whose.span().in_scope(|| tracing::info!("relay closed: {} sent a message over 32 MiB", who(side)))
        }
        End::Protocol(side) => whose
            .span()
            .in_scope(|| tracing::info!("relay closed: {} broke the WebSocket framing", who(side))),
        end if tracing::enabled!(tracing::Level::DEBUG) => {
            whose.span().in_scope(|| tracing::debug!(?end, "relay closed"))
        }
        _ => {}
    }
}
