//! `up --tunnel`: a Cloudflare quick tunnel (`cloudflared tunnel --url …`) or `tailscale serve`
//! / `tailscale funnel` in front of the hub, for phones, pointed at `up`'s own origin port
//! ([`origin`]), never at the hub's. The tool runs in its own process group for as
//! long as `up` does and is killed with it; its public `https://` URL is read from what it prints.
//!
//! "Killed with it" holds also when `up` itself is killed (SIGKILL, a crash), which no drop
//! runs for: the tool is started through `zcode-acp tunnel-exec --parent <up's pid> -- tool …`,
//! which asks the kernel for SIGKILL when its parent dies (`PR_SET_PDEATHSIG`, kept across
//! `exec`) and then becomes the tool (same pid, same pipes). SIGKILL, not SIGTERM: a tool given
//! a grace period would keep forwarding to an origin port that no longer is `up`'s. The parent
//! is `up`'s main thread, which lives as long as `up` does (the death signal follows the thread
//! that forked).

pub mod origin;

use anyhow::{Context, bail};
use nix::sys::signal::Signal;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use zcode_shared::procgroup::Group;

/// How long a tunnel tool gets to report its public URL.
const URL_WAIT: Duration = Duration::from_secs(60);

/// How long a killed tunnel tool gets between SIGTERM and SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(2);

/// Which tunnel `up --tunnel` starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// A Cloudflare quick tunnel (`cloudflared tunnel --url`): a random `*.trycloudflare.com`.
    Cloudflare,
    /// `tailscale serve`: `https://<machine>.<tailnet>.ts.net`, for devices on your tailnet.
    Tailscale,
    /// `tailscale funnel`: the same address, reachable from the whole internet.
    TailscaleFunnel,
}

impl Kind {
    fn program(self) -> &'static str {
        match self {
            Kind::Cloudflare => "cloudflared",
            Kind::Tailscale | Kind::TailscaleFunnel => "tailscale",
        }
    }

    /// The command line, in the foreground, forwarding to `target` (`http://127.0.0.1:PORT`):
    /// the tool ends (and its serve config with it) when it is killed.
    fn args(self, target: &str) -> Vec<String> {
        let target = target.to_owned();
        match self {
            Kind::Cloudflare => vec!["tunnel".into(), "--no-autoupdate".into(), "--url".into(), target],
            Kind::Tailscale => vec!["serve".into(), target],
            Kind::TailscaleFunnel => vec!["funnel".into(), target],
        }
    }

    /// The command it runs, for messages.
    pub fn command_line(self, target: &str) -> String {
        std::iter::once(self.program().to_owned()).chain(self.args(target)).collect::<Vec<_>>().join(" ")
    }

    fn install_hint(self) -> &'static str {
        match self {
            Kind::Cloudflare => {
                "install it (https://developers.cloudflare.com/cloudflare-one/connections/connect-networks/downloads/, \
                 or `brew install cloudflared`)"
            }
            Kind::Tailscale | Kind::TailscaleFunnel => {
                "install Tailscale and log in (https://tailscale.com/download, then `tailscale up`)"
            }
        }
    }

    /// Fails with one line saying how to install the tool when it is not on `PATH` (checked
    /// before anything else starts, so a missing tool leaves nothing running).
    pub fn check_installed(self) -> anyhow::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let program = self.program();
        let path = std::env::var_os("PATH").unwrap_or_default();
        let found = std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join(program))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        });
        if !found {
            bail!("`{program}` is not installed (not found on PATH): {}", self.install_hint());
        }
        Ok(())
    }

    /// Whether `url` is the address the tool reports for the tunnel (cloudflared also prints
    /// links to its docs and terms, and its API's address when it fails).
    fn is_public_url(self, url: &str) -> bool {
        let host = url.trim_start_matches("https://").split(['/', ':']).next().unwrap_or("");
        match self {
            Kind::Cloudflare => host.ends_with(".trycloudflare.com") && host != "api.trycloudflare.com",
            Kind::Tailscale | Kind::TailscaleFunnel => !host.is_empty(),
        }
    }
}

/// `zcode-acp tunnel-exec --parent <pid> -- <tool> <args>`: becomes `tool` with SIGKILL as its
/// parent-death signal; returns only when that fails.
pub fn exec_tool(parent: u32, command: &[String]) -> anyhow::Result<std::process::ExitCode> {
    let Some((program, args)) = command.split_first() else { bail!("no tool to run") };
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).context("cannot ask for a parent-death signal")?;
    // `up` may have died before the request above: then nothing would ever signal the tool.
    if nix::unistd::getppid().as_raw() as u32 != parent {
        return Ok(std::process::ExitCode::FAILURE);
    }
    let err = Command::new(program).args(args).exec();
    eprintln!("zcode-acp: cannot start `{program}`: {err}");
    Ok(std::process::ExitCode::from(127))
}

/// A running tunnel tool: killed (its whole process group) when dropped.
pub struct Tunnel {
    group: Group,
    /// The public `https://` address it reported (no trailing slash).
    pub url: String,
}

impl Tunnel {
    /// Starts `kind` in front of `target` (`up`'s origin, `http://127.0.0.1:PORT`) and waits
    /// for its public URL; `None` when `stop` fires first (the tool is ended then).
    pub fn start(kind: Kind, target: &str, stop: &CancellationToken) -> anyhow::Result<Option<Tunnel>> {
        let program = kind.program();
        let args = kind.args(target);
        let exe = std::env::current_exe().context("cannot find this program to start the tunnel")?;
        let mut cmd = Command::new(exe);
        cmd.args(["tunnel-exec", "--parent", &std::process::id().to_string(), "--", program])
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // The tool is someone else's program: it gets none of ours (the token above all).
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("ZCODE_ACP_") {
                cmd.env_remove(name);
            }
        }
        // Its own group: the terminal's Ctrl-C reaches `up`, which then ends it on purpose.
        let spawned = match Group::spawn(&mut cmd) {
            Ok(s) => s,
            Err(e) => return Err(e).with_context(|| format!("cannot start `{program}`")),
        };
        let (tx, rx) = mpsc::channel::<String>();
        // Both streams are read to their end, also after the URL: a tool whose pipe fills up
        // would stall.
        let out = spawned.stdout.map(|s| Box::new(s) as Box<dyn Read + Send>);
        let err = spawned.stderr.map(|s| Box::new(s) as Box<dyn Read + Send>);
        for stream in [out, err].into_iter().flatten() {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    let _ = tx.send(line);
                }
            });
        }
        drop(tx);
        let mut tunnel = Tunnel { group: spawned.group, url: String::new() };
        let deadline = Instant::now() + URL_WAIT;
        let mut last = String::new();
        loop {
            if stop.is_cancelled() {
                return Ok(None);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left.min(Duration::from_millis(100))) {
                Ok(line) => {
                    if let Some(url) = https_urls(&line).find(|u| kind.is_public_url(u)) {
                        tunnel.url = url.trim_end_matches('/').to_owned();
                        return Ok(Some(tunnel));
                    }
                    if !line.trim().is_empty() {
                        last = line;
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = tunnel
                        .group
                        .wait_exit(Duration::from_secs(5))
                        .map_or_else(|| "still running".to_owned(), |s| s.to_string());
                    bail!(
                        "`{program} {}` ended ({status}) without a public URL: {}",
                        args.join(" "),
                        last.trim()
                    )
                }
                Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < deadline => {}
                Err(mpsc::RecvTimeoutError::Timeout) => bail!(
                    "`{program} {}` printed no public URL within {} s: {}",
                    args.join(" "),
                    URL_WAIT.as_secs(),
                    last.trim()
                ),
            }
        }
    }

    /// The tool's process id (also its process group).
    pub fn pid(&self) -> u32 {
        self.group.id()
    }

    /// Whether the tool has exited (`zcode-acp stop` ends it before the hub).
    pub fn exited(&self) -> bool {
        self.group.try_exit().is_some()
    }
}

impl Drop for Tunnel {
    fn drop(&mut self) {
        self.group.signal(Signal::SIGTERM);
        // Then the group's own drop: SIGKILL to what is left, the leader reaped.
        let _ = self.group.wait_exit(KILL_GRACE);
    }
}

/// The `https://` URLs in `line` (cloudflared draws a box of `|` around its URL).
fn https_urls(line: &str) -> impl Iterator<Item = &str> {
    line.match_indices("https://").map(move |(i, _)| {
        let rest = &line[i..];
        let end = rest
            .find(|c: char| c.is_whitespace() || matches!(c, '|' | '"' | '\'' | '<' | '>'))
            .unwrap_or(rest.len());
        &rest[..end]
    })
}

/// `run/tunnel`: the tunnel a running `up --tunnel` started (`<up's pid> <tool's pid> <url>`),
/// for `zcode-acp status`, for `stop` (which ends the tool before the hub) and for the hub (no
/// idle exit while it runs). Removed when the `up` ends (if it still names this one: the last
/// `up --tunnel` to start is the one shown).
pub struct Advert {
    path: std::path::PathBuf,
    line: String,
}

/// What `run/tunnel` names, once checked in `/proc`.
pub struct Advertised {
    /// The public address.
    pub url: String,
    /// The `up` that started it.
    pub up: u32,
    /// The tunnel tool, when it still runs as that `up`'s child.
    pub tool: Option<u32>,
}

impl Advert {
    /// Writes the file (mode 0600); a failure only costs `status` its tunnel line and `stop`
    /// its way to the tool (`up` still ends it when `up` ends).
    pub fn write(paths: &zcode_shared::paths::Paths, tunnel: &Tunnel) -> Advert {
        let path = paths.run_dir.join(zcode_hub::daemon::TUNNEL_FILE);
        let line = format!("{} {} {}\n", std::process::id(), tunnel.pid(), tunnel.url);
        let _ = zcode_shared::paths::Paths::ensure_private_dir(&paths.run_dir)
            .and_then(|()| zcode_shared::config::write_private_atomic(&path, line.as_bytes()));
        Advert { path, line }
    }

    /// The tunnel, when the `up` that started it still runs.
    pub fn read(paths: &zcode_shared::paths::Paths) -> Option<Advertised> {
        let text = std::fs::read_to_string(paths.run_dir.join(zcode_hub::daemon::TUNNEL_FILE)).ok()?;
        let mut fields = text.trim().splitn(3, ' ');
        let up: u32 = fields.next()?.parse().ok()?;
        let tool: u32 = fields.next()?.parse().ok()?;
        let url = fields.next()?.to_owned();
        let p = crate::procs::Proc::read(up)?;
        if !(p.ours() && p.role() == Some("up")) {
            return None;
        }
        let tool = crate::procs::Proc::read(tool).filter(|t| t.ours() && t.ppid == up).map(|t| t.pid);
        Some(Advertised { url, up, tool })
    }
}

impl Drop for Advert {
    fn drop(&mut self) {
        if std::fs::read_to_string(&self.path).is_ok_and(|l| l == self.line) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_is_found_in_what_the_tools_print() {
        let cf =
            "2024-01-01T00:00:00Z INF |  https://four-dashed-word-url.trycloudflare.com                |";
        let url = https_urls(cf).find(|u| Kind::Cloudflare.is_public_url(u));
        assert_eq!(url, Some("https://four-dashed-word-url.trycloudflare.com"));
        let docs = "INF Thank you … following: https://developers.cloudflare.com/cloudflare-one/connections";
        assert_eq!(https_urls(docs).find(|u| Kind::Cloudflare.is_public_url(u)), None);
        let api = r#"failed to request quick Tunnel: Post "https://api.trycloudflare.com/tunnel": EOF"#;
        assert_eq!(https_urls(api).find(|u| Kind::Cloudflare.is_public_url(u)), None);
        let ts = "https://laptop.tail1234.ts.net/";
        assert_eq!(https_urls(ts).find(|u| Kind::Tailscale.is_public_url(u)), Some(ts));
    }
}
