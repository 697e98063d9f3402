//! Another local user (uid 65534, through `setpriv` and the system's python3) trying to take a
//! port: it binds in a loop (SO_REUSEADDR, 0.5 ms between tries) until it holds the port, then
//! records every connection and byte it is sent and answers any request head with `200 ok`.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The uid the squatter runs as.
pub const NOBODY: u32 = 65534;

const SCRIPT: &str = r#"
import socket, sys, threading, time
port = int(sys.argv[1])
print("started", flush=True)
while True:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", port))
        s.listen(128)
        break
    except OSError:
        s.close()
        time.sleep(0.0005)
print("bound", s.getsockname()[1], flush=True)
def serve(c):
    buf = b""
    try:
        while True:
            d = c.recv(65536)
            if not d:
                break
            print("data", d.hex(), flush=True)
            buf += d
            if b"\r\n\r\n" in buf:
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
                break
    except OSError:
        pass
    c.close()
while True:
    c, _ = s.accept()
    print("conn", flush=True)
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

#[derive(Default)]
struct Seen {
    /// The port it holds, once it does.
    bound: Option<u16>,
    connections: usize,
    received: Vec<u8>,
}

/// A squatter process of uid 65534 and what it saw.
pub struct Squatter {
    child: Child,
    seen: Arc<Mutex<Seen>>,
}

impl Squatter {
    /// Starts the bind loop on 127.0.0.1:`port` (0: any free port) as uid 65534 (checked in
    /// `/proc`); panics when privileges cannot be dropped.
    pub fn start(port: u16) -> Squatter {
        let (child, lines) = as_nobody(SCRIPT, &[port.to_string()], "the squatter");
        let seen = Arc::new(Mutex::new(Seen::default()));
        let s = seen.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let mut s = s.lock().expect("lock");
                if let Some(port) = line.strip_prefix("bound ") {
                    s.bound = port.parse().ok();
                } else if line == "conn" {
                    s.connections += 1;
                } else if let Some(hex) = line.strip_prefix("data ") {
                    let bytes = (0..hex.len() / 2)
                        .filter_map(|i| u8::from_str_radix(&hex[i * 2..i * 2 + 2], 16).ok());
                    s.received.extend(bytes);
                }
            }
        });
        Squatter { child, seen }
    }

    /// Whether it ever held the port.
    pub fn bound(&self) -> bool {
        self.seen.lock().expect("lock").bound.is_some()
    }

    /// Waits until it holds the port.
    pub fn wait_bound(&self) {
        self.port();
    }

    /// The port it holds, once it does (waited for).
    pub fn port(&self) -> u16 {
        let deadline = Instant::now() + crate::WAIT;
        loop {
            if let Some(port) = self.seen.lock().expect("lock").bound {
                return port;
            }
            assert!(Instant::now() < deadline, "the squatter never got the port");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// How many connections reached it.
    pub fn connections(&self) -> usize {
        self.seen.lock().expect("lock").connections
    }

    /// Waits until at least `n` connections reached it.
    pub fn wait_connections(&self, n: usize, what: &str) {
        let deadline = Instant::now() + crate::WAIT;
        while self.connections() < n {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Fails the test if it learned the token, or received anything at all.
    pub fn assert_learned_nothing(&self) {
        let got = self.received();
        assert!(!got.contains(crate::TEST_TOKEN), "the squatter (uid {NOBODY}) received the token:\n{got}");
        assert!(got.is_empty(), "the squatter (uid {NOBODY}) was sent bytes:\n{got}");
    }

    /// Everything it was sent, as text.
    pub fn received(&self) -> String {
        String::from_utf8_lossy(&self.seen.lock().expect("lock").received).into_owned()
    }
}

impl Drop for Squatter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `script` (`/usr/bin/python3 -c`, which uid 65534 can read) with `args` as uid 65534
/// through `setpriv`, waits for its first line, `started`, and checks in `/proc` that it runs
/// as that user: the child and the rest of its stdout. Panics (`what` names it) when
/// privileges cannot be dropped.
pub fn as_nobody(
    script: &str,
    args: &[String],
    what: &str,
) -> (Child, std::io::Lines<BufReader<std::process::ChildStdout>>) {
    let mut child = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", script])
        .args(args)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run setpriv to act as uid {NOBODY}: {e}"));
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    if !matches!(lines.next(), Some(Ok(l)) if l == "started") {
        let mut err = String::new();
        let _ = child.stderr.take().expect("stderr").read_to_string(&mut err);
        let _ = child.wait();
        panic!("cannot drop privileges to uid {NOBODY} (setpriv, /usr/bin/python3): {err}");
    }
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).expect("status");
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).expect("Uid line").to_owned();
    assert!(
        uid_line.split_whitespace().skip(1).all(|u| u == NOBODY.to_string()),
        "{what} does not run as uid {NOBODY}: {uid_line}"
    );
    (child, lines)
}

/// A port nothing listens on now (bound to port 0, then let go).
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// `GET path` on a fresh connection to 127.0.0.1:`port`: the status, or what went wrong (no
/// panic: tests count failures, or expect one).
pub fn get_status(port: u16, path: &str) -> Result<u16, String> {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(crate::WAIT)).map_err(|e| e.to_string())?;
    let head = format!("GET {path} HTTP/1.1\r\nHost: hub\r\nConnection: close\r\n\r\n");
    s.write_all(head.as_bytes()).map_err(|e| format!("write: {e}"))?;
    let mut reply = Vec::new();
    s.read_to_end(&mut reply).map_err(|e| format!("read: {e}"))?;
    let text = String::from_utf8_lossy(&reply);
    let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok());
    status.ok_or_else(|| format!("no status in {text:?}"))
}
