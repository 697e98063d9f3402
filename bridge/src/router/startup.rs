//! Starting the agent. What it starts with is read from `config.json` first (the hooks tree,
//! the MCP servers the agent gets), on the blocking pool, never on the router: a config file
//! that is slow to read (a hung mount, a FIFO) delays only the agent's start, and every client
//! is routed meanwhile. Messages that need the agent are held as while it starts.

use super::agent::LinkState;
use super::{Event, Router};
use crate::hooks::Tree;

/// `config.json` as read for an agent start.
pub struct AgentConfig {
    /// The hooks tree, or why it is malformed (the reason the agent does not start: policies
    /// are not silently dropped).
    hooks: Result<Tree, String>,
    /// The file's text (its MCP servers), empty when there is none.
    config: String,
}

impl Router {
    /// Starts the agent if it is down: reads its configuration off the router, then spawns it
    /// ([`Router::on_agent_config`]).
    pub(super) fn start_agent(&mut self) {
        if !matches!(self.agent.state, LinkState::Down) || self.agent.preparing {
            return;
        }
        self.agent.preparing = true;
        let hooks_file = self.hooks.config_file();
        let settings_file = self.settings.config_file();
        self.tasks.spawn_blocking(move || {
            let hooks = crate::hooks::load(hooks_file.as_deref());
            let config = settings_file.as_deref().map(super::settings::read_config).unwrap_or_default();
            Event::AgentConfig(Box::new(AgentConfig { hooks, config }))
        });
    }

    /// The configuration was read: spawn the agent; a malformed tree or a spawn failure fails
    /// everything waiting for it.
    pub(super) fn on_agent_config(&mut self, read: AgentConfig) {
        self.agent.preparing = false;
        if !matches!(self.agent.state, LinkState::Down) {
            return;
        }
        let tree = match read.hooks {
            Ok(tree) => tree,
            Err(e) => {
                let failure = self.agent.fail(&format!("was not started: {e}"));
                return self.agent_down(&failure);
            }
        };
        self.hooks.set_tree(tree);
        match self.agent.ensure_started(&self.tasks.events) {
            Ok(()) => self.settings.agent_spawned(read.config),
            Err(reason) => {
                let failure = self.agent.fail(&reason);
                self.agent_down(&failure);
            }
        }
    }
}
