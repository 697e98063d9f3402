//! The hooks section: `hooks` in `config.json` (the tree a bridge's hooks runner reads at agent
//! start, [`super::hooks_tree`]). `GET hooks` is the whole tree with every event present and
//! the defaults filled in; `PUT hooks/{event}/{index}` edits `command` / `timeoutMs` /
//! `enabled` of an existing entry (`index` counts the event's entries across its groups, in
//! file order); `POST hooks/enabled` sets `{enabled}`. The edits run inside the settings
//! writer's locked read-modify-write ([`super::api`]); the result is validated as a whole.

use super::hooks_tree::{DEFAULT_MAX_OUTPUT, DEFAULT_TIMEOUT_MS, EVENTS, HookEvent, Tree};
use super::raw::{Ordered, pretty};
use super::safe::Refusal;
use serde_json::{Map, Value, json};

/// The config key.
pub const KEY: &str = "hooks";

/// The keys a write may change on a hook entry (the contract's).
const EDITABLE: [&str; 3] = ["command", "timeoutMs", "enabled"];

/// The stored tree with the defaults filled in and every event present.
pub fn read(root: &Ordered) -> Value {
    let stored = root.value(KEY).and_then(|v| v.as_object().cloned()).unwrap_or_default();
    let mut tree = stored.clone();
    tree.entry("enabled").or_insert(json!(true));
    tree.entry("timeoutMs").or_insert(json!(DEFAULT_TIMEOUT_MS));
    tree.entry("maxOutputBytes").or_insert(json!(DEFAULT_MAX_OUTPUT));
    let mut events = stored.get("events").and_then(Value::as_object).cloned().unwrap_or_default();
    for e in EVENTS {
        events.entry(e.name()).or_insert(json!([]));
    }
    tree.insert("events".into(), Value::Object(events));
    Value::Object(tree)
}

/// The file's current tree must parse before it is edited: a broken one is a 500, untouched.
fn current(root: &Ordered) -> Result<(), Refusal> {
    Tree::parse(root.value(KEY).as_ref())
        .map(|_| ())
        .map_err(|e| Refusal::new(500, format!("the hooks tree in config.json is broken: {e}")))
}

/// `PUT hooks/{event}/{index}` with `body`: only the edited event's array is re-rendered.
pub fn put(root: &mut Ordered, event: &str, index: &str, body: &Value) -> Result<(), Refusal> {
    current(root)?;
    let Some(event) = HookEvent::from_name(event) else {
        let names: Vec<&str> = EVENTS.iter().map(|e| e.name()).collect();
        return Err(Refusal::missing(format!(
            "unknown hook event `{event}`; the events are {}",
            names.join(", ")
        )));
    };
    let index: usize =
        index.parse().map_err(|_| Refusal::missing(format!("`{index}` is not a hook entry index")))?;
    let patch = body.as_object().ok_or_else(|| Refusal::bad("the body must be a JSON object"))?;
    if let Some(k) = patch.keys().find(|k| !EDITABLE.contains(&k.as_str())) {
        return Err(Refusal::bad(format!(
            "`{k}` cannot be changed here: only command, timeoutMs and enabled"
        )));
    }
    let mut hooks = root.object(KEY);
    let mut events = hooks.object("events");
    let mut groups = events.value(event.name()).unwrap_or(Value::Null);
    let entry = entry_mut(&mut groups, index)
        .ok_or_else(|| Refusal::missing(format!("{} has no hook entry {index}", event.name())))?;
    for (k, v) in patch {
        entry.insert(k.clone(), v.clone());
    }
    // The whole tree as it would be written must still parse.
    let mut next = root.value(KEY).unwrap_or_else(|| json!({}));
    next["events"][event.name()] = groups.clone();
    Tree::parse(Some(&next)).map_err(Refusal::bad)?;
    events.set_raw(event.name(), pretty(&groups, 3));
    hooks.set_object("events", &events, 2);
    root.set_object(KEY, &hooks, 1);
    Ok(())
}

/// `POST hooks/enabled` with `{enabled}`.
pub fn set_enabled(root: &mut Ordered, body: &Value) -> Result<(), Refusal> {
    current(root)?;
    let Some(enabled) = body.get("enabled").and_then(Value::as_bool) else {
        return Err(Refusal::bad("the body must be {\"enabled\": true|false}"));
    };
    let mut hooks = root.object(KEY);
    hooks.set("enabled", &Value::Bool(enabled));
    root.set_object(KEY, &hooks, 1);
    Ok(())
}

/// The `index`th hook entry of an event's groups, counting across them.
fn entry_mut(groups: &mut Value, index: usize) -> Option<&mut Map<String, Value>> {
    groups
        .as_array_mut()?
        .iter_mut()
        .filter_map(|g| g.get_mut("hooks").and_then(Value::as_array_mut))
        .flat_map(|hooks| hooks.iter_mut())
        .nth(index)?
        .as_object_mut()
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"{
  "remote": {"hubPort": 1},
  "hooks": {
    "zeta": 1,
    "events": {
      "Stop": [ {"hooks": [{"type": "command", "command": "s"}]} ],
      "PreToolUse": [
        {"matcher": "read", "hooks": [{"type": "command", "command": "a", "note": "kept"}]},
        {"hooks": [{"type": "command", "command": "b"}]}
      ]
    }
  }
}"#;

    fn root() -> Ordered {
        Ordered::parse(FILE).unwrap()
    }

    fn reparse(r: &Ordered) -> Value {
        serde_json::from_str(&r.render(0)).unwrap()
    }

    #[test]
    fn the_tree_is_read_complete_and_writes_touch_only_what_they_may() {
        let mut r = root();
        let tree = read(&r);
        assert_eq!(tree["events"].as_object().unwrap().len(), 7);
        assert_eq!(tree["enabled"], true);
        put(&mut r, "PreToolUse", "1", &json!({"command": "c", "timeoutMs": 50, "enabled": false})).unwrap();
        let v = reparse(&r);
        let g = &v["hooks"]["events"]["PreToolUse"];
        assert_eq!(
            g[1]["hooks"][0],
            json!({"type": "command", "command": "c", "timeoutMs": 50, "enabled": false})
        );
        assert_eq!(g[0]["hooks"][0]["note"], "kept", "unknown keys stay");
        assert_eq!(v["remote"]["hubPort"], 1);
        let text = r.render(0);
        // Members the write did not touch keep their order and bytes.
        assert!(text.find("\"zeta\"").unwrap() < text.find("\"events\"").unwrap(), "{text}");
        assert!(text.contains(r#""Stop": [ {"hooks": [{"type": "command", "command": "s"}]} ]"#), "{text}");
        set_enabled(&mut r, &json!({"enabled": false})).unwrap();
        assert_eq!(reparse(&r)["hooks"]["enabled"], false);
        let mut empty = Ordered::default();
        set_enabled(&mut empty, &json!({"enabled": true})).unwrap();
        assert_eq!(reparse(&empty), json!({"hooks": {"enabled": true}}));
    }

    #[test]
    fn bad_writes_are_refused_and_change_nothing() {
        let mut r = root();
        let before = r.render(0);
        let cases = [
            ("PreToolUse", "0", json!({"matcher": "x"}), 400),
            ("PreToolUse", "0", json!({"command": 5}), 400),
            ("PreToolUse", "0", json!({"timeoutMs": 0}), 400),
            ("PreToolUse", "0", json!([]), 400),
            ("PreToolUse", "2", json!({"command": "x"}), 404),
            ("PreToolUse", "x", json!({"command": "x"}), 404),
            ("OnSave", "0", json!({"command": "x"}), 404),
            ("SessionStart", "0", json!({"command": "x"}), 404),
        ];
        for (event, index, body, status) in cases {
            let e = put(&mut r, event, index, &body).expect_err(&body.to_string());
            assert_eq!(e.status, status, "{event}/{index} {body}: {}", e.error);
        }
        assert_eq!(set_enabled(&mut r, &json!({"enabled": "no"})).map_err(|e| e.status), Err(400));
        assert_eq!(r.render(0), before);
        let mut broken = Ordered::parse(r#"{"hooks": {"events": {"Nope": []}}}"#).unwrap();
        assert_eq!(set_enabled(&mut broken, &json!({"enabled": true})).map_err(|e| e.status), Err(500));
    }
}
