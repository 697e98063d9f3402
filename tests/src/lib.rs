//! Helpers for the end-to-end suite: the real `zcode-acp` binary, a private `ZCODE_ACP_HOME`,
//! and a raw JSON-RPC peer over a child's stdio.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

/// How long a test waits for any one expected message before failing.
pub const WAIT: Duration = Duration::from_secs(20);

/// The path of the `zcode-acp` binary, built (debug) on first use so the suite never runs a
/// stale one.
pub fn bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_owned();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "--quiet", "--bin", "zcode-acp"])
            .current_dir(&root)
            .status()
            .expect("run cargo build");
        assert!(status.success(), "cargo build --bin zcode-acp failed");
        let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
        target.join("debug").join("zcode-acp")
    })
}

/// A private `ZCODE_ACP_HOME` for one test, removed when dropped.
pub struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    /// A fresh, empty home.
    pub fn new() -> Home {
        Home { dir: tempfile::tempdir().expect("temp home") }
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A `zcode-acp` command with this home and no inherited `ZCODE_ACP_*` settings.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(bin());
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("ZCODE_ACP_") {
                cmd.env_remove(k);
            }
        }
        cmd.env("ZCODE_ACP_HOME", self.path()).args(args);
        cmd
    }
}

impl Default for Home {
    fn default() -> Home {
        Home::new()
    }
}

/// A child process speaking newline-delimited JSON-RPC on stdio, driven by the test.
pub struct Peer {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    next_id: u64,
}

impl Peer {
    /// Spawns `cmd` with piped stdio (stderr inherited, so failures show in test output).
    pub fn spawn(mut cmd: Command) -> Peer {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn peer");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Peer { stdin: child.stdin.take(), child, lines, next_id: 1000 }
    }

    /// Writes one raw line.
    pub fn send_raw(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(line.as_bytes()).and_then(|()| stdin.write_all(b"\n")).expect("write to peer");
        stdin.flush().expect("flush");
    }

    /// Writes one message.
    pub fn send(&mut self, msg: &Value) {
        self.send_raw(&msg.to_string());
    }

    /// The next message, or a panic naming what was awaited after [`WAIT`].
    pub fn recv(&mut self, what: &str) -> Value {
        match self.lines.recv_timeout(WAIT) {
            Ok(line) => {
                serde_json::from_str(&line).unwrap_or_else(|e| panic!("peer wrote non-JSON {line:?}: {e}"))
            }
            Err(RecvTimeoutError::Timeout) => panic!("timed out waiting for {what}"),
            Err(RecvTimeoutError::Disconnected) => panic!("peer closed stdout while waiting for {what}"),
        }
    }

    /// Whether nothing arrives within `d`.
    pub fn quiet_for(&mut self, d: Duration) -> Option<Value> {
        self.lines.recv_timeout(d).ok().map(|l| serde_json::from_str(&l).expect("JSON"))
    }

    /// Sends a request with a fresh id; returns the id.
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = json!(self.next_id);
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// Sends a notification.
    pub fn notify(&mut self, method: &str, params: Value) {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// Reads until the response to `id`, returning it and every other message seen before it.
    pub fn response_to(&mut self, id: &Value) -> (Value, Vec<Value>) {
        let deadline = Instant::now() + WAIT;
        let mut seen = vec![];
        while Instant::now() < deadline {
            let msg = self.recv(&format!("the response to request {id}"));
            if msg.get("id") == Some(id) && msg.get("method").is_none() {
                return (msg, seen);
            }
            seen.push(msg);
        }
        panic!("no response to {id}; saw {seen:?}");
    }

    /// Sends a request and waits for its response: (response, messages seen before it).
    pub fn call(&mut self, method: &str, params: Value) -> (Value, Vec<Value>) {
        let id = self.request(method, params);
        self.response_to(&id)
    }

    /// Reads until a message satisfies `pred`, returning it and what came before.
    pub fn until(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> (Value, Vec<Value>) {
        let mut seen = vec![];
        loop {
            let msg = self.recv(what);
            if pred(&msg) {
                return (msg, seen);
            }
            seen.push(msg);
        }
    }

    /// Closes stdin and waits for the process to exit; returns whether it exited cleanly.
    pub fn close(mut self) -> bool {
        drop(self.stdin.take());
        let deadline = Instant::now() + WAIT;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("peer did not exit after stdin closed");
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `sessionUpdate` kinds of the `session/update` notifications in `msgs`.
pub fn update_kinds(msgs: &[Value]) -> Vec<String> {
    msgs.iter()
        .filter(|m| m["method"] == "session/update")
        .filter_map(|m| m["params"]["update"]["sessionUpdate"].as_str().map(str::to_owned))
        .collect()
}

/// The concatenated text of the `agent_message_chunk`s in `msgs`.
pub fn agent_text(msgs: &[Value]) -> String {
    msgs.iter()
        .filter(|m| m["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|m| m["params"]["update"]["content"]["text"].as_str())
        .collect()
}

/// The pinned `acpx` (a real headless ACP client) installed by `scripts/install-test-deps`.
pub fn acpx() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let path = root.join("peers/node_modules/.bin/acpx");
    assert!(path.exists(), "acpx is not installed: run scripts/test (or scripts/install-test-deps) first");
    path
}

/// An `acpx` command with a private HOME under `home` (acpx keeps state there), run in `cwd`,
/// driving `agent` (a command line).
pub fn acpx_command(home: &Home, cwd: &Path, agent: &str) -> Command {
    let acpx_home = home.path().join("acpx-home");
    std::fs::create_dir_all(&acpx_home).expect("acpx home");
    let mut cmd = Command::new(acpx());
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("ZCODE_ACP_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("HOME", &acpx_home)
        .env("ZCODE_ACP_HOME", home.path())
        .env("NO_COLOR", "1")
        .current_dir(cwd)
        .args(["--agent", agent]);
    cmd
}

/// Every JSON line of an `acpx --format json` run's stdout.
pub fn json_lines(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout).lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}
