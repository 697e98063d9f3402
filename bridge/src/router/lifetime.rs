//! How long the bridge lives: a headless bridge's idle exit, a serve bridge's exit after its
//! last session was closed, and the nudge that tells registration at once when what discovery
//! lists changed.

use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// The router's lifetime state.
pub struct Lifetime {
    /// When a serve bridge whose last session was closed ends: a moment after the close, so
    /// the client's follow-up (a delete of that session) still lands.
    stop_at: Option<Instant>,
    /// Headless: how long it may stay idle.
    idle_exit: Option<Duration>,
    /// Since when nobody is connected and no turn runs.
    idle_since: Option<Instant>,
    /// Poked when what discovery lists changes, so registration tells the hub at once.
    status_nudge: Arc<Notify>,
    /// The listing's signature at the last poke.
    status_sig: u64,
}

impl Lifetime {
    /// A bridge that exits after `idle_exit` idle (`None`: never for idleness).
    pub fn new(idle_exit: Option<Duration>) -> Lifetime {
        Lifetime {
            stop_at: None,
            idle_exit,
            idle_since: None,
            status_nudge: Arc::new(Notify::new()),
            status_sig: 0,
        }
    }

    /// What registration waits on.
    pub fn nudge(&self) -> Arc<Notify> {
        self.status_nudge.clone()
    }

    /// The last session was closed: end in `grace` unless one comes back to life.
    pub fn stop_after(&mut self, grace: Duration) {
        self.stop_at = Some(Instant::now() + grace);
    }

    /// When the bridge ends if nothing happens: a headless one its idle timeout after the
    /// moment it became `idle` (nobody connected, no turn); a serve bridge after its last
    /// close, unless a session is `listed` again.
    pub fn deadline(&mut self, idle: bool, listed: bool) -> Option<Instant> {
        if listed {
            self.stop_at = None;
        }
        let idle_at = match self.idle_exit {
            Some(limit) if idle => Some(*self.idle_since.get_or_insert_with(Instant::now) + limit),
            _ => {
                self.idle_since = None;
                None
            }
        };
        match (idle_at, self.stop_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// After every event: pokes registration when the listing's signature changed or the
    /// agent's health did (a failed or recovered agent is news for the hub's list too).
    pub fn note_status(&mut self, sig: u64, health_changed: bool) {
        if sig != self.status_sig || health_changed {
            self.status_sig = sig;
            self.status_nudge.notify_one();
        }
    }
}
