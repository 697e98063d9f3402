//! The bridges the hub knows: what each registration said, when it was last heard from, and
//! whether probes found it unreachable. Rebuilt from heartbeats after a hub restart.
//!
//! An instance expires `instance_ttl` after its last heartbeat. A failed probe only marks it
//! unhealthy; it is pruned when failures span `probe_grace` (a busy bridge must not lose its
//! clients over one slow accept), and a heartbeat clears the mark.
//!
//! An instance that left (unregistered, expired or pruned) is remembered for [`DEPARTED_FOR`]:
//! a delete a phone sends after closing a serve bridge's last session (which ends that bridge)
//! is then still answered, by the hub (`routes::instance_relay`).

use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};
pub use zcode_shared::registration::{Registration, SessionRow};

/// How long an instance that left is remembered (at most [`DEPARTED_MAX`] of them).
pub const DEPARTED_FOR: Duration = Duration::from_secs(600);
/// The most departed instances remembered: the oldest is forgotten first.
const DEPARTED_MAX: usize = 256;

struct Instance {
    reg: Registration,
    last_seen: Instant,
    unhealthy_since: Option<Instant>,
}

/// The registered bridges.
pub struct Registry {
    instances: HashMap<String, Instance>,
    /// Instances that left, with when: see [`Registry::departed`].
    departed: HashMap<String, Instant>,
    ttl: Duration,
    grace: Duration,
}

impl Registry {
    /// An empty registry: instances expire `ttl` after their last heartbeat and are pruned
    /// when probe failures span `grace`.
    pub fn new(ttl: Duration, grace: Duration) -> Registry {
        Registry { instances: HashMap::new(), departed: HashMap::new(), ttl, grace }
    }

    fn live(&self, now: Instant) -> impl Iterator<Item = &Instance> {
        self.instances.values().filter(move |i| now.saturating_duration_since(i.last_seen) < self.ttl)
    }

    /// Records a registration or heartbeat: refreshes the instance and clears its unhealthy
    /// mark. `startedAt` stays the first one seen while the same process (pid and port)
    /// re-registers. Returns `true` when the instance is new (or a new process under its id).
    pub fn register(&mut self, mut reg: Registration, now: Instant) -> bool {
        let mut new = true;
        if let Some(old) = self.instances.get(&reg.id) {
            if old.reg.pid == reg.pid && old.reg.port == reg.port {
                reg.started_at = old.reg.started_at;
                new = now.saturating_duration_since(old.last_seen) >= self.ttl;
            }
        }
        self.departed.remove(&reg.id);
        self.instances.insert(reg.id.clone(), Instance { reg, last_seen: now, unhealthy_since: None });
        new
    }

    /// How many requests wait for an answer, machine-wide (a push's app badge): each waiting
    /// session's count.
    pub fn pending_requests(&self, now: Instant) -> usize {
        self.live(now)
            .flat_map(|i| &i.reg.sessions)
            .filter(|s| s.status == Some("waiting"))
            .map(|s| s.pending.max(1) as usize)
            .sum()
    }

    /// How many requests each session of instance `id` last said wait.
    pub fn pending_counts(&self, id: &str) -> HashMap<String, u32> {
        let Some(i) = self.instances.get(id) else { return HashMap::new() };
        i.reg.sessions.iter().map(|s| (s.session_id.clone(), s.pending)).collect()
    }

    /// The session statuses instance `id` last advertised, by session id (empty when it is
    /// unknown): what a heartbeat is diffed against for Web Push.
    pub fn statuses(&self, id: &str) -> HashMap<String, Option<&'static str>> {
        let Some(i) = self.instances.get(id) else { return HashMap::new() };
        i.reg.sessions.iter().map(|s| (s.session_id.clone(), s.status)).collect()
    }

    /// Forgets instance `id`; whether it was known.
    pub fn unregister(&mut self, id: &str, now: Instant) -> bool {
        self.leave(id, now)
    }

    /// Removes instance `id` and remembers that it left; whether it was known.
    fn leave(&mut self, id: &str, now: Instant) -> bool {
        if self.instances.remove(id).is_none() {
            return false;
        }
        self.departed.retain(|_, at| now.saturating_duration_since(*at) < DEPARTED_FOR);
        if self.departed.len() >= DEPARTED_MAX {
            if let Some(oldest) = self.departed.iter().min_by_key(|(_, at)| **at).map(|(id, _)| id.clone()) {
                self.departed.remove(&oldest);
            }
        }
        self.departed.insert(id.to_owned(), now);
        true
    }

    /// Whether instance `id` was registered and left (unregistered, expired or pruned) in the
    /// last [`DEPARTED_FOR`], and has not come back.
    pub fn departed(&self, id: &str, now: Instant) -> bool {
        if self.port_of(id, now).is_some() {
            return false;
        }
        let expired = self.instances.get(id).map(|i| i.last_seen + self.ttl);
        let left = self.departed.get(id).copied().or(expired);
        left.is_some_and(|at| now.saturating_duration_since(at) < DEPARTED_FOR)
    }

    /// Whether a live instance advertises session `sid` (live or running there).
    pub fn advertised(&self, sid: &str, now: Instant) -> bool {
        self.live(now).any(|i| i.reg.sessions.iter().any(|s| s.session_id == sid))
    }

    /// Drops instances whose heartbeats stopped; returns their ids.
    pub fn prune(&mut self, now: Instant) -> Vec<String> {
        let ttl = self.ttl;
        let expired: Vec<String> = self
            .instances
            .values()
            .filter(|i| now.saturating_duration_since(i.last_seen) >= ttl)
            .map(|i| i.reg.id.clone())
            .collect();
        for id in &expired {
            self.leave(id, now);
        }
        expired
    }

    /// How many instances are live.
    pub fn live_count(&self, now: Instant) -> usize {
        self.live(now).count()
    }

    /// The loopback port of live instance `id`.
    pub fn port_of(&self, id: &str, now: Instant) -> Option<u16> {
        self.live(now).find(|i| i.reg.id == id).map(|i| i.reg.port)
    }

    /// The live instance that registered with `nonce` (a spawn of ours).
    pub fn id_by_nonce(&self, nonce: &str, now: Instant) -> Option<String> {
        self.live(now).find(|i| i.reg.nonce.as_deref() == Some(nonce)).map(|i| i.reg.id.clone())
    }

    /// A live headless serve instance of `workspace` running `agent` (or not saying which),
    /// if one runs (the newest).
    pub fn serve_instance_in(&self, workspace: &str, agent: &str, now: Instant) -> Option<String> {
        self.live(now)
            .filter(|i| i.reg.origin == "serve" && i.reg.workspace == workspace)
            .filter(|i| i.reg.agent.as_deref().is_none_or(|a| a == agent))
            .max_by_key(|i| i.reg.started_at)
            .map(|i| i.reg.id.clone())
    }

    /// The agent live instance `id` said it runs.
    pub fn agent_of(&self, id: &str, now: Instant) -> Option<String> {
        self.live(now).find(|i| i.reg.id == id).and_then(|i| i.reg.agent.clone())
    }

    /// How many live instances are serve bridges (remote creates' windows and headless ones).
    pub fn serve_count(&self, now: Instant) -> usize {
        self.live(now).filter(|i| i.reg.origin == "serve").count()
    }

    /// Every session advertised by live instances of `workspace` (live or running there).
    pub fn sessions_in(&self, workspace: &str, now: Instant) -> Vec<String> {
        self.live(now)
            .filter(|i| i.reg.workspace == workspace)
            .flat_map(|i| i.reg.sessions.iter().map(|s| s.session_id.clone()))
            .collect()
    }

    /// Every live instance's registration, oldest bridge first (the inbox and the board).
    pub fn registrations(&self, now: Instant) -> Vec<Registration> {
        let mut all: Vec<Registration> = self.live(now).map(|i| i.reg.clone()).collect();
        all.sort_by(|a, b| a.started_at.cmp(&b.started_at).then_with(|| a.id.cmp(&b.id)));
        all
    }

    /// (id, port) of every live instance, for `?probe=1`.
    pub fn probe_targets(&self, now: Instant) -> Vec<(String, u16)> {
        self.live(now).map(|i| (i.reg.id.clone(), i.reg.port)).collect()
    }

    /// Records a probe of `id` at `port` (ignored when the instance re-registered with another
    /// port meanwhile). Returns `true` when the instance was pruned.
    pub fn probed(&mut self, id: &str, port: u16, reachable: bool, now: Instant) -> bool {
        let Some(inst) = self.instances.get_mut(id).filter(|i| i.reg.port == port) else { return false };
        if reachable {
            inst.unhealthy_since = None;
            return false;
        }
        let since = *inst.unhealthy_since.get_or_insert(now);
        if now.saturating_duration_since(since) >= self.grace {
            self.leave(id, now);
            return true;
        }
        false
    }

    /// The contract's `/api/instances` array: live instances, oldest bridge first, each
    /// session listed once (under the instance with the newest `updatedAt`, ties to the newest
    /// `startedAt`), and no internal fields.
    pub fn listing(&self, now: Instant) -> Value {
        let mut live: Vec<&Registration> = self.live(now).map(|i| &i.reg).collect();
        live.sort_by(|a, b| a.started_at.cmp(&b.started_at).then_with(|| a.id.cmp(&b.id)));
        // Winner per session id: (updatedAt, startedAt) highest; an exact tie keeps the first.
        let mut winner: HashMap<&str, (u64, u64, usize)> = HashMap::new();
        for (idx, reg) in live.iter().enumerate() {
            for s in &reg.sessions {
                let cand = (s.updated_at, reg.started_at);
                let better = winner.get(s.session_id.as_str()).is_none_or(|&(u, st, _)| cand > (u, st));
                if better {
                    winner.insert(&s.session_id, (cand.0, cand.1, idx));
                }
            }
        }
        let rows = live.iter().enumerate().map(|(idx, reg)| {
            let mut seen = HashSet::new();
            let sessions: Vec<Value> = reg
                .sessions
                .iter()
                .filter(|s| {
                    let w = winner.get(s.session_id.as_str());
                    w.is_some_and(|&(u, _, i)| i == idx && u == s.updated_at) && seen.insert(&s.session_id)
                })
                .map(listed_row)
                .collect();
            let mut row = json!({
                "id": reg.id,
                "port": reg.port,
                "pid": reg.pid,
                "startedAt": reg.started_at,
                "workspace": reg.workspace,
                "origin": reg.origin,
                "sessions": sessions,
            });
            // Beyond the contract's fields, only when set: `up` for the bridge `zcode-acp up` runs.
            if let Some(l) = reg.launcher {
                row["launcher"] = l.into();
            }
            // Why its agent is down, while it is (clients show it on the instance).
            if let Some(e) = &reg.agent_error {
                row["agentError"] = e.as_str().into();
            }
            // Why its history is not being saved, while it is not.
            if let Some(e) = &reg.journal_error {
                row["journalError"] = e.as_str().into();
            }
            // And the bridge's version (the web client's About sheet).
            if let Some(v) = &reg.version {
                row["version"] = v.as_str().into();
            }
            // And the agent it runs (its config name, else its command line; `zcode-acp status`).
            if let Some(a) = &reg.agent {
                row["agent"] = a.as_str().into();
            }
            row
        });
        Value::Array(rows.collect())
    }
}

/// A session as the listing shows it: the contract's statuses are `running | idle`, and a
/// session waiting for the user is mid-turn, so `waiting` is listed as `running`.
fn listed_row(s: &SessionRow) -> Value {
    let mut v = s.to_json();
    if s.status == Some("waiting") {
        v["status"] = "running".into();
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(id: &str, started: u64, sessions: &[(&str, u64)]) -> Registration {
        let sessions: Vec<Value> =
            sessions.iter().map(|(s, u)| json!({"sessionId": s, "updatedAt": u, "status": "idle"})).collect();
        Registration::parse(
            &json!({"id": id, "port": 9000, "pid": 1, "startedAt": started, "sessions": sessions}),
        )
        .unwrap()
    }

    fn ids(listing: &Value, instance: usize) -> Vec<String> {
        listing[instance]["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["sessionId"].as_str().unwrap().to_owned())
            .collect()
    }

    #[test]
    fn started_at_is_kept_for_the_same_process_only() {
        let mut r = Registry::new(Duration::from_secs(30), Duration::from_secs(8));
        let now = Instant::now();
        r.register(reg("1", 100, &[]), now);
        r.register(reg("1", 999, &[]), now);
        assert_eq!(r.listing(now)[0]["startedAt"], 100);
        let mut other = reg("1", 999, &[]);
        other.port = 9001;
        r.register(other, now);
        assert_eq!(r.listing(now)[0]["startedAt"], 999, "a new process under a reused pid");
    }

    #[test]
    fn dedupe_prefers_newest_update_then_newest_bridge_and_sorts_oldest_first() {
        let mut r = Registry::new(Duration::from_secs(30), Duration::from_secs(8));
        let now = Instant::now();
        r.register(reg("c", 300, &[("s1", 10), ("s2", 50)]), now);
        r.register(reg("a", 100, &[("s1", 20), ("s2", 50), ("s3", 5)]), now);
        r.register(reg("b", 200, &[("s1", 20), ("s2", 40), ("s3", 5), ("s3", 5)]), now);
        let l = r.listing(now);
        let order: Vec<&str> = l.as_array().unwrap().iter().map(|i| i["id"].as_str().unwrap()).collect();
        assert_eq!(order, ["a", "b", "c"]);
        // s1: a and b tie at 20, b started later. s2: a and c tie at 50, c started later.
        // s3: a and b tie, b started later; b's duplicate copy is listed once.
        assert_eq!(ids(&l, 0), Vec::<String>::new());
        assert_eq!(ids(&l, 1), ["s1", "s3"]);
        assert_eq!(ids(&l, 2), ["s2"]);
        let keys: Vec<&String> = l[0].as_object().unwrap().keys().collect();
        assert_eq!(keys.len(), 7, "no internal fields: {keys:?}");
    }

    #[test]
    fn ttl_expiry_and_probe_grace() {
        let ttl = Duration::from_secs(30);
        let grace = Duration::from_secs(8);
        let mut r = Registry::new(ttl, grace);
        let t0 = Instant::now();
        r.register(reg("1", 1, &[]), t0);
        assert_eq!(r.live_count(t0 + ttl - Duration::from_millis(1)), 1);
        assert_eq!(r.live_count(t0 + ttl), 0, "expired instances are not listed before the sweep");
        assert_eq!(r.prune(t0 + ttl), ["1"]);

        r.register(reg("1", 1, &[]), t0);
        assert!(!r.probed("1", 9000, false, t0), "one failure only marks it");
        assert!(!r.probed("1", 9000, false, t0 + grace / 2));
        r.register(reg("1", 1, &[]), t0 + grace / 2);
        assert!(!r.probed("1", 9000, false, t0 + grace), "the heartbeat cleared the mark");
        assert!(!r.probed("1", 9001, false, t0 + grace * 3), "a probe of an old port is ignored");
        assert!(r.probed("1", 9000, false, t0 + grace * 2), "failures spanning the grace prune it");
        assert_eq!(r.live_count(t0 + grace * 2), 0);
    }

    #[test]
    fn an_instance_that_left_is_remembered_for_a_while_and_forgotten_when_it_comes_back() {
        let mut r = Registry::new(Duration::from_secs(30), Duration::from_secs(8));
        let t0 = Instant::now();
        assert!(!r.departed("1", t0), "never seen");
        r.register(reg("1", 1, &[("s1", 1)]), t0);
        assert!(!r.departed("1", t0), "live");
        assert!(r.advertised("s1", t0) && !r.advertised("s2", t0));
        assert!(r.unregister("1", t0));
        assert!(r.departed("1", t0) && r.departed("1", t0 + DEPARTED_FOR - Duration::from_millis(1)));
        assert!(!r.advertised("s1", t0), "a bridge that left advertises nothing");
        assert!(!r.departed("1", t0 + DEPARTED_FOR), "forgotten after DEPARTED_FOR");
        r.register(reg("1", 1, &[]), t0);
        assert!(!r.departed("1", t0), "back again");

        // Expired (before the sweep and after it) and pruned by probes count as departed.
        r.register(reg("2", 1, &[]), t0);
        assert!(r.departed("2", t0 + Duration::from_secs(30)), "expired, not yet swept");
        r.prune(t0 + Duration::from_secs(30));
        assert!(r.departed("2", t0 + Duration::from_secs(31)));
        r.register(reg("3", 1, &[]), t0);
        r.probed("3", 9000, false, t0);
        assert!(r.probed("3", 9000, false, t0 + Duration::from_secs(8)));
        assert!(r.departed("3", t0 + Duration::from_secs(8)));

        // The memory is bounded: the oldest departure is forgotten first.
        for n in 0..DEPARTED_MAX + 10 {
            let id = format!("x{n}");
            r.register(reg(&id, 1, &[]), t0);
            r.unregister(&id, t0 + Duration::from_millis(n as u64));
        }
        assert!(r.departed.len() <= DEPARTED_MAX);
        assert!(
            !r.departed("x0", t0 + Duration::from_secs(1))
                && r.departed(&format!("x{}", DEPARTED_MAX + 9), t0 + Duration::from_secs(1))
        );
    }
}
