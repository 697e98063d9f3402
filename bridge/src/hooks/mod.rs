//! Hooks, run by the bridge for any agent: the seven events of the hooks tree mapped onto the
//! ACP traffic the router sees (`config` parses the tree, `run` runs one command, `payload`
//! builds the event's stdin, `decide` reads the answers of the two events that can decide; `config` is the tree's
//! parser, shared with the settings API's `hooks` section in `zcode_shared::settings`). This module knows nothing of the router: the
//! router's glue (`router::hooks`) starts [`Job`]s and gets [`Record`]s back as events.

pub mod decide;
pub mod payload;
pub mod run;

pub use zcode_shared::settings::hooks_tree as config;

pub use config::{HookEvent, Tree};

use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// The event's name, for the hook (also in its stdin as `hook_event_name`).
pub const ENV_EVENT: &str = "ZCODE_ACP_HOOK_EVENT";
/// The bridge's instance id (its pid, as registered with the hub).
pub const ENV_INSTANCE: &str = "ZCODE_ACP_INSTANCE_ID";
/// The ACP session id.
pub const ENV_SESSION: &str = "ZCODE_ACP_SESSION_ID";
/// Never handed to a hook.
pub(crate) const TOKEN_VAR: &str = "ZCODE_ACP_REMOTE_TOKEN";

/// Reads the hooks tree from `config.json` (`None` path: no hooks). The error names the file
/// and the key, for the agent's start failure.
pub fn load(config_file: Option<&Path>) -> Result<Tree, String> {
    let Some(file) = config_file else { return Ok(Tree::default()) };
    let raw = zcode_shared::config::RawConfig::read(file).map_err(|e| e.to_string())?;
    Tree::parse(raw.get("hooks")).map_err(|e| format!("config file {}: {e}", file.display()))
}

/// The hooks to run for one event of one session.
pub struct Job {
    /// Which event.
    pub event: HookEvent,
    /// The session.
    pub session: String,
    /// Its directory: the hooks' working directory.
    pub cwd: PathBuf,
    /// The stdin JSON.
    pub input: Value,
    /// What to run.
    pub commands: Vec<config::Command>,
    /// The output cap.
    pub max_output: usize,
}

/// One hook run, as journaled and sent to clients.
#[derive(Clone, Debug)]
pub struct Record {
    /// Which event.
    pub event: HookEvent,
    /// The command line.
    pub command: String,
    /// What happened.
    pub outcome: run::Outcome,
}

impl Job {
    /// Runs every command of the job at once and returns their records, in command order.
    pub async fn run(self) -> Vec<Record> {
        let stdin = self.input.to_string().into_bytes();
        let env = [
            (ENV_EVENT, self.event.name().to_owned()),
            (ENV_INSTANCE, std::process::id().to_string()),
            (ENV_SESSION, self.session.clone()),
        ];
        let runs = self.commands.iter().map(|c| {
            let (stdin, env, cwd) = (stdin.clone(), &env, &self.cwd);
            async move {
                let outcome = run::run(&c.command, cwd, stdin, env, c.timeout, self.max_output).await;
                Record { event: self.event, command: c.command.clone(), outcome }
            }
        });
        let records = futures_util::future::join_all(runs).await;
        for r in &records {
            let o = &r.outcome;
            if o.timed_out || o.error.is_some() || o.exit.is_some_and(|c| c != 0 && c != 2) {
                tracing::warn!(event = r.event.name(), command = %r.command, exit = ?o.exit, timed_out = o.timed_out,
                    error = ?o.error, "a hook failed");
            }
        }
        records
    }
}

impl Record {
    /// The `session/update` payload that shows this run (`sessionUpdate: "zcode_hook_run"`).
    pub fn update(&self) -> Value {
        let o = &self.outcome;
        let mut v = json!({
            "sessionUpdate": "zcode_hook_run",
            "event": self.event.name(),
            "command": self.command,
            "exitCode": o.exit,
            "timedOut": o.timed_out,
            "durationMs": u64::try_from(o.duration.as_millis()).unwrap_or(u64::MAX),
            "stdout": o.stdout,
            "stderr": o.stderr,
            "truncated": o.truncated,
        });
        if let Some(e) = &o.error {
            v["error"] = json!(e);
        }
        v
    }
}
