//! The settings API over the hooks tree, as pure functions on `config.json`'s top-level object
//! (the bridge's loopback `/settings/hooks…` and the hub's `/api/settings/hooks…` both call
//! them): `GET /settings/hooks` (the tree, all seven events), `PUT
//! /settings/hooks/{event}/{index}` (`command` / `timeoutMs` / `enabled` of an existing entry;
//! `index` counts the event's hook entries across its groups, in file order), `POST
//! /settings/hooks/enabled` (`{enabled}`). Writes answer `effect: "needs-restart"`: a bridge
//! reads the tree when its agent starts. The result of every write is validated as a whole.

use super::config::{EVENTS, HookEvent, Tree};
use serde_json::{Map, Value, json};

/// A refused request: the HTTP status and the message.
#[derive(Debug, PartialEq, Eq)]
pub struct Refusal {
    /// 400, 404, 405 or 500.
    pub status: u16,
    /// For `{ok: false, error}`.
    pub error: String,
}

fn refuse(status: u16, error: impl Into<String>) -> Refusal {
    Refusal { status, error: error.into() }
}

/// The write's effect class (the contract's).
pub const EFFECT: &str = "needs-restart";

/// `GET /settings/hooks`: the stored tree with the defaults filled in and every event present.
pub fn read(root: &Map<String, Value>) -> Value {
    let stored = root.get("hooks").and_then(Value::as_object).cloned().unwrap_or_default();
    let mut tree = stored.clone();
    tree.entry("enabled").or_insert(json!(true));
    tree.entry("timeoutMs").or_insert(json!(super::config::DEFAULT_TIMEOUT_MS));
    tree.entry("maxOutputBytes").or_insert(json!(super::config::DEFAULT_MAX_OUTPUT));
    let mut events = stored.get("events").and_then(Value::as_object).cloned().unwrap_or_default();
    for e in EVENTS {
        events.entry(e.name()).or_insert(json!([]));
    }
    tree.insert("events".into(), Value::Object(events));
    Value::Object(tree)
}

/// The answer to a successful read or write.
pub fn answer(root: &Map<String, Value>, write: bool) -> Value {
    let mut v = json!({"ok": true, "hooks": read(root)});
    if write {
        v["effect"] = json!(EFFECT);
    }
    v
}

/// Checks the file's current tree before a write: a broken one is not edited (500).
fn current(root: &Map<String, Value>) -> Result<(), Refusal> {
    Tree::parse(root.get("hooks"))
        .map(|_| ())
        .map_err(|e| refuse(500, format!("the hooks tree in config.json is broken: {e}")))
}

/// `PUT /settings/hooks/{event}/{index}` with `body`.
pub fn put(root: &mut Map<String, Value>, event: &str, index: &str, body: &Value) -> Result<(), Refusal> {
    current(root)?;
    let Some(event) = HookEvent::from_name(event) else {
        let names: Vec<&str> = EVENTS.iter().map(|e| e.name()).collect();
        return Err(refuse(
            404,
            format!("unknown hook event `{event}`; the events are {}", names.join(", ")),
        ));
    };
    let index: usize =
        index.parse().map_err(|_| refuse(404, format!("`{index}` is not a hook entry index")))?;
    let patch = body.as_object().ok_or_else(|| refuse(400, "the body must be a JSON object"))?;
    if let Some(k) = patch.keys().find(|k| !["command", "timeoutMs", "enabled"].contains(&k.as_str())) {
        return Err(refuse(
            400,
            format!("`{k}` cannot be changed here: only command, timeoutMs and enabled"),
        ));
    }
    let mut next = root.clone();
    let entry = entry_mut(&mut next, event, index)
        .ok_or_else(|| refuse(404, format!("{} has no hook entry {index}", event.name())))?;
    for (k, v) in patch {
        entry.insert(k.clone(), v.clone());
    }
    Tree::parse(next.get("hooks")).map_err(|e| refuse(400, e))?;
    *root = next;
    Ok(())
}

/// `POST /settings/hooks/enabled` with `{enabled}`.
pub fn set_enabled(root: &mut Map<String, Value>, body: &Value) -> Result<(), Refusal> {
    current(root)?;
    let Some(enabled) = body.get("enabled").and_then(Value::as_bool) else {
        return Err(refuse(400, "the body must be {\"enabled\": true|false}"));
    };
    let hooks = root.entry("hooks").or_insert_with(|| json!({}));
    if !hooks.is_object() {
        *hooks = json!({});
    }
    hooks["enabled"] = json!(enabled);
    Ok(())
}

/// The `index`th hook entry of `event`, counting across its groups.
fn entry_mut(
    root: &mut Map<String, Value>,
    event: HookEvent,
    index: usize,
) -> Option<&mut Map<String, Value>> {
    let groups = root.get_mut("hooks")?.get_mut("events")?.get_mut(event.name())?.as_array_mut()?;
    groups
        .iter_mut()
        .filter_map(|g| g.get_mut("hooks").and_then(Value::as_array_mut))
        .flat_map(|hooks| hooks.iter_mut())
        .nth(index)?
        .as_object_mut()
}

/// One route of the three, by method and the path after `/settings/hooks` (`""`, `/enabled`,
/// `/{event}/{index}`), on the config file's top-level object. `Ok(true)`: written, the file
/// must be saved. A path that is none of them is `None` (404 by the caller's table).
pub fn route(
    method: &str,
    rest: &str,
    root: &mut Map<String, Value>,
    body: &Value,
) -> Option<Result<bool, Refusal>> {
    let parts: Vec<&str> = rest.trim_start_matches('/').split('/').filter(|p| !p.is_empty()).collect();
    let wrong = |allowed: &str| Some(Err(refuse(405, format!("method not allowed: use {allowed}"))));
    match (method, parts.as_slice()) {
        ("GET", []) => Some(Ok(false)),
        (_, []) => wrong("GET"),
        ("POST", ["enabled"]) => Some(set_enabled(root, body).map(|()| true)),
        (_, ["enabled"]) => wrong("POST"),
        ("PUT", [event, index]) => Some(put(root, event, index, body).map(|()| true)),
        (_, [_, _]) => wrong("PUT"),
        _ => None,
    }
}

/// Serializes this process's writers (a lock across processes is the settings store's).
static WRITE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Serves one request on `config_file` (blocking: run it off the async workers): reads the
/// file, applies the route, writes the file back (temp file + rename, every other key kept)
/// when it changed. `None`: not one of the three routes. Else (status, JSON body).
pub fn serve_file(
    method: &str,
    rest: &str,
    config_file: &std::path::Path,
    body: &Value,
) -> Option<(u16, Value)> {
    let _guard = WRITE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let fail = |status: u16, error: String| Some((status, json!({"ok": false, "error": error})));
    let mut raw = match zcode_shared::config::RawConfig::read(config_file) {
        Ok(r) => r,
        Err(e) => return fail(500, e.to_string()),
    };
    let mut root = raw.root().clone();
    match route(method, rest, &mut root, body)? {
        Err(r) => fail(r.status, r.error),
        Ok(false) => Some((200, answer(&root, false))),
        Ok(true) => {
            let hooks = root.get("hooks").cloned().unwrap_or_else(|| json!({}));
            if let Err(e) = raw.set("hooks", hooks).and_then(|()| raw.write()) {
                return fail(500, e.to_string());
            }
            tracing::info!(file = %config_file.display(), "hooks tree written: the agent picks it up when it restarts");
            Some((200, answer(&root, true)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> Map<String, Value> {
        json!({"remote": {"hubPort": 1}, "hooks": {"events": {"PreToolUse": [
            {"matcher": "read", "hooks": [{"type": "command", "command": "a", "note": "kept"}]},
            {"hooks": [{"type": "command", "command": "b"}]}]}}})
        .as_object()
        .cloned()
        .unwrap()
    }

    #[test]
    fn the_tree_is_read_complete_and_writes_touch_only_what_they_may() {
        let mut r = root();
        let tree = read(&r);
        assert_eq!(tree["events"].as_object().unwrap().len(), 7);
        assert_eq!(tree["enabled"], true);
        put(&mut r, "PreToolUse", "1", &json!({"command": "c", "timeoutMs": 50, "enabled": false})).unwrap();
        let g = &r["hooks"]["events"]["PreToolUse"];
        assert_eq!(
            g[1]["hooks"][0],
            json!({"type": "command", "command": "c", "timeoutMs": 50, "enabled": false})
        );
        assert_eq!(g[0]["hooks"][0]["note"], "kept", "unknown keys stay");
        assert_eq!(r["remote"]["hubPort"], 1);
        set_enabled(&mut r, &json!({"enabled": false})).unwrap();
        assert_eq!(r["hooks"]["enabled"], false);
    }

    #[test]
    fn bad_writes_are_refused_and_change_nothing() {
        let mut r = root();
        let before = r.clone();
        let cases = [
            ("PreToolUse", "0", json!({"matcher": "x"}), 400),
            ("PreToolUse", "0", json!({"command": 5}), 400),
            ("PreToolUse", "0", json!({"timeoutMs": 0}), 400),
            ("PreToolUse", "0", json!([]), 400),
            ("PreToolUse", "2", json!({"command": "x"}), 404),
            ("PreToolUse", "x", json!({"command": "x"}), 404),
            ("OnSave", "0", json!({"command": "x"}), 404),
            ("Stop", "0", json!({"command": "x"}), 404),
        ];
        for (event, index, body, status) in cases {
            let e = put(&mut r, event, index, &body).expect_err(&body.to_string());
            assert_eq!(e.status, status, "{event}/{index} {body}: {}", e.error);
        }
        assert_eq!(set_enabled(&mut r, &json!({"enabled": "no"})).map_err(|e| e.status), Err(400));
        assert_eq!(r, before);
        let mut broken = json!({"hooks": {"events": {"Nope": []}}}).as_object().cloned().unwrap();
        assert_eq!(set_enabled(&mut broken, &json!({"enabled": true})).map_err(|e| e.status), Err(500));
        assert!(route("DELETE", "/enabled", &mut r, &Value::Null).is_some_and(|x| x.is_err()));
        assert!(route("GET", "/a/b/c", &mut r, &Value::Null).is_none());
    }
}
