//! The home stays private and the logs keep no token (issue 32 point 10): after a full session
//! at the most verbose log level (a hub started as a bridge starts it, `chat` with a prompt on
//! a bridge of its own, a headless bridge the hub starts, the token sent in a query, in a path
//! parameter, in the WebSocket subprotocol, to the hub, through its relay and to a bridge),
//! every file under `ZCODE_ACP_HOME` is 0600, every directory 0700, and no file holds the
//! token in any spelling.

use base64::Engine;
use serde_json::json;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use zcode_tests::hub::{AUTH, http, hub_pid, wait_for_hub, wait_gone, wait_instances};
use zcode_tests::{Home, Peer, TEST_TOKEN, WAIT};

/// What every process of the session runs with: the suite's token, every log line there is,
/// headless bridges only, projects under `root`.
fn env(root: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("ZCODE_ACP_REMOTE_TOKEN", TEST_TOKEN.to_owned()),
        ("RUST_LOG", "trace".to_owned()),
        ("ZCODE_ACP_PROJECT_ROOTS", root.display().to_string()),
        ("ZCODE_ACP_HUB_TERMINAL", "0".to_owned()),
        ("ZCODE_ACP_HEARTBEAT_MS", "200".to_owned()),
        ("ZCODE_ACP_REMOTE_PORT", "0".to_owned()),
    ]
}

fn run(home: &Home, root: &Path, args: &[&str]) -> std::process::Output {
    let mut cmd = home.command(args);
    cmd.envs(env(root)).stdin(Stdio::null());
    cmd.output().expect("run zcode-acp")
}

/// Waits until `out` (a child's stdout so far) holds `needle`.
fn wait_output(out: &Mutex<Vec<u8>>, needle: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        let s = String::from_utf8_lossy(&out.lock().expect("output")).into_owned();
        if s.contains(needle) {
            return;
        }
        assert!(Instant::now() < deadline, "{needle} never showed in the chat:\n{s}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every path under `dir` (itself excluded), depth first.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        out.push(e.path());
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            walk(&e.path(), out);
        }
    }
}

/// Drives one session in `home` at trace level with the token everywhere a client may put it.
/// Returns the paths whose modes were loose, during the session and after it.
fn full_session(home: &Home, root: &Path) -> Vec<String> {
    let project = root.join("proj");
    std::fs::create_dir_all(&project).expect("a project");
    // The hub as a bridge starts it (`hub --background`: its log is logs/hub.log).
    assert!(run(home, root, &["hub", "--background"]).status.success());
    let port = wait_for_hub(home, None);

    // `chat` with a prompt (its bridge logs to logs/chat-bridge-*.log).
    let cwd = project.display().to_string();
    let mut cmd = home.command(&["chat", "--cwd", &cwd]);
    cmd.envs(env(root));
    let mut chat =
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("chat");
    let out = Arc::new(Mutex::new(Vec::new()));
    let (mut stdout, sink) = (chat.stdout.take().expect("stdout"), out.clone());
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock().expect("output").extend_from_slice(&buf[..n]);
        }
    });
    let mut stdin = chat.stdin.take().expect("stdin");
    stdin.write_all(b"hello from a private home\n").expect("type a prompt");
    wait_output(&out, "You said: \"hello from a private home\"");
    let list = wait_instances(port, "the chat's bridge", |l| !l.is_empty());
    let id = list[0]["id"].as_str().expect("an id").to_owned();
    let bridge_port = u16::try_from(list[0]["port"].as_u64().expect("a port")).expect("a port");

    // The token in a query, in path parameters, in the subprotocol: to the hub, its relay and
    // the bridge. Whatever each answers, none may log it.
    let t = TEST_TOKEN;
    for path in [
        format!("/api/instances?token={t}"),
        format!("/api/instances;token={t}"),
        format!("/api/instances;token={t}?probe=1"),
        format!("/api/instances/{id}/status?token={t}"),
        format!("/api/instances/{id}/status;token={t}"),
        format!("/api/nosuch;token={t}"),
    ] {
        http(port, "GET", &path, &[], b"");
        http(port, "GET", &path, &[AUTH], b"");
    }
    let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(t);
    let offer = format!("zcode-acp, zcode-acp.token.{encoded}");
    let mut phone =
        Peer::connect_ws_with(port, &format!("/acp?instance={id}"), &[("Sec-WebSocket-Protocol", &offer)])
            .expect("a relayed WebSocket with the token in its subprotocol");
    let (r, _) = phone.call("initialize", json!({"protocolVersion": 1, "clientCapabilities": {}}));
    assert!(r["result"].is_object(), "{r}");
    let (r, _) = phone.call("session/list", json!({}));
    assert!(r["result"].is_object(), "{r}");
    phone.hang_up();
    let mut phone = Peer::connect_ws(port, &format!("/acp?instance={id}&token={t}"), None)
        .expect("a relayed WebSocket with the token in its query");
    phone.hang_up();
    http(bridge_port, "GET", &format!("/status;token={t}"), &[], b"");
    http(bridge_port, "GET", &format!("/status?token={t}"), &[], b"");

    // A headless bridge the hub starts (logs/serve.log).
    let body = json!({"workspacePath": project}).to_string();
    let r =
        http(port, "POST", "/api/instances", &[AUTH, ("Content-Type", "application/json")], body.as_bytes());
    assert_eq!(r.status, 200, "create: {}", r.text());
    wait_instances(port, "the headless bridge", |l| {
        l.iter().any(|i| i["origin"] == "serve" && i["id"] != id)
    });
    // While everything runs (port files, pid files, the store in use).
    let mut loose = loose_modes(home);

    // The end: the chat quits, `stop` ends the hub and its headless bridge.
    drop(stdin);
    let deadline = Instant::now() + WAIT;
    while chat.try_wait().expect("chat status").is_none() {
        assert!(Instant::now() < deadline, "the chat did not quit at the end of its input");
        std::thread::sleep(Duration::from_millis(20));
    }
    let hub = hub_pid(home).expect("the hub's pid");
    let stopped = run(home, root, &["stop"]);
    assert!(stopped.status.success(), "stop: {}", String::from_utf8_lossy(&stopped.stderr));
    assert!(wait_gone(hub, WAIT), "the hub did not stop");
    loose.extend(loose_modes(home));
    loose
}

/// The files under the home not 0600 and directories not 0700, as `mode path` lines.
fn loose_modes(home: &Home) -> Vec<String> {
    let mut paths = Vec::new();
    walk(home.path(), &mut paths);
    let mut loose = Vec::new();
    for p in &paths {
        let Ok(meta) = std::fs::symlink_metadata(p) else { continue };
        let mode = meta.permissions().mode() & 0o7777;
        let want = if meta.is_dir() { 0o700 } else { 0o600 };
        if mode != want {
            loose.push(format!("{:o} {}", mode, p.strip_prefix(home.path()).unwrap_or(p).display()));
        }
    }
    loose
}

#[test]
fn after_a_full_session_every_file_of_the_home_is_0600_every_directory_0700_and_no_log_holds_the_token() {
    let home = Home::new();
    let root = tempfile::tempdir().expect("a project root");
    let mut loose = full_session(&home, root.path());
    loose.sort();
    loose.dedup();
    assert!(loose.is_empty(), "not private to the user:\n{}", loose.join("\n"));

    let mut paths = Vec::new();
    walk(home.path(), &mut paths);
    let logs: Vec<&PathBuf> = paths.iter().filter(|p| p.extension().is_some_and(|e| e == "log")).collect();
    assert!(logs.len() >= 3, "hub.log, serve.log and a chat bridge's log: {logs:?}");

    let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(TEST_TOKEN);
    let mut leaks = Vec::new();
    for p in paths.iter().filter(|p| p.is_file()) {
        let bytes = std::fs::read(p).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        for (i, line) in text.lines().enumerate() {
            if line.contains(TEST_TOKEN) || line.contains(&encoded) {
                leaks.push(format!("{}:{}: {line}", p.display(), i + 1));
            }
        }
    }
    let shown: Vec<&str> = leaks.iter().take(10).map(String::as_str).collect();
    assert!(leaks.is_empty(), "{} lines hold the token, among them:\n{}", leaks.len(), shown.join("\n"));
}
