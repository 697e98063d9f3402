//! `scripts/bench-continuity`, the protocol part: protocol clients follow one session through
//! the hub's relay, each behind its own [`proxy`] that cuts the line, stalls it or answers 502
//! at random while the demo agent streams long turns back to back. Every lane holds two
//! clients behind two proxies that suffer the same events at the same moments: one reloads by
//! number (`afterSeq`/`epoch`), one with today's tail replay of 50. A watcher attached straight
//! to the bridge (no proxy) is the truth.
//!
//! After each event the controller notes the moment the line came back and the watcher's last
//! number then; a client is caught up once it holds that number. At the end every client's
//! transcript (each message's chunks, a tail replay's merged text standing for the chunks it
//! covers) is compared with the watcher's, and a resuming client's numbers must run without a
//! gap or a repeat. Prints a Markdown table; progress on stderr.
//!
//! Knobs: `BENCH_EVENTS` (1000, over all lanes), `BENCH_LANES` (4), `BENCH_SEED`; `BENCH_SKEW=N`
//! makes the resuming clients ask from N past what they hold (a check that the counts see loss).

mod client;
mod proxy;

use client::{Client, State, Style};
use proxy::{Mode, Proxy};
use serde_json::json;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use zcode_tests::hub::{Hub, listed, wait_instances};
use zcode_tests::{Bridge, Home, demo_agent, initialize, new_session, prompt};

fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A small xorshift generator: the run is repeatable from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

/// What the watcher saw: every numbered message's chunk, per message id, in order.
#[derive(Default)]
struct Truth {
    chunks: HashMap<String, Vec<String>>,
    seqs: Vec<u64>,
}

fn main() {
    let events = knob("BENCH_EVENTS", 1000);
    let lanes = knob("BENCH_LANES", 4).max(1);
    let seed = knob(
        "BENCH_SEED",
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
            | 1,
    );
    let home = Home::new();
    let hub = Hub::start(&home, &[]);
    let mut b = Bridge::start_env(&home, &demo_agent(5), &[("ZCODE_ACP_HEARTBEAT_MS", "200")]);
    let bid = b.id();
    wait_instances(hub.port, "the bridge to register", |l| listed(l, &bid));
    initialize(&mut b.editor, json!({}));
    let sid = new_session(&mut b.editor, home.path());
    let cwd = home.path().display().to_string();

    // The truth: a client straight on the bridge.
    let truth = Arc::new(Mutex::new(Truth::default()));
    let latest = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let mut watcher = b.remote();
    initialize(&mut watcher, json!({}));
    let (r, _) = watcher.call(
        "session/load",
        json!({"sessionId": sid, "cwd": cwd, "mcpServers": [], "_meta": {"zcode": {"limit": 0}}}),
    );
    latest.store(r["result"]["replayMeta"]["lastSeq"].as_u64().expect("lastSeq"), Ordering::SeqCst);
    let watching = {
        let (truth, latest, done) = (truth.clone(), latest.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                let Some(m) = watcher.quiet_for(Duration::from_millis(50)) else { continue };
                let Some(seq) = m["params"]["_meta"]["zcode"]["seq"].as_u64() else { continue };
                let mut t = truth.lock().expect("truth");
                let u = &m["params"]["update"];
                if matches!(u["sessionUpdate"].as_str(), Some("agent_message_chunk" | "agent_thought_chunk"))
                {
                    let id = u["messageId"].as_str().unwrap_or("").to_owned();
                    t.chunks
                        .entry(id)
                        .or_default()
                        .push(u["content"]["text"].as_str().unwrap_or("").to_owned());
                }
                t.seqs.push(seq);
                latest.store(seq, Ordering::SeqCst);
            }
        })
    };

    // The lanes' proxies and clients, attached before the first turn.
    let lanes: Vec<Lane> = (0..lanes)
        .map(|i| {
            let pr = Proxy::start(hub.port);
            let pt = Proxy::start(hub.port);
            let resume = Client::start(Style::Resume, pr.port, &bid, &sid, &cwd);
            let tail = Client::start(Style::Tail, pt.port, &bid, &sid, &cwd);
            Lane { proxies: [pr, pt], clients: [resume, tail], rng: Rng(seed.wrapping_add(i * 7919) | 1) }
        })
        .collect();
    for lane in &lanes {
        for c in &lane.clients {
            let deadline = Instant::now() + zcode_tests::WAIT;
            while c.state.lock().expect("state").first.is_none() {
                assert!(Instant::now() < deadline, "a client never attached");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }

    // Long turns back to back from the editor until the events are over.
    let stop_turns = Arc::new(AtomicBool::new(false));
    let turns = {
        let stop = stop_turns.clone();
        let sid = sid.clone();
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) {
                n += 1;
                let (r, _) =
                    b.editor.call("session/prompt", prompt(&sid, &format!("long stream please, turn {n}")));
                assert!(r["result"]["stopReason"].is_string(), "a turn failed: {r}");
            }
            (b, n)
        })
    };

    // The hub's resident memory, sampled every 100 ms.
    let hub_rss = Arc::new(Mutex::new((zcode_tests::rss_kib(hub.pid()), 0u64)));
    let sampling = {
        let (rss, done, pid) = (hub_rss.clone(), done.clone(), hub.pid());
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                let now = zcode_tests::rss_kib(pid);
                let mut r = rss.lock().expect("rss");
                r.1 = r.1.max(now);
                drop(r);
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    eprintln!(
        "bench-continuity: {events} events over {} lanes (seed {seed}), each to a resuming and a tail client",
        lanes.len()
    );
    let per_lane = events.div_ceil(lanes.len() as u64);
    let started = Instant::now();
    let counts = Arc::new(Mutex::new(HashMap::<&'static str, u64>::new()));
    let missed = Arc::new(AtomicU64::new(0));
    let lanes: Vec<Lane> = std::thread::scope(|scope| {
        let handles: Vec<_> = lanes
            .into_iter()
            .enumerate()
            .map(|(i, mut lane)| {
                let (latest, counts, missed) = (&latest, &counts, &missed);
                scope.spawn(move || {
                    for e in 0..per_lane {
                        let kind = lane.event(latest, missed);
                        *counts.lock().expect("counts").entry(kind).or_default() += 1;
                        if i == 0 && e % 25 == 0 {
                            eprintln!(
                                "bench-continuity: lane 0: event {e}/{per_lane} ({:.0} s)",
                                started.elapsed().as_secs_f64()
                            );
                        }
                    }
                    lane
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a lane")).collect()
    });
    let took = started.elapsed();

    // The end: the last turn is stopped, every client is given time to hold the last number.
    stop_turns.store(true, Ordering::SeqCst);
    // The turn running ends on its own (at most ~13 s).
    let (_b, turns_run) = turns.join().expect("the turns");
    let settle = Instant::now() + zcode_tests::WAIT;
    let mut last = latest.load(Ordering::SeqCst);
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let now = latest.load(Ordering::SeqCst);
        let all = lanes.iter().flat_map(|l| &l.clients).all(|c| c.have() >= now);
        if (all && now == last) || Instant::now() > settle {
            break;
        }
        last = now;
    }
    let mut lanes = lanes;
    for lane in &mut lanes {
        for c in &mut lane.clients {
            c.stop();
        }
    }
    done.store(true, Ordering::SeqCst);
    watching.join().expect("the watcher");
    sampling.join().expect("the sampler");
    let (rss_start, rss_peak) = *hub_rss.lock().expect("rss");
    let rss_end = zcode_tests::rss_kib(hub.pid());
    let log = hub.log();
    let said: Vec<&str> = log.lines().filter(|l| l.contains(" WARN ") || l.contains(" ERROR ")).collect();
    for l in said.iter().take(20) {
        eprintln!("bench-continuity: the hub said: {l}");
    }
    let truth = truth.lock().expect("truth");

    let counts = counts.lock().expect("counts");
    let total: u64 = counts.values().sum();
    println!(
        "{total} events in {:.0} s ({} cuts, {} stalls, {} 502s; each lasting 50–1000 ms, 100–500 ms of line between), {} lanes, {turns_run} long turns (600 chunks at 20 ms), seed {seed}; {} events not caught up within 20 s",
        took.as_secs_f64(),
        counts.get("cut").unwrap_or(&0),
        counts.get("stall").unwrap_or(&0),
        counts.get("502").unwrap_or(&0),
        lanes.len(),
        missed.load(Ordering::SeqCst),
    );
    println!(
        "The hub's resident memory: {} MiB at the start, {} MiB at the peak, {} MiB at the end; its log has {} warnings or errors.",
        rss_start / 1024,
        rss_peak / 1024,
        rss_end / 1024,
        said.len()
    );
    println!();
    let mut cols = [Figures::default(), Figures::default()];
    for lane in &lanes {
        for (i, c) in lane.clients.iter().enumerate() {
            cols[i].add(&c.state.lock().expect("state"), &truth);
        }
    }
    print_table(&cols);
}

struct Lane {
    /// The resuming client's, the tail client's.
    proxies: [Proxy; 2],
    clients: [Client; 2],
    rng: Rng,
}

impl Lane {
    /// One event on both lines: some line first, then a cut, stall or 502 for a while; then
    /// the line back and both clients awaited. Returns its kind.
    fn event(&mut self, latest: &AtomicU64, missed: &AtomicU64) -> &'static str {
        std::thread::sleep(Duration::from_millis(self.rng.between(100, 500)));
        let (kind, mode) = match self.rng.between(0, 2) {
            0 => ("cut", Mode::Cut),
            1 => ("stall", Mode::Stall),
            _ => ("502", Mode::Bad502),
        };
        for p in &self.proxies {
            p.set(mode);
        }
        std::thread::sleep(Duration::from_millis(self.rng.between(50, 1000)));
        for p in &self.proxies {
            p.set(Mode::Up);
        }
        let back = Instant::now();
        let want = latest.load(Ordering::SeqCst);
        for c in &self.clients {
            c.expect(want, back, kind);
        }
        let deadline = back + zcode_tests::WAIT;
        while !self.clients.iter().all(Client::caught_up) {
            if Instant::now() > deadline {
                for c in &self.clients {
                    if c.give_up() {
                        missed.fetch_add(1, Ordering::SeqCst);
                    }
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        kind
    }
}

/// One column of the table: a style's figures over every lane.
#[derive(Default)]
struct Figures {
    clients: u64,
    reconnects: u64,
    lost: u64,
    duplicated: u64,
    seq_lost: u64,
    seq_dup: u64,
    mismatched: u64,
    fell_back: HashMap<String, u64>,
    caught: Vec<(&'static str, Duration)>,
    replay_bytes: Vec<usize>,
    bad_gateway: u64,
    silent: u64,
    refused: u64,
}

impl Figures {
    fn add(&mut self, s: &State, truth: &Truth) {
        self.clients += 1;
        self.reconnects += s.reconnects;
        for (k, v) in &s.fell_back {
            *self.fell_back.entry(k.clone()).or_default() += v;
        }
        self.caught.extend(&s.caught);
        self.replay_bytes.extend(&s.replay_bytes);
        (self.bad_gateway, self.silent, self.refused) =
            (self.bad_gateway + s.bad_gateway, self.silent + s.silent, self.refused + s.refused);
        // Chunks: what the transcript shows against what the watcher got, message by message.
        for (id, want) in &truth.chunks {
            let shown = s.shown.get(id);
            let mut have: Vec<&str> = Vec::new();
            if let Some(m) = shown.and_then(|x| x.merged.as_deref()) {
                // A tail replay's merged text stands for the first k chunks it spells.
                let mut text = String::new();
                let k = (0..=want.len()).find(|&k| {
                    if k > 0 {
                        text.push_str(&want[k - 1]);
                    }
                    text == m
                });
                match k {
                    Some(k) => have.extend(want[..k].iter().map(String::as_str)),
                    None => self.mismatched += 1,
                }
            }
            have.extend(shown.map(|x| x.chunks.iter().map(String::as_str)).into_iter().flatten());
            let mut count: HashMap<&str, i64> = HashMap::new();
            for c in want {
                *count.entry(c.as_str()).or_default() += 1;
            }
            for c in have {
                *count.entry(c).or_default() -= 1;
            }
            for v in count.values() {
                if *v > 0 {
                    self.lost += *v as u64;
                } else {
                    self.duplicated += (-*v) as u64;
                }
            }
        }
        // Numbers: every one after the first load's, once (a fallback's gap is counted there).
        let first = s.first.unwrap_or(0);
        let mut seen: HashMap<u64, u64> = HashMap::new();
        for n in &s.seqs {
            *seen.entry(*n).or_default() += 1;
        }
        self.seq_dup += seen.values().map(|v| v - 1).sum::<u64>();
        self.seq_lost += truth.seqs.iter().filter(|n| **n > first && !seen.contains_key(n)).count() as u64;
    }
}

fn pct(v: &mut [Duration], q: f64) -> String {
    if v.is_empty() {
        return "–".into();
    }
    v.sort();
    let d = v[((v.len() as f64 * q) as usize).min(v.len() - 1)];
    format!("{:.0} ms", d.as_secs_f64() * 1e3)
}

fn print_table(cols: &[Figures; 2]) {
    let row = |name: &str, f: &dyn Fn(&Figures) -> String| {
        println!("| {name} | {} | {} |", f(&cols[0]), f(&cols[1]));
    };
    println!("| | resume by number (`afterSeq`/`epoch`) | tail replay of 50 (no number) |");
    println!("| --- | ---: | ---: |");
    row("clients", &|f| f.clients.to_string());
    row("reconnects", &|f| f.reconnects.to_string());
    row("**updates lost** (chunks missing from the transcript)", &|f| format!("**{}**", f.lost));
    row("**updates duplicated** (chunks shown twice)", &|f| format!("**{}**", f.duplicated));
    println!(
        "| numbered messages missed / received twice | {} / {} | (a tail replay is not numbered) / {} |",
        cols[0].seq_lost, cols[0].seq_dup, cols[1].seq_dup
    );
    row("replays that match no prefix of the message", &|f| f.mismatched.to_string());
    row("resumes that fell back (reason: count)", &|f| {
        if f.fell_back.is_empty() {
            "0".into()
        } else {
            let mut v: Vec<String> = f.fell_back.iter().map(|(k, n)| format!("{k}: {n}")).collect();
            v.sort();
            v.join(", ")
        }
    });
    for (label, kind) in [("all", None), ("cut", Some("cut")), ("stall", Some("stall")), ("502", Some("502"))]
    {
        row(&format!("line back → caught up, p50 / p95 / max ({label})"), &|f| {
            let mut v: Vec<Duration> =
                f.caught.iter().filter(|(k, _)| kind.is_none_or(|x| x == *k)).map(|(_, d)| *d).collect();
            let n = v.len();
            format!("{} / {} / {} (n={n})", pct(&mut v, 0.5), pct(&mut v, 0.95), pct(&mut v, 1.0))
        });
    }
    row("bytes replayed per reconnect, median / mean", &|f| {
        let mut v = f.replay_bytes.clone();
        v.sort_unstable();
        let mean = if v.is_empty() { 0 } else { v.iter().sum::<usize>() / v.len() };
        format!("{} / {mean}", v.get(v.len() / 2).copied().unwrap_or(0))
    });
    row("attempts answered 502 / left silent / refused", &|f| {
        format!("{} / {} / {}", f.bad_gateway, f.silent, f.refused)
    });
}
