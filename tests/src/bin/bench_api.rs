//! `scripts/bench-api`: the hub's discovery API while bridges journal. Four bridges over the
//! demo agent (no delay) each run a stream of prompts, so every one of them writes its journal
//! all the time; meanwhile one client asks `GET /api/projects` and another `GET /api/instances`
//! over and over, both at once, each request on a new connection. Prints one Markdown table row
//! with p50/p99 of each (ms) for the binary in `ZCODE_ACP_BIN`, labelled with the first
//! argument; the script runs it once per build and prints the header.

use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use zcode_tests::hub::{AUTH, Hub, http};
use zcode_tests::{Bridge, Home, bin, demo_agent, initialize, new_session, prompt};

const BRIDGES: usize = 4;

/// Requests per route (`BENCH_REQUESTS`, default 400).
fn requests() -> usize {
    std::env::var("BENCH_REQUESTS").ok().and_then(|v| v.parse().ok()).unwrap_or(400)
}

fn main() {
    let label = std::env::args().nth(1).unwrap_or_else(|| bin().display().to_string());
    let home = Home::new();
    let demo = json!({"command": bin(), "args": ["demo-agent", "--delay-ms", "0"]});
    std::fs::write(
        home.path().join("config.json"),
        json!({"agents": {"default": "demo", "demo": demo}}).to_string(),
    )
    .expect("config.json");
    let root = tempfile::tempdir().expect("tempdir");
    let roots = root.path().display().to_string();
    let hub = Hub::start(&home, &[("ZCODE_ACP_PROJECT_ROOTS", &roots), ("ZCODE_ACP_HUB_TERMINAL", "0")]);

    let stop = Arc::new(AtomicBool::new(false));
    let turns = Arc::new(AtomicU64::new(0));
    let mut journaling = Vec::new();
    for i in 0..BRIDGES {
        let dir = root.path().join(format!("project-{i}"));
        std::fs::create_dir_all(&dir).expect("project dir");
        let mut b = Bridge::start_with_stderr(&home, &demo_agent(0), std::process::Stdio::null());
        initialize(&mut b.editor, json!({}));
        let sid = new_session(&mut b.editor, &dir);
        let (stop, turns) = (stop.clone(), turns.clone());
        journaling.push(std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let (r, _) = b.editor.call("session/prompt", prompt(&sid, &format!("turn {n} of a stream")));
                assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
                turns.fetch_add(1, Ordering::Relaxed);
            }
            drop(b);
        }));
    }
    // Every bridge has journaled a few turns before the clock starts.
    while turns.load(Ordering::Relaxed) < 4 * BRIDGES as u64 {
        std::thread::sleep(Duration::from_millis(20));
    }

    let n = requests();
    let timed = |path: &'static str| {
        std::thread::spawn(move || {
            let mut ms = Vec::with_capacity(n);
            for _ in 0..n {
                let t = Instant::now();
                let r = http(hub_port(), "GET", path, &[AUTH], b"");
                ms.push(t.elapsed().as_secs_f64() * 1e3);
                assert_eq!(r.status, 200, "{path}: {}", r.text());
            }
            ms
        })
    };
    PORT.store(hub.port.into(), Ordering::Relaxed);
    let before = turns.load(Ordering::Relaxed);
    let start = Instant::now();
    let (projects, instances) = (timed("/api/projects"), timed("/api/instances"));
    let (mut projects, mut instances) =
        (projects.join().expect("projects"), instances.join().expect("instances"));
    let turns_per_s = (turns.load(Ordering::Relaxed) - before) as f64 / start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for j in journaling {
        let _ = j.join();
    }
    let (p50p, p99p) = percentiles(&mut projects);
    let (p50i, p99i) = percentiles(&mut instances);
    println!("| {label} | {p50p:.2} | {p99p:.2} | {p50i:.2} | {p99i:.2} | {turns_per_s:.0} |");
    drop(hub);
}

static PORT: AtomicU64 = AtomicU64::new(0);

fn hub_port() -> u16 {
    PORT.load(Ordering::Relaxed) as u16
}

fn percentiles(v: &mut [f64]) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() as f64 * q) as usize).min(v.len() - 1)];
    (at(0.50), at(0.99))
}
