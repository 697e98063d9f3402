//! The suite's own machinery: the binary it builds for itself is the one a person's
//! `cargo build` finds up to date (no rebuild of half the workspace on each side).

use std::process::Command;

/// `cargo build --bin zcode-acp` from a plain shell: only the variables a person's shell
/// would have for cargo and rustup, none of those cargo sets for a running test.
fn plain_cargo_build() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root");
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.env_clear();
    for k in ["PATH", "HOME", "CARGO_HOME", "RUSTUP_HOME", "RUSTUP_TOOLCHAIN", "CARGO_TARGET_DIR"] {
        if let Some(v) = std::env::var_os(k) {
            cmd.env(k, v);
        }
    }
    let status =
        cmd.args(["build", "--quiet", "--bin", "zcode-acp"]).current_dir(root).status().expect("cargo");
    assert!(status.success(), "cargo build --bin zcode-acp failed");
}

#[test]
fn the_binary_the_suite_builds_is_up_to_date_for_a_plain_cargo_build_and_back() {
    let built = zcode_tests::build_bin();
    let stamp = || std::fs::metadata(&built).and_then(|m| m.modified()).expect("the binary");
    let before = stamp();
    plain_cargo_build();
    assert_eq!(
        stamp(),
        before,
        "a plain `cargo build` rebuilt what the suite had just built for itself (an inherited \
         CARGO_* variable changes a build script's inputs: ring's reruns on CARGO_MANIFEST_DIR)"
    );
    zcode_tests::build_bin();
    assert_eq!(stamp(), before, "the suite rebuilt what a plain `cargo build` had found up to date");
}
