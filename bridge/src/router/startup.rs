//! Starting the agent and a session. What they start with is read from `config.json` first
//! (the hooks tree and the MCP servers the agent gets; the default model a new session gets),
//! on the blocking pool, never on the router: a config file that is slow to read (a hung
//! mount, a FIFO) delays only what needs it, and every client is routed meanwhile. Messages
//! that need the agent are held as while it starts.

use super::agent::{LinkState, Pending, Purpose};
use super::settings::{NewSession, SettingsEvent};
use super::{ClientId, Event, Router};
use crate::hooks::Tree;
use std::path::PathBuf;
use zcode_shared::jsonrpc::{Id, RawMessage, RpcError};

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

    pub(super) fn on_new_session(&mut self, client: ClientId, id: Id, msg: RawMessage) {
        if !self.agent.ready() {
            return self.defer(client, msg);
        }
        let msg = self.sessions.pinned(msg);
        let params = msg.params_value();
        let Some(cwd) = params["cwd"].as_str().map(PathBuf::from) else {
            return self.clients.reply(
                client,
                &id,
                Err(RpcError::invalid_params("missing required field `cwd`")),
            );
        };
        let dirs = super::from_client::dirs_of(&params);
        // The default model the answer applies is read from config.json now, off the router;
        // the request goes on when it has been read.
        let Some(file) = self.settings.config_file() else {
            return self.forward_new_session(NewSession {
                client,
                id,
                msg,
                cwd,
                dirs,
                config: String::new(),
            });
        };
        self.tasks.spawn_blocking(move || {
            let config = super::settings::read_config(&file);
            Event::Settings(SettingsEvent::NewSession(Box::new(NewSession {
                client,
                id,
                msg,
                cwd,
                dirs,
                config,
            })))
        });
    }

    /// A `session/new` whose config.json has been read goes to the agent (held again if the
    /// agent went down meanwhile).
    pub(super) fn forward_new_session(&mut self, new: NewSession) {
        let NewSession { client, id, msg, cwd, dirs, config } = new;
        if !self.clients.contains_key(&client) {
            return;
        }
        if !self.agent.ready() {
            return self.defer(client, msg);
        }
        let pending = Pending {
            client: Some((client, id)),
            method: msg.method().to_owned(),
            purpose: Purpose::NewSession { cwd, dirs, config },
        };
        let msg = self.settings.with_mcp(msg);
        self.agent.forward(&msg, pending);
    }
}
