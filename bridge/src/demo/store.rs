//! The demo agent's own session store: one JSON-lines file per session under
//! `<data dir>/demo-agent/`, so `session/load` replays history after the agent restarts.
//!
//! Line one is `{"meta": {sessionId, cwd, createdAt}}`; later lines are `{"update": …}` (a
//! `session/update` payload to replay) or `{"title": …, "updatedAt": …}`.

use serde_json::{Value, json};
use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};

/// One session as the demo agent knows it.
#[derive(Clone, Debug)]
pub struct StoredSession {
    /// The ACP session id.
    pub id: String,
    /// The working directory it was created with.
    pub cwd: String,
    /// Title from the first prompt, if any.
    pub title: Option<String>,
    /// Last activity, epoch ms.
    pub updated_at: u64,
    /// Every `update` payload, in order, for replay.
    pub history: Vec<Value>,
}

/// The directory of session files.
#[derive(Clone, Debug)]
pub struct Store {
    dir: PathBuf,
}

impl Store {
    /// A store under `data_dir/demo-agent`.
    pub fn new(data_dir: &Path) -> Store {
        Store { dir: data_dir.join("demo-agent") }
    }

    fn file(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.jsonl"))
    }

    /// Writes a new session's first line.
    pub fn create(&self, s: &StoredSession) -> io::Result<()> {
        zcode_shared::paths::Paths::ensure_private_dir(&self.dir)?;
        let meta = json!({"meta": {"sessionId": s.id, "cwd": s.cwd, "createdAt": s.updated_at}});
        self.append(&s.id, &meta)
    }

    /// Appends one record to a session's file.
    pub fn append(&self, id: &str, record: &Value) -> io::Result<()> {
        let mut f = zcode_shared::paths::append_private(&self.file(id))?;
        let mut line = record.to_string();
        line.push('\n');
        f.write_all(line.as_bytes())
    }

    /// Reads a session back; `Ok(None)` if there is no such session. Session ids are our own
    /// (`demo_<hex>`), anything else is never looked up on disk.
    pub fn load(&self, id: &str) -> io::Result<Option<StoredSession>> {
        if !valid_id(id) {
            return Ok(None);
        }
        let f = match std::fs::File::open(self.file(id)) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut s = StoredSession {
            id: id.to_owned(),
            cwd: String::new(),
            title: None,
            updated_at: 0,
            history: vec![],
        };
        for line in io::BufReader::new(f).lines() {
            // A torn last line (a crash mid-write) is skipped, not fatal.
            let Ok(rec) = serde_json::from_str::<Value>(&line?) else { continue };
            if let Some(meta) = rec.get("meta") {
                s.cwd = meta["cwd"].as_str().unwrap_or_default().to_owned();
                s.updated_at = meta["createdAt"].as_u64().unwrap_or(0);
            } else if let Some(u) = rec.get("update") {
                s.history.push(u.clone());
            }
            if let Some(t) = rec.get("title").and_then(Value::as_str) {
                s.title = Some(t.to_owned());
            }
            if let Some(at) = rec.get("updatedAt").and_then(Value::as_u64) {
                s.updated_at = at;
            }
        }
        Ok(Some(s))
    }

    /// Every stored session (history included), in no particular order.
    pub fn all(&self) -> io::Result<Vec<StoredSession>> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(vec![]),
            Err(e) => return Err(e),
        };
        let mut out = vec![];
        for entry in entries {
            let name = entry?.file_name();
            let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".jsonl")) else { continue };
            if let Some(s) = self.load(id)? {
                out.push(s);
            }
        }
        Ok(out)
    }
}

/// A fresh session id: `demo_` and 16 random hex digits.
pub fn new_id() -> String {
    let mut b = [0u8; 8];
    // The id only needs to be unique on this machine; fall back to time if random fails.
    if getrandom::fill(&mut b).is_err() {
        b = zcode_shared::time::now_ms().to_be_bytes();
    }
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("demo_{hex}")
}

fn valid_id(id: &str) -> bool {
    id.strip_prefix("demo_").is_some_and(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_skips_torn_lines() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let id = new_id();
        let s =
            StoredSession { id: id.clone(), cwd: "/w".into(), title: None, updated_at: 5, history: vec![] };
        store.create(&s).unwrap();
        store.append(&id, &json!({"update": {"sessionUpdate": "x"}})).unwrap();
        store.append(&id, &json!({"title": "T", "updatedAt": 9})).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join("demo-agent").join(format!("{id}.jsonl")))
            .unwrap()
            .write_all(b"{\"update\": {\"torn")
            .unwrap();
        let back = store.load(&id).unwrap().unwrap();
        assert_eq!(back.cwd, "/w");
        assert_eq!(back.title.as_deref(), Some("T"));
        assert_eq!(back.updated_at, 9);
        assert_eq!(back.history, vec![json!({"sessionUpdate": "x"})]);
        assert_eq!(store.all().unwrap().len(), 1);
    }

    #[test]
    fn foreign_ids_are_never_looked_up() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        assert!(store.load("../../etc/passwd").unwrap().is_none());
        assert!(store.load("demo_").unwrap().is_none());
    }
}
