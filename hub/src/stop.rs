//! `zcode-acp stop [--all]`: ends this home's hub and the headless bridges it started, and
//! names the bridges that remain (they start a new hub at their next heartbeat); `--all` ends
//! those too. Every pid is checked in `/proc` (this user's, a `zcode-acp` of the right kind)
//! before it is signalled.
//!
//! A tunnel `up --tunnel` started goes first of all: it must never forward to a port the hub
//! has let go (another user could take it). Bridges go next, the hub last: a bridge that outlived its hub would start a new one. The
//! headless bridges are the hub's children running `zcode-acp serve` (found in `/proc`, so one
//! still starting is found too); the others come from the hub's list of registered bridges and
//! from `/proc` (this user's `zcode-acp bridge|serve|up` whose environment names this home),
//! which also finds them when no hub runs.

use crate::pairing::running_hub_port;
use crate::procs::{self, Proc};
use crate::status::{BridgeRow, bridges, hub_of, plain, unregistered};
use std::process::ExitCode;
use std::time::Duration;
use zcode_shared::config::Config;

/// How long `stop` waits for a process to exit after SIGTERM (the hub closes its relays
/// within 1.5 s; a bridge ends its agent's process group).
const STOP_WAIT: Duration = Duration::from_secs(10);

/// `stop`: SIGTERM to the hub's headless bridges (with `all`, to every registered bridge),
/// then to the hub, each waited for. Exit status 0 when the hub stopped or none was running,
/// 1 when something could not be stopped.
pub fn stop(all: bool) -> anyhow::Result<ExitCode> {
    let cfg = Config::load()?;
    let home = cfg.paths.data_dir.display().to_string();
    let hub = match hub_of(&cfg)? {
        None => None,
        Some(None) => {
            eprintln!("zcode-acp stop: a hub holds {home}/run/hub.pid but its pid is not readable there");
            return Ok(ExitCode::FAILURE);
        }
        Some(Some(pid)) => match our_hub(pid) {
            Ok(()) => Some(pid),
            Err(why) => {
                eprintln!("zcode-acp stop: not stopping pid {pid} from {home}/run/hub.pid: {why}");
                return Ok(ExitCode::FAILURE);
            }
        },
    };
    let port = hub.and(running_hub_port(&cfg));
    let listed = match (hub, port) {
        (Some(pid), Some(p)) => bridges(&cfg, pid, p),
        (Some(_), None) => Err("the hub does not answer".to_owned()),
        (None, _) => Ok(Vec::new()),
    };
    let headless: Vec<Proc> = hub.map_or_else(Vec::new, |pid| {
        procs::children(pid).into_iter().filter(|p| p.ours() && p.role() == Some("serve")).collect()
    });
    let others = others(&cfg, listed.as_deref().unwrap_or(&[]), &headless);
    let mut failed = false;
    if let Some(tool) = crate::tunnel::Advert::read(&cfg.paths).and_then(|t| t.tool) {
        match procs::terminate(&[tool], STOP_WAIT).first() {
            None => println!("stopped the tunnel (pid {tool}) before the hub"),
            Some((_, why)) => {
                eprintln!(
                    "zcode-acp stop: the tunnel (pid {tool}): {why}; not stopping the hub while it runs"
                );
                return Ok(ExitCode::FAILURE);
            }
        }
    }
    let mut targets: Vec<u32> = headless.iter().map(|h| h.pid).collect();
    if all {
        for b in &others {
            match our_bridge(b.pid) {
                Ok(true) => targets.push(b.pid),
                Ok(false) => {}
                Err(why) => {
                    eprintln!("zcode-acp stop: not stopping bridge pid {}: {why}", b.pid);
                    failed = true;
                }
            }
        }
    }
    for (pid, why) in procs::terminate(&targets, STOP_WAIT) {
        eprintln!("zcode-acp stop: bridge pid {pid}: {why}; `kill -9 {pid}` ends it");
        failed = true;
    }
    match hub {
        Some(pid) => {
            if let Some((_, why)) = procs::terminate(&[pid], STOP_WAIT).first() {
                eprintln!("zcode-acp stop: the hub (pid {pid}): {why}; `kill -9 {pid}` ends it");
                return Ok(ExitCode::FAILURE);
            }
            let at = port.map_or_else(String::new, |p| format!(" on {}:{p}", cfg.remote.hub_host));
            println!("stopped the hub (pid {pid}){at} for {home}");
        }
        None => println!("no hub is running for {home}"),
    }
    for h in &headless {
        let project = listed.as_deref().unwrap_or(&[]).iter().find(|b| b.pid == h.pid).map(|b| &b.workspace);
        let project = project.cloned().or_else(|| h.cwd()).unwrap_or_default();
        println!("stopped the headless bridge it started: pid {}  {}", h.pid, plain(&project));
    }
    if let Err(e) = &listed {
        println!("the hub's list of bridges was not readable ({e}): those below are what /proc shows");
    }
    if all {
        for b in &others {
            println!("stopped bridge pid {}  {}  {}", b.pid, b.origin, plain(&b.workspace));
        }
    } else if !others.is_empty() {
        println!(
            "still running, and each will start a new hub at its next heartbeat \
             (`zcode-acp stop --all` stops them too):"
        );
        for b in &others {
            println!("  pid {}  {}  {}", b.pid, b.origin, plain(&b.workspace));
        }
    }
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// The bridges of this home besides the hub's headless ones: those the hub lists, and those
/// `/proc` shows (not registered yet, or no hub runs to list them).
fn others(cfg: &Config, listed: &[BridgeRow], headless: &[Proc]) -> Vec<BridgeRow> {
    let mut rows: Vec<BridgeRow> =
        listed.iter().filter(|b| !headless.iter().any(|h| h.pid == b.pid)).cloned().collect();
    let known: Vec<u32> = rows.iter().map(|b| b.pid).chain(headless.iter().map(|h| h.pid)).collect();
    rows.extend(unregistered(cfg, &known));
    rows
}

/// Checks in `/proc` that `pid` is a `zcode-acp hub` run by this user; else says why not.
fn our_hub(pid: u32) -> Result<(), String> {
    let p = Proc::read(pid).ok_or("no such process")?;
    if !p.ours() {
        return Err(format!("it belongs to uid {}, not to you (uid {})", p.uid, nix::unistd::getuid()));
    }
    match p.role() {
        Some("hub") => Ok(()),
        _ => Err(format!("it runs `{}`, not `zcode-acp hub`", p.command_line().trim())),
    }
}

/// Checks in `/proc` that `pid` is a bridge of this user (`zcode-acp bridge`, `serve`, `up`, or
/// a `chat`, whose bridge it is): `Ok(false)` when it has exited meanwhile.
fn our_bridge(pid: u32) -> Result<bool, String> {
    let Some(p) = Proc::read(pid) else { return Ok(false) };
    if !p.ours() {
        return Err(format!("it belongs to uid {}, not to you", p.uid));
    }
    match p.role() {
        Some("bridge" | "serve" | "up" | "chat") => Ok(true),
        _ => Err(format!("it runs `{}`, not a zcode-acp bridge", p.command_line().trim())),
    }
}
