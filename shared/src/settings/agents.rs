//! Subagents: `<dir>/<id>.md` files with frontmatter (name, description, color, model,
//! thoughtLevel, …), the agent's own directory (default `~/.claude/agents`). A disabled one is
//! renamed `<id>.md.disabled`: an agent that loads `*.md` from the directory no longer sees it,
//! and nothing else about it changes. Built-ins cannot be edited or deleted; their model
//! override lives in `config.json` (`subagentModels`).

use super::front::Front;
use super::safe::{self, Edit, Refusal};
use crate::ordered::Ordered;
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};

/// The built-in subagents (the Claude family's): listed, never edited or deleted.
pub const BUILT_IN: [&str; 2] = ["general-purpose", "Explore"];

/// The editable frontmatter keys.
pub const EDITABLE: [&str; 5] = ["name", "description", "color", "model", "thoughtLevel"];

/// The config key of built-ins' model overrides.
pub const OVERRIDES: &str = "subagentModels";

/// A subagent id the API accepts (a file name in the directory).
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && !id.starts_with('.')
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
}

/// `(file, enabled)` of subagent `id`, if it exists.
pub fn locate(dir: &Path, id: &str) -> Option<(PathBuf, bool)> {
    let on = dir.join(format!("{id}.md"));
    let off = dir.join(format!("{id}.md.disabled"));
    if on.is_file() {
        Some((on, true))
    } else if off.is_file() {
        Some((off, false))
    } else {
        None
    }
}

/// The `agents` read: the directory's subagents, then the built-ins.
pub fn read(dir: &Path, root: &Ordered) -> Value {
    let mut rows = Vec::new();
    let mut names: Vec<(String, PathBuf, bool)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let (id, enabled) = match name.strip_suffix(".md.disabled") {
                Some(id) => (id.to_owned(), false),
                None => (name.strip_suffix(".md")?.to_owned(), true),
            };
            (valid_id(&id) && e.file_type().ok()?.is_file()).then(|| (id, e.path(), enabled))
        })
        .collect();
    names.sort();
    for (id, path, enabled) in names {
        let mut row = Map::new();
        row.insert("id".into(), Value::from(id.clone()));
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let f = Front::parse(&text);
                for key in EDITABLE {
                    row.insert(key.into(), f.get(key).map_or(Value::Null, Value::from));
                }
                if row["name"].is_null() {
                    row.insert("name".into(), Value::from(id));
                }
            }
            Err(e) => {
                row.insert("error".into(), Value::from(e.to_string()));
            }
        }
        row.insert("enabled".into(), Value::from(enabled));
        row.insert("builtIn".into(), Value::from(false));
        row.insert("path".into(), Value::from(path.display().to_string()));
        rows.push(Value::Object(row));
    }
    let overrides = root.value(OVERRIDES).unwrap_or(Value::Null);
    for id in BUILT_IN {
        let o = &overrides[id];
        rows.push(json!({
            "id": id, "name": id, "builtIn": true, "enabled": true,
            "model": o["modelId"], "providerId": o["providerId"],
        }));
    }
    json!({"dir": dir.display().to_string(), "agents": rows})
}

/// A frontmatter value from a body field: a one-line string of at most 1024 characters.
fn field(body: &Map<String, Value>, key: &str) -> Result<Option<Option<String>>, Refusal> {
    match body.get(key) {
        None => Ok(None),
        Some(Value::Null) => Ok(Some(None)),
        Some(Value::String(s)) if s.len() <= 1024 && !s.chars().any(char::is_control) => {
            Ok(Some(Some(s.clone())))
        }
        Some(_) => Err(Refusal::bad(format!("`{key}` must be a one-line string (1024 characters at most)"))),
    }
}

/// `PUT /settings/agents/{id}`: creates or updates a subagent file (a built-in: its model
/// override, written by the caller into config.json: returned as `Some(override)`).
pub fn put(dir: &Path, id: &str, body: &Value) -> Result<Option<Value>, Refusal> {
    let Some(body) = body.as_object() else { return Err(Refusal::bad("the body must be a JSON object")) };
    if BUILT_IN.contains(&id) {
        if let Some(k) = body.keys().find(|k| !["providerId", "modelId"].contains(&k.as_str())) {
            return Err(Refusal::bad(format!(
                "`{id}` is built in: only its model override (providerId, modelId) can change, not `{k}`"
            )));
        }
        let provider = field(body, "providerId")?.flatten();
        let model = field(body, "modelId")?.flatten();
        return Ok(Some(match (provider, model) {
            (None, None) => Value::Null,
            (p, m) => json!({"providerId": p, "modelId": m}),
        }));
    }
    if !valid_id(id) {
        return Err(Refusal::bad("invalid subagent id: letters, digits, `_`, `.`, `-` (64 at most)"));
    }
    let mut edits = Vec::new();
    for key in EDITABLE {
        if let Some(v) = field(body, key)? {
            edits.push((key, v));
        }
    }
    if let Some(m) = field(body, "modelId")? {
        edits.push(("model", m));
    }
    let prompt = match body.get("prompt") {
        None => None,
        Some(Value::String(s)) if s.len() <= 64 * 1024 => Some(s.clone()),
        Some(_) => return Err(Refusal::bad("`prompt` must be a string (64 KiB at most)")),
    };
    let existing = locate(dir, id);
    if existing.is_some() && prompt.is_some() {
        return Err(Refusal::bad("the system prompt of an existing subagent is not editable"));
    }
    let path = existing.map_or_else(|| dir.join(format!("{id}.md")), |(p, _)| p);
    safe::update(&path, |cur| {
        let mut f = match cur {
            Some(text) => {
                let f = Front::parse(text);
                if !f.has_block() {
                    return Err(Refusal::new(
                        500,
                        format!("{} has no frontmatter block: left untouched", path.display()),
                    ));
                }
                f
            }
            None => {
                if !edits.iter().any(|(k, v)| *k == "description" && v.is_some()) {
                    return Err(Refusal::bad("a new subagent needs a `description`"));
                }
                let mut f = Front::parse(&format!("---\n---\n{}", prompt.clone().unwrap_or_default()));
                f.set("name", Some(id));
                f
            }
        };
        for (k, v) in &edits {
            f.set(k, v.as_deref());
        }
        if f.get("description").is_none() {
            return Err(Refusal::bad("`description` cannot be removed"));
        }
        Ok((Edit::Write(f.render()), None))
    })
}

/// `DELETE /settings/agents/{id}` (a backup is kept).
pub fn delete(dir: &Path, id: &str) -> Result<(), Refusal> {
    builtin_refused(id, "deleted")?;
    let Some((path, _)) = locate(dir, id).filter(|_| valid_id(id)) else {
        return Err(Refusal::missing(format!("no subagent `{id}`")));
    };
    safe::update(&path, |_| Ok((Edit::Remove, ())))
}

/// `POST /settings/agents/{id}/enable {enable}`: renames the file in or out of the agent's view.
pub fn enable(dir: &Path, id: &str, enable: bool) -> Result<(), Refusal> {
    builtin_refused(id, "disabled")?;
    let Some((path, now)) = locate(dir, id).filter(|_| valid_id(id)) else {
        return Err(Refusal::missing(format!("no subagent `{id}`")));
    };
    if now == enable {
        return Ok(());
    }
    let target = dir.join(if enable { format!("{id}.md") } else { format!("{id}.md.disabled") });
    let _lock = safe::lock(&dir.join(format!("{id}.md")))?;
    std::fs::rename(&path, &target).map_err(|e| Refusal::io(&path, &e))
}

fn builtin_refused(id: &str, what: &str) -> Result<(), Refusal> {
    if BUILT_IN.contains(&id) {
        return Err(Refusal::bad(format!("`{id}` is built in: it cannot be {what}")));
    }
    Ok(())
}
