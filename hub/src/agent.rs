//! The bridge-running subcommands (`bridge`, `serve`, `chat`, `demo-agent`) and which agent a
//! bridge runs (a command line, a name from config.json, else the built-in demo agent).

use crate::signals::stop_on_signals;
use anyhow::Context;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use zcode_shared::config::{Config, ProcessEnv};

/// `zcode-acp demo-agent`'s arguments.
#[derive(clap::Args, Debug)]
pub(crate) struct DemoArgs {
    /// Milliseconds between streamed chunks
    #[arg(long, env = "ZCODE_ACP_DEMO_DELAY_MS", default_value_t = 30)]
    delay_ms: u64,
    /// Offer session/resume (no replay) instead of session/load, like agents that cannot replay
    #[arg(long)]
    resume_only: bool,
    /// Take images in prompts (promptCapabilities.image) and say what arrived
    #[arg(long)]
    images: bool,
}

pub(crate) fn demo_agent(args: DemoArgs) -> anyhow::Result<ExitCode> {
    let DemoArgs { delay_ms, resume_only, images } = args;
    // The demo agent needs only the paths: a broken config.json must not break an editor's agent.
    let paths = zcode_shared::paths::Paths::resolve(&ProcessEnv)?;
    zcode_shared::logging::init(false);
    let opts = zcode_bridge::demo::DemoOptions {
        delay: Duration::from_millis(delay_ms),
        data_dir: paths.data_dir,
        resume_only,
        images,
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(zcode_bridge::demo::run_stdio(opts)).context("demo agent")?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn bridge(agent_name: Option<String>, agent: Vec<String>) -> anyhow::Result<ExitCode> {
    run_bridge(AgentChoice::new(agent_name, agent), zcode_bridge::BridgeOptions::from_env())
}

/// `cwd` (else the current directory) as a real path, or why not.
fn project_dir(cwd: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let dir = match cwd {
        Some(d) => d,
        None => std::env::current_dir()?,
    };
    std::fs::canonicalize(&dir).with_context(|| format!("project directory {}", dir.display()))
}

/// A headless bridge in a project, for remote use: it registers with origin `serve` and exits
/// after `ZCODE_ACP_SERVE_IDLE_MS` with no client and no turn.
pub(crate) fn serve(
    cwd: Option<PathBuf>,
    agent_name: Option<String>,
    agent: Vec<String>,
) -> anyhow::Result<ExitCode> {
    let dir = project_dir(cwd)?;
    std::env::set_current_dir(&dir).with_context(|| format!("cannot enter {}", dir.display()))?;
    let cfg = Config::load()?;
    run_bridge(AgentChoice::new(agent_name, agent), zcode_bridge::BridgeOptions::serve(&cfg, dir))
}

/// The terminal client: its own bridge (origin serve, cwd pinned) and a chat on top.
pub(crate) fn chat(
    cwd: Option<PathBuf>,
    resume: Option<String>,
    agent_name: Option<String>,
    agent: Vec<String>,
) -> anyhow::Result<ExitCode> {
    let dir = project_dir(cwd)?;
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
pub(crate) enum AgentChoice {
    Command(Vec<String>),
    Named(String),
    Resolved(zcode_bridge::AgentSpec),
}

impl AgentChoice {
    pub(crate) fn new(name: Option<String>, command: Vec<String>) -> AgentChoice {
        name.map_or(AgentChoice::Command(command), AgentChoice::Named)
    }
}

fn run_bridge(agent: AgentChoice, opts: zcode_bridge::BridgeOptions) -> anyhow::Result<ExitCode> {
    run_bridge_until(agent, opts, None)
}

/// [`run_bridge`] until `stop` fires (default: SIGINT or SIGTERM).
pub(crate) fn run_bridge_until(
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
pub(crate) fn agent_spec(cfg: &Config, choice: AgentChoice) -> anyhow::Result<zcode_bridge::AgentSpec> {
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
