//! `zcode-acp hub`: the hub's start-up (its lock, its listener, a successor taking over an
//! upgraded hub's port), in the foreground or in the background, then `zcode_hub::run`.

use crate::signals::stop_on_signals;
use anyhow::Context;
use std::process::ExitCode;
use std::time::Duration;
use zcode_shared::config::Config;

/// `zcode-acp hub [--background | --detached] [--successor PORT]`: the home's hub, unless one
/// already runs (then exit status 0, saying so).
pub(crate) fn hub(background: bool, detached: bool, successor: Option<u16>) -> anyhow::Result<ExitCode> {
    let cfg = Config::load()?;
    if background {
        return hub_background(&cfg);
    }
    if detached {
        // Its own session: an editor closing (SIGHUP to its group) must not take the hub along.
        let _ = nix::unistd::setsid();
    }
    zcode_shared::logging::init(cfg.debug);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let Some(_lock) = take_lock(&cfg, &rt, successor)? else { return Ok(ExitCode::SUCCESS) };
    if let Some(limit) = zcode_hub::daemon::raise_open_file_limit() {
        tracing::debug!(limit, "open-file limit");
    }
    let result = rt.block_on(async {
        let Some(listener) = listen(&cfg, successor).await? else { return Ok(ExitCode::SUCCESS) };
        let stop = tokio_util::sync::CancellationToken::new();
        tokio::spawn(stop_on_signals(stop.clone()));
        zcode_hub::run(listener, cfg.clone(), stop).await.context("hub")?;
        Ok(ExitCode::SUCCESS)
    });
    rt.shutdown_timeout(Duration::from_millis(100));
    result
}

/// The home's hub lock (a successor waits for its predecessor to let go); `None`, said on
/// stderr, when another hub holds it.
fn take_lock(
    cfg: &Config,
    rt: &tokio::runtime::Runtime,
    successor: Option<u16>,
) -> anyhow::Result<Option<zcode_hub::daemon::PidLock>> {
    let host = &cfg.remote.hub_host;
    let within = Duration::from_secs(10);
    let (lock, answering) = match successor {
        Some(old) => {
            let version = zcode_shared::version();
            tracing::info!(port = old, version, "taking over from the hub being upgraded");
            (zcode_hub::daemon::lock_within(&cfg.paths, within).context("the hub lock")?, false)
        }
        None => {
            let port_now = || cfg.hub_port_now();
            let lock = rt.block_on(zcode_hub::daemon::lock_to_start(&cfg.paths, host, port_now, within));
            lock.context("the hub lock")?
        }
    };
    let pid = match lock {
        zcode_hub::daemon::Lock::Held(lock) => return Ok(Some(lock)),
        zcode_hub::daemon::Lock::Running(pid) => pid.map_or_else(String::new, |p| format!(" (pid {p})")),
    };
    let run_dir = cfg.paths.run_dir.display();
    match answering {
        true => eprintln!("zcode-acp hub: a hub is already running{pid} for {run_dir}"),
        false => eprintln!(
            "zcode-acp hub: a hub is already running{pid} for {run_dir}, but it does not answer on \
             {host}:{} (is it configured with another port?)",
            cfg.hub_port_now().map_or_else(|| "its OS-picked port".to_owned(), |p| p.to_string())
        ),
    }
    Ok(None)
}

/// The hub's listener on the configured address (a successor of an OS-picked port takes its
/// predecessor's, so clients find it where it was); `None`, said on stderr, when a hub of ours
/// already answers there; an error naming the holder when someone else has the port.
async fn listen(cfg: &Config, successor: Option<u16>) -> anyhow::Result<Option<tokio::net::TcpListener>> {
    let (host, port) = (cfg.remote.hub_host.as_str(), cfg.remote.hub_port);
    let taken_over = match successor.filter(|p| port == 0 && *p != 0) {
        Some(p) => tokio::net::TcpListener::bind((host, p)).await.ok(),
        None => None,
    };
    let bound = match taken_over {
        Some(l) => Ok(l),
        None => tokio::net::TcpListener::bind((host, port)).await,
    };
    match bound {
        Ok(l) => return Ok(Some(l)),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {}
        Err(e) => return Err(anyhow::Error::new(e).context(format!("cannot listen on {host}:{port}"))),
    }
    use zcode_hub::daemon::Holder;
    use zcode_shared::peer::PeerError;
    match zcode_hub::daemon::holder(host, port).await {
        Holder::NotOurs(PeerError::Foreign { uid, .. }) => anyhow::bail!(
            "port {port} on {host} is held by another user (uid {uid}): refusing to start; \
             choose another remote.hubPort (ZCODE_ACP_HUB_PORT)"
        ),
        Holder::NotOurs(e) => {
            anyhow::bail!("{host}:{port} is in use and {e}: refusing to start (set ZCODE_ACP_HUB_PORT)")
        }
        Holder::Ours | Holder::Nobody => {}
    }
    if zcode_hub::daemon::hub_answers(host, port).await {
        eprintln!("zcode-acp hub: a hub is already running on {host}:{port}");
        return Ok(None);
    }
    anyhow::bail!("{host}:{port} is in use by another program (set ZCODE_ACP_HUB_PORT)")
}

/// `hub --background`: runs `hub --detached` with its output appended to `<logs>/hub.log`
/// and returns at once. The detached hub is not our child for long: we exit, it is reparented.
fn hub_background(cfg: &Config) -> anyhow::Result<ExitCode> {
    zcode_shared::paths::Paths::ensure_private_dir(&cfg.paths.log_dir)?;
    let log_path = cfg.paths.log_dir.join("hub.log");
    let log = zcode_shared::paths::append_private(&log_path)
        .with_context(|| format!("cannot open {}", log_path.display()))?;
    let exe = std::env::current_exe().context("cannot find this executable")?;
    // Not waited for: this process exits now and the hub is reparented (and later reaped).
    #[allow(clippy::zombie_processes)]
    std::process::Command::new(exe)
        .args(["hub", "--detached"])
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("cannot start the hub")?;
    eprintln!("zcode-acp hub: starting in the background; log in {}", log_path.display());
    Ok(ExitCode::SUCCESS)
}

/// Starts the hub the way a bridge does, through `zcode-acp hub --background`, and waits for
/// that (it returns at once): the hub is the child of a process that has exited, not of this
/// one, which would otherwise keep it as a zombie once it exits (`zcode-acp stop`).
pub(crate) fn start_hub(cfg: &Config) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("cannot find this executable to start the hub")?;
    let status = std::process::Command::new(exe)
        .args(["hub", "--background"])
        .stdin(std::process::Stdio::null())
        .status()
        .context("cannot start the hub")?;
    anyhow::ensure!(
        status.success(),
        "cannot start the hub (`zcode-acp hub --background`: {status}): see {}",
        cfg.paths.log_dir.join("hub.log").display()
    );
    Ok(())
}
