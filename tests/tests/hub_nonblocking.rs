//! The hub's project routes never wait on the store's write lock or re-read `config.json` per
//! request: the store is opened once and read in read transactions (so another process holding
//! the write lock does not stall them), and the configuration is kept current by watching the
//! file (an edit is seen, an invalid edit keeps the last good configuration and is logged).

#![allow(clippy::unwrap_used)] // Setup helpers outside #[test] fns: a failed unwrap is a failed test.

use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use zcode_tests::hub::{AUTH, Hub, Reply, http};
use zcode_tests::{Bridge, Home, WAIT, initialize, new_session, prompt};

fn get(hub: &Hub, path: &str) -> Reply {
    http(hub.port, "GET", path, &[AUTH], b"")
}

/// Whether `/api/fs/list` says a session may be created in `dir`.
fn creatable(hub: &Hub, dir: &Path) -> bool {
    let r = get(hub, &format!("/api/fs/list?path={}", dir.display()));
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["creatable"] == true
}

fn write_config(home: &Home, roots: &[&Path]) {
    let roots: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
    let cfg = json!({"remote": {"projectRoots": roots}});
    // Replaced by a rename, as editors and `write_private_atomic` do.
    let tmp = home.path().join("config.json.tmp");
    std::fs::write(&tmp, cfg.to_string()).unwrap();
    std::fs::rename(&tmp, home.path().join("config.json")).unwrap();
}

fn wait_until(what: &str, mut pred: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !pred() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn config_edits_reach_the_running_hub_and_an_invalid_edit_keeps_the_last_good() {
    let home = Home::new();
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    write_config(&home, &[a.path()]);
    let hub = Hub::start(&home, &[]);
    assert!(creatable(&hub, a.path()) && !creatable(&hub, b.path()), "the roots at start");

    write_config(&home, &[b.path()]);
    wait_until("the hub to see the new projectRoots", || creatable(&hub, b.path()));
    assert!(!creatable(&hub, a.path()), "the old root is gone");

    std::fs::write(home.path().join("config.json"), "{\"remote\": {\"projectRoots\": [").unwrap();
    assert!(creatable(&hub, b.path()), "an invalid edit keeps the last good configuration");
    wait_until("the hub to log the invalid edit", || {
        hub.log().contains("keeping the last good configuration")
    });
    assert!(hub.log().contains("config.json is not valid"), "the log names the file: {}", hub.log());
    assert!(creatable(&hub, b.path()) && !creatable(&hub, a.path()), "still the last good configuration");
    assert_eq!(get(&hub, "/api/projects").status, 200, "the hub still answers");

    write_config(&home, &[a.path()]);
    wait_until("the hub to see the fixed file", || creatable(&hub, a.path()));
}

/// A project with one finished conversation (its bridge gone): its realpath.
fn project_with_history(home: &Home, root: &Path) -> String {
    let p = root.join("alpha");
    std::fs::create_dir_all(&p).unwrap();
    let mut b = Bridge::start(home, &zcode_tests::demo_agent(0));
    initialize(&mut b.editor, json!({}));
    let sid = new_session(&mut b.editor, &p);
    let (r, _) = b.editor.call("session/prompt", prompt(&sid, "some words"));
    assert_eq!(r["result"]["stopReason"], "end_turn");
    assert!(b.editor.close_then_exited());
    std::fs::canonicalize(&p).unwrap().display().to_string()
}

/// Another process holding the store's write lock (`BEGIN IMMEDIATE`) until dropped.
struct WriteLock(std::process::Child);

impl WriteLock {
    fn take(db: &Path) -> WriteLock {
        let script = "import sqlite3, sys\n\
                      c = sqlite3.connect(sys.argv[1], isolation_level=None)\n\
                      c.execute('BEGIN IMMEDIATE')\n\
                      print('locked', flush=True)\n\
                      sys.stdin.read()\n";
        let mut child = Command::new("/usr/bin/python3")
            .args(["-c", script])
            .arg(db)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 (with its sqlite3 module) is needed to hold the store's write lock");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "locked", "python3 could not take the write lock");
        WriteLock(child)
    }
}

impl Drop for WriteLock {
    fn drop(&mut self) {
        if let Some(mut stdin) = self.0.stdin.take() {
            let _ = stdin.write_all(b"");
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn project_routes_answer_while_another_process_holds_the_write_lock() {
    let home = Home::new();
    let root = tempfile::tempdir().unwrap();
    let roots = root.path().display().to_string();
    // The history route starts a headless serve bridge over the demo agent.
    let demo = json!({"command": zcode_tests::bin(), "args": ["demo-agent", "--delay-ms", "0"]});
    let config = json!({"agents": {"default": "demo", "demo": demo}});
    std::fs::write(home.path().join("config.json"), config.to_string()).unwrap();
    let env = [
        ("ZCODE_ACP_PROJECT_ROOTS", roots.as_str()),
        ("ZCODE_ACP_HUB_TERMINAL", "0"),
        ("ZCODE_ACP_REMOTE_PORT", "0"),
        ("ZCODE_ACP_HEARTBEAT_MS", "200"),
        ("ZCODE_ACP_SERVE_IDLE_MS", "5000"),
    ];
    let hub = Hub::start(&home, &env);
    let project = project_with_history(&home, root.path());
    let listed =
        |r: &Reply| r.json().as_array().is_some_and(|a| a.iter().any(|p| p["workspacePath"] == project));
    assert!(listed(&get(&hub, "/api/projects")), "the project is known");

    let _lock = WriteLock::take(&home.path().join("data/zcode-acp.sqlite3"));
    let r = get(&hub, "/api/projects");
    assert_eq!(r.status, 200, "GET /api/projects with the write lock held elsewhere: {}", r.text());
    assert!(listed(&r), "{}", r.text());
    let r = get(&hub, &format!("/api/projects/sessions?workspacePath={project}&limit=1"));
    assert_eq!(r.status, 200, "GET /api/projects/sessions: {}", r.text());
    assert!(r.json()["sessions"].as_array().is_some_and(|s| s.len() == 1), "{}", r.text());
    assert!(creatable(&hub, Path::new(&project)));
    let outside = tempfile::tempdir().unwrap();
    let body = json!({"workspacePath": outside.path()}).to_string();
    let r = http(
        hub.port,
        "POST",
        "/api/instances",
        &[AUTH, ("Content-Type", "application/json")],
        body.as_bytes(),
    );
    assert_eq!((r.status, r.text()), (403, "unknown project".to_owned()), "POST /api/instances");
}

/// Sends `method path` with the token on a thread of its own: the answer, or `None` when none
/// came within [`WAIT`].
fn answer_within_wait(hub: &Hub, method: &'static str, path: String, body: Vec<u8>) -> Option<Reply> {
    let (tx, rx) = std::sync::mpsc::channel();
    let port = hub.port;
    std::thread::spawn(move || {
        let _ = tx.send(http(port, method, &path, &[AUTH], &body));
    });
    rx.recv_timeout(WAIT).ok()
}

/// Waits until the hub holds a blocking job at `point` (`ZCODE_ACP_TEST_HOLD_DIR`).
fn wait_held(dir: &Path, point: &str) {
    let held = dir.join(format!("{point}.held"));
    wait_until(&format!("the hub to hold at {point}"), || held.exists());
}

/// `/api/fs/list` stats every entry of a directory: that runs on the blocking pool, not on the
/// store thread, so an SQL-backed route answers while a listing is held.
#[test]
fn a_held_directory_listing_does_not_stall_the_store() {
    let home = Home::new();
    let hold = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let hold_dir = hold.path().display().to_string();
    let hub = Hub::start(&home, &[("ZCODE_ACP_TEST_HOLD_DIR", hold_dir.as_str())]);
    let (port, path) = (hub.port, format!("/api/fs/list?path={}", dir.path().display()));
    let listing = std::thread::spawn(move || http(port, "GET", &path, &[AUTH], b""));
    wait_held(hold.path(), "fs-list");
    let projects = answer_within_wait(&hub, "GET", "/api/projects".into(), vec![]);
    let projects = projects.expect("GET /api/projects did not answer while a directory listing was held");
    assert_eq!(projects.status, 200, "{}", projects.text());
    std::fs::write(hold.path().join("fs-list.release"), b"").unwrap();
    let listed = listing.join().unwrap();
    assert_eq!(listed.status, 200, "{}", listed.text());
    assert_eq!(listed.json()["entries"], json!([{"name": "sub"}]));
}

/// A Web Push subscription is written (and fsynced) on the blocking pool: while writes are
/// held, more subscribes than the hub has async workers leave it answering everything else.
#[test]
fn held_push_subscription_writes_do_not_stall_the_hub() {
    use base64::Engine;
    use p256::elliptic_curve::sec1::ToEncodedPoint;
    let home = Home::new();
    let hold = tempfile::tempdir().unwrap();
    let hold_dir = hold.path().display().to_string();
    let hub = Hub::start(&home, &[("ZCODE_ACP_TEST_HOLD_DIR", hold_dir.as_str())]);
    let key = p256::SecretKey::from_slice(&[7u8; 32]).unwrap().public_key();
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let p256dh = b64(key.to_encoded_point(false).as_bytes());
    // Many more than the hub's async workers (one per core).
    let subscribes: Vec<_> = (0..64)
        .map(|i| {
            let sub = json!({"endpoint": format!("http://127.0.0.1:9/push/{i}"),
                             "keys": {"p256dh": p256dh, "auth": b64(&[i as u8; 16])}});
            let port = hub.port;
            std::thread::spawn(move || {
                http(port, "POST", "/api/push/subscriptions", &[AUTH], sub.to_string().as_bytes())
            })
        })
        .collect();
    wait_held(hold.path(), "push-save");
    let health = answer_within_wait(&hub, "GET", "/api/health".into(), vec![]);
    let health = health.expect("GET /api/health did not answer while subscription writes were held");
    assert_eq!(health.status, 200, "{}", health.text());
    std::fs::write(hold.path().join("push-save.release"), b"").unwrap();
    for s in subscribes {
        let r = s.join().unwrap();
        assert_eq!(r.status, 201, "{}", r.text());
    }
}
