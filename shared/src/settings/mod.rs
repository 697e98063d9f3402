//! The settings API's core, shared by every mount (the hub's `/api/settings/*`, the bridge's
//! loopback `/settings/*`, relayed per instance as `/api/instances/{id}/settings/*`): the
//! sections, their reads and writes ([`api::handle`]), and the one safe way their files are
//! written ([`safe`]). The mounts only read the body and say who they are ([`Host`]).
//!
//! - [`safe`]: the cross-process lock, backups and atomic replacement.
//! - [`mcp`], [`models`], [`agents`], [`skills`], [`hooks`], [`front`]: the sections
//!   ([`hooks_tree`]: the hooks tree's parser, shared with the bridge's hooks runner).
//! - [`machine`]: backups, reset cards and app update.

pub mod agents;
pub mod api;
pub mod front;
pub mod hooks;
pub mod hooks_tree;
pub mod machine;
pub mod mcp;
pub mod models;
pub mod safe;
pub mod skills;

#[cfg(test)]
mod process_tests;
#[cfg(test)]
mod tests;

use crate::env::Env;
use crate::paths::Paths;
use std::path::PathBuf;

/// The largest body a settings write takes (413 past it).
pub const MAX_BODY: usize = 256 * 1024;

/// Where the settings live.
#[derive(Clone, Debug)]
pub struct Settings {
    /// zcode-acp's paths (`config.json` holds `mcpServers`, `models`, `subagentModels`).
    pub paths: Paths,
    /// `$HOME`, for the agent's own directories' defaults.
    pub home: Option<PathBuf>,
    /// The agent whose directories these are (its key), when a bridge answers.
    pub agent: Option<String>,
}

impl Settings {
    /// From the resolved paths and the environment's `HOME`.
    pub fn new(paths: Paths, env: &dyn Env) -> Settings {
        let home = env.get("HOME").filter(|h| !h.is_empty()).map(PathBuf::from);
        Settings { paths, home, agent: None }
    }

    /// The subagents directory: `settings.agents.<agent>.subagentsDir` in config.json, else
    /// `settings.subagentsDir`, else `~/.claude/agents`.
    pub fn subagents_dir(&self, root: &crate::ordered::Ordered) -> Option<PathBuf> {
        self.dir(root, "subagentsDir", ".claude/agents")
    }

    /// The skills directory: `settings.agents.<agent>.skillsDir`, else `settings.skillsDir`,
    /// else `~/.claude/skills`.
    pub fn skills_dir(&self, root: &crate::ordered::Ordered) -> Option<PathBuf> {
        self.dir(root, "skillsDir", ".claude/skills")
    }

    fn dir(&self, root: &crate::ordered::Ordered, key: &str, default: &str) -> Option<PathBuf> {
        let section = root.value("settings").unwrap_or_default();
        let per_agent = self.agent.as_ref().and_then(|a| section["agents"][a.as_str()][key].as_str());
        let configured = per_agent.or(section[key].as_str()).map(str::to_owned);
        match configured {
            Some(p) if p.starts_with("~/") => Some(self.home.as_ref()?.join(&p[2..])),
            Some(p) if p.starts_with('/') => Some(PathBuf::from(p)),
            _ => Some(self.home.as_ref()?.join(default)),
        }
    }
}

/// Which mount answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mount {
    /// The hub's `/api/settings/*`: no agent of its own.
    Hub,
    /// A bridge's `/settings/*` (directly or relayed).
    Bridge,
}

/// What the agent behind a bridge reported: its models and what MCP transports it takes.
#[derive(Clone, Debug, Default)]
pub struct ReportedAgent {
    /// The agent's key: its `agentInfo.name`, else its command's file name.
    pub key: String,
    /// Its display name (`agentInfo.title`, else the key).
    pub name: String,
    /// `(id, name)` of each selectable model, as the agent reported them.
    pub models: Vec<(String, String)>,
    /// The model of the session that reported last.
    pub current: Option<String>,
    /// The MCP transports it takes (`stdio` always).
    pub transports: Vec<&'static str>,
}

/// The mount's side of a request: who answers and what only it knows.
#[derive(Clone, Debug)]
pub struct Host {
    /// Hub or bridge.
    pub mount: Mount,
    /// The bridge's agent, once it has been initialized.
    pub agent: Option<ReportedAgent>,
    /// What the live bridges' agents reported (the hub's mount asks them), so both mounts
    /// list and write the same providers; a bridge's own mount leaves it empty.
    pub live_agents: Vec<ReportedAgent>,
    /// The bridge's count of `needs-restart` writes since its agent last started.
    pub pending_restart: u64,
    /// The usage payload for `all` (range `7d`), read by the mount (the hub from its store, a
    /// bridge from its usage recorder) before the blocking call; `Err`: why it could not be.
    pub usage: Option<Result<serde_json::Value, String>>,
}

impl Host {
    /// A host with nothing reported yet.
    pub fn new(mount: Mount) -> Host {
        Host { mount, agent: None, live_agents: Vec::new(), pending_restart: 0, usage: None }
    }

    /// Every agent known here: the bridge's own, then the live bridges' (one per key).
    pub fn reported(&self) -> Vec<ReportedAgent> {
        let mut out: Vec<ReportedAgent> = Vec::new();
        for a in self.agent.iter().chain(&self.live_agents) {
            if !out.iter().any(|r| r.key == a.key) {
                out.push(a.clone());
            }
        }
        out
    }
}

/// Whether a request is the `all` snapshot (the mount then reads the usage section first).
pub fn is_all(method: &str, path: &str) -> bool {
    matches!(method, "GET" | "HEAD") && path.trim_end_matches('/') == "all"
}

/// The `usage` member of `all`: the payload, or the empty one saying why the store could not
/// be read (the contract: usage reports its own state, it does not fail the snapshot).
pub fn usage_section(usage: Option<&Result<serde_json::Value, String>>) -> serde_json::Value {
    use crate::store::usage::{UsageRange, empty_report};
    match usage {
        Some(Ok(v)) => v.clone(),
        Some(Err(why)) => {
            let mut v = empty_report(UsageRange::Week);
            v["error"] = serde_json::Value::from(format!("the usage store is unavailable: {why}"));
            v
        }
        None => {
            let mut v = empty_report(UsageRange::Week);
            v["error"] = serde_json::Value::from("this mount records no usage");
            v
        }
    }
}

/// A key the API accepts for a provider (an agent's key).
pub fn valid_key(k: &str) -> bool {
    !k.is_empty() && k.len() <= 100 && !k.chars().any(|c| c.is_control() || c == '/')
}
