//! `zcode-bridge`: what an editor spawns instead of its agent. This file holds [`run`] (one
//! bridge wired up: loopback server, port file `run/bridge-<pid>.port` and the removal of dead
//! bridges' ones, journal, usage recorder, registration, the editor on stdio, the router until
//! it ends, then shutdown), [`BridgeOptions`] (editor or headless serve bridge) and
//! [`BridgeError`].
//!
//! - [`router`]: the one task that owns routing state (clients, sessions, the agent link).
//! - [`upstream`]: the agent process.
//! - [`bounds`]: the message limit, bounded line reads, the byte gates on the agent's reader.
//! - [`journal`]: session history in the machine's SQLite store (one writer thread), replays.
//! - [`stdio`]: the editor's connection; [`server`]: the loopback WebSocket + HTTP server,
//!   bounded by [`slots`] (connections) and [`stall`] (a remote client's writes); [`remote`]:
//!   one remote client's connection (one task); [`handoff`]: clients whose socket the hub
//!   passed over (`run/handoff-<port>.sock`), and the hub's cuts of them.
//! - [`files`]: read-only session files (`/fs/list`, `/fs/file`), confined beneath the root.
//! - [`changes`]: the session's uncommitted git changes (`/changes`, `/changes/diff`), confined too.
//! - [`lifecycle`]: `/sessions/{id}/{close,rename,delete}`, decided by the router.
//! - [`permissions`]: `/sessions/{id}/permissions/{requestId}`, a permission answered over HTTP.
//! - [`settings`]: the loopback settings mount (`/settings/*`, `/backend/restart`).
//! - [`hooks`]: hooks run by the bridge for any agent (the tree, one run, its payload, decisions).
//! - [`register`]: registration and heartbeats with the hub (which it starts when none runs).
//! - [`quota`]: where ACP `account/usage_stats` gets the plan quota (the hub, else itself).
//! - [`local`]: the bridge's own `fs/*` and `terminal/*` service, confined to session directories.
//! - [`glance`]: `/attention` and `/turns`, what the hub's inbox and turn board read.
//! - [`chat`]: `zcode-acp chat`, a terminal ACP client on a bridge of its own.
//! - [`demo`]: the built-in scripted ACP agent (the embedded default and the tests' fixture).
//! - [`usage`]: token usage recorded from ACP, and `/settings/usage`.

pub mod bounds;
pub mod changes;
pub mod chat;
pub mod demo;
pub mod files;
pub mod glance;
pub mod handoff;
pub mod hooks;
pub mod http;
pub mod hub;
pub mod journal;
pub mod lifecycle;
pub mod local;
pub mod permissions;
pub mod quota;
pub mod register;
pub mod remote;
pub mod router;
pub mod server;
pub mod settings;
pub mod slots;
pub mod stall;
pub mod stdio;
pub mod upstream;
pub mod usage;

pub use router::{AgentHealth, AgentSpec};

use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use zcode_shared::config::Config;

/// Why a bridge could not start.
#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    /// The token could not be read or generated.
    #[error(transparent)]
    Token(#[from] zcode_shared::token::TokenError),
    /// No loopback port could be bound.
    #[error("cannot bind a loopback port from {port}: {source}")]
    Bind {
        /// The first port tried.
        port: u16,
        /// Why.
        source: std::io::Error,
    },
    /// Another I/O failure at start.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Opens the machine's journal; a corrupt or foreign store is reported (naming the file) and
/// the bridge goes on without remote history rather than failing the editor.
fn open_journal(cfg: &Config) -> journal::Journal {
    let retention = journal::Retention { max_messages: cfg.journal_max_messages };
    match journal::Journal::open(&cfg.paths.data_dir, retention) {
        Ok(j) => j,
        Err(e) => {
            tracing::error!("{e}; remote clients get no history until it is fixed");
            eprintln!("zcode-acp: {e}; remote clients get no history until it is fixed");
            journal::Journal::disabled()
        }
    }
}

/// How a bridge runs.
#[derive(Clone, Debug)]
pub struct BridgeOptions {
    /// `editor` (an editor spawned it) or `serve` (the hub did, for remote use).
    pub origin: &'static str,
    /// Whether a client is on stdio (the editor, or `chat`); without one the bridge is headless.
    pub stdio: bool,
    /// Session roots pinned here: `session/new` and `session/load` get this cwd.
    pub pin_cwd: Option<std::path::PathBuf>,
    /// Pairs the registration with the hub's spawn of this bridge.
    pub nonce: Option<String>,
    /// Headless: exit this long after the last client left and the last turn ended.
    pub idle_exit: Option<Duration>,
    /// What started it when not the hub or an editor: `up` (registered as `launcher`).
    pub launcher: Option<&'static str>,
    /// Start the agent at once and publish whether it came up here (`up` waits for it before
    /// printing its banner); `None`: the agent starts on a client's first need.
    pub agent_health: Option<tokio::sync::watch::Sender<AgentHealth>>,
}

impl BridgeOptions {
    /// An editor's bridge (`zcode-acp bridge`), as shaped by the plumbing variables the hub
    /// sets when it starts one for a terminal window: `ZCODE_ACP_REMOTE_ORIGIN=serve`,
    /// `ZCODE_ACP_REMOTE_PIN_CWD=1`, `ZCODE_ACP_SPAWN_NONCE`.
    pub fn from_env() -> BridgeOptions {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        BridgeOptions {
            origin: if var("ZCODE_ACP_REMOTE_ORIGIN").as_deref() == Some("serve") {
                "serve"
            } else {
                "editor"
            },
            stdio: true,
            pin_cwd: var("ZCODE_ACP_REMOTE_PIN_CWD")
                .filter(|v| v == "1")
                .and_then(|_| std::env::current_dir().ok()),
            nonce: var("ZCODE_ACP_SPAWN_NONCE"),
            idle_exit: None,
            launcher: None,
            agent_health: None,
        }
    }

    /// A headless serve bridge in `cwd` (`zcode-acp serve`).
    pub fn serve(cfg: &Config, cwd: std::path::PathBuf) -> BridgeOptions {
        BridgeOptions {
            origin: "serve",
            stdio: false,
            pin_cwd: Some(cwd),
            nonce: std::env::var("ZCODE_ACP_SPAWN_NONCE").ok().filter(|v| !v.is_empty()),
            idle_exit: Some(cfg.timings.serve_idle),
            launcher: None,
            agent_health: None,
        }
    }
}

/// Runs a bridge: the editor (if any) on stdio, remote clients on the loopback server, `spec`
/// as the upstream agent. Returns when the editor closes stdin, a headless bridge has been
/// idle long enough, or `stop` fires; by then the agent's process group is killed and remote
/// sockets are closed.
pub async fn run(
    cfg: &Config,
    spec: AgentSpec,
    opts: BridgeOptions,
    stop: CancellationToken,
) -> Result<(), BridgeError> {
    // Re-read when rotated: the hub presents the new token as soon as it has it.
    let token = std::sync::Arc::new(zcode_shared::token::Live::resolve(cfg)?);
    let nofile = zcode_shared::rlimit::raise_open_file_limit();
    let start = cfg.remote.bridge_port;
    let listener =
        server::bind_loopback(start).await.map_err(|source| BridgeError::Bind { port: start, source })?;
    let port = listener.local_addr()?.port();
    let port_file = cfg.paths.run_dir.join(format!("bridge-{}.port", std::process::id()));
    zcode_shared::paths::Paths::ensure_private_dir(&cfg.paths.run_dir)?;
    remove_stale_port_files(&cfg.paths.run_dir);
    zcode_shared::config::write_private_atomic(&port_file, format!("{port}\n").as_bytes())?;
    tracing::info!(port, agent = %spec.display, "bridge listening on 127.0.0.1");

    let shutdown = CancellationToken::new();
    let tracker = TaskTracker::new();
    let journal = open_journal(cfg);
    let usage = usage::Recorder::start(cfg.paths.data_dir.clone(), cfg.timings.usage_backdate);
    let settings = zcode_shared::settings::Settings::new(cfg.paths.clone(), &zcode_shared::env::ProcessEnv);
    let ropts = router::RouterOptions {
        origin: opts.origin,
        pin_cwd: opts.pin_cwd.clone(),
        idle_exit: opts.idle_exit,
        usage: usage.clone(),
        hooks_config: Some(cfg.paths.config_file.clone()),
        settings: Some(settings.clone()),
        quota: quota::QuotaSource::new(cfg, token.clone()),
        start_agent: opts.agent_health.is_some(),
        health: opts.agent_health.clone(),
    };
    let agent = Some(spec.name.clone());
    let journal_error = journal.error();
    let (router, events) = router::Router::new(spec, journal, ropts);
    let nudge = router.status_nudge();
    let limits = server::Limits {
        header_timeout: cfg.timings.header_timeout,
        connections: slots::cap_for(nofile),
        write_stall: cfg.timings.ping,
    };
    let mounted = settings::Mounted { settings, handle: router.settings_handle(), usage: usage.clone() };
    let ctx = server::Ctx::new(
        events.clone(),
        token.clone(),
        shutdown.clone(),
        tracker.clone(),
        limits,
        usage.clone(),
        Some(mounted),
    )
    .with_journal_error(journal_error.clone());
    let ctx = std::sync::Arc::new(ctx);
    let handoff_socket = handoff::start(&cfg.paths.run_dir, port, ctx.clone());
    tracker.spawn(server::serve(listener, ctx));
    let registration = register::spawn(
        cfg,
        &token,
        port,
        events.clone(),
        register::Registrant {
            origin: opts.origin,
            nonce: opts.nonce.clone(),
            launcher: opts.launcher,
            agent,
            health: Some(router.agent_health()),
            journal: Some(journal_error),
        },
        nudge,
        shutdown.clone(),
    );
    if opts.stdio {
        stdio::connect_editor(events.clone(), &tracker).await;
    }
    let stop_events = events.clone();
    tokio::spawn(async move {
        stop.cancelled().await;
        let _ = stop_events.send(router::Event::Shutdown).await;
    });
    drop(events);
    // On the runtime's worker, beside the connections' reader and writer tasks: `block_on`
    // polls this future on the caller's thread, so a router run here would cost every message
    // two thread switches (reader → router → writer), futex wake-ups and context switches.
    if let Err(e) = tokio::spawn(router.run()).await {
        if e.is_panic() {
            std::panic::resume_unwind(e.into_panic());
        }
    }
    let _ = tokio::task::spawn_blocking(move || usage.flush()).await;

    shutdown.cancel();
    tracker.close();
    // Close frames go out to remote clients; the stdin reader may still block, so do not wait long.
    // The unregister has its own bound (a slow hub gets longer than the connections).
    let _ = tokio::join!(tokio::time::timeout(Duration::from_millis(1000), tracker.wait()), registration);
    let _ = std::fs::remove_file(&port_file);
    if let Some(path) = handoff_socket {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// Removes the `bridge-<pid>.port` files of bridges that died without removing theirs
/// (SIGKILL, a crash): a stale file names a port that another program may hold by now. Only
/// files of exactly that name whose pid no longer exists; live bridges' files stay.
fn remove_stale_port_files(run_dir: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(run_dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("bridge-")?.strip_suffix(".port"))
            .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        if pid > 0 && !process_exists(pid) {
            match std::fs::remove_file(entry.path()) {
                Ok(()) => tracing::info!(pid, "removed the port file of a bridge that is gone"),
                Err(e) => tracing::debug!(pid, "cannot remove a stale port file: {e}"),
            }
        }
    }
}

/// Whether process `pid` is alive: signal 0 finds it (another user's process answers EPERM:
/// it exists), and it is not a zombie (a killed bridge its editor has not reaped yet).
fn process_exists(pid: i32) -> bool {
    use nix::errno::Errno;
    if matches!(nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None), Err(Errno::ESRCH)) {
        return false;
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The state follows the parenthesized command name, which may itself hold spaces or ')'.
    stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()) != Some("Z")
}
