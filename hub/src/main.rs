//! The `zcode-acp` binary: parse arguments, set up logging, call into a library.

use anyhow::Context;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use zcode_shared::config::{Config, ProcessEnv};

mod pairing;
mod procs;
mod status;
mod stop;
mod tunnel;

use pairing::{loopback_note, pairing_url, qr, running_hub_port};

#[derive(Parser)]
#[command(name = "zcode-acp", version, about = "Remote access to the ACP coding agents on this machine")]
#[command(propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// What an editor spawns instead of its agent: shares the agent with remote clients
    Bridge {
        /// A named agent from config.json's `agents` (instead of a command after `--`)
        #[arg(long = "agent", value_name = "NAME", conflicts_with = "agent")]
        agent_name: Option<String>,
        /// The upstream agent command (default: the configured agent, else the demo agent)
        #[arg(last = true)]
        agent: Vec<String>,
    },
    /// A headless bridge the hub spawns for remote create, list and resume
    Serve {
        /// The project directory
        #[arg(long)]
        cwd: Option<PathBuf>,
        /// A named agent from config.json's `agents` (instead of a command after `--`)
        #[arg(long = "agent", value_name = "NAME", conflicts_with = "agent")]
        agent_name: Option<String>,
        /// The upstream agent command (default: the configured agent, else the demo agent)
        #[arg(last = true)]
        agent: Vec<String>,
    },
    /// The long-lived hub: token-gated discovery, project APIs and the WebSocket relay
    Hub {
        /// Start it in the background (own session, log in the logs directory) and return
        #[arg(long)]
        background: bool,
        /// Internal: what --background runs (become a session leader first)
        #[arg(long, hide = true)]
        detached: bool,
        /// Internal: started by a hub restarting onto a new binary, which listened on this
        /// port: wait for it to exit, then take its place
        #[arg(long, hide = true, value_name = "PORT")]
        successor: Option<u16>,
    },
    /// A terminal ACP client on its own bridge (what a remote create opens in a window)
    Chat {
        /// The project directory
        #[arg(long)]
        cwd: Option<PathBuf>,
        /// A session to resume instead of starting a new one
        #[arg(long)]
        resume: Option<String>,
        /// A named agent from config.json's `agents` (instead of a command after `--`)
        #[arg(long = "agent", value_name = "NAME", conflicts_with = "agent")]
        agent_name: Option<String>,
        /// The upstream agent command (default: the configured agent, else the demo agent)
        #[arg(last = true)]
        agent: Vec<String>,
    },
    /// One-command start: the hub plus a bridge here; prints the URL, token and a QR code
    Up {
        /// The address phones use (your own tunnel's), for the pairing URL
        #[arg(long, conflicts_with = "tunnel")]
        public_url: Option<String>,
        /// Start a tunnel for phones too, for as long as `up` runs (needs the tool installed)
        #[arg(long, value_enum)]
        tunnel: Option<tunnel::Kind>,
        /// A named agent from config.json's `agents` (instead of a command after `--`)
        #[arg(long = "agent", value_name = "NAME", conflicts_with = "agent")]
        agent_name: Option<String>,
        /// The upstream agent command (default: the configured agent, else the demo agent)
        #[arg(last = true)]
        agent: Vec<String>,
    },
    /// Stop this home's hub and the headless bridges it started; name the other bridges, which
    /// start a new hub at their next heartbeat (exit status 0 when it stopped or none was
    /// running, 1 when something could not be stopped)
    Stop {
        /// Stop every other bridge of this home too (editors' agents, `up`, chat windows):
        /// SIGTERM, then wait for them to exit
        #[arg(long)]
        all: bool,
    },
    /// Show this home's hub (pid, port, version, uptime, tunnel) and every bridge registered
    /// with it (pid, origin, sessions, agent, project); exit status 1 when no hub runs
    #[command(after_long_help = status::HELP)]
    Status {
        /// Print JSON (`{"hub": {…} | null, "bridges": […]}`) instead of the table
        #[arg(long)]
        json: bool,
    },
    /// Internal: how `up --tunnel` runs its tunnel tool (it gets SIGTERM when `up` dies)
    #[command(hide = true)]
    TunnelExec {
        /// The pid of the `up` it belongs to
        #[arg(long)]
        parent: u32,
        /// The tool and its arguments
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Print the remote token (or replace it with --rotate)
    Token {
        /// Replace the token with a new random one
        #[arg(long)]
        rotate: bool,
        /// The address phones use (the tunnel's), for the pairing URL
        #[arg(long)]
        public_url: Option<String>,
    },
    /// Plan quota of the configured coding plans (GLM, OpenCode Go, Ollama Cloud, commands):
    /// one card section per configured provider; exit status 1 when none answered
    #[command(after_long_help = QUOTA_HELP)]
    Quota {
        /// Only this provider: glm, go (OpenCode Go), ollama, or a configured command's name
        provider: Option<String>,
        /// Refresh until interrupted (every 30 s, or --interval)
        #[arg(short, long)]
        watch: bool,
        /// Seconds between refreshes (at least 10; implies --watch)
        #[arg(short, long, value_name = "SECS", value_parser = zcode_hub::quota_card::parse_interval)]
        interval: Option<u64>,
        /// Print the JSON payload (the same as GET /api/quota) instead of the card
        #[arg(long)]
        json: bool,
    },
    /// The built-in scripted ACP agent on stdio (the default agent and the tests' fixture)
    #[command(after_long_help = zcode_bridge::demo::KEYWORDS_HELP)]
    DemoAgent {
        /// Milliseconds between streamed chunks
        #[arg(long, env = "ZCODE_ACP_DEMO_DELAY_MS", default_value_t = 30)]
        delay_ms: u64,
        /// Offer session/resume (no replay) instead of session/load, like agents that cannot replay
        #[arg(long)]
        resume_only: bool,
    },
}

/// Every subcommand's error ends here as one line, `zcode-acp: <error>: <cause>: …`, and exit
/// status 1: a bad config.json is advice, not a crash, so no backtrace, whatever
/// `RUST_BACKTRACE` says (anyhow's own report from `main` prints one).
fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("zcode-acp: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<ExitCode> {
    // The version `--version` prints is the one the process reports everywhere (the upgrade
    // check reads it from a binary on disk).
    let matches = Cli::command().version(zcode_shared::version()).get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    match cli.command {
        Command::DemoAgent { delay_ms, resume_only } => demo_agent(delay_ms, resume_only),
        Command::Token { rotate, public_url } => token(rotate, public_url),
        Command::Bridge { agent_name, agent } => bridge(agent_name, agent),
        Command::Serve { cwd, agent_name, agent } => serve(cwd, agent_name, agent),
        Command::Hub { background, detached, successor } => hub(background, detached, successor),
        Command::Chat { cwd, resume, agent_name, agent } => chat(cwd, resume, agent_name, agent),
        Command::Up { public_url, tunnel, agent_name, agent } => up(public_url, tunnel, agent_name, agent),
        Command::Stop { all } => stop::stop(all),
        Command::Status { json } => status::status(json),
        Command::TunnelExec { parent, command } => tunnel::exec_tool(parent, &command),
        Command::Quota { provider, watch, interval, json } => {
            let cfg = Config::load()?;
            if cfg.debug {
                zcode_shared::logging::init(true);
            }
            zcode_hub::quota_card::run(
                &cfg,
                zcode_hub::quota_card::Options { provider, watch, interval, json },
            )
        }
    }
}

const QUOTA_HELP: &str = "Credentials (environment over config.json):
  GLM          ZCODE_ACP_GLM_API_KEY, ZCODE_ACP_GLM_BASE_URL   quota.glm.apiKey, quota.glm.baseUrl
  OpenCode Go  OPENCODE_GO_WORKSPACE_ID, OPENCODE_GO_AUTH_COOKIE  quota.opencode.workspaceId, .authCookie
  Ollama       OLLAMA_API_KEY                                   quota.ollama.apiKey
  Commands     quota.commands.NAME = {command, args, timeoutMs}: prints one section's JSON
Each vendor call has an 8 s limit (quota.timeoutMs / ZCODE_ACP_QUOTA_TIMEOUT_MS).";

fn demo_agent(delay_ms: u64, resume_only: bool) -> anyhow::Result<ExitCode> {
    // The demo agent needs only the paths: a broken config.json must not break an editor's agent.
    let paths = zcode_shared::paths::Paths::resolve(&ProcessEnv)?;
    zcode_shared::logging::init(false);
    let opts = zcode_bridge::demo::DemoOptions {
        delay: Duration::from_millis(delay_ms),
        data_dir: paths.data_dir,
        resume_only,
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(zcode_bridge::demo::run_stdio(opts)).context("demo agent")?;
    Ok(ExitCode::SUCCESS)
}

fn bridge(agent_name: Option<String>, agent: Vec<String>) -> anyhow::Result<ExitCode> {
    run_bridge(AgentChoice::new(agent_name, agent), zcode_bridge::BridgeOptions::from_env())
}

/// A headless bridge in a project, for remote use: it registers with origin `serve` and exits
/// after `ZCODE_ACP_SERVE_IDLE_MS` with no client and no turn.
fn serve(cwd: Option<PathBuf>, agent_name: Option<String>, agent: Vec<String>) -> anyhow::Result<ExitCode> {
    let dir = match cwd {
        Some(d) => d,
        None => std::env::current_dir()?,
    };
    let dir = std::fs::canonicalize(&dir).with_context(|| format!("project directory {}", dir.display()))?;
    std::env::set_current_dir(&dir).with_context(|| format!("cannot enter {}", dir.display()))?;
    let cfg = Config::load()?;
    run_bridge(AgentChoice::new(agent_name, agent), zcode_bridge::BridgeOptions::serve(&cfg, dir))
}

/// The terminal client: its own bridge (origin serve, cwd pinned) and a chat on top.
fn chat(
    cwd: Option<PathBuf>,
    resume: Option<String>,
    agent_name: Option<String>,
    agent: Vec<String>,
) -> anyhow::Result<ExitCode> {
    let dir = match cwd {
        Some(d) => d,
        None => std::env::current_dir()?,
    };
    let dir = std::fs::canonicalize(&dir).with_context(|| format!("project directory {}", dir.display()))?;
    let cfg = Config::load()?;
    // Checked here, where the error can be read: the bridge's stderr goes to a log file.
    if let Some(name) = &agent_name {
        agent_spec(&cfg, AgentChoice::Named(name.clone()))?;
    }
    let _ = zcode_shared::paths::Paths::ensure_private_dir(&cfg.paths.log_dir);
    let opts = zcode_bridge::chat::ChatOptions {
        cwd: dir,
        resume,
        exe: std::env::current_exe().context("cannot find this executable to start the bridge")?,
        agent_name,
        agent,
        log: Some(cfg.paths.log_dir.join(format!("chat-bridge-{}.log", std::process::id()))),
    };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let code = rt.block_on(zcode_bridge::chat::run(opts)).context("chat")?;
    rt.shutdown_timeout(Duration::from_millis(100));
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}

/// Which agent a bridge runs: a command line (empty: the default), a name from config.json, or
/// one already resolved (`up` resolves it before printing anything).
enum AgentChoice {
    Command(Vec<String>),
    Named(String),
    Resolved(zcode_bridge::AgentSpec),
}

impl AgentChoice {
    fn new(name: Option<String>, command: Vec<String>) -> AgentChoice {
        name.map_or(AgentChoice::Command(command), AgentChoice::Named)
    }
}

fn run_bridge(agent: AgentChoice, opts: zcode_bridge::BridgeOptions) -> anyhow::Result<ExitCode> {
    run_bridge_until(agent, opts, None)
}

/// [`run_bridge`] until `stop` fires (default: SIGINT or SIGTERM).
fn run_bridge_until(
    agent: AgentChoice,
    opts: zcode_bridge::BridgeOptions,
    stop: Option<tokio_util::sync::CancellationToken>,
) -> anyhow::Result<ExitCode> {
    let cfg = Config::load()?;
    zcode_shared::logging::init(cfg.debug);
    let spec = agent_spec(&cfg, agent)?;
    // One worker: a message crosses three tasks (socket reader, router, client writer), and
    // on one worker each hop is a queue push; on two, most hops woke the other worker thread
    // (a futex and a context switch each: a fifth of the bridge's CPU went to switching, and
    // a cached `initialize` took 2.5× a bare echo's round trip; `scripts/bench-bridge`). The
    // journal has its own thread and blocking work the blocking pool.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    let result = rt.block_on(async {
        let stop = match stop {
            Some(stop) => stop,
            None => {
                let stop = tokio_util::sync::CancellationToken::new();
                tokio::spawn(stop_on_signals(stop.clone()));
                stop
            }
        };
        zcode_bridge::run(&cfg, spec, opts, stop).await
    });
    // The stdin reader may still be blocked in a read: do not wait for it.
    rt.shutdown_timeout(Duration::from_millis(100));
    result.context("bridge")?;
    Ok(ExitCode::SUCCESS)
}

/// The upstream agent: the arguments after `--`, else the configured default, else the
/// built-in demo agent (said on stderr, so nobody mistakes it for a real one). A name is one
/// of config.json's `agents`, or `demo-agent` for the built-in one.
fn agent_spec(cfg: &Config, choice: AgentChoice) -> anyhow::Result<zcode_bridge::AgentSpec> {
    let args = match choice {
        AgentChoice::Command(args) => args,
        AgentChoice::Named(name) => {
            if let Some(a) = cfg.agents.named.get(&name) {
                return Ok(spec_of(&name, a));
            }
            if name == zcode_shared::config::DEMO_AGENT {
                return demo_spec();
            }
            let known = cfg.agents.choices().into_iter().map(|(n, _)| n).collect::<Vec<_>>();
            anyhow::bail!(
                "no agent named {name:?} in {} (the agents to choose from: {})",
                cfg.paths.config_file.display(),
                known.join(", ")
            );
        }
        AgentChoice::Resolved(spec) => return Ok(spec),
    };
    if let Some((command, rest)) = args.split_first() {
        // Listed for people: the program's own name, not the directories it sits in.
        let program = std::path::Path::new(command).file_name().map(|f| f.to_string_lossy().into_owned());
        let name = std::iter::once(program.unwrap_or_else(|| command.clone())).chain(rest.iter().cloned());
        return Ok(zcode_bridge::AgentSpec {
            display: args.join(" "),
            name: name.collect::<Vec<_>>().join(" "),
            // Errors name it by its program's file name ("claude-code-acp: exited with …").
            label: std::path::Path::new(command)
                .file_name()
                .map_or_else(|| command.clone(), |n| n.to_string_lossy().into_owned()),
            command: command.clone(),
            args: rest.to_vec(),
            env: Default::default(),
        });
    }
    if let (Some(name), Some(a)) = (&cfg.agents.default, cfg.agents.default_agent()) {
        return Ok(spec_of(name, a));
    }
    eprintln!(
        "zcode-acp: no agent given after `--` and no default agent in {}: running the built-in demo agent",
        cfg.paths.config_file.display()
    );
    demo_spec()
}

/// The built-in demo agent: this executable's `demo-agent`.
fn demo_spec() -> anyhow::Result<zcode_bridge::AgentSpec> {
    let exe = std::env::current_exe().context("cannot find this executable to run the demo agent")?;
    Ok(zcode_bridge::AgentSpec {
        display: "zcode-acp demo-agent".into(),
        name: zcode_shared::config::DEMO_AGENT.into(),
        label: zcode_shared::config::DEMO_AGENT.into(),
        command: exe.to_string_lossy().into_owned(),
        args: vec!["demo-agent".into()],
        env: Default::default(),
    })
}

/// The spec of agent `name` of config.json.
fn spec_of(name: &str, a: &zcode_shared::config::AgentCommand) -> zcode_bridge::AgentSpec {
    zcode_bridge::AgentSpec {
        command: a.command.clone(),
        args: a.args.clone(),
        env: a.env.clone(),
        display: a.display(),
        label: name.to_owned(),
        name: name.to_owned(),
    }
}

/// A token cancelled by the first SIGINT or SIGTERM, with the handlers installed before it
/// returns: from then on Ctrl-C is ours to handle (`up` must end its tunnel, whenever it comes).
fn signals_now() -> anyhow::Result<tokio_util::sync::CancellationToken> {
    let stop = tokio_util::sync::CancellationToken::new();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let (term, int) = rt.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    });
    let (mut term, mut int) = (term?, int?);
    let fired = stop.clone();
    std::thread::spawn(move || {
        rt.block_on(async {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        });
        fired.cancel();
    });
    Ok(stop)
}

async fn stop_on_signals(stop: tokio_util::sync::CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    else {
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    stop.cancel();
}

fn hub(background: bool, detached: bool, successor: Option<u16>) -> anyhow::Result<ExitCode> {
    let cfg = Config::load()?;
    if background {
        return hub_background(&cfg);
    }
    if detached {
        // Its own session: an editor closing (SIGHUP to its group) must not take the hub along.
        let _ = nix::unistd::setsid();
    }
    zcode_shared::logging::init(cfg.debug);
    let (host, port) = (cfg.remote.hub_host.clone(), cfg.remote.hub_port);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let (lock, answering) = match successor {
        Some(old) => {
            tracing::info!(
                port = old,
                version = zcode_shared::version(),
                "taking over from the hub being upgraded"
            );
            let lock = zcode_hub::daemon::lock_within(&cfg.paths, Duration::from_secs(10));
            (lock.context("the hub lock")?, false)
        }
        None => {
            let port_now = || cfg.hub_port_now();
            let within = Duration::from_secs(10);
            let lock = rt.block_on(zcode_hub::daemon::lock_to_start(&cfg.paths, &host, port_now, within));
            lock.context("the hub lock")?
        }
    };
    let _lock = match lock {
        zcode_hub::daemon::Lock::Held(lock) => lock,
        zcode_hub::daemon::Lock::Running(pid) => {
            let pid = pid.map_or_else(String::new, |p| format!(" (pid {p})"));
            let run_dir = cfg.paths.run_dir.display();
            match answering {
                true => eprintln!("zcode-acp hub: a hub is already running{pid} for {run_dir}"),
                false => eprintln!(
                    "zcode-acp hub: a hub is already running{pid} for {run_dir}, but it does not answer on \
                     {host}:{} (is it configured with another port?)",
                    cfg.hub_port_now().map_or_else(|| "its OS-picked port".to_owned(), |p| p.to_string())
                ),
            }
            return Ok(ExitCode::SUCCESS);
        }
    };
    if let Some(limit) = zcode_hub::daemon::raise_open_file_limit() {
        tracing::debug!(limit, "open-file limit");
    }
    let result = rt.block_on(async {
        // An OS-picked port is taken over by a successor, so clients find it where it was.
        let taken_over = match successor.filter(|p| port == 0 && *p != 0) {
            Some(p) => tokio::net::TcpListener::bind((host.as_str(), p)).await.ok(),
            None => None,
        };
        let bound = match taken_over {
            Some(l) => Ok(l),
            None => tokio::net::TcpListener::bind((host.as_str(), port)).await,
        };
        let listener = match bound {
            Ok(l) => l,
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                use zcode_hub::daemon::Holder;
                use zcode_shared::peer::PeerError;
                match zcode_hub::daemon::holder(&host, port).await {
                    Holder::NotOurs(PeerError::Foreign { uid, .. }) => anyhow::bail!(
                        "port {port} on {host} is held by another user (uid {uid}): refusing to start; \
                         choose another remote.hubPort (ZCODE_ACP_HUB_PORT)"
                    ),
                    Holder::NotOurs(e) => {
                        anyhow::bail!(
                            "{host}:{port} is in use and {e}: refusing to start (set ZCODE_ACP_HUB_PORT)"
                        )
                    }
                    Holder::Ours | Holder::Nobody => {}
                }
                if zcode_hub::daemon::hub_answers(&host, port).await {
                    eprintln!("zcode-acp hub: a hub is already running on {host}:{port}");
                    return Ok(ExitCode::SUCCESS);
                }
                anyhow::bail!("{host}:{port} is in use by another program (set ZCODE_ACP_HUB_PORT)");
            }
            Err(e) => return Err(anyhow::Error::new(e).context(format!("cannot listen on {host}:{port}"))),
        };
        let stop = tokio_util::sync::CancellationToken::new();
        tokio::spawn(stop_on_signals(stop.clone()));
        zcode_hub::run(listener, cfg.clone(), stop).await.context("hub")?;
        Ok(ExitCode::SUCCESS)
    });
    rt.shutdown_timeout(Duration::from_millis(100));
    result
}

/// `hub --background`: runs `hub --detached` with its output appended to `<logs>/hub.log`
/// and returns at once. The detached hub is not our child for long: we exit, it is reparented.
fn hub_background(cfg: &Config) -> anyhow::Result<ExitCode> {
    use std::os::unix::fs::OpenOptionsExt;
    zcode_shared::paths::Paths::ensure_private_dir(&cfg.paths.log_dir)?;
    let log_path = cfg.paths.log_dir.join("hub.log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&log_path)
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
fn start_hub(cfg: &Config) -> anyhow::Result<()> {
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

/// `up`: the hub (started in the background unless one answers), then a serve bridge over the
/// chosen agent in the current directory, in the foreground until Ctrl-C; with `--tunnel`, the
/// tunnel too, for as long as `up` runs. Prints the pairing URL, a QR code of it and the token.
fn up(
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
    let (token, _) = zcode_shared::token::resolve(&cfg)?;
    let host = cfg.remote.hub_host.clone();
    let stop = signals_now()?;
    let port = match running_hub_port(&cfg) {
        Some(p) => p,
        None => {
            start_hub(&cfg)?;
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
    // Dropped when `up` returns (Ctrl-C included): the tunnel lives exactly as long as `up`.
    let tunnel = match tunnel {
        Some(kind) => {
            eprintln!("zcode-acp: starting `{}`…", kind.command_line(port));
            match tunnel::Tunnel::start(kind, port, &stop)? {
                Some(t) => Some(t),
                None => return Ok(ExitCode::SUCCESS),
            }
        }
        None => None,
    };
    let public_url = tunnel.as_ref().map(|t| t.url.clone()).or(public_url);
    let url = pairing_url(&host, port, &token, public_url);
    // What `zcode-acp status` shows as the hub's tunnel, for as long as this `up` runs: written
    // before the banner, so whoever reads the banner finds it.
    let _advert = tunnel.as_ref().map(|t| tunnel::Advert::write(&cfg.paths, &t.url));
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
    println!("zcode-acp is up.");
    println!("  open:   {url}");
    // The note first: read before the code is scanned, not found under it afterwards.
    if let Some(note) = loopback_note(&url) {
        println!("{note}");
    }
    print!("{}", qr(&url, pairing::colour_for(&std::io::stdout())));
    println!("  token:  {token}");
    println!("  hub:    http://{host}:{port}");
    if let Some(t) = &tunnel {
        println!("  tunnel: {} (pid {}), stopped with this command", t.url, t.pid());
    }
    // A plain `stop` would leave this bridge, which starts a new hub at its next heartbeat.
    println!(
        "Ctrl-C stops this bridge; the hub exits by itself when idle \
         (`zcode-acp stop --all` stops the hub, this bridge and every other)."
    );
    let result = bridge.join().unwrap_or_else(|_| anyhow::bail!("the bridge panicked"));
    drop(tunnel);
    result
}

fn token(rotate: bool, public_url: Option<String>) -> anyhow::Result<ExitCode> {
    let cfg = Config::load()?;
    zcode_shared::logging::init(cfg.debug);
    let (token, source) =
        if rotate { zcode_shared::token::rotate(&cfg)? } else { zcode_shared::token::resolve(&cfg)? };
    println!("{token}");
    if rotate {
        eprintln!(
            "new token written to {source}; the running hub and bridges take it within seconds \
             (the old one stops working): give it to every remote client"
        );
    } else {
        eprintln!("token from {source}");
    }
    // Pairing goes to stderr: stdout stays the bare token, for scripts.
    let port = match (&public_url, running_hub_port(&cfg)) {
        (Some(_), _) => 0,
        (None, Some(p)) => p,
        (None, None) if cfg.remote.hub_port != 0 => cfg.remote.hub_port,
        (None, None) => {
            eprintln!(
                "no hub is running (its port is picked when it starts): `zcode-acp up` prints the pairing URL"
            );
            return Ok(ExitCode::SUCCESS);
        }
    };
    let url = pairing_url(&cfg.remote.hub_host, port, &token, public_url);
    eprintln!("pair a phone: {url}");
    if let Some(note) = loopback_note(&url) {
        eprintln!("{note}");
    }
    eprint!("{}", qr(&url, pairing::colour_for(&std::io::stderr())));
    Ok(ExitCode::SUCCESS)
}
