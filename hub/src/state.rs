//! What every connection and task of one hub shares: [`Hub`], in parts, so that a route reaches
//! only the part it needs ([`crate::auth::Auth`]: token and failure buckets; [`Bridges`]: the
//! registry, the relays and remote creates; [`Account`]: plan quota and Web Push; [`Life`]:
//! what this process is and how it ends). One task owns the hub (`crate::run`); the parts are
//! shared through its `Arc`.

use crate::{auth, catalog, launch, push, registry, relay, upgrade, version};
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use zcode_shared::config::Config;

/// The hub: see the module docs.
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
        };
        Ok(Arc::new(Hub { cfg, live, store, auth: auth::Auth::new(token), bridges, account, life }))
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
