//! Starting bridges for remote create and resume: a visible terminal window running
//! `zcode-acp chat` when the machine has one, else a headless `zcode-acp serve`.
//!
//! Everything is spawned from argv arrays. The one place a shell is involved (a window's
//! launch script, and a user's own `ZCODE_ACP_HUB_TERMINAL_COMMAND`) gets every path and title
//! single-quoted, so nothing from a request can run as a command. Titles lose their control
//! sequences (`zcode_shared::text::title`); tmux, which expands `#(…)` in a window name, gets
//! every `#` doubled ([`tmux_literal`]). tmux runs on the home's own server ([`tmux_server`]).
//!
//! A resume is the window's `chat --resume <id>`; a headless bridge needs nothing for it (the
//! client's `session/load` of the id is the resume). A terminal program started for a window is
//! waited for on a thread of its own, so none is left a zombie when its window closes.
//!
//! The token reaches the window's chat through the launch script only (0700, in the private
//! run directory, removed as it starts): the terminal program and the tmux server run without
//! it, so no global environment holds it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use zcode_shared::config::Config;

/// What was started.
#[derive(Debug)]
pub enum Started {
    /// A terminal window (named recipe); its bridge registers when the window's chat starts.
    Window(String),
    /// A headless serve bridge, whose exit can be watched.
    Headless(zcode_shared::procgroup::Group),
}

/// What to start.
#[derive(Clone, Debug)]
pub struct Launch {
    /// The project directory (realpath).
    pub workspace: PathBuf,
    /// A session to resume, if any: the window's chat boots into it (a headless bridge gets
    /// it from the client's `session/load`).
    pub session: Option<String>,
    /// The agent by name (`--agent`); `None`: the default.
    pub agent: Option<String>,
    /// The window's title.
    pub title: String,
    /// Pairs the bridge's registration with this spawn.
    pub nonce: String,
    /// Only headless (history listing), never a window.
    pub headless_only: bool,
}

/// Quotes a string for `sh`: `'…'` with embedded quotes as `'\''`.
pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// A name tmux shows as written: tmux expands formats (`#(command)`, `#{…}`) in window names,
/// and `##` is its literal `#`.
pub fn tmux_literal(s: &str) -> String {
    s.replace('#', "##")
}

/// The longest socket path tmux can use (`sun_path` is 108 bytes with its NUL on Linux).
const SOCKET_PATH_MAX: usize = 100;

/// Which tmux server windows go to: with `ZCODE_ACP_HOME` set, the home's own
/// (`-S <run>/tmux.sock`, or `-L zcode-acp-<hash of the home>` when that path is too long for a
/// socket), so a test or a second install never lands in the user's server; without it, the
/// user's default server, where they look for windows (no arguments).
pub fn tmux_server(cfg: &Config) -> Vec<OsString> {
    let home = std::env::var_os(zcode_shared::paths::HOME_VAR).filter(|h| !h.is_empty());
    let Some(home) = home else { return vec![] };
    let socket = cfg.paths.run_dir.join("tmux.sock");
    if socket.as_os_str().len() <= SOCKET_PATH_MAX
        && zcode_shared::paths::Paths::ensure_private_dir(&cfg.paths.run_dir).is_ok()
    {
        return vec!["-S".into(), socket.into()];
    }
    // FNV-1a: a stable name for the home (std's hasher is not stable across releases).
    use std::os::unix::ffi::OsStrExt;
    let hash = home
        .as_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3));
    vec!["-L".into(), format!("zcode-acp-{hash:016x}").into()]
}

/// The environment variable no terminal program or tmux server may inherit.
const TOKEN_VAR: &str = "ZCODE_ACP_REMOTE_TOKEN";

/// Starts the bridge for `l`: a window when configured and possible, else headless.
pub fn start(cfg: &Config, l: &Launch) -> std::io::Result<Started> {
    if !l.headless_only && cfg.remote.terminal.enabled {
        match window(cfg, l) {
            Ok(Some(name)) => return Ok(Started::Window(name)),
            Ok(None) => {}
            Err(e) => tracing::warn!("terminal window failed ({e}); starting a headless bridge instead"),
        }
    }
    headless(cfg, l).map(Started::Headless)
}

fn exe() -> std::io::Result<PathBuf> {
    std::env::current_exe()
}

/// A headless `zcode-acp serve` in the project, detached in its own process group, its output
/// in the logs directory.
fn headless(cfg: &Config, l: &Launch) -> std::io::Result<zcode_shared::procgroup::Group> {
    let _ = zcode_shared::paths::Paths::ensure_private_dir(&cfg.paths.log_dir);
    let log = zcode_shared::paths::append_private(&cfg.paths.log_dir.join("serve.log"))?;
    let mut cmd = Command::new(exe()?);
    cmd.arg("serve").arg("--cwd").arg(&l.workspace);
    if let Some(agent) = &l.agent {
        // One argument: a name that starts with `-` stays a value.
        cmd.arg(format!("--agent={agent}"));
    }
    cmd.current_dir(&l.workspace)
        .env("ZCODE_ACP_SPAWN_NONCE", &l.nonce)
        .env("ZCODE_ACP_REMOTE_ORIGIN", "serve")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    zcode_shared::procgroup::Group::spawn(&mut cmd).map(|s| s.group)
}

/// Writes the window's launch script (mode 0700): it removes itself, names the tab (OSC 0),
/// and execs the chat in the project. Returns its path.
fn launch_script(cfg: &Config, l: &Launch) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = cfg.paths.run_dir.join("launch");
    zcode_shared::paths::Paths::ensure_private_dir(&dir)?;
    sweep(&dir);
    let path = dir.join(format!("zcode-{}.command", l.nonce));
    let exe = exe()?;
    let title = zcode_shared::text::title(&l.title);
    let mut s = String::from("#!/bin/sh\nrm -f -- \"$0\"\n");
    s += &format!("printf '\\033]0;%s\\007' {}\n", sh_quote(&title));
    s += &format!("cd {} || exit 1\n", sh_quote(&l.workspace.display().to_string()));
    // The window does not inherit the hub's environment (tmux, a terminal app): pass on ours.
    for (k, v) in std::env::vars().filter(|(k, _)| k.starts_with("ZCODE_ACP_") || k == "RUST_LOG") {
        if k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            s += &format!("export {k}={}\n", sh_quote(&v));
        }
    }
    s += &format!("export ZCODE_ACP_SPAWN_NONCE={}\n", sh_quote(&l.nonce));
    s += &format!(
        "exec {} chat --cwd {}",
        sh_quote(&exe.display().to_string()),
        sh_quote(&l.workspace.display().to_string())
    );
    if let Some(sid) = &l.session {
        s += &format!(" --resume {}", sh_quote(sid));
    }
    if let Some(agent) = &l.agent {
        s += &format!(" {}", sh_quote(&format!("--agent={agent}")));
    }
    s.push('\n');
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o700).open(&path)?;
    std::io::Write::write_all(&mut f, s.as_bytes())?;
    Ok(path)
}

/// Removes launch scripts older than an hour (a window that never started).
fn sweep(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let old = e.metadata().and_then(|m| m.modified()).ok().and_then(|t| t.elapsed().ok());
        if old.is_some_and(|age| age.as_secs() > 3600) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Which recipe applies: the configured command, the configured app, or what this machine
/// has (a display with a known terminal, else tmux). `None`: headless.
fn recipe(cfg: &Config) -> Option<String> {
    if cfg.remote.terminal.command.is_some() {
        return Some("command".into());
    }
    if let Some(app) = &cfg.remote.terminal.app {
        return Some(app.to_ascii_lowercase());
    }
    if cfg!(target_os = "macos") {
        return Some("terminal".into());
    }
    let display = std::env::var_os("DISPLAY").is_some() || std::env::var_os("WAYLAND_DISPLAY").is_some();
    if display {
        for app in ["kitty", "wezterm", "alacritty", "gnome-terminal", "konsole", "xterm"] {
            if on_path(app) {
                return Some(app.into());
            }
        }
    }
    on_path("tmux").then(|| "tmux".into())
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

/// Opens the window; `Ok(None)` when no recipe applies.
fn window(cfg: &Config, l: &Launch) -> std::io::Result<Option<String>> {
    let Some(name) = recipe(cfg) else { return Ok(None) };
    let script = launch_script(cfg, l)?;
    let s = script.display().to_string();
    let title = zcode_shared::text::title(&l.title);
    let run = |program: &str, args: &[&str]| -> std::io::Result<()> {
        let status = Command::new(program)
            .args(args)
            .env_remove(TOKEN_VAR)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        if status.success() {
            Ok(())
        } else {
            Err(std::io::Error::other(format!("{program} exited with {status}")))
        }
    };
    let detached = |program: &str, args: &[&str]| -> std::io::Result<()> {
        let mut cmd = Command::new(program);
        cmd.args(args).env_remove(TOKEN_VAR).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        // It runs as long as its window: detached, its exit collected when it comes.
        zcode_shared::procgroup::Group::spawn(&mut cmd).map(|s| s.group.detach())
    };
    let result = match name.as_str() {
        "command" => {
            let template = cfg.remote.terminal.command.clone().unwrap_or_default();
            let line = template.replace("{script}", &sh_quote(&s));
            run("sh", &["-c", &line])
        }
        "tmux" => tmux_window(cfg, &title, &s),
        "kitty" => detached("kitty", &["--title", &title, "sh", &s]),
        "wezterm" => detached("wezterm", &["start", "--", "sh", &s]),
        "alacritty" => detached("alacritty", &["--title", &title, "-e", "sh", &s]),
        "gnome-terminal" => detached("gnome-terminal", &["--title", &title, "--", "sh", &s]),
        "konsole" => detached("konsole", &["-e", "sh", &s]),
        "xterm" => detached("xterm", &["-T", &title, "-e", "sh", &s]),
        "terminal" => run("open", &["-a", "Terminal", &s]),
        "iterm" | "iterm2" => run("open", &["-a", "iTerm", &s]),
        "ghostty" => run("open", &["-na", "Ghostty", "--args", "-e", "sh", &s]),
        "warp" => run("open", &["-a", "Warp", &s]),
        other if cfg!(target_os = "macos") => run("open", &["-a", other, &s]),
        other => Err(std::io::Error::other(format!("no launch recipe for terminal {other:?}"))),
    };
    match result {
        Ok(()) => Ok(Some(name)),
        Err(e) => {
            let _ = std::fs::remove_file(&script);
            Err(e)
        }
    }
}

/// A window named `title` running `sh <script>` in the `zcode-acp` session of the home's tmux
/// server, started without the token in its environment.
fn tmux_window(cfg: &Config, title: &str, script: &str) -> std::io::Result<()> {
    let server = tmux_server(cfg);
    let name = if title.is_empty() { "zcode".to_owned() } else { tmux_literal(title) };
    let tmux = |args: &[&str]| -> std::io::Result<bool> {
        let out = Command::new("tmux")
            .args(&server)
            .args(args)
            .env_remove(TOKEN_VAR)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()?;
        if !out.status.success() && !args.contains(&"has-session") {
            let err = String::from_utf8_lossy(&out.stderr);
            return Err(std::io::Error::other(format!("tmux {}: {}", args[0], err.trim())));
        }
        Ok(out.status.success())
    };
    if tmux(&["has-session", "-t", "zcode-acp"])? {
        tmux(&["new-window", "-d", "-t", "zcode-acp:", "-n", &name, "sh", script])?;
    } else {
        tmux(&["new-session", "-d", "-s", "zcode-acp", "-n", &name, "sh", script])?;
    }
    let how: Vec<String> = server.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    tracing::info!("opened a tmux window; to see it: tmux {} attach -t zcode-acp", how.join(" "));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_hostile_strings() {
        for nasty in ["a b", "it's", "$(touch /tmp/pwned)", "`id`", "x'; rm -rf / #", "\"q\""] {
            let out =
                Command::new("sh").arg("-c").arg(format!("printf %s {}", sh_quote(nasty))).output().unwrap();
            assert_eq!(String::from_utf8_lossy(&out.stdout), nasty);
        }
    }

    #[test]
    fn tmux_names_are_literal() {
        assert_eq!(tmux_literal("#(touch x) ##{y} z"), "##(touch x) ####{y} z");
        assert_eq!(tmux_literal("plain"), "plain");
    }
}
