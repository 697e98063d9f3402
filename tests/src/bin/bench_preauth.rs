//! `scripts/bench-preauth`: what a client without the token can cost the hub (issue 12,
//! point 2), each attack against a fresh hub:
//! - **Body bomb**: 1500 connections at once, each POSTing `/api/register` with a 1 MiB JSON
//!   body that carries a wrong token, written as fast as the hub takes it. Reported: the hub's
//!   peak resident memory (`VmHWM`) and its resident memory once every connection is answered
//!   or closed (and 2 s have passed), and how the connections ended.
//! - **Silent sockets**: 4300 connections from 127.0.0.1 that never send a byte, each reopened
//!   as soon as the hub closes it; meanwhile authenticated `GET /api/instances`, each on a
//!   fresh connection from 127.0.0.1 too, one at a time. Reported: their latency (median and
//!   worst of `BENCH_REQUESTS`, default 10; a request taking over 60 s counts as 60 s and ends
//!   the series) and the hub's resident memory while the sockets are held.
//! - **Another user's flood** (issue 32, point 9): 4000 silent connections from uid 65534
//!   (`setpriv`, the system's python3) on a bridge's port and 4000 on the hub's, each reopened
//!   as soon as it is closed; meanwhile `BENCH_FLOOD_CALLS` (default 1000) relayed
//!   `GET /api/instances/ID/status` calls and as many relayed WebSocket opens, one at a time,
//!   and the bridge's heartbeats (every 200 ms). Reported: how many of each succeeded, and the
//!   flood's rate.
//!
//! `BENCH_ONLY=flood` runs the last attack only. `ZCODE_ACP_BIN` is the hub measured. With `BENCH_BASELINE_BIN` set too, the same runs are
//! made against that binary first (this program re-runs itself for it) and the table has a
//! column for each. Prints a Markdown table.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use zcode_tests::flood::Flood;
use zcode_tests::hub::{Hub, listed, wait_instances};
use zcode_tests::{Bridge, Home, TEST_TOKEN, demo_agent, rss_kib};

const BOMB_CONNECTIONS: usize = 1500;
const BOMB_BODY: usize = 1 << 20;
const SILENT: usize = 4300;
/// The hubs measured have no instance, and must not exit for being idle meanwhile.
const NO_IDLE_EXIT: (&str, &str) = ("ZCODE_ACP_HUB_IDLE_MS", "3600000");
/// A request slower than this ends the latency series.
const GIVE_UP: Duration = Duration::from_secs(60);

/// One hub's numbers, in the order of [`LABELS`].
type Numbers = Vec<String>;

/// Silent connections another user holds on each flooded port.
const FLOOD: usize = 4000;

const LABELS: [&str; 12] = [
    "hub RSS at start",
    "1500 × 1 MiB body bomb: peak RSS (VmHWM)",
    "… RSS after it (2 s later)",
    "… how the 1500 connections ended",
    "4300 silent sockets held: hub RSS",
    "… hub's open descriptors",
    "… authenticated request latency, median",
    "… authenticated request latency, worst",
    "uid 65534: 4000 silent sockets on a bridge's port and 4000 on the hub's, reopened: connections/s",
    "… relayed status calls that succeeded",
    "… relayed WebSocket opens that succeeded",
    "… bridge heartbeats sent / failed meanwhile",
];

fn main() {
    if std::env::var_os("BENCH_CHILD").is_some() {
        // The baseline run: numbers only, one per line.
        for n in measure() {
            println!("{n}");
        }
        return;
    }
    let baseline = std::env::var_os("BENCH_BASELINE_BIN").filter(|b| !b.is_empty()).map(|bin| {
        eprintln!("bench-preauth: the baseline ({}) …", bin.to_string_lossy());
        let out = std::process::Command::new(std::env::current_exe().expect("this program"))
            .env("BENCH_CHILD", "1")
            .env("ZCODE_ACP_BIN", &bin)
            .stderr(std::process::Stdio::inherit())
            .output()
            .expect("run the baseline");
        assert!(out.status.success(), "the baseline run failed");
        String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect::<Numbers>()
    });
    eprintln!("bench-preauth: this build …");
    let current = measure();
    match baseline {
        Some(base) => {
            println!("| attack | baseline | this build |\n| --- | --- | --- |");
            for ((label, b), c) in LABELS.iter().zip(&base).zip(&current) {
                println!("| {label} | {b} | {c} |");
            }
        }
        None => {
            println!("| attack | this build |\n| --- | --- |");
            for (label, c) in LABELS.iter().zip(&current) {
                println!("| {label} | {c} |");
            }
        }
    }
}

fn measure() -> Numbers {
    // BENCH_ONLY=flood runs the flood only (the other rows say "—").
    if std::env::var("BENCH_ONLY").is_ok_and(|v| v == "flood") {
        let mut out = vec!["—".to_owned(); LABELS.len() - 4];
        out.extend(flooded());
        return out;
    }
    let mut out = Vec::new();
    {
        let home = Home::new();
        let hub = Hub::start(&home, &[NO_IDLE_EXIT]);
        out.push(mib(rss_kib(hub.pid())));
        eprintln!("bench-preauth: body bomb …");
        let ended = body_bomb(hub.port);
        out.push(mib(status_kib(hub.pid(), "VmHWM:")));
        std::thread::sleep(Duration::from_secs(2));
        out.push(mib(rss_kib(hub.pid())));
        out.push(ended);
    }
    let home = Home::new();
    let hub = Hub::start(&home, &[NO_IDLE_EXIT]);
    eprintln!("bench-preauth: {SILENT} silent sockets …");
    let stop = Arc::new(AtomicBool::new(false));
    let open = Arc::new(AtomicUsize::new(0));
    let holder = {
        let (stop, open, addr) =
            (stop.clone(), open.clone(), SocketAddr::from((Ipv4Addr::LOCALHOST, hub.port)));
        std::thread::spawn(move || hold_silent(addr, &stop, &open))
    };
    let opening = Instant::now();
    while open.load(Ordering::Relaxed) < SILENT && opening.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "bench-preauth: {} silent sockets open after {:?}",
        open.load(Ordering::Relaxed),
        opening.elapsed()
    );
    std::thread::sleep(Duration::from_secs(1));
    out.push(mib(rss_kib(hub.pid())));
    let fds = std::fs::read_dir(format!("/proc/{}/fd", hub.pid())).map_or(0, |d| d.count());
    out.push(fds.to_string());
    let n = std::env::var("BENCH_REQUESTS").ok().and_then(|v| v.parse().ok()).unwrap_or(10);
    let mut times = Vec::new();
    for i in 0..n {
        let t = authenticated_request(hub.port);
        eprintln!(
            "bench-preauth: request {}/{n}: {t:?} ({} silent sockets open)",
            i + 1,
            open.load(Ordering::Relaxed)
        );
        times.push(t);
        if t >= GIVE_UP {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, Ordering::Relaxed);
    let _ = holder.join();
    times.sort();
    let show = |d: Duration| match d >= GIVE_UP {
        true => format!("> {} s", GIVE_UP.as_secs()),
        false => format!("{:.1} ms", d.as_secs_f64() * 1e3),
    };
    out.push(show(times[times.len() / 2]));
    out.push(format!("{} (of {})", show(times[times.len() - 1]), times.len()));
    drop(hub);
    out.extend(flooded());
    out
}

/// Another user's flood on a bridge's port and the hub's while relayed calls are made.
fn flooded() -> Numbers {
    let home = Home::new();
    let hub = Hub::start(&home, &[NO_IDLE_EXIT]);
    let (bridge, log) = Bridge::start_logged(
        &home,
        &demo_agent(0),
        &[("ZCODE_ACP_HEARTBEAT_MS", "200"), ("RUST_LOG", "info,zcode_bridge::register=trace")],
    );
    let id = bridge.id();
    wait_instances(hub.port, "the bridge", |l| listed(l, &id));
    eprintln!("bench-preauth: uid 65534 floods the bridge's port and the hub's ({FLOOD} each) …");
    let flood = Flood::start(FLOOD, &[bridge.port, hub.port]);
    if !flood.wait_made(4 * FLOOD as u64, Duration::from_secs(60)) {
        eprintln!("bench-preauth: the flood opened only {} connections in 60 s", flood.made());
    }
    let lines_before = std::fs::read_to_string(&log).unwrap_or_default().lines().count();
    let n: usize = std::env::var("BENCH_FLOOD_CALLS").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    let (mut status_ok, mut ws_ok) = (0, 0);
    for i in 0..n {
        match relayed(hub.port, &format!("GET /api/instances/{id}/status HTTP/1.1\r\nConnection: close\r\n"))
        {
            Ok(200) => status_ok += 1,
            other => eprintln!("bench-preauth: status call {i}: {other:?}"),
        }
        let upgrade = format!(
            "GET /acp?instance={id} HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
             Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        );
        match relayed(hub.port, &upgrade) {
            Ok(101) => ws_ok += 1,
            other => eprintln!("bench-preauth: WebSocket open {i}: {other:?}"),
        }
    }
    let rate = flood.rate();
    drop(flood);
    let said = std::fs::read_to_string(&log).unwrap_or_default();
    let during: Vec<&str> = said.lines().skip(lines_before).collect();
    let sent =
        during.iter().filter(|l| l.contains("heartbeat sent") || l.contains("registered with")).count();
    let failed = during
        .iter()
        .filter(|l| {
            ["no hub answered", "no hub of this user", "refused the registration"]
                .iter()
                .any(|f| l.contains(f))
        })
        .count();
    vec![
        format!("{rate:.0}"),
        format!("{status_ok} of {n}"),
        format!("{ws_ok} of {n}"),
        format!("{sent} / {failed}"),
    ]
}

/// Sends one request head (`head`: the request line and headers but `Host`, the token and the
/// final blank line) to the hub on a fresh connection: the answer's status, or why none came
/// (within 10 s).
fn relayed(port: u16, head: &str) -> Result<u16, String> {
    let mut s =
        TcpStream::connect_timeout(&SocketAddr::from(([127, 0, 0, 1], port)), Duration::from_secs(10))
            .map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    write!(s, "{head}Host: x\r\nAuthorization: Bearer {TEST_TOKEN}\r\n\r\n")
        .map_err(|e| format!("send: {e}"))?;
    let mut answer = [0u8; 12];
    s.read_exact(&mut answer).map_err(|e| format!("read: {e}"))?;
    String::from_utf8_lossy(&answer[9..12]).parse().map_err(|_| format!("answer {answer:?}"))
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// A `KiB` field of `/proc/{pid}/status`.
fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with(field))?.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// One bomb connection: what is left to send, and what came back.
struct Bomb {
    s: TcpStream,
    sent: usize,
    answer: Vec<u8>,
    done: Option<&'static str>,
}

/// Runs the body bomb to its end; how the connections ended, counted.
fn body_bomb(port: u16) -> String {
    let pad = BOMB_BODY - r#"{"token":"guess","pad":""}"#.len();
    let body = format!(r#"{{"token":"guess","pad":"{}"}}"#, "x".repeat(pad));
    let request = format!(
        "POST /api/register HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes();
    let mut conns: Vec<Bomb> = (0..BOMB_CONNECTIONS)
        .map(|_| {
            let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
            s.set_nonblocking(true).expect("non-blocking");
            Bomb { s, sent: 0, answer: Vec::new(), done: None }
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut buf = [0u8; 4096];
    while conns.iter().any(|c| c.done.is_none()) && Instant::now() < deadline {
        let mut progress = false;
        for c in conns.iter_mut().filter(|c| c.done.is_none()) {
            if c.sent < request.len() {
                match c.s.write(&request[c.sent..]) {
                    Ok(n) => (c.sent, progress) = (c.sent + n, true),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(_) => c.done = Some("closed mid-body"),
                }
            }
            match c.s.read(&mut buf) {
                Ok(0) => c.done = Some("closed"),
                Ok(n) => {
                    c.answer.extend_from_slice(&buf[..n]);
                    progress = true;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(_) => c.done = Some("reset"),
            }
        }
        if !progress {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for c in &conns {
        let status = String::from_utf8_lossy(c.answer.get(9..12).unwrap_or(b"")).into_owned();
        let what = match status.is_empty() {
            false => format!("answered {status}"),
            true => c.done.unwrap_or("unanswered").to_owned(),
        };
        *counts.entry(what).or_default() += 1;
    }
    counts.iter().map(|(k, n)| format!("{n}× {k}")).collect::<Vec<_>>().join(", ")
}

/// Holds [`SILENT`] connections to `addr` that never send a byte, reopening each the hub
/// closes, until `stop`; `open` counts those open. Each connect waits for its handshake (the
/// hub holds every socket it counts), but at most 200 ms: a sweep never stalls long behind a
/// full accept queue.
fn hold_silent(addr: SocketAddr, stop: &AtomicBool, open: &AtomicUsize) {
    let connect = || {
        let s = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()?;
        s.set_nonblocking(true).ok()?;
        Some(s)
    };
    let mut socks: Vec<Option<TcpStream>> = Vec::with_capacity(SILENT);
    for _ in 0..SILENT {
        socks.push(connect());
        open.store(socks.iter().flatten().count(), Ordering::Relaxed);
    }
    let mut buf = [0u8; 512];
    while !stop.load(Ordering::Relaxed) {
        for slot in socks.iter_mut() {
            let closed = match slot {
                None => true,
                Some(s) => !matches!(s.read(&mut buf), Err(e) if e.kind() == ErrorKind::WouldBlock),
            };
            if closed {
                *slot = connect();
            }
        }
        open.store(socks.iter().flatten().count(), Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// One authenticated `GET /api/instances` on a fresh connection: how long until its answer.
fn authenticated_request(port: u16) -> Duration {
    let t = Instant::now();
    let attempt = || -> std::io::Result<bool> {
        let mut s = TcpStream::connect_timeout(&SocketAddr::from(([127, 0, 0, 1], port)), GIVE_UP)?;
        s.set_read_timeout(Some(GIVE_UP))?;
        write!(
            s,
            "GET /api/instances HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer {TEST_TOKEN}\r\n\r\n"
        )?;
        let mut answer = Vec::new();
        s.read_to_end(&mut answer)?;
        Ok(answer.starts_with(b"HTTP/1.1 200"))
    };
    // A connection closed under it (evicted before its request was read) is retried.
    while t.elapsed() < GIVE_UP {
        if let Ok(true) = attempt() {
            return t.elapsed();
        }
    }
    GIVE_UP
}
