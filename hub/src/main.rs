//! The `zcode-acp` binary: parse arguments, set up logging, call into a library.

use anyhow::Context;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use zcode_shared::config::{Config, ProcessEnv};

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
        /// The upstream agent command (default: the configured agent, else the demo agent)
        #[arg(last = true)]
        agent: Vec<String>,
    },
    /// A headless bridge the hub spawns for remote create, list and resume
    Serve {
        /// The project directory
        #[arg(long)]
        cwd: Option<PathBuf>,
    },
    /// The long-lived hub: token-gated discovery, project APIs and the WebSocket relay
    Hub,
    /// A terminal ACP client on its own bridge (what a remote create opens in a window)
    Chat {
        /// The project directory
        #[arg(long)]
        cwd: Option<PathBuf>,
        /// A session to resume instead of starting a new one
        #[arg(long)]
        resume: Option<String>,
    },
    /// One-command start: the hub plus a bridge here; prints the URL, token and a QR code
    Up,
    /// Print the remote token (or replace it with --rotate)
    Token {
        /// Replace the token with a new random one
        #[arg(long)]
        rotate: bool,
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

fn main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    match cli.command {
        Command::DemoAgent { delay_ms, resume_only } => demo_agent(delay_ms, resume_only),
        Command::Token { rotate } => token(rotate),
        Command::Bridge { agent } => bridge(agent),
        Command::Serve { .. } => not_built("serve", "#6 (Projects and the session lifecycle)"),
        Command::Hub => not_built("hub", "#4 (Hub: discovery, registry and WebSocket relay)"),
        Command::Chat { .. } => not_built("chat", "#6 (Projects and the session lifecycle)"),
        Command::Up => not_built("up", "#4 (the hub) and #3 (the bridge)"),
    }
}

/// A subcommand whose issue has not landed: say so and fail, never pretend.
fn not_built(name: &str, issue: &str) -> anyhow::Result<ExitCode> {
    eprintln!(
        "zcode-acp {name}: not built yet; it arrives with issue {issue}. Nothing was started.\n\
         What works today: `zcode-acp demo-agent` (an ACP agent on stdio) and `zcode-acp token`."
    );
    Ok(ExitCode::from(2))
}

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

fn bridge(agent: Vec<String>) -> anyhow::Result<ExitCode> {
    let cfg = Config::load()?;
    zcode_shared::logging::init(cfg.debug);
    let spec = agent_spec(&cfg, agent)?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let result = rt.block_on(async {
        let stop = tokio_util::sync::CancellationToken::new();
        tokio::spawn(stop_on_signals(stop.clone()));
        zcode_bridge::run(&cfg, spec, stop).await
    });
    // The stdin reader may still be blocked in a read: do not wait for it.
    rt.shutdown_timeout(Duration::from_millis(100));
    result.context("bridge")?;
    Ok(ExitCode::SUCCESS)
}

/// The upstream agent: the arguments after `--`, else the configured default, else the
/// built-in demo agent (said on stderr, so nobody mistakes it for a real one).
fn agent_spec(cfg: &Config, args: Vec<String>) -> anyhow::Result<zcode_bridge::AgentSpec> {
    if let Some((command, rest)) = args.split_first() {
        return Ok(zcode_bridge::AgentSpec {
            display: args.join(" "),
            command: command.clone(),
            args: rest.to_vec(),
            env: Default::default(),
        });
    }
    if let Some(a) = cfg.agents.default_agent() {
        let display =
            std::iter::once(a.command.clone()).chain(a.args.iter().cloned()).collect::<Vec<_>>().join(" ");
        return Ok(zcode_bridge::AgentSpec {
            command: a.command.clone(),
            args: a.args.clone(),
            env: a.env.clone(),
            display,
        });
    }
    let exe = std::env::current_exe().context("cannot find this executable to run the demo agent")?;
    eprintln!(
        "zcode-acp: no agent given after `--` and no default agent in {}: running the built-in demo agent",
        cfg.paths.config_file.display()
    );
    Ok(zcode_bridge::AgentSpec {
        display: "zcode-acp demo-agent".into(),
        command: exe.to_string_lossy().into_owned(),
        args: vec!["demo-agent".into()],
        env: Default::default(),
    })
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

fn token(rotate: bool) -> anyhow::Result<ExitCode> {
    let cfg = Config::load()?;
    zcode_shared::logging::init(cfg.debug);
    let (token, source) =
        if rotate { zcode_shared::token::rotate(&cfg)? } else { zcode_shared::token::resolve(&cfg)? };
    println!("{token}");
    if rotate {
        eprintln!("new token written to {source}; give it to every remote client (bridges read it at start)");
    } else {
        eprintln!("token from {source}");
    }
    Ok(ExitCode::SUCCESS)
}
