//! Helpers for the end-to-end suite: the real `zcode-acp` binary, a private `ZCODE_ACP_HOME`,
//! and a raw JSON-RPC peer over a child's stdio. [`hub`]: the hub's helpers; [`net`]: sockets
//! from chosen loopback addresses; [`flood`]: another user's connection flood; [`history`]: big session histories for replay tests;
//! [`world`]: a hub with projects, agents and a private tmux server.

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
/// stale one. `ZCODE_ACP_BIN` names another build (the benchmarks use the release one).
pub fn bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| match std::env::var_os("ZCODE_ACP_BIN") {
        Some(path) => PathBuf::from(path),
        None => build_bin(),
    })
}

/// Builds the debug `zcode-acp` (`cargo build --bin zcode-acp` in the workspace, as a person
/// runs it) and returns its path.
pub fn build_bin() -> PathBuf {
    {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_owned();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = Command::new(cargo);
        // Without what cargo sets for this test process (its package's manifest and names):
        // ring's build script reruns when `CARGO_MANIFEST_DIR` differs, and with it rustls, the
        // bridge and the hub were rebuilt on every run (40-50 s before the first test could
        // start a process, and again at the next plain `cargo build`).
        for (k, _) in std::env::vars_os() {
            let k = k.to_string_lossy();
            if k.starts_with("CARGO_PKG_")
                || ["CARGO_MANIFEST_DIR", "CARGO_MANIFEST_PATH", "CARGO_CRATE_NAME", "CARGO_PRIMARY_PACKAGE"]
                    .contains(&k.as_ref())
                || k.starts_with("CARGO_BIN_")
                || k == "CARGO_TARGET_TMPDIR"
                || k == "CARGO_RUSTC_CURRENT_DIR"
            {
                build.env_remove(k.as_ref());
            }
        }
        let status = build
            .args(["build", "--quiet", "--bin", "zcode-acp"])
            .current_dir(&root)
            .status()
            .expect("run cargo build");
        assert!(status.success(), "cargo build --bin zcode-acp failed");
        let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
        target.join("debug").join("zcode-acp")
    }
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

    /// A `zcode-acp` command with this home and no inherited `ZCODE_ACP_*` settings, except
    /// `ZCODE_ACP_HUB_PORT=0`: every bridge registers with (and may start) a hub, and it must
    /// be this home's own on an OS-picked port, never the machine's 8377.
    pub fn command(&self, args: &[&str]) -> Command {
        self.command_of(bin(), args)
    }

    /// Like [`Home::command`], running the binary at `exe` (a copy the test installs over).
    pub fn command_of(&self, exe: &Path, args: &[&str]) -> Command {
        let mut cmd = Command::new(exe);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("ZCODE_ACP_") {
                cmd.env_remove(k);
            }
        }
        // A hub a test's bridges start for this home goes away soon after them (tests that
        // need another idle timeout set their own).
        cmd.env("ZCODE_ACP_HOME", self.path())
            .env("ZCODE_ACP_HUB_PORT", "0")
            .env("ZCODE_ACP_HUB_IDLE_MS", "30000")
            .args(args);
        cmd
    }
}

impl Default for Home {
    fn default() -> Home {
        Home::new()
    }
}

/// What a peer's reader thread delivers.
enum Frame {
    Text(String),
    Closed(Option<u16>),
}

/// How a peer's messages are written.
enum Writer {
    Stdin(Option<ChildStdin>),
    Ws(std::sync::mpsc::Sender<WsCmd>),
}

/// Commands to a WebSocket peer's thread.
enum WsCmd {
    Text(String),
    /// A text message of this many bytes, sent as 1 MiB fragments, reading between them.
    Fragmented(usize),
    Binary(Vec<u8>),
    Pause(bool),
    Close,
}

/// A JSON-RPC peer driven by the test: a child on stdio (newline-delimited), or a WebSocket
/// client (one message per text frame).
pub struct Peer {
    child: Option<Child>,
    writer: Writer,
    lines: Receiver<Frame>,
    next_id: u64,
    /// The close code the other side sent, once the connection closed.
    pub closed: Option<Option<u16>>,
    /// A WebSocket peer's own port (none for a process on stdio).
    local_port: Option<u16>,
}

impl Peer {
    /// Spawns `cmd` with piped stdio (stderr inherited, so failures show in test output).
    pub fn spawn(cmd: Command) -> Peer {
        Peer::spawn_with_stderr(cmd, Stdio::inherit())
    }

    /// Spawns `cmd` with piped stdin/stdout and `stderr` where the test says.
    pub fn spawn_with_stderr(mut cmd: Command, stderr: Stdio) -> Peer {
        // The program may be a copy just written (an upgrade test's newer build): `spawn_copy`.
        let mut child = hub::spawn_copy(cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(stderr));
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(Frame::Text(line)).is_err() {
                    return;
                }
            }
            let _ = tx.send(Frame::Closed(None));
        });
        Peer {
            writer: Writer::Stdin(child.stdin.take()),
            child: Some(child),
            lines,
            next_id: 1000,
            closed: None,
            local_port: None,
        }
    }

    /// Connects a WebSocket client to `ws://127.0.0.1:{port}{path}`, with `token` as a Bearer
    /// header when given. An HTTP refusal comes back as its status code.
    pub fn connect_ws(port: u16, path: &str, token: Option<&str>) -> Result<Peer, u16> {
        let auth = token.map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", a.as_str())).collect();
        Peer::connect_ws_with(port, path, &headers)
    }

    /// Like [`Peer::connect_ws`], with the request headers given (the token's among them).
    pub fn connect_ws_with(port: u16, path: &str, headers: &[(&str, &str)]) -> Result<Peer, u16> {
        use tungstenite::client::IntoClientRequest;
        let mut req = format!("ws://127.0.0.1:{port}{path}").into_client_request().expect("request");
        for (k, v) in headers {
            let name = tungstenite::http::HeaderName::from_bytes(k.as_bytes()).expect("header name");
            req.headers_mut().append(name, v.parse().expect("header value"));
        }
        let stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("tcp connect");
        let local_port = stream.local_addr().expect("local address").port();
        let mut ws = match tungstenite::client::client(req, stream) {
            Ok((ws, _)) => ws,
            Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(resp))) => {
                return Err(resp.status().as_u16());
            }
            Err(e) => panic!("websocket handshake failed: {e}"),
        };
        ws.get_mut().set_read_timeout(Some(Duration::from_millis(5))).expect("timeout");
        let (tx, lines) = channel();
        let (cmd_tx, cmd_rx) = channel::<WsCmd>();
        std::thread::spawn(move || {
            let mut paused = false;
            loop {
                while let Ok(cmd) = cmd_rx.try_recv() {
                    let r = match cmd {
                        WsCmd::Text(t) => ws.send(tungstenite::Message::text(t)),
                        WsCmd::Fragmented(size) => {
                            use tungstenite::protocol::frame::{
                                Frame as WsFrame,
                                coding::{Data, OpCode},
                            };
                            let chunk = 1 << 20;
                            let mut sent = 0;
                            let mut result = Ok(());
                            while sent < size && result.is_ok() {
                                let n = chunk.min(size - sent);
                                let op = if sent == 0 {
                                    OpCode::Data(Data::Text)
                                } else {
                                    OpCode::Data(Data::Continue)
                                };
                                let frame = WsFrame::message(vec![b'x'; n], op, sent + n == size);
                                result =
                                    ws.write(tungstenite::Message::Frame(frame)).and_then(|()| ws.flush());
                                sent += n;
                                // The server may refuse mid-message: look for its close frame.
                                if let Ok(tungstenite::Message::Close(f)) = ws.read() {
                                    let _ = tx.send(Frame::Closed(f.map(|f| u16::from(f.code))));
                                    return;
                                }
                            }
                            result
                        }
                        WsCmd::Binary(b) => ws.send(tungstenite::Message::binary(b)),
                        WsCmd::Close => ws.close(None),
                        WsCmd::Pause(p) => {
                            paused = p;
                            Ok(())
                        }
                    };
                    if r.is_err() {
                        let _ = tx.send(Frame::Closed(None));
                        return;
                    }
                }
                if paused {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                match ws.read() {
                    Ok(tungstenite::Message::Text(t)) => {
                        if tx.send(Frame::Text(t.to_string())).is_err() {
                            return;
                        }
                    }
                    Ok(tungstenite::Message::Close(f)) => {
                        let _ = tx.send(Frame::Closed(f.map(|f| u16::from(f.code))));
                        let _ = ws.flush();
                        return;
                    }
                    Ok(_) => {}
                    Err(tungstenite::Error::Io(e))
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) => {}
                    Err(_) => {
                        let _ = tx.send(Frame::Closed(None));
                        return;
                    }
                }
            }
        });
        Ok(Peer {
            child: None,
            writer: Writer::Ws(cmd_tx),
            lines,
            next_id: 5000,
            closed: None,
            local_port: Some(local_port),
        })
    }

    /// Stops (or resumes) reading a WebSocket peer: a client that does not read.
    pub fn pause_reading(&mut self, paused: bool) {
        if let Writer::Ws(tx) = &self.writer {
            let _ = tx.send(WsCmd::Pause(paused));
        }
    }

    /// Sends a text message of `size` bytes in 1 MiB fragments (WebSocket peers only).
    pub fn send_fragmented(&mut self, size: usize) {
        if let Writer::Ws(tx) = &self.writer {
            let _ = tx.send(WsCmd::Fragmented(size));
        }
    }

    /// Sends a binary frame (WebSocket peers only).
    pub fn send_binary(&mut self, bytes: Vec<u8>) {
        if let Writer::Ws(tx) = &self.writer {
            let _ = tx.send(WsCmd::Binary(bytes));
        }
    }

    /// Writes one raw line (or text frame).
    pub fn send_raw(&mut self, line: &str) {
        match &mut self.writer {
            Writer::Stdin(stdin) => {
                let stdin = stdin.as_mut().expect("stdin open");
                stdin
                    .write_all(line.as_bytes())
                    .and_then(|()| stdin.write_all(b"\n"))
                    .expect("write to peer");
                stdin.flush().expect("flush");
            }
            Writer::Ws(tx) => {
                let _ = tx.send(WsCmd::Text(line.to_owned()));
            }
        }
    }

    /// Writes one message.
    pub fn send(&mut self, msg: &Value) {
        self.send_raw(&msg.to_string());
    }

    /// The next message, or a panic naming what was awaited after [`WAIT`].
    pub fn recv(&mut self, what: &str) -> Value {
        match self.lines.recv_timeout(WAIT) {
            Ok(Frame::Text(line)) => {
                serde_json::from_str(&line).unwrap_or_else(|e| panic!("peer wrote non-JSON {line:?}: {e}"))
            }
            Ok(Frame::Closed(code)) => {
                self.closed = Some(code);
                // A process that ended says how (a signal names whoever killed it).
                let how = self.child.as_mut().and_then(|c| {
                    (0..50).find_map(|_| {
                        let s = c.try_wait().ok().flatten();
                        if s.is_none() {
                            std::thread::sleep(std::time::Duration::from_millis(20));
                        }
                        s
                    })
                });
                let how = how.map_or_else(String::new, |s| format!("; the process ended: {s}"));
                panic!("peer closed (code {code:?}{how}) while waiting for {what}")
            }
            Err(RecvTimeoutError::Timeout) => panic!("timed out waiting for {what}"),
            Err(RecvTimeoutError::Disconnected) => panic!("peer gone while waiting for {what}"),
        }
    }

    /// The next message as the raw text it arrived as.
    pub fn recv_raw(&mut self, what: &str) -> String {
        match self.lines.recv_timeout(WAIT) {
            Ok(Frame::Text(line)) => line,
            Ok(Frame::Closed(code)) => panic!("peer closed (code {code:?}) while waiting for {what}"),
            Err(_) => panic!("timed out waiting for {what}"),
        }
    }

    /// The next message if one arrives within `d`.
    pub fn quiet_for(&mut self, d: Duration) -> Option<Value> {
        match self.lines.recv_timeout(d) {
            Ok(Frame::Text(l)) => Some(serde_json::from_str(&l).expect("JSON")),
            Ok(Frame::Closed(code)) => {
                self.closed = Some(code);
                None
            }
            Err(_) => None,
        }
    }

    /// A WebSocket peer's own port on loopback (what the server sees as its peer's).
    pub fn local_port(&self) -> u16 {
        self.local_port.expect("a WebSocket peer")
    }

    /// Reads (and discards messages) until the connection closes; returns the close code.
    pub fn wait_closed(&mut self, within: Duration) -> Option<u16> {
        if let Some(code) = self.closed {
            return code;
        }
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(Frame::Text(_)) => {}
                Ok(Frame::Closed(code)) => {
                    self.closed = Some(code);
                    return code;
                }
                Err(RecvTimeoutError::Disconnected) => return None,
                Err(RecvTimeoutError::Timeout) => panic!("connection still open after {within:?}"),
            }
        }
    }

    /// A WebSocket peer hangs up (a close frame) and waits for the bridge's answer: once this
    /// returns, the bridge has seen the client go (it reports the close before answering it).
    pub fn hang_up(&mut self) {
        if let Writer::Ws(tx) = &self.writer {
            let _ = tx.send(WsCmd::Close);
        }
        self.wait_closed(WAIT);
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
        let mut seen = vec![];
        loop {
            let msg = self.recv(&format!("the response to request {id}"));
            if msg.get("id") == Some(id) && msg.get("method").is_none() {
                return (msg, seen);
            }
            seen.push(msg);
        }
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

    /// The child's process id (stdio peers).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("a child process").id()
    }

    /// Closes stdin and waits for the process to exit; returns whether it exited cleanly.
    pub fn close(mut self) -> bool {
        self.close_stdin();
        self.wait_exit(WAIT).expect("peer did not exit after stdin closed").success()
    }

    /// Closes stdin and waits (up to [`WAIT`]) for a clean exit, keeping the peer.
    pub fn close_then_exited(&mut self) -> bool {
        self.close_stdin();
        self.wait_exit(WAIT).is_some_and(|s| s.success())
    }

    /// Closes the child's stdin (an editor going away).
    pub fn close_stdin(&mut self) {
        if let Writer::Stdin(stdin) = &mut self.writer {
            drop(stdin.take());
        }
    }

    /// Waits up to `within` for the child to exit.
    pub fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let child = self.child.as_mut()?;
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Writer::Ws(tx) = &self.writer {
            let _ = tx.send(WsCmd::Close);
        }
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
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
        // The bridges acpx starts use this home's own hub (see `Home::command`).
        .env("ZCODE_ACP_HUB_PORT", "0")
        .env("NO_COLOR", "1")
        .current_dir(cwd)
        .args(["--agent", agent]);
    cmd
}

/// Every JSON line of an `acpx --format json` run's stdout.
pub fn json_lines(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout).lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

/// The token every test bridge and hub is given.
pub const TEST_TOKEN: &str = "zcode-test-token-0123456789abcdef";

/// The ACP SDK 1.9.0 example agent (bundled with the pinned acpx).
pub fn sdk_example_agent() -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("peers/node_modules/@agentclientprotocol/sdk/dist/examples/agent.js");
    assert!(
        path.exists(),
        "the ACP SDK example agent is missing: run scripts/test (or scripts/install-test-deps)"
    );
    path
}

/// The machine's steal time so far, ms (`/proc/stat`, in USER_HZ ticks of 10 ms): time its
/// virtual CPUs were runnable while the host ran something else (the benchmarks print it).
pub fn steal_ms() -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks =
        stat.lines().next().and_then(|l| l.split_whitespace().nth(8)).and_then(|v| v.parse::<u64>().ok());
    ticks.unwrap_or(0) * 10
}

/// The seq of phase `phase`'s update in `line`, if it is one: the stamp
/// `bench:PHASE:SEQ:NANOS` of the streaming agent of `scripts/bench-bridge` (`bench-bridge agent`).
pub fn streamed_seq(line: &str, phase: u64) -> Option<u64> {
    let at = line.find("bench:")?;
    let mut parts = line[at + 6..].split([':', '"']);
    let p: u64 = parts.next()?.parse().ok()?;
    let seq: u64 = parts.next()?.parse().ok()?;
    (p == phase).then_some(seq)
}

/// The demo agent as an upstream command line, streaming with `delay_ms` between chunks.
pub fn demo_agent(delay_ms: u64) -> Vec<String> {
    vec![bin().display().to_string(), "demo-agent".into(), "--delay-ms".into(), delay_ms.to_string()]
}

/// A running `zcode-acp bridge`: the test is its editor on stdio.
pub struct Bridge {
    /// The editor's end of the bridge's stdio.
    pub editor: Peer,
    /// The loopback port of its WebSocket / HTTP server.
    pub port: u16,
}

impl Bridge {
    /// Starts `zcode-acp bridge -- <agent>` on an ephemeral port with [`TEST_TOKEN`].
    pub fn start(home: &Home, agent: &[String]) -> Bridge {
        Bridge::start_with_stderr(home, agent, Stdio::inherit())
    }

    /// Like [`Bridge::start`], with the bridge's stderr sent where the test says.
    pub fn start_with_stderr(home: &Home, agent: &[String], stderr: Stdio) -> Bridge {
        Bridge::spawn(home, Bridge::command(home, agent), stderr)
    }

    /// The command [`Bridge::start`] runs (`zcode-acp bridge -- <agent>`, an ephemeral port,
    /// [`TEST_TOKEN`]), for a test that wires its stdio itself.
    pub fn command(home: &Home, agent: &[String]) -> Command {
        let mut args = vec!["bridge", "--"];
        args.extend(agent.iter().map(String::as_str));
        let mut cmd = home.command(&args);
        cmd.env("ZCODE_ACP_REMOTE_PORT", "0").env("ZCODE_ACP_REMOTE_TOKEN", TEST_TOKEN);
        cmd
    }

    /// Spawns a prepared `zcode-acp bridge` command (the test is its editor) and waits for its
    /// port file.
    pub fn spawn(home: &Home, cmd: Command, stderr: Stdio) -> Bridge {
        let editor = Peer::spawn_with_stderr(cmd, stderr);
        let port = Bridge::port_of(home, editor.pid());
        Bridge { editor, port }
    }

    /// The loopback port of bridge `pid` of `home`, once it has written its port file.
    pub fn port_of(home: &Home, pid: u32) -> u16 {
        let file = home.path().join("run").join(format!("bridge-{pid}.port"));
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(p) = std::fs::read_to_string(&file).ok().and_then(|s| s.trim().parse().ok()) {
                return p;
            }
            assert!(Instant::now() < deadline, "the bridge never wrote {}", file.display());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A remote client connected to `/acp` with the right token.
    pub fn remote(&self) -> Peer {
        Peer::connect_ws(self.port, "/acp", Some(TEST_TOKEN)).expect("remote client connects")
    }

    /// `GET {path}` on the bridge's loopback server: (status, body).
    pub fn http_get(&self, path: &str, token: Option<&str>) -> (u16, String) {
        http_get(self.port, path, token)
    }
}

/// A minimal HTTP/1.1 GET over loopback: (status, body).
pub fn http_get(port: u16, path: &str, token: Option<&str>) -> (u16, String) {
    http_request(port, "GET", path, token)
}

/// A minimal bodiless HTTP/1.1 request over loopback: (status, body).
pub fn http_request(port: u16, method: &str, path: &str, token: Option<&str>) -> (u16, String) {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(WAIT)).expect("timeout");
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    write!(s, "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Connection: close\r\n\r\n")
        .expect("write");
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("read");
    let status = raw.split_whitespace().nth(1).and_then(|c| c.parse().ok()).expect("status line");
    let body = raw.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}

/// `initialize` with the given client capabilities; returns the result.
pub fn initialize(p: &mut Peer, caps: Value) -> Value {
    let (resp, _) = p.call("initialize", json!({"protocolVersion": 1, "clientCapabilities": caps}));
    assert!(resp["result"].is_object(), "initialize failed: {resp}");
    resp["result"].clone()
}

/// `session/new` in `cwd`; returns the session id.
pub fn new_session(p: &mut Peer, cwd: &Path) -> String {
    let (resp, _) = p.call("session/new", json!({"cwd": cwd, "mcpServers": []}));
    resp["result"]["sessionId"].as_str().unwrap_or_else(|| panic!("session/new failed: {resp}")).to_owned()
}

/// `session/prompt` params with one text block.
pub fn prompt(sid: &str, text: &str) -> Value {
    json!({"sessionId": sid, "prompt": [{"type": "text", "text": text}]})
}

/// The child processes of `pid` (from `/proc`).
pub fn children_of(pid: u32) -> Vec<u32> {
    let mut out = vec![];
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return out };
    for t in tasks.flatten() {
        if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
            out.extend(s.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
        }
    }
    out
}

/// Whether process `pid` exists (and is not a zombie).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit(')').next().and_then(|r| r.split_whitespace().next()) != Some("Z"))
}

/// Sends `SIGTERM` (or `SIGKILL` with `hard`) to `pid` only if it is a process of home `home`
/// (its environment names it as `ZCODE_ACP_HOME`): a pid read from a file or a listing may
/// name a process that has since exited, and with `pid_max` at 32768 a suite run reuses ids
/// within seconds: a blind `kill` there once took another test's bridge.
pub fn kill_in_home(pid: u32, home: &Path, hard: bool) {
    let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else { return };
    let mine = format!("ZCODE_ACP_HOME={}", home.display());
    if !environ.split(|&b| b == 0).any(|v| v == mine.as_bytes()) {
        return;
    }
    let sig = if hard { "-9" } else { "-15" };
    let _ = Command::new("kill").args([sig, &pid.to_string()]).status();
}

/// Sends SIGKILL to `pid`.
pub fn kill9(pid: u32) {
    let status = Command::new("kill").args(["-9", &pid.to_string()]).status().expect("kill");
    assert!(status.success(), "kill -9 {pid} failed");
}

/// A whole HTTP response (one client and parser for every test: [`hub::http`]).
pub type HttpResponse = hub::Reply;

/// An HTTP/1.1 request over loopback with a Bearer token, reading the whole answer.
pub fn http(port: u16, method: &str, path: &str, token: Option<&str>) -> HttpResponse {
    http_with_body(port, method, path, token, None)
}

/// Like [`http`], with a JSON (or any) body.
pub fn http_with_body(
    port: u16,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&[u8]>,
) -> HttpResponse {
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers = Vec::new();
    if let Some(a) = &auth {
        headers.push(("Authorization", a.as_str()));
    }
    if body.is_some() {
        headers.push(("Content-Type", "application/json"));
    }
    hub::http(port, method, path, &headers, body.unwrap_or_default())
}

pub mod flood;
pub mod history;
pub mod hub;
pub mod net;
pub mod squat;
pub mod world;

/// The resident memory of process `pid`, in KiB (0 if unknown).
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// A bridge over the demo agent (`delay_ms` between chunks) whose editor, initialized with
/// `editor_caps`, created a session in the home directory, and a remote client attached to it:
/// (bridge, session id, remote).
pub fn shared_session(home: &Home, delay_ms: u64, editor_caps: Value) -> (Bridge, String, Peer) {
    let mut b = Bridge::start(home, &demo_agent(delay_ms));
    initialize(&mut b.editor, editor_caps);
    let sid = new_session(&mut b.editor, home.path());
    let mut remote = b.remote();
    initialize(&mut remote, json!({}));
    let (r, _) = remote.call("session/load", json!({"sessionId": sid, "cwd": home.path(), "mcpServers": []}));
    assert!(r["result"].is_object(), "the remote could not attach: {r}");
    (b, sid, remote)
}
