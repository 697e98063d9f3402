//! The bridge's side of discovery: registration with the machine's hub.
//!
//! At start and every heartbeat the bridge POSTs `/api/register` to the hub on 127.0.0.1
//! (the payload is `zcode_shared::registration::Registration`: token, id = pid, port, pid,
//! startedAt, workspace, origin, sessions, nonce?, version, agentError? while its agent is
//! down; 3 s timeout), and
//! `/api/unregister` on the way out. The hub keeps nothing across a
//! restart, so the heartbeat IS the registration. The hub's port is `remote.hubPort`, or, when
//! that is 0, whatever the running hub wrote to `run/hub.port`.
//!
//! - Registration fails at the network level (nothing listens, no port file): the bridge
//!   starts the hub (`zcode-acp hub --background`: detached, own session, its log under
//!   `logs/`), at most once per `hub_spawn_throttle`, then retries every 200 ms for a while so
//!   it is listed as soon as the hub is up. Several bridges racing is fine: one hub wins the
//!   home's lock, the others step aside.
//! - The hub answers 401 (the token was rotated under one of us): the bridge re-reads its token
//!   and, if that changed (`zcode-acp token --rotate`), registers again at once with the new
//!   one. Otherwise heartbeats go on, spaced by a backoff of 6 heartbeats doubling to 60 (60 s
//!   to 10 min at the default 10 s; tests scale it with `ZCODE_ACP_HEARTBEAT_MS`), reset by
//!   the first success. No hub is spawned for a 401: the port is held by a live hub, so a new
//!   one could only find it running.
//! - A change in what the router lists (a session listed, a turn starting or ending, a new
//!   title) pokes `nudge`: the next heartbeat goes out at once, not a period later, so the
//!   hub's list (and a phone's home screen, which watches every listed session for the
//!   permissions it waits on) follows within a poll. During a backoff (401, no hub) the poke
//!   is kept for when the wait ends: it never shortens one.
//! - Nothing is written to the hub's port before `zcode_shared::peer` says a process of this
//!   user holds it: another user squatting it gets a connection and no token. That counts as
//!   no hub (a hub is started, throttled; it refuses to run and says why in `logs/hub.log`);
//!   the refusal is logged once, and the bridge goes on serving its editor and retrying.

use crate::hub::{hub_addr, verify};
use crate::router::{Event, SessionStatus};
use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{self, HeaderValue};
use hyper::{Request, StatusCode};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use zcode_shared::config::Config;
use zcode_shared::registration::{Registration, SessionRow};

/// How long one registration may take.
const TIMEOUT: Duration = Duration::from_secs(3);
/// The most of the hub's answer to a registration that is read (only its status is used).
const ANSWER_CAP: usize = 64 * 1024;
/// How long unregistering may delay the bridge's exit (a hub on a loaded machine can take
/// more than half a second to answer; one not answered keeps listing the bridge until its
/// probes fail).
const UNREGISTER_TIMEOUT: Duration = Duration::from_secs(2);
/// Retry period right after starting a hub.
const FAST_RETRY: Duration = Duration::from_millis(200);
/// How long fast retries go on after a spawn.
const FAST_WINDOW: Duration = Duration::from_secs(10);

/// Who is registering: an editor's bridge or a headless one the hub started.
#[derive(Clone, Debug)]
pub struct Registrant {
    /// `editor` or `serve`.
    pub origin: &'static str,
    /// Pairs a serve bridge's registration with the hub's spawn of it.
    pub nonce: Option<String>,
    /// `up` for the bridge `zcode-acp up` runs.
    pub launcher: Option<&'static str>,
    /// The agent it runs ([`crate::AgentSpec::name`]).
    pub agent: Option<String>,
    /// The agent's readiness ([`crate::router::Router::agent_health`]): `agentError`.
    pub health: Option<tokio::sync::watch::Receiver<crate::router::AgentHealth>>,
    /// Why the journal cannot commit ([`crate::journal::Journal::error`]): `journalError`,
    /// registered as soon as it changes.
    pub journal: Option<tokio::sync::watch::Receiver<Option<String>>>,
}

impl Registrant {
    /// An editor's bridge.
    pub fn editor() -> Registrant {
        Registrant { origin: "editor", nonce: None, launcher: None, agent: None, health: None, journal: None }
    }
}

/// Starts registering the bridge listening on `port`; unregisters when `stop` fires. Sessions
/// come from the router (`Event::Status` on `events`); `nudge` (the router's
/// [`crate::router::Router::status_nudge`]) asks for a heartbeat now. The bridge's exit awaits
/// the returned task (it ends after the unregister, at most [`UNREGISTER_TIMEOUT`] after `stop`
/// once no registration is under way).
pub fn spawn(
    cfg: &Config,
    token: &Arc<zcode_shared::token::Live>,
    port: u16,
    events: mpsc::Sender<Event>,
    who: Registrant,
    nudge: Arc<Notify>,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let workspace = std::env::current_dir()
        .and_then(std::fs::canonicalize)
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let pid = std::process::id();
    let ctx = Ctx {
        cfg: cfg.clone(),
        token: token.clone(),
        port,
        pid,
        id: pid.to_string(),
        started_at: zcode_shared::time::now_ms(),
        workspace,
        who,
        events,
    };
    tokio::spawn(run(ctx, nudge, stop))
}

struct Ctx {
    cfg: Config,
    token: Arc<zcode_shared::token::Live>,
    port: u16,
    pid: u32,
    id: String,
    started_at: u64,
    workspace: String,
    who: Registrant,
    events: mpsc::Sender<Event>,
}

/// What one registration attempt came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Registered,
    Unauthorized,
    /// Any other answer (400, 5xx): logged, retried at the next heartbeat.
    Refused(u16),
    /// No hub to talk to.
    Unreachable,
    /// Another user (or nobody we can name) holds the hub's port: nothing was sent.
    NotOurs,
}

async fn run(ctx: Ctx, nudge: Arc<Notify>, stop: CancellationToken) {
    let t = &ctx.cfg.timings;
    let mut schedule = Schedule::new(t.heartbeat, t.hub_spawn_throttle);
    let mut journal = ctx.who.journal.clone();
    loop {
        let outcome = tokio::select! {
            () = stop.cancelled() => break,
            o = ctx.register() => o,
        };
        let Some(outcome) = outcome else { break };
        if outcome == Outcome::Unauthorized && ctx.token.refresh() {
            tracing::info!("the token was rotated: registering with the new one");
            continue;
        }
        let (wait, spawn) = schedule.next(outcome, Instant::now());
        log(outcome, wait, &schedule);
        if spawn {
            ctx.spawn_hub();
        }
        if outcome == Outcome::Registered {
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(wait) => {}
                () = nudge.notified() => {}
                () = changed(&mut journal) => {}
            }
        } else {
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(wait) => {}
            }
        }
    }
    ctx.unregister().await;
}

/// Resolves when the journal's error changes; never without a journal (or once it is gone).
async fn changed(journal: &mut Option<tokio::sync::watch::Receiver<Option<String>>>) {
    if let Some(rx) = journal
        && rx.changed().await.is_ok()
    {
        return;
    }
    *journal = None;
    std::future::pending().await
}

fn log(outcome: Outcome, wait: Duration, schedule: &Schedule) {
    match outcome {
        Outcome::Registered if schedule.was_down => tracing::info!("registered with the hub"),
        Outcome::Registered => tracing::trace!("heartbeat sent"),
        Outcome::Unauthorized => {
            tracing::warn!(retry_in = ?wait, "the hub refused this bridge's token (rotated?); will keep trying")
        }
        Outcome::Refused(status) => tracing::warn!(status, "the hub refused the registration"),
        Outcome::Unreachable => tracing::debug!("no hub answered"),
        // Logged once when refused (`PeerError::warn_once`).
        Outcome::NotOurs => tracing::debug!("the hub's port is not held by this user"),
    }
}

impl Ctx {
    /// One registration; `None` when the router is gone (the bridge is stopping).
    async fn register(&self) -> Option<Outcome> {
        let sessions = self.sessions().await?;
        let reg = Registration {
            id: self.id.clone(),
            port: self.port,
            pid: self.pid,
            started_at: self.started_at,
            workspace: self.workspace.clone(),
            origin: self.who.origin,
            sessions: sessions.into_iter().map(row).collect(),
            nonce: self.who.nonce.clone(),
            version: Some(zcode_shared::version().to_owned()),
            launcher: self.who.launcher,
            agent: self.who.agent.clone(),
            agent_error: self.who.health.as_ref().and_then(|h| match &*h.borrow() {
                crate::router::AgentHealth::Failed(e) => Some(e.clone()),
                _ => None,
            }),
            journal_error: self.who.journal.as_ref().and_then(|j| j.borrow().clone()),
        };
        let body = reg.to_json(&self.token.token());
        Some(match self.post("/api/register", body.to_string()).await {
            Ok(StatusCode::OK) => Outcome::Registered,
            Ok(StatusCode::UNAUTHORIZED) => Outcome::Unauthorized,
            Ok(other) => Outcome::Refused(other.as_u16()),
            Err(Unsent::Unreachable) => Outcome::Unreachable,
            Err(Unsent::NotOurs) => Outcome::NotOurs,
        })
    }

    async fn unregister(&self) {
        let body = serde_json::json!({"token": self.token.token(), "id": self.id}).to_string();
        let _ = tokio::time::timeout(UNREGISTER_TIMEOUT, self.post("/api/unregister", body)).await;
    }

    /// The router's listed sessions.
    async fn sessions(&self) -> Option<Vec<SessionStatus>> {
        let (tx, rx) = oneshot::channel();
        self.events.send(Event::Status(tx)).await.ok()?;
        match tokio::time::timeout(Duration::from_secs(2), rx).await {
            Ok(Ok(rows)) => Some(rows),
            Ok(Err(_)) => None,
            // A busy router: register without sessions rather than not at all.
            Err(_) => Some(Vec::new()),
        }
    }

    fn hub_addr(&self) -> Option<(String, u16)> {
        hub_addr(&self.cfg)
    }

    /// POSTs `body` to the hub: its status, or why it was not (or could not be) sent.
    async fn post(&self, path: &'static str, body: String) -> Result<StatusCode, Unsent> {
        let (host, port) = self.hub_addr().ok_or(Unsent::Unreachable)?;
        let attempt = async {
            let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await.ok()?;
            if let Err(e) = verify(&tcp) {
                e.warn_once("not registering with the hub");
                return Some(Err(Unsent::NotOurs));
            }
            let mut req = Request::post(path).body(Full::new(Bytes::from(body))).ok()?;
            let h = req.headers_mut();
            h.insert(header::HOST, HeaderValue::from_str(&format!("{host}:{port}")).ok()?);
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            // The hub checks a head token before reading any body (a body token is limited to
            // 8 KiB); the body keeps its token for older hubs. The peer was verified above.
            let bearer = format!("Bearer {}", self.token.token());
            h.insert(header::AUTHORIZATION, HeaderValue::from_str(&bearer).ok()?);
            // Only the status matters; the hub's short answer is read (and dropped) with it.
            zcode_shared::http_client::exchange(tcp, req, ANSWER_CAP).await.ok().map(|r| Ok(r.status))
        };
        tokio::time::timeout(TIMEOUT, attempt).await.ok().flatten().unwrap_or(Err(Unsent::Unreachable))
    }

    /// Starts `zcode-acp hub --background` (which detaches the hub and exits at once).
    fn spawn_hub(&self) {
        let started = std::env::current_exe().and_then(|exe| {
            tokio::process::Command::new(exe)
                .args(["hub", "--background"])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
        });
        match started {
            Ok(mut child) => {
                tracing::info!("no hub of this user answered: starting one");
                tokio::spawn(async move { child.wait().await });
            }
            Err(e) => tracing::warn!("no hub of this user answered, and starting one failed: {e}"),
        }
    }
}

/// Why a POST to the hub was not answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unsent {
    /// Nothing listens there, or no answer in time.
    Unreachable,
    /// The port is not held by a process of this user: nothing was written to it.
    NotOurs,
}

/// A router session as the registration advertises it.
fn row(s: SessionStatus) -> SessionRow {
    let status = if s.waiting { "waiting" } else { s.status };
    let pending = u32::try_from(s.pending).unwrap_or(u32::MAX);
    SessionRow {
        session_id: s.session_id,
        title: s.title,
        status: Some(status),
        updated_at: s.updated_at,
        pending,
    }
}

/// When to try next, and whether to start a hub first. Pure, so it is unit-tested.
struct Schedule {
    heartbeat: Duration,
    throttle: Duration,
    /// 401s in a row.
    unauthorized: u32,
    last_spawn: Option<Instant>,
    /// The last attempt before this one failed (for logging the recovery once).
    was_down: bool,
    down: bool,
}

impl Schedule {
    fn new(heartbeat: Duration, throttle: Duration) -> Schedule {
        Schedule { heartbeat, throttle, unauthorized: 0, last_spawn: None, was_down: true, down: true }
    }

    /// The wait before the next attempt and whether to spawn a hub now.
    fn next(&mut self, outcome: Outcome, now: Instant) -> (Duration, bool) {
        self.was_down = self.down;
        self.down = outcome != Outcome::Registered;
        match outcome {
            Outcome::Registered => {
                self.unauthorized = 0;
                (self.heartbeat, false)
            }
            Outcome::Unauthorized => {
                self.unauthorized = self.unauthorized.saturating_add(1);
                let steps = self.unauthorized.min(16) - 1;
                let backoff = (self.heartbeat * 6).saturating_mul(1 << steps).min(self.heartbeat * 60);
                (backoff, false)
            }
            Outcome::Refused(_) => (self.heartbeat, false),
            // A squatted port: a hub started now refuses to run and says why in its log; once
            // the squatter leaves, the next one (after the throttle) takes the port.
            Outcome::Unreachable | Outcome::NotOurs => {
                let spawn = self.last_spawn.is_none_or(|t| now.saturating_duration_since(t) >= self.throttle);
                if spawn {
                    self.last_spawn = Some(now);
                }
                let fast = self.last_spawn.is_some_and(|t| now.saturating_duration_since(t) < FAST_WINDOW);
                (if fast { FAST_RETRY.min(self.heartbeat) } else { self.heartbeat }, spawn)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HB: Duration = Duration::from_secs(10);

    #[test]
    fn a_401_backs_off_from_60_s_doubling_to_10_min_and_resets_on_success() {
        let mut s = Schedule::new(HB, Duration::from_secs(60));
        let t = Instant::now();
        let waits: Vec<u64> = (0..7).map(|_| s.next(Outcome::Unauthorized, t).0.as_secs()).collect();
        assert_eq!(waits, [60, 120, 240, 480, 600, 600, 600]);
        assert_eq!(s.next(Outcome::Registered, t), (HB, false));
        assert_eq!(s.next(Outcome::Unauthorized, t).0.as_secs(), 60, "reset by the success");
    }

    #[test]
    fn an_unreachable_hub_is_spawned_at_most_once_per_throttle_with_fast_retries_after() {
        let throttle = Duration::from_secs(60);
        let mut s = Schedule::new(HB, throttle);
        let t = Instant::now();
        assert_eq!(s.next(Outcome::Unreachable, t), (FAST_RETRY, true));
        assert_eq!(s.next(Outcome::Unreachable, t + Duration::from_secs(1)), (FAST_RETRY, false));
        assert_eq!(
            s.next(Outcome::Unreachable, t + Duration::from_secs(20)),
            (HB, false),
            "fast window over"
        );
        assert_eq!(s.next(Outcome::Unreachable, t + throttle), (FAST_RETRY, true), "next window");
        assert_eq!(s.next(Outcome::Registered, t + throttle), (HB, false));
        // A hub that dies right after it started waits for the throttle window, success or not.
        assert_eq!(s.next(Outcome::Unreachable, t + throttle + HB / 2), (FAST_RETRY, false));
        assert_eq!(s.next(Outcome::Unreachable, t + throttle * 2), (FAST_RETRY, true));
    }
}
