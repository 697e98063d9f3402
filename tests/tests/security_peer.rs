//! Issue 12, point 1: the token goes only to processes of our own user. Another user (uid
//! 65534, through `setpriv`) squats the hub's port or a dead bridge's port and records every
//! byte it receives; it must get nothing, while the bridge keeps serving its editor and the
//! hub refuses to start on a port another user holds. Issue 32, point 9: the kernel names the
//! owner of our own and another user's sockets, and that user's flood of silent connections
//! on a bridge's port and the hub's keeps no relayed call and no heartbeat out.

use serde_json::json;
use std::process::Stdio;
use std::time::{Duration, Instant};
use zcode_shared::peer::{PeerError, own_uid};
use zcode_tests::flood::Flood;
use zcode_tests::hub::{
    AUTH, Hub, http, hub_pid, listed, run_cli, wait_gone, wait_instances, wait_port_closed,
};
use zcode_tests::squat::{NOBODY, Squatter};
use zcode_tests::{Bridge, Home, TEST_TOKEN, WAIT, demo_agent, initialize, kill9, new_session, prompt};

/// Waits until `path` contains `needle`; returns its text.
fn wait_file_contains(path: &std::path::Path, needle: &str) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.contains(needle) {
            return text;
        }
        assert!(Instant::now() < deadline, "{} never said {needle:?}:\n{text}", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn another_user_on_the_hubs_port_gets_no_token_and_the_editor_is_still_served() {
    let squatter = Squatter::start(0);
    let port = squatter.port().to_string();
    let home = Home::new();
    let stderr_path = home.path().join("bridge.stderr");
    let stderr = std::fs::File::create(&stderr_path).expect("stderr file");
    let mut cmd = home.command(&["bridge", "--"]);
    cmd.args(demo_agent(0))
        .env("ZCODE_ACP_REMOTE_PORT", "0")
        .env("ZCODE_ACP_REMOTE_TOKEN", TEST_TOKEN)
        .env("ZCODE_ACP_HUB_PORT", &port)
        .env("ZCODE_ACP_HEARTBEAT_MS", "100")
        .env("ZCODE_ACP_HUB_SPAWN_THROTTLE_MS", "300")
        .current_dir(home.path());
    let mut b = Bridge::spawn(&home, cmd, Stdio::from(stderr));
    squatter.wait_connections(3, "three registration attempts at the squatter");
    squatter.assert_learned_nothing();

    // The editor is served all along.
    initialize(&mut b.editor, json!({}));
    let sid = new_session(&mut b.editor, home.path());
    let (r, _) = b.editor.call("session/prompt", prompt(&sid, "hello"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let seen = squatter.connections();
    squatter.wait_connections(seen + 3, "more heartbeats");
    squatter.assert_learned_nothing();
    assert!(b.editor.wait_exit(Duration::ZERO).is_none(), "the bridge exited");

    // The hub the bridge started refused the port and said why; the bridge said it once.
    let needle =
        format!("port {port} on 127.0.0.1 is held by another user (uid {NOBODY}): refusing to start");
    let hub_log = wait_file_contains(&home.path().join("logs/hub.log"), &needle);
    assert!(!hub_log.contains(TEST_TOKEN), "{hub_log}");
    let said = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    let refusal = format!("port {port} is held by another user (uid {NOBODY})");
    assert_eq!(said.matches(&refusal).count(), 1, "the bridge logs the refusal once:\n{said}");
    assert!(!said.contains(TEST_TOKEN), "{said}");

    // A hub started by hand on that port: a clear error and a non-zero exit.
    let (code, err) = run_cli(&Home::new(), &["hub"], &[("ZCODE_ACP_HUB_PORT", &port)]);
    assert_ne!(code, 0, "the hub started on a port another user holds: {err}");
    assert!(err.contains(&needle), "{err}");
    squatter.assert_learned_nothing();

    // The squatter leaves: the bridge's next hub takes the port and the bridge registers.
    drop(squatter);
    let port: u16 = port.parse().expect("port");
    let deadline = Instant::now() + WAIT;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err()
        || http(port, "GET", "/api/health", &[], b"").status != 200
    {
        assert!(Instant::now() < deadline, "no hub took the port after the squatter left");
        std::thread::sleep(Duration::from_millis(20));
    }
    let _hub = Stop(hub_pid(&home).expect("the hub's pid"), home.path().to_owned());
    wait_instances(port, "the bridge to register once the port is free", |l| listed(l, &b.id()));
}

/// Stops the home's detached hub when the test ends.
/// (Only if that pid is still a process of this home: see `zcode_tests::kill_in_home`.)
struct Stop(u32, std::path::PathBuf);

impl Drop for Stop {
    fn drop(&mut self) {
        zcode_tests::kill_in_home(self.0, &self.1, false);
    }
}

#[test]
fn another_user_on_a_dead_bridges_port_gets_no_token_no_relay_and_no_health() {
    let home = Home::new();
    // Only probes can drop the instance here: no TTL expiry while the test runs.
    let hub =
        Hub::start(&home, &[("ZCODE_ACP_PROBE_GRACE_MS", "300"), ("ZCODE_ACP_INSTANCE_TTL_MS", "600000")]);
    let b = Bridge::start_env(&home, &demo_agent(0), &[]);
    let id = b.id();
    wait_instances(hub.port, "the bridge", |l| listed(l, &id));
    kill9(b.editor.pid());
    assert!(wait_gone(b.editor.pid(), WAIT), "the bridge survived kill -9");
    wait_port_closed(b.port);
    let squatter = Squatter::start(b.port);
    squatter.wait_bound();

    // Relays through the hub: the bridge is unreachable, and the squatter is sent nothing.
    match hub.connect(&id) {
        Err(status) => assert_eq!(status, 502, "a WebSocket to the dead bridge"),
        Ok(_) => panic!("a WebSocket to the dead bridge's squatter was relayed"),
    }
    let r = http(hub.port, "GET", &format!("/api/instances/{id}/status"), &[AUTH], b"");
    assert_eq!(r.status, 502, "the squatter answered a per-instance request: {}", r.text());
    // The hub's dials were accepted by the kernel; the squatter says so once it takes them.
    squatter.wait_connections(2, "the hub to dial the port (a relay and a status request)");
    squatter.assert_learned_nothing();

    // Probes do not count it as the bridge: it is pruned after the grace.
    let deadline = Instant::now() + WAIT;
    loop {
        let list = http(hub.port, "GET", "/api/instances?probe=1", &[AUTH], b"").json();
        if !listed(list.as_array().expect("an array"), &id) {
            break;
        }
        assert!(Instant::now() < deadline, "probes still count uid {NOBODY}'s socket as the bridge: {list}");
        std::thread::sleep(Duration::from_millis(50));
    }
    squatter.assert_learned_nothing();
    let log = hub.log();
    assert!(!log.contains(TEST_TOKEN), "{log}");
    let refusal = format!("port {} is held by another user (uid {NOBODY})", b.port);
    assert_eq!(log.matches(&refusal).count(), 1, "the hub logs the refusal once:\n{log}");
    drop(b);
}

#[test]
fn the_kernel_names_the_owner_of_our_own_and_another_users_sockets() {
    // Our connection to another user's listener: its end is theirs.
    let squatter = Squatter::start(0);
    let theirs = std::net::TcpStream::connect(("127.0.0.1", squatter.port())).expect("connect");
    let (local, peer) = (theirs.local_addr().expect("local"), theirs.peer_addr().expect("peer"));
    assert_eq!(zcode_shared::peer::owner(local, peer).expect("asked"), Some(NOBODY));
    assert_eq!(
        zcode_shared::peer::verify(local, peer),
        Err(PeerError::Foreign { port: squatter.port(), uid: NOBODY })
    );
    // Another user's connection to our listener: the client's socket is theirs.
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).expect("bind");
    let _flood = Flood::start(1, &[listener.local_addr().expect("address").port()]);
    let (accepted, _) = listener.accept().expect("the other user's connection");
    let (local, peer) = (accepted.local_addr().expect("local"), accepted.peer_addr().expect("peer"));
    assert_eq!(zcode_shared::peer::owner(local, peer).expect("asked"), Some(NOBODY));
    // Our own connection to our own listener: ours, seen from either end.
    let ours = std::net::TcpStream::connect(listener.local_addr().expect("address")).expect("connect");
    let (local, peer) = (ours.local_addr().expect("local"), ours.peer_addr().expect("peer"));
    assert_eq!(zcode_shared::peer::owner(local, peer).expect("asked"), Some(own_uid()));
    let (accepted, _) = listener.accept().expect("our connection");
    let (local, peer) = (accepted.local_addr().expect("local"), accepted.peer_addr().expect("peer"));
    assert_eq!(zcode_shared::peer::owner(local, peer).expect("asked"), Some(own_uid()));
    squatter.assert_learned_nothing();
}

/// Silent connections the flood holds on each port it floods.
const FLOOD: usize = 2000;

#[test]
fn another_users_connection_flood_on_a_bridge_and_the_hub_keeps_no_relayed_call_out() {
    let home = Home::new();
    let hub = Hub::start(&home, &[]);
    let (b, log) = Bridge::start_logged(
        &home,
        &demo_agent(0),
        &[("ZCODE_ACP_HEARTBEAT_MS", "100"), ("RUST_LOG", "info,zcode_bridge::register=debug")],
    );
    let id = b.id();
    wait_instances(hub.port, "the bridge", |l| listed(l, &id));
    let flood = Flood::start(FLOOD, &[b.port, hub.port]);
    // Every socket opened once, and as many reopened.
    assert!(flood.wait_made(4 * FLOOD as u64, WAIT), "the flood opened only {} connections", flood.made());
    let heartbeats_before = std::fs::read_to_string(&log).unwrap_or_default().lines().count();

    let mut failed = Vec::new();
    for i in 0..40 {
        let r = http(hub.port, "GET", &format!("/api/instances/{id}/status"), &[AUTH], b"");
        if r.status != 200 {
            failed.push(format!("status call {i}: {} {}", r.status, r.text()));
        }
        if i < 30
            && let Err(status) = hub.connect(&id)
        {
            failed.push(format!("WebSocket open {i}: {status}"));
        }
    }
    let made = flood.made();
    assert!(
        failed.is_empty(),
        "{} of 70 relayed calls failed under uid {NOBODY}'s flood ({made} connections opened, {:.0}/s):\n{}\nhub log:\n{}",
        failed.len(),
        flood.rate(),
        failed.join("\n"),
        hub.log().lines().filter(|l| l.contains("WARN")).collect::<Vec<_>>().join("\n")
    );
    // The bridge's heartbeats all reached the hub meanwhile.
    let said = std::fs::read_to_string(&log).unwrap_or_default();
    let during: Vec<&str> = said.lines().skip(heartbeats_before).collect();
    for needle in ["no hub answered", "no hub of this user answered", "refused the registration"] {
        assert!(
            !during.iter().any(|l| l.contains(needle)),
            "a heartbeat failed under the flood ({needle:?}):\n{}",
            during.join("\n")
        );
    }
    wait_instances(hub.port, "the bridge still listed", |l| listed(l, &id));
    drop(flood);
}
