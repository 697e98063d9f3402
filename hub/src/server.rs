//! The accept loop (mini-redis style): one task per connection, `select!` between accepting and
//! shutdown. Each connection is hyper http1 with upgrades; on shutdown a connection finishes its
//! current request and closes; `zcode_hub::run` then has the relay thread close every relay
//! with a close frame.
//!
//! Connection slots are split so that nobody without the token can crowd out anyone with it
//! ([`zcode_shared::slots`], sized by [`LIMITS`]): the accept loop never waits, a connection is accepted at once into the
//! pre-auth pool, evicting its address's (or the fullest address's) OLDEST pending connection
//! when full. A fresh connection is the newest, so silent sockets cannot starve it: it only
//! needs its request head to arrive before that many newer ones from its own address do.
//! - Until its first byte arrives a connection costs no hyper buffers: the task just waits for
//!   readability. Evicted then, it is told `503 too many connections` before it is closed;
//!   evicted later (a partial head, an unauthenticated request), it is just closed.
//! - The first byte must come within [`HEADER_TIMEOUT`], the whole head within as long again
//!   (hyper's `header_read_timeout`, also the idle keep-alive limit), and a head is at most
//!   16 KiB.
//! - A loopback connection counts as its local user's at its address: another user's silent
//!   sockets crowd out only each other (a bridge's registration stays in).
//! - The listen queue is widened to the kernel's maximum: under a flood it is where a
//!   legitimate client waits, and a full one drops its SYN.
//! - The listener carries a relayed client's socket options (no Nagle, the relay's bounded
//!   send buffer, its `TCP_USER_TIMEOUT`: `crate::relay::Relays::prepare`), which Linux copies
//!   to every connection it accepts: API connections get them too, set once instead of per
//!   connection and relay.
//! - A hub restarting onto a new binary stops accepting (its successor accepts from the same
//!   socket) but answers every connection it already accepted: a request on its way is served,
//!   never dropped.

use crate::Hub;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tracing::Instrument;
use zcode_shared::slots::{Client, Limits, Slot, Slots};

/// A connection's first byte must arrive within this long, its request head within as long
/// again (also the idle keep-alive limit).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest request head (request line and headers) accepted.
const MAX_HEAD: usize = 16 * 1024;
/// The pools' sizes: 1024 pending connections, 256 of them per client (an address, an IPv6 /64,
/// or a loopback connection's local user at its address),
/// and 4096 authenticated ones (relays are counted separately, once upgraded).
pub const LIMITS: Limits = Limits { pending: 1024, per_addr: 256, authenticated: 4096 };
/// How long a connection accepted just before a restart may take to send its first byte.
const DRAIN: Duration = Duration::from_secs(1);
/// What an evicted connection that never sent a byte is told.
const EVICTED: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n\
Content-Type: text/plain; charset=utf-8\r\nContent-Length: 20\r\n\r\ntoo many connections";

/// Accepts connections until the hub's shutdown token fires.
pub async fn serve(listener: TcpListener, hub: Arc<Hub>) {
    widen_backlog(&listener);
    // The relays' client socket options, inherited by every accepted connection (Linux).
    let ready = hub.bridges.relay.prepare(&listener);
    let slots = Slots::new(LIMITS);
    let mut next_conn: u64 = 0;
    loop {
        let (stream, peer) = tokio::select! {
            () = hub.life.shutdown.cancelled() => {
                tracing::info!("no longer accepting connections: answering those under way, then stopping");
                return;
            }
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
        if !ready {
            let _ = stream.set_nodelay(true);
        }
        next_conn += 1;
        let slot = Slots::admit(&slots, next_conn, client(&stream, peer));
        hub.life.tracker.spawn(connection(stream, peer, hub.clone(), slot));
        // Let the new connection look at its first bytes before more are accepted: under a
        // flood, a legitimate request is then read long before its address's newer
        // connections could push it out of the pre-auth pool.
        tokio::task::yield_now().await;
    }
}

/// Whose `stream` is for the pre-auth pool's per-client cap: a loopback connection is its
/// local user's at its address (one kernel query), so another user's silent sockets crowd out
/// only each other; any other connection is its address's.
fn client(stream: &TcpStream, peer: SocketAddr) -> Client {
    let ip = peer.ip().to_canonical();
    if ip.is_loopback() {
        let local = stream.local_addr();
        if let Ok(Some(uid)) = local.and_then(|local| zcode_shared::peer::owner(local, peer)) {
            return Client::User(uid, crate::auth::addr_key(peer.ip()));
        }
    }
    Client::Addr(crate::auth::addr_key(peer.ip()))
}

/// Widens the listen queue to the kernel's maximum (`net.core.somaxconn`, 4096 on current
/// Linux; tokio binds with 1024): under a connection flood the queue is where a legitimate
/// client waits, and a full one drops its SYN (a 1 s retransmit).
fn widen_backlog(listener: &TcpListener) {
    #[cfg(any(target_os = "linux", target_os = "freebsd"))]
    if let Err(e) = nix::sys::socket::listen(listener, nix::sys::socket::Backlog::MAXALLOWABLE) {
        tracing::debug!("cannot widen the listen queue: {e}");
    }
    #[cfg(not(any(target_os = "linux", target_os = "freebsd")))]
    let _ = listener;
}

async fn connection(stream: TcpStream, peer: SocketAddr, hub: Arc<Hub>, slot: Arc<Slot>) {
    let conn = slot.id;
    // Nothing sent yet: wait without hyper (and its buffers) for the first byte (`peek`, unlike
    // `readable`, never wakes spuriously).
    let mut first = [0u8; 1];
    tokio::select! {
        r = stream.peek(&mut first) => if !matches!(r, Ok(1..)) { return },
        () = slot.evicted.cancelled() => {
            tracing::debug!(conn, %peer, "silent connection evicted");
            // Straight to the socket: tokio's `try_write` refuses until the reactor has seen it
            // writable. A fresh socket's send buffer always has room for these few bytes.
            if let Ok(s) = stream.into_std() {
                let _ = std::io::Write::write(&mut &s, EVICTED);
            }
            return;
        }
        () = tokio::time::sleep(HEADER_TIMEOUT) => return,
        () = hub.life.shutdown.cancelled() => {
            // Accepted before the restart stopped the accepting: its request is answered here.
            if !hub.life.upgrade.restarting() {
                return;
            }
            match tokio::time::timeout(DRAIN, stream.peek(&mut first)).await {
                Ok(Ok(1..)) => {}
                _ => return,
            }
        }
    }
    // Made once the first byte is in: a silent socket of a flood costs no span.
    let span = tracing::info_span!("conn", id = conn, %peer);
    // A relay's upgrade is answered without hyper (see `crate::routes::acp::direct`).
    if let Some(head) = crate::routes::acp::direct::peek(&stream).await {
        return crate::routes::acp::direct::serve(stream, head, peer, hub, slot).instrument(span).await;
    }
    serve_connection(stream, peer, hub, slot).instrument(span).await;
}

/// Serves a connection whose first byte has arrived, until it ends, is evicted, or shutdown.
async fn serve_connection(stream: TcpStream, peer: SocketAddr, hub: Arc<Hub>, slot: Arc<Slot>) {
    let svc_hub = hub.clone();
    let svc_slot = slot.clone();
    let svc = hyper::service::service_fn(move |req| {
        crate::routes::handle(req, svc_hub.clone(), peer, svc_slot.clone())
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(HEADER_TIMEOUT).max_buf_size(MAX_HEAD);
    let served = builder.serve_connection(TokioIo::new(stream), svc).with_upgrades();
    tokio::pin!(served);
    let hold = crate::devices::holds::Holds::connection(&hub, slot.id);
    // Biased: hyper reads the request that is already in before it is told to shut down (it
    // closes a connection with no request under way at once).
    let result = tokio::select! {
        biased;
        r = served.as_mut() => r,
        () = hold.cut.cancelled() => {
            // A credential it used was revoked: the answer under way (the revocation's own)
            // may finish, briefly.
            tracing::debug!("connection cut: its credential was revoked");
            served.as_mut().graceful_shutdown();
            tokio::time::timeout(Duration::from_millis(300), served.as_mut()).await.unwrap_or(Ok(()))
        }
        () = slot.evicted.cancelled() => {
            tracing::debug!("unauthenticated connection evicted");
            return;
        }
        () = hub.life.shutdown.cancelled() => {
            served.as_mut().graceful_shutdown();
            match tokio::time::timeout(Duration::from_secs(1), served.as_mut()).await {
                Ok(r) => r,
                Err(_) => Ok(()),
            }
        }
    };
    if let Err(e) = result {
        tracing::debug!("connection ended: {e}");
    }
}
