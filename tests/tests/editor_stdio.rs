//! The editor's stdout. When it is a pipe the bridge writes it through a non-blocking file
//! description of its own (no blocking-pool thread per write: `scripts/bench-bridge`), and
//! must never block its worker on it: an editor that stops reading holds up neither the
//! remote clients nor the journal, and gets everything in order once it reads again. The
//! description the editor handed over keeps its flags (whatever else shares it is not
//! switched to non-blocking under its feet). Stdout that is not a pipe (a file) still works.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};
use zcode_shared::store::Store;
use zcode_tests::hub::wait_until;
use zcode_tests::{Bridge, Home, Peer, TEST_TOKEN, initialize, new_session, prompt, streamed_seq};

/// O_NONBLOCK, as `/proc/<pid>/fdinfo/<fd>` prints a descriptor's flags (octal).
const O_NONBLOCK: u32 = 0o4000;

/// The scripted streaming agent of `scripts/bench-bridge` (`bench-bridge agent`).
fn streaming_agent() -> Vec<String> {
    vec![env!("CARGO_BIN_EXE_bench-bridge").into(), "agent".into()]
}

/// The file-status flags of `pid`'s descriptor `fd`.
fn fd_flags(pid: u32, fd: &str) -> u32 {
    let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).expect("fdinfo");
    let flags = info.lines().find_map(|l| l.strip_prefix("flags:")).expect("a flags line");
    u32::from_str_radix(flags.trim(), 8).expect("octal flags")
}

/// A bridge whose stdio the test holds raw: it reads stdout only when it chooses to.
struct RawEditor {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl RawEditor {
    fn start(home: &Home) -> (RawEditor, u16) {
        let mut child = Bridge::command(home, &streaming_agent())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the bridge");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let port = Bridge::port_of(home, child.id());
        (RawEditor { child, stdin, stdout }, port)
    }

    fn send(&mut self, id: u64, method: &str, params: Value) {
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        self.stdin.write_all(format!("{line}\n").as_bytes()).expect("the bridge's stdin");
    }

    /// The next stdout line (blocking).
    fn line(&mut self) -> String {
        let mut line = String::new();
        assert!(
            self.stdout.read_line(&mut line).expect("the bridge's stdout") > 0,
            "the bridge closed stdout"
        );
        line
    }

    /// Sends a request and reads stdout up to its answer.
    fn call(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(id, method, params);
        loop {
            let msg: Value = serde_json::from_str(&self.line()).expect("a JSON line");
            if msg["id"] == id {
                return msg;
            }
        }
    }
}

impl Drop for RawEditor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_editors_stdout_pipe_is_written_through_a_non_blocking_description_of_the_bridges_own() {
    let home = Home::new();
    let mut b = Bridge::start(&home, &streaming_agent());
    initialize(&mut b.editor, json!({}));
    let pid = b.editor.pid();
    let pipe = std::fs::read_link(format!("/proc/{pid}/fd/1")).expect("the bridge's stdout");
    assert!(
        pipe.to_string_lossy().starts_with("pipe:"),
        "the test's stdout for the bridge is a pipe: {pipe:?}"
    );
    // The description the editor handed over is left as it was.
    assert_eq!(
        fd_flags(pid, "1") & O_NONBLOCK,
        0,
        "the bridge switched the editor's stdout description to non-blocking"
    );
    // The writes go through another description of the same pipe, non-blocking.
    let own: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("the bridge's descriptors")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|fd| fd != "1" && std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).is_ok_and(|t| t == pipe))
        .collect();
    assert!(
        own.iter().any(|fd| fd_flags(pid, fd) & O_NONBLOCK != 0),
        "no non-blocking description of the stdout pipe ({pipe:?}) among the bridge's descriptors; same pipe: {own:?}"
    );
    let sid = new_session(&mut b.editor, home.path());
    assert!(sid.starts_with("bench-"), "{sid}");
}

#[test]
fn an_editor_that_stops_reading_holds_up_neither_remote_clients_nor_the_journal_and_then_gets_everything() {
    // ~300 KB of updates: several times what the stdout pipe holds (64 KiB).
    const UPDATES: u64 = 1500;
    let home = Home::new();
    let (mut editor, port) = RawEditor::start(&home);
    let init = editor.call(1, "initialize", json!({"protocolVersion": 1, "clientCapabilities": {}}));
    assert!(init["result"].is_object(), "{init}");
    let new = editor.call(2, "session/new", json!({"cwd": home.path(), "mcpServers": []}));
    let sid = new["result"]["sessionId"].as_str().unwrap_or_else(|| panic!("session/new: {new}")).to_owned();
    let mut remote = Peer::connect_ws(port, "/acp", Some(TEST_TOKEN)).expect("a remote client");
    initialize(&mut remote, json!({}));
    let (load, _) = remote.call(
        "session/load",
        json!({"sessionId": sid, "cwd": home.path(), "mcpServers": [], "_meta": {"zcode": {"limit": 0}}}),
    );
    assert!(load["result"].is_object(), "{load}");

    // The editor prompts, then reads nothing while the turn streams.
    editor.send(3, "session/prompt", prompt(&sid, &format!("stream 1 {UPDATES} 100000000")));
    let mut seqs = Vec::new();
    while seqs.last() != Some(&(UPDATES - 1)) {
        if let Some(seq) = streamed_seq(&remote.recv_raw("the streamed updates, the editor not reading"), 1) {
            seqs.push(seq);
        }
    }
    assert_eq!(seqs, (0..UPDATES).collect::<Vec<_>>(), "the remote client got every update once, in order");
    let store = Store::open_in(&home.path().join("data")).expect("the journal");
    // Each update is a message of its own (`b1-SEQ`): wait for the last one among the newest
    // few (the turn's end may follow it), then check them all.
    let last = format!("b1-{}", UPDATES - 1);
    wait_until("every streamed update to be journaled while the editor does not read", || {
        store.messages_before(&sid, i64::MAX, 4).is_ok_and(|rows| rows.iter().any(|r| r.msg_id == last))
    });
    let journaled = store.messages_between(&sid, 0, i64::MAX).expect("the journal");
    let ids: Vec<&str> =
        journaled.iter().map(|r| r.msg_id.as_str()).filter(|id| id.starts_with("b1-")).collect();
    let want: Vec<String> = (0..UPDATES).map(|i| format!("b1-{i}")).collect();
    assert_eq!(ids, want, "the journal holds every update once, in order");

    // The editor reads again: every update, in order, then the turn's answer.
    let mut seqs = Vec::new();
    let answer = loop {
        let line = editor.line();
        if let Some(seq) = streamed_seq(&line, 1) {
            seqs.push(seq);
        } else if line.contains(r#""id":3"#) {
            break line;
        }
    };
    assert_eq!(seqs, (0..UPDATES).collect::<Vec<_>>(), "the editor got every update once, in order");
    assert!(answer.contains("end_turn"), "{answer}");
}

#[test]
fn a_bridge_whose_stdout_is_a_file_answers_into_it() {
    let home = Home::new();
    let out = home.path().join("stdout.jsonl");
    let mut child = Bridge::command(&home, &streaming_agent())
        .stdin(Stdio::piped())
        .stdout(std::fs::File::create(&out).expect("the stdout file"))
        .spawn()
        .expect("the bridge");
    let mut stdin = child.stdin.take().expect("stdin");
    let request =
        json!({"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": {"protocolVersion": 1}});
    stdin.write_all(format!("{request}\n").as_bytes()).expect("the bridge's stdin");
    let mut text = String::new();
    wait_until("the answer to initialize in the stdout file", || {
        text = std::fs::read_to_string(&out).unwrap_or_default();
        text.lines().any(|l| l.contains(r#""id":7"#))
    });
    let answer: Value =
        serde_json::from_str(text.lines().find(|l| l.contains(r#""id":7"#)).expect("the answer"))
            .expect("a JSON line");
    assert_eq!(answer["result"]["protocolVersion"], 1, "{answer}");
    drop(stdin);
    let status = child.wait().expect("the bridge exits once stdin closes");
    assert!(status.success(), "{status}");
}
