//! The connection pools of the hub's server ([`crate::server`]), so that nobody without the
//! token can crowd out anyone with it: a connection is admitted at once into the **pre-auth
//! pool** ([`MAX_PENDING`], of which one client address, an IPv6 /64, holds at most
//! [`MAX_PENDING_PER_ADDR`]; at the cap, the oldest pending connection of that address, or of
//! the fullest one, is evicted), and leaves it when a request on it authenticates
//! ([`Slot::authenticate`], called by the routes) for a pool of its own ([`MAX_CONNECTIONS`]).

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio_util::sync::CancellationToken;

/// Authenticated connections open at once, at most (relays are counted separately, once
/// upgraded).
pub const MAX_CONNECTIONS: usize = 4096;
/// Connections not (yet) authenticated, at most.
pub const MAX_PENDING: usize = 1024;
/// Of those, at most this many from one client address.
pub const MAX_PENDING_PER_ADDR: usize = 256;

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
    pub(crate) fn admit(slots: &Arc<Slots>, id: u64, ip: IpAddr) -> Arc<Slot> {
        let addr = crate::auth::addr_key(ip);
        let evicted = CancellationToken::new();
        slots.pool().admit(id, addr, evicted.clone());
        Arc::new(Slot { id, addr, evicted, slots: slots.clone(), authenticated: Mutex::new(false) })
    }

    /// Evicts the oldest pending connection of the fullest address (an accept failed: out of
    /// file descriptors, usually).
    pub(crate) fn evict_one(&self) {
        self.pool().evict_one();
    }
}

/// One connection's place in the pools; it gives it back when dropped (with the connection).
pub struct Slot {
    /// The connection's number, for logs.
    pub(crate) id: u64,
    addr: IpAddr,
    /// Cancelled when the connection is evicted from the pre-auth pool.
    pub(crate) evicted: CancellationToken,
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
