//! The `zcode-acp` binary: parse arguments, set up logging, call into a library.

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

mod agent;
mod devices_cli;
mod pairing;
mod procs;
mod service;
mod signals;
mod start;
mod status;
mod stop;
mod tunnel;
mod up;

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
        /// Internal: with --successor, the predecessor's listening socket is this process's
        /// standard input: serve on it (the port is never free between the two hubs)
        #[arg(long, hide = true, requires = "successor")]
        listener_on_stdin: bool,
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
    /// Internal: how `up --tunnel` runs its tunnel tool (it gets SIGKILL when `up` dies)
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
    },
    /// Pair a new device: a one-time code (5 minutes) and its URL and QR code, never the token
    Pair {
        /// The device may only watch (list, load, read, be notified), not prompt or change anything
        #[arg(long)]
        watch: bool,
        /// The device's name (else the name it gives itself)
        #[arg(long)]
        name: Option<String>,
        /// The address phones use (the tunnel's), for the URL
        #[arg(long)]
        public_url: Option<String>,
    },
    /// List the paired devices, or revoke or rename one
    Devices {
        #[command(subcommand)]
        command: Option<devices_cli::DevicesCommand>,
    },
    /// The hub as a user service (systemd / launchd): always on, never idle, with its tunnel
    Service {
        #[command(subcommand)]
        command: service::ServiceCommand,
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
    DemoAgent(agent::DemoArgs),
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
        Command::DemoAgent(args) => agent::demo_agent(args),
        Command::Token { rotate } => pairing::token(rotate),
        Command::Bridge { agent_name, agent } => agent::bridge(agent_name, agent),
        Command::Serve { cwd, agent_name, agent } => agent::serve(cwd, agent_name, agent),
        Command::Hub { background, detached, successor, listener_on_stdin } => {
            start::hub(background, detached, successor, listener_on_stdin)
        }
        Command::Chat { cwd, resume, agent_name, agent } => agent::chat(cwd, resume, agent_name, agent),
        Command::Up { public_url, tunnel, agent_name, agent } => {
            up::up(public_url, tunnel, agent_name, agent)
        }
        Command::Stop { all } => stop::stop(all),
        Command::Pair { watch, name, public_url } => devices_cli::pair(watch, name, public_url),
        Command::Devices { command } => devices_cli::devices(command),
        Command::Status { json } => status::status(json),
        Command::Service { command } => service::service(command),
        Command::TunnelExec { parent, command } => tunnel::exec_tool(parent, &command),
        Command::Quota { provider, watch, interval, json } => {
            zcode_hub::quota_card::command(zcode_hub::quota_card::Options { provider, watch, interval, json })
        }
    }
}

const QUOTA_HELP: &str = "Credentials (environment over config.json):
  GLM          ZCODE_ACP_GLM_API_KEY, ZCODE_ACP_GLM_BASE_URL   quota.glm.apiKey, quota.glm.baseUrl
  OpenCode Go  OPENCODE_GO_WORKSPACE_ID, OPENCODE_GO_AUTH_COOKIE  quota.opencode.workspaceId, .authCookie
  Ollama       OLLAMA_API_KEY                                   quota.ollama.apiKey
  Commands     quota.commands.NAME = {command, args, timeoutMs}: prints one section's JSON
Each vendor call has an 8 s limit (quota.timeoutMs / ZCODE_ACP_QUOTA_TIMEOUT_MS).";
