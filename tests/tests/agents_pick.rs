//! Picking the agent (issue 29, point 3): `GET /api/agents`, `POST /api/instances {agent}`,
//! `bridge --agent NAME`, the agent in `/api/instances` and in a project's history, and a
//! resume that runs the agent that made the session.
//!
//! The two agents are the demo agent twice: `demo` (the default) and `alt`, whose
//! `ZCODE_ACP_HOME` (in its `env`) is another directory. The demo agent keeps its sessions
//! under its home's data directory, so `alt`'s sessions are unknown to `demo`: loading one on
//! the default agent fails with "session not found", as a real second agent's would.

#![allow(clippy::unwrap_used)] // Setup helpers outside #[test] fns: a failed unwrap is a failed test.

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use zcode_tests::hub::{Hub, get, post, wait_instances};
use zcode_tests::{Bridge, Home, TEST_TOKEN, bin, initialize, new_session, prompt};

/// A home with the agents `demo` (default) and `alt`, a project root with one project, and a
/// hub that starts bridges headless.
struct World {
    home: Home,
    _root: tempfile::TempDir,
    project: PathBuf,
    hub: Hub,
}

impl Drop for World {
    /// Serve bridges the hub started go with the test.
    fn drop(&mut self) {
        zcode_tests::hub::stop_serve_bridges(self.hub.port);
    }
}

/// `alt`'s own home (where its demo agent keeps its sessions).
fn alt_home(home: &Home) -> PathBuf {
    home.path().join("alt-home")
}

/// Writes the home's config.json: the agents `demo` and `alt`, `default` the default.
fn configure(home: &Home, default: &str) {
    let demo = json!({"command": bin(), "args": ["demo-agent", "--delay-ms", "0"]});
    let alt = json!({"command": bin(), "args": ["demo-agent", "--delay-ms", "1"],
                     "env": {"ZCODE_ACP_HOME": alt_home(home), "SECRET_KEY": "do-not-show-me"}});
    let config = json!({"agents": {"default": default, "demo": demo, "alt": alt}});
    std::fs::write(home.path().join("config.json"), config.to_string()).unwrap();
}

fn world() -> World {
    world_with(&[("ZCODE_ACP_HUB_TERMINAL", "0")])
}

fn world_with(extra: &[(&str, &str)]) -> World {
    let home = Home::new();
    configure(&home, "demo");
    let root = tempfile::tempdir().unwrap();
    let project = root.path().join("proj");
    std::fs::create_dir_all(&project).unwrap();
    let project = std::fs::canonicalize(&project).unwrap();
    let roots = root.path().display().to_string();
    let mut env = vec![
        ("ZCODE_ACP_PROJECT_ROOTS", roots.as_str()),
        ("ZCODE_ACP_REMOTE_PORT", "0"),
        ("ZCODE_ACP_HEARTBEAT_MS", "200"),
        ("ZCODE_ACP_SERVE_IDLE_MS", "5000"),
    ];
    env.extend_from_slice(extra);
    let hub = Hub::start(&home, &env);
    World { home, _root: root, project, hub }
}

/// `zcode-acp bridge --agent NAME` in `cwd` (the test is its editor).
fn bridge_named(w: &World, name: &str, cwd: &Path) -> Bridge {
    let mut cmd = w.home.command(&["bridge", "--agent", name]);
    cmd.env("ZCODE_ACP_REMOTE_PORT", "0")
        .env("ZCODE_ACP_REMOTE_TOKEN", TEST_TOKEN)
        .env("ZCODE_ACP_HEARTBEAT_MS", "200")
        .current_dir(cwd);
    Bridge::spawn(&w.home, cmd, Stdio::inherit())
}

/// The listed instance `id`, once the hub lists it.
fn instance(w: &World, id: &str) -> Value {
    let list = wait_instances(w.hub.port, "the instance", |l| l.iter().any(|i| i["id"] == id));
    list.into_iter().find(|i| i["id"] == id).unwrap()
}

/// A finished conversation in the project, made by `alt` back when it was the default (a
/// plain `zcode-acp bridge`), the default being `demo` again now: the session id.
fn alt_session(w: &World) -> String {
    configure(&w.home, "alt");
    let mut cmd = w.home.command(&["bridge"]);
    cmd.env("ZCODE_ACP_REMOTE_PORT", "0").env("ZCODE_ACP_REMOTE_TOKEN", TEST_TOKEN).current_dir(&w.project);
    let mut b = Bridge::spawn(&w.home, cmd, Stdio::inherit());
    initialize(&mut b.editor, json!({}));
    let sid = new_session(&mut b.editor, &w.project);
    let (r, _) = b.editor.call("session/prompt", prompt(&sid, "made by alt"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert!(b.editor.close_then_exited());
    configure(&w.home, "demo");
    sid
}

#[test]
fn get_agents_lists_the_configured_agents_and_the_default_without_their_env() {
    let w = world();
    let r = get(&w.hub, "/api/agents");
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["default"], "demo");
    let names: Vec<&str> =
        v["agents"].as_array().unwrap().iter().map(|a| a["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["alt", "demo"]);
    assert_eq!(v["agents"][0]["command"], format!("{} demo-agent --delay-ms 1", bin().display()));
    assert!(!r.text().contains("do-not-show-me"), "an agent's env was shown: {}", r.text());

    // No agents configured: the built-in demo agent is the default, and the only choice.
    let home = Home::new();
    let hub = Hub::start(&home, &[("ZCODE_ACP_HUB_TERMINAL", "0")]);
    let v = get(&hub, "/api/agents").json();
    assert_eq!(
        v,
        json!({"default": "demo-agent", "agents": [{"name": "demo-agent", "command": "zcode-acp demo-agent"}]})
    );
}

#[test]
fn a_create_runs_the_agent_it_names_and_an_unknown_name_is_refused_with_the_known_ones() {
    let w = world();
    let r = post(&w.hub, "/api/instances", &json!({"workspacePath": w.project, "agent": "nope"}));
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("unknown agent \"nope\""), "{}", r.text());
    assert!(r.text().contains("alt, demo"), "the known agents are not listed: {}", r.text());
    let r = post(&w.hub, "/api/instances", &json!({"workspacePath": w.project, "agent": 7}));
    assert_eq!(r.status, 400, "{}", r.text());

    let r = post(&w.hub, "/api/instances", &json!({"workspacePath": w.project, "agent": "alt"}));
    assert_eq!(r.status, 200, "{}", r.text());
    let alt = r.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(instance(&w, &alt)["agent"], "alt");
    let r = post(&w.hub, "/api/instances", &json!({"workspacePath": w.project}));
    assert_eq!(r.status, 200, "{}", r.text());
    let default = r.json()["id"].as_str().unwrap().to_owned();
    assert_ne!(default, alt);
    assert_eq!(instance(&w, &default)["agent"], "demo");

    // It really is alt's agent: a session made there lives in alt's home.
    let mut phone = w.hub.connect(&alt).unwrap();
    initialize(&mut phone, json!({}));
    let sid = new_session(&mut phone, &w.project);
    let (r, _) = phone.call("session/prompt", prompt(&sid, "hello alt"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let stored = std::fs::read_dir(alt_home(&w.home).join("data/demo-agent")).unwrap();
    assert!(stored.flatten().any(|e| e.file_name().to_string_lossy().contains(&sid)), "not in alt's home");
}

#[test]
fn bridge_agent_name_runs_the_named_agent_and_an_unknown_name_is_a_clear_error() {
    let w = world();
    let mut b = bridge_named(&w, "alt", &w.project);
    assert_eq!(instance(&w, &b.editor.pid().to_string())["agent"], "alt");
    initialize(&mut b.editor, json!({}));
    let sid = new_session(&mut b.editor, &w.project);
    assert!(alt_home(&w.home).join("data/demo-agent").is_dir(), "the bridge did not run alt");
    let (r, _) = b.editor.call("session/prompt", prompt(&sid, "hi"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert!(b.editor.close_then_exited());

    let (code, err) = zcode_tests::hub::run_cli(&w.home, &["bridge", "--agent", "nope"], &[]);
    assert_ne!(code, 0);
    assert!(err.contains("no agent named \"nope\""), "{err}");
    assert!(err.contains("alt, demo"), "{err}");
    let (code, err) = zcode_tests::hub::run_cli(&w.home, &["chat", "--agent", "nope"], &[]);
    assert_ne!(code, 0);
    assert!(err.contains("no agent named \"nope\""), "{err}");

    // An agent given as a command (an editor's config) is listed by its command line, the
    // program by its own name.
    let b = Bridge::start_env(&w.home, &zcode_tests::demo_agent(0), &[("ZCODE_ACP_HEARTBEAT_MS", "200")]);
    assert_eq!(instance(&w, &b.id())["agent"], "zcode-acp demo-agent --delay-ms 0");
}

#[test]
fn the_history_names_each_sessions_agent_and_a_resume_runs_the_agent_that_made_it() {
    let w = world();
    let sid = alt_session(&w);
    let r = get(&w.hub, &format!("/api/projects/sessions?workspacePath={}", w.project.display()));
    assert_eq!(r.status, 200, "{}", r.text());
    let page = r.json();
    let row = page["sessions"].as_array().unwrap().iter().find(|s| s["sessionId"] == sid.as_str()).unwrap();

    // The resume (what History's Resume asks for when the history's bridge runs another
    // agent): a bridge of alt, on which the session loads and goes on.
    let r = post(&w.hub, "/api/instances", &json!({"workspacePath": w.project, "sessionId": sid}));
    assert_eq!(r.status, 200, "{}", r.text());
    let id = r.json()["id"].as_str().unwrap().to_owned();
    let listed = instance(&w, &id);
    let mut phone = w.hub.connect(&id).unwrap();
    initialize(&mut phone, json!({}));
    let (r, replay) =
        phone.call("session/load", json!({"sessionId": sid, "cwd": w.project, "mcpServers": []}));
    assert!(r["error"].is_null(), "the resume did not load the session: {r}");
    assert!(replay.iter().any(|m| m["params"]["update"]["content"]["text"] == "made by alt"), "{replay:?}");
    assert_eq!(listed["agent"], "alt");
    let (r, _) = phone.call("session/prompt", prompt(&sid, "back again"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    // The history's own bridge stays the default's (the newer alt bridge is not taken for it).
    let again = get(&w.hub, &format!("/api/projects/sessions?workspacePath={}", w.project.display())).json();
    assert_eq!(again["instance"], page["instance"]);

    // The history named the agent; its own bridge runs the default, which does not know
    // alt's session (what a resume there meets).
    assert_eq!(row["agent"], "alt", "{page}");
    assert_eq!(page["instance"]["agent"], "demo", "{page}");
    let mut phone = w.hub.connect(page["instance"]["id"].as_str().unwrap()).unwrap();
    initialize(&mut phone, json!({}));
    let (r, _) = phone.call("session/load", json!({"sessionId": sid, "cwd": w.project, "mcpServers": []}));
    assert!(r["error"]["message"].as_str().unwrap_or("").contains("session not found"), "{r}");
}

#[test]
fn a_create_in_a_terminal_window_runs_the_agent_it_names() {
    let tmux_dir = tempfile::tempdir().unwrap();
    let tmux_tmp = tmux_dir.path().display().to_string();
    let w = world_with(&[
        ("ZCODE_ACP_HUB_TERMINAL", "1"),
        ("ZCODE_ACP_HUB_TERMINAL_APP", "tmux"),
        ("TMUX_TMPDIR", &tmux_tmp),
        ("TMUX", ""),
    ]);
    // The home's own tmux server (and the chat in it) goes when the test ends.
    struct KillServer(PathBuf);
    impl Drop for KillServer {
        fn drop(&mut self) {
            let _ = std::process::Command::new("tmux").arg("-S").arg(&self.0).arg("kill-server").status();
        }
    }
    let _cleanup = KillServer(w.home.path().join("run").join("tmux.sock"));
    let r = post(&w.hub, "/api/instances", &json!({"workspacePath": w.project, "agent": "alt"}));
    assert_eq!(r.status, 200, "{} / hub log: {}", r.text(), w.hub.log());
    let id = r.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(instance(&w, &id)["agent"], "alt", "the window's chat ran another agent");
}
