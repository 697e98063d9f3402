//! Models: what the agents report (a session config option of the `model` category, or the
//! session's model state), gathered per agent by the bridges, plus what `config.json`'s
//! `models` adds: per agent (a "provider" in the contract's words) a display name, an enabled
//! flag, a `defaultModel` applied at every session start, and model entries (added ids,
//! renamed or disabled ones).

use super::safe::Refusal;
use super::{ReportedAgent, valid_key};
use crate::ordered::{Ordered, pretty};
use serde_json::{Map, Value, json};

/// The config key.
pub const KEY: &str = "models";

/// The `models` read: one provider per agent reported or configured.
pub fn read(root: &Ordered, reported: &[ReportedAgent]) -> Value {
    let config = root.object(KEY);
    let mut ids: Vec<String> = reported.iter().map(|r| r.key.clone()).collect();
    for n in config.names() {
        if !ids.contains(&n) {
            ids.push(n);
        }
    }
    let providers: Vec<Value> = ids
        .iter()
        .map(|id| {
            let conf = config.value(id).unwrap_or(Value::Null);
            let rep = reported.iter().find(|r| &r.key == id);
            let mut models: Vec<Value> = Vec::new();
            let entries = conf["models"].as_array().cloned().unwrap_or_default();
            let entry = |mid: &str| entries.iter().find(|e| e["id"] == mid).cloned();
            for (mid, name) in rep.map(|r| r.models.as_slice()).unwrap_or_default() {
                let e = entry(mid).unwrap_or(Value::Null);
                models.push(json!({
                    "id": mid, "name": e["name"].as_str().unwrap_or(name),
                    "enabled": e["enabled"].as_bool().unwrap_or(true), "source": "agent",
                }));
            }
            for e in &entries {
                let Some(mid) = e["id"].as_str() else { continue };
                if models.iter().any(|m| m["id"] == mid) {
                    continue;
                }
                models.push(json!({
                    "id": mid, "name": e["name"].as_str().unwrap_or(mid),
                    "enabled": e["enabled"].as_bool().unwrap_or(true), "source": "config",
                }));
            }
            json!({
                "id": id,
                "name": conf["name"].as_str().or(rep.map(|r| r.name.as_str())).unwrap_or(id),
                "enabled": conf["enabled"].as_bool().unwrap_or(true),
                "defaultModel": conf["defaultModel"],
                "currentModel": rep.and_then(|r| r.current.clone()),
                "reported": rep.is_some(),
                "models": models,
            })
        })
        .collect();
    json!({"providers": providers})
}

/// The default model configured for agent `key`, if its provider is enabled.
pub fn default_for(root: &Ordered, key: &str) -> Option<String> {
    let conf = root.object(KEY).value(key)?;
    if conf["enabled"] == false {
        return None;
    }
    conf["defaultModel"].as_str().map(str::to_owned)
}

fn provider(root: &Ordered, id: &str) -> Ordered {
    root.object(KEY).object(id)
}

fn store(root: &mut Ordered, id: &str, p: &Ordered) {
    let mut all = root.object(KEY);
    all.set_object(id, p, 2);
    root.set_object(KEY, &all, 1);
}

/// `PUT /settings/providers/{id}`: `{enabled?, name?, defaultModel?, models?: [{id, enabled?,
/// name?}]}` on a provider that exists (`known`: reported by an agent, or in the config).
pub fn put_provider(root: &mut Ordered, id: &str, body: &Value, known: bool) -> Result<(), Refusal> {
    let Some(body) = body.as_object() else { return Err(Refusal::bad("the body must be a JSON object")) };
    if !known && root.object(KEY).get(id).is_none() {
        return Err(Refusal::missing(format!("no provider `{id}`: providers cannot be created here")));
    }
    let mut p = provider(root, id);
    if let Some(v) = body.get("enabled") {
        let b = v.as_bool().ok_or_else(|| Refusal::bad("`enabled` must be true or false"))?;
        p.set("enabled", &Value::from(b));
    }
    if let Some(v) = body.get("name") {
        p.set("name", &Value::from(one_line(v, "name")?));
    }
    if let Some(v) = body.get("defaultModel") {
        match v {
            Value::Null => {
                p.remove("defaultModel");
            }
            _ => p.set("defaultModel", &Value::from(model_id(v, "defaultModel")?)),
        }
    }
    if let Some(v) = body.get("models") {
        let patches = v.as_array().ok_or_else(|| Refusal::bad("`models` must be an array"))?;
        let mut entries = entries(&p);
        for patch in patches {
            let mid = model_id(&patch["id"], "models[].id")?;
            let mut e = take(&mut entries, &mid);
            if let Some(en) = patch.get("enabled") {
                e.insert(
                    "enabled".into(),
                    Value::from(
                        en.as_bool()
                            .ok_or_else(|| Refusal::bad("`models[].enabled` must be true or false"))?,
                    ),
                );
            }
            if let Some(n) = patch.get("name") {
                e.insert("name".into(), Value::from(one_line(n, "models[].name")?));
            }
            entries.push(Value::Object(e));
        }
        p.set_raw("models", pretty(&Value::Array(entries), 3));
    }
    store(root, id, &p);
    Ok(())
}

/// `POST /settings/models {providerId, modelId, name?}`.
pub fn add(root: &mut Ordered, body: &Value, known: impl Fn(&str) -> bool) -> Result<(), Refusal> {
    let pid = body["providerId"]
        .as_str()
        .filter(|p| valid_key(p))
        .ok_or_else(|| Refusal::bad("`providerId` must name a provider"))?;
    let mid = model_id(&body["modelId"], "modelId")?;
    if !known(pid) && root.object(KEY).get(pid).is_none() {
        return Err(Refusal::missing(format!("no provider `{pid}`: providers cannot be created here")));
    }
    let mut p = provider(root, pid);
    let mut entries = entries(&p);
    if entries.iter().any(|e| e["id"] == mid.as_str()) {
        return Err(Refusal::new(409, format!("`{mid}` is already in `{pid}`")));
    }
    let mut e = Map::new();
    e.insert("id".into(), Value::from(mid));
    if let Some(n) = body.get("name") {
        e.insert("name".into(), Value::from(one_line(n, "name")?));
    }
    entries.push(Value::Object(e));
    p.set_raw("models", pretty(&Value::Array(entries), 3));
    store(root, pid, &p);
    Ok(())
}

/// `DELETE /settings/models/{pid}/{mid}`: removes a configured model entry.
pub fn delete(root: &mut Ordered, pid: &str, mid: &str) -> Result<(), Refusal> {
    let mut p = provider(root, pid);
    let mut entries = entries(&p);
    let before = entries.len();
    entries.retain(|e| e["id"] != mid);
    if entries.len() == before {
        return Err(Refusal::missing(format!(
            "no configured model `{mid}` in `{pid}` (a model the agent reports can be disabled, not removed)"
        )));
    }
    p.set_raw("models", pretty(&Value::Array(entries), 3));
    store(root, pid, &p);
    Ok(())
}

fn entries(p: &Ordered) -> Vec<Value> {
    p.value("models").and_then(|v| v.as_array().cloned()).unwrap_or_default()
}

fn take(entries: &mut Vec<Value>, mid: &str) -> Map<String, Value> {
    match entries.iter().position(|e| e["id"] == mid) {
        Some(i) => entries.remove(i).as_object().cloned().unwrap_or_default(),
        None => {
            let mut m = Map::new();
            m.insert("id".into(), Value::from(mid));
            m
        }
    }
}

fn one_line(v: &Value, key: &str) -> Result<String, Refusal> {
    match v.as_str() {
        Some(s) if !s.trim().is_empty() && s.len() <= 200 && !s.chars().any(char::is_control) => {
            Ok(s.trim().to_owned())
        }
        _ => {
            Err(Refusal::bad(format!("`{key}` must be a non-empty one-line string (200 characters at most)")))
        }
    }
}

fn model_id(v: &Value, key: &str) -> Result<String, Refusal> {
    match v.as_str() {
        Some(s)
            if !s.is_empty() && s.len() <= 200 && !s.chars().any(|c| c.is_control() || c.is_whitespace()) =>
        {
            Ok(s.to_owned())
        }
        _ => Err(Refusal::bad(format!("`{key}` must be a model id (no spaces, 200 characters at most)"))),
    }
}
