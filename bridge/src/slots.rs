//! How many connections the bridge's loopback server keeps ([`zcode_shared::slots`], the pools
//! the hub uses too): at most [`cap_for`] at once, half pending (not shown the token yet; the
//! oldest is evicted to make room), half authenticated. Only this user's connections get a
//! place: `crate::server` closes another user's at once, so their idle sockets never push the
//! hub's dial out.
//!
//! Upgraded WebSockets hold no slot (the HTTP connection ends at the upgrade): only clients
//! with the token get that far.

use zcode_shared::slots::Limits;

/// The cap when the open-file limit allows it: far more than the hub and local tools use.
pub const MAX_CONNECTIONS: usize = 1024;

/// The cap for an open-file limit of `nofile`: half of it at most, so sockets, the agent's
/// pipes, journal and files always have descriptors left.
pub fn cap_for(nofile: Option<u64>) -> usize {
    let half = nofile.map_or(MAX_CONNECTIONS as u64, |n| n / 2);
    usize::try_from(half).unwrap_or(MAX_CONNECTIONS).clamp(16, MAX_CONNECTIONS)
}

/// The pools for `cap` connections: every connection comes from loopback, so one address may
/// fill the pending half.
pub fn limits(cap: usize) -> Limits {
    let pending = (cap / 2).max(1);
    Limits { pending, per_addr: pending, authenticated: cap.saturating_sub(pending).max(1) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_half_the_open_file_limit_free() {
        assert_eq!(cap_for(Some(1 << 20)), MAX_CONNECTIONS);
        assert_eq!(cap_for(Some(1024)), 512);
        assert_eq!(cap_for(Some(10)), 16);
        assert_eq!(cap_for(None), MAX_CONNECTIONS);
        assert_eq!(limits(16), Limits { pending: 8, per_addr: 8, authenticated: 8 });
    }
}
