//! The connection pools of both servers (the hub's public one, `zcode_hub::server`, and the
//! bridge's loopback one, `zcode_bridge::server`), so that nobody without the token can crowd
//! out anyone with it: a connection is admitted at once into the **pre-auth pool**
//! ([`Limits::pending`], of which one [`Client`] holds at most [`Limits::per_addr`]; at the
//! cap, the oldest pending connection of that client, or of the fullest one, is evicted), and
//! leaves it when a request on it authenticates ([`Slot::authenticate`]) for a pool of its own
//! ([`Limits::authenticated`]; full, the request is refused rather than waiting). Admission
//! never waits: a flood of silent sockets cannot keep the token out, since the newest
//! connection is the last to be evicted. A loopback connection counts as its local user's at
//! its address ([`Client::User`], from [`crate::peer`]): another user's silent sockets crowd
//! out only their own, from whatever loopback addresses.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio_util::sync::CancellationToken;

/// Whose a connection is, for the per-client cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Client {
    /// A local user's at an address (a loopback connection whose owner the kernel told).
    User(u32, IpAddr),
    /// A client address (the caller's key: the hub counts an IPv6 /64 as one).
    Addr(IpAddr),
}

impl From<IpAddr> for Client {
    fn from(addr: IpAddr) -> Client {
        Client::Addr(addr)
    }
}

/// The pools' sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections not (yet) authenticated, at most.
    pub pending: usize,
    /// Of those, at most this many from one [`Client`].
    pub per_addr: usize,
    /// Authenticated connections open at once, at most.
    pub authenticated: usize,
}

/// The connection pools, shared by the accept loop and every connection's [`Slot`].
pub struct Slots {
    pool: Mutex<Pool>,
}

impl Slots {
    /// Empty pools of these sizes.
    pub fn new(limits: Limits) -> Arc<Slots> {
        Arc::new(Slots { pool: Mutex::new(Pool::with_limits(limits)) })
    }

    fn pool(&self) -> MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Puts new connection `id` of `addr` into the pre-auth pool, evicting as needed; never
    /// waits.
    pub fn admit(slots: &Arc<Slots>, id: u64, addr: Client) -> Arc<Slot> {
        let evicted = CancellationToken::new();
        slots.pool().admit(id, addr, evicted.clone());
        Arc::new(Slot { id, addr, evicted, slots: slots.clone(), authenticated: Mutex::new(false) })
    }

    /// Evicts the oldest pending connection of the fullest client (an accept failed: out of
    /// file descriptors, usually).
    pub fn evict_one(&self) {
        self.pool().evict_one();
    }
}

/// One connection's place in the pools; it gives it back when dropped (with the connection).
pub struct Slot {
    /// The connection's number, for logs.
    pub id: u64,
    addr: Client,
    /// Cancelled when the connection is evicted from the pre-auth pool.
    pub evicted: CancellationToken,
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
    pending: HashMap<Client, VecDeque<(u64, CancellationToken)>>,
    pending_total: usize,
    authenticated: usize,
    max_pending: usize,
    max_per_addr: usize,
    max_authenticated: usize,
}

impl Pool {
    fn with_limits(l: Limits) -> Pool {
        Pool {
            pending: HashMap::new(),
            pending_total: 0,
            authenticated: 0,
            max_pending: l.pending,
            max_per_addr: l.per_addr,
            max_authenticated: l.authenticated,
        }
    }

    fn admit(&mut self, id: u64, addr: Client, evicted: CancellationToken) {
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

    fn evict_from(&mut self, addr: Client) -> bool {
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
    fn remove(&mut self, id: u64, addr: Client) {
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

    fn ip(s: &str) -> Client {
        Client::Addr(s.parse().unwrap())
    }

    fn limits(pending: usize, per_addr: usize, authenticated: usize) -> Limits {
        Limits { pending, per_addr, authenticated }
    }

    /// Admits `id` from `addr`; its eviction token.
    fn add(pool: &mut Pool, id: u64, addr: &str) -> CancellationToken {
        let t = CancellationToken::new();
        pool.admit(id, ip(addr), t.clone());
        t
    }

    #[test]
    fn an_address_at_its_cap_loses_its_oldest_connection_and_nobody_else_does() {
        let mut pool = Pool::with_limits(limits(10, 3, 10));
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
        let mut pool = Pool::with_limits(limits(6, 4, 10));
        let a: Vec<_> = (1..5).map(|id| add(&mut pool, id, "10.0.0.1")).collect();
        let b: Vec<_> = (5..7).map(|id| add(&mut pool, id, "10.0.0.2")).collect();
        let c = add(&mut pool, 7, "10.0.0.3");
        assert!(a[0].is_cancelled(), "the fullest address's oldest went");
        assert!(!a[1].is_cancelled() && b.iter().all(|t| !t.is_cancelled()) && !c.is_cancelled());
        // A tie: the address whose oldest connection is older pays.
        let mut pool = Pool::with_limits(limits(4, 4, 10));
        let x = add(&mut pool, 1, "10.0.0.1");
        let y = add(&mut pool, 2, "10.0.0.2");
        add(&mut pool, 3, "10.0.0.2");
        add(&mut pool, 4, "10.0.0.1");
        add(&mut pool, 5, "10.0.0.3");
        assert!(x.is_cancelled() && !y.is_cancelled());
    }

    #[test]
    fn authenticated_connections_leave_the_pool_and_slots_come_back() {
        let slots = Slots::new(limits(2, 2, 1));
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

    /// The bridge's case (every connection from loopback, one address): at the cap the oldest
    /// connection that has not shown the token makes room; one that has is never evicted.
    #[test]
    fn at_the_cap_the_oldest_untrusted_connection_makes_room() {
        let slots = Slots::new(limits(2, 2, 2));
        let lo = ip("127.0.0.1");
        let oldest = Slots::admit(&slots, 1, lo);
        let trusted = Slots::admit(&slots, 2, lo);
        assert!(trusted.authenticate());
        let younger = Slots::admit(&slots, 3, lo);
        let newest = Slots::admit(&slots, 4, lo);
        assert!(oldest.evicted.is_cancelled());
        assert!(!trusted.evicted.is_cancelled() && !younger.evicted.is_cancelled());
        assert!(!newest.evicted.is_cancelled());
        drop((oldest, trusted, younger, newest));
        let pool = slots.pool();
        assert_eq!((pool.pending_total, pool.authenticated, pool.pending.len()), (0, 0, 0));
    }

    /// The hub's loopback case: another user's silent sockets from our address are not ours;
    /// this user's connection is not the fullest client's.
    #[test]
    fn another_users_connections_crowd_out_only_their_own() {
        let slots = Slots::new(limits(4, 3, 4));
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let ours = Slots::admit(&slots, 1, Client::User(1000, lo));
        let theirs: Vec<_> = (2..12).map(|id| Slots::admit(&slots, id, Client::User(65534, lo))).collect();
        assert!(!ours.evicted.is_cancelled(), "this user's connection was evicted");
        let held = theirs.iter().filter(|s| !s.evicted.is_cancelled()).count();
        assert_eq!(held, 3, "the other user holds at most its cap");
        assert!(theirs.last().is_some_and(|s| !s.evicted.is_cancelled()), "its newest stays");
    }
}
