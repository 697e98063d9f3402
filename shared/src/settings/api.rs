//! The routes of every settings mount, one function: method, path after `/settings/`, query
//! and body in; status and JSON out (`{ok:false, error}` on failure). Blocking (file I/O and
//! the cross-process lock): mounts call it on a blocking thread.

use super::safe::{self, Edit, Refusal};
use super::{Host, MAX_BODY, Mount, Settings, agents, hooks, machine, mcp, models, skills, usage_section};
use crate::config::{Config, RawConfig};
use crate::ordered::Ordered;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A write's effect class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Applied to the running agent at once (or at the next session start).
    Immediate,
    /// Read once at agent start: needs a backend restart.
    NeedsRestart,
}

impl Effect {
    fn name(self) -> &'static str {
        match self {
            Effect::Immediate => "immediate",
            Effect::NeedsRestart => "needs-restart",
        }
    }
}

/// The answer.
#[derive(Debug)]
pub struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// The JSON body.
    pub body: Value,
    /// A successful `needs-restart` write (the bridge counts these).
    pub needs_restart: bool,
}

impl Reply {
    fn ok(body: Value) -> Reply {
        Reply { status: 200, body, needs_restart: false }
    }
    fn refused(r: Refusal) -> Reply {
        Reply { status: r.status, body: json!({"ok": false, "error": r.error}), needs_restart: false }
    }
    fn written(effect: Effect, mut extra: Value) -> Reply {
        extra["ok"] = Value::Bool(true);
        extra["effect"] = Value::from(effect.name());
        Reply { status: 200, body: extra, needs_restart: effect == Effect::NeedsRestart }
    }
}

/// Answers one settings request.
pub fn handle(
    s: &Settings,
    host: &Host,
    method: &str,
    path: &str,
    query: Option<&str>,
    body: &[u8],
) -> Reply {
    // The directories are the agent's own: a bridge names its agent.
    let scoped = Settings { agent: host.agent.as_ref().map(|a| a.key.clone()), ..s.clone() };
    let s = &scoped;
    let segs: Option<Vec<String>> = path.trim_end_matches('/').split('/').map(decode).collect();
    let Some(segs) = segs else {
        return Reply::refused(Refusal::bad("malformed percent-encoding in the path"));
    };
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    if method == "GET" || method == "HEAD" {
        return match read(s, host, &segs, query) {
            Ok(v) => Reply::ok(v),
            Err(r) => Reply::refused(r),
        };
    }
    if body.len() > MAX_BODY {
        return Reply::refused(Refusal::new(413, "body too large (256 KiB at most)"));
    }
    let body: Value = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else {
        match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(e) => return Reply::refused(Refusal::bad(format!("invalid JSON body: {e}"))),
        }
    };
    match write(s, host, method, &segs, &body) {
        Ok((effect, extra)) => Reply::written(effect, extra),
        Err(r) => Reply::refused(r),
    }
}

/// `config.json` as an [`Ordered`]; a file that is not a JSON object is a 500 (broken file).
fn config(s: &Settings) -> Result<Ordered, Refusal> {
    let path = &s.paths.config_file;
    match std::fs::read_to_string(path) {
        Ok(t) => parse_config(path, &t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Ordered::default()),
        Err(e) => Err(Refusal::io(path, &e)),
    }
}

fn parse_config(path: &Path, text: &str) -> Result<Ordered, Refusal> {
    Ordered::parse_file(text).map_err(|e| {
        Refusal::new(
            500,
            format!("{} is not valid JSON ({e}): fix it by hand; it was left untouched", path.display()),
        )
    })
}

/// The whole file must still be a valid zcode-acp config (the hub and bridges read it).
fn self_check(s: &Settings, text: &str) -> Result<(), Refusal> {
    let raw = RawConfig::parse(&s.paths.config_file, text).map_err(|e| Refusal::new(500, e.to_string()))?;
    Config::from_parts(s.paths.clone(), &raw, &HashMap::<String, String>::new())
        .map(|_| ())
        .map_err(|e| Refusal::new(400, format!("refused: the result would be an invalid config: {e}")))
}

/// A locked read-modify-write of `config.json`.
fn edit_config<T>(s: &Settings, f: impl FnOnce(&mut Ordered) -> Result<T, Refusal>) -> Result<T, Refusal> {
    let path = s.paths.config_file.clone();
    safe::update(&path, |cur| {
        let mut root = parse_config(&path, cur.unwrap_or(""))?;
        let out = f(&mut root)?;
        let mut text = root.render(0);
        text.push('\n');
        self_check(s, &text)?;
        Ok((Edit::Write(text), out))
    })
}

fn dir_or(d: Option<PathBuf>) -> Result<PathBuf, Refusal> {
    d.ok_or_else(|| {
        Refusal::new(500, "no HOME: set settings.subagentsDir / settings.skillsDir in config.json")
    })
}

fn read(s: &Settings, host: &Host, segs: &[&str], query: Option<&str>) -> Result<Value, Refusal> {
    let root = config(s)?;
    let reported = host.reported();
    let takes = host.agent.as_ref().map(|a| a.transports.as_slice());
    let wrap = |key: &str, v: Value| {
        let mut out = json!({"ok": true});
        match v {
            Value::Object(m) if key.is_empty() => out.as_object_mut().expect("object").extend(m),
            other => out[key] = other,
        }
        out
    };
    Ok(match segs {
        ["all"] => {
            let agents_dir = s.subagents_dir(&root);
            let mut v = json!({
                "ok": true,
                "models": models::read(&root, &reported),
                "mcp": mcp::read(&root, takes),
                "agents": agents_dir.as_deref().map_or(Value::Null, |d| agents::read(d, &root)),
                "skills": s.skills_dir(&root).as_deref().map_or(Value::Null, skills::read),
                "hooks": hooks::read(&root),
                "usage": usage_section(host.usage.as_ref()),
                "backups": machine::read_backups(&machine::backups(&s.paths.config_file, agents_dir.as_deref())),
                "resetCards": machine::reset_eligibility(),
                "appUpdate": machine::app_update(None)?,
            });
            if host.mount == Mount::Bridge {
                v["pendingRestart"] = Value::from(host.pending_restart > 0);
            }
            v
        }
        ["models"] => wrap("", models::read(&root, &reported)),
        ["mcp"] => wrap("", mcp::read(&root, takes)),
        ["hooks"] => wrap("hooks", hooks::read(&root)),
        ["agents"] => wrap("", agents::read(&dir_or(s.subagents_dir(&root))?, &root)),
        ["skills"] => wrap("", skills::read(&dir_or(s.skills_dir(&root))?)),
        ["backups"] => wrap(
            "",
            machine::read_backups(&machine::backups(&s.paths.config_file, s.subagents_dir(&root).as_deref())),
        ),
        ["reset-cards"] => {
            if query_param(query, "providerId").is_none_or(|p| p.is_empty()) {
                return Err(Refusal::bad("`providerId` is required (?providerId=…)"));
            }
            return Err(machine::no_credentials());
        }
        ["app-update"] => wrap("appUpdate", machine::app_update(query_param(query, "channel").as_deref())?),
        ["pending-restart"] => match host.mount {
            Mount::Bridge => {
                json!({"ok": true, "pendingRestart": host.pending_restart > 0, "writes": host.pending_restart})
            }
            Mount::Hub => {
                return Err(Refusal::new(
                    409,
                    "the hub has no backend to restart: ask the bridge that took the write, GET /api/instances/{id}/settings/pending-restart",
                ));
            }
        },
        // The hub answers `quota` itself (its route's hook), before this function is called.
        ["quota"] if host.mount == Mount::Bridge => {
            return Err(Refusal::missing("quota is account-level: GET /api/settings/quota on the hub"));
        }
        _ => return Err(Refusal::missing("unknown settings route")),
    })
}

type Written = (Effect, Value);

fn write(s: &Settings, host: &Host, method: &str, segs: &[&str], body: &Value) -> Result<Written, Refusal> {
    let reported = host.reported();
    let known = |p: &str| reported.iter().any(|a| a.key == p);
    let done = |e: Effect| Ok((e, json!({})));
    match (method, segs) {
        ("PUT", ["providers", id]) => {
            edit_config(s, |root| models::put_provider(root, id, body, known(id)))?;
            done(Effect::Immediate)
        }
        ("POST", ["models"]) => {
            edit_config(s, |root| models::add(root, body, known))?;
            done(Effect::Immediate)
        }
        ("DELETE", ["models", pid, mid]) => {
            edit_config(s, |root| models::delete(root, pid, mid))?;
            done(Effect::Immediate)
        }
        ("PUT", ["mcp", name]) => {
            if !mcp::valid_name(name) {
                return Err(Refusal::bad(
                    "invalid MCP server name: letters, digits, `_`, `.`, `-` (64 at most)",
                ));
            }
            mcp::validate(body).map_err(Refusal::bad)?;
            edit_config(s, |root| {
                let mut servers = root.object(mcp::KEY);
                servers.set_raw(name, crate::ordered::pretty(body, 2));
                root.set_object(mcp::KEY, &servers, 1);
                Ok(())
            })?;
            done(Effect::NeedsRestart)
        }
        ("DELETE", ["mcp", name]) => {
            edit_config(s, |root| {
                let mut servers = root.object(mcp::KEY);
                if !servers.remove(name) {
                    return Err(Refusal::missing(format!("no MCP server `{name}`")));
                }
                root.set_object(mcp::KEY, &servers, 1);
                Ok(())
            })?;
            done(Effect::NeedsRestart)
        }
        ("POST", ["mcp", "enable"]) => {
            let name = body["name"].as_str().ok_or_else(|| Refusal::bad("`name` must be a string"))?;
            let enable =
                body["enable"].as_bool().ok_or_else(|| Refusal::bad("`enable` must be true or false"))?;
            edit_config(s, |root| {
                let mut servers = root.object(mcp::KEY);
                if servers.get(name).is_none() {
                    return Err(Refusal::missing(format!("no MCP server `{name}`")));
                }
                let mut server = servers.object(name);
                server.set("enabled", &Value::from(enable));
                servers.set_object(name, &server, 2);
                root.set_object(mcp::KEY, &servers, 1);
                Ok(())
            })?;
            done(Effect::NeedsRestart)
        }
        ("PUT", ["hooks", event, index]) => {
            let tree = edit_config(s, |root| {
                hooks::put(root, event, index, body)?;
                Ok(hooks::read(root))
            })?;
            Ok((Effect::NeedsRestart, json!({"hooks": tree})))
        }
        ("POST", ["hooks", "enabled"]) => {
            let tree = edit_config(s, |root| {
                hooks::set_enabled(root, body)?;
                Ok(hooks::read(root))
            })?;
            Ok((Effect::NeedsRestart, json!({"hooks": tree})))
        }
        ("POST", ["hooks", event]) => {
            let (index, tree) = edit_config(s, |root| {
                let index = hooks::add(root, event, body)?;
                Ok((index, hooks::read(root)))
            })?;
            Ok((Effect::NeedsRestart, json!({"index": index, "hooks": tree})))
        }
        ("DELETE", ["hooks", event, index]) => {
            let tree = edit_config(s, |root| {
                hooks::remove(root, event, index)?;
                Ok(hooks::read(root))
            })?;
            Ok((Effect::NeedsRestart, json!({"hooks": tree})))
        }
        ("PUT", ["agents", id]) => {
            let root = config(s)?;
            if let Some(o) = agents::put(&dir_or(s.subagents_dir(&root))?, id, body)? {
                edit_config(s, |root| {
                    let mut all = root.object(agents::OVERRIDES);
                    match o.is_null() {
                        true => {
                            all.remove(id);
                        }
                        false => all.set(id, &o),
                    }
                    root.set_object(agents::OVERRIDES, &all, 1);
                    Ok(())
                })?;
            }
            done(Effect::NeedsRestart)
        }
        ("DELETE", ["agents", id]) => {
            agents::delete(&dir_or(s.subagents_dir(&config(s)?))?, id)?;
            done(Effect::NeedsRestart)
        }
        ("POST", ["agents", id, "enable"]) => {
            let enable =
                body["enable"].as_bool().ok_or_else(|| Refusal::bad("`enable` must be true or false"))?;
            agents::enable(&dir_or(s.subagents_dir(&config(s)?))?, id, enable)?;
            done(Effect::NeedsRestart)
        }
        ("POST", ["skills", "enable"]) => {
            let path = body["path"].as_str().ok_or_else(|| Refusal::bad("`path` must be a string"))?;
            let enable =
                body["enable"].as_bool().ok_or_else(|| Refusal::bad("`enable` must be true or false"))?;
            skills::enable(&dir_or(s.skills_dir(&config(s)?))?, path, enable)?;
            done(Effect::Immediate)
        }
        ("POST", ["skills", "copy-to-user"]) => {
            let path = body["path"].as_str().ok_or_else(|| Refusal::bad("`path` must be a string"))?;
            let to = skills::copy_to_user(&dir_or(s.skills_dir(&config(s)?))?, path)?;
            Ok((Effect::Immediate, json!({"path": to})))
        }
        ("DELETE", ["skills", path]) => {
            skills::delete(&dir_or(s.skills_dir(&config(s)?))?, path)?;
            done(Effect::Immediate)
        }
        ("POST", ["backups", "restore"]) => {
            let path = body["path"].as_str().ok_or_else(|| Refusal::bad("`path` must be a string"))?;
            let root = config(s)?;
            let list = machine::backups(&s.paths.config_file, s.subagents_dir(&root).as_deref());
            let restored = machine::restore(&list, path, |target, text| {
                if target == s.paths.config_file {
                    parse_config(target, text)?;
                    self_check(s, text)?;
                }
                Ok(())
            })?;
            Ok((Effect::NeedsRestart, json!({"restored": restored.display().to_string()})))
        }
        ("POST", ["reset-cards", action @ ("use" | "opportunity" | "history-read")]) => {
            Err(machine::reset_write(action, body))
        }
        ("POST", ["app-update", "install"]) => Err(machine::app_install(body)),
        (
            _,
            ["providers", _]
            | ["models", ..]
            | ["mcp", ..]
            | ["hooks", ..]
            | ["agents", ..]
            | ["skills", ..]
            | ["backups", ..],
        ) => Err(Refusal::new(405, format!("{method} is not allowed on this settings route"))),
        _ => Err(Refusal::missing("unknown settings route")),
    }
}

/// A query parameter, percent-decoded.
fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    query?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == name).then(|| decode(&v.replace('+', " "))).flatten()
    })
}

/// Percent-decodes a path segment or query value; `None` when malformed or not UTF-8.
fn decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}
