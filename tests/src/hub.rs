//! Helpers for the hub's end-to-end tests: a hub process the test owns ([`Hub`]), the hub a
//! bridge started (its port and pid files), raw HTTP with headers and bodies ([`http`]), and
//! bridges with extra environment ([`Bridge::start_env`](crate::Bridge::start_env)).

use crate::{Bridge, Home, Peer, TEST_TOKEN, WAIT};
use serde_json::Value;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// An HTTP answer, read to the end of the connection.
#[derive(Debug)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// Header (lower-cased name, value) pairs in order.
    pub headers: Vec<(String, String)>,
    /// The body (de-chunked).
    pub body: Vec<u8>,
}

impl Reply {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_str())
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON (panics with the body when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
}

/// Sends one HTTP/1.1 request to 127.0.0.1:`port` (`Connection: close`, a `Content-Length`
/// whenever there is a body or the method is POST/PUT) and reads the whole answer.
pub fn http(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Reply {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(WAIT)).expect("timeout");
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() || method == "POST" || method == "PUT" {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).and_then(|()| s.write_all(body)).expect("write request");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read answer");
    parse_reply(&raw)
}

/// Parses a raw HTTP/1.1 answer.
pub fn parse_reply(raw: &[u8]) -> Reply {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("an HTTP head");
    let head = String::from_utf8_lossy(&raw[..split]);
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split_whitespace().nth(1)).and_then(|c| c.parse().ok());
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    if headers.iter().any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked")) {
        body = dechunk(&body);
    }
    Reply { status: status.expect("a status code"), headers, body }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = b.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(String::from_utf8_lossy(&b[..eol]).trim(), 16).unwrap_or(0);
        if size == 0 || b.len() < eol + 2 + size {
            break;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + size]);
        b = &b[(eol + 4 + size).min(b.len())..];
    }
    out
}

/// The `Authorization` header with [`TEST_TOKEN`].
pub const AUTH: (&str, &str) = ("Authorization", "Bearer zcode-test-token-0123456789abcdef");

/// `GET path` on `hub` with [`AUTH`].
pub fn get(hub: &Hub, path: &str) -> Reply {
    http(hub.port, "GET", path, &[AUTH], b"")
}

/// `POST path` on `hub` with [`AUTH`] and `body` as JSON.
pub fn post(hub: &Hub, path: &str, body: &Value) -> Reply {
    http(hub.port, "POST", path, &[AUTH, ("Content-Type", "application/json")], body.to_string().as_bytes())
}

/// Stops (SIGTERM) the serve bridges the hub on `port` lists and waits until they are gone: a
/// test's serve bridges must not outlive it (each would start a hub of its own in the removed
/// home).
pub fn stop_serve_bridges(port: u16) {
    let r = http(port, "GET", "/api/instances", &[AUTH], b"");
    let list = if r.status == 200 { r.json() } else { Value::Null };
    let serve: Vec<u32> = list
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["origin"] == "serve")
        .filter_map(|i| i["pid"].as_u64().and_then(|p| u32::try_from(p).ok()))
        .collect();
    for &pid in &serve {
        let pid = nix::unistd::Pid::from_raw(pid as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    }
    for pid in serve {
        wait_gone(pid, crate::WAIT);
    }
}

/// A loopback port that refuses connections for as long as it is held: a socket bound to it
/// that never listens. (A port bound and released could be taken meanwhile by any process,
/// which would then answer.)
pub struct ClosedPort {
    _socket: std::os::fd::OwnedFd,
    /// The port.
    pub port: u16,
}

/// Reserves a [`ClosedPort`].
pub fn closed_port() -> ClosedPort {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, SockaddrIn, bind, getsockname, socket};
    let socket = socket(AddressFamily::Inet, SockType::Stream, SockFlag::SOCK_CLOEXEC, None).expect("socket");
    bind(std::os::fd::AsRawFd::as_raw_fd(&socket), &SockaddrIn::new(127, 0, 0, 1, 0)).expect("bind");
    let addr: SockaddrIn = getsockname(std::os::fd::AsRawFd::as_raw_fd(&socket)).expect("getsockname");
    ClosedPort { _socket: socket, port: addr.port() }
}

/// The port in `home`'s hub port file.
pub fn hub_port(home: &Home) -> Option<u16> {
    zcode_shared::paths::Paths::under(home.path()).read_hub_port()
}

/// The pid in `home`'s hub pid file (the hub holding the home's lock).
pub fn hub_pid(home: &Home) -> Option<u32> {
    std::fs::read_to_string(home.path().join("run/hub.pid")).ok()?.trim().parse().ok()
}

/// Waits until `home`'s port file names a port other than `not` on which a hub answers
/// `/api/health`; returns it.
pub fn wait_for_hub(home: &Home, not: Option<u16>) -> u16 {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(p) = hub_port(home).filter(|p| Some(*p) != not) {
            if std::net::TcpStream::connect(("127.0.0.1", p)).is_ok()
                && http(p, "GET", "/api/health", &[], b"").status == 200
            {
                return p;
            }
        }
        assert!(Instant::now() < deadline, "no hub came up in {}", home.path().display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `GET /api/instances` on the hub at `port` (with the token): the array.
pub fn instances(port: u16) -> Vec<Value> {
    let r = http(port, "GET", "/api/instances", &[AUTH], b"");
    assert_eq!(r.status, 200, "{}", r.text());
    r.json().as_array().expect("an array").clone()
}

/// Polls `/api/instances` on `port` until `pred` holds for the list; returns that list.
pub fn wait_instances(port: u16, what: &str, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + WAIT;
    loop {
        let list = instances(port);
        if pred(&list) {
            return list;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}: {list:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether the list holds instance `id`.
pub fn listed(list: &[Value], id: &str) -> bool {
    list.iter().any(|i| i["id"] == id)
}

/// `POST {path}` with a JSON body.
pub fn post_json(port: u16, path: &str, body: &Value) -> Reply {
    http(port, "POST", path, &[("Content-Type", "application/json")], body.to_string().as_bytes())
}

/// Sends `SIGTERM`/`SIGKILL`/… (`sig` without the `SIG`) to `pid`.
pub fn signal(pid: u32, sig: &str) {
    let status = Command::new("kill").args([&format!("-{sig}"), &pid.to_string()]).status().expect("kill");
    assert!(status.success(), "kill -{sig} {pid} failed");
}

/// Field `n` (1-based, as in proc(5)) of `/proc/{pid}/stat`.
pub fn proc_stat_field(pid: u32, n: usize) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the `(comm)` start at field 3.
    s.rsplit(')').next()?.split_whitespace().nth(n - 3)?.parse().ok()
}

/// Waits up to `within` for `pid` to be gone; whether it is.
pub fn wait_gone(pid: u32, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while crate::alive(pid) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// Waits up to [`WAIT`] for `ok` to hold (polled every 20 ms): the event a test waits for
/// instead of sleeping for a production timeout. Panics naming `what` when it never comes.
pub fn wait_until(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out after {WAIT:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The lines of log file `path` (so far) that contain `needle`.
pub fn log_lines(path: &Path, needle: &str) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().filter(|l| l.contains(needle)).map(str::to_owned).collect()
}

/// Waits up to [`WAIT`] until log file `path` has at least `n` lines containing `needle`;
/// returns those lines.
pub fn wait_log(path: &Path, needle: &str, n: usize) -> Vec<String> {
    let mut lines = Vec::new();
    wait_until(&format!("{n} × {needle:?} in {}", path.display()), || {
        lines = log_lines(path, needle);
        lines.len() >= n
    });
    lines
}

/// When a log line was written, from its leading timestamp (tracing's
/// `2026-12-01T05:40:35.123456Z`), as the time since the Unix epoch. Intervals between the
/// lines one process logged are its own record of when things happened: a loaded machine
/// only stretches them, so a test may bound them from below (a backoff, a throttle), never
/// from above.
pub fn log_time(line: &str) -> Option<Duration> {
    let stamp = line.split_whitespace().next()?.strip_suffix('Z')?;
    let (date, time) = stamp.split_once('T')?;
    let mut ymd = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (y, m, d) = (ymd.next()??, ymd.next()??, ymd.next()??);
    let mut hms = time.splitn(3, ':');
    let (h, min) = (hms.next()?.parse::<u64>().ok()?, hms.next()?.parse::<u64>().ok()?);
    let secs: f64 = hms.next()?.parse().ok()?;
    // Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = u64::try_from(era * 146_097 + doe - 719_468).ok()?;
    Some(Duration::from_secs((days * 24 + h) * 3600 + min * 60) + Duration::from_secs_f64(secs))
}

/// The intervals between consecutive `lines`, by their [`log_time`]s.
pub fn log_gaps(lines: &[String]) -> Vec<Duration> {
    let times: Vec<Duration> =
        lines.iter().map(|l| log_time(l).unwrap_or_else(|| panic!("no timestamp on {l:?}"))).collect();
    times.windows(2).map(|w| w[1].saturating_sub(w[0])).collect()
}

/// Waits up to [`WAIT`] until nothing accepts connections on `port` (a killed process's
/// sockets close only when its last thread is gone, after it already looks dead in `/proc`).
pub fn wait_port_closed(port: u16) {
    let deadline = Instant::now() + WAIT;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
        assert!(Instant::now() < deadline, "port {port} still accepts connections");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A `zcode-acp hub` the test started as its child, on an OS-picked port, with [`TEST_TOKEN`].
/// Its stderr goes to a file in the home ([`Hub::log`] reads it). Killed when dropped.
pub struct Hub {
    child: Child,
    /// Its port.
    pub port: u16,
    /// Its stderr.
    pub log_file: PathBuf,
}

/// Spawns `cmd`, whose program may be a copy just written: such a copy is "busy" while a child
/// another test thread forked meanwhile still holds its write descriptor (until that child
/// execs): ETXTBSY for a moment, retried.
pub fn spawn_copy(cmd: &mut Command) -> Child {
    let mut tries = 0;
    loop {
        match cmd.spawn() {
            Ok(c) => return c,
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 100 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("spawn {:?}: {e}", cmd.get_program()),
        }
    }
}

impl Hub {
    /// Starts a hub in `home` with `env` on top of `ZCODE_ACP_HUB_PORT=0` and the token (an
    /// empty value removes a variable: `("ZCODE_ACP_REMOTE_TOKEN", "")` leaves the hub the
    /// home's token file); returns once it answers `/api/health`.
    pub fn start(home: &Home, env: &[(&str, &str)]) -> Hub {
        Hub::start_exe(home, crate::bin(), env)
    }

    /// Like [`Hub::start`], running the binary at `exe` (a copy a self-upgrade test replaces).
    pub fn start_exe(home: &Home, exe: &Path, env: &[(&str, &str)]) -> Hub {
        let old = hub_port(home);
        static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let log_file = home.path().join(format!("hub-{n}.log"));
        let mut cmd = home.command_of(exe, &["hub"]);
        cmd.env("ZCODE_ACP_REMOTE_TOKEN", TEST_TOKEN);
        for (k, v) in env {
            match v.is_empty() {
                true => cmd.env_remove(k),
                false => cmd.env(k, v),
            };
        }
        let log = std::fs::File::create(&log_file).expect("hub log");
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(log);
        let child = spawn_copy(&mut cmd);
        let port = wait_for_hub(home, old);
        Hub { child, port, log_file }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_file).unwrap_or_default()
    }

    /// Waits up to `within` for it to exit.
    pub fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A WebSocket client relayed to instance `id`.
    pub fn connect(&self, id: &str) -> Result<Peer, u16> {
        Peer::connect_ws(self.port, &format!("/acp?instance={id}"), Some(TEST_TOKEN))
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Bridge {
    /// Like [`Bridge::start`], run in `home`'s directory with `env` on top (hub port, timing
    /// knobs…). Its id in the hub's registry is [`Bridge::id`].
    pub fn start_env(home: &Home, agent: &[String], env: &[(&str, &str)]) -> Bridge {
        let mut args = vec!["bridge", "--"];
        args.extend(agent.iter().map(String::as_str));
        let mut cmd = home.command(&args);
        cmd.env("ZCODE_ACP_REMOTE_PORT", "0")
            .env("ZCODE_ACP_REMOTE_TOKEN", TEST_TOKEN)
            .current_dir(home.path());
        for (k, v) in env {
            cmd.env(k, v);
        }
        Bridge::spawn(home, cmd, Stdio::inherit())
    }

    /// Like [`Bridge::start_env`], with the bridge's stderr (its log) in a file of the home:
    /// (bridge, log path). Tests wait for what it logs ([`wait_log`]) instead of sleeping.
    pub fn start_logged(home: &Home, agent: &[String], env: &[(&str, &str)]) -> (Bridge, PathBuf) {
        static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = home.path().join(format!("bridge-{n}.log"));
        let log = std::fs::File::create(&path).expect("bridge log");
        let mut args = vec!["bridge", "--"];
        args.extend(agent.iter().map(String::as_str));
        let mut cmd = home.command(&args);
        cmd.env("ZCODE_ACP_REMOTE_PORT", "0")
            .env("ZCODE_ACP_REMOTE_TOKEN", TEST_TOKEN)
            .current_dir(home.path());
        for (k, v) in env {
            cmd.env(k, v);
        }
        (Bridge::spawn(home, cmd, Stdio::from(log)), path)
    }

    /// Its instance id at the hub: its pid, as a string.
    pub fn id(&self) -> String {
        self.editor.pid().to_string()
    }
}

/// Runs `zcode-acp {args}` in `home` with `env` to completion: (exit code, stderr).
pub fn run_cli(home: &Home, args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let mut cmd = home.command(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.stdin(Stdio::null()).output().expect("run zcode-acp");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Holds `home`'s hub lock (`run/hub.pid`, `flock`ed) the way a hub does, from another process
/// (python3), with `pid` written in the file (0: the holder's own); returns once it is held.
/// Killing the child lets go of the lock.
pub fn hold_hub_lock(home: &Home, pid: u32) -> Child {
    use std::io::BufRead;
    let run_dir = home.path().join("run");
    std::fs::create_dir_all(&run_dir).expect("run dir");
    let script = "import fcntl,os,sys,time\n\
                  f=open(sys.argv[1],'a+'); fcntl.flock(f,fcntl.LOCK_EX); f.truncate(0)\n\
                  f.write((sys.argv[2] if sys.argv[2]!='0' else str(os.getpid()))+'\\n'); f.flush()\n\
                  print('locked',flush=True); time.sleep(600)";
    let mut c = Command::new("/usr/bin/python3")
        .args(["-c", script])
        .arg(run_dir.join("hub.pid"))
        .arg(pid.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    std::io::BufReader::new(c.stdout.take().expect("stdout")).read_line(&mut line).expect("read");
    assert_eq!(line.trim(), "locked");
    c
}

/// Redeems the one-time code of a pairing URL (`…/#pair=CODE`, as `up` and `pair` print it) at
/// the hub on `port`, as a phone's web client does: the new device's own credential.
pub fn redeem_pairing_url(port: u16, url: &str) -> String {
    let code = url.split("#pair=").nth(1).unwrap_or_else(|| panic!("a pairing code in {url}"));
    let body = serde_json::json!({"code": code, "name": "test phone"}).to_string();
    let r = http(port, "POST", "/api/pair", &[("Content-Type", "application/json")], body.as_bytes());
    assert_eq!(r.status, 200, "redeeming {url}: {}", r.text());
    r.json()["token"].as_str().expect("a device token").to_owned()
}
