//! What the hub starts for a window: the terminal program is reaped when it exits (no zombie
//! per window).

use serde_json::json;
use std::time::Instant;
use zcode_tests::hub::{AUTH, Hub, http};
use zcode_tests::{Home, WAIT};

/// The state letter of `pid` in `/proc` (`Z`: a zombie), `None` once it is gone.
fn state(pid: u32) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s.rsplit(')').next()?.split_whitespace().next().map(str::to_owned)
}

#[test]
fn a_terminal_program_started_for_a_window_is_reaped_when_it_exits() {
    use std::os::unix::fs::PermissionsExt;
    let home = Home::new();
    let root = tempfile::tempdir().unwrap();
    let project = root.path().join("proj");
    std::fs::create_dir_all(&project).unwrap();
    // A terminal program whose window closes at once: it notes its pid and exits.
    let bin = tempfile::tempdir().unwrap();
    let pid_file = bin.path().join("xterm.pid");
    let xterm = bin.path().join("xterm");
    std::fs::write(
        &xterm,
        format!("#!/bin/sh\necho $$ > '{}.tmp'\nmv '{0}.tmp' '{0}'\n", pid_file.display()),
    )
    .unwrap();
    std::fs::set_permissions(&xterm, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.path().display(), std::env::var("PATH").unwrap_or_default());
    let roots = root.path().display().to_string();
    let hub = Hub::start(
        &home,
        &[
            ("ZCODE_ACP_PROJECT_ROOTS", &roots),
            ("ZCODE_ACP_HUB_TERMINAL", "1"),
            ("ZCODE_ACP_HUB_TERMINAL_APP", "xterm"),
            ("PATH", &path),
        ],
    );
    // The create waits for a registration that never comes; the window is what matters here.
    let port = hub.port;
    let body = json!({"workspacePath": std::fs::canonicalize(&project).unwrap()}).to_string();
    std::thread::spawn(move || {
        http(port, "POST", "/api/instances", &[AUTH, ("Content-Type", "application/json")], body.as_bytes())
    });
    let deadline = Instant::now() + WAIT;
    let pid: u32 = loop {
        if let Some(p) = std::fs::read_to_string(&pid_file).ok().and_then(|s| s.trim().parse().ok()) {
            break p;
        }
        assert!(Instant::now() < deadline, "the hub never started the terminal program: {}", hub.log());
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    loop {
        match state(pid) {
            None => break,
            Some(s) => assert!(
                Instant::now() < deadline,
                "the exited terminal program {pid} is still in the process table (state {s}): never reaped"
            ),
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
