//! The one config struct, parsed once: environment over `config.json` over built-in default.
//!
//! Settings are read through the [`Env`] trait, so precedence is tested with a `HashMap`
//! instead of the process environment.

mod file;
mod live;
pub mod quota;

pub use crate::env::{Env, ProcessEnv};
pub use file::{ConfigError, RawConfig, write_private_atomic};
pub use live::Live;

use crate::paths::Paths;
use file::type_name;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Default hub port.
pub const DEFAULT_HUB_PORT: u16 = 8377;
/// Default hub host: loopback only; the tunnel is what makes it public.
pub const DEFAULT_HUB_HOST: &str = "127.0.0.1";
/// First port a bridge tries for its loopback server.
pub const DEFAULT_BRIDGE_PORT: u16 = 8378;

/// Everything configurable, resolved.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where files live.
    pub paths: Paths,
    /// The remote-access settings.
    pub remote: Remote,
    /// Configured upstream agents.
    pub agents: Agents,
    /// The timing knobs.
    pub timings: Timings,
    /// `ZCODE_ACP_DEBUG`: verbose logs.
    pub debug: bool,
    /// The most messages the journal keeps per session (older whole turns are dropped).
    pub journal_max_messages: u64,
    /// `quota`: the plan-quota providers' credentials and limits.
    pub quota: quota::QuotaConfig,
}

/// Default of [`Config::journal_max_messages`].
pub const DEFAULT_JOURNAL_MAX_MESSAGES: u64 = 200_000;

/// `remote` in the file.
#[derive(Clone, Debug, PartialEq)]
pub struct Remote {
    /// The token from `ZCODE_ACP_REMOTE_TOKEN` or `remote.token`; `None` means the token file.
    pub token: Option<(String, TokenOrigin)>,
    /// Hub port; 0 lets the hub pick one and write it to the port file.
    pub hub_port: u16,
    /// Hub listen host.
    pub hub_host: String,
    /// First port a bridge tries for its loopback server.
    pub bridge_port: u16,
    /// Roots under which a remote create may start a session (`~` expanded).
    pub project_roots: Vec<PathBuf>,
    /// Terminal windows for remote creates.
    pub terminal: Terminal,
    /// The most remote creates starting a bridge at once (`remote.maxCreatesInFlight`).
    pub max_creates_in_flight: usize,
    /// The most serve bridges (windows and headless) alive per hub (`remote.maxServeBridges`).
    pub max_serve_bridges: usize,
    /// `remote.clientAddressHeader` / `ZCODE_ACP_CLIENT_ADDRESS_HEADER`: the header the
    /// tunnel puts the client's address in (`CF-Connecting-IP`, `X-Forwarded-For`, …),
    /// lower-cased. `None`: no forwarded address is believed; the peer's counts.
    pub client_address_header: Option<String>,
    /// `remote.pushSubject` / `ZCODE_ACP_PUSH_SUBJECT`: the contact (`mailto:` or `https:`)
    /// the hub's Web Push names to push services (RFC 8292's `sub`).
    pub push_subject: String,
}

/// Default of [`Remote::push_subject`]: the project's page (push services want a working
/// contact URL; `mailto:` addresses at `localhost` are refused by some).
pub const DEFAULT_PUSH_SUBJECT: &str = "https://github.com/zcode-acp/zcode-acp";

/// Default of [`Remote::max_creates_in_flight`].
pub const DEFAULT_MAX_CREATES_IN_FLIGHT: usize = 4;
/// Default of [`Remote::max_serve_bridges`].
pub const DEFAULT_MAX_SERVE_BRIDGES: usize = 32;

/// Where a configured token came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenOrigin {
    /// `ZCODE_ACP_REMOTE_TOKEN`.
    Env,
    /// `remote.token` in `config.json`.
    File,
}

/// `remote.terminal` in the file.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Terminal {
    /// `false` (or `ZCODE_ACP_HUB_TERMINAL=0`): never open windows, always headless.
    pub enabled: bool,
    /// A named launch recipe (`tmux`, `kitty`, …).
    pub app: Option<String>,
    /// A shell command with `{script}`; wins over `app`.
    pub command: Option<String>,
}

/// `agents` in the file: named commands and which one is the default.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Agents {
    /// Agents by name.
    pub named: BTreeMap<String, AgentCommand>,
    /// The default agent's name, if one is set.
    pub default: Option<String>,
}

/// The name the built-in demo agent goes by where agents are listed and chosen (`--agent`,
/// `POST /api/instances {agent}`): it is the default when `agents.default` is not set. A
/// configured agent of that name takes its place.
pub const DEMO_AGENT: &str = "demo-agent";

impl Agents {
    /// The default agent's command, if one is configured.
    pub fn default_agent(&self) -> Option<&AgentCommand> {
        self.named.get(self.default.as_deref()?)
    }

    /// The name of the agent a bridge runs when none is chosen: `agents.default`, else
    /// [`DEMO_AGENT`].
    pub fn default_name(&self) -> &str {
        self.default.as_deref().unwrap_or(DEMO_AGENT)
    }

    /// Every agent a client may choose: (name, command line for display; never its env). The
    /// built-in demo agent comes first when it is the default, then the configured ones by name.
    pub fn choices(&self) -> Vec<(String, String)> {
        let builtin = (self.default.is_none() && !self.named.contains_key(DEMO_AGENT))
            .then(|| (DEMO_AGENT.to_owned(), "zcode-acp demo-agent".to_owned()));
        builtin.into_iter().chain(self.named.iter().map(|(n, a)| (n.clone(), a.display()))).collect()
    }

    /// Whether `name` is one of [`Agents::choices`].
    pub fn knows(&self, name: &str) -> bool {
        self.named.contains_key(name) || (name == DEMO_AGENT && self.default.is_none())
    }
}

impl AgentCommand {
    /// The command line as people read it (program and arguments; the env stays out).
    pub fn display(&self) -> String {
        std::iter::once(self.command.as_str())
            .chain(self.args.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// How to start an upstream agent.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct AgentCommand {
    /// The program.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment.
    pub env: BTreeMap<String, String>,
}

/// The timing knobs (milliseconds in env and file), so tests never wait for production values.
#[derive(Clone, Debug, PartialEq)]
pub struct Timings {
    /// Bridge registration / heartbeat period.
    pub heartbeat: Duration,
    /// An instance is dropped this long after its last heartbeat.
    pub instance_ttl: Duration,
    /// Probe failures must span this long before an instance is pruned.
    pub probe_grace: Duration,
    /// WebSocket ping period.
    pub ping: Duration,
    /// The hub exits after this long with no instances and no relays.
    pub hub_idle: Duration,
    /// A serve bridge exits this long after its last client and turn.
    pub serve_idle: Duration,
    /// At most one hub spawn per bridge within this window.
    pub hub_spawn_throttle: Duration,
    /// A request's headers must reach a bridge's loopback server within this long.
    pub header_timeout: Duration,
    /// Test knob (debug builds only, `ZCODE_ACP_USAGE_BACKDATE_MS`): a bridge stamps the token
    /// usage it records this long in the past (0).
    pub usage_backdate: Duration,
}

/// (env var, file key, default ms, setter) for each timing knob.
type Knob = (&'static str, &'static str, u64, fn(&mut Timings) -> &mut Duration);

const KNOBS: [Knob; 8] = [
    ("ZCODE_ACP_HEARTBEAT_MS", "timings.heartbeatMs", 10_000, |t| &mut t.heartbeat),
    ("ZCODE_ACP_INSTANCE_TTL_MS", "timings.instanceTtlMs", 30_000, |t| &mut t.instance_ttl),
    ("ZCODE_ACP_PROBE_GRACE_MS", "timings.probeGraceMs", 8_000, |t| &mut t.probe_grace),
    ("ZCODE_ACP_PING_MS", "timings.pingMs", 30_000, |t| &mut t.ping),
    ("ZCODE_ACP_HUB_IDLE_MS", "timings.hubIdleMs", 600_000, |t| &mut t.hub_idle),
    ("ZCODE_ACP_SERVE_IDLE_MS", "timings.serveIdleMs", 600_000, |t| &mut t.serve_idle),
    ("ZCODE_ACP_HUB_SPAWN_THROTTLE_MS", "timings.hubSpawnThrottleMs", 60_000, |t| &mut t.hub_spawn_throttle),
    ("ZCODE_ACP_HEADER_TIMEOUT_MS", "timings.headerTimeoutMs", 10_000, |t| &mut t.header_timeout),
];

impl Default for Timings {
    fn default() -> Timings {
        let mut t = Timings {
            heartbeat: Duration::ZERO,
            instance_ttl: Duration::ZERO,
            probe_grace: Duration::ZERO,
            ping: Duration::ZERO,
            hub_idle: Duration::ZERO,
            serve_idle: Duration::ZERO,
            hub_spawn_throttle: Duration::ZERO,
            header_timeout: Duration::ZERO,
            usage_backdate: Duration::ZERO,
        };
        for (_, _, ms, field) in KNOBS {
            *field(&mut t) = Duration::from_millis(ms);
        }
        t
    }
}

impl Config {
    /// Loads the config from the process environment and the file it points at.
    pub fn load() -> Result<Config, ConfigError> {
        Config::load_from(&ProcessEnv)
    }

    /// Loads the config from `env` and the file its paths point at.
    pub fn load_from(env: &dyn Env) -> Result<Config, ConfigError> {
        let paths = Paths::resolve(env)?;
        let raw = RawConfig::read(&paths.config_file)?;
        Config::from_parts(paths, &raw, env)
    }

    /// The port the hub listens on: the configured one, else (port 0) the port file's.
    pub fn hub_port_now(&self) -> Option<u16> {
        match self.remote.hub_port {
            0 => self.paths.read_hub_port(),
            p => Some(p),
        }
    }

    /// Resolves every setting from an already-read file and the environment.
    pub fn from_parts(paths: Paths, raw: &RawConfig, env: &dyn Env) -> Result<Config, ConfigError> {
        let var = |k: &str| env.get(k).filter(|v| !v.is_empty());
        let token = match var("ZCODE_ACP_REMOTE_TOKEN") {
            Some(t) => Some((t, TokenOrigin::Env)),
            None => raw.str("remote.token")?.filter(|t| !t.is_empty()).map(|t| (t, TokenOrigin::File)),
        };
        let home = var("HOME").map(PathBuf::from);
        let project_roots = match var("ZCODE_ACP_PROJECT_ROOTS") {
            Some(v) => v.split(':').filter(|s| !s.is_empty()).map(str::to_owned).collect(),
            None => raw.strings("remote.projectRoots")?.unwrap_or_default(),
        };
        let terminal = Terminal {
            enabled: match var("ZCODE_ACP_HUB_TERMINAL") {
                Some(v) => env_bool("ZCODE_ACP_HUB_TERMINAL", &v)?,
                None => raw.bool("remote.terminal.enabled")?.unwrap_or(true),
            },
            app: var("ZCODE_ACP_HUB_TERMINAL_APP").or(raw.str("remote.terminal.app")?),
            command: var("ZCODE_ACP_HUB_TERMINAL_COMMAND").or(raw.str("remote.terminal.command")?),
        };
        let remote = Remote {
            token,
            hub_port: port(var("ZCODE_ACP_HUB_PORT"), "ZCODE_ACP_HUB_PORT", raw, "remote.hubPort")?
                .unwrap_or(DEFAULT_HUB_PORT),
            hub_host: var("ZCODE_ACP_HUB_HOST")
                .or(raw.str("remote.hubHost")?)
                .unwrap_or_else(|| DEFAULT_HUB_HOST.to_owned()),
            bridge_port: port(
                var("ZCODE_ACP_REMOTE_PORT"),
                "ZCODE_ACP_REMOTE_PORT",
                raw,
                "remote.bridgePort",
            )?
            .unwrap_or(DEFAULT_BRIDGE_PORT),
            project_roots: project_roots.iter().map(|r| expand_tilde(r, home.as_deref())).collect(),
            terminal,
            max_creates_in_flight: positive(
                var("ZCODE_ACP_MAX_CREATES_IN_FLIGHT"),
                "ZCODE_ACP_MAX_CREATES_IN_FLIGHT",
                raw,
                "remote.maxCreatesInFlight",
            )?
            .unwrap_or(DEFAULT_MAX_CREATES_IN_FLIGHT),
            max_serve_bridges: positive(
                var("ZCODE_ACP_MAX_SERVE_BRIDGES"),
                "ZCODE_ACP_MAX_SERVE_BRIDGES",
                raw,
                "remote.maxServeBridges",
            )?
            .unwrap_or(DEFAULT_MAX_SERVE_BRIDGES),
            client_address_header: client_address_header(var("ZCODE_ACP_CLIENT_ADDRESS_HEADER"), raw)?,
            push_subject: push_subject(var("ZCODE_ACP_PUSH_SUBJECT"), raw)?,
        };
        let mut timings = Timings::default();
        for (env_key, file_key, _, field) in KNOBS {
            let ms = match var(env_key) {
                Some(v) => Some(v.trim().parse::<u64>().map_err(|_| ConfigError::Env {
                    var: env_key.to_owned(),
                    reason: format!("expected milliseconds as a whole number, got {v:?}"),
                })?),
                None => raw.u64(file_key)?,
            };
            if let Some(ms) = ms {
                *field(&mut timings) = Duration::from_millis(ms);
            }
        }
        if let Some(v) = crate::env::test_knob(env, "ZCODE_ACP_USAGE_BACKDATE_MS") {
            timings.usage_backdate =
                Duration::from_millis(v.trim().parse::<u64>().map_err(|_| ConfigError::Env {
                    var: "ZCODE_ACP_USAGE_BACKDATE_MS".into(),
                    reason: format!("expected milliseconds as a whole number, got {v:?}"),
                })?);
        }
        let debug = match var("ZCODE_ACP_DEBUG") {
            Some(v) => env_bool("ZCODE_ACP_DEBUG", &v)?,
            None => raw.bool("debug")?.unwrap_or(false),
        };
        let journal_max_messages = match var("ZCODE_ACP_JOURNAL_MAX_MESSAGES") {
            Some(v) => v.trim().parse::<u64>().ok().filter(|n| *n > 0).ok_or_else(|| ConfigError::Env {
                var: "ZCODE_ACP_JOURNAL_MAX_MESSAGES".into(),
                reason: format!("expected a positive whole number, got {v:?}"),
            })?,
            None => raw.u64("journal.maxMessages")?.unwrap_or(DEFAULT_JOURNAL_MAX_MESSAGES),
        };
        let quota = quota::QuotaConfig::from_parts(raw, env)?;
        Ok(Config { paths, remote, agents: agents(raw)?, timings, debug, journal_max_messages, quota })
    }
}

/// The Web Push contact: a `mailto:` address or an `https://` URL, from the environment,
/// else the file, else [`DEFAULT_PUSH_SUBJECT`].
fn push_subject(env_val: Option<String>, raw: &RawConfig) -> Result<String, ConfigError> {
    const ENV: &str = "ZCODE_ACP_PUSH_SUBJECT";
    const KEY: &str = "remote.pushSubject";
    let (value, from_env) = match env_val {
        Some(v) => (v, true),
        None => match raw.str(KEY)? {
            Some(v) => (v, false),
            None => return Ok(DEFAULT_PUSH_SUBJECT.to_owned()),
        },
    };
    let v = value.trim();
    let shaped =
        (v.starts_with("mailto:") && v[7..].contains('@')) || (v.starts_with("https://") && v.len() > 8);
    if shaped && !v.chars().any(|c| c.is_whitespace() || c.is_control() || c == '"') {
        return Ok(v.to_owned());
    }
    let reason = format!("must be a mailto: address or an https:// URL, got {value:?}");
    Err(match from_env {
        true => ConfigError::Env { var: ENV.to_owned(), reason },
        false => raw.invalid(KEY, reason),
    })
}

fn port(env_val: Option<String>, var: &str, raw: &RawConfig, key: &str) -> Result<Option<u16>, ConfigError> {
    match env_val {
        Some(v) => v.trim().parse::<u16>().map(Some).map_err(|_| ConfigError::Env {
            var: var.to_owned(),
            reason: format!("expected a port number 0-65535, got {v:?}"),
        }),
        None => raw.port(key),
    }
}

/// A whole number of at least 1 from the environment, else the file.
fn positive(
    env_val: Option<String>,
    var: &str,
    raw: &RawConfig,
    key: &str,
) -> Result<Option<usize>, ConfigError> {
    let n = match env_val {
        Some(v) => Some(v.trim().parse::<u64>().ok().filter(|n| *n > 0).ok_or_else(|| ConfigError::Env {
            var: var.to_owned(),
            reason: format!("expected a whole number of at least 1, got {v:?}"),
        })?),
        None => match raw.u64(key)? {
            Some(0) => return Err(raw.invalid(key, "must be at least 1")),
            n => n,
        },
    };
    Ok(n.map(|n| usize::try_from(n).unwrap_or(usize::MAX)))
}

/// The configured client-address header, validated as an HTTP header name and lower-cased
/// (an empty value means none).
fn client_address_header(env_val: Option<String>, raw: &RawConfig) -> Result<Option<String>, ConfigError> {
    const ENV: &str = "ZCODE_ACP_CLIENT_ADDRESS_HEADER";
    const KEY: &str = "remote.clientAddressHeader";
    let (value, from_env) = match env_val {
        Some(v) => (v, true),
        None => match raw.str(KEY)? {
            Some(v) => (v, false),
            None => return Ok(None),
        },
    };
    let name = value.trim();
    if name.is_empty() {
        return Ok(None);
    }
    // RFC 9110 `token` characters: what a header name may be made of.
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)) {
        let reason = format!("must be an HTTP header name such as CF-Connecting-IP, got {value:?}");
        return Err(match from_env {
            true => ConfigError::Env { var: ENV.to_owned(), reason },
            false => raw.invalid(KEY, reason),
        });
    }
    Ok(Some(name.to_ascii_lowercase()))
}

fn env_bool(var: &str, v: &str) -> Result<bool, ConfigError> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(ConfigError::Env { var: var.to_owned(), reason: format!("expected 0 or 1, got {v:?}") }),
    }
}

/// Expands a leading `~` (alone or followed by `/`) to `home`.
pub fn expand_tilde(path: &str, home: Option<&std::path::Path>) -> PathBuf {
    match (path.strip_prefix('~'), home) {
        (Some(""), Some(h)) => h.to_path_buf(),
        (Some(rest), Some(h)) if rest.starts_with('/') => h.join(rest.trim_start_matches('/')),
        _ => PathBuf::from(path),
    }
}

fn agents(raw: &RawConfig) -> Result<Agents, ConfigError> {
    let mut out = Agents::default();
    let Some(section) = raw.get("agents") else { return Ok(out) };
    let Some(section) = section.as_object() else {
        return Err(raw.invalid("agents", format!("must be an object, found {}", type_name(section))));
    };
    for (name, v) in section {
        if name == "default" {
            out.default = Some(raw.str("agents.default")?.unwrap_or_default());
            continue;
        }
        let key = format!("agents.{name}");
        let Some(obj) = v.as_object() else {
            return Err(raw.invalid(&key, "must be an object with `command`, `args` and `env`"));
        };
        let command = match obj.get("command") {
            Some(Value::String(c)) if !c.trim().is_empty() => c.clone(),
            _ => return Err(raw.invalid(&format!("{key}.command"), "must be a non-empty string")),
        };
        let args = match obj.get("args") {
            None | Some(Value::Null) => Vec::new(),
            Some(a) => file::strings_of(a)
                .ok_or_else(|| raw.invalid(&format!("{key}.args"), "must be an array of strings"))?,
        };
        let mut env = BTreeMap::new();
        match obj.get("env") {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) => {
                for (k, val) in m {
                    let s = val
                        .as_str()
                        .ok_or_else(|| raw.invalid(&format!("{key}.env.{k}"), "must be a string"))?;
                    env.insert(k.clone(), s.to_owned());
                }
            }
            Some(_) => return Err(raw.invalid(&format!("{key}.env"), "must be an object of strings")),
        }
        out.named.insert(name.clone(), AgentCommand { command, args, env });
    }
    if let Some(d) = &out.default {
        if !out.named.contains_key(d) {
            return Err(raw.invalid("agents.default", format!("names {d:?}, but no agent has that name")));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
