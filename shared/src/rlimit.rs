//! The open-file limit: both servers (the hub and every bridge's loopback server) raise it at
//! start, so a soft limit of 1024 (a common default) cannot make them refuse connections
//! while the hard limit allows far more.

/// Raises the soft open-file limit to the hard one and returns the limit now in force: every
/// relay holds two sockets (and the relay thread a copy of neither), so a soft limit of 1024
/// would refuse connections at ~500 relays, and a bridge would stop accepting (its editor's
/// hub dials included) after ~1000 idle sockets. `None` when the limits cannot be read.
pub fn raise_open_file_limit() -> Option<u64> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    if soft >= hard {
        return Some(soft);
    }
    match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
        Ok(()) => Some(hard),
        Err(e) => {
            tracing::warn!(soft, hard, "cannot raise the open-file limit: {e}");
            Some(soft)
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_soft_limit_ends_at_the_hard_one() {
        use nix::sys::resource::{Resource, getrlimit};
        let now = super::raise_open_file_limit().expect("limits readable");
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("limits");
        assert_eq!((now, soft), (hard, hard));
    }
}
