//! One session as the router holds it: who is attached, its prompt queue, its title and the
//! agent requests waiting on it, its last messages numbered (`backlog`). Its history lives in
//! the journal, not here.

use super::client::ClientId;
use crate::journal::ReadMode;
use bytes::Bytes;
use serde_json::Value;
use serde_json::value::RawValue;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::path::PathBuf;
use zcode_shared::jsonrpc::{self, Id, RawMessage};

/// Unknown-session updates held until the session appears (bounded).
const ORPHAN_LIMIT: usize = 1000;

/// Prompts one session may have waiting behind its running turn.
pub const QUEUE_PROMPTS: usize = 32;
/// Bytes of prompts (their params) one session may have waiting. The first waiting prompt is
/// taken whatever its size (a message's own limit bounds it).
pub const QUEUE_BYTES: usize = 16 * 1024 * 1024;

/// The sessions this bridge holds, the updates that arrived before their session did, and how
/// this bridge places them (its origin, a pinned directory).
pub struct Sessions {
    map: HashMap<String, Session>,
    orphans: HashMap<String, Vec<Bytes>>,
    orphan_count: usize,
    echo_seq: u64,
    /// `editor` or `serve`, recorded in the tasks index.
    pub origin: String,
    /// Session roots pinned to this directory (serve bridges).
    pin_cwd: Option<PathBuf>,
}

impl std::ops::Deref for Sessions {
    type Target = HashMap<String, Session>;
    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl std::ops::DerefMut for Sessions {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.map
    }
}

impl Sessions {
    /// No sessions yet.
    pub fn new(origin: String, pin_cwd: Option<PathBuf>) -> Sessions {
        Sessions {
            map: HashMap::new(),
            orphans: HashMap::new(),
            orphan_count: 0,
            echo_seq: 0,
            origin,
            pin_cwd,
        }
    }

    /// Holds an update of a session not known yet (a bounded number: past it, dropped).
    pub fn hold_orphan(&mut self, sid: String, line: Bytes) {
        if self.orphan_count < ORPHAN_LIMIT {
            self.orphan_count += 1;
            self.orphans.entry(sid).or_default().push(line);
        }
    }

    /// The updates held for `sid` before it appeared.
    pub fn take_orphans(&mut self, sid: &str) -> Vec<Bytes> {
        let lines = self.orphans.remove(sid).unwrap_or_default();
        self.orphan_count -= lines.len();
        lines
    }

    /// A fresh `messageId` for a prompt's echo.
    pub fn echo_id(&mut self) -> String {
        self.echo_seq += 1;
        format!("uprompt_{}_{}", zcode_shared::time::now_ms(), self.echo_seq)
    }

    /// A serve bridge's sessions live in its project, whatever cwd the client sends.
    pub fn pinned(&self, msg: RawMessage) -> RawMessage {
        let Some(pin) = &self.pin_cwd else { return msg };
        let mut params = msg.params_value();
        if !params.is_object() {
            return msg;
        }
        params["cwd"] = Value::String(pin.display().to_string());
        RawMessage { params: Some(jsonrpc::raw(&params)), ..msg }
    }

    /// The clients attached to `sid` but `except`.
    pub fn attached(&self, sid: &str, except: Option<ClientId>) -> Vec<ClientId> {
        self.map
            .get(sid)
            .map_or_else(Vec::new, |s| s.attached.iter().copied().filter(|c| Some(*c) != except).collect())
    }

    /// Whether a session is open here that discovery lists.
    pub fn any_listed(&self) -> bool {
        self.map.values().any(|s| !s.closed && s.listed())
    }

    /// Whether a turn runs or waits anywhere.
    pub fn any_busy(&self) -> bool {
        self.map.values().any(Session::busy)
    }

    /// The root directory of a session live here.
    pub fn root(&self, sid: &str) -> Option<PathBuf> {
        self.map.get(sid).filter(|s| s.upstream != Upstream::Loading).map(|s| s.cwd.clone())
    }

    /// What registration advertises, as one number: a session listed or unlisted, a turn
    /// starting or ending, a new title, how many of its requests wait. Order-free (the map's order may change), and cheap
    /// enough for every event (no allocation); `updatedAt` is left out, or every streamed frame
    /// would count as a change.
    pub fn status_signature(&self) -> u64 {
        use std::hash::BuildHasher;
        let state = std::hash::BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default();
        self.map.values().filter(|s| s.listed()).fold(1, |acc: u64, s| {
            acc.wrapping_add(state.hash_one((&s.id, s.busy(), s.requests.len(), &s.title)))
        })
    }

    /// `/status`: the listed sessions, newest first.
    pub fn status(&self) -> Vec<super::SessionStatus> {
        let mut rows: Vec<super::SessionStatus> = self
            .map
            .values()
            .filter(|s| s.listed())
            .map(|s| super::SessionStatus {
                session_id: s.id.clone(),
                title: s.title.clone(),
                status: if s.busy() { "running" } else { "idle" },
                updated_at: s.updated_at,
                waiting: !s.requests.is_empty(),
                pending: s.requests.len(),
            })
            .collect();
        rows.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then_with(|| a.session_id.cmp(&b.session_id)));
        rows
    }

    /// An agent-provided title is taken only when the session has none (a session loaded
    /// from an earlier life); the bridge's own title, once set, is never changed by it.
    pub fn note_title(&mut self, sid: &str, msg: &RawMessage) {
        let Some(s) = self.map.get_mut(sid) else { return };
        if s.title.is_some() {
            return;
        }
        let params = msg.params_value();
        let u = &params["update"];
        if u["sessionUpdate"] == "session_info_update" {
            if let Some(t) = u["title"].as_str().filter(|t| !t.trim().is_empty()) {
                s.title = Some(title_of(t));
            }
        }
    }
}

/// A prompt waiting for its turn.
pub struct QueuedPrompt {
    /// Who sent it.
    pub client: ClientId,
    /// Its id in that client's space.
    pub id: Id,
    /// The request as received.
    pub msg: RawMessage,
    /// When it was queued, epoch ms.
    pub queued_at: u64,
}

/// Where the session stands with the upstream agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Upstream {
    /// A client's `session/load` (or `resume`) is in flight: the agent's replay goes to it.
    Loading,
    /// Live in this upstream generation.
    Live(u64),
    /// The bridge is re-loading it into a restarted agent.
    Reattaching,
}

/// One session.
pub struct Session {
    /// The ACP session id.
    pub id: String,
    /// Its working directory (the root of local fs/terminal service).
    pub cwd: PathBuf,
    /// Further directories it may touch.
    pub dirs: Vec<PathBuf>,
    /// Clients attached to it.
    pub attached: BTreeSet<ClientId>,
    /// Title from the first prompt (or a rename).
    pub title: Option<String>,
    /// Last activity, epoch ms.
    pub updated_at: u64,
    /// Turns started in this bridge (the first sets the title).
    pub turns: u64,
    /// A turn is in flight (until the agent answers its prompt, even after a cancel).
    pub running: bool,
    /// When the running turn started and who prompted it (its record at the end).
    pub turn_start: Option<super::turns::TurnStart>,
    /// Prompts waiting, FIFO.
    pub queue: VecDeque<QueuedPrompt>,
    /// Upstream state.
    pub upstream: Upstream,
    /// Requests for this session held while it is loading or reattaching.
    pub deferred: Vec<(ClientId, RawMessage)>,
    /// Loads of this session waiting for a load in flight.
    pub waiting_loads: Vec<(ClientId, Id, ReadMode)>,
    /// The agent's answer to `session/new` / `session/load` (modes, config options), replayed
    /// to clients that attach later, with `sessionId` removed.
    pub attach_result: Option<Box<RawValue>>,
    /// Agent requests (keys) pending on this session.
    pub requests: Vec<u64>,
    /// The client whose `session/load` is in flight upstream (gets the agent's replay).
    pub loader: Option<ClientId>,
    /// Created by `session/new` in this bridge: its first prompt sets the title.
    pub fresh: bool,
    /// Retired from discovery by a close; real use (a prompt, a load with history) revives it.
    pub closed: bool,
    /// Its messages' numbering and the last of them, for resume by number.
    pub backlog: super::backlog::Backlog,
}

impl Session {
    /// A session with nothing attached yet.
    pub fn new(id: String, cwd: PathBuf, dirs: Vec<PathBuf>, upstream: Upstream) -> Session {
        Session {
            id,
            cwd,
            dirs,
            attached: BTreeSet::new(),
            title: None,
            updated_at: zcode_shared::time::now_ms(),
            turns: 0,
            running: false,
            turn_start: None,
            queue: VecDeque::new(),
            upstream,
            deferred: Vec::new(),
            waiting_loads: Vec::new(),
            attach_result: None,
            requests: Vec::new(),
            loader: None,
            fresh: false,
            closed: false,
            backlog: super::backlog::Backlog::new(),
        }
    }

    /// The roots local fs/terminal service is confined to.
    pub fn roots(&self) -> Vec<PathBuf> {
        std::iter::once(self.cwd.clone()).chain(self.dirs.iter().cloned()).collect()
    }

    /// Why `msg` may not join the prompts waiting here, worded for a person (`None`: it may).
    pub fn queue_refusal(&self, msg: &RawMessage) -> Option<String> {
        let size = |m: &RawMessage| m.params.as_deref().map_or(0, |p| p.get().len());
        if self.queue.is_empty() {
            return None;
        }
        let (count, bytes) = (self.queue.len(), self.queue.iter().map(|p| size(&p.msg)).sum::<usize>());
        let why = if count >= QUEUE_PROMPTS {
            format!("{count} prompts are already waiting (at most {QUEUE_PROMPTS})")
        } else if bytes + size(msg) > QUEUE_BYTES {
            format!(
                "the prompts waiting hold {} KiB and this one {} KiB (at most {} KiB together)",
                bytes / 1024,
                size(msg) / 1024,
                QUEUE_BYTES / 1024
            )
        } else {
            return None;
        };
        Some(format!(
            "session {}: the prompt queue is full: {why}; wait for the running turn to end (or cancel it), then send the prompt again",
            self.id
        ))
    }

    /// Whether a turn is running or queued.
    pub fn busy(&self) -> bool {
        self.running || !self.queue.is_empty()
    }

    /// Whether discovery lists it ("currently running", the contract's rule): until it is
    /// closed, a session that ran a turn in this bridge stays listed whoever is attached (a
    /// phone that locked its screen comes back to it), and one someone is on (an open editor
    /// tab, a remote's load) is listed while they are, a brand-new one only from its first
    /// turn.
    pub fn listed(&self) -> bool {
        let ran = self.turns > 0;
        let open = !self.attached.is_empty() || self.busy();
        !self.closed && (ran || open && !self.fresh) && self.upstream != Upstream::Loading
    }
}

/// A session title from prompt text: the first line with something visible, control sequences
/// removed, whitespace flattened, trimmed, at most 80 characters.
pub fn title_of(text: &str) -> String {
    zcode_shared::text::title_of(text)
}

/// The text of a prompt's content blocks (text blocks joined by newlines).
pub fn prompt_text(params: &serde_json::Value) -> String {
    let blocks = params["prompt"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let texts: Vec<&str> =
        blocks.iter().filter(|b| b["type"] == "text").filter_map(|b| b["text"].as_str()).collect();
    texts.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles() {
        assert_eq!(title_of("\n  Fix   the\tbug \nnext"), "Fix the bug");
        assert_eq!(title_of(&"x".repeat(200)).chars().count(), 80);
        assert_eq!(title_of("\x1b]0;evil\x07\n#(x)\x1b[2J ok\x07"), "#(x) ok");
        assert_eq!(title_of(""), "");
    }

    #[test]
    fn listing_keeps_what_ran() {
        let mut s = Session::new("s".into(), "/w".into(), vec![], Upstream::Live(1));
        s.fresh = true;
        s.attached.insert(1);
        assert!(!s.listed(), "a brand-new session is not listed before its first turn");
        s.turns = 1;
        assert!(s.listed());
        s.attached.clear();
        assert!(s.listed(), "detached after a turn: still listed");
        s.closed = true;
        assert!(!s.listed(), "closed: not listed");
        let mut loaded = Session::new("l".into(), "/w".into(), vec![], Upstream::Live(1));
        loaded.attached.insert(1);
        assert!(loaded.listed(), "a loaded session is listed while someone is on it");
        loaded.attached.clear();
        assert!(!loaded.listed(), "loaded, never prompted here, nobody on it: not listed");
    }
}
