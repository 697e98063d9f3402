//! `scripts/bench-relay`: the hub's WebSocket relay side by side, in one run, with a direct
//! connection to the bridge and with nginx (Debian's package) as a WebSocket reverse proxy in front of the same bridge. Everything runs on 127.0.0.1; the script pins this process and
//! every child (hub, bridge, demo agent, nginx) to one CPU with `taskset`.
//!
//! A round trip is one `_demo/echo` request through the bridge to the demo agent and back (so
//! the relay carries two messages per round trip). Measured per target:
//! - p50/p99 round trip of 64 B and 64 KiB requests on one connection (1000 and 200 per round);
//! - round trips per second with 16 connections busy at once, and the relay's CPU time per
//!   relayed message (all its threads' run time from `/proc/<pid>/task/*/schedstat`, in ns; the
//!   user/system split from `/proc/<pid>/stat`, in clock ticks);
//! - opening connections many at once (issue 32, point 9): a burst of 1000 opens, 200 in
//!   flight, `BENCH_BURSTS` times (default 3) with the targets in turn (how long, how many
//!   failed, the time against the direct target's burst of the same turn, the CPU time per
//!   open of the relay, of the bridge and of this program's clients, and how many times per
//!   open the relay and the bridge were put on a CPU), then 5000 opened 200 at
//!   a time and held: how long that took, the relay's resident memory per idle connection
//!   (each did `initialize` once), and the 64 B round trip while they are held;
//! - one open at a time (connect, handshake, `initialize`; median of 200) on a quiet machine
//!   and with 10 000 more sockets open on it (5000 loopback connections this program holds).
//!
//! All but the last run `BENCH_ROUNDS` times (default 5), the targets taking turns each round
//! (every latency first, then every busy phase, in an order that turns by one each round), and
//! the medians of the rounds are reported: a slow spell of the shared machine then hits every
//! target alike, and so does being measured first, second or third. For 64 B also the median
//! of each round's own difference from the direct target (paired), and 64 B round trips taken
//! with the targets in turn, one round trip each (a slow spell then falls on every target's
//! samples alike, not on one target's block); each round's figures go to stderr, with the CPU
//! time the host took from this (virtual) machine during each target's 64 B block.
//!
//! `BENCH_BASE=<another zcode-acp>` adds that build's bridge (in a home of its own, with its
//! own demo agent) and hub beside ours as two more targets: a change to the hub's or the
//! bridge's open path measured before and after in one run.

use std::io::ErrorKind;
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tungstenite::client::IntoClientRequest;
use tungstenite::{Message, WebSocket};
use zcode_tests::hub::{Hub, listed, wait_instances};
use zcode_tests::{Bridge, Home, TEST_TOKEN, demo_agent};

const IDLE: usize = 5000;
/// The burst of opens, and how many are in flight at once (in the burst and opening [`IDLE`]).
const BURST: usize = 1000;
const IN_FLIGHT: usize = 200;
/// Sockets held open on the machine while one open at a time is timed again.
const OTHER_SOCKETS: usize = 10_000;
const BUSY: usize = 16;
/// How long the busy phase lasts (`BENCH_BUSY_SECS`, default 3).
fn busy_for() -> Duration {
    Duration::from_secs(std::env::var("BENCH_BUSY_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(3))
}

type Ws = WebSocket<TcpStream>;

const DIRECT: &str = "direct to the bridge";
const BASE_DIRECT: &str = "direct (BENCH_BASE)";

struct Target {
    name: &'static str,
    port: u16,
    path: String,
    /// The relay's process (none for the direct connection).
    pid: Option<u32>,
    /// The bridge behind it.
    bridge_pid: u32,
    /// The target its bursts are compared with (the direct one of the same build).
    direct: &'static str,
}

/// A hub and a bridge of one build, in a home of their own.
struct Setup {
    _home: Home,
    hub: Hub,
    bridge: Bridge,
    id: String,
}

impl Setup {
    fn start(exe: &std::path::Path) -> Setup {
        let home = Home::new();
        let hub = Hub::start_exe(&home, exe, &[]);
        let mut cmd = home.command_of(exe, &["bridge", "--"]);
        cmd.args(demo_agent(0)).env("ZCODE_ACP_REMOTE_PORT", "0").env("ZCODE_ACP_REMOTE_TOKEN", TEST_TOKEN);
        cmd.current_dir(home.path());
        let bridge = Bridge::spawn(&home, cmd, std::process::Stdio::inherit());
        let id = bridge.id();
        wait_instances(hub.port, "the bridge", |l| listed(l, &id));
        Setup { _home: home, hub, bridge, id }
    }
}

/// One burst: (seconds, failed opens, CPU µs per open of the relay, of the bridge, of this
/// program).
/// A burst: seconds, opens failed, CPU per open (µs) of the relay, the bridge and these
/// clients, and how many times per open the relay and the bridge were put on a CPU.
type Burst = (f64, usize, Option<f64>, f64, f64, (Option<f64>, f64));

#[derive(Default)]
struct Row {
    /// Per round: (p50, p99) µs of 64 B and of 64 KiB round trips.
    small: Vec<(f64, f64)>,
    large: Vec<(f64, f64)>,
    /// Every 64 B round trip taken in turn with the other targets' (all rounds).
    turns: Vec<Duration>,
    /// Per round: (p50, p99) µs of those.
    turn_rounds: Vec<(f64, f64)>,
    /// CPU time the host took from this machine during the target's 64 B block, ms, per round.
    stolen: Vec<u64>,
    /// Per round: (round trips/s, relay CPU µs per relayed message, user share of it).
    rounds: Vec<(f64, Option<(f64, f64)>)>,
    idle_kib: Option<f64>,
    /// The bridge's memory per idle connection (KiB): where a handed-over client lives.
    idle_bridge_kib: Option<f64>,
    held: Option<(f64, f64)>,
    /// The bursts, one per turn.
    bursts: Vec<Burst>,
    /// Opening the idle connections: (seconds, failed opens).
    opened: Option<(f64, usize)>,
    /// One open at a time, median ms: (quiet, with [`OTHER_SOCKETS`] more open).
    one_open: Option<(f64, f64)>,
}

fn main() {
    let ours = Setup::start(zcode_tests::bin());
    let base = std::env::var_os("BENCH_BASE").filter(|b| !b.is_empty()).map(|b| Setup::start(b.as_ref()));
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    let nginx = (only.is_empty() || "nginx".contains(only.as_str()))
        .then(|| Nginx::start(&ours._home, ours.bridge.port));
    let target = |name, s: &Setup, hub: bool, direct| Target {
        name,
        port: if hub { s.hub.port } else { s.bridge.port },
        path: if hub { format!("/acp?instance={}", s.id) } else { "/acp".into() },
        pid: hub.then(|| s.hub.pid()),
        bridge_pid: s.bridge.editor.pid(),
        direct,
    };
    let mut targets =
        vec![target(DIRECT, &ours, false, DIRECT), target("zcode-acp hub", &ours, true, DIRECT)];
    if let Some(n) = &nginx {
        let bridge_pid = ours.bridge.editor.pid();
        let path = "/acp".into();
        targets.push(Target {
            name: "nginx 1.22 (Debian)",
            port: n.port,
            path,
            pid: Some(n.pid()),
            bridge_pid,
            direct: DIRECT,
        });
    }
    if let Some(b) = &base {
        targets.push(target(BASE_DIRECT, b, false, BASE_DIRECT));
        targets.push(target("hub (BENCH_BASE)", b, true, BASE_DIRECT));
    }
    // BENCH_ONLY=hub (or direct, nginx) measures those targets only, for quick experiments.
    let targets: Vec<Target> =
        targets.into_iter().filter(|t| only.is_empty() || t.name.contains(only.as_str())).collect();
    // BENCH_IDLE=0 skips the idle-connections measurement.
    let idle_too = std::env::var("BENCH_IDLE").map_or(true, |v| v != "0");
    // Every measurement but the idle one runs in rounds, the targets taking turns, and the
    // medians are reported: a slow spell of the shared machine then hits every target alike.
    let rounds = std::env::var("BENCH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let mut rows: Vec<Row> = targets.iter().map(|_| Row::default()).collect();
    let mut conns: Vec<Ws> = targets.iter().map(connect).collect();
    // Each round measures every target's latency first, then every target's busy phase, in
    // an order that turns by one each round: a latency measured just after a busy phase ran
    // while the bridge (and that relay) were still tearing its 16 connections down, and with a
    // fixed order the same target always took that (the target measured second, unpinned,
    // lost 10-40 µs at p99 that way, whichever relay it was).
    let n = targets.len();
    for round in 1..=rounds {
        let order: Vec<usize> = (0..n).map(|i| (i + round - 1) % n).collect();
        for &i in &order {
            eprintln!("bench-relay: round {round}/{rounds}: latency, {} …", targets[i].name);
            let stolen = zcode_tests::steal_ms();
            let small = percentiles(&mut conns[i], 64, 100, 1000);
            let stolen = zcode_tests::steal_ms() - stolen;
            eprintln!(
                "bench-relay: round {round}/{rounds}: 64 B p50 / p99 {:.0} / {:.0} µs, {stolen} ms stolen by the host",
                small.0, small.1
            );
            rows[i].small.push(small);
            rows[i].stolen.push(stolen);
            rows[i].large.push(percentiles(&mut conns[i], 64 * 1024, 20, 200));
        }
        eprintln!("bench-relay: round {round}/{rounds}: latency, every target in turn …");
        let stolen = zcode_tests::steal_ms();
        for ((row, mut turns), t) in rows.iter_mut().zip(in_turn(&mut conns, 64, 100, 2000)).zip(&targets) {
            let (p50, p99) = pcts(&mut turns);
            row.turn_rounds.push((p50, p99));
            eprintln!(
                "bench-relay: round {round}/{rounds}: 64 B in turn, {}: p50 / p99 {p50:.0} / {p99:.0} µs",
                t.name
            );
            row.turns.extend(turns);
        }
        eprintln!(
            "bench-relay: round {round}/{rounds}: in turn, {} ms stolen by the host",
            zcode_tests::steal_ms() - stolen
        );
        for &i in &order {
            eprintln!("bench-relay: round {round}/{rounds}: busy, {} …", targets[i].name);
            rows[i].rounds.push(busy(&targets[i]));
        }
    }
    let bursts = std::env::var("BENCH_BURSTS").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    for turn in 1..=bursts {
        for i in (0..n).map(|i| (i + turn - 1) % n) {
            let t = &targets[i];
            eprintln!(
                "bench-relay: burst {turn}/{bursts}: {BURST} opens, {IN_FLIGHT} in flight: {} …",
                t.name
            );
            let burst = burst(t);
            eprintln!("bench-relay: {:.2} s, {} failed", burst.0, burst.1);
            rows[i].bursts.push(burst);
        }
    }
    for ((t, row), ws) in targets.iter().zip(&mut rows).zip(&mut conns) {
        if let Some(pid) = t.pid.filter(|_| idle_too) {
            eprintln!("bench-relay: {IDLE} idle connections, {IN_FLIGHT} opening at once: {} …", t.name);
            let ((kib, bridge_kib), held, opened) = idle(t, pid, ws);
            (row.idle_kib, row.held, row.opened) = (Some(kib), Some(held), Some(opened));
            row.idle_bridge_kib = Some(bridge_kib);
        }
    }
    // BENCH_ONE=0 skips the opens one at a time.
    if std::env::var("BENCH_ONE").is_ok_and(|v| v == "0") {
        return print_table(&targets, &rows);
    }
    let quiet: Vec<f64> = targets.iter().map(one_open).collect();
    eprintln!("bench-relay: opening {} loopback connections ({OTHER_SOCKETS} sockets) …", OTHER_SOCKETS / 2);
    let others = other_sockets(OTHER_SOCKETS / 2);
    for ((t, row), q) in targets.iter().zip(&mut rows).zip(quiet) {
        row.one_open = Some((q, one_open(t)));
    }
    drop(others);
    print_table(&targets, &rows);
}

fn connect(t: &Target) -> Ws {
    try_connect(t).unwrap_or_else(|e| panic!("{}: {e}", t.name))
}

/// A WebSocket to `t` that answered `initialize`, or why not.
fn try_connect(t: &Target) -> Result<Ws, String> {
    let mut req = format!("ws://127.0.0.1:{}{}", t.port, t.path).into_client_request().expect("request");
    req.headers_mut().insert("authorization", format!("Bearer {TEST_TOKEN}").parse().expect("header"));
    let stream = TcpStream::connect(("127.0.0.1", t.port)).map_err(|e| format!("connect: {e}"))?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let (mut ws, _) = tungstenite::client::client(req, stream).map_err(|e| format!("handshake: {e}"))?;
    let init = r#"{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":1}}"#;
    ws.send(Message::text(init)).map_err(|e| format!("send initialize: {e}"))?;
    loop {
        match ws.read().map_err(|e| format!("read: {e}"))? {
            Message::Text(_) => return Ok(ws),
            Message::Close(f) => return Err(format!("closed: {f:?}")),
            _ => {}
        }
    }
}

/// Opens `n` connections to `t` (each does `initialize`), `in_flight` at a time: those that
/// opened, how many failed, and how long it all took. The first failure of each kind is
/// printed.
fn open_many(t: &Target, n: usize, in_flight: usize) -> (Vec<Ws>, usize, Duration) {
    let next = AtomicUsize::new(0);
    let failed = AtomicUsize::new(0);
    let seen = std::sync::Mutex::new(std::collections::HashSet::new());
    let started = Instant::now();
    let opened = std::thread::scope(|s| {
        let workers: Vec<_> = (0..in_flight)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    while next.fetch_add(1, Ordering::Relaxed) < n {
                        match try_connect(t) {
                            Ok(ws) => mine.push(ws),
                            Err(e) => {
                                failed.fetch_add(1, Ordering::Relaxed);
                                let kind: String = e.chars().take(40).collect();
                                if seen.lock().expect("lock").insert(kind) {
                                    eprintln!("bench-relay: {}: an open failed: {e}", t.name);
                                }
                            }
                        }
                    }
                    mine
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().expect("an opening thread")).collect::<Vec<Ws>>()
    });
    (opened, failed.into_inner(), started.elapsed())
}

/// A burst of [`BURST`] opens to `t`, [`IN_FLIGHT`] in flight, closed again afterwards.
fn burst(t: &Target) -> Burst {
    let relay_before = t.pid.map(cpu_time);
    let (bridge, own) = (cpu_time(t.bridge_pid), own_cpu_us());
    let (opened, failed, took) = open_many(t, BURST, IN_FLIGHT);
    let per_open = |before: &Cpu, pid| (cpu_time(pid).run_ns - before.run_ns) as f64 / 1e3 / BURST as f64;
    let runs = |before: &Cpu, pid| (cpu_time(pid).runs - before.runs) as f64 / BURST as f64;
    let runs = (
        t.pid.zip(relay_before.as_ref()).map(|(pid, before)| runs(before, pid)),
        runs(&bridge, t.bridge_pid),
    );
    let relay = t.pid.zip(relay_before.as_ref()).map(|(pid, before)| per_open(before, pid));
    let cpu = (per_open(&bridge, t.bridge_pid), (own_cpu_us() - own) / BURST as f64);
    close_all(opened);
    (took.as_secs_f64(), failed, relay, cpu.0, cpu.1, runs)
}

/// Closes `conns` and waits (2 s at most each) for the other end's close.
fn close_all(mut conns: Vec<Ws>) {
    for ws in &mut conns {
        let _ = ws.close(None);
    }
    for mut ws in conns {
        let _ = ws.get_mut().set_read_timeout(Some(Duration::from_secs(2)));
        while ws.read().is_ok() {}
    }
}

/// The median of 200 opens of one connection to `t` at a time (connect, handshake,
/// `initialize`, then close), ms.
fn one_open(t: &Target) -> f64 {
    let times: Vec<f64> = (0..200)
        .map(|_| {
            let started = Instant::now();
            let ws = connect(t);
            let took = started.elapsed().as_secs_f64() * 1e3;
            close_all(vec![ws]);
            took
        })
        .collect();
    median(times)
}

/// `n` loopback connections to a listener of this program (2 × `n` sockets), held until
/// dropped.
fn other_sockets(n: usize) -> Vec<TcpStream> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).expect("bind");
    let addr = listener.local_addr().expect("address");
    let mut held = Vec::with_capacity(2 * n);
    for _ in 0..n {
        held.push(TcpStream::connect(addr).expect("connect"));
        held.push(listener.accept().expect("accept").0);
    }
    held
}

fn read_text(ws: &mut Ws) -> usize {
    loop {
        match ws.read().expect("read") {
            Message::Text(t) => return t.len(),
            Message::Close(f) => panic!("closed: {f:?}"),
            _ => {}
        }
    }
}

/// A `_demo/echo` request of exactly `size` bytes.
fn echo_request(size: usize, n: u64) -> String {
    let head = format!(r#"{{"jsonrpc":"2.0","id":"{n:09}","method":"_demo/echo","params":{{"p":""#);
    let tail = r#""}}"#;
    let pad = size.saturating_sub(head.len() + tail.len());
    format!("{head}{}{tail}", "x".repeat(pad))
}

fn round_trip(ws: &mut Ws, msg: &str) -> Duration {
    let t = Instant::now();
    ws.send(Message::text(msg)).expect("send");
    read_text(ws);
    t.elapsed()
}

/// (p50, p99) in µs of `n` round trips of `size` bytes after `warm` unmeasured ones.
fn percentiles(ws: &mut Ws, size: usize, warm: usize, n: usize) -> (f64, f64) {
    let msg = echo_request(size, 1);
    for _ in 0..warm {
        round_trip(ws, &msg);
    }
    let mut times: Vec<Duration> = (0..n).map(|_| round_trip(ws, &msg)).collect();
    times.sort();
    let at = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)].as_secs_f64() * 1e6;
    (at(0.50), at(0.99))
}

/// Each connection's `n` round trips of `size` bytes, after `warm` unmeasured ones, the
/// connections taking turns one round trip at a time (in an order that turns by one each
/// time): the targets' samples then span the same
/// stretch of time, so a slow spell of a shared or virtual machine (another process, the host
/// taking the CPU) falls on every target alike, where in blocks of `n` it falls on whichever
/// target was being measured.
fn in_turn(conns: &mut [Ws], size: usize, warm: usize, n: usize) -> Vec<Vec<Duration>> {
    let msg = echo_request(size, 1);
    let mut times: Vec<Vec<Duration>> = conns.iter().map(|_| Vec::with_capacity(n)).collect();
    let count = conns.len();
    for k in 0..warm + n {
        // The order turns by one each time: every target follows every other equally often
        // (a round trip may leave work behind that the next one pays for).
        for j in 0..count {
            let i = (j + k) % count;
            let took = round_trip(&mut conns[i], &msg);
            if k >= warm {
                times[i].push(took);
            }
        }
    }
    times
}

/// (p50, p99) of `times`, µs.
fn pcts(times: &mut [Duration]) -> (f64, f64) {
    if times.is_empty() {
        return (0.0, 0.0);
    }
    times.sort();
    let at = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)].as_secs_f64() * 1e6;
    (at(0.50), at(0.99))
}

/// 16 connections doing 64 B round trips for [`busy_for`]: (round trips/s, (relay CPU µs per
/// relayed message, the user share of it)).
fn busy(t: &Target) -> (f64, Option<(f64, f64)>) {
    let mut conns: Vec<Ws> = (0..BUSY).map(|_| connect(t)).collect();
    let done = Arc::new(AtomicU64::new(0));
    let cpu_before = t.pid.map(cpu_time);
    let started = Instant::now();
    let busy_for = busy_for();
    std::thread::scope(|s| {
        for ws in &mut conns {
            let done = done.clone();
            s.spawn(move || {
                let msg = echo_request(64, 2);
                while started.elapsed() < busy_for {
                    round_trip(ws, &msg);
                    done.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    let secs = started.elapsed().as_secs_f64();
    let trips = done.load(Ordering::Relaxed) as f64;
    let cpu = t.pid.zip(cpu_before).map(|(pid, before)| {
        let after = cpu_time(pid);
        let per_msg = (after.run_ns - before.run_ns) as f64 / 1e3 / (2.0 * trips);
        let (user, sys) = (after.user - before.user, after.system - before.system);
        (per_msg, if user + sys > 0.0 { user / (user + sys) } else { 0.0 })
    });
    // Closed both ways before the next measurement starts (the peer's close frame read back),
    // so that what tearing them down costs is not counted in the next target's figures.
    for ws in &mut conns {
        let _ = ws.close(None);
    }
    for mut ws in conns {
        let _ = ws.get_mut().set_read_timeout(Some(Duration::from_secs(2)));
        while ws.read().is_ok() {}
    }
    (trips / secs, cpu)
}

/// Opens [`IDLE`] connections, [`IN_FLIGHT`] at a time (each does `initialize`), and holds
/// them: (relay and bridge KiB per idle connection, (p50, p99) µs of 64 B round trips on `ws`
/// while they are held, (seconds the opening took, failed opens)).
fn idle(t: &Target, pid: u32, ws: &mut Ws) -> ((f64, f64), (f64, f64), (f64, usize)) {
    std::thread::sleep(Duration::from_millis(500));
    let before = rss_kib(pid);
    let bridge_before = rss_kib(t.bridge_pid);
    let (held, failed, took) = open_many(t, IDLE, IN_FLIGHT);
    eprintln!("bench-relay: {} opened, {failed} failed, in {took:?}", held.len());
    let count = held.len().max(1);
    let stop = Arc::new(AtomicBool::new(false));
    let holder = {
        let stop = stop.clone();
        std::thread::spawn(move || hold(held, &stop))
    };
    std::thread::sleep(Duration::from_secs(1));
    let after = rss_kib(pid);
    let bridge_after = rss_kib(t.bridge_pid);
    let latency = percentiles(ws, 64, 200, 3000);
    stop.store(true, Ordering::Relaxed);
    drop(holder.join());
    // Let the relay close its legs before the next target.
    std::thread::sleep(Duration::from_secs(2));
    let per = |a: f64, b: f64| (a - b) / count as f64;
    ((per(after, before), per(bridge_after, bridge_before)), latency, (took.as_secs_f64(), failed))
}

/// Keeps idle connections open, answering the relay's pings, until `stop`.
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

/// CPU time a process has used.
struct Cpu {
    /// Run time of all its threads, in ns (exact).
    run_ns: u64,
    /// How many times its threads were put on a CPU (`schedstat`'s third field).
    runs: u64,
    /// User and system time, in clock ticks (10 ms): only for the split.
    user: f64,
    system: f64,
}

/// The CPU time `pid` has used so far (threads that already ended are not counted by
/// `schedstat`; the relays measured here keep theirs).
fn cpu_time(pid: u32) -> Cpu {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or_default().split_whitespace().collect();
    let ticks = |i: usize| fields[i].parse::<f64>().unwrap_or(0.0);
    let (mut run_ns, mut runs) = (0, 0);
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).expect("tasks").flatten() {
        if let Ok(s) = std::fs::read_to_string(task.path().join("schedstat")) {
            let mut f = s.split_whitespace().map(|v| v.parse::<u64>().unwrap_or(0));
            run_ns += f.next().unwrap_or(0);
            runs += f.nth(1).unwrap_or(0);
        }
    }
    Cpu { run_ns, runs, user: ticks(11), system: ticks(12) }
}

/// This program's CPU time so far, µs (its threads that ended included, unlike `schedstat`).
fn own_cpu_us() -> f64 {
    use nix::sys::resource::{UsageWho, getrusage};
    let usage = getrusage(UsageWho::RUSAGE_SELF).expect("getrusage");
    let us = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 * 1e6 + t.tv_usec() as f64;
    us(usage.user_time()) + us(usage.system_time())
}

fn rss_kib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// nginx as a WebSocket reverse proxy to the bridge: one process (no master), a private prefix.
struct Nginx {
    child: std::process::Child,
    port: u16,
}

impl Nginx {
    fn start(home: &Home, bridge: u16) -> Nginx {
        let dir = home.path().join("nginx");
        std::fs::create_dir_all(&dir).expect("nginx dir");
        // nginx takes its port from its configuration: a port bound and released here (a
        // benchmark's race, not a test's).
        let port = std::net::TcpListener::bind(("127.0.0.1", 0))
            .and_then(|l| l.local_addr())
            .expect("a loopback port")
            .port();
        let d = dir.display();
        let conf = format!(
            "worker_processes 1;\ndaemon off;\nmaster_process off;\nworker_rlimit_nofile 19000;\n\
             pid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
             events {{ worker_connections 16000; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
               fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
               server {{\n    listen 127.0.0.1:{port};\n    location / {{\n\
                   proxy_pass http://127.0.0.1:{bridge};\n      proxy_http_version 1.1;\n\
                   proxy_set_header Upgrade $http_upgrade;\n      proxy_set_header Connection \"upgrade\";\n\
                   proxy_read_timeout 3600s;\n      proxy_send_timeout 3600s;\n    }}\n  }}\n}}\n"
        );
        std::fs::write(dir.join("nginx.conf"), conf).expect("nginx.conf");
        let nginx = std::env::var("BENCH_NGINX").unwrap_or_else(|_| "nginx".into());
        let child = std::process::Command::new(nginx)
            .arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .arg("-e")
            .arg(dir.join("error.log"))
            .spawn()
            .expect("start nginx (is it installed? scripts/bench-relay installs it)");
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "nginx did not start: see {d}/error.log");
            std::thread::sleep(Duration::from_millis(20));
        }
        Nginx { child, port }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The medians over the rounds of each round's (p50, p99).
fn medians(rounds: &[(f64, f64)]) -> (f64, f64) {
    (median(rounds.iter().map(|x| x.0).collect()), median(rounds.iter().map(|x| x.1).collect()))
}

/// Each round's (p50, p99) minus `base`'s in the same round, then the medians of those: a slow
/// spell of the machine that lasts a round hits both sides of it.
fn paired(rounds: &[(f64, f64)], base: &[(f64, f64)]) -> (f64, f64) {
    medians(&rounds.iter().zip(base).map(|(x, y)| (x.0 - y.0, x.1 - y.1)).collect::<Vec<_>>())
}

fn print_table(targets: &[Target], rows: &[Row]) {
    let us = |v: f64| format!("{v:.0}");
    let pair = |(a, b): (f64, f64)| format!("{} / {}", us(a), us(b));
    let minus = |(a, b): (f64, f64), (c, d): (f64, f64)| (a - c, b - d);
    let opt = |v: Option<String>| v.unwrap_or_else(|| "—".into());
    let direct = &rows[0]; // the first target (direct unless BENCH_ONLY picks another)
    let line = |label: &str, cells: Vec<String>| println!("| {label} | {} |", cells.join(" | "));
    let names: Vec<String> = targets.iter().map(|t| t.name.to_owned()).collect();
    line("", names);
    line("---", targets.iter().map(|_| "---:".to_owned()).collect());
    let (ds, dl) = (medians(&direct.small), medians(&direct.large));
    line(
        "64 B round trip p50 / p99, medians of the rounds (µs)",
        rows.iter().map(|r| pair(medians(&r.small))).collect(),
    );
    line(
        "added p50 / p99 vs direct, 64 B (µs)",
        rows.iter().map(|r| pair(minus(medians(&r.small), ds))).collect(),
    );
    line(
        "added p50 / p99 vs direct, 64 B, paired: median of each round's difference (µs)",
        rows.iter().map(|r| pair(paired(&r.small, &direct.small))).collect(),
    );
    line(
        "CPU time the host took from this machine during each round's 64 B block (ms; a virtual machine's steal)",
        rows.iter().map(|r| r.stolen.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")).collect(),
    );
    let turns: Vec<(f64, f64)> = rows.iter().map(|r| pcts(&mut r.turns.clone())).collect();
    line(
        "64 B round trip p50 / p99, the targets in turn (one round trip each), every round's together (µs)",
        turns.iter().map(|&t| pair(t)).collect(),
    );
    line(
        "added p50 / p99 vs direct, 64 B, the targets in turn (µs)",
        turns.iter().map(|&t| pair(minus(t, turns[0]))).collect(),
    );
    line(
        "added p50 / p99 vs direct, 64 B, the targets in turn, paired: median of each round's difference (µs)",
        rows.iter().map(|r| pair(paired(&r.turn_rounds, &direct.turn_rounds))).collect(),
    );
    line(
        "64 KiB round trip p50 / p99, medians of the rounds (µs)",
        rows.iter().map(|r| pair(medians(&r.large))).collect(),
    );
    line(
        "added p50 / p99 vs direct, 64 KiB (µs)",
        rows.iter().map(|r| pair(minus(medians(&r.large), dl))).collect(),
    );
    let rate = |r: &Row| median(r.rounds.iter().map(|x| x.0).collect());
    line(
        &format!("{BUSY} connections: round trips/s"),
        rows.iter().map(|r| format!("{:.0}", rate(r))).collect(),
    );
    line(
        &format!("{BUSY} connections: relayed messages/s"),
        rows.iter().map(|r| format!("{:.0}", rate(r) * 2.0)).collect(),
    );
    let cpu = |r: &Row| {
        let per_msg: Vec<f64> = r.rounds.iter().filter_map(|x| x.1.map(|c| c.0)).collect();
        let user: Vec<f64> = r.rounds.iter().filter_map(|x| x.1.map(|c| c.1)).collect();
        (!per_msg.is_empty()).then(|| {
            let all: Vec<String> = per_msg.iter().map(|c| format!("{c:.2}")).collect();
            format!("{:.2} ({}; {:.0} % user)", median(per_msg.clone()), all.join(", "), median(user) * 100.0)
        })
    };
    line(
        "relay CPU per relayed message, median (rounds; user share) (µs)",
        rows.iter().map(|r| opt(cpu(r))).collect(),
    );
    line(
        &format!("relay memory per idle connection, {IDLE} held (KiB)"),
        rows.iter().map(|r| opt(r.idle_kib.map(|k| format!("{k:.1}")))).collect(),
    );
    line(
        &format!("the bridge's memory per idle connection behind it, {IDLE} held (KiB)"),
        rows.iter().map(|r| opt(r.idle_bridge_kib.map(|k| format!("{k:.1}")))).collect(),
    );
    line(
        &format!("64 B round trip p50 / p99 with {IDLE} idle held (µs)"),
        rows.iter().map(|r| opt(r.held.map(pair))).collect(),
    );
    let took = |x: Option<(f64, usize)>| x.map(|(secs, failed)| format!("{secs:.2} s, {failed} failed"));
    line(
        &format!("opening the {IDLE} idle connections, {IN_FLIGHT} at once"),
        rows.iter().map(|r| opt(took(r.opened))).collect(),
    );
    let bursts = |r: &Row| -> Option<String> {
        let secs: Vec<String> = r.bursts.iter().map(|b| format!("{:.2}", b.0)).collect();
        let failed: usize = r.bursts.iter().map(|b| b.1).sum();
        (!secs.is_empty()).then(|| format!("{} ({}), {failed} failed", secs.join(", "), r.bursts.len()))
    };
    line(
        &format!("a burst of {BURST} opens, {IN_FLIGHT} in flight (s, each turn)"),
        rows.iter().map(|r| opt(bursts(r))).collect(),
    );
    let ratio = |(t, r): (&Target, &Row)| -> Option<String> {
        let direct = &rows[targets.iter().position(|d| d.name == t.direct)?].bursts;
        let each: Vec<f64> = r.bursts.iter().zip(direct).map(|(b, d)| b.0 / d.0.max(1e-9)).collect();
        let all: Vec<String> = each.iter().map(|x| format!("{x:.2}")).collect();
        (!each.is_empty()).then(|| format!("{:.2}× ({})", median(each.clone()), all.join(", ")))
    };
    line(
        "the burst against its build's direct burst of the same turn: median (each)",
        targets.iter().zip(rows).map(|x| opt(ratio(x))).collect(),
    );
    let cpu = |r: &Row| -> Option<String> {
        let relay: Vec<f64> = r.bursts.iter().filter_map(|b| b.2).collect();
        let relay = if relay.is_empty() { "—".to_owned() } else { format!("{:.0}", median(relay)) };
        let bridge = median(r.bursts.iter().map(|b| b.3).collect());
        let own = median(r.bursts.iter().map(|b| b.4).collect());
        (!r.bursts.is_empty()).then(|| format!("{relay} / {bridge:.0} / {own:.0}"))
    };
    line(
        "the burst's CPU per open, medians: relay / bridge / these clients (µs)",
        rows.iter().map(|r| opt(cpu(r))).collect(),
    );
    let runs = |r: &Row| -> Option<String> {
        let relay: Vec<f64> = r.bursts.iter().filter_map(|b| b.5.0).collect();
        let relay = if relay.is_empty() { "—".to_owned() } else { format!("{:.1}", median(relay)) };
        let bridge = median(r.bursts.iter().map(|b| b.5.1).collect());
        (!r.bursts.is_empty()).then(|| format!("{relay} / {bridge:.1}"))
    };
    line(
        "the burst's times on a CPU per open (wake-ups), medians: relay / bridge",
        rows.iter().map(|r| opt(runs(r))).collect(),
    );
    line(
        &format!("one open at a time, median (ms): quiet / with {OTHER_SOCKETS} other sockets (ratio)"),
        rows.iter()
            .map(|r| opt(r.one_open.map(|(q, l)| format!("{q:.2} / {l:.2} ({:.2}×)", l / q.max(1e-9)))))
            .collect(),
    );
}
