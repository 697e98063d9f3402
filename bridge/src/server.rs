//! The bridge's loopback server: [`bind_loopback`] (the first free port from the configured
//! one, 100 scanned, else one the OS picks), the accept loop ([`serve`]) and the routing of
//! every request: the remote ACP endpoint (`/acp`, WebSocket, handed to [`crate::remote`]),
//! `/status`, `/attention` and `/turns` ([`crate::glance`]), `/fs/list` and `/fs/file`
//! ([`crate::files`]), `/changes` and `/changes/diff` ([`crate::changes`]), `/sessions/*` ([`crate::lifecycle`]), `/settings/usage`
//! ([`crate::usage`]), the other `/settings/*` and `/backend/restart` ([`crate::settings`]).
//! Bound to 127.0.0.1 only, and every route requires the machine's token (the hub sends it
//! when it dials): other users' processes must not drive our sessions. With the token, the
//! hub's `X-Zcode-Scope: watch` ([`zcode_shared::scope`]) limits a request to GET and HEAD
//! (else 403) and an ACP client to what [`crate::router`] lets a watcher send.
//!
//! Other local users can still connect: the accept loop closes their connections at once (the
//! kernel tells who owns the other end, `zcode_shared::peer`), so their silent sockets never
//! push the hub's out. What a connection of this user costs before it shows the token is
//! bounded too: its headers must arrive within `timings.header_timeout` (64 KiB at most), and
//! [`crate::slots`] caps open connections, evicting the oldest untrusted one at the cap. A
//! remote client's writes are bounded too: see [`crate::stall`].

use crate::files;
use crate::http::query::Query;
use crate::http::{Resp, full, text};
use crate::remote::{Remote, WRITE_BATCH};
use crate::router::{ClientId, ClientKind, Event, Outbox, REMOTE_QUEUE_LIMIT};
use crate::stall::{Stall, Watched};
use bytes::Bytes;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;
use zcode_shared::scope::Scope;
use zcode_shared::slots::{Client, Slot, Slots};

/// The largest message a remote client may send (and we accept): 32 MiB.
pub const MAX_MESSAGE: usize = 32 * 1024 * 1024;

/// Ports scanned from the configured start port.
const PORT_SCAN: u16 = 100;

/// The send buffer asked of the kernel for each connection (it doubles it). The kernel wakes a
/// blocked writer only once a third of the buffer has drained: with the loopback's autotuned
/// 4 MiB, a phone reading at 50 KiB/s behind the hub would leave the writer blocked ~30 s at a
/// time, and be dropped as stalled ([`crate::stall`]) while it reads steadily. 256 KiB wakes it
/// every ~85 KiB taken, and is still far above what loopback needs for full speed.
const SEND_BUFFER: usize = 128 * 1024;

/// The largest request head (request line and headers) accepted.
const MAX_HEAD: usize = 64 * 1024;

/// Binds the first free loopback port from `start` (scanning 100 ports); `0`, or a range that
/// is all taken (by other bridges, or by someone squatting it), lets the OS pick: the port
/// file and the registration carry the real port, and the editor's agent starts regardless.
pub async fn bind_loopback(start: u16) -> std::io::Result<TcpListener> {
    if start == 0 {
        return TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await;
    }
    for port in start..start.saturating_add(PORT_SCAN) {
        match TcpListener::bind((Ipv4Addr::LOCALHOST, port)).await {
            Ok(l) => return Ok(l),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {}
            Err(e) => return Err(e),
        }
    }
    let last = start.saturating_add(PORT_SCAN - 1);
    tracing::warn!("loopback ports {start}-{last} are all taken: the OS picks one");
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await
}

/// What every connection of the server shares.
pub struct Ctx {
    /// The router's events.
    pub events: mpsc::Sender<Event>,
    /// The machine's token (re-read when rotated).
    pub token: Arc<zcode_shared::token::Live>,
    /// Cancelled on shutdown.
    pub shutdown: CancellationToken,
    /// Tracks connection tasks, so shutdown can wait for close frames to go out.
    pub tracker: TaskTracker,
    /// The server's limits.
    pub limits: Limits,
    /// Token usage (`/settings/usage`).
    pub usage: crate::usage::Recorder,
    /// The settings mount (`/settings/*`).
    pub settings: Option<crate::settings::Mounted>,
    /// Why the journal cannot commit, while it cannot (`journalError` in `/status`).
    pub journal_error: tokio::sync::watch::Receiver<Option<String>>,
    next_client: AtomicU64,
}

/// What bounds the server's connections.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// A request's headers must arrive within this long (also the idle keep-alive limit).
    pub header_timeout: Duration,
    /// HTTP connections open at once (see [`crate::slots`]).
    pub connections: usize,
    /// A remote client whose socket takes nothing for this long is dropped (the ping period:
    /// the hub drops a leg that leaves a ping unanswered as long).
    pub write_stall: Duration,
}

impl Ctx {
    /// A context for one bridge (no journal error until [`Ctx::with_journal_error`]).
    pub fn new(
        events: mpsc::Sender<Event>,
        token: Arc<zcode_shared::token::Live>,
        shutdown: CancellationToken,
        tracker: TaskTracker,
        limits: Limits,
        usage: crate::usage::Recorder,
        settings: Option<crate::settings::Mounted>,
    ) -> Ctx {
        Ctx {
            events,
            token,
            shutdown,
            tracker,
            limits,
            usage,
            settings,
            journal_error: tokio::sync::watch::channel(None).1,
            next_client: AtomicU64::new(1),
        }
    }

    /// Where `/status` reads `journalError` ([`crate::journal::Journal::error`]).
    pub fn with_journal_error(self, journal_error: tokio::sync::watch::Receiver<Option<String>>) -> Ctx {
        Ctx { journal_error, ..self }
    }
}

/// Accepts connections until shutdown.
pub async fn serve(listener: TcpListener, ctx: Arc<Ctx>) {
    let slots = Slots::new(crate::slots::limits(ctx.limits.connections));
    let own = zcode_shared::peer::own_uid();
    widen_backlog(&listener);
    let mut next_conn: u64 = 0;
    loop {
        let (stream, peer) = tokio::select! {
            () = ctx.shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors, usually: free one, and give it time to close.
                    tracing::warn!("accept failed: {e}");
                    slots.evict_one();
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        // Another user's connection (or one whose owner cannot be told) is closed before it
        // takes a place: it could never show the token, and its silent sockets must not push
        // the hub's out of the pool.
        if let Err(e) = zcode_shared::peer::verify_addrs(stream.local_addr(), Ok(peer)) {
            // Trace only: a flood would otherwise fill the debug log.
            tracing::trace!(%peer, "connection refused: {e}");
            continue;
        }
        // Admitted at once: at the cap, the oldest connection without the token makes room.
        next_conn += 1;
        let slot = Slots::admit(&slots, next_conn, Client::User(own, peer.ip()));
        let _ = stream.set_nodelay(true);
        let _ = nix::sys::socket::setsockopt(&stream, nix::sys::socket::sockopt::SndBuf, &SEND_BUFFER);
        let conn_ctx = ctx.clone();
        let header_timeout = ctx.limits.header_timeout.max(Duration::from_millis(1));
        let span = tracing::info_span!("conn", %peer);
        let served = async move {
            let evicted = slot.evicted.clone();
            let svc_slot = slot.clone();
            let svc = hyper::service::service_fn(move |req| handle(req, conn_ctx.clone(), svc_slot.clone()));
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(header_timeout).max_buf_size(MAX_HEAD);
            let conn = builder.serve_connection(TokioIo::new(stream), svc).with_upgrades();
            let ended = tokio::select! {
                r = conn => r.err().map(|e| e.to_string()),
                () = evicted.cancelled() => Some("evicted from the pre-auth pool".to_owned()),
            };
            if let Some(e) = ended {
                tracing::debug!("http connection ended: {e}");
            }
            drop(slot);
        };
        // Short-lived (an upgraded client's task is spawned apart, without it): the span of
        // an idle remote client would cost the subscriber a few hundred bytes for its life.
        ctx.tracker.spawn(served.instrument(span));
    }
}

/// The 403 a watch-only connection's write gets: the settings routes' JSON error shape there,
/// plain text elsewhere (as every other refusal of this server).
fn watch_only(path: &str) -> Resp {
    let msg = zcode_shared::scope::WATCH_ONLY;
    if !(path.starts_with("/settings/") || path == "/backend/restart") {
        return text(StatusCode::FORBIDDEN, msg);
    }
    let mut r = Response::new(full(serde_json::json!({"ok": false, "error": msg}).to_string()));
    *r.status_mut() = StatusCode::FORBIDDEN;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// A request path as it may be logged: without its path parameters (`;token=…` is a token
/// some clients try there).
fn loggable(path: &str) -> &str {
    path.split(';').next().unwrap_or_default()
}

/// Widens the listen queue to the kernel's maximum (tokio binds with 1024): under another
/// user's connection flood the queue is where the hub's dial waits, and a full one drops its
/// SYN (a 1 s retransmit).
fn widen_backlog(listener: &TcpListener) {
    if let Err(e) = nix::sys::socket::listen(listener, nix::sys::socket::Backlog::MAXALLOWABLE) {
        tracing::debug!("cannot widen the listen queue: {e}");
    }
}

fn authorized(req: &Request<Incoming>, ctx: &Ctx) -> bool {
    let value = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    value.and_then(zcode_shared::token::bearer).is_some_and(|t| ctx.token.verify_fresh(t))
}

async fn handle(req: Request<Incoming>, ctx: Arc<Ctx>, slot: Arc<Slot>) -> Result<Resp, Infallible> {
    if !authorized(&req, &ctx) {
        tracing::debug!(path = loggable(req.uri().path()), "refused: no valid token");
        return Ok(text(StatusCode::UNAUTHORIZED, "unauthorized"));
    }
    if !slot.authenticate() {
        return Ok(text(StatusCode::SERVICE_UNAVAILABLE, "too many connections"));
    }
    // Heeded only here, past the token: the hub's word on what its client may do.
    let scope = match Scope::from_headers(req.headers()) {
        Ok(scope) => scope,
        Err(e) => return Ok(text(StatusCode::BAD_REQUEST, e)),
    };
    if !scope.allows_method(req.method().as_str()) {
        let (method, path) = (req.method(), loggable(req.uri().path()));
        tracing::info!(%method, path, "refused: a watch-only connection may only read");
        return Ok(watch_only(path));
    }
    if req.uri().path().starts_with("/sessions/") {
        let req = match crate::permissions::route(req, &ctx.events).await {
            Ok(resp) => return Ok(resp),
            Err(req) => req,
        };
        if let Some(resp) = crate::lifecycle::route(req, &ctx.events).await {
            return Ok(resp);
        }
        return Ok(text(StatusCode::NOT_FOUND, "not found"));
    }
    if req.method() == Method::GET && req.uri().path() == "/settings/usage" {
        return Ok(crate::usage::http::usage(req.uri().query(), &ctx.usage).await);
    }
    if let (Some(rest), Some(m)) = (req.uri().path().strip_prefix("/settings/"), &ctx.settings) {
        let rest = rest.to_owned();
        return Ok(crate::settings::route(req, m, &rest).await);
    }
    Ok(match (req.method(), req.uri().path()) {
        (&Method::GET, "/acp") => upgrade(req, ctx, scope),
        (&Method::GET | &Method::HEAD, "/status") => status(&ctx, req.method() == Method::HEAD).await,
        (&Method::GET, "/attention") => {
            crate::glance::answer(&ctx.events, crate::glance::Part::Attention).await
        }
        (&Method::GET, "/turns") => crate::glance::answer(&ctx.events, crate::glance::Part::Turns).await,
        (&Method::GET, "/fs/list") => session_files(&req, &ctx, false).await,
        (&Method::POST, "/backend/restart") => crate::settings::restart(&ctx.events).await,
        (&Method::GET | &Method::HEAD, "/fs/file") => session_files(&req, &ctx, true).await,
        (&Method::GET, "/changes" | "/changes/diff") => session_changes(&req, &ctx).await,
        _ => text(StatusCode::NOT_FOUND, "not found"),
    })
}

async fn status(ctx: &Ctx, head: bool) -> Resp {
    let (tx, rx) = oneshot::channel();
    if ctx.events.send(Event::Status(tx)).await.is_err() {
        return text(StatusCode::SERVICE_UNAVAILABLE, "bridge shutting down");
    }
    let Ok(Ok(rows)) = tokio::time::timeout(Duration::from_secs(2), rx).await else {
        return text(StatusCode::SERVICE_UNAVAILABLE, "bridge busy");
    };
    let mut body = serde_json::json!({"sessions": rows});
    // Only while the bridge's history is not being saved (the contract's object, one more member).
    if let Some(e) = ctx.journal_error.borrow().clone() {
        body["journalError"] = e.into();
    }
    let body = body.to_string();
    let len = body.len();
    let mut r = Response::new(full(if head { Bytes::new() } else { Bytes::from(body) }));
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    r
}

/// `/fs/list` and `/fs/file`: the session must be live here; its cwd is the root.
async fn session_files(req: &Request<Incoming>, ctx: &Ctx, file: bool) -> Resp {
    let (q, cwd) = match session_root(req, ctx).await {
        Ok(x) => x,
        Err(resp) => return *resp,
    };
    if file { files::file(q, cwd, req.method() == Method::HEAD).await } else { files::list(q, cwd).await }
}

/// `/changes` and `/changes/diff`: confined to the session's root as the files are.
async fn session_changes(req: &Request<Incoming>, ctx: &Ctx) -> Resp {
    let (q, cwd) = match session_root(req, ctx).await {
        Ok(x) => x,
        Err(resp) => return *resp,
    };
    if req.uri().path() == "/changes" {
        crate::changes::summary(cwd).await
    } else {
        crate::changes::diff(q, cwd).await
    }
}

/// The query and the root of its `sessionId`, which must be live here (403 otherwise).
async fn session_root(req: &Request<Incoming>, ctx: &Ctx) -> Result<(Query, std::path::PathBuf), Box<Resp>> {
    let (q, sid) = files::session_query(req.uri().query())?;
    let (tx, rx) = oneshot::channel();
    if ctx.events.send(Event::SessionRoot { session: sid.clone(), reply: tx }).await.is_err() {
        return Err(Box::new(text(StatusCode::SERVICE_UNAVAILABLE, "bridge shutting down")));
    }
    let Ok(Ok(Some(cwd))) = tokio::time::timeout(Duration::from_secs(2), rx).await else {
        return Err(Box::new(text(StatusCode::FORBIDDEN, format!("unknown session: {sid}"))));
    };
    Ok((q, cwd))
}

fn upgrade(mut req: Request<Incoming>, ctx: Arc<Ctx>, scope: Scope) -> Resp {
    let h = req.headers();
    let is_upgrade = h
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    let version_ok = h.get(header::SEC_WEBSOCKET_VERSION).is_some_and(|v| v == "13");
    let Some(key) = h.get(header::SEC_WEBSOCKET_KEY).filter(|_| is_upgrade && version_ok) else {
        return text(StatusCode::BAD_REQUEST, "a WebSocket upgrade (version 13) is required");
    };
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    // Past the token, as the scope: whose connection the hub says it is (the audit trail's).
    let device = zcode_shared::scope::device_from_headers(h).map(String::into_boxed_str);
    let on_upgrade = hyper::upgrade::on(&mut req);
    let tracker = ctx.tracker.clone();
    tracker.spawn(async move {
        let upgraded = match on_upgrade.await {
            Ok(u) => u,
            Err(e) => return tracing::debug!("websocket upgrade failed: {e}"),
        };
        // Boxed: a task is as big as its largest state for its whole life, and the setup's
        // (the socket, the router's send) would otherwise sit beside `run`'s in every idle
        // client (3.9 KiB per task, where `run` alone needs a fraction of it).
        let Some(remote) = Box::pin(join(TokioIo::new(upgraded), &ctx, scope, device, None)).await else {
            return;
        };
        let client = remote.client;
        crate::remote::run(remote, &ctx.events).await;
        crate::router::trace::client(client).in_scope(|| tracing::debug!("remote client closed"));
    });
    let mut r = Response::new(full(Bytes::new()));
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = r.headers_mut();
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Ok(v) = HeaderValue::from_str(&accept) {
        headers.insert(header::SEC_WEBSOCKET_ACCEPT, v);
    }
    r
}

/// Makes the upgraded socket a remote client the router knows; `None` when the router is gone.
/// With `killer`, the client's outbox's [`crate::router::Killer`] is handed there (a
/// handed-over client's, which its hub may cut).
pub(crate) async fn join<S>(
    io: S,
    ctx: &Ctx,
    scope: Scope,
    device: Option<Box<str>>,
    killer: Option<&mut Option<crate::router::Killer>>,
) -> Option<Box<Remote<Watched<S>>>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_MESSAGE))
        .max_frame_size(Some(MAX_MESSAGE))
        // tungstenite's 128 KiB default per socket would make thousands of idle
        // remote clients cost the bridge hundreds of MiB: `Watched` reads ahead
        // for it, so a small chunk costs no extra system calls.
        .read_buffer_size(crate::stall::READ_CHUNK)
        .write_buffer_size(WRITE_BATCH);
    let stall = Arc::new(Stall::default());
    let io = Watched::new(io, stall.clone());
    let ws = WebSocketStream::from_raw_socket(io, Role::Server, Some(config)).await;
    let client: ClientId = ctx.next_client.fetch_add(1, Ordering::Relaxed);
    let (outbox, reader) = Outbox::new(Some(REMOTE_QUEUE_LIMIT));
    if let Some(k) = killer {
        *k = Some(outbox.killer());
    }
    let connected = Event::Connected { client, kind: ClientKind::Remote, scope, device, outbox };
    ctx.events.send(connected).await.ok()?;
    crate::router::trace::client(client).in_scope(|| tracing::debug!(%scope, "remote client connected"));
    // Boxed: moved from here into `run`, a value this size was kept twice in the task.
    Some(Remote::new(ws, stall, client, reader, ctx.limits.write_stall))
}
