//! The accept loop (mini-redis style): one task per connection, `select!` between accepting and
//! shutdown. Each connection is hyper http1 with upgrades; on shutdown a connection finishes its
//! current request and closes; `zcode_hub::run` then has the relay thread close every relay
//! with a close frame.
//!
//! Connection slots are split so that nobody without the token can crowd out anyone with it:
//! - The accept loop never waits: a connection is accepted at once into the **pre-auth pool**
//!   ([`MAX_PENDING`], of which one client address, an IPv6 /64, holds at most
//!   [`MAX_PENDING_PER_ADDR`]). When its address is at its cap, or the pool is full, the
//!   address's (resp. the fullest address's) OLDEST pending connection is evicted to make
//!   room. A fresh connection is the newest, so silent sockets cannot starve it: it only needs
//!   its request head to arrive before that many newer ones from its own address do.
//! - A connection leaves the pool when a request on it authenticates ([`Slot::authenticate`]);
//!   authenticated connections have a pool of their own ([`MAX_CONNECTIONS`]).
//! - Until its first byte arrives a connection costs no hyper buffers: the task just waits for
//!   readability. Evicted then, it is told `503 too many connections` before it is closed;
//!   evicted later (a partial head, an unauthenticated request), it is just closed.
//! - The first byte must come within [`HEADER_TIMEOUT`], the whole head within as long again
//!   (hyper's `header_read_timeout`, also the idle keep-alive limit), and a head is at most
//!   16 KiB.
//! - The listen queue is widened to the kernel's maximum: under a flood it is where a
//!   legitimate client waits, and a full one drops its SYN.

use crate::Hub;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// Authenticated connections open at once, at most (relays are counted separately, once
/// upgraded).
pub const MAX_CONNECTIONS: usize = 4096;
/// Connections not (yet) authenticated, at most.
pub const MAX_PENDING: usize = 1024;
/// Of those, at most this many from one client address.
pub const MAX_PENDING_PER_ADDR: usize = 256;
/// A connection's first byte must arrive within this long, its request head within as long
/// again (also the idle keep-alive limit).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest request head (request line and headers) accepted.
const MAX_HEAD: usize = 16 * 1024;
/// What an evicted connection that never sent a byte is told.
const EVICTED: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n\
Content-Type: text/plain; charset=utf-8\r\nContent-Length: 20\r\n\r\ntoo many connections";

/// Accepts connections until the hub's shutdown token fires.
pub async fn serve(listener: TcpListener, hub: Arc<Hub>) {
    widen_backlog(&listener);
    let slots = Arc::new(Slots::default());
    let mut next_conn: u64 = 0;
    loop {
        let (stream, peer) = tokio::select! {
            () = hub.shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors, usually: free one, and give it time to close.
                    tracing::warn!("accept failed: {e}");
                    slots.pool().evict_one();
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        next_conn += 1;
        let slot = Slots::admit(&slots, next_conn, peer.ip());
        hub.tracker.spawn(connection(stream, peer, hub.clone(), slot));
        // Let the new connection look at its first bytes before more are accepted: under a
        // flood, a legitimate request is then read long before its address's newer
        // connections could push it out of the pre-auth pool.
        tokio::task::yield_now().await;
    }
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
        () = hub.shutdown.cancelled() => return,
    }
    let svc_hub = hub.clone();
    let svc_slot = slot.clone();
    let svc = hyper::service::service_fn(move |req| {
        crate::routes::handle(req, svc_hub.clone(), peer, svc_slot.clone())
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(HEADER_TIMEOUT).max_buf_size(MAX_HEAD);
    let served = builder.serve_connection(TokioIo::new(stream), svc).with_upgrades();
    tokio::pin!(served);
    let result = tokio::select! {
        r = served.as_mut() => r,
        () = slot.evicted.cancelled() => {
            tracing::debug!(conn, %peer, "unauthenticated connection evicted");
            return;
        }
        () = hub.shutdown.cancelled() => {
            served.as_mut().graceful_shutdown();
            match tokio::time::timeout(Duration::from_secs(1), served.as_mut()).await {
                Ok(r) => r,
                Err(_) => Ok(()),
            }
        }
    };
    if let Err(e) = result {
        tracing::debug!(conn, %peer, "connection ended: {e}");
    }
}

/// The connection pools, shared by the accept loop and every connection's [`Slot`].
#[derive(Default)]
pub struct Slots {
    pool: Mutex<Pool>,
}

impl Slots {
    fn pool(&self) -> MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Puts a new connection from `ip` into the pre-auth pool, evicting as needed.
    fn admit(slots: &Arc<Slots>, id: u64, ip: IpAddr) -> Arc<Slot> {
        let addr = crate::auth::addr_key(ip);
        let evicted = CancellationToken::new();
        slots.pool().admit(id, addr, evicted.clone());
        Arc::new(Slot { id, addr, evicted, slots: slots.clone(), authenticated: Mutex::new(false) })
    }
}

/// One connection's place in the pools; it gives it back when dropped (with the connection).
pub struct Slot {
    id: u64,
    addr: IpAddr,
    /// Cancelled when the connection is evicted from the pre-auth pool.
    evicted: CancellationToken,
    slots: Arc<Slots>,
    /// Whether it moved to the authenticated pool (changed only with the pools locked).
    authenticated: Mutex<bool>,
}

impl Slot {
    /// Moves the connection from the pre-auth pool to the authenticated one (a request on it
    /// presented the token); `false` when that pool is full. Repeating it is harmless.
    pub fn authenticate(&self) -> bool {
        let mut pool = self.slots.pool();
        let mut done = self.authenticated.lock().unwrap_or_else(|p| p.into_inner());
        if *done {
            return true;
        }
        if pool.authenticated >= pool.max_authenticated {
            return false;
        }
        pool.remove(self.id, self.addr);
        pool.authenticated += 1;
        *done = true;
        true
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut pool = self.slots.pool();
        if *self.authenticated.get_mut().unwrap_or_else(|p| p.into_inner()) {
            pool.authenticated -= 1;
        } else {
            pool.remove(self.id, self.addr);
        }
    }
}

/// The pools' bookkeeping: pending connections per address, oldest first, and how many are
/// authenticated.
struct Pool {
    pending: HashMap<IpAddr, VecDeque<(u64, CancellationToken)>>,
    pending_total: usize,
    authenticated: usize,
    max_pending: usize,
    max_per_addr: usize,
    max_authenticated: usize,
}

impl Default for Pool {
    fn default() -> Pool {
        Pool::with_limits(MAX_PENDING, MAX_PENDING_PER_ADDR, MAX_CONNECTIONS)
    }
}

impl Pool {
    fn with_limits(max_pending: usize, max_per_addr: usize, max_authenticated: usize) -> Pool {
        Pool {
            pending: HashMap::new(),
            pending_total: 0,
            authenticated: 0,
            max_pending,
            max_per_addr,
            max_authenticated,
        }
    }

    fn admit(&mut self, id: u64, addr: IpAddr, evicted: CancellationToken) {
        if self.pending.get(&addr).map_or(0, VecDeque::len) >= self.max_per_addr {
            self.evict_from(addr);
        } else if self.pending_total >= self.max_pending {
            self.evict_one();
        }
        self.pending.entry(addr).or_default().push_back((id, evicted));
        self.pending_total += 1;
    }

    /// Evicts the oldest pending connection of the address holding the most (of those, the
    /// one whose oldest is oldest); `false` when none is pending.
    fn evict_one(&mut self) -> bool {
        let fullest = self
            .pending
            .iter()
            .max_by_key(|(_, q)| (q.len(), std::cmp::Reverse(q.front().map_or(u64::MAX, |(id, _)| *id))))
            .map(|(addr, _)| *addr);
        fullest.is_some_and(|addr| self.evict_from(addr))
    }

    fn evict_from(&mut self, addr: IpAddr) -> bool {
        let Some(q) = self.pending.get_mut(&addr) else { return false };
        let Some((_, evicted)) = q.pop_front() else { return false };
        evicted.cancel();
        if q.is_empty() {
            self.pending.remove(&addr);
        }
        self.pending_total -= 1;
        true
    }

    /// Forgets pending connection `id` (gone or authenticated); nothing if it was evicted.
    fn remove(&mut self, id: u64, addr: IpAddr) {
        let Some(q) = self.pending.get_mut(&addr) else { return };
        let Some(at) = q.iter().position(|(i, _)| *i == id) else { return };
        q.remove(at);
        if q.is_empty() {
            self.pending.remove(&addr);
        }
        self.pending_total -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// Admits `id` from `addr`; its eviction token.
    fn add(pool: &mut Pool, id: u64, addr: &str) -> CancellationToken {
        let t = CancellationToken::new();
        pool.admit(id, ip(addr), t.clone());
        t
    }

    #[test]
    fn an_address_at_its_cap_loses_its_oldest_connection_and_nobody_else_does() {
        let mut pool = Pool::with_limits(10, 3, 10);
        let other = add(&mut pool, 1, "10.0.0.9");
        let a: Vec<_> = (2..5).map(|id| add(&mut pool, id, "10.0.0.1")).collect();
        assert!(a.iter().all(|t| !t.is_cancelled()));
        let newest = add(&mut pool, 5, "10.0.0.1");
        assert!(a[0].is_cancelled(), "the address's oldest went");
        assert!(!a[1].is_cancelled() && !a[2].is_cancelled() && !newest.is_cancelled());
        assert!(!other.is_cancelled(), "another address is untouched");
        assert_eq!(pool.pending_total, 4);
    }

    #[test]
    fn a_full_pool_evicts_from_the_fullest_address() {
        let mut pool = Pool::with_limits(6, 4, 10);
        let a: Vec<_> = (1..5).map(|id| add(&mut pool, id, "10.0.0.1")).collect();
        let b: Vec<_> = (5..7).map(|id| add(&mut pool, id, "10.0.0.2")).collect();
        let c = add(&mut pool, 7, "10.0.0.3");
        assert!(a[0].is_cancelled(), "the fullest address's oldest went");
        assert!(!a[1].is_cancelled() && b.iter().all(|t| !t.is_cancelled()) && !c.is_cancelled());
        // A tie: the address whose oldest connection is older pays.
        let mut pool = Pool::with_limits(4, 4, 10);
        let x = add(&mut pool, 1, "10.0.0.1");
        let y = add(&mut pool, 2, "10.0.0.2");
        add(&mut pool, 3, "10.0.0.2");
        add(&mut pool, 4, "10.0.0.1");
        add(&mut pool, 5, "10.0.0.3");
        assert!(x.is_cancelled() && !y.is_cancelled());
    }

    #[test]
    fn authenticated_connections_leave_the_pool_and_slots_come_back() {
        let slots = Arc::new(Slots { pool: Mutex::new(Pool::with_limits(2, 2, 1)) });
        let s1 = Slots::admit(&slots, 1, ip("10.0.0.1"));
        let s2 = Slots::admit(&slots, 2, ip("10.0.0.1"));
        assert!(s1.authenticate());
        assert!(s1.authenticate(), "twice is harmless");
        assert!(!s2.authenticate(), "the authenticated pool is full");
        // s1 no longer counts as pending: two more fit without evicting s2.
        let s3 = Slots::admit(&slots, 3, ip("10.0.0.1"));
        assert!(!s2.evicted.is_cancelled());
        drop(s1);
        assert!(s2.authenticate(), "s1's authenticated slot came back");
        drop((s2, s3));
        let pool = slots.pool();
        assert_eq!((pool.pending_total, pool.authenticated, pool.pending.len()), (0, 0, 0));
    }
}
