//! The web client's browser tests (`tests/web/*.test.mjs`, Node's test runner driving Debian's
//! chromium through the pinned playwright-core) run as part of `cargo test`: this test builds
//! the binary, runs `node --test` on every file of `tests/web/` (the largest first) against it and fails when any of them fails. Their
//! output goes straight to the terminal; screenshots land in `target/web-screenshots/`.
//! `ZCODE_WEB_TESTS="session delete"` runs only `tests/web/session.test.mjs` and
//! `delete.test.mjs` (what `scripts/test web session delete` sets).

use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_owned()
}

#[test]
fn the_web_client_passes_its_browser_tests() {
    let root = workspace_root();
    let chromium =
        std::env::var_os("CHROMIUM").map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from);
    assert!(
        chromium.exists(),
        "{} is missing: run scripts/install-test-deps (it installs Debian's chromium)",
        chromium.display()
    );
    assert!(
        root.join("tests/peers/node_modules/playwright-core/package.json").exists(),
        "playwright-core is missing: run scripts/install-test-deps"
    );
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let only = std::env::var("ZCODE_WEB_TESTS").unwrap_or_default();
    let mut files: Vec<String> = only.split_whitespace().map(|f| format!("tests/web/{f}.test.mjs")).collect();
    if files.is_empty() {
        // Every file, the largest first: node starts them in this order, two at a time, and
        // the longest (the largest, roughly) started last would run on alone at the end.
        let mut all: Vec<(u64, String)> = std::fs::read_dir(root.join("tests/web"))
            .expect("tests/web")
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".test.mjs"))
            .map(|e| {
                let size = e.metadata().map_or(0, |m| m.len());
                (size, format!("tests/web/{}", e.file_name().to_string_lossy()))
            })
            .collect();
        all.sort_by(|a, b| b.cmp(a));
        files = all.into_iter().map(|(_, f)| f).collect();
    }
    // Two files at a time (ZCODE_WEB_CONCURRENCY sets another number): much of a file's time is
    // spent waiting on the hub, bridges and chromium, and node's default on two cores is one.
    // Three at a time ran the browser files alone in 187 s instead of 223 s, but beside the
    // Rust tests in `.ci/run` it made a pwa wait and a hub-upgrade resume fail (2026-12-03).
    let concurrency =
        std::env::var("ZCODE_WEB_CONCURRENCY").ok().filter(|n| n.parse::<u32>().is_ok_and(|n| n > 0));
    let status = Command::new("node")
        .args(["--test", "--test-reporter=spec"])
        .arg(format!("--test-concurrency={}", concurrency.as_deref().unwrap_or("2")))
        .args(&files)
        .current_dir(&root)
        .env("ZCODE_ACP_BIN", zcode_tests::bin())
        .env("CHROMIUM", &chromium)
        .env("WEB_SCREENSHOTS", target.join("web-screenshots"))
        .status()
        .expect("run node (Node.js 20 or later is needed for the browser tests)");
    assert!(status.success(), "the browser tests failed ({status}): see their output above");
}
