//! Starting a bridge for a remote create and waiting for its registration. Identical
//! concurrent creates join one spawn (the in-flight map, held by the [`Hub`]); the spawn and its
//! registration are paired by a nonce.
//!
//! Spawns are bounded: at most `remote.maxCreatesInFlight` distinct spawns waiting at once and
//! `remote.maxServeBridges` serve bridges alive (those starting count); beyond, 429.

use crate::Hub;
use crate::http::{Resp, say};
use crate::spawn::{self, Launch, Started};
use hyper::StatusCode;
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a headless bridge gets to register.
const HEADLESS_BUDGET: Duration = Duration::from_secs(10);
/// How long a window's bridge gets (the window has to open first).
const WINDOW_BUDGET: Duration = Duration::from_secs(20);
/// How often the registry is checked while waiting.
const POLL: Duration = Duration::from_millis(100);

/// What a launch ends in: the registered instance's id, or the HTTP error to answer.
pub type Outcome = Result<String, (StatusCode, String)>;
/// (workspace, session, agent, headless only): what makes two creates identical.
type Key = (String, Option<String>, Option<String>, bool);
type Inflight = HashMap<Key, Arc<tokio::sync::OnceCell<Outcome>>>;

/// The creates under way of one hub.
#[derive(Default)]
pub struct Creates {
    /// Identical creates in flight, joined to one spawn.
    inflight: Mutex<Inflight>,
    /// Distinct spawns under way (creates joined to one count once).
    starting: Arc<AtomicUsize>,
}

impl Creates {
    fn inflight(&self) -> std::sync::MutexGuard<'_, Inflight> {
        self.inflight.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A place among the spawns under way, given back when dropped.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Takes a slot for one more spawn, or says (429) which cap stands in the way.
fn slot(hub: &Hub, cfg: &zcode_shared::config::Config) -> Result<Slot, (StatusCode, String)> {
    let max = cfg.remote.max_creates_in_flight;
    let starting = &hub.bridges.creates.starting;
    let before = starting
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < max).then_some(n + 1))
        .map_err(|_| {
            (
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "{max} bridges are already starting (remote.maxCreatesInFlight / \
                     ZCODE_ACP_MAX_CREATES_IN_FLIGHT): wait until they are up, then try again"
                ),
            )
        })?;
    let slot = Slot(starting.clone());
    let max = cfg.remote.max_serve_bridges;
    let alive = hub.bridges.registry().serve_count(Instant::now());
    if alive + before >= max {
        return Err((
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "{max} remote bridges are already running or starting (remote.maxServeBridges / \
                 ZCODE_ACP_MAX_SERVE_BRIDGES): close sessions you no longer need (a remote \
                 bridge ends with its last session), then try again"
            ),
        ));
    }
    Ok(slot)
}

/// The id of a headless serve bridge of the default agent for the project: a live one, or a
/// new one.
pub async fn headless_for(hub: &Arc<Hub>, path: &Path) -> Result<String, Resp> {
    let ws = path.display().to_string();
    let default = hub.config().agents.default_name().to_owned();
    if let Some(id) = hub.bridges.registry().serve_instance_in(&ws, &default, Instant::now()) {
        return Ok(id);
    }
    launch(hub, path, None, None, true).await.map_err(|(s, m)| say(s, m))
}

/// Starts a bridge running `agent` (a name [`zcode_shared::config::Agents::knows`]; `None`:
/// the default), joined with an identical one in flight, and waits for its registration.
pub async fn launch(
    hub: &Arc<Hub>,
    path: &Path,
    session: Option<String>,
    agent: Option<String>,
    headless_only: bool,
) -> Outcome {
    let key = (path.display().to_string(), session.clone(), agent.clone(), headless_only);
    let (cell, joined) = {
        let mut map = hub.bridges.creates.inflight();
        let joined = map.contains_key(&key);
        (map.entry(key.clone()).or_default().clone(), joined)
    };
    if joined {
        tracing::info!(workspace = ?key.0, "an identical create is under way: joining it");
    }
    let out = cell
        .get_or_init(|| spawn_and_wait(hub.clone(), path.to_owned(), session, agent, headless_only))
        .await
        .clone();
    // The next create is a new spawn: only concurrent ones share this one.
    let mut map = hub.bridges.creates.inflight();
    if map.get(&key).is_some_and(|c| Arc::ptr_eq(c, &cell)) {
        map.remove(&key);
    }
    out
}

async fn spawn_and_wait(
    hub: Arc<Hub>,
    path: std::path::PathBuf,
    session: Option<String>,
    agent: Option<String>,
    headless_only: bool,
) -> Outcome {
    let cfg = hub.config();
    let _slot = slot(&hub, &cfg)?;
    let nonce = nonce();
    let title = title_for(&hub, &path, session.as_deref()).await;
    let l = Launch { workspace: path, session, agent, title, nonce: nonce.clone(), headless_only };
    // Opening a window runs programs to completion (tmux, a user's command): not on a worker.
    let started = tokio::task::spawn_blocking(move || spawn::start(&cfg, &l))
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))
        .and_then(|r| r)
        .map_err(|e| (StatusCode::BAD_GATEWAY, format!("spawn failed: {e}")))?;
    let (budget, mut child) = match started {
        Started::Window(name) => {
            tracing::info!(recipe = %name, "opened a terminal window for a remote create");
            (WINDOW_BUDGET, None)
        }
        Started::Headless(c) => (HEADLESS_BUDGET, Some(c)),
    };
    let deadline = Instant::now() + budget;
    loop {
        if let Some(id) = hub.bridges.registry().id_by_nonce(&nonce, Instant::now()) {
            if let Some(c) = child.take() {
                // It runs on; reaped when it ends, so no zombie is left behind.
                c.detach();
            }
            return Ok(id);
        }
        if let Some(c) = child.as_ref() {
            if let Some(status) = c.try_exit() {
                return Err((
                    StatusCode::BAD_GATEWAY,
                    format!("the bridge exited during startup ({status})"),
                ));
            }
        }
        if Instant::now() >= deadline {
            // Dropped: killed (its whole group) and reaped.
            drop(child.take());
            return Err((
                StatusCode::BAD_GATEWAY,
                format!("the bridge never registered (waited {}s)", budget.as_secs()),
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The window title: the session's title, else the project's name; one clean line either way
/// (a title stored by an older version may hold anything).
async fn title_for(hub: &Hub, path: &Path, session: Option<&str>) -> String {
    let stored = match session.map(str::to_owned) {
        Some(s) => hub
            .store
            .run(move |st| st.counters(&s))
            .await
            .ok()
            .and_then(Result::ok)
            .flatten()
            .and_then(|c| c.title),
        None => None,
    };
    let raw = stored.unwrap_or_else(|| {
        path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned())
    });
    zcode_shared::text::title(&raw)
}

fn nonce() -> String {
    let mut b = [0u8; 12];
    let _ = getrandom::fill(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}
