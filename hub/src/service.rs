//! `zcode-acp service`: the hub as a user service, started at login and restarted on failure:
//! a systemd user unit on Linux, a launchd agent on macOS (`install`, `status`, `uninstall`,
//! `print`), and `service run`, what the unit runs.
//!
//! `service run` is a small supervisor, the unit's main process: it starts the home's hub
//! (`hub --background`, with idle exit off, `ZCODE_ACP_HUB_IDLE_MS=0`, inherited by the
//! successors of self-upgrades), runs the tunnel for as long as it runs, and copies `hub.log`
//! to its own standard error (the journal; `hub.log` stays). It stays the main process through
//! upgrades (the hub hands its socket to a successor in the same cgroup: the service manager
//! sees nothing). It exits with a failure when the hub is gone for good or the tunnel ended,
//! so the service manager restarts the lot; on SIGTERM it ends the tunnel first, then the hub.
//! The unit carries only `ZCODE_ACP_HOME` and `PATH` from the installing shell: never a token.

use crate::pairing::running_hub_port;
use crate::procs::Proc;
use crate::tunnel;
use anyhow::Context;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};
use zcode_shared::config::Config;

/// The systemd unit's name.
pub const UNIT: &str = "zcode-acp.service";
/// The launchd agent's label.
pub const LABEL: &str = "dev.zcode-acp.hub";
/// How long the hub may be missing (an upgrade's handover takes milliseconds) before `service
/// run` gives up on it and exits, for the service manager to restart everything.
const HUB_GONE_GRACE: Duration = Duration::from_secs(3);

/// What `service` does.
#[derive(clap::Subcommand)]
pub enum ServiceCommand {
    /// Write the user service (systemd user unit / launchd agent) and start it now and at login
    Install {
        /// Run this tunnel with the hub, for phones outside this machine
        #[arg(long, value_enum)]
        tunnel: Option<tunnel::Kind>,
    },
    /// Whether the service is installed and running, and the hub it runs
    Status,
    /// Stop the service and remove it
    Uninstall,
    /// Print the unit (or launchd plist) `install` writes, without writing anything
    Print {
        /// Run this tunnel with the hub
        #[arg(long, value_enum)]
        tunnel: Option<tunnel::Kind>,
        /// Which service manager's file
        #[arg(long, value_enum, default_value_t = Platform::current())]
        platform: Platform,
    },
    /// What the service runs: the hub (never idle-exiting) and the tunnel, in the foreground
    Run {
        /// Run this tunnel with the hub
        #[arg(long, value_enum)]
        tunnel: Option<tunnel::Kind>,
    },
}

/// A service manager.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Platform {
    /// A systemd user unit.
    Linux,
    /// A launchd agent.
    Macos,
}

impl Platform {
    fn current() -> Platform {
        if cfg!(target_os = "macos") { Platform::Macos } else { Platform::Linux }
    }
}

/// `zcode-acp service …`.
pub(crate) fn service(command: ServiceCommand) -> anyhow::Result<ExitCode> {
    match command {
        ServiceCommand::Install { tunnel } => install(tunnel),
        ServiceCommand::Status => status(),
        ServiceCommand::Uninstall => uninstall(),
        ServiceCommand::Print { tunnel, platform } => {
            let spec = Spec::new(tunnel)?;
            print!("{}", spec.render(platform)?);
            Ok(ExitCode::SUCCESS)
        }
        ServiceCommand::Run { tunnel } => run(tunnel),
    }
}

/// The command line and environment the service runs.
struct Spec {
    argv: Vec<String>,
    env: Vec<(&'static str, String)>,
    log: PathBuf,
}

impl Spec {
    fn new(tunnel: Option<tunnel::Kind>) -> anyhow::Result<Spec> {
        let cfg = Config::load()?;
        let exe = std::env::current_exe().context("cannot find this executable")?;
        let exe = std::fs::canonicalize(&exe).unwrap_or(exe);
        let mut argv = vec![text(&exe)?, "service".into(), "run".into()];
        if let Some(kind) = tunnel {
            argv.extend(["--tunnel".into(), kind_name(kind)]);
        }
        let mut env = Vec::new();
        if let Some(home) = std::env::var_os(zcode_shared::paths::HOME_VAR) {
            env.push((zcode_shared::paths::HOME_VAR, text(Path::new(&home))?));
        }
        if let Some(path) = std::env::var_os("PATH") {
            // The tunnel tool and the agents the hub starts are found where this shell finds them.
            env.push(("PATH", text(Path::new(&path))?));
        }
        Ok(Spec { argv, env, log: cfg.paths.log_dir.join("hub.log") })
    }

    fn render(&self, platform: Platform) -> anyhow::Result<String> {
        match platform {
            Platform::Linux => Ok(self.unit()),
            Platform::Macos => Ok(self.plist()),
        }
    }

    /// The systemd user unit.
    fn unit(&self) -> String {
        let exec = self.argv.iter().map(|a| systemd_quote(a, true)).collect::<Vec<_>>().join(" ");
        let env: String = self
            .env
            .iter()
            .map(|(k, v)| format!("Environment={}\n", systemd_quote(&format!("{k}={v}"), false)))
            .collect();
        format!(
            "# Written by `zcode-acp service install`; `zcode-acp service uninstall` removes it.\n\
             [Unit]\n\
             Description=zcode-acp hub: remote access to this machine's ACP agents\n\
             After=network-online.target\n\
             Wants=network-online.target\n\
             \n\
             [Service]\n\
             Type=simple\n\
             ExecStart={exec}\n\
             {env}\
             # SIGTERM to `service run` alone: it ends the tunnel first, then the hub.\n\
             KillMode=mixed\n\
             TimeoutStopSec=20\n\
             Restart=on-failure\n\
             RestartSec=2\n\
             UMask=0077\n\
             \n\
             [Install]\n\
             WantedBy=default.target\n"
        )
    }

    /// The launchd agent (a property list).
    fn plist(&self) -> String {
        let args: String =
            self.argv.iter().map(|a| format!("    <string>{}</string>\n", xml_escape(a))).collect();
        let env: String = self
            .env
            .iter()
            .map(|(k, v)| {
                format!("    <key>{}</key>\n    <string>{}</string>\n", xml_escape(k), xml_escape(v))
            })
            .collect();
        let log = xml_escape(&self.log.display().to_string());
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
             <!DOCTYPE plist PUBLIC \"-//Apple//DTD PLIST 1.0//EN\" \"http://www.apple.com/DTDs/PropertyList-1.0.dtd\">\n\
             <plist version=\"1.0\">\n\
             <dict>\n  <key>Label</key>\n  <string>{LABEL}</string>\n\
             \x20 <key>ProgramArguments</key>\n  <array>\n{args}  </array>\n\
             \x20 <key>EnvironmentVariables</key>\n  <dict>\n{env}  </dict>\n\
             \x20 <key>RunAtLoad</key>\n  <true/>\n\
             \x20 <key>KeepAlive</key>\n  <dict>\n    <key>SuccessfulExit</key>\n    <false/>\n  </dict>\n\
             \x20 <key>ProcessType</key>\n  <string>Background</string>\n\
             \x20 <key>Umask</key>\n  <integer>63</integer>\n\
             \x20 <key>StandardErrorPath</key>\n  <string>{log}.service</string>\n\
             \x20 <key>StandardOutPath</key>\n  <string>{log}.service</string>\n\
             </dict>\n</plist>\n"
        )
    }
}

/// A path as text for a service file; line breaks and other control characters are refused
/// (they would end the line they are written on and add directives of their own).
fn text(p: &Path) -> anyhow::Result<String> {
    let s = p
        .to_str()
        .with_context(|| format!("{} is not valid UTF-8: cannot write it in a service file", p.display()))?;
    anyhow::ensure!(
        !s.chars().any(char::is_control),
        "{s:?} holds a control character: cannot write it in a service file"
    );
    Ok(s.to_owned())
}

fn kind_name(kind: tunnel::Kind) -> String {
    clap::ValueEnum::to_possible_value(&kind).map_or_else(String::new, |v| v.get_name().to_owned())
}

/// One word of a systemd directive, double-quoted: `\` and `"` escaped, `%` (a specifier)
/// doubled, and in `ExecStart` `$` (a variable) doubled.
fn systemd_quote(s: &str, exec: bool) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '\\' | '"' => {
                out.push('\\');
                out.push(c);
            }
            '%' => out.push_str("%%"),
            '$' if exec => out.push_str("$$"),
            _ => out.push(c),
        }
    }
    out.push('"');
    out
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

/// Where the service file goes: `$XDG_CONFIG_HOME/systemd/user/` (else `~/.config/…`), or
/// `~/Library/LaunchAgents/`.
fn service_path(platform: Platform) -> anyhow::Result<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from).filter(|p| p.is_absolute());
    match platform {
        Platform::Linux => {
            let config = std::env::var_os("XDG_CONFIG_HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .or_else(|| home.map(|h| h.join(".config")))
                .context("neither XDG_CONFIG_HOME nor HOME is set: cannot tell where user units go")?;
            Ok(config.join("systemd/user").join(UNIT))
        }
        Platform::Macos => Ok(home
            .context("HOME is not set: cannot tell where launch agents go")?
            .join("Library/LaunchAgents")
            .join(format!("{LABEL}.plist"))),
    }
}

/// Runs the service manager's `args`; `Err` with what it said when it failed or is missing.
fn manager(program: &str, args: &[&str]) -> Result<String, String> {
    match Command::new(program).args(args).stdin(Stdio::null()).output() {
        Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout).trim().to_owned()),
        Ok(o) => {
            let said = String::from_utf8_lossy(&o.stderr).trim().to_owned();
            let said =
                if said.is_empty() { String::from_utf8_lossy(&o.stdout).trim().to_owned() } else { said };
            Err(format!("`{program} {}` failed ({}): {said}", args.join(" "), o.status))
        }
        Err(e) => Err(format!("cannot run `{program}`: {e}")),
    }
}

fn install(tunnel: Option<tunnel::Kind>) -> anyhow::Result<ExitCode> {
    if let Some(Err(e)) = tunnel.map(tunnel::Kind::check_installed) {
        eprintln!("zcode-acp service: {e}");
        return Ok(ExitCode::FAILURE);
    }
    let platform = Platform::current();
    let spec = Spec::new(tunnel)?;
    let path = service_path(platform)?;
    let dir = path.parent().context("the service file's directory")?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let body = spec.render(platform)?;
    // Written whole or not at all: a half-written unit must never be enabled.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, &body)
        .and_then(|()| std::fs::rename(&tmp, &path))
        .with_context(|| format!("cannot write {}", path.display()))?;
    println!("zcode-acp service: wrote {}", path.display());
    let started = match platform {
        Platform::Linux => manager("systemctl", &["--user", "daemon-reload"])
            .and_then(|_| manager("systemctl", &["--user", "enable", "--now", UNIT])),
        Platform::Macos => {
            let domain = format!("gui/{}", nix::unistd::getuid());
            let file = path.display().to_string();
            // A loaded agent is replaced: bootout first (an error there only means none was).
            let _ = manager("launchctl", &["bootout", &domain, &file]);
            manager("launchctl", &["bootstrap", &domain, &file])
        }
    };
    match started {
        Ok(_) => {
            println!("zcode-acp service: started; it starts again at login and after a failure");
            println!("  status: zcode-acp service status    logs: {}", log_hint(platform, &spec.log));
            Ok(ExitCode::SUCCESS)
        }
        Err(why) => {
            eprintln!(
                "zcode-acp service: the file is written, but the service manager did not start it: {why}"
            );
            match platform {
                Platform::Linux => eprintln!(
                    "  in your login session run `systemctl --user daemon-reload && systemctl --user enable --now {UNIT}` \
                     (and `loginctl enable-linger $USER` to start it at boot, before you log in)"
                ),
                Platform::Macos => {
                    eprintln!("  run `launchctl bootstrap gui/$(id -u) {}`", path.display())
                }
            }
            Ok(ExitCode::FAILURE)
        }
    }
}

fn log_hint(platform: Platform, log: &Path) -> String {
    match platform {
        Platform::Linux => format!("journalctl --user -u {UNIT} (and {})", log.display()),
        Platform::Macos => format!("{}", log.display()),
    }
}

fn status() -> anyhow::Result<ExitCode> {
    let cfg = Config::load()?;
    let platform = Platform::current();
    let path = service_path(platform)?;
    let installed = path.exists();
    match installed {
        true => println!("service: installed ({})", path.display()),
        false => println!("service: not installed (`zcode-acp service install` installs it)"),
    }
    if installed {
        let state = match platform {
            Platform::Linux => {
                let active = manager("systemctl", &["--user", "is-active", UNIT]);
                let enabled = manager("systemctl", &["--user", "is-enabled", UNIT]);
                match (active, enabled) {
                    (Ok(a), Ok(e)) => format!("{a}, {e}"),
                    (Err(why), _) | (_, Err(why)) => why,
                }
            }
            Platform::Macos => {
                let target = format!("gui/{}/{LABEL}", nix::unistd::getuid());
                manager("launchctl", &["print", &target]).map_or_else(|why| why, |_| "loaded".into())
            }
        };
        println!("manager: {state}");
    }
    let hub = running_hub_port(&cfg);
    match (hub, hub_pid(&cfg.paths)) {
        (Some(port), Some(pid)) => println!("hub:     running (pid {pid}) on {}:{port}", cfg.remote.hub_host),
        (Some(port), None) => println!("hub:     answering on {}:{port}", cfg.remote.hub_host),
        (None, _) => println!("hub:     not running"),
    }
    Ok(if installed && hub.is_some() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn uninstall() -> anyhow::Result<ExitCode> {
    let platform = Platform::current();
    let path = service_path(platform)?;
    if !path.exists() {
        println!("zcode-acp service: not installed ({} does not exist)", path.display());
        return Ok(ExitCode::SUCCESS);
    }
    let stopped = match platform {
        Platform::Linux => manager("systemctl", &["--user", "disable", "--now", UNIT]),
        Platform::Macos => {
            let domain = format!("gui/{}", nix::unistd::getuid());
            manager("launchctl", &["bootout", &domain, &path.display().to_string()])
        }
    };
    std::fs::remove_file(&path).with_context(|| format!("cannot remove {}", path.display()))?;
    println!("zcode-acp service: removed {}", path.display());
    if platform == Platform::Linux {
        let _ = manager("systemctl", &["--user", "daemon-reload"]);
    }
    match stopped {
        Ok(_) => Ok(ExitCode::SUCCESS),
        Err(why) => {
            eprintln!(
                "zcode-acp service: the service manager did not stop it: {why} (`zcode-acp stop` stops the hub)"
            );
            Ok(ExitCode::FAILURE)
        }
    }
}

/// The pid of this home's running hub: the one `run/hub.pid` names, when it is a live
/// `zcode-acp hub` of this user with this home (the file may be stale or empty mid-upgrade).
fn hub_pid(paths: &zcode_shared::paths::Paths) -> Option<u32> {
    let pid = std::fs::read_to_string(paths.run_dir.join("hub.pid")).ok()?.trim().parse().ok()?;
    Proc::read(pid)
        .filter(|p| p.ours() && p.role() == Some("hub") && p.data_dir().as_ref() == Some(&paths.data_dir))
        .map(|p| p.pid)
}

/// `service run`: see the module's header.
fn run(tunnel: Option<tunnel::Kind>) -> anyhow::Result<ExitCode> {
    let cfg = Config::load()?;
    if let Some(Err(e)) = tunnel.map(tunnel::Kind::check_installed) {
        eprintln!("zcode-acp service: {e}");
        return Ok(ExitCode::FAILURE);
    }
    zcode_shared::token::resolve(&cfg)?;
    let stop = crate::signals::signals_now()?;
    let log_path = cfg.paths.log_dir.join("hub.log");
    zcode_shared::paths::Paths::ensure_private_dir(&cfg.paths.log_dir)?;
    // launchd writes standard error to a file next to hub.log already.
    let _copy = (Platform::current() == Platform::Linux).then(|| LogCopy::start(&log_path));
    if hub_pid(&cfg.paths).is_none() {
        // Never idle-exiting, and so are the successors of its upgrades (they inherit this).
        let exe = std::env::current_exe().context("cannot find this executable to start the hub")?;
        let status = Command::new(exe)
            .args(["hub", "--background"])
            .env("ZCODE_ACP_HUB_IDLE_MS", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .context("cannot start the hub")?;
        anyhow::ensure!(status.success(), "cannot start the hub ({status}): see {}", log_path.display());
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let port = loop {
        if let Some(p) = running_hub_port(&cfg) {
            break p;
        }
        if stop.is_cancelled() {
            return Ok(ExitCode::SUCCESS);
        }
        anyhow::ensure!(Instant::now() < deadline, "the hub did not start: see {}", log_path.display());
        std::thread::sleep(Duration::from_millis(100));
    };
    // As `up` does: the tool forwards to this process's own port, which relays only to a hub of
    // this user (a killed hub's port may be taken by anyone). Declared first: dropped after it.
    let origin = match tunnel {
        Some(_) => Some(tunnel::origin::Origin::start(&cfg)?),
        None => None,
    };
    let tunnel = match tunnel.zip(origin.as_ref()) {
        Some((kind, origin)) => match tunnel::Tunnel::start(kind, &origin.url(), &stop)? {
            Some(t) => Some(t),
            None => return Ok(ExitCode::SUCCESS),
        },
        None => None,
    };
    let advert = tunnel.as_ref().map(|t| tunnel::Advert::write(&cfg.paths, t));
    match &tunnel {
        Some(t) => eprintln!("zcode-acp service: hub on {}:{port}, tunnel {}", cfg.remote.hub_host, t.url),
        None => eprintln!("zcode-acp service: hub on {}:{port}", cfg.remote.hub_host),
    }
    let mut missing_since: Option<Instant> = None;
    let failure = loop {
        if stop.is_cancelled() {
            break None;
        }
        if tunnel.as_ref().is_some_and(tunnel::Tunnel::exited) {
            break Some("the tunnel ended".to_owned());
        }
        match hub_pid(&cfg.paths) {
            Some(_) => missing_since = None,
            None => {
                let since = *missing_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= HUB_GONE_GRACE {
                    break Some("the hub exited".to_owned());
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // The tunnel first: it must never forward to a port the hub has let go.
    drop(tunnel);
    drop(advert);
    drop(origin);
    if let Some(pid) = hub_pid(&cfg.paths) {
        for (pid, why) in crate::procs::terminate(&[pid], Duration::from_secs(10)) {
            eprintln!("zcode-acp service: the hub (pid {pid}) did not stop: {why}");
        }
    }
    match failure {
        None => {
            eprintln!("zcode-acp service: stopped");
            Ok(ExitCode::SUCCESS)
        }
        Some(why) => {
            eprintln!("zcode-acp service: {why}: exiting for the service manager to restart it");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// Copies what is appended to `hub.log` to standard error (the journal) until dropped.
struct LogCopy {
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl LogCopy {
    fn start(path: &Path) -> LogCopy {
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = done.clone();
        let path = path.to_owned();
        let start = std::fs::metadata(&path).map_or(0, |m| m.len());
        std::thread::spawn(move || {
            let mut pos = start;
            let mut buf = vec![0u8; 64 * 1024];
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(mut f) = std::fs::File::open(&path) {
                    let len = f.metadata().map_or(0, |m| m.len());
                    // Truncated or replaced: from its start.
                    if len < pos {
                        pos = 0;
                    }
                    if len > pos && f.seek(std::io::SeekFrom::Start(pos)).is_ok() {
                        while let Ok(n) = f.read(&mut buf) {
                            if n == 0 {
                                break;
                            }
                            pos += n as u64;
                            let _ = std::io::stderr().lock().write_all(&buf[..n]);
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        LogCopy { done }
    }
}

impl Drop for LogCopy {
    fn drop(&mut self) {
        self.done.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_keeps_hostile_words_one_word() {
        assert_eq!(systemd_quote(r#"a "b" \c %d $e"#, true), r#""a \"b\" \\c %%d $$e""#);
        assert_eq!(systemd_quote("A=$x", false), r#""A=$x""#);
        assert_eq!(xml_escape("<a & 'b'>"), "&lt;a &amp; &apos;b&apos;&gt;");
        assert!(text(Path::new("/tmp/a\nExecStartPre=/bin/evil")).is_err());
    }
}
