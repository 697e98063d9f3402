//! Live connections by the credentials that opened them, so that a revocation or a rotation
//! closes them: every HTTP connection registers a cut signal ([`Holds::connection`]) and, at
//! each authenticated request, the credential it presented ([`Holds::hold`]); every relay is
//! registered under its credential with the number the relay thread knows it by. Cutting a
//! credential cancels the connections' signals (their task closes them) and returns the relays'
//! numbers for the relay thread to close.
//!
//! A request that authenticated just before its credential was revoked registers just after
//! the cut: so the caller checks the credential again AFTER registering ([`super::recheck`]).
//! A revocation removes the credential first and cuts second, so one of the two sees the other.

use crate::auth::Credential;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio_util::sync::CancellationToken;

/// The registry (see the module docs). A `std` mutex: never held across an `.await`.
#[derive(Default)]
pub struct Holds {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// HTTP connections by their number: their cut signal and the credentials they used.
    conns: HashMap<u64, (CancellationToken, Vec<Credential>)>,
    /// Relays by the relay thread's number for them.
    relays: HashMap<u64, Credential>,
    next_relay: u64,
}

/// An HTTP connection's registration: [`ConnHold::cut`] fires when a credential it used is cut;
/// dropping it (the connection ends) removes it.
pub struct ConnHold {
    hub: Arc<crate::Hub>,
    id: u64,
    /// Cancelled when the connection must close.
    pub cut: CancellationToken,
}

impl Drop for ConnHold {
    fn drop(&mut self) {
        self.hub.devices.holds.lock().conns.remove(&self.id);
    }
}

impl Holds {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers HTTP connection `id` of `hub` (for as long as the returned hold lives).
    pub fn connection(hub: &Arc<crate::Hub>, id: u64) -> ConnHold {
        let cut = CancellationToken::new();
        hub.devices.holds.lock().conns.insert(id, (cut.clone(), Vec::new()));
        ConnHold { hub: hub.clone(), id, cut }
    }

    /// Notes that connection `conn` made a request with `cred`.
    pub fn hold(&self, conn: u64, cred: &Credential) {
        if let Some((_, held)) = self.lock().conns.get_mut(&conn) {
            if !held.contains(cred) {
                held.push(cred.clone());
            }
        }
    }

    /// Registers a relay opened with `cred`: the number to open it under.
    pub fn relay(&self, cred: &Credential) -> u64 {
        let mut inner = self.lock();
        inner.next_relay += 1;
        let id = inner.next_relay;
        inner.relays.insert(id, cred.clone());
        id
    }

    /// Forgets relay `id` (it ended).
    pub fn relay_ended(&self, id: u64) {
        self.lock().relays.remove(&id);
    }

    /// Cuts every connection and relay that used a credential `which` matches: the
    /// connections' signals are cancelled here; the relays' numbers are returned (for
    /// [`crate::relay::Relays::end`]), and forgotten.
    pub fn cut(&self, which: impl Fn(&Credential) -> bool) -> Vec<u64> {
        let mut inner = self.lock();
        let mut cut_conns = Vec::new();
        inner.conns.retain(|id, (token, held)| {
            let hit = held.iter().any(&which);
            if hit {
                token.cancel();
                cut_conns.push(*id);
            }
            !hit
        });
        let mut relays = Vec::new();
        inner.relays.retain(|id, cred| {
            let hit = which(cred);
            if hit {
                relays.push(*id);
            }
            !hit
        });
        if !cut_conns.is_empty() || !relays.is_empty() {
            tracing::info!(
                connections = cut_conns.len(),
                relays = relays.len(),
                "credential cut: closing its connections"
            );
        }
        relays
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_takes_exactly_the_holders_of_the_credential() {
        let h = Holds::default();
        let (a, b) = (CancellationToken::new(), CancellationToken::new());
        h.lock().conns.insert(1, (a.clone(), Vec::new()));
        h.lock().conns.insert(2, (b.clone(), Vec::new()));
        let phone = Credential::Device("phone".into());
        h.hold(1, &phone);
        h.hold(2, &Credential::Machine(0));
        let r1 = h.relay(&phone);
        let r2 = h.relay(&Credential::Machine(0));
        assert_eq!(h.cut(|c| *c == phone), vec![r1]);
        assert!(a.is_cancelled() && !b.is_cancelled());
        assert!(h.cut(|c| *c == phone).is_empty(), "cut once");
        assert_eq!(h.cut(|c| matches!(c, Credential::Machine(g) if *g < 1)), vec![r2]);
        assert!(b.is_cancelled());
    }
}
