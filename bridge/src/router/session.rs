//! One session as the router holds it: who is attached, its prompt queue, its title and the
//! agent requests waiting on it. Its history lives in the journal, not here.

use super::client::ClientId;
use crate::journal::ReadMode;
use serde_json::value::RawValue;
use std::collections::{BTreeSet, VecDeque};
use std::path::PathBuf;
use zcode_shared::jsonrpc::{Id, RawMessage};

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
        }
    }

    /// The roots local fs/terminal service is confined to.
    pub fn roots(&self) -> Vec<PathBuf> {
        std::iter::once(self.cwd.clone()).chain(self.dirs.iter().cloned()).collect()
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
