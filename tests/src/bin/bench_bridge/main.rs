//! `scripts/bench-bridge`: the bridge's hot path, in one run, beside a bare tokio-tungstenite
//! echo server (the floor for a WebSocket round trip on this runtime):
//! - (a) round trips on one connection: the bridge answering a cached `initialize` itself, and
//!   `_demo/echo` forwarded to the demo agent and back, beside the echo server's 64 B echo;
//!   pinned (every process and this thread on one CPU) and unpinned, the modes and targets
//!   taking turns each round (medians of `BENCH_ROUNDS`, default 5, are reported);
//! - (b) fan-out ([`fanout`]): a scripted agent streaming 5000 updates/s to the editor (stdio)
//!   and 1 / 10 / 50 remote clients;
//! - (c) memory per idle remote client with 3000 held, beside the echo server's.
//!
//! `BENCH_BASE=<path of another zcode-acp build>` adds that build's bridge beside ours to every
//! part, in the same run (an A/B of a change: `git worktree add` the old revision, build it);
//! several, `:`-separated, add one row set each.
//!
//! The binary is also its own children: `bench-bridge echo-server` and `bench-bridge agent`
//! ([`peers`]).

mod fanout;
mod peers;

use std::io::{BufRead, BufReader, ErrorKind};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tungstenite::client::IntoClientRequest;
use tungstenite::{Message, WebSocket};
use zcode_tests::{Bridge, Home, TEST_TOKEN, demo_agent};

type Ws = WebSocket<TcpStream>;

/// Idle remote clients held for the memory figure (`BENCH_IDLE`, default 3000; 0 skips it).
fn idle_count() -> usize {
    env_num("BENCH_IDLE", 3000)
}

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("echo-server") => return peers::echo_server(),
        Some("agent") => return peers::agent(),
        _ => {}
    }
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    let want = |part: &str| only.is_empty() || only.split(',').any(|p| p == part);
    if want("rtt") {
        round_trips();
    }
    if want("fanout") {
        fanout::run();
    }
    if want("idle") && idle_count() > 0 {
        idle();
    }
}

/// Wall-clock nanoseconds: the agent stamps updates with it and clients read it back (one
/// machine, one clock).
pub fn wall_nanos() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// The bridges measured: ours (`ZCODE_ACP_BIN`), then each of `BENCH_BASE` (`:`-separated): (label, binary).
pub fn bridges() -> Vec<(String, std::path::PathBuf)> {
    let mut out = vec![("bridge".to_owned(), zcode_tests::bin().to_owned())];
    // Several builds may be compared in one run: `BENCH_BASE=/a:/b`.
    let bases = std::env::var("BENCH_BASE").unwrap_or_default();
    for (i, base) in bases.split(':').filter(|b| !b.is_empty()).enumerate() {
        let label = match i {
            0 => "bridge (BENCH_BASE)".to_owned(),
            _ => format!("bridge (BENCH_BASE #{}: {base})", i + 1),
        };
        out.push((label, base.into()));
    }
    out
}

/// Starts `exe bridge -- <agent>` as [`Bridge::start`] does for the suite's binary.
pub fn start_bridge(home: &Home, exe: &std::path::Path, agent: &[String]) -> Bridge {
    // The suite's environment for a bridge, given to another program.
    let template = home.command(&["bridge", "--"]);
    let mut cmd = Command::new(exe);
    cmd.args(template.get_args()).args(agent);
    for (k, v) in template.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    cmd.env("ZCODE_ACP_REMOTE_PORT", "0").env("ZCODE_ACP_REMOTE_TOKEN", TEST_TOKEN);
    Bridge::spawn(home, cmd, Stdio::inherit())
}

/// Pins this thread (and so the children it spawns from now on) to `cpu`, or frees it.
pub fn pin(cpu: Option<usize>) {
    use nix::sched::{CpuSet, sched_setaffinity};
    let mut set = CpuSet::new();
    let all = std::thread::available_parallelism().map_or(1, |n| n.get());
    for c in cpu.map_or(0..all, |c| c..c + 1) {
        set.set(c).expect("cpu index");
    }
    sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).expect("sched_setaffinity");
}

fn bench_cpu() -> usize {
    env_num("BENCH_CPU", 0)
}

/// The echo server as a child: (child, port).
pub fn start_echo() -> (Child, u16) {
    let mut child = Command::new(std::env::current_exe().expect("own path"))
        .arg("echo-server")
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the echo server");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("its port");
    (child, line.trim().parse().expect("a port"))
}

/// A blocking WebSocket client with the bridge's token (the echo server ignores it).
pub fn connect(port: u16) -> Ws {
    let mut req = format!("ws://127.0.0.1:{port}/acp").into_client_request().expect("request");
    req.headers_mut().insert("authorization", format!("Bearer {TEST_TOKEN}").parse().expect("header"));
    let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    tungstenite::client::client(req, stream).expect("websocket handshake").0
}

/// The next text message.
pub fn read_text(ws: &mut Ws) -> String {
    loop {
        match ws.read().expect("read") {
            Message::Text(t) => return t.to_string(),
            Message::Close(f) => panic!("closed: {f:?}"),
            _ => {}
        }
    }
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":1}}"#;

/// A `_demo/echo` request of exactly `size` bytes.
fn echo_request(size: usize) -> String {
    let head = r#"{"jsonrpc":"2.0","id":"000000001","method":"_demo/echo","params":{"p":""#;
    let tail = r#""}}"#;
    format!("{head}{}{tail}", "x".repeat(size.saturating_sub(head.len() + tail.len())))
}

/// (p50, p99) µs of `n` round trips of `msg` after 100 unmeasured ones, and the server's CPU
/// µs per round trip over the measured ones.
fn percentiles(ws: &mut Ws, msg: &str, n: usize, server: u32) -> (f64, f64, f64) {
    for _ in 0..100 {
        ws.send(Message::text(msg)).expect("send");
        read_text(ws);
    }
    let cpu = cpu_ns(server);
    let mut times: Vec<Duration> = (0..n)
        .map(|_| {
            let t = Instant::now();
            ws.send(Message::text(msg)).expect("send");
            read_text(ws);
            t.elapsed()
        })
        .collect();
    let cpu = (cpu_ns(server) - cpu) as f64 / 1e3 / n as f64;
    times.sort();
    let at = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)].as_secs_f64() * 1e6;
    (at(0.50), at(0.99), cpu)
}

/// Run time of all of `pid`'s threads so far, in ns (`/proc/<pid>/task/*/schedstat`).
pub fn cpu_ns(pid: u32) -> u64 {
    schedstat(pid, 0)
}

/// The time `pid`'s threads spent runnable but waiting for a CPU (the run queue), ns: what
/// a latency tail costs when the machine, not the bridge's own path, is the bottleneck.
pub fn wait_ns(pid: u32) -> u64 {
    schedstat(pid, 1)
}

/// Field `field` of /proc/PID/task/*/schedstat (0: on-CPU ns, 1: run-queue wait ns), summed
/// over the threads.
fn schedstat(pid: u32, field: usize) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return 0 };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().nth(field).and_then(|v| v.parse::<u64>().ok()))
        .sum()
}

/// One pin mode's processes and connections.
struct Set {
    _homes: Vec<Home>,
    /// Each bridge of [`bridges`] with its connection.
    bridges: Vec<(Bridge, Ws)>,
    echo: Child,
    echo_ws: Ws,
}

impl Set {
    fn start() -> Set {
        let mut homes = Vec::new();
        let mut bridges = Vec::new();
        for (_, exe) in crate::bridges() {
            let home = Home::new();
            let bridge = start_bridge(&home, &exe, &demo_agent(0));
            let mut ws = connect(bridge.port);
            ws.send(Message::text(INIT)).expect("initialize");
            read_text(&mut ws);
            homes.push(home);
            bridges.push((bridge, ws));
        }
        let (echo, echo_port) = start_echo();
        Set { _homes: homes, echo_ws: connect(echo_port), bridges, echo }
    }
}

impl Drop for Set {
    fn drop(&mut self) {
        let _ = self.echo.kill();
        let _ = self.echo.wait();
    }
}

/// (a): see the module docs.
fn round_trips() {
    let rounds = env_num("BENCH_ROUNDS", 5);
    let modes = [("pinned", Some(bench_cpu())), ("unpinned", None)];
    let mut sets: Vec<Set> = modes
        .iter()
        .map(|(_, cpu)| {
            pin(*cpu);
            Set::start()
        })
        .collect();
    let echo64 = echo_request(64);
    let labels = crate::bridges();
    // [mode][target] → per-round (p50, p99, cpu); target 0 is the echo server, then per
    // bridge its `initialize` and its `_demo/echo`.
    let targets = 1 + 2 * labels.len();
    let mut got = vec![vec![Vec::new(); targets]; modes.len()];
    for round in 1..=rounds {
        for (m, ((name, cpu), set)) in modes.iter().zip(&mut sets).enumerate() {
            eprintln!("bench-bridge: round trips, round {round}/{rounds}, {name} …");
            pin(*cpu);
            let echo_pid = set.echo.id();
            got[m][0].push(percentiles(&mut set.echo_ws, &echo64, 1000, echo_pid));
            for (i, (bridge, ws)) in set.bridges.iter_mut().enumerate() {
                let pid = bridge.editor.pid();
                got[m][1 + 2 * i].push(percentiles(ws, INIT, 1000, pid));
                got[m][2 + 2 * i].push(percentiles(ws, &echo64, 1000, pid));
            }
        }
    }
    pin(None);
    let med = |v: &[(f64, f64, f64)], f: fn(&(f64, f64, f64)) -> f64| median(v.iter().map(f).collect());
    println!("\n(a) round trip on one connection, 64 B-ish messages, medians of {rounds} rounds\n");
    println!(
        "| | pinned p50 / p99 (µs) | unpinned p50 / p99 (µs) | server CPU per round trip, pinned / unpinned (µs) |"
    );
    println!("| --- | ---: | ---: | ---: |");
    let mut names = vec!["bare tokio-tungstenite echo server (reference)".to_owned()];
    for (label, _) in &labels {
        names.push(format!("{label}: cached `initialize`"));
        names.push(format!("{label}: `_demo/echo` via the demo agent"));
    }
    for (t, name) in names.iter().enumerate() {
        let cell = |m: usize| format!("{:.0} / {:.0}", med(&got[m][t], |x| x.0), med(&got[m][t], |x| x.1));
        let cpu = format!("{:.1} / {:.1}", med(&got[0][t], |x| x.2), med(&got[1][t], |x| x.2));
        println!("| {name} | {} | {} | {cpu} |", cell(0), cell(1));
    }
    let ratio = |m: usize, t: usize| med(&got[m][t], |x| x.0) / med(&got[m][0], |x| x.0);
    for (i, (label, _)) in labels.iter().enumerate() {
        println!(
            "| {label} `initialize` p50 ÷ echo p50 (target ≤ 2, pinned) | {:.2} | {:.2} | |",
            ratio(0, 1 + 2 * i),
            ratio(1, 1 + 2 * i)
        );
    }
}

/// (c): see the module docs.
fn idle() {
    let n = idle_count();
    let labels = crate::bridges();
    let homes: Vec<Home> = labels.iter().map(|_| Home::new()).collect();
    let bridges: Vec<Bridge> =
        labels.iter().zip(&homes).map(|((_, exe), home)| start_bridge(home, exe, &demo_agent(0))).collect();
    let (mut echo, echo_port) = start_echo();
    let mut targets: Vec<(String, u16, u32)> =
        labels.iter().zip(&bridges).map(|((l, _), b)| (l.clone(), b.port, b.editor.pid())).collect();
    targets.push(("bare echo server (reference)".into(), echo_port, echo.id()));
    let mut kib = Vec::new();
    for (name, port, pid) in &targets {
        let (port, pid) = (*port, *pid);
        eprintln!("bench-bridge: {n} idle clients on the {name} …");
        // One client first, so the agent has started and the caches are warm.
        let mut first = connect(port);
        first.send(Message::text(INIT)).expect("initialize");
        read_text(&mut first);
        std::thread::sleep(Duration::from_millis(500));
        let before = zcode_tests::rss_kib(pid);
        let held: Vec<Ws> = (0..n)
            .map(|_| {
                let mut ws = connect(port);
                ws.send(Message::text(INIT)).expect("initialize");
                read_text(&mut ws);
                ws
            })
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let holder = {
            let stop = stop.clone();
            std::thread::spawn(move || hold(held, &stop))
        };
        std::thread::sleep(Duration::from_secs(1));
        let after = zcode_tests::rss_kib(pid);
        kib.push(after.saturating_sub(before) as f64 / n as f64);
        stop.store(true, Ordering::Relaxed);
        drop(holder.join());
    }
    let _ = echo.kill();
    let _ = echo.wait();
    println!("\n(c) memory per idle remote client ({n} held, each did `initialize`)\n");
    let names: Vec<&str> = targets.iter().map(|t| t.0.as_str()).collect();
    println!("| | {} |", names.join(" | "));
    println!("| --- |{}", " ---: |".repeat(names.len()));
    let cells: Vec<String> = kib.iter().map(|k| format!("{k:.2}")).collect();
    println!("| RSS per idle client (KiB; target ≤ 2) | {} |", cells.join(" | "));
}

/// Keeps idle connections open, answering pings, until `stop`.
fn hold(mut held: Vec<Ws>, stop: &AtomicBool) {
    for ws in &mut held {
        let _ = ws.get_mut().set_nonblocking(true);
    }
    while !stop.load(Ordering::Relaxed) {
        for ws in &mut held {
            loop {
                match ws.read() {
                    Ok(_) => {}
                    Err(tungstenite::Error::Io(e)) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(_) => break,
                }
            }
            let _ = ws.flush();
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The median (0 for none).
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
