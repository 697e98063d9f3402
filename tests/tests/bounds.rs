//! Every queue and read of the bridge is bounded by bytes (`ZCODE_ACP_MAX_MESSAGE_MIB`, set to
//! 1 here so the margins mean something): a line over the limit, from the agent or the
//! editor, is refused unread with an error to its sender and the stream goes on; an agent
//! flooding an editor that reads slowly is held back (its stdout is not read while the
//! editor's outbox is full) instead of being buffered, and a remote client on another session
//! keeps working meanwhile. The bridge's peak RSS (`VmHWM`) is the witness that nothing was
//! held. `scripts/soak flood` runs the flood at 1 GiB (`ZCODE_TEST_FLOOD_MIB`).

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Stdio};
use std::time::Duration;
use zcode_tests::hub::{wait_log, wait_until};
use zcode_tests::{Bridge, Home, Peer, TEST_TOKEN, agent_text, initialize, new_session, prompt};

/// The message limit the tests run the bridge with, MiB.
const LIMIT_MIB: &str = "1";

/// A scripted ACP agent: `bigline N` writes one `session/update` line of N MiB (then a small
/// update and the answer), `bigreply N` answers with a line of N MiB, `bigrequest N` asks the
/// client a request of N MiB (and reports its answer), `flood N` streams N MiB
/// of 16 KiB updates (each its own message) from a thread, its other messages (another
/// session's prompt) written between them; `deaf` stops reading stdin; anything else is
/// answered `pong: TEXT`.
const AGENT: &str = r#"
import collections, json, sys, threading, time
out = sys.stdout.buffer
write_lock = threading.Lock()
state = threading.Lock()
flooding = False
urgent = collections.deque()

def write(data):
    with write_lock:
        out.write(data + b"\n")
        out.flush()

def send(obj):
    data = json.dumps(obj).encode()
    with state:
        if flooding:
            urgent.append(data)
            return
    write(data)

def drain():
    with state:
        pending = list(urgent)
        urgent.clear()
    for data in pending:
        write(data)

def update(sid, text, mid=None):
    u = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
    if mid:
        u["messageId"] = mid
    return {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": sid, "update": u}}

def big_line(prefix, mib, suffix):
    chunk = b"x" * (1 << 20)
    with write_lock:
        out.write(prefix)
        for _ in range(mib):
            out.write(chunk)
        out.write(suffix + b"\n")
        out.flush()

def flood(sid, rid, mib):
    global flooding
    text = "y" * 16384
    for i in range(mib * 64):
        drain()
        write(json.dumps(update(sid, text, "flood-%d" % i)).encode())
    with state:
        flooding = False
    drain()
    write(json.dumps({"jsonrpc": "2.0", "id": rid, "result": {"stopReason": "end_turn"}}).encode())

sessions = 0
asked = None
for line in sys.stdin.buffer:
    msg = json.loads(line)
    method, rid = msg.get("method"), msg.get("id")
    if method is None and rid == "big-request":
        sid, prompt_id = asked
        send(update(sid, "answered: " + json.dumps(msg.get("error", msg.get("result")))))
        send({"jsonrpc": "2.0", "id": prompt_id, "result": {"stopReason": "end_turn"}})
    elif method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": 1, "agentCapabilities": {}}})
    elif method == "session/new":
        sessions += 1
        send({"jsonrpc": "2.0", "id": rid, "result": {"sessionId": "s%d" % sessions}})
    elif method == "session/prompt":
        sid = msg["params"]["sessionId"]
        text = msg["params"]["prompt"][0]["text"]
        word, _, arg = text.partition(" ")
        end = {"jsonrpc": "2.0", "id": rid, "result": {"stopReason": "end_turn"}}
        if word == "bigline":
            head = '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"%s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"' % sid
            big_line(head.encode(), int(arg), b'"}}}}')
            send(update(sid, "after the big line"))
            send(end)
        elif word == "bigrequest":
            asked = (sid, rid)
            head = '{"jsonrpc":"2.0","id":"big-request","method":"fs/write_text_file","params":{"sessionId":"%s","path":"big.txt","content":"' % sid
            big_line(head.encode(), int(arg), b'"}}')
        elif word == "bigreply":
            head = '{"jsonrpc":"2.0","id":%s,"result":{"stopReason":"end_turn","pad":"' % json.dumps(rid)
            big_line(head.encode(), int(arg), b'"}}')
        elif word == "deaf":
            time.sleep(3600)
        elif word == "flood":
            with state:
                flooding = True
            threading.Thread(target=flood, args=(sid, rid, int(arg)), daemon=True).start()
        else:
            send(update(sid, "pong: " + text))
            send(end)
    elif method is not None and rid is not None:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no " + method}})
"#;

/// The agent's command line, its script written into `home`.
fn agent(home: &Home) -> Vec<String> {
    let script = home.path().join("bounded_agent.py");
    std::fs::write(&script, AGENT).expect("the agent script");
    vec!["python3".into(), script.display().to_string()]
}

/// A `/proc/PID/status` figure, KiB (`VmHWM`: the peak RSS; `VmRSS`: now).
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the bridge's status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// The limit the peak RSS is held to: far under the 200 MiB line (a bridge that held it once
/// has a peak over 200 MiB), far over a debug bridge's own ~30 MiB.
const PEAK_BOUND_MIB: u64 = 100;

#[test]
fn an_agent_line_over_the_limit_is_refused_unread_and_the_bridge_goes_on() {
    let home = Home::new();
    let (mut b, log) =
        Bridge::start_logged(&home, &agent(&home), &[("ZCODE_ACP_MAX_MESSAGE_MIB", LIMIT_MIB)]);
    initialize(&mut b.editor, json!({}));
    let sid = new_session(&mut b.editor, home.path());

    // One 200 MiB notification: dropped unread, logged, the turn goes on after it.
    let (answer, updates) = b.editor.call("session/prompt", prompt(&sid, "bigline 200"));
    let peak = status_kib(b.editor.pid(), "VmHWM") / 1024;
    assert!(
        peak < PEAK_BOUND_MIB,
        "the bridge's peak RSS is {peak} MiB after a 200 MiB line from the agent (bound {PEAK_BOUND_MIB} MiB): it held the line"
    );
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert_eq!(agent_text(&updates), "after the big line", "only the update after the refused line");
    wait_log(
        &log,
        "the agent wrote a message of 200.0 MiB, over the 1 MiB limit: refused unread (dropped)",
        1,
    );

    // A 200 MiB answer: the prompt fails with an error that says why, instead of waiting forever.
    let (answer, _) = b.editor.call("session/prompt", prompt(&sid, "bigreply 200"));
    let message = answer["error"]["message"].as_str().unwrap_or_else(|| panic!("an error: {answer}"));
    assert!(
        message.contains("the agent's answer was over the 1 MiB limit (200.0 MiB) and was refused"),
        "{message}"
    );

    // A 200 MiB request of the agent's: answered with an error, which the agent hears.
    let (answer, updates) = b.editor.call("session/prompt", prompt(&sid, "bigrequest 200"));
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let heard = agent_text(&updates);
    assert!(heard.contains(r#""code": -32600"#), "{heard}");
    assert!(heard.contains("zcode-acp: a message of over 1 MiB was refused (200.0 MiB)"), "{heard}");

    // The next message works; the bridge never held any of the lines.
    let (answer, updates) = b.editor.call("session/prompt", prompt(&sid, "hello"));
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert_eq!(agent_text(&updates), "pong: hello");
    let peak = status_kib(b.editor.pid(), "VmHWM") / 1024;
    assert!(peak < PEAK_BOUND_MIB, "the bridge's peak RSS is {peak} MiB after three 200 MiB lines");
    eprintln!("bridge VmHWM after three 200 MiB agent lines: {peak} MiB");
}

#[test]
fn an_editor_line_over_the_limit_gets_an_error_and_the_stream_goes_on() {
    let home = Home::new();
    let (mut b, log) =
        Bridge::start_logged(&home, &agent(&home), &[("ZCODE_ACP_MAX_MESSAGE_MIB", LIMIT_MIB)]);
    initialize(&mut b.editor, json!({}));
    let sid = new_session(&mut b.editor, home.path());
    let text = "z".repeat(3 << 20);
    b.editor.send(&json!({"jsonrpc": "2.0", "id": 77, "method": "session/prompt",
        "params": {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}}));
    drop(text);
    let (refusal, _) =
        b.editor.until("the answer to the 3 MiB line", |m| m.get("error").is_some() || m["id"] == 77);
    assert_eq!(refusal["id"], Value::Null, "{refusal}");
    assert_eq!(refusal["error"]["code"], -32600, "{refusal}");
    let message = refusal["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("zcode-acp: a message of over 1 MiB was refused (3.0 MiB, id 77)"),
        "{message}"
    );
    wait_log(&log, "the editor sent a message of 3.0 MiB, id 77, over the 1 MiB limit: refused unread", 1);
    // The lines after it are read as usual.
    let (answer, updates) = b.editor.call("session/prompt", prompt(&sid, "after"));
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert_eq!(agent_text(&updates), "pong: after");
}

#[test]
fn an_agent_that_leaves_its_input_unread_past_the_limit_is_stopped_and_its_requests_fail() {
    let home = Home::new();
    let (mut b, log) =
        Bridge::start_logged(&home, &agent(&home), &[("ZCODE_ACP_MAX_MESSAGE_MIB", LIMIT_MIB)]);
    initialize(&mut b.editor, json!({}));
    let sessions: Vec<String> = (0..4).map(|_| new_session(&mut b.editor, home.path())).collect();
    // The agent stops reading its stdin; 2.1 MiB of prompts follow (each under the limit, one
    // per session, so none waits behind another's turn in the bridge).
    let deaf = b.editor.request("session/prompt", prompt(&sessions[0], "deaf"));
    let text = "w".repeat(700 << 10);
    let big: Vec<Value> =
        sessions[1..].iter().map(|s| b.editor.request("session/prompt", prompt(s, &text))).collect();
    // Every prompt is answered (in any order): the ones the agent had fail with the reason
    // (one sent after its stop may reach the restarted agent instead).
    let mut waiting: Vec<Value> = std::iter::once(deaf.clone()).chain(big.iter().cloned()).collect();
    let mut failed = vec![];
    while !waiting.is_empty() {
        let (answer, _) = b.editor.until("the answers to the prompts the agent left unread", |m| {
            m.get("method").is_none() && waiting.contains(&m["id"])
        });
        waiting.retain(|id| *id != answer["id"]);
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        if message.contains("stopped reading its input (over 1 MiB waited for it)") {
            failed.push(answer["id"].clone());
        }
    }
    assert!(failed.contains(&deaf) && failed.contains(&big[0]), "failed with the reason: {failed:?}");
    wait_log(&log, "of input unread: stopping it as hung", 1);
    // The agent starts again on the next request.
    let sid = new_session(&mut b.editor, home.path());
    let (answer, updates) = b.editor.call("session/prompt", prompt(&sid, "again"));
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert_eq!(agent_text(&updates), "pong: again");
}

/// The flood's size, MiB (`ZCODE_TEST_FLOOD_MIB`: `scripts/soak flood` sets 1024).
fn flood_mib() -> u64 {
    std::env::var("ZCODE_TEST_FLOOD_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(64)
}

/// An editor on the bridge's raw stdio that reads its stdout slowly: 64 KiB every 4 ms
/// (~16 MiB/s), well under what the agent writes.
struct SlowEditor {
    child: Child,
    stdin: ChildStdin,
    log: PathBuf,
}

impl SlowEditor {
    fn start(home: &Home, agent: &[String]) -> (SlowEditor, BufReader<Throttled>) {
        let log = home.path().join("bridge.log");
        let mut child = Bridge::command(home, agent)
            .env("ZCODE_ACP_MAX_MESSAGE_MIB", LIMIT_MIB)
            .current_dir(home.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("the bridge's log"))
            .spawn()
            .expect("the bridge");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = Throttled { inner: child.stdout.take().expect("stdout"), slow: false };
        (SlowEditor { child, stdin, log }, BufReader::with_capacity(64 * 1024, stdout))
    }

    fn send(&mut self, id: u64, method: &str, params: Value) {
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        self.stdin.write_all(format!("{line}\n").as_bytes()).expect("the bridge's stdin");
    }
}

impl Drop for SlowEditor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The bridge's stdout, read at most 64 KiB at a time with a pause before each read once `slow`.
struct Throttled {
    inner: std::process::ChildStdout,
    slow: bool,
}

impl Read for Throttled {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.slow {
            std::thread::sleep(Duration::from_millis(4));
        }
        let n = buf.len().min(64 * 1024);
        self.inner.read(&mut buf[..n])
    }
}

/// Reads lines until the answer to `id`.
fn answer(out: &mut BufReader<Throttled>, id: u64) -> Value {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(out.read_line(&mut line).expect("the bridge's stdout") > 0, "the bridge closed stdout");
        let msg: Value = serde_json::from_str(&line).expect("a JSON line");
        if msg["id"] == id && msg.get("method").is_none() {
            return msg;
        }
    }
}

#[test]
fn a_flood_to_an_editor_that_reads_slowly_keeps_the_bridge_bounded_and_other_sessions_working() {
    let mib = flood_mib();
    let home = Home::new();
    let (mut editor, mut out) = SlowEditor::start(&home, &agent(&home));
    let pid = editor.child.id();
    let port = Bridge::port_of(&home, pid);
    editor.send(1, "initialize", json!({"protocolVersion": 1, "clientCapabilities": {}}));
    assert!(answer(&mut out, 1)["result"].is_object());
    editor.send(2, "session/new", json!({"cwd": home.path(), "mcpServers": []}));
    let sid = answer(&mut out, 2)["result"]["sessionId"].as_str().expect("a session").to_owned();
    let mut remote = Peer::connect_ws(port, "/acp", Some(TEST_TOKEN)).expect("a remote client");
    initialize(&mut remote, json!({}));
    let other = new_session(&mut remote, home.path());
    let before = status_kib(pid, "VmRSS") / 1024;

    // The editor prompts the flood and reads it slowly, on a thread of its own.
    editor.send(3, "session/prompt", prompt(&sid, &format!("flood {mib}")));
    out.get_mut().slow = true;
    let read = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = read.clone();
    let reader = std::thread::spawn(move || {
        let mut line = String::new();
        let mut next = 0u64;
        loop {
            line.clear();
            assert!(out.read_line(&mut line).expect("the bridge's stdout") > 0, "the bridge closed stdout");
            counted.fetch_add(line.len() as u64, std::sync::atomic::Ordering::Relaxed);
            let msg: Value = serde_json::from_str(&line).expect("a JSON line");
            if msg["id"] == 3 {
                return (msg, next);
            }
            let Some(id) =
                msg["params"]["update"]["messageId"].as_str().and_then(|m| m.strip_prefix("flood-"))
            else {
                continue;
            };
            assert_eq!(id, next.to_string(), "the editor gets the flood whole and in order");
            next += 1;
        }
    });

    // Well into the flood, the remote client's session still answers.
    wait_until("the editor to have read 4 MiB of the flood", || {
        read.load(std::sync::atomic::Ordering::Relaxed) > 4 << 20 || reader.is_finished()
    });
    let (reply, updates) = remote.call("session/prompt", prompt(&other, "still here?"));
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    assert_eq!(agent_text(&updates), "pong: still here?");
    let during = status_kib(pid, "VmRSS") / 1024;
    let (done, updates) = reader.join().expect("the editor's reader");
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert_eq!(updates, mib * 64, "every update of the flood");
    let peak = status_kib(pid, "VmHWM") / 1024;
    eprintln!("flood of {mib} MiB: bridge RSS {before} MiB before, {during} MiB during, peak {peak} MiB");
    assert!(
        peak < before + 32,
        "the bridge's peak RSS grew from {before} MiB to {peak} MiB while {mib} MiB flowed to an editor reading slowly: it buffered the flood"
    );
    assert!(!log_has(&editor.log, "panicked"), "the bridge panicked");
}

fn log_has(log: &Path, needle: &str) -> bool {
    std::fs::read_to_string(log).unwrap_or_default().contains(needle)
}

/// Another process holding the store's write lock (`BEGIN EXCLUSIVE`) until it is killed.
fn hold_store_lock(home: &Home) -> Child {
    let script = "import sqlite3,sys,time\n\
                  c=sqlite3.connect(sys.argv[1],isolation_level=None,timeout=20)\n\
                  c.execute('BEGIN EXCLUSIVE')\n\
                  print('locked',flush=True); time.sleep(600)";
    let mut c = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(home.path().join("data").join("zcode-acp.sqlite3"))
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    BufReader::new(c.stdout.take().expect("stdout")).read_line(&mut line).expect("read");
    assert_eq!(line.trim(), "locked");
    c
}

#[test]
fn a_flood_while_the_store_is_locked_keeps_the_journal_bounded_and_reports_the_loss() {
    let home = Home::new();
    let env = [("ZCODE_ACP_MAX_MESSAGE_MIB", LIMIT_MIB), ("ZCODE_ACP_TEST_JOURNAL_BUSY_MS", "50")];
    let (mut b, log) = Bridge::start_logged(&home, &agent(&home), &env);
    initialize(&mut b.editor, json!({}));
    let sid = new_session(&mut b.editor, home.path());
    let pid = b.editor.pid();
    let before = status_kib(pid, "VmRSS") / 1024;
    let mut lock = hold_store_lock(&home);
    // 64 MiB of updates, read as fast as they come: only the journal cannot keep them.
    let id = b.editor.request("session/prompt", prompt(&sid, "flood 64"));
    let mut updates = 0;
    loop {
        let line = b.editor.recv_raw("the flood");
        if line.contains(&format!(r#""id":{id}"#)) && !line.contains(r#""method""#) {
            assert!(line.contains("end_turn"), "{line}");
            break;
        }
        updates += usize::from(line.contains("flood-"));
    }
    assert_eq!(updates, 64 * 64, "the editor gets the whole flood");
    let peak = status_kib(pid, "VmHWM") / 1024;
    let _ = lock.kill();
    let _ = lock.wait();
    eprintln!("flood with the store locked: bridge RSS {before} MiB before, peak {peak} MiB");
    assert!(
        peak < before + 32,
        "the bridge's peak RSS grew from {before} MiB to {peak} MiB while 64 MiB of updates waited for a locked store"
    );
    wait_log(&log, "writes dropped", 1);
}
