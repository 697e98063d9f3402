//! Writers in several processes at once: this test binary re-runs itself as the writers.

use super::safe::{Edit, backups_of, update};
use crate::ordered::Ordered;
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
        let mut o = Ordered::parse_file(cur.unwrap_or("")).expect("never a torn file");
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

/// Set in a child: `rotate|<home>|<n>` or `mcp|<home>|<n>`.
const RACER: &str = "SETTINGS_PROCESS_TEST_RACER";

#[test]
fn child_racer() {
    let Ok(spec) = std::env::var(RACER) else { return };
    let mut parts = spec.split('|');
    let (kind, home, n) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap());
    let n: usize = n.parse().unwrap();
    let env = std::collections::HashMap::from([("ZCODE_ACP_HOME".to_owned(), home.to_owned())]);
    let cfg = crate::config::Config::load_from(&env).unwrap();
    let mut last = String::new();
    for i in 0..n {
        if kind == "rotate" {
            last = crate::token::rotate(&cfg).unwrap().0;
        } else {
            let s = super::Settings { paths: cfg.paths.clone(), home: None, agent: None };
            let host = super::Host::new(super::Mount::Hub);
            let r = super::api::handle(&s, &host, "PUT", &format!("mcp/m{i}"), None, br#"{"command": "x"}"#);
            assert_eq!(r.status, 200, "{}", r.body);
        }
    }
    if kind == "rotate" {
        // Its last token, for the parent to find in the file.
        std::fs::write(std::path::Path::new(home).join("last-token"), last).unwrap();
    }
}

#[test]
fn a_token_rotation_racing_settings_writes_loses_neither() {
    const EACH: usize = 40;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.json");
    std::fs::write(&file, "{\"remote\": {\"token\": \"first-token\"}}\n").unwrap();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = ["rotate", "mcp"]
        .iter()
        .map(|kind| {
            Command::new(&exe)
                .args(["--exact", "settings::process_tests::child_racer", "--test-threads=1"])
                .env(RACER, format!("{kind}|{}|{EACH}", dir.path().display()))
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let text = std::fs::read_to_string(&file).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let last = std::fs::read_to_string(dir.path().join("last-token")).unwrap();
    assert_eq!(v["remote"]["token"], last.as_str(), "the last rotation was lost: {text}");
    let servers = v["mcpServers"].as_object().map_or(0, serde_json::Map::len);
    assert_eq!(servers, EACH, "a settings write was lost to a rotation: {text}");
}
