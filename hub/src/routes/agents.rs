//! `GET /api/agents`: the agents a create may name (`POST /api/instances {agent}`), as
//! `{"default": NAME, "agents": [{"name", "command"}]}`. `command` is the command line, for
//! display; an agent's `env` (where keys live) is never shown. Without `agents.default` the
//! built-in demo agent is the default and listed first, as `demo-agent`.

use crate::Hub;
use crate::http::{Resp, json};
use hyper::StatusCode;
use serde_json::json;

/// Answers the list, from the configuration as it is now.
pub fn list(hub: &Hub) -> Resp {
    let cfg = hub.config();
    let agents: Vec<_> = cfg
        .agents
        .choices()
        .into_iter()
        .map(|(name, command)| json!({"name": name, "command": command}))
        .collect();
    json(StatusCode::OK, &json!({"default": cfg.agents.default_name(), "agents": agents}))
}
