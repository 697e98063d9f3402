//! `zcode-acp stop` and `zcode-acp status` (issue 29, point 8): `stop` ends the hub and the
//! headless bridges it started (which would otherwise start a new hub within seconds), names
//! the bridges that remain, and `stop --all` ends those too; `status` shows the hub and every
//! bridge.

#![allow(clippy::unwrap_used)] // Setup helpers outside #[test] fns: a failed unwrap is a failed test.

use serde_json::{Value, json};
use std::path::Path;
use zcode_tests::hub::{AUTH, Hub, http, instances, wait_gone, wait_instances};
use zcode_tests::{Bridge, Home, TEST_TOKEN, WAIT, alive, demo_agent};

/// Runs `zcode-acp {args}` in `home` with the suite's token: (exit code, stdout, stderr).
fn run(home: &Home, args: &[&str]) -> (i32, String, String) {
    let out = home
        .command(args)
        .env("ZCODE_ACP_REMOTE_TOKEN", TEST_TOKEN)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run zcode-acp");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A hub that starts headless bridges (never windows) for projects under `root`.
fn headless_hub(home: &Home, root: &Path) -> Hub {
    let roots = root.display().to_string();
    Hub::start(
        home,
        &[
            ("ZCODE_ACP_PROJECT_ROOTS", &roots),
            ("ZCODE_ACP_HUB_TERMINAL", "0"),
            ("ZCODE_ACP_HEARTBEAT_MS", "200"),
        ],
    )
}

/// A phone's remote create in `project`: the hub starts a headless `serve` bridge there;
/// returns its pid.
fn remote_create(hub: &Hub, project: &Path) -> u32 {
    let body = json!({"workspacePath": project}).to_string();
    let headers = [AUTH, ("Content-Type", "application/json")];
    let r = http(hub.port, "POST", "/api/instances", &headers, body.as_bytes());
    assert_eq!(r.status, 200, "create: {}\n{}", r.text(), hub.log());
    let id = r.json()["id"].as_str().expect("an instance id").to_owned();
    let list = instances(hub.port);
    let row = list.iter().find(|i| i["id"] == id).unwrap_or_else(|| panic!("{id} not listed: {list:?}"));
    assert_eq!(row["origin"], "serve");
    u32::try_from(row["pid"].as_u64().expect("a pid")).unwrap()
}

fn project(root: &Path, name: &str) -> std::path::PathBuf {
    let p = root.join(name);
    std::fs::create_dir_all(&p).unwrap();
    std::fs::canonicalize(p).unwrap()
}

#[test]
fn stop_ends_the_headless_bridges_the_hub_started_so_none_brings_the_hub_back() {
    let home = Home::new();
    let root = tempfile::tempdir().unwrap();
    let mut hub = headless_hub(&home, root.path());
    let serve = remote_create(&hub, &project(root.path(), "phone-project"));

    let (code, out, err) = run(&home, &["stop"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&format!("stopped the hub (pid {})", hub.pid())), "{out}{err}");
    assert!(out.contains(&format!("pid {serve}")) && out.contains("phone-project"), "{out}");
    // The event a respawn would follow is the headless bridge noticing the hub is gone: once
    // that bridge has exited, nothing is left to start a hub.
    assert!(wait_gone(serve, WAIT), "the hub's headless bridge {serve} still runs after stop:\n{out}");
    assert!(hub.wait_exit(WAIT).is_some(), "the hub still runs");
    let (code, out, err) = run(&home, &["status"]);
    assert_eq!(code, 1, "a hub runs again after stop:\n{out}{err}");
    assert!(out.contains("no hub is running"), "{out}{err}");
}

#[test]
fn stop_names_the_editor_bridges_that_will_start_a_new_hub_and_stop_all_ends_them() {
    let home = Home::new();
    let root = tempfile::tempdir().unwrap();
    let hub = headless_hub(&home, root.path());
    let mut editor = Bridge::start_env(&home, &demo_agent(1), &[("ZCODE_ACP_HEARTBEAT_MS", "200")]);
    let id = editor.id();
    wait_instances(hub.port, "the editor bridge", |l| zcode_tests::hub::listed(l, &id));

    let (code, out, err) = run(&home, &["stop"]);
    assert_eq!(code, 0, "{out}{err}");
    let line = out
        .lines()
        .find(|l| l.contains(&format!("pid {id}")))
        .unwrap_or_else(|| panic!("stop does not name the editor bridge {id}:\n{out}{err}"));
    assert!(line.contains("editor") && line.contains(&home.path().display().to_string()), "{line}");
    assert!(out.contains("will start a new hub") && out.contains("stop --all"), "{out}");
    assert!(alive(editor.editor.pid()), "plain stop ended an editor's bridge");
    // Until that bridge starts a new hub, `status` names it as the one that will. (With a
    // 200 ms heartbeat it may have started one already, and not be registered there yet: the
    // new hub's listing is waited for below.)
    let (code, out, err) = run(&home, &["status"]);
    if code == 1 {
        assert!(out.contains("no hub is running") && out.contains(&format!("pid {id}")), "{out}{err}");
    } else {
        assert!(out.starts_with("hub  pid "), "{out}{err}");
    }

    // As said: the editor bridge starts a new hub and registers there.
    let port = zcode_tests::hub::wait_for_hub(&home, Some(hub.port));
    wait_instances(port, "the editor bridge on the new hub", |l| zcode_tests::hub::listed(l, &id));
    let new_hub = zcode_tests::hub::hub_pid(&home).expect("the new hub's pid");

    let (code, out, err) = run(&home, &["stop", "--all"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&format!("pid {id}")), "{out}");
    assert!(editor.editor.wait_exit(WAIT).is_some(), "stop --all left the editor bridge running:\n{out}");
    assert!(wait_gone(new_hub, WAIT), "stop --all left the hub running");
    let (code, out, _) = run(&home, &["status"]);
    assert_eq!(code, 1, "a hub runs again after stop --all:\n{out}");
}

#[test]
fn status_shows_the_hub_and_every_bridge_and_fails_when_no_hub_runs() {
    let home = Home::new();
    let root = tempfile::tempdir().unwrap();
    let hub = headless_hub(&home, root.path());
    let mut editor = Bridge::start_env(&home, &demo_agent(1), &[("ZCODE_ACP_HEARTBEAT_MS", "200")]);
    zcode_tests::initialize(&mut editor.editor, json!({}));
    let sid = zcode_tests::new_session(&mut editor.editor, home.path());
    // A session is listed from its first turn.
    let (done, _) = editor.editor.call("session/prompt", zcode_tests::prompt(&sid, "hello"));
    assert!(done["result"].is_object(), "{done}");
    let id = editor.id();
    let serve = remote_create(&hub, &project(root.path(), "phone-project"));
    wait_instances(hub.port, "the editor bridge with its session", |l| {
        l.iter().any(|i| i["id"] == id && i["sessions"].as_array().is_some_and(|s| s.len() == 1))
    });

    let (code, out, err) = run(&home, &["status"]);
    assert_eq!(code, 0, "{out}{err}");
    let hub_line = out.lines().find(|l| l.starts_with("hub")).unwrap_or_else(|| panic!("{out}"));
    for want in [format!("pid {}", hub.pid()), format!("port {}", hub.port), "version".into(), "up ".into()] {
        assert!(hub_line.contains(&want), "{want:?} missing from {hub_line:?}");
    }
    assert!(hub_line.contains("tunnel"), "{hub_line}");
    let row = |pid: &str| {
        out.lines()
            .find(|l| l.split_whitespace().next() == Some(pid))
            .unwrap_or_else(|| panic!("no row for bridge {pid}:\n{out}"))
            .split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let header: Vec<&str> =
        out.lines().find(|l| l.starts_with("PID")).expect("a header").split_whitespace().collect();
    assert_eq!(header, ["PID", "ORIGIN", "SESSIONS", "AGENT", "PROJECT"], "{out}");
    let e = row(&id);
    assert_eq!((e[1].as_str(), e[2].as_str()), ("editor", "1"), "{e:?}");
    assert!(e.iter().any(|w| w.contains("demo-agent")), "{e:?}");
    assert_eq!(e.last().unwrap(), &home.path().display().to_string());
    let s = row(&serve.to_string());
    assert_eq!((s[1].as_str(), s[2].as_str()), ("headless", "0"), "{s:?}");
    assert!(s.last().unwrap().ends_with("phone-project"), "{s:?}");
    // Columns line up: every row's PROJECT starts where the header's does.
    let col = out.lines().find(|l| l.starts_with("PID")).unwrap().find("PROJECT").unwrap();
    for l in
        out.lines().filter(|l| l.split_whitespace().next().is_some_and(|w| w == id || w == serve.to_string()))
    {
        assert_eq!(l.get(col..col + 1), Some("/"), "misaligned: {l:?}\n{out}");
    }

    let (code, json_out, err) = run(&home, &["status", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&json_out).unwrap_or_else(|e| panic!("{e}: {json_out}"));
    assert_eq!(v["hub"]["pid"], hub.pid());
    assert_eq!(v["hub"]["port"], hub.port);
    let b =
        v["bridges"].as_array().unwrap().iter().find(|b| b["pid"] == editor.editor.pid()).expect("editor");
    assert_eq!((b["origin"].as_str(), b["sessions"].as_u64()), (Some("editor"), Some(1)), "{b}");

    // Nothing of the test is left behind to start a hub again.
    let (code, out, err) = run(&home, &["stop", "--all"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(wait_gone(serve, WAIT), "{out}");
    let (code, out, err) = run(&Home::new(), &["status"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("no hub is running"), "{out}");
}
