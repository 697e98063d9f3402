//! `zcode-shared`: what the hub, the bridge and the binary all need.
//!
//! - [`jsonrpc`]: the JSON-RPC 2.0 envelope (the only module that knows its shape).
//! - [`env`]: the [`env::Env`] trait settings are read through.
//! - [`paths`]: where config, data, token, logs and port files live.
//! - [`config`]: the one config struct, environment over file over default.
//! - [`token`]: the remote token, its generation and rotation.
//! - [`peer`]: which user holds the other end of a local TCP connection.
//! - [`handoff`]: the hub passing a client's WebSocket to its bridge (`SCM_RIGHTS`), and cuts.
//! - [`scope`]: what a connection may do (full, or watch only), as the hub tells a bridge.
//! - [`quota`]: plan quota providers and their caches (`/api/quota`, `account/usage_stats`).
//! - [`registration`]: the payload a bridge registers with (both sides' one definition).
//! - [`logging`]: tracing setup (stderr only: stdout carries ACP).
//! - [`time`]: epoch milliseconds and ISO 8601.
//! - [`rlimit`]: the open-file limit both servers raise at start.
//! - [`text`]: request text made inert for terminals (control sequences out, clean titles).
//! - [`store`]: the SQLite store (journal and tasks index): the only SQL in the workspace.
//! - [`settings`]: the settings API's sections and their safe, locked writes.
//! - [`slots`]: the pre-auth and authenticated connection pools of both servers.
//! - [`http_client`]: the one outgoing HTTP(S) client (push, vendors, the local hops).
//! - [`ordered`]: the one order-preserving raw-JSON object (settings writes, the journal's merger).
//! - [`procgroup`]: children in process groups of their own, signalled safely, reaped.

pub mod config;
pub mod env;
pub mod handoff;
pub mod http_client;
pub mod jsonrpc;
pub mod logging;
pub mod ordered;
pub mod paths;
pub mod peer;
pub mod procgroup;
pub mod quota;
pub mod registration;
pub mod rlimit;
pub mod scope;
pub mod settings;
pub mod slots;
pub mod store;
pub mod text;
pub mod time;
pub mod token;

/// The version of this build, reported to peers (`agentInfo`, registration).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The variable a debug build reads to report another version than [`VERSION`] (the upgrade
/// tests' "newer bridge" and "older running hub"). Release builds ignore it.
pub const TEST_VERSION_VAR: &str = "ZCODE_ACP_TEST_VERSION";

/// The version this process reports (`--version`, `/api/version`, registration, upgrades):
/// [`VERSION`], or in a debug build a non-empty `ZCODE_ACP_TEST_VERSION`. Read once.
pub fn version() -> &'static str {
    static V: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    V.get_or_init(|| {
        let knob = crate::env::test_knob(&crate::env::ProcessEnv, TEST_VERSION_VAR);
        knob.filter(|v| !v.trim().is_empty()).map_or_else(|| VERSION.to_owned(), |v| v.trim().to_owned())
    })
}

/// Compares two dotted versions (`0.11.6`, `1.2.3-beta`) number by number; a missing or
/// non-numeric part counts as 0, anything after `-` or `+` is ignored. `None` when either has
/// no number at all.
pub fn compare_versions(a: &str, b: &str) -> Option<std::cmp::Ordering> {
    fn parts(v: &str) -> Option<Vec<u64>> {
        let core = v.trim().trim_start_matches('v').split(['-', '+']).next()?;
        let nums: Vec<u64> = core.split('.').map(|p| p.parse().unwrap_or(0)).collect();
        core.split('.').next().is_some_and(|p| p.parse::<u64>().is_ok()).then_some(nums)
    }
    let (mut a, mut b) = (parts(a)?, parts(b)?);
    let n = a.len().max(b.len());
    a.resize(n, 0);
    b.resize(n, 0);
    Some(a.cmp(&b))
}

#[cfg(test)]
mod version_tests {
    use super::compare_versions;
    use std::cmp::Ordering::*;

    #[test]
    fn versions_compare_number_by_number() {
        assert_eq!(compare_versions("0.11.6", "0.11.6"), Some(Equal));
        assert_eq!(compare_versions("0.10.0", "0.9.9"), Some(Greater));
        assert_eq!(compare_versions("1.0", "1.0.0"), Some(Equal));
        assert_eq!(compare_versions("v2.0.0-beta", "1.9.9"), Some(Greater));
        assert_eq!(compare_versions("0.1.0", "0.1.1"), Some(Less));
        assert_eq!(compare_versions("zcode-acp", "0.1.0"), None);
    }
}
