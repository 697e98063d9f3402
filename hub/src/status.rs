//! `zcode-acp status`: this home's hub and the bridges registered with it, from the hub's own
//! API (`/api/version`, `/api/instances`, with the token) and `/proc` (which bridges the hub
//! itself started). [`hub_of`] and [`bridges`] are what `stop` sees too.

use crate::pairing::running_hub_port;
use crate::procs::Proc;
use anyhow::Context;
use serde_json::{Value, json};
use std::process::ExitCode;
use zcode_hub::daemon::{self, Lock};
use zcode_shared::config::Config;

/// `status --help`'s epilogue.
pub const HELP: &str =
    "Origins: editor (an editor's agent), up (`zcode-acp up`), headless (a bridge the hub \
started for a phone; `zcode-acp stop` ends it with the hub), serve (a remote create's terminal window, or a \
`serve` run by hand).
Exit status: 0 when a hub runs, 1 when none does (a running bridge starts one at its next heartbeat).";

/// Who holds this home's hub lock: `None` when nobody (no hub), else its pid when readable.
pub fn hub_of(cfg: &Config) -> anyhow::Result<Option<Option<u32>>> {
    // Taking the lock when nobody holds it releases it at once (the drop empties the file).
    Ok(match daemon::lock(&cfg.paths).context("the hub lock")? {
        Lock::Held(_) => None,
        Lock::Running(pid) => Some(pid),
    })
}

/// A bridge registered with the hub.
#[derive(Clone, Debug)]
pub struct BridgeRow {
    /// Its pid.
    pub pid: u32,
    /// `editor`, `up`, `headless` (the hub's child: `stop` ends it) or `serve`.
    pub origin: &'static str,
    /// Its project directory.
    pub workspace: String,
    /// Its agent's command line (empty when the bridge did not say).
    pub agent: String,
    /// Sessions listed there, and how many of those are mid-turn.
    pub sessions: usize,
    /// Of which running.
    pub running: usize,
}

/// The bridges registered with the hub `hub_pid` on `port`, as it lists them; else why not.
pub fn bridges(cfg: &Config, hub_pid: u32, port: u16) -> Result<Vec<BridgeRow>, String> {
    let list = ask(cfg, port, "/api/instances")?;
    let rows = list.as_array().ok_or("the hub's list of bridges is not an array")?;
    Ok(rows.iter().filter_map(|i| row(i, hub_pid)).collect())
}

fn row(i: &Value, hub_pid: u32) -> Option<BridgeRow> {
    let pid = u32::try_from(i["pid"].as_u64()?).ok()?;
    let origin = if i["origin"] == "editor" {
        "editor"
    } else if i["launcher"] == "up" {
        "up"
    } else if Proc::read(pid).is_some_and(|p| p.ppid == hub_pid && p.role() == Some("serve")) {
        "headless"
    } else {
        "serve"
    };
    let sessions = i["sessions"].as_array().map_or(&[][..], Vec::as_slice);
    Some(BridgeRow {
        pid,
        origin,
        workspace: i["workspace"].as_str().unwrap_or("").to_owned(),
        agent: i["agent"].as_str().unwrap_or("").to_owned(),
        sessions: sessions.len(),
        running: sessions.iter().filter(|s| s["status"] == "running").count(),
    })
}

/// The bridge processes of this home (`/proc`: this user's `zcode-acp bridge|serve|up` whose
/// environment names this home) other than `known`'s: not registered yet, or no hub runs.
pub fn unregistered(cfg: &Config, known: &[u32]) -> Vec<BridgeRow> {
    let rows = crate::procs::bridges_of(&cfg.paths).into_iter().filter(|p| !known.contains(&p.pid));
    rows.map(|p| BridgeRow {
        pid: p.pid,
        origin: match p.role() {
            Some("up") => "up",
            Some("serve") => "serve",
            _ => "editor",
        },
        workspace: p.cwd().unwrap_or_default(),
        agent: String::new(),
        sessions: 0,
        running: 0,
    })
    .collect()
}

/// `GET path` on this home's hub at `port`, with this home's token.
fn ask(cfg: &Config, port: u16, path: &str) -> Result<Value, String> {
    let (token, _) = zcode_shared::token::resolve(cfg).map_err(|e| format!("the token: {e}"))?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    rt.block_on(daemon::hub_get_json(&cfg.remote.hub_host, port, path, &token))
}

/// `status [--json]`.
pub fn status(as_json: bool) -> anyhow::Result<ExitCode> {
    let cfg = Config::load()?;
    let home = cfg.paths.data_dir.display().to_string();
    let pid = match hub_of(&cfg)? {
        None => {
            // What `/proc` shows instead: each of these starts a hub at its next heartbeat.
            let running = unregistered(&cfg, &[]);
            if as_json {
                let rows: Vec<Value> = running.iter().map(row_json).collect();
                println!("{}", json!({"hub": null, "bridges": rows, "home": home}));
            } else {
                println!("no hub is running for {home}");
                if !running.is_empty() {
                    println!("bridges of this home still running (each starts a hub at its next heartbeat):");
                    for b in &running {
                        println!("  pid {}  {}  {}", b.pid, b.origin, plain(&b.workspace));
                    }
                }
            }
            return Ok(ExitCode::FAILURE);
        }
        Some(None) => anyhow::bail!("a hub holds {home}/run/hub.pid but its pid is not readable there"),
        Some(Some(pid)) => pid,
    };
    let port = running_hub_port(&cfg);
    let version = port.map(|p| ask(&cfg, p, "/api/version"));
    let bridges = port.map_or_else(|| Err("the hub does not answer".to_owned()), |p| bridges(&cfg, pid, p));
    let tunnel = crate::tunnel::Advert::read(&cfg.paths);
    let version = version.and_then(Result::ok).unwrap_or(Value::Null);
    let started = version["startedAt"].as_u64();
    let uptime = started.map(|s| zcode_shared::time::now_ms().saturating_sub(s));
    if as_json {
        let rows: Vec<Value> = bridges.as_ref().map_or(Vec::new(), |b| b.iter().map(row_json).collect());
        let hub = json!({
            "pid": pid,
            "port": port,
            "version": version["version"],
            "startedAt": started,
            "uptimeMs": uptime,
            "tunnel": tunnel.as_ref().map(|t| json!({"url": t.url, "upPid": t.up})),
        });
        let mut v = json!({"hub": hub, "bridges": rows, "home": home});
        if let Err(e) = &bridges {
            v["bridgesError"] = e.as_str().into();
        }
        println!("{v}");
        return Ok(ExitCode::SUCCESS);
    }
    let port = port.map_or_else(|| "? (it does not answer)".to_owned(), |p| p.to_string());
    let version = version["version"].as_str().unwrap_or("?");
    let uptime = uptime.map_or_else(|| "?".to_owned(), |ms| duration(ms / 1000));
    let tunnel =
        tunnel.map_or_else(|| "none".to_owned(), |t| format!("{} (zcode-acp up, pid {})", t.url, t.up));
    println!("hub  pid {pid}  port {port}  version {version}  up {uptime}  tunnel {tunnel}");
    println!("home {home}");
    match bridges {
        Err(e) => println!("bridges: cannot list them: {e}"),
        Ok(b) if b.is_empty() => println!("no bridges registered"),
        Ok(b) => print!("{}", table(&b)),
    }
    Ok(ExitCode::SUCCESS)
}

fn row_json(b: &BridgeRow) -> Value {
    json!({
        "pid": b.pid,
        "origin": b.origin,
        "workspace": b.workspace,
        "agent": b.agent,
        "sessions": b.sessions,
        "running": b.running,
    })
}

/// The bridges as aligned columns, the project last (it may hold anything).
fn table(rows: &[BridgeRow]) -> String {
    // What a bridge registered is shown, never obeyed: control sequences go (STYLE 16).
    // The program by its name, not its path: the column is for telling agents apart.
    let agent = |b: &BridgeRow| {
        let line = zcode_shared::text::title(&b.agent);
        let (program, args) = line.split_once(' ').unwrap_or((&line, ""));
        let name = program.rsplit('/').next().unwrap_or(program);
        format!("{name} {args}").trim_end().chars().take(AGENT_COLUMN).collect::<String>()
    };
    let cells: Vec<[String; 5]> = rows
        .iter()
        .map(|b| {
            let agent = if b.agent.is_empty() { "?".to_owned() } else { agent(b) };
            let project = plain(&b.workspace);
            [b.pid.to_string(), b.origin.to_owned(), b.sessions.to_string(), agent, project]
        })
        .collect();
    let header = ["PID", "ORIGIN", "SESSIONS", "AGENT", "PROJECT"].map(str::to_owned);
    let mut width = [0usize; 4];
    for r in std::iter::once(&header).chain(&cells) {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for r in std::iter::once(&header).chain(&cells) {
        for (w, c) in width.iter().zip(r) {
            out += &format!("{c:<w$}  ", w = *w);
        }
        out += &r[4];
        out.push('\n');
    }
    out
}

/// The widest the AGENT column gets (longer command lines are cut).
const AGENT_COLUMN: usize = 40;

/// `text` on one line without control sequences (a path shown as it is, however long).
pub fn plain(text: &str) -> String {
    zcode_shared::text::strip_controls(text).replace(['\n', '\t'], " ")
}

/// `3d4h`, `2h5m`, `7m12s`, `40s`.
fn duration(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) => format!("{m}m{s}s"),
        (0, _, _) => format!("{h}h{m}m"),
        _ => format!("{d}d{h}h"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_columns_read_at_a_glance() {
        assert_eq!(duration(40), "40s");
        assert_eq!(duration(7 * 60 + 12), "7m12s");
        assert_eq!(duration(2 * 3600 + 5 * 60 + 9), "2h5m");
        assert_eq!(duration(3 * 86_400 + 4 * 3600), "3d4h");
        let b = |pid, agent: &str| BridgeRow {
            pid,
            origin: "editor",
            workspace: "/p".into(),
            agent: agent.into(),
            sessions: 1,
            running: 0,
        };
        let t = table(&[b(7, "a"), b(123_456, "a longer agent")]);
        let col = |l: &str| l.find('/').or_else(|| l.find("PROJECT"));
        let cols: Vec<Option<usize>> = t.lines().map(col).collect();
        assert!(cols.windows(2).all(|w| w[0] == w[1] && w[0].is_some()), "{t}");
    }
}
