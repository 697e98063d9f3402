//! (b) Fan-out: the scripted agent ([`crate::peers::agent`]) streams `BENCH_RATE` (5000)
//! updates/s, `BENCH_UPDATES` (10000) per phase, to the editor on stdio and 1 / 10 / 50
//! (`BENCH_CLIENTS`) remote clients attached to the same session, whose journal already holds
//! `BENCH_JOURNALED` (100 000) messages, each attaching with the tail limit `BENCH_LIMIT` (1:
//! the whole last turn, the previous phase's). Per phase: agent-stdout → client-receive latency (the
//! agent stamps each update with the wall clock just before writing it), every client's
//! updates checked complete and in order, the bridge's CPU per delivered update, the journal's
//! lag ([`journal_lag`]) and the bridge's RSS with the clients attached, and how long the
//! bridge's threads and the bench's client readers waited for a CPU (the run queue) during
//! the phase, and how much CPU time the host took from this machine meanwhile (steal, of a
//! virtual machine): on a 2-CPU machine the p99 follows those, not the bridge's own path.

use crate::{Ws, connect, cpu_ns, env_num, read_text, wait_ns, wall_nanos};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tungstenite::Message;
use zcode_shared::store::{NewMessage, Store};
use zcode_tests::{Home, initialize, new_session, prompt};

/// What one receiver saw in a phase.
#[derive(Default)]
struct Seen {
    /// Latencies, µs.
    lat: Vec<f64>,
    received: u64,
    /// Updates that came out of order (a seq other than the next expected).
    reordered: u64,
}

/// `bench:PHASE:SEQ:NANOS` in `text`: (phase, seq, nanos).
fn stamp(text: &str) -> Option<(u64, u64, u64)> {
    let at = text.find("bench:")?;
    let mut parts = text[at + 6..].split([':', '"']);
    let mut num = || parts.next().and_then(|p| p.parse::<u64>().ok());
    Some((num()?, num()?, num()?))
}

impl Seen {
    /// Takes one message; `true` once the phase's last update arrived.
    fn take(&mut self, text: &str, phase: u64, count: u64) -> bool {
        let Some((p, seq, nanos)) = stamp(text) else { return false };
        if p != phase {
            return false;
        }
        self.lat.push(wall_nanos().saturating_sub(nanos) as f64 / 1e3);
        if seq != self.received {
            self.reordered += 1;
        }
        self.received += 1;
        seq + 1 >= count
    }
}

/// The journal's lag during a phase, sampled every 5 ms until `done`: the age of the newest
/// committed update (the agent streams without pause, so that is how far the journal is
/// behind its stdout), or the time since the prompt while none is committed yet. In ms.
fn journal_lag(
    data: std::path::PathBuf,
    sid: String,
    phase: u64,
    count: u64,
    started: u64,
    done: Arc<AtomicBool>,
) -> f64 {
    let store = Store::open_in(&data).expect("the journal");
    let mut max_lag = 0u64;
    while !done.load(Ordering::Relaxed) {
        let newest = store.messages_before(&sid, i64::MAX, 1).ok().and_then(|v| v.into_iter().next());
        let now = wall_nanos();
        match newest.and_then(|m| stamp(&m.body)).filter(|s| s.0 == phase) {
            Some((_, seq, _)) if seq + 1 >= count => break,
            Some((_, _, nanos)) => max_lag = max_lag.max(now.saturating_sub(nanos)),
            None => max_lag = max_lag.max(now.saturating_sub(started)),
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    max_lag as f64 / 1e6
}

fn agent_cmd() -> Vec<String> {
    vec![std::env::current_exe().expect("own path").display().to_string(), "agent".into()]
}

/// Runs (b) for every bridge of [`crate::bridges`] and prints its table.
pub fn run() {
    let rate = env_num("BENCH_RATE", 5000) as u64;
    let count = env_num("BENCH_UPDATES", 10_000) as u64;
    let journaled = env_num("BENCH_JOURNALED", 100_000);
    println!(
        "\n(b) fan-out: {rate} updates/s, {count} per row, to the editor (stdio) and N remote clients; \
         journal holds {journaled}+ messages\n"
    );
    println!(
        "| bridge | remote clients | editor p50 / p99 (ms) | remote p50 / p99 (ms) | lost / reordered (all receivers) \
         | bridge CPU per delivered update (µs) | journal max lag (ms ≈ updates) | bridge RSS (MiB) \
         | waiting for a CPU: bridge's threads / the bench's client readers (ms) | stolen by the host (ms, all CPUs) |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (label, exe) in crate::bridges() {
        bridge_rows(&label, &exe);
    }
}

/// (b) for one bridge binary: its table rows.
fn bridge_rows(label: &str, exe: &std::path::Path) {
    let rate = env_num("BENCH_RATE", 5000) as u64;
    let count = env_num("BENCH_UPDATES", 10_000) as u64;
    let journaled = env_num("BENCH_JOURNALED", 100_000);
    let clients: Vec<usize> = std::env::var("BENCH_CLIENTS")
        .unwrap_or_else(|_| "1,10,50".into())
        .split(',')
        .filter_map(|c| c.trim().parse().ok())
        .collect();
    // The attaches' tail limit: 1 replays the whole last turn (aligned back to its start).
    let limit = env_num("BENCH_LIMIT", 1);
    let home = Home::new();
    let sid = {
        let mut b = crate::start_bridge(&home, exe, &agent_cmd());
        initialize(&mut b.editor, json!({}));
        let sid = new_session(&mut b.editor, home.path());
        assert!(b.editor.close_then_exited());
        sid
    };
    eprintln!("bench-bridge: fan-out: journaling {journaled} messages …");
    fill(&home, &sid, journaled);
    let mut b = crate::start_bridge(&home, exe, &agent_cmd());
    let bridge_pid = b.editor.pid();
    initialize(&mut b.editor, json!({}));
    let load =
        json!({"sessionId": sid, "cwd": home.path(), "mcpServers": [], "_meta": {"zcode": {"limit": limit}}});
    let (r, _) = b.editor.call("session/load", load.clone());
    assert!(r["result"].is_object(), "the editor could not load the session: {r}");
    let store = Store::open_in(&home.path().join("data")).expect("the journal");
    let durable = |store: &Store| store.counters(&sid).ok().flatten().map_or(0, |c| c.next_seq as u64);

    for (phase, &n) in clients.iter().enumerate() {
        let phase = phase as u64 + 1;
        eprintln!("bench-bridge: fan-out to the editor and {n} remote clients …");
        let mut remotes: Vec<Ws> = (0..n).map(|_| attach(b.port, &load)).collect();
        let base = durable(&store);
        let done = Arc::new(AtomicBool::new(false));
        let started = wall_nanos();
        let sampler = {
            let (done, data, sid) = (done.clone(), home.path().join("data"), sid.clone());
            std::thread::spawn(move || journal_lag(data, sid, phase, count, started, done))
        };
        let cpu = cpu_ns(bridge_pid);
        let waited = wait_ns(bridge_pid);
        let stolen = zcode_tests::steal_ms();
        let readers: Vec<_> = remotes
            .drain(..)
            .map(|mut ws| {
                std::thread::spawn(move || {
                    let waited = thread_wait_ns();
                    let mut seen = Seen::default();
                    let _ = ws.get_mut().set_read_timeout(Some(Duration::from_secs(30)));
                    loop {
                        match ws.read() {
                            Ok(Message::Text(t)) => {
                                if seen.take(t.as_str(), phase, count) {
                                    break;
                                }
                            }
                            Ok(_) => {}
                            Err(_) => break,
                        }
                    }
                    (seen, ws, thread_wait_ns() - waited)
                })
            })
            .collect();
        let id = b.editor.request("session/prompt", prompt(&sid, &format!("stream {phase} {count} {rate}")));
        let mut editor = Seen::default();
        loop {
            let line = b.editor.recv_raw("the streamed updates");
            if !editor.take(&line, phase, count)
                && line.contains("stopReason")
                && line.contains(&format!("\"id\":{id}"))
            {
                break;
            }
        }
        let mut all = Seen::default();
        let mut sockets = Vec::new();
        let mut own_waited = 0;
        for r in readers {
            let (s, ws, w) = r.join().expect("a reader");
            own_waited += w;
            all.lat.extend(s.lat);
            all.received += s.received;
            all.reordered += s.reordered;
            sockets.push(ws);
        }
        let cpu = (cpu_ns(bridge_pid) - cpu) as f64 / 1e3;
        let waited = (wait_ns(bridge_pid) - waited) as f64 / 1e6;
        let stolen = zcode_tests::steal_ms() - stolen;
        let own_waited = own_waited as f64 / 1e6;
        let rss = zcode_tests::rss_kib(bridge_pid) as f64 / 1024.0;
        eprintln!("bench-bridge: {label}, {n} clients: {}", rss_parts(bridge_pid));
        done.store(true, Ordering::Relaxed);
        let lag_ms = sampler.join().expect("the sampler");
        // Every update must end up journaled too.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while durable(&store) - base < count && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let journal_lost = count.saturating_sub(durable(&store) - base);
        let lost = (count - editor.received) + (count * n as u64 - all.received) + journal_lost;
        let delivered = editor.received + all.received;
        let (e50, e99) = pcts(editor.lat);
        let (r50, r99) = pcts(all.lat);
        println!(
            "| {label} | {n} | {:.2} / {:.2} | {:.2} / {:.2} | {lost} / {} | {:.2} | {lag_ms:.0} ≈ {:.0} | {rss:.1} | {waited:.0} / {own_waited:.0} | {stolen} |",
            e50 / 1e3,
            e99 / 1e3,
            r50 / 1e3,
            r99 / 1e3,
            editor.reordered + all.reordered,
            cpu / delivered.max(1) as f64,
            lag_ms * rate as f64 / 1e3,
        );
        for mut ws in sockets {
            let _ = ws.close(None);
            let _ = ws.flush();
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// What the bridge's RSS is made of (/proc/<pid>/status): anonymous, file-backed, the peak, and
/// its thread count (each thread that allocates may get its own glibc arena).
fn rss_parts(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .unwrap_or("?")
            .to_owned()
    };
    format!(
        "RssAnon {} KiB, RssFile {} KiB, VmHWM {} KiB, threads {}",
        field("RssAnon:"),
        field("RssFile:"),
        field("VmHWM:"),
        field("Threads:")
    )
}

/// This thread's run-queue wait so far, ns (/proc/thread-self/schedstat).
fn thread_wait_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// A remote client attached to the session (`initialize`, then `session/load`).
fn attach(port: u16, load: &serde_json::Value) -> Ws {
    let mut ws = connect(port);
    ws.send(Message::text(crate::INIT)).expect("initialize");
    read_text(&mut ws);
    let req = json!({"jsonrpc": "2.0", "id": "load", "method": "session/load", "params": load});
    ws.send(Message::text(req.to_string())).expect("session/load");
    loop {
        let t = read_text(&mut ws);
        if t.contains(r#""id":"load""#) {
            assert!(t.contains(r#""result""#), "a remote client could not load the session: {t}");
            return ws;
        }
    }
}

fn pcts(mut v: Vec<f64>) -> (f64, f64) {
    if v.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() as f64 * q) as usize).min(v.len() - 1)];
    (at(0.50), at(0.99))
}

/// Appends `n` messages (turns of user, agent, tool, agent) straight into the journal.
fn fill(home: &Home, sid: &str, n: usize) {
    let mut store = Store::open_in(&home.path().join("data")).expect("journal");
    let text = "lorem ipsum dolor sit amet ".repeat(6);
    store
        .write(|w| {
            for i in 0..n {
                let (kind, body) = match i % 4 {
                    0 => ("user", json!({"sessionUpdate": "user_message_chunk", "messageId": format!("u{i}"), "content": {"type": "text", "text": format!("question {i}")}})),
                    2 => ("tool", json!({"sessionUpdate": "tool_call", "toolCallId": format!("t{i}"), "title": "Read file", "status": "completed"})),
                    _ => ("agent", json!({"sessionUpdate": "agent_message_chunk", "messageId": format!("a{i}"), "content": {"type": "text", "text": text}})),
                };
                w.append(sid, &NewMessage { msg_id: format!("m{i}"), kind: kind.into(), body: body.to_string() }, 1)?;
            }
            Ok(())
        })
        .expect("fill the journal");
}
