//! `zcode-hub`: the machine's single public entry. Token auth, the registry of bridges,
//! discovery, per-instance HTTP relays and the WebSocket relay to bridges. It keeps no state
//! that a restart would lose (bridges re-register on their next heartbeat) besides the Web
//! Push keys and subscriptions, which live on disk.
//!
//! - [`server`]: the accept loop, one task per connection, graceful shutdown.
//! - [`routes`]: the routing table; one module per route family.
//! - [`auth`]: the token check, the failed-auth rate limit, the client's address.
//! - [`devices`]: paired devices (pairing codes, their own credentials kept hashed in the
//!   store, revocation closing their connections) and the audit trail.
//! - [`registry`]: registered bridges, their TTL and probe marks, the listing's dedupe.
//! - [`handoff`]: a client's WebSocket passed, socket and all, to its bridge (how most open);
//!   the cuts of handed-over clients (revocation, rotation, shutdown, restart).
//! - [`relay`]: the WebSocket relay between a client and its bridge (its own thread, an epoll
//!   loop over every relayed socket), for the upgrades that are not handed over.
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
pub mod devices;
pub mod handoff;
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
use zcode_shared::handoff::Which;

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

/// What every connection and task of one hub shares, in parts, so that a route reaches only the
/// part it needs ([`auth::Auth`]: token and failure buckets; [`Bridges`]: the registry, the
/// relays and remote creates; [`Account`]: plan quota and Web Push; [`Life`]: what this process
/// is and how it ends). One task owns the hub ([`run`]); the parts are shared through its `Arc`.
pub struct Hub {
    /// The configuration as resolved at start (listen address, timings, paths).
    pub cfg: Config,
    /// The configuration kept current with `config.json` (project roots, terminal, caps):
    /// what the project and create routes read ([`Hub::config`]).
    live: zcode_shared::config::Live,
    /// The store, opened once at start on its own thread.
    pub store: catalog::Catalog,
    /// Who may use the hub: the machine's token and the failed-attempt buckets.
    pub auth: auth::Auth,
    /// The bridges: registered ones, relays to them, creates under way.
    pub bridges: Bridges,
    /// The user's account: plan quota, Web Push.
    pub account: Account,
    /// Paired devices, pairing codes, live connections by credential.
    pub devices: devices::Devices,
    /// This process: what it is, its port, how it stops.
    pub life: Life,
}

impl Hub {
    /// A hub over `cfg` with the machine's `token`, stopped by `shutdown`; starts its relay
    /// and store threads.
    pub fn new(
        cfg: Config,
        token: zcode_shared::token::Live,
        shutdown: CancellationToken,
    ) -> std::io::Result<Arc<Hub>> {
        let t = &cfg.timings;
        let bridges = Bridges {
            registry: Mutex::new(registry::Registry::new(t.instance_ttl, t.probe_grace)),
            relays: Arc::new(AtomicUsize::new(0)),
            relay: relay::Relays::start(t.ping)?,
            handoff: handoff::Handoff::new(cfg.paths.run_dir.clone(), t.ping),
            creates: launch::Creates::default(),
        };
        let store = catalog::Catalog::start(cfg.paths.data_dir.clone())?;
        let live = zcode_shared::config::Live::watch(cfg.clone(), Box::new(zcode_shared::env::ProcessEnv));
        let account = Account {
            push: push::Push::new(cfg.paths.data_dir.join("push"), cfg.remote.push_subject.clone()),
            quota: Mutex::new(zcode_shared::quota::Quota::new(&cfg.quota)),
        };
        let life = Life {
            build: version::Build::current(&cfg.paths.data_dir),
            upgrade: upgrade::State::default(),
            port: AtomicU16::new(0),
            shutdown,
            tracker: TaskTracker::new(),
            listener: std::sync::OnceLock::new(),
        };
        let devices = devices::Devices::default();
        Ok(Arc::new(Hub { cfg, live, store, auth: auth::Auth::new(token), bridges, account, devices, life }))
    }

    /// The configuration as it is now (re-read when `config.json` changes).
    pub fn config(&self) -> Arc<Config> {
        self.live.get()
    }
}

/// The bridges a hub knows and what it keeps open to them.
pub struct Bridges {
    /// Registered bridges ([`Bridges::registry`]).
    registry: Mutex<registry::Registry>,
    /// WebSocket relays currently open.
    relays: Arc<AtomicUsize>,
    /// The relay thread.
    pub relay: relay::Relays,
    /// The hand-over of clients' sockets to their bridges, and the cuts of them.
    pub handoff: handoff::Handoff,
    /// The remote creates under way.
    pub creates: launch::Creates,
}

impl Bridges {
    /// The registry. A `std` mutex is right here: it is never held across an `.await`.
    pub fn registry(&self) -> MutexGuard<'_, registry::Registry> {
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The number of WebSocket relays open now.
    pub fn relay_count(&self) -> usize {
        self.relays.load(Ordering::Relaxed)
    }

    /// Counts one relay for as long as the returned guard lives, unless `max` are open:
    /// checked and counted in one step, so a burst of opens cannot all pass the check before
    /// any of them is counted.
    pub fn relay_guard(&self, max: usize) -> Option<RelayGuard> {
        let counted =
            self.relays.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1));
        counted.ok().map(|_| RelayGuard(self.relays.clone()))
    }
}

/// Counts an open relay (see [`Bridges::relay_guard`]); dropping it uncounts it.
pub struct RelayGuard(Arc<AtomicUsize>);

impl Drop for RelayGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The user's account: plan quota and Web Push.
pub struct Account {
    /// The plan quota providers and their caches ([`Account::quota`]).
    quota: Mutex<Arc<zcode_shared::quota::Quota>>,
    /// Web Push: keys, subscriptions, the sender task.
    pub push: push::Push,
}

impl Account {
    /// The quota providers of `cfg` (the configuration as it is now): the same ones (and
    /// caches) while its `quota` is unchanged, new ones when it changed.
    pub fn quota(&self, cfg: &Config) -> Arc<zcode_shared::quota::Quota> {
        let mut q = self.quota.lock().unwrap_or_else(|p| p.into_inner());
        if q.config() != &cfg.quota {
            *q = zcode_shared::quota::Quota::new(&cfg.quota);
        }
        q.clone()
    }
}

/// This hub process: what it is, where it listens, how it stops.
pub struct Life {
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
    /// A duplicate of the listening socket, for the successor of a self-upgrade to inherit.
    listener: std::sync::OnceLock<std::os::fd::OwnedFd>,
}

impl Life {
    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port.load(Ordering::Relaxed)
    }

    /// Records the port once bound.
    pub(crate) fn set_port(&self, port: u16) {
        self.port.store(port, Ordering::Relaxed);
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
    hub.life.set_port(addr.port());
    let _ = hub.life.listener.set(std::os::fd::AsFd::as_fd(&listener).try_clone_to_owned()?);
    tracing::info!(%addr, version = hub.life.build.version, "hub listening");
    hub.life.tracker.spawn(daemon::housekeeping(hub.clone(), port_file.clone()));
    server::serve(listener, hub.clone()).await;
    let restarting = hub.life.upgrade.restarting();
    // The clients handed to bridges are told what the relayed ones are.
    let (code, reason) = if restarting {
        hub.bridges.relay.restart();
        (1012, "service restart")
    } else {
        hub.bridges.relay.shutdown();
        (1001, "hub shutting down")
    };
    hub.bridges.handoff.cut(Which::Hub(hub.bridges.handoff.id()), code, reason);

    hub.life.tracker.close();
    if tokio::time::timeout(SHUTDOWN_GRACE, hub.life.tracker.wait()).await.is_err() {
        tracing::warn!("some connections did not close in time");
    }
    // A restart keeps the port file: its successor takes the same port.
    if let Some(f) = port_file.filter(|_| !restarting) {
        f.remove();
    }
    tracing::info!("hub stopped");
    Ok(())
}
