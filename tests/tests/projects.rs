//! Projects and the session lifecycle through the hub: the project list, a project's history
//! (which incubates a headless serve bridge), create and resume (headless and in a real tmux
//! window running `zcode-acp chat`), fs browsing, project delete, and hostile paths.

#![allow(clippy::unwrap_used)] // Setup helpers outside #[test] fns: a failed unwrap is a failed test.

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use zcode_tests::hub::{Hub, get, http, post, wait_instances};
use zcode_tests::{Bridge, Home, TEST_TOKEN, bin, initialize, new_session, prompt};

const AUTH: (&str, &str) = ("Authorization", "Bearer zcode-test-token-0123456789abcdef");

fn enc(p: &Path) -> String {
    let mut out = String::new();
    for b in p.display().to_string().bytes() {
        if b.is_ascii_alphanumeric() || b"/-_.".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A home whose default agent is the demo agent, a project root, and a hub.
struct World {
    home: Home,
    root: tempfile::TempDir,
    hub: Hub,
}

impl Drop for World {
    /// The serve bridges still listed go with the test (some tests keep them from idling out
    /// for minutes): left running, each would start a hub of its own in the removed home.
    fn drop(&mut self) {
        zcode_tests::hub::stop_serve_bridges(self.hub.port);
    }
}

fn world(extra: &[(&str, &str)]) -> World {
    assert_eq!(TEST_TOKEN, AUTH.1.trim_start_matches("Bearer "));
    let home = Home::new();
    let config = json!({"agents": {"default": "demo", "demo": {"command": bin(), "args": ["demo-agent", "--delay-ms", "0"]}}});
    std::fs::write(home.path().join("config.json"), config.to_string()).unwrap();
    let root = tempfile::tempdir().unwrap();
    let roots = root.path().display().to_string();
    let mut env = vec![
        ("ZCODE_ACP_PROJECT_ROOTS", roots.as_str()),
        ("ZCODE_ACP_REMOTE_PORT", "0"),
        ("ZCODE_ACP_HEARTBEAT_MS", "200"),
        ("ZCODE_ACP_HUB_TERMINAL", "0"),
        // Serve bridges the hub starts go away soon after the test (none is left running).
        ("ZCODE_ACP_SERVE_IDLE_MS", "5000"),
    ];
    env.extend_from_slice(extra);
    let hub = Hub::start(&home, &env);
    World { home, root, hub }
}

/// A project with one finished conversation (its bridge gone): (project path, session id).
fn project_with_history(w: &World, name: &str) -> (PathBuf, String) {
    let p = w.root.path().join(name);
    std::fs::create_dir_all(&p).unwrap();
    let mut b = Bridge::start(&w.home, &zcode_tests::demo_agent(0));
    initialize(&mut b.editor, json!({}));
    let sid = new_session(&mut b.editor, &p);
    let (r, _) = b.editor.call("session/prompt", prompt(&sid, &format!("first words in {name}")));
    assert_eq!(r["result"]["stopReason"], "end_turn");
    assert!(b.editor.close_then_exited());
    (std::fs::canonicalize(&p).unwrap(), sid)
}

#[test]
fn projects_history_resume_create_and_delete() {
    let w = world(&[]);
    let (p, sid) = project_with_history(&w, "alpha");
    let projects = get(&w.hub, "/api/projects").json();
    let row = projects
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["workspacePath"] == p.display().to_string())
        .expect("listed");
    assert_eq!(row["sessions"], 1);
    assert!(row["lastActive"].as_i64().unwrap() > 0);

    // Bad parameters are refused before anything is spawned.
    let before = get(&w.hub, "/api/instances").json().as_array().unwrap().len();
    assert_eq!(get(&w.hub, "/api/projects/sessions").status, 400);
    for q in ["limit=0", "limit=201", "limit=x", "before=yesterday"] {
        let r = get(&w.hub, &format!("/api/projects/sessions?workspacePath={}&{q}", enc(&p)));
        assert_eq!(r.status, 400, "{q}: {}", r.text());
    }
    let other = tempfile::tempdir().unwrap();
    assert_eq!(
        get(&w.hub, &format!("/api/projects/sessions?workspacePath={}", enc(other.path()))).status,
        403
    );
    assert_eq!(
        get(&w.hub, "/api/instances").json().as_array().unwrap().len(),
        before,
        "something was spawned"
    );

    // The listing incubates a headless serve bridge and lists the closed conversation.
    let r = get(&w.hub, &format!("/api/projects/sessions?workspacePath={}", enc(&p)));
    assert_eq!(r.status, 200, "{}", r.text());
    let listing = r.json();
    let serve_id = listing["instance"]["id"].as_str().unwrap().to_owned();
    assert_eq!(listing["instance"]["origin"], "serve");
    assert_eq!(listing["sessions"][0]["sessionId"], sid.as_str());
    assert_eq!(listing["sessions"][0]["title"], "first words in alpha");
    assert!(listing["sessions"][0]["updatedAt"].as_str().unwrap().ends_with('Z'));
    assert_eq!(listing["nextCursor"], Value::Null);
    // A second listing reuses it.
    let again = get(&w.hub, &format!("/api/projects/sessions?workspacePath={}", enc(&p))).json();
    assert_eq!(again["instance"]["id"], serve_id.as_str());

    // Resume in the client: attach to that instance and load the session.
    let mut phone = w.hub.connect(&serve_id).unwrap();
    initialize(&mut phone, json!({}));
    let (r, replay) = phone.call(
        "session/load",
        json!({"sessionId": sid, "cwd": p, "mcpServers": [], "_meta": {"zcode": {"limit": 10}}}),
    );
    assert!(r["result"]["replayMeta"]["totalMessages"].as_u64().unwrap() >= 5, "{r}");
    assert!(replay.iter().any(|m| m["params"]["update"]["content"]["text"] == "first words in alpha"));
    let (r, _) = phone.call("session/prompt", prompt(&sid, "back again"));
    assert_eq!(r["result"]["stopReason"], "end_turn");

    // Create: always a NEW instance, never the serve one.
    let r = post(&w.hub, "/api/instances", &json!({"workspacePath": p}));
    assert_eq!(r.status, 200, "{}", r.text());
    let created = r.json();
    assert_eq!(created["reused"], false);
    assert_ne!(created["id"], serve_id.as_str());
    let id = created["id"].as_str().unwrap().to_owned();
    let list =
        wait_instances(w.hub.port, "the created instance", |l| l.iter().any(|i| i["id"] == id.as_str()));
    let inst = list.iter().find(|i| i["id"] == id.as_str()).unwrap();
    assert_eq!(inst["origin"], "serve");
    assert_eq!(inst["workspace"], p.display().to_string());

    // Create errors.
    assert_eq!(post(&w.hub, "/api/instances", &json!({})).status, 400);
    assert_eq!(
        post(&w.hub, "/api/instances", &json!({"workspacePath": p, "sessionId": "bad id!"})).status,
        400
    );
    assert_eq!(post(&w.hub, "/api/instances", &json!({"workspacePath": other.path()})).status, 403);
    assert_eq!(post(&w.hub, "/api/instances", &json!({"workspacePath": "relative/path"})).status, 403);
    let mut store = zcode_shared::store::Store::open_in(&w.home.path().join("data")).unwrap();
    store.write(|wr| wr.set_deleted("gone_session", true, 1)).unwrap();
    let r = post(&w.hub, "/api/instances", &json!({"workspacePath": p, "sessionId": "gone_session"}));
    assert_eq!((r.status, r.text().as_str()), (404, "session deleted"));

    // A bridge that dies during startup: 502 with the reason (here a config it cannot read).
    let config = w.home.path().join("config.json");
    let good = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, "{ not json").unwrap();
    let r = post(&w.hub, "/api/instances", &json!({"workspacePath": p}));
    std::fs::write(&config, good).unwrap();
    assert_eq!(r.status, 502, "{}", r.text());
    assert!(r.text().contains("exited during startup"), "{}", r.text());

    // Project delete hides it; the create whitelist forgets it (unless under a root).
    let r = post(&w.hub, "/api/projects/delete", &json!({"workspacePath": p}));
    assert_eq!(r.status, 200);
    assert!(r.json()["deletedTasks"].as_u64().unwrap() >= 1);
    assert!(
        !get(&w.hub, "/api/projects")
            .json()
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["workspacePath"] == p.display().to_string())
    );
    assert_eq!(post(&w.hub, "/api/projects/delete", &json!({"workspacePath": p})).json()["deletedTasks"], 0);
    assert_eq!(post(&w.hub, "/api/projects/delete", &json!({})).status, 400);
}

/// Three identical creates while the first one's spawn is still under way share it. The spawn
/// is held open until the hub has said it joined the other two: a terminal command (the
/// `remote.terminal.command` recipe, which the hub runs to completion) that waits for a gate
/// file, then starts the window's script in the background with its stdin on a FIFO this test
/// holds (the chat ends when the test lets go of it).
#[test]
fn concurrent_identical_creates_join_one_spawn() {
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("open");
    let stdin = dir.path().join("stdin");
    let made = std::process::Command::new("mkfifo").arg(&stdin).status().unwrap();
    assert!(made.success(), "mkfifo: {made}");
    // Read and write: opening it never blocks, and the windows' chats read no EOF while held.
    let held = std::fs::OpenOptions::new().read(true).write(true).open(&stdin).unwrap();
    let q = |p: &Path| format!("'{}'", p.display());
    let command = format!(
        "until [ -e {gate} ]; do sleep 0.05; done; sh {{script}} <{stdin} >/dev/null 2>&1 &",
        gate = q(&gate),
        stdin = q(&stdin)
    );
    let w = world(&[("ZCODE_ACP_HUB_TERMINAL", "1"), ("ZCODE_ACP_HUB_TERMINAL_COMMAND", &command)]);
    let (p, _) = project_with_history(&w, "beta");
    let port = w.hub.port;
    let threads: Vec<_> = (0..3)
        .map(|_| {
            let p = p.clone();
            std::thread::spawn(move || {
                http(
                    port,
                    "POST",
                    "/api/instances",
                    &[AUTH],
                    json!({"workspacePath": p}).to_string().as_bytes(),
                )
                .json()
            })
        })
        .collect();
    zcode_tests::hub::wait_log(&w.hub.log_file, "an identical create is under way: joining it", 2);
    std::fs::write(&gate, "").unwrap();
    let ids: Vec<Value> = threads.into_iter().map(|t| t.join().unwrap()["id"].clone()).collect();
    assert!(ids[0].is_string(), "{ids:?}\n{}", w.hub.log());
    assert!(ids.iter().all(|i| *i == ids[0]), "three spawns: {ids:?}");
    // A later create is a new spawn again.
    let later = post(&w.hub, "/api/instances", &json!({"workspacePath": p})).json();
    assert!(later["id"].is_string(), "{later}");
    assert_ne!(later["id"], ids[0]);
    // The windows' chats read EOF and end, their bridges with them.
    drop(held);
    for id in [&ids[0], &later["id"]] {
        let pid: u32 = id.as_str().unwrap().parse().unwrap();
        assert!(
            zcode_tests::hub::wait_gone(pid, zcode_tests::WAIT),
            "the window's bridge {pid} kept running"
        );
    }
}

#[test]
fn browsing_directories_and_hostile_paths() {
    let w = world(&[]);
    let weird = w.root.path().join("we ird '$(touch PWNED)' `id` \"q\"");
    std::fs::create_dir_all(weird.join("sub")).unwrap();
    std::fs::create_dir_all(w.root.path().join(".hidden")).unwrap();
    std::fs::write(w.root.path().join("a-file"), "x").unwrap();
    let r = get(&w.hub, &format!("/api/fs/list?path={}", enc(w.root.path())));
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["path"], std::fs::canonicalize(w.root.path()).unwrap().display().to_string());
    assert_eq!(v["creatable"], true, "under a configured root");
    let names: Vec<&str> =
        v["entries"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert!(
        names.contains(&".hidden")
            && names.iter().any(|n| n.starts_with("we ird"))
            && !names.contains(&"a-file"),
        "{names:?}"
    );
    assert_eq!(get(&w.hub, "/api/fs/list?path=relative").status, 400);
    assert_eq!(get(&w.hub, &format!("/api/fs/list?path={}", enc(&w.root.path().join("nope")))).status, 404);
    assert_eq!(get(&w.hub, &format!("/api/fs/list?path={}", enc(&w.root.path().join("a-file")))).status, 404);
    assert_eq!(get(&w.hub, "/api/fs/list?path=/").json()["parent"], Value::Null);
    let outside = get(&w.hub, "/api/fs/list?path=/usr").json();
    assert_eq!(outside["creatable"], false);

    // A create in the hostile directory runs no command from its name.
    let r = post(&w.hub, "/api/instances", &json!({"workspacePath": weird}));
    assert_eq!(r.status, 200, "{}", r.text());
    for dir in [w.root.path(), &weird, w.home.path(), Path::new("/tmp")] {
        assert!(!dir.join("PWNED").exists(), "a command ran in {}", dir.display());
    }
}

#[test]
fn an_idle_serve_bridge_exits_and_closing_its_last_session_ends_it() {
    let w = world(&[("ZCODE_ACP_SERVE_IDLE_MS", "600"), ("ZCODE_ACP_INSTANCE_TTL_MS", "1000")]);
    let (p, _) = project_with_history(&w, "gamma");
    let id =
        get(&w.hub, &format!("/api/projects/sessions?workspacePath={}", enc(&p))).json()["instance"]["id"]
            .as_str()
            .unwrap()
            .to_owned();
    let pid: u32 = id.parse().unwrap();
    assert!(zcode_tests::hub::wait_gone(pid, zcode_tests::WAIT), "the idle serve bridge kept running");

    // A serve bridge created for a phone, on a hub whose bridges do not idle out: here only the
    // close may end it (with the 600 ms above, a loaded machine could take longer than that to
    // connect the phone, and the bridge rightly left first).
    let w = world(&[("ZCODE_ACP_SERVE_IDLE_MS", "600000")]);
    let (p, _) = project_with_history(&w, "gamma");
    let created = post(&w.hub, "/api/instances", &json!({"workspacePath": p})).json();
    let id = created["id"].as_str().unwrap().to_owned();
    let mut phone = w.hub.connect(&id).unwrap();
    initialize(&mut phone, json!({}));
    let sid = new_session(&mut phone, Path::new("/somewhere/else"));
    let (r, seen) = phone.call("session/prompt", prompt(&sid, "write:pinned.txt"));
    assert_eq!(r["result"]["stopReason"], "end_turn");
    assert!(zcode_tests::agent_text(&seen).contains("Wrote pinned.txt"));
    assert!(p.join("pinned.txt").exists(), "the serve bridge pins session roots to its project");
    let r = post(&w.hub, &format!("/api/instances/{id}/sessions/{sid}/close"), &json!({}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        zcode_tests::hub::wait_gone(id.parse().unwrap(), zcode_tests::WAIT),
        "closing the last session did not end it"
    );
}

/// The sessions `/api/projects/sessions` lists for project `p`.
fn listed_sessions(w: &World, p: &Path) -> Vec<String> {
    let l = get(&w.hub, &format!("/api/projects/sessions?workspacePath={}", enc(p))).json();
    l["sessions"].as_array().unwrap().iter().map(|s| s["sessionId"].as_str().unwrap().to_owned()).collect()
}

/// A serve bridge the hub starts for project `p`, a phone on it through the relay, and one
/// finished turn: (instance id, the phone, session id).
fn phone_turn_on_a_new_serve_bridge(w: &World, p: &Path, text: &str) -> (String, zcode_tests::Peer, String) {
    let id = post(&w.hub, "/api/instances", &json!({"workspacePath": p})).json()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut phone = w.hub.connect(&id).unwrap();
    initialize(&mut phone, json!({}));
    let sid = new_session(&mut phone, p);
    let (r, _) = phone.call("session/prompt", prompt(&sid, text));
    assert_eq!(r["result"]["stopReason"], "end_turn");
    (id, phone, sid)
}

#[test]
fn a_delete_sent_after_closing_a_serve_bridges_last_session_is_done_once_that_bridge_has_gone() {
    // What a phone does (`session.js` `deleteSession`): close, then delete. The close ends the
    // serve bridge; a delete that comes after it has gone (a slow phone, a loaded machine)
    // used to find no instance (404) and the session stayed listed.
    let w = world(&[("ZCODE_ACP_SERVE_IDLE_MS", "600000")]);
    let (p, _) = project_with_history(&w, "epsilon");
    let (id, phone, sid) = phone_turn_on_a_new_serve_bridge(&w, &p, "hello from the phone");
    drop(phone);
    let r = post(&w.hub, &format!("/api/instances/{id}/sessions/{sid}/close"), &json!({}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(zcode_tests::hub::wait_gone(id.parse().unwrap(), zcode_tests::WAIT), "the close did not end it");
    zcode_tests::hub::wait_until("the hub to forget the bridge that left", || {
        !get(&w.hub, "/api/instances").text().contains(&format!("\"{id}\""))
    });
    assert!(listed_sessions(&w, &p).contains(&sid), "closed, not deleted: still in the history");

    // Anything but a delete still meets an unknown instance.
    let r = post(&w.hub, &format!("/api/instances/{id}/sessions/{sid}/close"), &json!({}));
    assert_eq!((r.status, r.text().as_str()), (404, "unknown instance"));

    let r = post(&w.hub, &format!("/api/instances/{id}/sessions/{sid}/delete"), &json!({}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json(), json!({"ok": true, "deleted": true}));
    assert!(!listed_sessions(&w, &p).contains(&sid), "deleted: hidden from the listing");
    let r = post(&w.hub, "/api/instances", &json!({"workspacePath": p, "sessionId": sid}));
    assert_eq!(r.status, 404, "a tombstoned session is not resumed: {}", r.text());
    let r = post(&w.hub, &format!("/api/instances/{id}/sessions/a%20b/delete"), &json!({}));
    assert_eq!(r.status, 400, "a malformed id: {}", r.text());

    // A session live on another bridge is refused, as its own bridge would (close it first);
    // an instance the hub never knew is still unknown.
    let (other, phone, live) = phone_turn_on_a_new_serve_bridge(&w, &p, "still here");
    zcode_tests::hub::wait_until("the other bridge to advertise its session", || {
        get(&w.hub, "/api/instances").text().contains(&live)
    });
    let r = post(&w.hub, &format!("/api/instances/{id}/sessions/{live}/delete"), &json!({}));
    assert_eq!(r.status, 409, "{}", r.text());
    drop(phone);
    let r = post(&w.hub, &format!("/api/instances/{other}/sessions/{live}/close"), &json!({}));
    assert_eq!(r.status, 200, "{}", r.text());
    zcode_tests::hub::wait_until("the closed session in the project's history", || {
        listed_sessions(&w, &p).contains(&live)
    });
    let r = post(&w.hub, &format!("/api/instances/4000000000/sessions/{sid}/delete"), &json!({}));
    assert_eq!((r.status, r.text().as_str()), (404, "unknown instance"));
}

#[test]
fn a_create_opens_chat_in_a_real_tmux_window() {
    let tmux_dir = tempfile::tempdir().unwrap();
    let tmux_tmp = tmux_dir.path().display().to_string();
    // The hub's windows go to the home's own tmux server (never the user's default one: that
    // is also kept out of reach with a private TMUX_TMPDIR and no TMUX).
    let w = world(&[
        ("ZCODE_ACP_HUB_TERMINAL", "1"),
        ("ZCODE_ACP_HUB_TERMINAL_APP", "tmux"),
        ("TMUX_TMPDIR", &tmux_tmp),
        ("TMUX", ""),
    ]);
    let socket = w.home.path().join("run").join("tmux.sock");
    let tmux = |args: &[&str]| {
        let out = std::process::Command::new("tmux")
            .arg("-S")
            .arg(&socket)
            .args(args)
            .env("TMUX_TMPDIR", &tmux_tmp)
            .env_remove("TMUX")
            .output()
            .expect("tmux");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // Whatever happens, the test's tmux server (and the chats in it) goes when the test ends.
    struct KillServer(PathBuf);
    impl Drop for KillServer {
        fn drop(&mut self) {
            let _ = std::process::Command::new("tmux").arg("-S").arg(&self.0).arg("kill-server").status();
        }
    }
    let _cleanup = KillServer(socket.clone());
    let (p, _) = project_with_history(&w, "delta");
    let r = post(&w.hub, "/api/instances", &json!({"workspacePath": p}));
    assert_eq!(r.status, 200, "{} / hub log: {}", r.text(), w.hub.log());
    let id = r.json()["id"].as_str().unwrap().to_owned();
    assert!(
        tmux(&["list-windows", "-t", "zcode-acp"]).contains("delta"),
        "no tmux window named after the project"
    );

    // Wait for the chat's prompt, then type into the window.
    let screen = |what: &str| {
        let deadline = Instant::now() + zcode_tests::WAIT;
        loop {
            let s = tmux(&["capture-pane", "-p", "-J", "-t", "zcode-acp"]);
            if s.contains(what) {
                return s;
            }
            assert!(Instant::now() < deadline, "{what:?} never showed in the window:\n{s}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    screen("type a prompt");
    tmux(&["send-keys", "-t", "zcode-acp", "hello from the window", "Enter"]);
    screen("You said: \"hello from the window\"");

    // A phone attached to the same session sees what is typed in the window.
    let list = wait_instances(w.hub.port, "the window's session", |l| {
        l.iter().any(|i| i["id"] == id.as_str() && !i["sessions"].as_array().unwrap().is_empty())
    });
    let sid = list.iter().find(|i| i["id"] == id.as_str()).unwrap()["sessions"][0]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut phone = w.hub.connect(&id).unwrap();
    initialize(&mut phone, json!({}));
    phone.call(
        "session/load",
        json!({"sessionId": sid, "cwd": p, "mcpServers": [], "_meta": {"zcode": {"limit": 0}}}),
    );
    tmux(&["send-keys", "-t", "zcode-acp", "second from the window", "Enter"]);
    let (echo, _) = phone
        .until("the window's prompt", |m| m["params"]["update"]["sessionUpdate"] == "user_message_chunk");
    assert_eq!(echo["params"]["update"]["content"]["text"], "second from the window");
    phone.until("the reply", |m| {
        m["params"]["update"]["content"]["text"].as_str().is_some_and(|t| t.contains("second"))
            && m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    });

    // A permission asked in the window is answered first on the phone: the window says so.
    tmux(&["send-keys", "-t", "zcode-acp", "permission", "Enter"]);
    let (req, _) =
        phone.until("the permission on the phone", |m| m["method"] == "session/request_permission");
    screen("answer with a number");
    phone.send(&json!({"jsonrpc": "2.0", "id": req["id"], "result": {"outcome": {"outcome": "selected", "optionId": "allow"}}}));
    screen("(answered on another device)");
    screen("Permission granted (allow)");

    // Ctrl-C in the window cancels the running turn.
    tmux(&["send-keys", "-t", "zcode-acp", "long hold", "Enter"]);
    screen("tick 3 ");
    tmux(&["send-keys", "-t", "zcode-acp", "C-c"]);
    screen("(cancelled)");

    // Resume on the desktop: a new window boots into the session with its history tail.
    let r = post(&w.hub, "/api/instances", &json!({"workspacePath": p, "sessionId": sid}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_ne!(r.json()["id"], id.as_str(), "a resume is a new instance");
    let windows = tmux(&["list-windows", "-t", "zcode-acp", "-F", "#{window_index} #{window_name}"]);
    let last = windows.lines().last().unwrap().to_owned();
    assert!(last.ends_with("hello from the window"), "the tab is named after the conversation: {windows}");
    let index = last.split_whitespace().next().unwrap().to_owned();
    let deadline = Instant::now() + zcode_tests::WAIT;
    loop {
        let s = tmux(&["capture-pane", "-p", "-J", "-t", &format!("zcode-acp:{index}")]);
        if s.contains("second from the window") && s.contains("type a prompt") {
            break;
        }
        assert!(Instant::now() < deadline, "the resumed window shows no history:\n{s}");
        std::thread::sleep(Duration::from_millis(100));
    }
    tmux(&["kill-server"]);
}
