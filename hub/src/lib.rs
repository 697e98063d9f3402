//! `zcode-hub`: the machine's single public entry. Token auth, the registry of bridges,
//! discovery, per-instance HTTP relays and the WebSocket relay to bridges. It keeps no state
//! that a restart would lose (bridges re-register on their next heartbeat) besides the Web
//! Push keys and subscriptions, which live on disk.
//!
//! - [`server`]: the accept loop, one task per connection, graceful shutdown.
//! - [`routes`]: the routing table; one module per route family.
//! - [`auth`]: the token check, the failed-auth rate limit, the client's address.
//! - [`registry`]: registered bridges, their TTL and probe marks, the listing's dedupe.
//! - [`relay`]: the WebSocket relay between a client and its bridge (its own thread, an epoll
//!   loop over every relayed socket).
//! - [`upstream`]: connections to a bridge's loopback server (WebSocket dial, HTTP requests).
//! - [`http`]: response builders, CORS, bounded JSON bodies, log redaction.
//! - [`catalog`]: the hub's one store connection (its own thread) and the project catalog.
//! - [`launch`]: a remote create's spawn and its wait for the registration (the in-flight map).
//! - [`spawn`]: starting bridges for remote create (terminal windows, headless serve).
//! - [`daemon`]: one hub per home (the pid lock), the port file, housekeeping (prune, idle exit,
//!   the token re-read after a rotation).
//! - [`web`]: the web client's assets, served from memory.
//! - [`quota_card`]: `zcode-acp quota`, the plan quota card in a terminal.
//! - [`attention`]: the machine-wide inbox of pending permissions and elicitations.
//! - [`overview`]: the machine's turn board (`GET /api/workflow-overview`).
//! - [`version`]: what the running hub is (version, fingerprint, start, the machine's id).
//! - [`upgrade`]: self-upgrade onto a newer binary on disk (`POST /api/upgrade`).
//! - [`push`]: Web Push to the user's devices when a session waits for them (its keys and
//!   subscriptions are the one state the hub keeps on disk, under `<data>/push/`).

pub mod attention;
pub mod auth;
pub mod catalog;
pub mod daemon;
pub mod hold;
pub mod http;
pub mod launch;
pub mod overview;
pub mod push;
pub mod quota_card;
pub mod registry;
pub mod relay;
pub mod routes;
pub mod server;
pub mod spawn;
pub mod upgrade;
pub mod upstream;
pub mod version;
pub mod web;

use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use zcode_shared::config::Config;

/// How long shutdown waits for connections to close (their close frames to go out).
const SHUTDOWN_GRACE: Duration = Duration::from_millis(1500);

/// Why a hub could not run.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// The token could not be read or generated.
    #[error(transparent)]
    Token(#[from] zcode_shared::token::TokenError),
    /// An I/O failure at start (the listener's address, the port file).
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// What every connection and task of one hub shares.
pub struct Hub {
    /// The configuration as resolved at start (listen address, timings, paths).
    pub cfg: Config,
    /// The configuration kept current with `config.json` (project roots, terminal, caps):
    /// what the project and create routes read ([`Hub::config`]).
    live: zcode_shared::config::Live,
    /// The store, opened once at start on its own thread.
    pub store: catalog::Catalog,
    /// The remote creates under way.
    pub creates: launch::Creates,
    /// The machine's token: what callers' tokens are compared against (by digest), and what
    /// the hub presents to bridges. Re-read when rotated. Never logged.
    token: zcode_shared::token::Live,
    /// Registered bridges.
    registry: Mutex<registry::Registry>,
    /// Failed authentications per client address.
    limiter: Mutex<auth::Limiter>,
    /// WebSocket relays currently open.
    relays: AtomicUsize,
    /// The relay thread.
    pub relay: relay::Relays,
    /// Web Push: keys, subscriptions, the sender task.
    pub push: push::Push,
    /// The plan quota providers and their caches ([`Hub::quota`]).
    quota: Mutex<Arc<zcode_shared::quota::Quota>>,
    /// What this hub is: version, fingerprint, start, host id.
    pub build: version::Build,
    /// Self-upgrade state (a restart under way).
    pub upgrade: upgrade::State,
    /// The port it listens on (0 until known).
    port: AtomicU16,
    /// Cancelled to stop the hub (signal, idle exit).
    pub shutdown: CancellationToken,
    /// Every connection task and relay (a relay holds a token), so shutdown can wait for them.
    pub tracker: TaskTracker,
}

impl Hub {
    /// A hub over `cfg` with the machine's `token`, stopped by `shutdown`; starts its relay
    /// thread.
    pub fn new(
        cfg: Config,
        token: zcode_shared::token::Live,
        shutdown: CancellationToken,
    ) -> std::io::Result<Arc<Hub>> {
        let t = &cfg.timings;
        let registry = registry::Registry::new(t.instance_ttl, t.probe_grace);
        let relay = relay::Relays::start(t.ping)?;
        let store = catalog::Catalog::start(cfg.paths.data_dir.clone())?;
        let live = zcode_shared::config::Live::watch(cfg.clone(), Box::new(zcode_shared::env::ProcessEnv));
        let push = push::Push::new(cfg.paths.data_dir.join("push"), cfg.remote.push_subject.clone());
        let quota = Mutex::new(zcode_shared::quota::Quota::new(&cfg.quota));
        let build = version::Build::current(&cfg.paths.data_dir);
        Ok(Arc::new(Hub {
            cfg,
            live,
            store,
            creates: launch::Creates::default(),
            token,
            registry: Mutex::new(registry),
            limiter: Mutex::new(auth::Limiter::default()),
            relays: AtomicUsize::new(0),
            relay,
            push,
            quota,
            build,
            upgrade: upgrade::State::default(),
            port: AtomicU16::new(0),
            shutdown,
            tracker: TaskTracker::new(),
        }))
    }

    /// The registry. A `std` mutex is right here: it is never held across an `.await`.
    pub fn registry(&self) -> MutexGuard<'_, registry::Registry> {
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The configuration as it is now (re-read when `config.json` changes).
    pub fn config(&self) -> Arc<Config> {
        self.live.get()
    }

    /// The quota providers of the configuration as it is now: the same ones (and caches) while
    /// `quota` in `config.json` is unchanged, new ones when it changed.
    pub fn quota(&self) -> Arc<zcode_shared::quota::Quota> {
        let cfg = self.config();
        let mut q = self.quota.lock().unwrap_or_else(|p| p.into_inner());
        if q.config() != &cfg.quota {
            *q = zcode_shared::quota::Quota::new(&cfg.quota);
        }
        q.clone()
    }

    fn limiter(&self) -> MutexGuard<'_, auth::Limiter> {
        self.limiter.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port.load(Ordering::Relaxed)
    }

    /// The number of WebSocket relays open now.
    pub fn relay_count(&self) -> usize {
        self.relays.load(Ordering::Relaxed)
    }

    /// Counts one relay for as long as the returned guard lives, unless `max` are open:
    /// checked and counted in one step, so a burst of opens cannot all pass the check before
    /// any of them is counted.
    pub fn relay_guard(self: &Arc<Hub>, max: usize) -> Option<RelayGuard> {
        let counted =
            self.relays.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1));
        counted.ok().map(|_| RelayGuard(self.clone()))
    }
}

/// Counts an open relay (see [`Hub::relay_guard`]); dropping it uncounts it.
pub struct RelayGuard(Arc<Hub>);

impl Drop for RelayGuard {
    fn drop(&mut self) {
        self.0.relays.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Runs a hub on `listener` until `shutdown` fires or the hub has been idle (no instances, no
/// relays) for `cfg.timings.hub_idle`. When `cfg.remote.hub_port` is 0 it writes the bound
/// port to `cfg.paths.hub_port_file()` (removed again on exit). On the way out it stops
/// accepting, closes every relay with a close frame and waits at most 1.5 s for them.
pub async fn run(listener: TcpListener, cfg: Config, shutdown: CancellationToken) -> Result<(), HubError> {
    let token = zcode_shared::token::Live::resolve(&cfg)?;
    let addr = listener.local_addr()?;
    let port_file = match cfg.remote.hub_port {
        0 => Some(daemon::PortFile::write(&cfg.paths, addr.port())?),
        _ => None,
    };
    let stop = shutdown.child_token();
    let hub = Hub::new(cfg, token, stop)?;
    hub.port.store(addr.port(), Ordering::Relaxed);
    tracing::info!(%addr, version = hub.build.version, "hub listening");
    hub.tracker.spawn(daemon::housekeeping(hub.clone(), port_file.clone()));
    server::serve(listener, hub.clone()).await;
    let restarting = hub.upgrade.restarting();
    match restarting {
        true => hub.relay.restart(),
        false => hub.relay.shutdown(),
    }

    hub.tracker.close();
    if tokio::time::timeout(SHUTDOWN_GRACE, hub.tracker.wait()).await.is_err() {
        tracing::warn!("some connections did not close in time");
    }
    // A restart keeps the port file: its successor takes the same port.
    if let Some(f) = port_file.filter(|_| !restarting) {
        f.remove();
    }
    tracing::info!("hub stopped");
    Ok(())
}
