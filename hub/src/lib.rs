//! `zcode-hub`: the machine's single public entry. Token auth, the registry of bridges,
//! discovery, per-instance HTTP relays and the WebSocket relay to bridges. It keeps no state
//! that a restart would lose (bridges re-register on their next heartbeat) besides the Web
//! Push keys and subscriptions, which live on disk.
//!
//! - [`state`]: [`Hub`], what every connection shares, in parts (auth, bridges, account, life).
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
pub mod state;
pub mod upgrade;
pub mod upstream;
pub mod version;
pub mod web;

pub use state::{Hub, RelayGuard};

use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
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
    tracing::info!(%addr, version = hub.life.build.version, "hub listening");
    hub.life.tracker.spawn(daemon::housekeeping(hub.clone(), port_file.clone()));
    server::serve(listener, hub.clone()).await;
    let restarting = hub.life.upgrade.restarting();
    match restarting {
        true => hub.bridges.relay.restart(),
        false => hub.bridges.relay.shutdown(),
    }

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
