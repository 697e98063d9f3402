//! `zcode-acp chat`, the terminal client, with other devices on the same session (issue 29):
//! a resume of an id the bridge cannot load opens a window with a fresh session (in a real
//! tmux window, as the hub's resume opens it, and on a plain pipe); another device's prompt
//! shows on its own line as `› other device: …`, its turn's end in words with a fresh prompt
//! marker after it, and no raw `[end_turn]`.
//!
//! The tmux server is the test's own (the home's socket, `TMUX_TMPDIR` a temp dir, `TMUX`
//! unset): the user's default server is never touched.

#![allow(clippy::unwrap_used)] // Setup helpers outside #[test] fns: a failed unwrap is a failed test.

use serde_json::json;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use zcode_tests::hub::{AUTH, http, wait_instances};
use zcode_tests::world::{World, demo};
use zcode_tests::{TEST_TOKEN, WAIT, initialize, prompt};

/// A home whose default agent is the demo agent, a project root, a private tmux directory and
/// a hub (`extra`: more of its environment).
fn world(extra: &[(&str, &str)]) -> World {
    World::start(json!({"default": "demo", "demo": demo()}), extra)
}

/// `zcode-acp chat --cwd DIR [ARGS]` with its stdout on a pipe: (child, its output so far).
fn chat(w: &World, dir: &Path, args: &[&str]) -> (Child, Arc<Mutex<Vec<u8>>>) {
    let dir = dir.display().to_string();
    let mut all = vec!["chat", "--cwd", &dir];
    all.extend_from_slice(args);
    let mut cmd = w.home.command(&all);
    cmd.env("ZCODE_ACP_REMOTE_PORT", "0")
        .env("ZCODE_ACP_REMOTE_TOKEN", TEST_TOKEN)
        .env("ZCODE_ACP_HEARTBEAT_MS", "200");
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    let out = Arc::new(Mutex::new(Vec::new()));
    let (mut stdout, sink) = (child.stdout.take().unwrap(), out.clone());
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

/// Waits until the chat's output satisfies `done`; returns it.
fn wait_output(out: &Mutex<Vec<u8>>, what: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let s = String::from_utf8_lossy(&out.lock().unwrap()).into_owned();
        if done(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "{what} never showed in the chat:\n{s}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Issue 29 point 5: `chat --resume` of an id the bridge cannot load left the window on
/// "error: session not found" with nothing to type into; the contract says it starts fresh.
#[test]
fn chat_resume_of_an_unknown_id_starts_a_fresh_session_on_a_pipe() {
    let w = world(&[]);
    let p = w.project("fresh");
    let (mut child, out) = chat(&w, &p, &["--resume", "sess_nosuch"]);
    let text = wait_output(&out, "a fresh session's prompt", |s| s.contains("type a prompt"));
    assert!(
        text.contains("could not resume session sess_nosuch: ")
            && text.contains("— starting a fresh session\n"),
        "{text}"
    );
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"hello after a bad resume\n").unwrap();
    wait_output(&out, "the reply", |s| s.contains("You said: \"hello after a bad resume\""));
    drop(stdin);
    let _ = child.wait();
}

/// Issue 29 point 5, as the hub opens it: `POST /api/instances` with an unknown `sessionId`
/// opens a real terminal window whose chat runs a fresh session.
#[test]
fn a_desktop_resume_of_an_unknown_id_opens_a_window_with_a_fresh_session() {
    let w = world(&[("ZCODE_ACP_HUB_TERMINAL", "1"), ("ZCODE_ACP_HUB_TERMINAL_APP", "tmux")]);
    let p = w.project("bogus");
    let body = json!({"workspacePath": p, "sessionId": "sess_neverexisted"}).to_string();
    let r = http(
        w.hub.port,
        "POST",
        "/api/instances",
        &[AUTH, ("Content-Type", "application/json")],
        body.as_bytes(),
    );
    assert_eq!(r.status, 200, "{} / hub log: {}", String::from_utf8_lossy(&r.body), w.hub.log());
    let screen = |what: &str| {
        let deadline = Instant::now() + WAIT;
        loop {
            let s = w.tmux(&["capture-pane", "-p", "-J", "-t", "zcode-acp"]);
            if s.contains(what) {
                return s;
            }
            assert!(Instant::now() < deadline, "{what:?} never showed in the window:\n{s}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let s = screen("type a prompt");
    assert!(s.contains("could not resume session sess_neverexisted"), "{s}");
    w.tmux(&["send-keys", "-t", "zcode-acp", "hello from a fresh window", "Enter"]);
    screen("You said: \"hello from a fresh window\"");

    // On a terminal, a phone's prompt takes the marker's place: a line of its own, and the
    // marker comes back, alone, once its turn is over.
    let id = r.json()["id"].as_str().unwrap().to_owned();
    let list = wait_instances(w.hub.port, "the window's session", |l| {
        l.iter().any(|i| i["id"] == id.as_str() && !i["sessions"].as_array().unwrap().is_empty())
    });
    let inst = list.iter().find(|i| i["id"] == id.as_str()).unwrap();
    let sid = inst["sessions"][0]["sessionId"].as_str().unwrap();
    assert_ne!(sid, "sess_neverexisted");
    let mut phone = w.hub.connect(&id).unwrap();
    initialize(&mut phone, json!({}));
    phone.call(
        "session/load",
        json!({"sessionId": sid, "cwd": p, "mcpServers": [], "_meta": {"zcode": {"limit": 0}}}),
    );
    let (r, _) = phone.call("session/prompt", prompt(sid, "from the phone"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let s = screen("You said: \"from the phone\"");
    let lines: Vec<&str> = s.lines().map(str::trim_end).filter(|l| !l.is_empty()).collect();
    assert!(lines.contains(&"› other device: from the phone"), "{s}");
    let deadline = Instant::now() + WAIT;
    loop {
        let s = w.tmux(&["capture-pane", "-p", "-J", "-t", "zcode-acp"]);
        let last = s.lines().map(str::trim_end).rfind(|l| !l.is_empty()).unwrap_or_default().to_owned();
        if last == "›" {
            break;
        }
        assert!(Instant::now() < deadline, "no fresh prompt after the phone's turn:\n{s}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Issue 29 point 12: a phone's prompt was printed after the chat's prompt marker on the same
/// line (`› you › …`), its turn's end was never shown (no fresh marker), and the chat's own
/// turns ended in a raw `[end_turn]`.
#[test]
fn another_devices_prompt_has_its_own_line_and_its_turn_ends_with_a_fresh_prompt() {
    let w = world(&[]);
    let p = w.project("shared");
    let (mut child, out) = chat(&w, &p, &[]);
    wait_output(&out, "the prompt", |s| s.contains("type a prompt"));
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"from the window\n").unwrap();
    let text = wait_output(&out, "the window's turn's end", |s| {
        s.contains("You said: \"from the window\".") && s.ends_with("\n› ")
    });
    assert!(!text.contains("[end_turn]"), "a raw stop reason:\n{text}");

    // A phone on the same session.
    let list = wait_instances(w.hub.port, "the chat's bridge", |l| {
        l.iter().any(|i| {
            i["workspace"] == p.display().to_string() && !i["sessions"].as_array().unwrap().is_empty()
        })
    });
    let inst = list.iter().find(|i| i["workspace"] == p.display().to_string()).unwrap();
    let (id, sid) = (inst["id"].as_str().unwrap(), inst["sessions"][0]["sessionId"].as_str().unwrap());
    let mut phone = w.hub.connect(id).unwrap();
    initialize(&mut phone, json!({}));
    phone.call(
        "session/load",
        json!({"sessionId": sid, "cwd": p, "mcpServers": [], "_meta": {"zcode": {"limit": 0}}}),
    );
    let (r, _) = phone.call("session/prompt", prompt(sid, "from the phone"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let text = wait_output(&out, "the phone's turn and a fresh prompt", |s| {
        s.contains("\"from the phone\".") && s.ends_with("\n› ")
    });
    assert!(
        text.contains("\n› \n› other device: from the phone\n"),
        "the phone's prompt is on its own line, after the marker it replaces:\n{text}"
    );

    // A turn the phone cancels ends in words, and the prompt comes back.
    let req = phone.request("session/prompt", prompt(sid, "long hold"));
    wait_output(&out, "the long turn", |s| s.contains("tick 2 "));
    phone.send(&json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}));
    let (r, _) = phone.response_to(&req);
    assert_eq!(r["result"]["stopReason"], "cancelled", "{r}");
    let text = wait_output(&out, "the cancelled turn's end", |s| s.ends_with("(cancelled)\n› "));
    assert!(text.contains("\n› other device: long hold\n"), "{text}");
    assert!(!text.contains('['), "no raw stop reason:\n{text}");
    drop(stdin);
    let _ = child.wait();
}

/// Issue 30 point 12: `chat` reads its stdin bounded like the bridge does. A piped line over the
/// message limit (`ZCODE_ACP_MAX_MESSAGE_MIB`, 1 here) is refused, not held and sent; the
/// chat goes on with the next line. (It was read whole and sent as a prompt.)
#[test]
fn a_piped_line_over_the_message_limit_is_refused_and_the_chat_goes_on() {
    let w = world(&[]);
    let p = w.project("bounded");
    let dir = p.display().to_string();
    let mut cmd = w.home.command(&["chat", "--cwd", &dir]);
    cmd.env("ZCODE_ACP_REMOTE_PORT", "0")
        .env("ZCODE_ACP_REMOTE_TOKEN", TEST_TOKEN)
        .env("ZCODE_ACP_MAX_MESSAGE_MIB", "1");
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let out = Arc::new(Mutex::new(Vec::new()));
    for (mut from, sink) in [
        (Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>, out.clone()),
        (Box::new(child.stderr.take().unwrap()), out.clone()),
    ] {
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = from.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
    }
    wait_output(&out, "the prompt", |s| s.contains("type a prompt"));
    let mut stdin = child.stdin.take().unwrap();
    let mut long = vec![b'x'; 2 << 20];
    long.push(b'\n');
    stdin.write_all(&long).unwrap();
    stdin.write_all(b"a short one after it\n").unwrap();
    // Stdout and stderr are read apart: either may be seen first.
    let refusal = "zcode-acp chat: a line of 2 MiB is over the 1 MiB limit: not sent";
    let text = wait_output(&out, "the refusal and the reply to the short line", |s| {
        s.contains(refusal) && s.contains("You said: \"a short one after it\"")
    });
    assert!(!text.contains("xxxxxxxxxxxxxxxx"), "the long line went to the agent");
    drop(stdin);
    let _ = child.wait();
}
