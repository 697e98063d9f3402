//! `zcode-acp stop`: ends this home's hub, once `/proc` shows it is a `zcode-acp hub` of this user.

use crate::pairing::running_hub_port;
use anyhow::Context;
use std::process::ExitCode;
use std::time::Duration;
use zcode_shared::config::Config;

/// How long `stop` waits for the hub to exit after SIGTERM (it closes its relays within 1.5 s).
const STOP_WAIT: Duration = Duration::from_secs(10);

/// `stop`: SIGTERM to the hub holding this home's lock (once it is known to be a `zcode-acp hub`
/// of this user), then waits for it to exit. Exit status 0 when it stopped or none was running,
/// 1 when it could not be stopped.
pub fn stop() -> anyhow::Result<ExitCode> {
    let cfg = Config::load()?;
    let home = cfg.paths.data_dir.display().to_string();
    let pid = match zcode_hub::daemon::lock(&cfg.paths).context("the hub lock")? {
        // Nobody held it: no hub (ours is released at once, leaving the file empty).
        zcode_hub::daemon::Lock::Held(_) => {
            println!("no hub is running for {home}");
            return Ok(ExitCode::SUCCESS);
        }
        zcode_hub::daemon::Lock::Running(None) => {
            eprintln!("zcode-acp stop: a hub holds {home}/run/hub.pid but its pid is not readable there");
            return Ok(ExitCode::FAILURE);
        }
        zcode_hub::daemon::Lock::Running(Some(pid)) => pid,
    };
    if let Err(why) = our_hub(pid) {
        eprintln!("zcode-acp stop: not stopping pid {pid} from {home}/run/hub.pid: {why}");
        return Ok(ExitCode::FAILURE);
    }
    let port = running_hub_port(&cfg);
    let raw = nix::unistd::Pid::from_raw(i32::try_from(pid).context("pid")?);
    if let Err(e) = nix::sys::signal::kill(raw, nix::sys::signal::Signal::SIGTERM) {
        eprintln!("zcode-acp stop: cannot signal the hub (pid {pid}): {e}");
        return Ok(ExitCode::FAILURE);
    }
    let deadline = std::time::Instant::now() + STOP_WAIT;
    while !gone(pid) {
        if std::time::Instant::now() > deadline {
            eprintln!(
                "zcode-acp stop: the hub (pid {pid}) did not exit within {} s of SIGTERM; `kill -9 {pid}` ends it",
                STOP_WAIT.as_secs()
            );
            return Ok(ExitCode::FAILURE);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let at = port.map_or_else(String::new, |p| format!(" on {}:{p}", cfg.remote.hub_host));
    println!("stopped the hub (pid {pid}){at} for {home}");
    Ok(ExitCode::SUCCESS)
}

/// Checks in `/proc` that `pid` is a `zcode-acp hub` run by this user; else says why not.
fn our_hub(pid: u32) -> Result<(), String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("no such process ({e})"))?;
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|u| u.parse::<u32>().ok())
        .ok_or("its owner is unreadable")?;
    let me = nix::unistd::getuid().as_raw();
    if uid != me {
        return Err(format!("it belongs to uid {uid}, not to you (uid {me})"));
    }
    let cmdline =
        std::fs::read(format!("/proc/{pid}/cmdline")).map_err(|e| format!("its command line: {e}"))?;
    let argv: Vec<String> =
        cmdline.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
    let exe = argv.first().and_then(|a| a.rsplit('/').next()).unwrap_or("");
    if !exe.starts_with("zcode-acp") || argv.get(1).map(String::as_str) != Some("hub") {
        return Err(format!("it runs `{}`, not `zcode-acp hub`", argv.join(" ").trim()));
    }
    Ok(())
}

/// Whether `pid` has exited (a zombie its parent has not reaped yet counts as exited).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rsplit(')').next().and_then(|r| r.split_whitespace().next()) == Some("Z"),
        Err(_) => true,
    }
}
