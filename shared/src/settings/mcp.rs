//! MCP servers: `mcpServers` in zcode-acp's own `config.json` (name → server, the contract's
//! fields), the contract's type checks, and the ACP shapes a bridge adds to every session
//! start (`stdio`, `http`, `sse`), limited to what the agent advertises.

use crate::ordered::Ordered;
use serde_json::{Map, Value, json};

/// The config key.
pub const KEY: &str = "mcpServers";

/// A server name the API accepts (it is also a URL segment and the agent's tool prefix).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
        && !name.starts_with('.')
}

/// The contract's checks: `type`/`url`/`command` strings, `args` strings, `env`/`headers`
/// objects of strings, `enabled` a boolean; and something to start or reach.
pub fn validate(server: &Value) -> Result<(), String> {
    let Some(obj) = server.as_object() else { return Err("the server must be a JSON object".into()) };
    for key in ["type", "url", "command"] {
        if obj.get(key).is_some_and(|v| !v.is_string()) {
            return Err(format!("`{key}` must be a string"));
        }
    }
    if let Some(args) = obj.get("args") {
        if !args.as_array().is_some_and(|a| a.iter().all(Value::is_string)) {
            return Err("`args` must be an array of strings".into());
        }
    }
    for key in ["env", "headers"] {
        if let Some(v) = obj.get(key) {
            if !v.as_object().is_some_and(|m| m.values().all(Value::is_string)) {
                return Err(format!("`{key}` must be an object of strings"));
            }
        }
    }
    if obj.get("enabled").is_some_and(|v| !v.is_boolean()) {
        return Err("`enabled` must be true or false".into());
    }
    match transport(obj) {
        Some("stdio") if str_of(obj, "command").is_none_or(|c| c.trim().is_empty()) => {
            Err("a stdio server needs a non-empty `command`".into())
        }
        Some("http" | "sse") if str_of(obj, "url").is_none_or(|u| !is_http_url(u)) => {
            Err("an http or sse server needs an http(s) `url`".into())
        }
        Some("stdio" | "http" | "sse") => Ok(()),
        Some(other) => Err(format!("`type` must be stdio, http, sse (or remote), found {other:?}")),
        None => Err("the server needs a `command` (stdio) or a `url` (http)".into()),
    }
}

fn str_of<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    obj.get(key).and_then(Value::as_str)
}

fn is_http_url(u: &str) -> bool {
    u.starts_with("https://") || u.starts_with("http://")
}

/// The transport: `type` (legacy `remote` is `http`), else inferred from `command` / `url`.
fn transport(obj: &Map<String, Value>) -> Option<&str> {
    match str_of(obj, "type") {
        Some("remote") => Some("http"),
        Some(t) => Some(t),
        None if obj.contains_key("command") => Some("stdio"),
        None if obj.contains_key("url") => Some("http"),
        None => None,
    }
}

/// Whether a stored server is enabled (absent: yes).
pub fn enabled(server: &Value) -> bool {
    server.get("enabled").and_then(Value::as_bool).unwrap_or(true)
}

/// The transports an agent takes, from its `initialize` result's `agentCapabilities`
/// (`stdio` always: ACP requires it).
pub fn transports(agent_caps: &Value) -> Vec<&'static str> {
    let mcp = &agent_caps["mcpCapabilities"];
    let mut out = vec!["stdio"];
    if mcp["http"] == true {
        out.push("http");
    }
    if mcp["sse"] == true {
        out.push("sse");
    }
    out
}

/// One configured server as ACP's `McpServer`, or why the agent cannot take it.
pub fn to_acp(name: &str, server: &Value, takes: &[&str]) -> Result<Value, String> {
    validate(server)?;
    let obj = server.as_object().expect("validated as an object");
    let pairs = |key: &str| -> Vec<Value> {
        obj.get(key)
            .and_then(Value::as_object)
            .map(|m| m.iter().map(|(k, v)| json!({"name": k, "value": v})).collect())
            .unwrap_or_default()
    };
    let t = transport(obj).expect("validated");
    if !takes.contains(&t) {
        return Err(format!("the agent does not take {t} MCP servers (it advertises {})", takes.join(", ")));
    }
    Ok(match t {
        "stdio" => json!({
            "name": name,
            "command": obj["command"],
            "args": obj.get("args").cloned().unwrap_or_else(|| json!([])),
            "env": pairs("env"),
        }),
        _ => json!({"type": t, "name": name, "url": obj["url"], "headers": pairs("headers")}),
    })
}

/// The enabled servers of a config file, in ACP shapes, and the ones the agent cannot take
/// (`(name, reason)`): what a bridge adds to a session start.
pub fn for_agent(config_text: &str, takes: &[&str]) -> (Vec<Value>, Vec<(String, String)>) {
    let Ok(root) = Ordered::parse_file(config_text) else { return (Vec::new(), Vec::new()) };
    let servers = root.object(KEY);
    let (mut ok, mut skipped) = (Vec::new(), Vec::new());
    for name in servers.names() {
        let Some(server) = servers.value(&name) else { continue };
        if !enabled(&server) {
            continue;
        }
        match to_acp(&name, &server, takes) {
            Ok(v) => ok.push(v),
            Err(why) => skipped.push((name, why)),
        }
    }
    (ok, skipped)
}

/// The `mcp` read: every configured server with its name, effective type and enabled state;
/// with an agent's transports, whether that agent can take it.
pub fn read(root: &Ordered, takes: Option<&[&str]>) -> Value {
    let servers = root.object(KEY);
    let rows: Vec<Value> = servers
        .names()
        .into_iter()
        .filter_map(|name| {
            let server = servers.value(&name)?;
            let mut row = server.as_object().cloned().unwrap_or_default();
            row.insert("enabled".into(), Value::from(enabled(&server)));
            if let Some(t) = server.as_object().and_then(transport) {
                row.insert("type".into(), Value::from(t));
            }
            if let Err(why) = validate(&server) {
                row.insert("error".into(), Value::from(why));
            }
            if let Some(takes) = takes {
                let verdict = to_acp(&name, &server, takes);
                row.insert("agentAccepts".into(), Value::from(verdict.is_ok()));
                if let Err(why) = verdict {
                    row.insert("agentSkipReason".into(), Value::from(why));
                }
            }
            row.insert("name".into(), Value::from(name));
            row.insert("source".into(), Value::from("user"));
            Some(Value::Object(row))
        })
        .collect();
    json!({"servers": rows})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_contract_type_checks() {
        let bad = [
            json!({"command": 1}),
            json!({"command": "x", "args": "a"}),
            json!({"command": "x", "args": [1]}),
            json!({"command": "x", "env": {"A": 1}}),
            json!({"url": "https://h", "headers": []}),
            json!({"command": "x", "enabled": "yes"}),
            json!({"type": 3, "command": "x"}),
            json!({"type": "carrier-pigeon", "command": "x"}),
            json!({}),
            json!([]),
        ];
        for b in bad {
            assert!(validate(&b).is_err(), "{b} passed");
        }
        assert!(validate(&json!({"command": "x", "extra": {"kept": 1}})).is_ok());
        assert!(validate(&json!({"type": "remote", "url": "https://h"})).is_ok());
    }

    #[test]
    fn acp_shapes_and_what_the_agent_takes() {
        let text = r#"{"mcpServers": {
            "fs": {"command": "mcp-fs", "args": ["--ro"], "env": {"K": "v"}},
            "web": {"url": "https://mcp.example/x", "headers": {"A": "b"}},
            "old": {"type": "sse", "url": "http://127.0.0.1:9/sse"},
            "off": {"command": "nope", "enabled": false}}}"#;
        let (ok, skipped) = for_agent(text, &["stdio", "http"]);
        assert_eq!(
            ok[0],
            json!({"name": "fs", "command": "mcp-fs", "args": ["--ro"], "env": [{"name": "K", "value": "v"}]})
        );
        assert_eq!(
            ok[1],
            json!({"type": "http", "name": "web", "url": "https://mcp.example/x", "headers": [{"name": "A", "value": "b"}]})
        );
        assert_eq!(ok.len(), 2);
        assert_eq!(skipped.len(), 1);
        assert_eq!(skipped[0].0, "old");
        assert_eq!(transports(&json!({"mcpCapabilities": {"http": true}})), vec!["stdio", "http"]);
    }
}
