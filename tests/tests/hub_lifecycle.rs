//! The hub's life: started by the first bridge that finds none (detached, throttled), started
//! again after a kill -9, heartbeats through a token mismatch, one hub per home and port,
//! and the idle exit.

use std::net::TcpListener;
use std::time::Duration;
use zcode_tests::hub::{
    Hub, http, hub_pid, hub_port, listed, log_gaps, log_lines, post_json, proc_stat_field, run_cli, signal,
    wait_for_hub, wait_gone, wait_instances, wait_log, wait_until,
};
use zcode_tests::{Bridge, Home, Peer, WAIT, alive, demo_agent, initialize, kill9};

/// The home's detached hub, stopped when the test ends (it would also stop by itself once the
/// home is deleted). Only if that pid is still a process of this home: a test that killed the
/// hub leaves its pid free for the next process (pid_max is 32768 here), another test's bridge.
struct Detached(u32, std::path::PathBuf);

impl Drop for Detached {
    fn drop(&mut self) {
        zcode_tests::kill_in_home(self.0, &self.1, false);
    }
}

fn detached_hub(home: &Home) -> Detached {
    wait_for_hub(home, None);
    Detached(hub_pid(home).expect("the hub wrote its pid"), home.path().to_owned())
}

#[test]
fn a_bridge_starts_the_hub_when_none_runs_detached_in_its_own_session() {
    let home = Home::new();
    let b = Bridge::start_env(&home, &demo_agent(0), &[("ZCODE_ACP_HEARTBEAT_MS", "200")]);
    let port = wait_for_hub(&home, None);
    let hub = detached_hub(&home);
    wait_instances(port, "the bridge to register with the hub it started", |l| listed(l, &b.id()));
    assert_ne!(
        proc_stat_field(hub.0, 4),
        Some(u64::from(b.editor.pid())),
        "the hub is not the bridge's child"
    );
    assert_eq!(proc_stat_field(hub.0, 6), Some(u64::from(hub.0)), "the hub leads its own session");
    assert!(home.path().join("logs/hub.log").exists(), "the hub logs to a file");
}

/// What the bridge logs when it starts a hub, and (at debug level) when no hub answered.
const STARTING: &str = "starting one";
const NO_HUB: &str = "no hub answered";

#[test]
fn the_hub_is_started_at_most_once_per_throttle_window() {
    // A hub that cannot listen (an impossible host) fails every start; the bridge logs every
    // attempt and every start. The events are counted, not the seconds.
    let home = Home::new();
    let hub_log = home.path().join("logs/hub.log");
    let env =
        [("ZCODE_ACP_HEARTBEAT_MS", "50"), ("ZCODE_ACP_HUB_HOST", "256.0.0.1"), ("ZCODE_ACP_DEBUG", "1")];
    let (b, log) = Bridge::start_logged(&home, &demo_agent(0), &env);
    wait_log(&log, STARTING, 1);
    wait_log(&hub_log, "cannot listen", 1);
    // Ten more failed attempts inside the default 60 s window: not one more start.
    wait_until("ten failed attempts after the first start", || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.split_once(STARTING).is_some_and(|(_, after)| after.matches(NO_HUB).count() >= 10)
    });
    let starts = log_lines(&log, STARTING);
    assert_eq!(starts.len(), 1, "one start in the default 60 s window:\n{}", starts.join("\n"));
    let failed = log_lines(&hub_log, "cannot listen");
    assert_eq!(failed.len(), 1, "one hub started:\n{}", failed.join("\n"));
    drop(b);

    // A 600 ms window: the bridge starts hubs again and again, never two in one window. The
    // attempt that decides a start logs "no hub answered" just before starting one: those
    // lines' gaps are the windows, less the moment between the decision and its log line
    // (half a window is left for that; without the throttle they would be a heartbeat apart).
    let home = Home::new();
    let throttled = [env[0], env[1], env[2], ("ZCODE_ACP_HUB_SPAWN_THROTTLE_MS", "600")];
    let (b, log) = Bridge::start_logged(&home, &demo_agent(0), &throttled);
    wait_log(&log, STARTING, 3);
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| l.contains(NO_HUB) || l.contains(STARTING)).collect();
    let decisions: Vec<String> = lines
        .windows(2)
        .filter(|w| w[0].contains(NO_HUB) && w[1].contains(STARTING))
        .map(|w| w[0].to_owned())
        .collect();
    assert!(decisions.len() >= 3, "a start without its attempt logged before it:\n{}", lines.join("\n"));
    for gap in log_gaps(&decisions) {
        assert!(gap >= Duration::from_millis(300), "two starts {gap:?} apart:\n{}", lines.join("\n"));
    }
    wait_log(&home.path().join("logs/hub.log"), "cannot listen", 3);
    drop(b);
}

#[test]
fn after_a_kill_9_of_the_hub_the_next_heartbeat_starts_a_new_one_and_the_bridge_is_listed_again() {
    let home = Home::new();
    let env = [("ZCODE_ACP_HEARTBEAT_MS", "100"), ("ZCODE_ACP_HUB_SPAWN_THROTTLE_MS", "100")];
    let b = Bridge::start_env(&home, &demo_agent(0), &env);
    let first_port = wait_for_hub(&home, None);
    let first = detached_hub(&home);
    wait_instances(first_port, "the bridge", |l| listed(l, &b.id()));
    kill9(first.0);
    assert!(wait_gone(first.0, WAIT));
    let second_port = wait_for_hub(&home, Some(first_port));
    let second = detached_hub(&home);
    assert_ne!(first.0, second.0);
    wait_instances(second_port, "the bridge listed by the new hub", |l| listed(l, &b.id()));
}

#[test]
fn a_bridge_keeps_heartbeating_through_401s_with_backoff() {
    let home = Home::new();
    let hub =
        Hub::start(&home, &[("ZCODE_ACP_REMOTE_TOKEN", "the-hubs-old-token"), ("ZCODE_ACP_DEBUG", "1")]);
    // Heartbeat 100 ms: the 401 backoff is 600 ms, doubling (6 to 60 heartbeats).
    let (b, log) = Bridge::start_logged(&home, &demo_agent(0), &[("ZCODE_ACP_HEARTBEAT_MS", "100")]);
    let refusals = wait_log(&log, "refused this bridge's token", 3);
    let waits: Vec<&str> =
        refusals.iter().filter_map(|l| l.split("retry_in=").nth(1)?.split_whitespace().next()).collect();
    assert_eq!(
        waits,
        ["600ms", "1.2s", "2.4s"],
        "the bridge's backoff after each 401:\n{}",
        refusals.join("\n")
    );
    // The hub saw the attempts that far apart (its own clock; load only stretches the gaps).
    let seen = wait_log(&hub.log_file, "status=401", 3);
    let gaps = log_gaps(&seen);
    assert!(
        gaps[0] >= Duration::from_millis(600) && gaps[1] >= Duration::from_millis(1200),
        "401s {gaps:?} apart, no backoff:\n{}",
        seen.join("\n")
    );
    assert!(alive(b.editor.pid()), "the bridge is fine");
    // The hub is replaced by one with the bridge's token: the bridge gets listed.
    drop(hub);
    let hub = Hub::start(&home, &[]);
    wait_instances(hub.port, "the bridge after the token matched again", |l| listed(l, &b.id()));
}

#[test]
fn one_hub_per_home_and_per_port() {
    let home = Home::new();
    let hub = Hub::start(&home, &[]);
    // Same home: the lock.
    let (code, err) = run_cli(&home, &["hub"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("already running"), "{err}");
    // Same port from another home: the port.
    let other = Home::new();
    let port = hub.port.to_string();
    let (code, err) = run_cli(&other, &["hub"], &[("ZCODE_ACP_HUB_PORT", &port)]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("already running"), "{err}");
    // A port some other program holds is an error, not "a hub is running".
    let squatter = TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = squatter.local_addr().unwrap().port().to_string();
    let (code, err) = run_cli(&other, &["hub"], &[("ZCODE_ACP_HUB_PORT", &port)]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("in use"), "{err}");
    assert_eq!(hub_port(&home), Some(hub.port), "the first hub's port file is untouched");
}

/// A bridge's `hub --background` and a person's `zcode-acp hub` race: the first takes the
/// lock, then finds its port taken and exits. The second must not step aside for it ("a hub
/// is already running") and leave none: it waits for the holder to serve or let go.
#[test]
fn a_hub_waits_for_a_lock_holder_that_never_serves_instead_of_stepping_aside() {
    use std::process::Stdio;
    let home = Home::new();
    // Another process holds the hub lock and serves nothing until it is killed.
    let mut holder = zcode_tests::hub::hold_hub_lock(&home, 0);
    let log_file = home.path().join("second-hub.log");
    let mut hub = home
        .command(&["hub"])
        .env("ZCODE_ACP_REMOTE_TOKEN", zcode_tests::TEST_TOKEN)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_file).unwrap())
        .spawn()
        .unwrap();
    let waiting = wait_log(&log_file, "does not answer yet", 1);
    assert!(alive(hub.id()), "{waiting:?}");
    // The holder goes away without ever serving: this hub takes over.
    holder.kill().unwrap();
    holder.wait().unwrap();
    let port = wait_for_hub(&home, None);
    assert_eq!(http(port, "GET", "/api/health", &[], b"").status, 200);
    assert!(alive(hub.id()), "{}", std::fs::read_to_string(&log_file).unwrap_or_default());
    signal(hub.id(), "TERM");
    hub.wait().unwrap();
}

#[test]
fn the_hub_exits_when_idle_and_the_next_bridge_starts_it_again() {
    // No instances at all: it exits, cleanly.
    let home = Home::new();
    // Idle timeouts of a second: long enough for a loaded machine to see the hub up first.
    let mut hub = Hub::start(&home, &[("ZCODE_ACP_HUB_IDLE_MS", "1000")]);
    let status = hub.wait_exit(WAIT).expect("the idle hub exited");
    assert!(status.success(), "{status:?}");
    assert_eq!(hub_port(&home), None, "its port file is gone");

    // With a bridge registered it stays; when the bridge leaves, it goes.
    let env =
        [("ZCODE_ACP_HEARTBEAT_MS", "100"), ("ZCODE_ACP_HUB_IDLE_MS", "1000"), ("ZCODE_ACP_DEBUG", "1")];
    let mut b = Bridge::start_env(&home, &demo_agent(0), &env);
    let port = wait_for_hub(&home, None);
    let first = detached_hub(&home);
    wait_instances(port, "the bridge", |l| listed(l, &b.id()));
    // The hub's own log shows it answering heartbeats for two idle periods: it stayed.
    let hub_log = home.path().join("logs/hub.log");
    wait_until("heartbeats answered over two idle periods", || {
        let beats = log_lines(&hub_log, "uri=/api/register status=200");
        let span = log_gaps(&beats).iter().sum::<Duration>();
        span >= Duration::from_millis(2000)
    });
    assert!(alive(first.0), "the hub exited while a bridge was registered");
    assert!(b.editor.close_then_exited());
    assert!(wait_gone(first.0, WAIT), "the hub did not exit once idle");

    // The next bridge starts it again.
    let b2 = Bridge::start_env(&home, &demo_agent(0), &env);
    let port = wait_for_hub(&home, None);
    let again = detached_hub(&home);
    assert_ne!(again.0, first.0);
    wait_instances(port, "the new bridge", |l| listed(l, &b2.id()));
}

/// Every relay holds two sockets: a hub started under a low soft open-file limit raises it to
/// the hard one.
#[test]
fn the_hub_raises_its_open_file_soft_limit_to_the_hard_one() {
    let home = Home::new();
    let hub = home.command(&["hub"]);
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c").arg(r#"ulimit -Sn 256 && exec "$0" hub"#).arg(hub.get_program());
    for (k, v) in hub.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    cmd.env("ZCODE_ACP_REMOTE_TOKEN", zcode_tests::TEST_TOKEN).stdout(std::process::Stdio::null());
    let mut child = cmd.spawn().expect("spawn the hub under sh");
    wait_for_hub(&home, None);
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", child.id())).expect("limits");
    let _ = child.kill();
    let _ = child.wait();
    let line = limits.lines().find(|l| l.starts_with("Max open files")).expect("the open-files line");
    let numbers: Vec<&str> = line.split_whitespace().skip(3).take(2).collect();
    assert_eq!(numbers.len(), 2, "{line}");
    assert_ne!(numbers[0], "256", "the soft limit stayed low: {line}");
    assert_eq!(numbers[0], numbers[1], "soft is not the hard limit: {line}");
}

/// `zcode-acp token --rotate` takes effect in the running hub and bridge, nothing restarted:
/// the new token works at once, the old one is refused within a housekeeping period, the
/// bridge registers again with the new token, and the hub's relay into it works.
#[test]
fn a_rotated_token_takes_effect_without_a_restart() {
    let home = Home::new();
    // Housekeeping every second (TTL / 2), heartbeats every 300 ms; the token from its file.
    let env = [
        ("ZCODE_ACP_REMOTE_TOKEN", ""),
        ("ZCODE_ACP_INSTANCE_TTL_MS", "2000"),
        ("ZCODE_ACP_HEARTBEAT_MS", "300"),
    ];
    let hub = Hub::start(&home, &env);
    let agent = demo_agent(0);
    let mut args = vec!["bridge", "--"];
    args.extend(agent.iter().map(String::as_str));
    let mut cmd = home.command(&args);
    cmd.env("ZCODE_ACP_REMOTE_PORT", "0")
        .env("ZCODE_ACP_HEARTBEAT_MS", "300")
        .env("ZCODE_ACP_INSTANCE_TTL_MS", "2000");
    let bridge = Bridge::spawn(&home, cmd, std::process::Stdio::inherit());
    let token_file = home.path().join("token");
    let old = std::fs::read_to_string(&token_file).expect("the hub made the token file").trim().to_owned();
    let list = |token: &str| {
        http(hub.port, "GET", "/api/instances", &[("Authorization", &format!("Bearer {token}"))], b"")
    };
    let id = bridge.editor.pid().to_string();
    let listed_with = |token: &str| {
        let r = list(token);
        r.status == 200 && r.json().as_array().is_some_and(|l| l.iter().any(|i| i["id"] == id.as_str()))
    };
    wait_until("the bridge listed with the first token", || listed_with(&old));

    let out = home.command(&["token", "--rotate"]).output().expect("token --rotate");
    assert!(out.status.success(), "{out:?}");
    let new = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert_ne!(new, old);
    assert_eq!(list(&new).status, 200, "the new token is refused by the running hub");
    wait_until("the old token refused", || list(&old).status == 401);
    // The registrations go on with the new token: the instance, forgotten by the hub, is back
    // with the bridge's next heartbeat (one with the old token would be refused now).
    let forget = post_json(hub.port, "/api/unregister", &serde_json::json!({"token": new, "id": id}));
    assert_eq!(forget.status, 200, "{}", forget.text());
    wait_until("the bridge registered again with the new token", || listed_with(&new));
    // The hub dials the bridge with the new token, and the bridge takes it.
    let path = format!("/acp?instance={id}");
    let mut phone = Peer::connect_ws(hub.port, &path, Some(&new)).expect("the relay with the new token");
    assert!(initialize(&mut phone, serde_json::json!({}))["protocolVersion"].is_number());
    assert_eq!(Peer::connect_ws(hub.port, &path, Some(&old)).err(), Some(401));
}
