//! Writers in several processes at once: this test binary re-runs itself as the writers.

use super::raw::Ordered;
use super::safe::{Edit, backups_of, update};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// Set in a child: `<file>|<writer>|<writes>`; the child runs its writes and exits.
const CHILD: &str = "SETTINGS_PROCESS_TEST_WRITER";

const WRITERS: usize = 4;
const WRITES: usize = 25;

/// One increment of `count` and one new member `w<writer>-<i>`, as a read-modify-write.
fn write_once(file: &Path, writer: usize, i: usize) {
    update(file, |cur| {
        let mut o = Ordered::parse(cur.unwrap_or("")).expect("never a torn file");
        let n = o.value("count").and_then(|v| v.as_u64()).unwrap_or(0);
        o.set("count", &Value::from(n + 1));
        o.set(&format!("w{writer}-{i}"), &Value::from(true));
        Ok((Edit::Write(o.render(0)), ()))
    })
    .expect("write");
}

#[test]
fn child_writer() {
    // Only a child started by the test below does anything.
    let Ok(spec) = std::env::var(CHILD) else { return };
    let mut parts = spec.split('|');
    let file = Path::new(parts.next().unwrap()).to_owned();
    let writer: usize = parts.next().unwrap().parse().unwrap();
    let writes: usize = parts.next().unwrap().parse().unwrap();
    for i in 0..writes {
        write_once(&file, writer, i);
    }
}

#[test]
fn concurrent_writers_in_processes_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.json");
    std::fs::write(&file, "{\"keep\": {\"me\":  1.0}}\n").unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut children: Vec<_> = (0..WRITERS)
        .map(|w| {
            Command::new(&exe)
                .args(["--exact", "settings::process_tests::child_writer", "--test-threads=1"])
                .env(CHILD, format!("{}|{w}|{WRITES}", file.display()))
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    // Read while they write: every read is a whole file (rename, never a partial write).
    let mut reads = 0;
    while children.iter_mut().any(|c| c.try_wait().unwrap().is_none()) {
        let text = std::fs::read_to_string(&file).unwrap();
        Ordered::parse(&text).unwrap_or_else(|e| panic!("torn file: {e}: {text}"));
        reads += 1;
    }
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let o = Ordered::parse(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(o.value("count"), Some(Value::from(WRITERS * WRITES)), "a write was lost");
    for w in 0..WRITERS {
        for i in 0..WRITES {
            assert!(o.get(&format!("w{w}-{i}")).is_some(), "w{w}-{i} lost");
        }
    }
    assert_eq!(o.get("keep").unwrap().get(), "{\"me\":  1.0}", "an unknown key was rewritten");
    assert_eq!(backups_of(&file).len(), super::safe::BACKUPS_KEPT);
    assert!(reads > 0);
}
