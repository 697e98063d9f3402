//! The agent's requests the router holds: those routed to clients (permissions,
//! elicitations, an editor's fs/terminal), keyed by the id clients get them under; those
//! served by the bridge itself ([`LocalService`]) while in flight; and who serves each terminal.

use super::client::ClientId;
use crate::local::LocalService;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use zcode_shared::jsonrpc::{Id, RawMessage};

/// Who serves an agent's terminal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TerminalOwner {
    /// The editor that created it.
    Editor,
    /// The bridge.
    Local,
}

/// An agent→client request the router is routing (permission, elicitation, fs, terminal…).
pub struct AgentRequest {
    /// The agent's id for it.
    pub upstream_id: Id,
    /// Which agent process asked.
    pub generation: u64,
    /// Its session, if it names one.
    pub session: Option<String>,
    /// The request as received.
    pub msg: RawMessage,
    /// Clients holding a copy (sent with id = the request's key).
    pub copies: Vec<ClientId>,
    /// `true`: to every attached client, first answer wins. `false`: to the editor only.
    pub broadcast: bool,
    /// When it arrived, epoch ms.
    pub since: u64,
    /// Its remote form, numbered in its session (`None`: no session of ours, or to the editor only).
    pub numbered: Option<bytes::Bytes>,
}

/// The agent's requests in the router's hands.
pub struct Requests {
    map: HashMap<u64, AgentRequest>,
    next_key: u64,
    terminals: HashMap<String, TerminalOwner>,
    local: Arc<LocalService>,
    /// Agent requests being served locally, by agent id (a cancelled one is removed).
    inflight: HashSet<Id>,
    /// The last answers to requests, for a late HTTP answer's 409.
    pub answers: super::answers::AnswerLog,
}

impl std::ops::Deref for Requests {
    type Target = HashMap<u64, AgentRequest>;
    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl Requests {
    /// None yet.
    pub fn new() -> Requests {
        Requests {
            map: HashMap::new(),
            next_key: 1,
            terminals: HashMap::new(),
            local: LocalService::new(),
            inflight: HashSet::new(),
            answers: super::answers::AnswerLog::default(),
        }
    }

    /// Holds a request of agent process `generation` for clients; returns its key.
    pub fn insert(
        &mut self,
        upstream_id: Id,
        generation: u64,
        session: Option<String>,
        msg: RawMessage,
        broadcast: bool,
    ) -> u64 {
        let key = self.next_key;
        self.next_key += 1;
        let since = zcode_shared::time::now_ms();
        let req = AgentRequest {
            upstream_id,
            generation,
            session,
            msg,
            copies: Vec::new(),
            broadcast,
            since,
            numbered: None,
        };
        self.map.insert(key, req);
        key
    }

    /// One request, to change.
    pub fn get_mut(&mut self, key: &u64) -> Option<&mut AgentRequest> {
        self.map.get_mut(key)
    }

    /// Takes a request out (answered, withdrawn).
    pub fn remove(&mut self, key: &u64) -> Option<AgentRequest> {
        self.map.remove(key)
    }

    /// The key of agent process `generation`'s request `upstream_id`.
    pub fn find(&self, upstream_id: &Id, generation: u64) -> Option<u64> {
        self.map
            .iter()
            .find(|(_, r)| r.upstream_id == *upstream_id && r.generation == generation)
            .map(|(k, _)| *k)
    }

    /// Who serves terminal `tid`, if it is known.
    pub fn terminal(&self, tid: &str) -> Option<TerminalOwner> {
        self.terminals.get(tid).copied()
    }

    /// Terminal `tid` was created by `owner`.
    pub fn set_terminal(&mut self, tid: String, owner: TerminalOwner) {
        self.terminals.insert(tid, owner);
    }

    /// Request `id` goes to the bridge's own service: the service to run it on.
    pub fn serve_locally(&mut self, id: Id) -> Arc<LocalService> {
        self.inflight.insert(id);
        self.local.clone()
    }

    /// Whether local request `id` was still awaited (not cancelled); it no longer is.
    pub fn local_done(&mut self, id: &Id) -> bool {
        self.inflight.remove(id)
    }

    /// The agent is gone: its local requests and terminals go with it.
    pub fn agent_gone(&mut self) {
        self.inflight.clear();
        self.local.kill_all();
        self.terminals.clear();
    }

    /// Shutdown: every local terminal is killed.
    pub fn kill_local(&self) {
        self.local.kill_all();
    }
}
