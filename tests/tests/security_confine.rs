//! The agent's own file access in a headless session (the bridge serves `fs/*` itself) stays
//! beneath the session's directory even while a directory inside it is swapped, again and
//! again, for a symlink to the outside: the same race the files API is tested against.

#![allow(clippy::unwrap_used)] // Setup helpers outside #[test] fns: a failed unwrap is a failed test.

use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use zcode_tests::{Bridge, Home, agent_text, demo_agent, initialize, new_session, prompt};

/// Requests of each kind (reads, writes) the race is given at most.
const REQUESTS: usize = 2000;
/// Reads and writes per prompt: one prompt is one turn of the demo agent.
const PER_PROMPT: usize = 50;
/// How long the race is given at most, whatever the count.
const DEADLINE: Duration = Duration::from_secs(60);

/// A thread that keeps replacing `dir` with a symlink to `outside` and putting it back.
struct Swapper {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<u32>,
}

impl Swapper {
    fn start(dir: PathBuf, outside: PathBuf) -> Swapper {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let real = dir.with_extension("real");
        let thread = std::thread::spawn(move || {
            let mut swaps = 0u32;
            while !flag.load(Ordering::Relaxed) {
                std::fs::rename(&dir, &real).unwrap();
                std::os::unix::fs::symlink(&outside, &dir).unwrap();
                std::fs::remove_file(&dir).unwrap();
                std::fs::rename(&real, &dir).unwrap();
                swaps += 1;
                // A moment in place, so that requests get through too (and the race stays tight).
                std::thread::sleep(Duration::from_micros(100));
            }
            swaps
        });
        Swapper { stop, thread }
    }

    /// Stops swapping (the directory is back in place); returns how many swaps were made.
    fn stop(self) -> u32 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// Files directly in `dir`, for a failure message.
fn listing(dir: &Path) -> Vec<String> {
    let entries = std::fs::read_dir(dir).unwrap();
    entries.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect()
}

#[test]
fn the_agents_reads_and_writes_never_cross_a_directory_swapped_for_an_outside_symlink() {
    let home = Home::new();
    let project = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let (p, o) = (project.path().to_owned(), outside.path().join("d"));
    std::fs::create_dir(p.join("d")).unwrap();
    std::fs::write(p.join("d/f"), "inside\n").unwrap();
    std::fs::create_dir(&o).unwrap();
    std::fs::write(o.join("f"), "OUTSIDE\n").unwrap();

    // A remote client without the fs capability, and no editor: the bridge serves fs/* itself.
    let b = Bridge::start(&home, &demo_agent(0));
    let mut remote = b.remote();
    initialize(&mut remote, json!({}));
    let sid = new_session(&mut remote, &p);
    let words = "read:d/f write:d/w ".repeat(PER_PROMPT);

    let swapper = Swapper::start(p.join("d"), o.clone());
    let deadline = Instant::now() + DEADLINE;
    let (mut sent, mut read, mut written, mut refused) = (0, 0, 0, 0);
    let mut leak = None;
    while sent < REQUESTS && Instant::now() < deadline {
        let (resp, seen) = remote.call("session/prompt", prompt(&sid, &words));
        assert_eq!(resp["result"]["stopReason"], "end_turn", "{resp}");
        sent += PER_PROMPT;
        let said = agent_text(&seen);
        read += said.matches("the first is \"inside\"").count();
        written += said.matches("Wrote d/w").count();
        refused += said.matches("Could not read d/f").count() + said.matches("Could not write d/w").count();
        if said.contains("OUTSIDE") || o.join("w").exists() {
            leak = Some(said.matches("the first is \"OUTSIDE\"").count());
            break;
        }
    }
    let swaps = swapper.stop();
    if let Some(reads) = leak {
        panic!(
            "within {sent} reads and writes, {reads} reads returned the outside file's content and \
             the outside directory now holds {:?} (a write landed there when it has `w`)",
            listing(&o)
        );
    }
    assert_eq!(std::fs::read_to_string(o.join("f")).unwrap(), "OUTSIDE\n");
    assert_eq!(listing(&o), ["f"], "a file was written outside");
    // The race was run: some requests met the directory while it was the outside symlink (and
    // were refused), however fast this machine swaps.
    assert!(
        refused > 0,
        "no request met the swapped directory in {sent} ({swaps} swaps): the race was not run"
    );
    assert!(read > 0 && written > 0, "nothing got through the race ({read} reads, {written} writes)");
    // Once the swapping stops, the same requests work.
    let (_, seen) = remote.call("session/prompt", prompt(&sid, "read:d/f write:d/w"));
    let said = agent_text(&seen);
    assert!(said.contains("the first is \"inside\"") && said.contains("Wrote d/w"), "{said}");
    assert!(std::fs::read_to_string(p.join("d/w")).unwrap().contains("demo agent"));
}
