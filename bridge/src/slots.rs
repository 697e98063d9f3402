//! Connection slots of the bridge's loopback server: at most [`Slots::cap`] HTTP connections
//! at once (mini-redis style, a semaphore), and at the cap the OLDEST connection that has not
//! shown the token yet is evicted to make room. Waiting for a slot instead would let another
//! local user who holds the cap's worth of idle sockets (reopened as the header deadline cuts
//! them) keep the hub's dial out; eviction lets every new connection in at once, and the
//! hub's, whose headers and token follow within microseconds, is trusted long before a flood
//! of new sockets could make it the oldest untrusted one.
//!
//! Upgraded WebSockets hold no slot (the HTTP connection ends at the upgrade): only clients
//! with the token get that far.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError};
use tokio_util::sync::CancellationToken;

/// The cap when the open-file limit allows it: far more than the hub and local tools use.
pub const MAX_CONNECTIONS: usize = 1024;

/// The cap for an open-file limit of `nofile`: half of it at most, so sockets, the agent's
/// pipes, journal and files always have descriptors left.
pub fn cap_for(nofile: Option<u64>) -> usize {
    let half = nofile.map_or(MAX_CONNECTIONS as u64, |n| n / 2);
    usize::try_from(half).unwrap_or(MAX_CONNECTIONS).clamp(16, MAX_CONNECTIONS)
}

/// The server's slots. See the module docs.
pub struct Slots {
    limit: Arc<Semaphore>,
    cap: usize,
    /// Connections that have not shown the token, oldest first (ids grow), with their
    /// eviction token.
    untrusted: Mutex<BTreeMap<u64, CancellationToken>>,
    next: AtomicU64,
}

/// One connection's slot: freed (and forgotten) when dropped.
pub struct Slot {
    slots: Arc<Slots>,
    id: u64,
    /// Cancelled when the connection is evicted.
    pub evicted: CancellationToken,
    _permit: OwnedSemaphorePermit,
}

impl Slots {
    /// `cap` slots.
    pub fn new(cap: usize) -> Arc<Slots> {
        Arc::new(Slots {
            limit: Arc::new(Semaphore::new(cap)),
            cap,
            untrusted: Mutex::new(BTreeMap::new()),
            next: AtomicU64::new(0),
        })
    }

    /// How many connections may be open at once.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// A slot for a connection just accepted (untrusted until [`Slot::trust`]). At the cap the
    /// oldest untrusted connection is evicted and its slot taken; when every connection is
    /// trusted, this waits for one to end. `None` only if the semaphore were closed (it never is).
    pub async fn take(self: &Arc<Slots>) -> Option<Slot> {
        let permit = match self.limit.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(TryAcquireError::Closed) => return None,
            Err(TryAcquireError::NoPermits) => {
                if let Some((id, evict)) = self.lock().pop_first() {
                    tracing::debug!(
                        conn = id,
                        "connection cap reached: evicting the oldest untrusted connection"
                    );
                    evict.cancel();
                }
                self.limit.clone().acquire_owned().await.ok()?
            }
        };
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let evicted = CancellationToken::new();
        self.lock().insert(id, evicted.clone());
        Some(Slot { slots: self.clone(), id, evicted, _permit: permit })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, CancellationToken>> {
        self.untrusted.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Slot {
    /// The connection showed the token: it is never evicted.
    pub fn trust(&self) {
        self.slots.lock().remove(&self.id);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.lock().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn at_the_cap_the_oldest_untrusted_connection_makes_room() {
        let slots = Slots::new(3);
        let oldest = slots.take().await.unwrap();
        let trusted = slots.take().await.unwrap();
        trusted.trust();
        let younger = slots.take().await.unwrap();
        let evicted = oldest.evicted.clone();
        // The connection task drops its slot once evicted.
        tokio::spawn(async move {
            oldest.evicted.cancelled().await;
            drop(oldest);
        });
        let newest = slots.take().await.unwrap();
        assert!(evicted.is_cancelled());
        assert!(!trusted.evicted.is_cancelled() && !younger.evicted.is_cancelled());
        drop(newest);
        drop(younger);
        drop(trusted);
        assert_eq!(slots.limit.available_permits(), 3);
        assert!(slots.lock().is_empty());
    }

    #[test]
    fn the_cap_leaves_half_the_open_file_limit_free() {
        assert_eq!(cap_for(Some(1 << 20)), MAX_CONNECTIONS);
        assert_eq!(cap_for(Some(1024)), 512);
        assert_eq!(cap_for(Some(10)), 16);
        assert_eq!(cap_for(None), MAX_CONNECTIONS);
    }
}
