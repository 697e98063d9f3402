//! A test knob that holds blocking work at a named point, so a test can show what else still
//! answers meanwhile: with `ZCODE_ACP_TEST_HOLD_DIR` set (debug builds only), [`point`] creates
//! `<dir>/<name>.held` and waits until `<dir>/<name>.release` exists. Unset, it does nothing.

use std::path::PathBuf;
use std::time::Duration;

/// Holds the calling (blocking) thread at `name` while the test knob asks for it (see the
/// module docs). Never call it on an async worker: that stall is what the tests look for.
pub fn point(name: &str) {
    let Some(dir) = zcode_shared::env::test_knob(&zcode_shared::env::ProcessEnv, "ZCODE_ACP_TEST_HOLD_DIR")
    else {
        return;
    };
    let dir = PathBuf::from(dir);
    let _ = std::fs::write(dir.join(format!("{name}.held")), b"");
    let release = dir.join(format!("{name}.release"));
    while !release.exists() {
        std::thread::sleep(Duration::from_millis(10));
    }
}
