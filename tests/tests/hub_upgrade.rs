//! Versions and hub self-upgrade: `GET /api/version`, `POST /api/upgrade`'s reasons, the
//! restart itself (a relayed client told 1012, bridges re-registered, the successor running the
//! disk binary on the same port, no loop), and the upgrade a newer bridge's registration sets
//! off. "A different binary on disk" is a copy of the built binary the hub runs from, replaced
//! by rename (like an install) with a copy carrying extra bytes (another fingerprint, still a
//! valid executable) or touched (a newer mtime). Versions come from the debug builds' knob
//! `ZCODE_ACP_TEST_VERSION` (the hub removes it when it runs the disk binary).

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use zcode_tests::hub::{AUTH, http, wait_for_hub, wait_instances, wait_until};
use zcode_tests::{Bridge, Home, Peer, TEST_TOKEN, WAIT, bin, demo_agent};

/// A copy of the binary in its own directory, and what was done to it.
struct Disk {
    _dir: tempfile::TempDir,
    exe: PathBuf,
}

impl Disk {
    fn new() -> Disk {
        let dir = tempfile::tempdir().expect("temp dir");
        let exe = dir.path().join("zcode-acp");
        std::fs::copy(bin(), &exe).expect("copy the binary");
        Disk { _dir: dir, exe }
    }

    /// Replaces the file by a rename with a copy that has `extra` bytes appended: another
    /// content fingerprint, the same program.
    fn replace_with_other_build(&self) {
        let tmp = self.exe.with_extension("new");
        let mut bytes = std::fs::read(bin()).expect("read the binary");
        bytes.extend_from_slice(b"another build");
        std::fs::write(&tmp, bytes).expect("write the new build");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::rename(&tmp, &self.exe).expect("install the new build");
    }

    /// Sets the file's mtime to now (a rebuild that changed nothing).
    fn touch(&self) {
        // Read-only: a running executable cannot be opened for writing (ETXTBSY).
        let f = std::fs::File::open(&self.exe).expect("open");
        f.set_modified(std::time::SystemTime::now()).expect("set mtime");
    }

    /// `zcode-acp {args}` from this copy, in `home` (like `Home::command`).
    fn command(&self, home: &Home, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.exe);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("ZCODE_ACP_") {
                cmd.env_remove(k);
            }
        }
        cmd.env("ZCODE_ACP_HOME", home.path())
            .env("ZCODE_ACP_HUB_PORT", "0")
            .env("ZCODE_ACP_HUB_IDLE_MS", "30000")
            .env("ZCODE_ACP_REMOTE_TOKEN", TEST_TOKEN)
            .args(args);
        cmd
    }

    /// A hub from this copy (`env` on top); waits until it answers.
    fn hub(&self, home: &Home, env: &[(&str, &str)]) -> (Child, u16) {
        let log = std::fs::File::create(home.path().join("first-hub.log")).expect("log");
        let mut cmd = self.command(home, &["hub"]);
        cmd.envs(env.iter().copied());
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(log);
        (zcode_tests::hub::spawn_copy(&mut cmd), wait_for_hub(home, None))
    }

    /// A bridge from this copy, heartbeating every 300 ms (the test is its editor).
    fn bridge(&self, home: &Home, env: &[(&str, &str)]) -> Bridge {
        let mut args = vec!["bridge", "--"];
        let agent = demo_agent(5);
        args.extend(agent.iter().map(String::as_str));
        let mut cmd = self.command(home, &args);
        cmd.env("ZCODE_ACP_REMOTE_PORT", "0").env("ZCODE_ACP_HEARTBEAT_MS", "300").current_dir(home.path());
        cmd.envs(env.iter().copied());
        Bridge::spawn(home, cmd, Stdio::inherit())
    }
}

fn version(port: u16) -> Value {
    let r = http(port, "GET", "/api/version", &[AUTH], b"");
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

fn upgrade(port: u16) -> Value {
    let r = http(port, "POST", "/api/upgrade", &[AUTH], b"");
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

fn hub_pid(home: &Home) -> Option<u32> {
    zcode_tests::hub::hub_pid(home)
}

/// Waits for the hub that replaced `old_pid` to answer on `port`; returns its pid.
fn wait_successor(home: &Home, old: &mut Child, port: u16) -> u32 {
    let status = old.wait().expect("the old hub exits");
    assert!(status.success(), "the old hub exits cleanly: {status:?}");
    let old_pid = old.id();
    let mut new = 0;
    wait_until("a successor hub on the same port", || {
        new = hub_pid(home).unwrap_or(0);
        new != 0 && new != old_pid && zcode_tests::hub::hub_port(home) == Some(port) && {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
                && http(port, "GET", "/api/health", &[], b"").status == 200
        }
    });
    new
}

fn exe_of(pid: u32) -> PathBuf {
    std::fs::read_link(format!("/proc/{pid}/exe")).expect("the successor's binary")
}

/// Stops the hub holding `home`'s lock (a successor is not our child).
fn stop_hub(home: &Home) {
    if let Some(pid) = hub_pid(home) {
        zcode_tests::kill_in_home(pid, home.path(), false);
        zcode_tests::hub::wait_gone(pid, WAIT);
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    std::fs::canonicalize(a).ok() == std::fs::canonicalize(b).ok()
}

#[test]
fn version_names_the_build_and_a_host_id_that_outlives_the_hub() {
    let home = Home::new();
    let disk = Disk::new();
    let (mut child, port) = disk.hub(&home, &[]);
    assert_eq!(http(port, "GET", "/api/health", &[], b"").text(), "ok", "health stays 200 ok, no token");
    assert_eq!(http(port, "GET", "/api/version", &[], b"").status, 401, "version needs the token");
    let v = version(port);
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    let fp = {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(std::fs::read(&disk.exe).expect("read"));
        format!("sha256:{}", digest.iter().map(|b| format!("{b:02x}")).collect::<String>())
    };
    assert_eq!(v["fingerprint"], fp.as_str(), "the running binary's content hash");
    assert!(v["startedAt"].as_u64().is_some_and(|t| t > 1_700_000_000_000), "{v}");
    let host = v["hostId"].as_str().expect("hostId").to_owned();
    assert_eq!(host.len(), 32);
    let _ = child.kill();
    let _ = child.wait();
    let (mut again, port) = disk.hub(&home, &[]);
    assert_eq!(version(port)["hostId"], host.as_str(), "kept under ZCODE_ACP_HOME");
    let other = Home::new();
    let (mut elsewhere, port2) = disk.hub(&other, &[]);
    assert_ne!(version(port2)["hostId"], host.as_str(), "another home is another machine");
    for c in [&mut again, &mut elsewhere] {
        let _ = c.kill();
        let _ = c.wait();
    }
}

#[test]
fn upgrade_is_post_only_and_ignores_an_older_disk_binary() {
    let home = Home::new();
    let disk = Disk::new();
    // The running hub says it is 9.0.0: the disk binary (0.1.x) is older, whatever else changed.
    let (mut child, port) = disk.hub(&home, &[("ZCODE_ACP_TEST_VERSION", "9.0.0")]);
    assert_eq!(http(port, "POST", "/api/upgrade", &[], b"").status, 401);
    assert_eq!(http(port, "GET", "/api/upgrade", &[AUTH], b"").status, 404);
    assert_eq!(http(port, "PUT", "/api/upgrade", &[AUTH], b"").status, 404);
    let started = version(port)["startedAt"].clone();
    disk.replace_with_other_build();
    let r = upgrade(port);
    assert_eq!(
        r,
        json!({"ok": true, "restarting": false, "reason": "older-on-disk", "runningVersion": "9.0.0",
            "diskVersion": env!("CARGO_PKG_VERSION")})
    );
    // Same hub, still answering: nothing was set off.
    assert_eq!(version(port)["startedAt"], started);
    assert_eq!(upgrade(port)["restarting"], false);
    assert!(child.try_wait().expect("wait").is_none(), "the hub is still running");
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn an_mtime_after_start_restarts_once_onto_the_same_port() {
    let home = Home::new();
    let disk = Disk::new();
    let (mut child, port) = disk.hub(&home, &[]);
    let peek = http(port, "GET", "/api/version?disk=1", &[AUTH], b"").json();
    assert_eq!((&peek["updateAvailable"], &peek["reason"]), (&json!(false), &json!("up-to-date")), "{peek}");
    let r = upgrade(port);
    assert_eq!(r["reason"], "up-to-date", "{r}");
    assert_eq!(r["restarting"], false);
    assert_eq!(r["runningVersion"], r["diskVersion"]);
    disk.touch();
    let r = upgrade(port);
    assert_eq!((&r["restarting"], &r["reason"]), (&json!(true), &json!("mtime")), "{r}");
    let new = wait_successor(&home, &mut child, port);
    assert!(same_file(&exe_of(new), &disk.exe), "the successor runs the disk binary");
    // It started after the mtime: the same check finds nothing to do (no loop).
    let r = upgrade(port);
    assert_eq!((&r["restarting"], &r["reason"]), (&json!(false), &json!("up-to-date")), "{r}");
    stop_hub(&home);
}

#[test]
fn a_newer_disk_version_restarts_the_hub() {
    let home = Home::new();
    let disk = Disk::new();
    // Same bytes on disk, but the running hub reports an older version.
    let (mut child, port) = disk.hub(&home, &[("ZCODE_ACP_TEST_VERSION", "0.0.1")]);
    let r = upgrade(port);
    assert_eq!((&r["restarting"], &r["reason"]), (&json!(true), &json!("version")), "{r}");
    assert_eq!(r["runningVersion"], "0.0.1");
    wait_successor(&home, &mut child, port);
    assert_eq!(version(port)["version"], env!("CARGO_PKG_VERSION"), "the successor is the disk version");
    assert_eq!(upgrade(port)["reason"], "up-to-date");
    stop_hub(&home);
}

#[test]
fn a_new_build_restarts_the_hub_with_1012_to_relays_and_bridges_come_back() {
    let home = Home::new();
    let disk = Disk::new();
    let (mut child, port) = disk.hub(&home, &[]);
    let b = disk.bridge(&home, &[]);
    let id = b.id();
    wait_instances(port, "the bridge registered", |l| zcode_tests::hub::listed(l, &id));
    let mut client = Peer::connect_ws(port, &format!("/acp?instance={id}"), Some(TEST_TOKEN)).expect("relay");
    zcode_tests::initialize(&mut client, json!({}));
    let before = version(port);
    disk.replace_with_other_build();
    // Asking what the check would say changes nothing.
    let peek = http(port, "GET", "/api/version?disk=1", &[AUTH], b"").json();
    assert_eq!((&peek["updateAvailable"], &peek["reason"]), (&json!(true), &json!("fingerprint")), "{peek}");
    assert_eq!(version(port)["startedAt"], before["startedAt"], "still the same hub");
    let r = upgrade(port);
    assert_eq!((&r["restarting"], &r["reason"]), (&json!(true), &json!("fingerprint")), "{r}");
    assert_eq!(client.wait_closed(WAIT), Some(1012), "a relayed client is told: service restart");
    let new = wait_successor(&home, &mut child, port);
    assert!(same_file(&exe_of(new), &disk.exe), "the successor runs the new build");
    let after = version(port);
    assert_ne!(after["fingerprint"], before["fingerprint"]);
    assert_eq!(after["hostId"], before["hostId"]);
    wait_instances(port, "the bridge re-registered with the new hub", |l| zcode_tests::hub::listed(l, &id));
    let mut again = Peer::connect_ws(port, &format!("/acp?instance={id}"), Some(TEST_TOKEN)).expect("relay");
    zcode_tests::initialize(&mut again, json!({}));
    assert_eq!(upgrade(port)["reason"], "up-to-date", "no restart loop");
    drop(b);
    stop_hub(&home);
}

#[test]
fn a_newer_bridge_registering_makes_the_hub_upgrade_itself() {
    let home = Home::new();
    let disk = Disk::new();
    let (mut child, port) = disk.hub(&home, &[]);
    // A bridge of the hub's own version changes nothing.
    let same = disk.bridge(&home, &[]);
    let same_id = same.id();
    wait_instances(port, "the same-version bridge", |l| zcode_tests::hub::listed(l, &same_id));
    let reg = json!({"token": TEST_TOKEN, "id": "probe", "port": 1, "version": env!("CARGO_PKG_VERSION")});
    let r = zcode_tests::hub::post_json(port, "/api/register", &reg);
    assert_eq!(r.json(), json!({"ok": true}));
    // A new build lands on disk, and a bridge of a newer version registers.
    disk.replace_with_other_build();
    let newer = disk.bridge(&home, &[("ZCODE_ACP_TEST_VERSION", "99.0.0")]);
    let newer_id = newer.id();
    let new = wait_successor(&home, &mut child, port);
    assert!(same_file(&exe_of(new), &disk.exe));
    let log = std::fs::read_to_string(home.path().join("first-hub.log")).unwrap_or_default();
    assert!(log.contains("a newer bridge registered") && log.contains("fingerprint"), "{log}");
    wait_instances(port, "both bridges re-registered", |l| {
        zcode_tests::hub::listed(l, &same_id) && zcode_tests::hub::listed(l, &newer_id)
    });
    drop((same, newer));
    stop_hub(&home);
}

fn health(port: u16) -> Result<u16, String> {
    zcode_tests::squat::get_status(port, "/api/health")
}

/// Issue 32, point 6: a self-upgrade hands its listening socket to the successor, so another
/// user's bind loop never gets the port; a client loop sees every request answered and a
/// relayed WebSocket reconnects after each of 20 upgrades.
#[test]
fn twenty_upgrades_never_free_the_port_for_another_user() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use zcode_tests::squat::Squatter;
    let home = Home::new();
    let disk = Disk::new();
    let (mut child, port) = disk.hub(&home, &[]);
    let b = disk.bridge(&home, &[]);
    let id = b.id();
    wait_instances(port, "the bridge registered", |l| zcode_tests::hub::listed(l, &id));
    let squatter = Squatter::start(port);
    let done = Arc::new(AtomicBool::new(false));
    let outcomes = Arc::new(Mutex::new((0usize, Vec::<String>::new())));
    let client = {
        let (done, outcomes) = (done.clone(), outcomes.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                let r = health(port);
                let mut o = outcomes.lock().expect("lock");
                match r {
                    Ok(200) => o.0 += 1,
                    Ok(status) => o.1.push(format!("status {status}")),
                    Err(e) => o.1.push(e),
                }
                drop(o);
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        })
    };
    let relay = || {
        let mut ws = None;
        wait_until("a relayed WebSocket through the new hub", || {
            ws = Peer::connect_ws(port, &format!("/acp?instance={id}"), Some(TEST_TOKEN)).ok();
            ws.is_some()
        });
        let mut ws = ws.expect("relay");
        zcode_tests::initialize(&mut ws, json!({}));
        ws
    };
    let mut ws = relay();
    let mut pid = child.id();
    for round in 1..=20 {
        disk.touch();
        let r = upgrade(port);
        assert_eq!((&r["restarting"], &r["reason"]), (&json!(true), &json!("mtime")), "round {round}: {r}");
        assert_eq!(ws.wait_closed(WAIT), Some(1012), "round {round}: the relay is told: service restart");
        if round == 1 {
            assert!(child.wait().expect("the first hub exits").success());
        }
        let old = pid;
        wait_until(&format!("the successor of round {round}"), || {
            pid = hub_pid(&home).unwrap_or(0);
            pid != 0 && pid != old && health(port) == Ok(200) && !squatter.bound() || squatter.bound()
        });
        assert!(!squatter.bound(), "round {round}: uid 65534 bound the hub's port during the upgrade");
        wait_instances(port, "the bridge re-registered", |l| zcode_tests::hub::listed(l, &id));
        ws = relay();
    }
    done.store(true, Ordering::SeqCst);
    client.join().expect("client loop");
    let (served, failed) = outcomes.lock().expect("lock").clone();
    assert!(
        failed.is_empty(),
        "{} of {} requests failed during the upgrades: {failed:?}",
        failed.len(),
        served + failed.len()
    );
    assert!(served > 20, "the client loop made only {served} requests");
    assert!(!squatter.bound(), "uid 65534 bound the hub's port");
    assert_eq!(squatter.connections(), 0);
    drop(b);
    stop_hub(&home);
}
