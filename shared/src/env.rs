//! Where settings come from: the [`Env`] trait, so precedence is tested with a `HashMap`
//! instead of the process environment. Both [`crate::paths`] and [`crate::config`] read
//! through it (the paths do not depend on the config).

use std::collections::HashMap;

/// A source of environment variables.
pub trait Env {
    /// The value of `key`, if set.
    fn get(&self, key: &str) -> Option<String>;
}

/// The real process environment.
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn get(&self, key: &str) -> Option<String> {
        std::env::var(key).ok()
    }
}

impl Env for HashMap<String, String> {
    fn get(&self, key: &str) -> Option<String> {
        HashMap::get(self, key).cloned()
    }
}

/// The variables only the test suite sets. A debug build (what `cargo test` builds and runs)
/// honours them; a release build never reads them, so an installed `zcode-acp` cannot be
/// steered by one (`ZCODE_ACP_QUOTA_TEST_*_URL` would send a vendor's credentials elsewhere).
/// Read them with [`test_knob`] only (`tests/tests/structure.rs` checks both).
pub const TEST_KNOBS: &[&str] = &[
    "ZCODE_ACP_TEST_VERSION",
    "ZCODE_ACP_TEST_RELAY_FAULT",
    "ZCODE_ACP_TEST_MAX_RELAYS",
    "ZCODE_ACP_TEST_NO_HANDOFF",
    "ZCODE_ACP_QUOTA_TEST_GLM_URL",
    "ZCODE_ACP_QUOTA_TEST_OPENCODE_URL",
    "ZCODE_ACP_QUOTA_TEST_OLLAMA_URL",
    "ZCODE_ACP_USAGE_BACKDATE_MS",
    "ZCODE_ACP_TEST_JOURNAL_BUSY_MS",
    "ZCODE_ACP_TEST_HOLD_DIR",
    "ZCODE_ACP_TEST_QUOTA_PERIOD_MS",
    "ZCODE_ACP_TEST_BACKLOG",
    "ZCODE_ACP_TEST_PAIRING_CODE_MS",
    "ZCODE_ACP_TEST_DEVICE_CHALLENGE_MS",
    "ZCODE_ACP_TEST_LONG_CHUNKS",
    "ZCODE_ACP_TEST_LONG_MS",
];

/// Test knob `name` from `env` in a debug build; `None` in a release build.
pub fn test_knob(env: &dyn Env, name: &str) -> Option<String> {
    debug_assert!(TEST_KNOBS.contains(&name), "{name} is not in TEST_KNOBS");
    if cfg!(debug_assertions) { env.get(name) } else { None }
}
