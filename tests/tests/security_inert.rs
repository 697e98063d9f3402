//! Nothing from a request is interpreted, the token stays where it is needed, spawns are bounded
//! (issue 12, points 5, 6 and 8): hostile directory names, titles, session ids and prompts run
//! nothing in tmux and reach `zcode-acp chat`'s terminal without control sequences; the agent
//! never sees the token; tmux windows go to the home's own server, whose global environment
//! lacks the token; remote creates beyond the caps get a 429.
//!
//! Every tmux server here is the test's own (the home's socket, `TMUX_TMPDIR` a temp dir, `TMUX`
//! unset): the user's default server is never touched.

#![allow(clippy::unwrap_used)] // Setup helpers outside #[test] fns: a failed unwrap is a failed test.

use serde_json::{Value, json};
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use zcode_tests::hub::{AUTH, get, http, post};
use zcode_tests::world::{World, demo};
use zcode_tests::{Bridge, Home, TEST_TOKEN, WAIT, bin, initialize, new_session, prompt};

/// A home whose default agent is the demo agent (or `agent`), a project root, a private tmux
/// directory and a hub.
fn world(agent: Option<Value>, extra: &[(&str, &str)]) -> World {
    World::start(json!({"default": "a", "a": agent.unwrap_or_else(demo)}), extra)
}

/// Marker files a payload would have created (`pwned-*` where a command could run: each
/// payload changes to the home first, or to `$HOME` if the variable were missing).
fn markers(w: &World) -> Vec<PathBuf> {
    let mut dirs = vec![w.home.path().to_owned(), w.root.path().to_owned()];
    dirs.extend(std::env::current_dir().ok());
    dirs.extend(std::env::var_os("HOME").map(PathBuf::from));
    let mut found = vec![];
    for d in dirs {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_name().as_bytes().starts_with(b"pwned-") {
                found.push(e.path());
            }
        }
    }
    found
}

/// Control characters (C0 but newline and tab, DEL, C1) in `s`.
fn controls(s: &str) -> Vec<char> {
    s.chars().filter(|c| c.is_control() && *c != '\n' && *c != '\t').collect()
}

/// A payload that touches `pwned-<kind>-…` in the home, in each shell and tmux spelling (no
/// `/`, so each is also one directory name).
fn payloads(kind: &str) -> Vec<(String, String)> {
    let m = |k: &str| format!("cd $ZCODE_ACP_HOME; touch pwned-{kind}-{k}");
    vec![
        ("hash".into(), format!("#({})", m("hash"))),
        ("dollar".into(), format!("$({})", m("dollar"))),
        ("tick".into(), format!("`{}`", m("tick"))),
        ("semi".into(), format!("x; {}", m("semi"))),
        ("newline".into(), format!("x\n{}\n#({})", m("nl"), m("nl2"))),
        ("escape".into(), format!("\x1b]0;#({})\x07\x1b[2J\u{9b}31m\x1bPq#({})\x1b\\", m("osc"), m("dcs"))),
    ]
}

/// A conversation in `dir` whose first prompt is `first`, renamed to `rename` if given; its
/// bridge is gone when this returns. Returns the session id and the title the bridge answered.
fn conversation(w: &World, dir: &Path, first: &str, rename: Option<&str>) -> (String, Option<String>) {
    std::fs::create_dir_all(dir).unwrap();
    let mut b = Bridge::start(&w.home, &zcode_tests::demo_agent(0));
    initialize(&mut b.editor, json!({}));
    let sid = new_session(&mut b.editor, dir);
    let (r, _) = b.editor.call("session/prompt", prompt(&sid, first));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let renamed = rename.map(|t| {
        let body = json!({"title": t}).to_string();
        let path = format!("/sessions/{sid}/rename");
        let r = zcode_tests::http_with_body(b.port, "POST", &path, Some(TEST_TOKEN), Some(body.as_bytes()));
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["title"].as_str().unwrap().to_owned()
    });
    assert!(b.editor.close_then_exited());
    (sid, renamed)
}

#[test]
fn hostile_names_titles_and_session_ids_run_nothing_in_tmux() {
    let w = world(None, &[("ZCODE_ACP_HUB_TERMINAL", "1"), ("ZCODE_ACP_HUB_TERMINAL_APP", "tmux")]);
    let create = |ws: &Path, sid: Option<&str>| {
        let r = post(&w.hub, "/api/instances", &json!({"workspacePath": ws, "sessionId": sid}));
        assert_eq!(r.status, 200, "{} / hub log: {}", r.text(), w.hub.log());
    };
    // Directory names: every payload, one at 255 bytes (the longest name) deep in a 3 KiB path.
    let mut dirs: Vec<PathBuf> = payloads("dir").into_iter().map(|(_, p)| w.root.path().join(p)).collect();
    let mut deep = w.root.path().to_owned();
    while deep.as_os_str().len() < 3000 {
        deep.push("d".repeat(200));
    }
    let long = format!("#(cd $ZCODE_ACP_HOME; touch pwned-dir-long){}", "a".repeat(255));
    dirs.push(deep.join(&long[..255]));
    for d in &dirs {
        std::fs::create_dir_all(d).unwrap();
        create(d, None);
    }
    // A name that is not UTF-8: listed (lossily), refused as a create, nothing runs.
    let bad = w
        .root
        .path()
        .join(std::ffi::OsStr::from_bytes(b"bad-\xff\xfe-#(cd $ZCODE_ACP_HOME; touch pwned-utf8)"));
    std::fs::create_dir_all(&bad).unwrap();
    let listing = get(&w.hub, &format!("/api/fs/list?path={}", w.root.path().display()));
    assert_eq!(listing.status, 200, "{}", listing.text());
    let lossy = w.root.path().join(String::from_utf8_lossy(bad.file_name().unwrap().as_bytes()).as_ref());
    let r = post(&w.hub, "/api/instances", &json!({"workspacePath": lossy}));
    assert_eq!(r.status, 403, "{}", r.text());

    // Session ids are refused before anything starts.
    let plain = w.root.path().join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    for (kind, p) in payloads("sid").into_iter().chain([("4k".into(), "x".repeat(4096))]) {
        let r = post(&w.hub, "/api/instances", &json!({"workspacePath": plain, "sessionId": p}));
        assert_eq!(r.status, 400, "session id {kind}: {}", r.text());
    }

    // Titles: the automatic one (a 4 KiB first prompt line) and a rename, resumed in windows.
    let mut resumed = vec![];
    let mut renamed = vec![];
    let some = |kind: &str| {
        payloads(kind).into_iter().filter(|(k, _)| ["hash", "escape", "newline"].contains(&k.as_str()))
    };
    for (kind, p) in some("title") {
        let first = format!("{p}{}", "y".repeat(4096));
        let (sid, _) = conversation(&w, &w.root.path().join(format!("t-{kind}")), &first, None);
        resumed.push((w.root.path().join(format!("t-{kind}")), sid));
    }
    for (kind, p) in some("rename") {
        let dir = w.root.path().join(format!("r-{kind}"));
        // Something visible is left after cleaning (a title of nothing but escapes is refused).
        let (sid, title) = conversation(&w, &dir, "a plain first prompt", Some(&format!("renamed {p}")));
        renamed.push(title.unwrap());
        resumed.push((dir, sid));
    }
    for (dir, sid) in &resumed {
        create(&std::fs::canonicalize(dir).unwrap(), Some(sid));
    }
    let listing = get(
        &w.hub,
        &format!("/api/projects/sessions?workspacePath={}", w.root.path().join("r-escape").display()),
    );
    let stored = listing.json()["sessions"][0]["title"].as_str().unwrap_or_default().to_owned();

    // A client draws the status line, where tmux expands formats again: a job of our own in
    // it shows the drawing happened (the window names were expanded by then, if ever).
    w.tmux(&["set", "-g", "status-left", "#(cd $ZCODE_ACP_HOME; touch drawn)"]);
    let attach = format!("tmux -S '{}' attach -t zcode-acp", w.socket().display());
    let mut client = Command::new("script")
        .args(["-qc", &attach, "/dev/null"])
        .env("TERM", "xterm")
        .env_remove("TMUX")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("script (util-linux), to attach a tmux client");
    let deadline = Instant::now() + WAIT;
    while !w.home.path().join("drawn").exists() {
        assert!(Instant::now() < deadline, "the attached client never drew the status line");
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = client.kill();
    let _ = client.wait();
    let found = markers(&w);
    assert!(found.is_empty(), "a payload ran a command: {found:?}");
    for t in &renamed {
        assert!(controls(t).is_empty(), "rename kept control characters: {t:?}");
    }
    assert!(controls(&stored).is_empty(), "the stored title has control characters: {stored:?}");

    let windows = w.tmux(&["list-windows", "-t", "zcode-acp", "-F", "#{window_name}"]);
    let names: Vec<&str> = windows.lines().collect();
    assert_eq!(names.len(), dirs.len() + resumed.len(), "one window per create: {names:?}");
    for n in &names {
        assert!(controls(n).is_empty(), "a window name carries control characters: {n:?}");
        assert!(n.chars().count() <= 80, "a window name is longer than 80 characters: {n:?}");
    }
    assert!(
        names.iter().any(|n| n.starts_with("#(cd $ZCODE_ACP_HOME; touch pwned-dir-hash")),
        "the `#(…)` directory name is not shown literally: {names:?}"
    );
    assert!(
        names.iter().any(|n| n.starts_with("#(cd $ZCODE_ACP_HOME; touch pwned-title-hash")),
        "the `#(…)` title is not shown literally: {names:?}"
    );
}

#[test]
fn tmux_runs_on_the_homes_own_server_without_the_token() {
    let w = world(None, &[("ZCODE_ACP_HUB_TERMINAL", "1"), ("ZCODE_ACP_HUB_TERMINAL_APP", "tmux")]);
    let p = w.root.path().join("omega");
    std::fs::create_dir_all(&p).unwrap();
    let r = post(&w.hub, "/api/instances", &json!({"workspacePath": p}));
    assert_eq!(r.status, 200, "{} / hub log: {}", r.text(), w.hub.log());
    let default_dir = w.tmux_tmp.path().read_dir().unwrap().flatten().map(|e| e.path()).collect::<Vec<_>>();
    assert!(default_dir.is_empty(), "the default tmux server was used: {default_dir:?}");
    assert!(w.tmux(&["list-windows", "-t", "zcode-acp"]).contains("omega"), "no window on the home's server");
    let global = w.tmux(&["show-environment", "-g"]);
    assert!(global.contains("ZCODE_ACP_HOME="), "the server's environment was not read: {global}");
    assert!(
        !global.contains("ZCODE_ACP_REMOTE_TOKEN") && !global.contains(TEST_TOKEN),
        "the token is in the tmux server's global environment"
    );
    let session = w.tmux(&["show-environment", "-t", "zcode-acp"]);
    assert!(!session.contains(TEST_TOKEN), "the token is in the tmux session's environment");
}

/// `zcode-acp chat` in `dir` with its stdout captured raw: (child, its output so far).
fn chat(w: &World, dir: &Path) -> (std::process::Child, std::sync::Arc<std::sync::Mutex<Vec<u8>>>) {
    let mut cmd = w.home.command(&["chat", "--cwd", &dir.display().to_string()]);
    cmd.env("ZCODE_ACP_REMOTE_PORT", "0")
        .env("ZCODE_ACP_REMOTE_TOKEN", TEST_TOKEN)
        .env("ZCODE_ACP_HEARTBEAT_MS", "200");
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    let out = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut stdout = child.stdout.take().unwrap();
    let sink = out.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    (child, out)
}

fn wait_output(out: &std::sync::Mutex<Vec<u8>>, what: &str, count: usize) {
    let deadline = Instant::now() + WAIT;
    loop {
        let s = String::from_utf8_lossy(&out.lock().unwrap()).into_owned();
        if s.matches(what).count() >= count {
            return;
        }
        assert!(Instant::now() < deadline, "{what:?} (×{count}) never showed in the chat:\n{s:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn chat_shows_agent_text_remote_prompts_and_titles_without_control_sequences() {
    let w = world(None, &[]);
    let p = w.root.path().join("chatty");
    std::fs::create_dir_all(&p).unwrap();
    let (mut child, out) = chat(&w, &p);
    wait_output(&out, "type a prompt", 1);
    let mut stdin = child.stdin.take().unwrap();
    // The owner types escapes (the agent echoes them) and a line that is not UTF-8.
    let payload = "say \x1b]0;PWNED\x07 \x1b[2J\x1b[31mred \u{9b}1m \x1bPqDCS\x1b\\ \x1b]8;;http://x\x1b\\ bell\x07 \x7f end";
    stdin.write_all(format!("{payload}\n").as_bytes()).unwrap();
    wait_output(&out, "You said: \"", 1);
    assert_inert(&String::from_utf8_lossy(&out.lock().unwrap()));
    stdin.write_all(b"bad \xff\xfe bytes\nafter the bad line\n").unwrap();
    wait_output(&out, "You said: \"", 3);

    // A phone on the same session: its prompt and a rename reach the chat.
    let list = zcode_tests::hub::wait_instances(w.hub.port, "the chat's bridge", |l| {
        l.iter().any(|i| {
            i["workspace"] == std::fs::canonicalize(&p).unwrap().display().to_string()
                && !i["sessions"].as_array().unwrap().is_empty()
        })
    });
    let inst = list.iter().find(|i| !i["sessions"].as_array().unwrap().is_empty()).unwrap();
    let id = inst["id"].as_str().unwrap().to_owned();
    let sid = inst["sessions"][0]["sessionId"].as_str().unwrap().to_owned();
    let title = inst["sessions"][0]["title"].as_str().unwrap_or_default().to_owned();
    assert!(controls(&title).is_empty(), "the automatic title has control characters: {title:?}");
    let mut phone = w.hub.connect(&id).unwrap();
    initialize(&mut phone, json!({}));
    phone.call(
        "session/load",
        json!({"sessionId": sid, "cwd": p, "mcpServers": [], "_meta": {"zcode": {"limit": 0}}}),
    );
    let (r, _) = phone.call(
        "session/prompt",
        prompt(&sid, "from the phone \x1b]0;PHONE\x07\x1b[1;1H\x1b[J\u{9d}0;C1\u{9c} done"),
    );
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    wait_output(&out, "You said: \"from the phone", 1);
    let r = post(
        &w.hub,
        &format!("/api/instances/{id}/sessions/{sid}/rename"),
        &json!({"title": "re\x1b]0;NAMED\x07named \x1b[5m\u{7}"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let renamed = r.json()["title"].as_str().unwrap().to_owned();
    assert!(controls(&renamed).is_empty(), "rename kept control characters: {renamed:?}");
    stdin.write_all(b"last\n").unwrap();
    wait_output(&out, "You said: \"last", 1);
    drop(stdin);
    let _ = child.wait();

    let text = String::from_utf8_lossy(&out.lock().unwrap()).into_owned();
    assert!(text.contains("from the phone"), "the phone's prompt is not shown: {text:?}");
    assert_inert(&text);
}

/// The chat's own tab title (OSC 0 with a clean title) is the one sequence allowed in `text`.
fn assert_inert(text: &str) {
    let mut rest = String::new();
    let mut titles = vec![];
    let mut s = text;
    while let Some(i) = s.find("\x1b]0;") {
        rest.push_str(&s[..i]);
        let tail = &s[i + 4..];
        let end = tail.find('\x07').expect("an unterminated title sequence");
        titles.push(&tail[..end]);
        s = &tail[end + 1..];
    }
    rest.push_str(s);
    assert!(
        controls(&rest).is_empty(),
        "control characters reached the terminal: {:?}\n{rest:?}",
        controls(&rest)
    );
    for t in titles {
        assert!(
            controls(t).is_empty() && !t.contains("PWNED") && !t.contains("NAMED"),
            "a title from a request: {t:?}"
        );
    }
}

#[test]
fn the_agent_and_what_it_starts_run_without_the_token() {
    let home = Home::new();
    let dump = home.path().join("agent-env");
    let child_dump = home.path().join("grandchild-env");
    let script = format!(
        "env > '{}'; sh -c 'env > \"{}\"'; exec '{}' demo-agent --delay-ms 0",
        dump.display(),
        child_dump.display(),
        bin().display()
    );
    let agent = vec!["sh".to_owned(), "-c".to_owned(), script];
    let mut b = Bridge::start(&home, &agent);
    initialize(&mut b.editor, json!({}));
    let sid = new_session(&mut b.editor, home.path());
    let (r, _) = b.editor.call("session/prompt", prompt(&sid, "hello"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    for f in [&dump, &child_dump] {
        let env = std::fs::read_to_string(f).unwrap();
        assert!(env.contains("ZCODE_ACP_HOME="), "{} is not an environment dump: {env}", f.display());
        assert!(
            !env.contains("ZCODE_ACP_REMOTE_TOKEN") && !env.contains(TEST_TOKEN),
            "the token is in the environment of {}",
            f.display()
        );
    }
}

#[test]
fn remote_creates_beyond_the_caps_get_a_429() {
    let home_marker = tempfile::tempdir().unwrap();
    let started = home_marker.path().join("started");
    let gate = home_marker.path().join("gate");
    // The window recipe holds the first create in flight until the test opens the gate, then
    // fails, so the create falls back to a headless bridge; later ones fail at once.
    let command = format!(
        "[ -e '{s}' ] && exit 1; touch '{s}'; while [ ! -e '{}' ]; do sleep 0.05; done; exit 1",
        gate.display(),
        s = started.display(),
    );
    let w = world(
        None,
        &[
            ("ZCODE_ACP_HUB_TERMINAL", "1"),
            ("ZCODE_ACP_HUB_TERMINAL_COMMAND", &command),
            ("ZCODE_ACP_MAX_CREATES_IN_FLIGHT", "1"),
            ("ZCODE_ACP_MAX_SERVE_BRIDGES", "2"),
            ("ZCODE_ACP_SERVE_IDLE_MS", "120000"),
        ],
    );
    let dirs: Vec<PathBuf> = (1..=3).map(|i| w.root.path().join(format!("p{i}"))).collect();
    for d in &dirs {
        std::fs::create_dir_all(d).unwrap();
    }
    // p3 has history, so listing it needs a serve bridge too.
    conversation(&w, &dirs[2], "history", None);
    let port = w.hub.port;
    let first = dirs[0].clone();
    let held = std::thread::spawn(move || {
        http(port, "POST", "/api/instances", &[AUTH], json!({"workspacePath": first}).to_string().as_bytes())
    });
    let deadline = Instant::now() + WAIT;
    while !started.exists() {
        assert!(Instant::now() < deadline, "the first create never started its window");
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = post(&w.hub, "/api/instances", &json!({"workspacePath": dirs[1]}));
    assert_eq!(r.status, 429, "a second create while one is in flight: {}", r.text());
    assert!(r.text().contains("maxCreatesInFlight"), "the message names the setting: {}", r.text());
    std::fs::write(&gate, "").unwrap();
    let r = held.join().unwrap();
    assert_eq!(r.status, 200, "{}", r.text());

    // The slot is free again; a second serve bridge fills the cap, a third is refused.
    let r = post(&w.hub, "/api/instances", &json!({"workspacePath": dirs[1]}));
    assert_eq!(r.status, 200, "{}", r.text());
    let r = post(&w.hub, "/api/instances", &json!({"workspacePath": dirs[2]}));
    assert_eq!(r.status, 429, "a third serve bridge: {}", r.text());
    assert!(r.text().contains("maxServeBridges"), "the message names the setting: {}", r.text());
    let r = get(&w.hub, &format!("/api/projects/sessions?workspacePath={}", dirs[2].display()));
    assert_eq!(r.status, 429, "a history listing that needs a third: {}", r.text());
}
