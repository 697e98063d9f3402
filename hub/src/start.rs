//! `zcode-acp hub`: the hub's start-up (its lock, its listener, a successor taking over an
//! upgraded hub's listening socket), in the foreground or in the background, then
//! `zcode_hub::run`.

use crate::signals::stop_on_signals;
use anyhow::Context;
use std::process::ExitCode;
use std::time::Duration;
use zcode_shared::config::Config;

/// `zcode-acp hub [--background | --detached] [--successor PORT [--listener-on-stdin]]`: the
/// home's hub, unless one already runs (then exit status 0, saying so).
pub(crate) fn hub(
    background: bool,
    detached: bool,
    successor: Option<u16>,
    listener_on_stdin: bool,
) -> anyhow::Result<ExitCode> {
    // Taken first: stdin stops being the listener before anything else can run.
    let inherited = listener_on_stdin.then(take_stdin_listener);
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
        let inherited = inherited.and_then(|l| {
            let expected = successor.filter(|_| cfg.remote.hub_port == 0).unwrap_or(cfg.remote.hub_port);
            l.and_then(|l| verify_listener(l, &cfg.remote.hub_host, expected))
                .inspect_err(|why| tracing::warn!("not serving on the inherited socket: {why}"))
                .ok()
        });
        let listener = match inherited {
            Some(l) => {
                tracing::info!(addr = ?l.local_addr().ok(), "serving on the predecessor's listening socket");
                l
            }
            None => match listen(&cfg, successor).await? {
                Some(l) => l,
                None => return Ok(ExitCode::SUCCESS),
            },
        };
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

/// The listening socket a restarting hub passed as this process's stdin; stdin becomes
/// `/dev/null` at once, so that no child of this hub inherits the socket.
fn take_stdin_listener() -> Result<std::net::TcpListener, String> {
    use nix::sys::socket::{SockType, getsockopt, sockopt};
    use std::os::fd::AsFd;
    let fd = std::io::stdin().as_fd().try_clone_to_owned();
    let null = std::fs::File::open("/dev/null").map_err(|e| format!("cannot open /dev/null: {e}"))?;
    nix::unistd::dup2_stdin(&null).map_err(|e| format!("cannot replace stdin: {e}"))?;
    let fd = fd.map_err(|e| format!("stdin: {e}"))?;
    let listening = getsockopt(&fd, sockopt::AcceptConn).unwrap_or(false);
    if !listening || getsockopt(&fd, sockopt::SockType) != Ok(SockType::Stream) {
        return Err("stdin is not a listening stream socket".into());
    }
    Ok(std::net::TcpListener::from(fd))
}

/// `l` when it is a TCP socket on `host:port` (an address `host` resolves to), ready for tokio.
fn verify_listener(
    l: std::net::TcpListener,
    host: &str,
    port: u16,
) -> Result<tokio::net::TcpListener, String> {
    use std::net::ToSocketAddrs;
    let addr = l.local_addr().map_err(|e| format!("it has no TCP address: {e}"))?;
    let host_ips: Vec<std::net::IpAddr> =
        (host, port).to_socket_addrs().map_err(|e| format!("{host}: {e}"))?.map(|a| a.ip()).collect();
    if addr.port() != port || !host_ips.contains(&addr.ip()) {
        return Err(format!("it listens on {addr}, not on {host}:{port}"));
    }
    l.set_nonblocking(true).map_err(|e| e.to_string())?;
    tokio::net::TcpListener::from_std(l).map_err(|e| e.to_string())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_inherited_socket_is_served_on_only_at_the_expected_address() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_io().build().expect("runtime");
        let _guard = rt.enter();
        let bound = || std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let l = bound();
        let port = l.local_addr().expect("addr").port();
        let other = port.wrapping_add(1).max(1);
        let err = verify_listener(l, "127.0.0.1", other).expect_err("another port is refused");
        assert!(err.contains(&format!("127.0.0.1:{port}")) && err.contains("not on"), "{err}");
        let l = bound();
        let port = l.local_addr().expect("addr").port();
        assert!(verify_listener(l, "::1", port).is_err(), "another address is refused");
        let l = bound();
        let port = l.local_addr().expect("addr").port();
        let served = verify_listener(l, "127.0.0.1", port).expect("the expected address");
        assert_eq!(served.local_addr().expect("addr").port(), port);
    }
}
