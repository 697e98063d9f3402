//! `zcode-acp up`: the hub (started unless one answers), a serve bridge in the current
//! directory, optionally a tunnel, and the pairing banner.

use crate::agent::{AgentChoice, agent_spec, run_bridge_until};
use crate::pairing::{self, loopback_note, pairing_url, qr, running_hub_port};
use crate::signals::signals_now;
use crate::tunnel;
use std::process::ExitCode;
use std::time::Duration;
use zcode_shared::config::Config;

/// `up`: the hub (started in the background unless one answers), then a serve bridge over the
/// chosen agent in the current directory, in the foreground until Ctrl-C; with `--tunnel`, the
/// tunnel too, for as long as `up` runs. Prints a pairing URL with a one-time code (never the
/// machine's token) and a QR code of it.
pub(crate) fn up(
    public_url: Option<String>,
    tunnel: Option<tunnel::Kind>,
    agent_name: Option<String>,
    agent: Vec<String>,
) -> anyhow::Result<ExitCode> {
    let cfg = Config::load()?;
    if let Some(Err(e)) = tunnel.map(tunnel::Kind::check_installed) {
        // One line, no backtrace: this is advice, not a crash.
        eprintln!("zcode-acp up: {e}");
        return Ok(ExitCode::FAILURE);
    }
    // An unknown agent name fails here, before anything is started or printed.
    let spec = agent_spec(&cfg, AgentChoice::new(agent_name, agent))?;
    // Made now if there is none yet: the hub and the bridge started below read the same one.
    zcode_shared::token::resolve(&cfg)?;
    let host = cfg.remote.hub_host.clone();
    let stop = signals_now()?;
    let port = match running_hub_port(&cfg) {
        Some(p) => p,
        None => {
            // Said at once, not as a hub that did not start: the URL would go to that user.
            if let Err(why) = Some(cfg.remote.hub_port)
                .filter(|p| *p != 0)
                .map_or(Ok(()), |p| pairing::check_port_owner(&host, p))
            {
                eprintln!("zcode-acp up: {why}");
                return Ok(ExitCode::FAILURE);
            }
            crate::start::start_hub(&cfg)?;
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            loop {
                if let Some(p) = running_hub_port(&cfg) {
                    break p;
                }
                if stop.is_cancelled() {
                    return Ok(ExitCode::SUCCESS);
                }
                anyhow::ensure!(
                    std::time::Instant::now() < deadline,
                    "the hub did not start: see {}",
                    cfg.paths.log_dir.join("hub.log").display()
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    };
    // The port the tunnel forwards to is `up`'s, relaying only to a hub of this user: a killed
    // hub's port may be taken by anyone. Declared first, so dropped after the tunnel.
    let origin = match tunnel {
        Some(_) => Some(tunnel::origin::Origin::start(&cfg)?),
        None => None,
    };
    // Dropped when `up` returns (Ctrl-C included): the tunnel lives exactly as long as `up`.
    let tunnel = match tunnel.zip(origin.as_ref()) {
        Some((kind, origin)) => {
            eprintln!("zcode-acp: starting `{}`…", kind.command_line(&origin.url()));
            match tunnel::Tunnel::start(kind, &origin.url(), &stop)? {
                Some(t) => Some(t),
                None => return Ok(ExitCode::SUCCESS),
            }
        }
        None => None,
    };
    let public_url = tunnel.as_ref().map(|t| t.url.clone()).or(public_url);
    // What `zcode-acp status` shows as the hub's tunnel, for as long as this `up` runs: written
    // before the banner, so whoever reads the banner finds it.
    let _advert = tunnel.as_ref().map(|t| tunnel::Advert::write(&cfg.paths, t));
    let dir = std::fs::canonicalize(std::env::current_dir()?)?;
    let mut opts = zcode_bridge::BridgeOptions::serve(&cfg, dir);
    opts.idle_exit = None;
    opts.launcher = Some("up");
    let (health, mut agent_up) = tokio::sync::watch::channel(zcode_bridge::AgentHealth::Unknown);
    opts.agent_health = Some(health);
    let bridge_stop = stop.clone();
    let bridge =
        std::thread::spawn(move || run_bridge_until(AgentChoice::Resolved(spec), opts, Some(bridge_stop)));
    // The banner says the agent is up only once it answered `initialize`.
    let started = tokio::runtime::Builder::new_current_thread()
        .build()?
        .block_on(agent_up.wait_for(|h| *h != zcode_bridge::AgentHealth::Unknown))
        .map(|h| h.clone());
    let failure = match started {
        Ok(zcode_bridge::AgentHealth::Failed(e)) => Some(e),
        Ok(_) => None,
        // The bridge ended first (Ctrl-C, or it could not start: its error says why).
        Err(_) => return bridge.join().unwrap_or_else(|_| anyhow::bail!("the bridge panicked")),
    };
    if let Some(e) = failure {
        eprintln!("zcode-acp up: the agent did not start: {e}");
        stop.cancel();
        let _ = bridge.join();
        return Ok(ExitCode::FAILURE);
    }
    // The hub was ours when found; a pairing URL is printed only while it still is.
    if let Err(why) = pairing::check_port_owner(&host, port) {
        eprintln!("zcode-acp up: {why}");
        stop.cancel();
        let _ = bridge.join();
        return Ok(ExitCode::FAILURE);
    }
    // A one-time code, never the machine's token: a phone keeps its own credential, revocable.
    let url = match crate::devices_cli::new_code(&cfg, false, None) {
        Ok(code) => pairing_url(&host, port, &code, public_url),
        Err(e) => {
            eprintln!("zcode-acp up: no pairing code from the hub: {e:#}");
            stop.cancel();
            let _ = bridge.join();
            return Ok(ExitCode::FAILURE);
        }
    };
    println!("zcode-acp is up.");
    println!("  open:   {url}");
    println!("          (works once, for 5 minutes: `zcode-acp pair` makes another)");
    // The note first: read before the code is scanned, not found under it afterwards.
    if let Some(note) = loopback_note(&url) {
        println!("{note}");
    }
    print!("{}", qr(&url, pairing::colour_for(&std::io::stdout())));
    println!("  hub:    http://{host}:{port}");
    if let Some(t) = &tunnel {
        println!("  tunnel: {} (pid {}), stopped with this command", t.url, t.pid());
    }
    // A plain `stop` would leave this bridge, which starts a new hub at its next heartbeat.
    println!(
        "Ctrl-C stops this bridge; the hub exits by itself when idle \
         (`zcode-acp stop --all` stops the hub, this bridge and every other)."
    );
    // A tunnel ended from outside (`zcode-acp stop` ends it before the hub) ends this `up`: what
    // it printed would no longer open.
    while let Some(t) = tunnel.as_ref().filter(|_| !bridge.is_finished()) {
        if t.exited() {
            eprintln!("zcode-acp up: the tunnel ended: stopping");
            stop.cancel();
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let result = bridge.join().unwrap_or_else(|_| anyhow::bail!("the bridge panicked"));
    drop(tunnel);
    result
}
