//! The hooks section: `hooks` in `config.json` (the tree a bridge's hooks runner reads at agent
//! start, [`super::hooks_tree`]). `GET hooks` is the whole tree with every event present and
//! the defaults filled in; `PUT hooks/{event}/{index}` edits `command` / `timeoutMs` /
//! `enabled` of an existing entry (`index` counts the event's entries across its groups, in
//! file order); `POST hooks/{event}` adds an entry and `DELETE hooks/{event}/{index}` removes
//! one (beyond the contract, which only edits); `POST hooks/enabled` sets `{enabled}`. The edits run inside the settings
//! writer's locked read-modify-write ([`super::api`]); the result is validated as a whole.

use super::hooks_tree::{DEFAULT_MAX_OUTPUT, DEFAULT_TIMEOUT_MS, EVENTS, HookEvent, Tree};
use super::safe::Refusal;
use crate::ordered::{Ordered, pretty};
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

/// The event named `name`, or a 404 listing the seven.
fn event_named(name: &str) -> Result<HookEvent, Refusal> {
    HookEvent::from_name(name).ok_or_else(|| {
        let names: Vec<&str> = EVENTS.iter().map(|e| e.name()).collect();
        Refusal::missing(format!("unknown hook event `{name}`; the events are {}", names.join(", ")))
    })
}

/// The body as an object whose keys are all in `allowed`.
fn patch_of<'a>(body: &'a Value, allowed: &[&str]) -> Result<&'a Map<String, Value>, Refusal> {
    let patch = body.as_object().ok_or_else(|| Refusal::bad("the body must be a JSON object"))?;
    if let Some(k) = patch.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(Refusal::bad(format!("`{k}` cannot be set here: only {}", allowed.join(", "))));
    }
    Ok(patch)
}

/// Validates the tree with `groups` as `event`'s array, then writes that array alone.
fn commit(root: &mut Ordered, event: HookEvent, groups: &Value) -> Result<(), Refusal> {
    let mut next = root.value(KEY).unwrap_or_else(|| json!({}));
    next["events"][event.name()] = groups.clone();
    Tree::parse(Some(&next)).map_err(Refusal::bad)?;
    let mut hooks = root.object(KEY);
    let mut events = hooks.object("events");
    events.set_raw(event.name(), pretty(groups, 3));
    hooks.set_object("events", &events, 2);
    root.set_object(KEY, &hooks, 1);
    Ok(())
}

/// `event`'s groups as stored (`[]` when absent).
fn groups_of(root: &Ordered, event: HookEvent) -> Value {
    root.value(KEY)
        .and_then(|h| h.get("events")?.get(event.name()).cloned())
        .filter(Value::is_array)
        .unwrap_or_else(|| json!([]))
}

fn index_of(index: &str) -> Result<usize, Refusal> {
    index.parse().map_err(|_| Refusal::missing(format!("`{index}` is not a hook entry index")))
}

/// `PUT hooks/{event}/{index}` with `body`: only the edited event's array is re-rendered.
pub fn put(root: &mut Ordered, event: &str, index: &str, body: &Value) -> Result<(), Refusal> {
    current(root)?;
    let event = event_named(event)?;
    let index = index_of(index)?;
    let patch = patch_of(body, &EDITABLE)?;
    let mut groups = groups_of(root, event);
    let entry = entry_mut(&mut groups, index)
        .ok_or_else(|| Refusal::missing(format!("{} has no hook entry {index}", event.name())))?;
    for (k, v) in patch {
        entry.insert(k.clone(), v.clone());
    }
    commit(root, event, &groups)
}

/// `POST hooks/{event}` with `{command, timeoutMs?, enabled?, matcher?}`: a new entry, last of
/// the event (joining the last group when it has the same matcher, else in a group of its own).
/// Returns its index.
pub fn add(root: &mut Ordered, event: &str, body: &Value) -> Result<usize, Refusal> {
    current(root)?;
    let event = event_named(event)?;
    let patch = patch_of(body, &[EDITABLE[0], EDITABLE[1], EDITABLE[2], "matcher"])?;
    let mut entry = Map::new();
    entry.insert("type".into(), json!("command"));
    for (k, v) in patch.iter().filter(|(k, _)| *k != "matcher") {
        entry.insert(k.clone(), v.clone());
    }
    if !entry.contains_key("command") {
        return Err(Refusal::bad("`command` is required"));
    }
    let matcher = match patch.get("matcher") {
        None | Some(Value::Null) => None,
        Some(Value::String(m)) if m.is_empty() || m == "*" => None,
        Some(m) => Some(m.clone()),
    };
    let mut groups = groups_of(root, event);
    let list = groups.as_array_mut().ok_or_else(|| Refusal::bad("the event's hooks are not an array"))?;
    let count: usize =
        list.iter().map(|g| g.get("hooks").and_then(Value::as_array).map_or(0, Vec::len)).sum();
    let same = |g: &Value| {
        let theirs = g.get("matcher").and_then(Value::as_str).filter(|m| !m.is_empty() && *m != "*");
        match &matcher {
            None => theirs.is_none(),
            Some(Value::String(m)) => theirs == Some(m.as_str()),
            Some(_) => false,
        }
    };
    match list.last_mut().filter(|g| same(g)).and_then(|g| g.get_mut("hooks")?.as_array_mut()) {
        Some(hooks) => hooks.push(Value::Object(entry)),
        None => {
            let mut group = Map::new();
            if let Some(m) = matcher {
                group.insert("matcher".into(), m);
            }
            group.insert("hooks".into(), json!([Value::Object(entry)]));
            list.push(Value::Object(group));
        }
    }
    commit(root, event, &groups)?;
    Ok(count)
}

/// `DELETE hooks/{event}/{index}`: the entry goes, and its group with it when it was the
/// group's last.
pub fn remove(root: &mut Ordered, event: &str, index: &str) -> Result<(), Refusal> {
    current(root)?;
    let event = event_named(event)?;
    let index = index_of(index)?;
    let mut groups = groups_of(root, event);
    let missing = || Refusal::missing(format!("{} has no hook entry {index}", event.name()));
    let list = groups.as_array_mut().ok_or_else(missing)?;
    let mut left = index;
    let mut at = None;
    for (gi, g) in list.iter().enumerate() {
        let n = g.get("hooks").and_then(Value::as_array).map_or(0, Vec::len);
        if left < n {
            at = Some((gi, left));
            break;
        }
        left -= n;
    }
    let (gi, hi) = at.ok_or_else(missing)?;
    let hooks = list[gi].get_mut("hooks").and_then(Value::as_array_mut).ok_or_else(missing)?;
    hooks.remove(hi);
    if hooks.is_empty() {
        list.remove(gi);
    }
    commit(root, event, &groups)
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

    #[test]
    fn entries_are_added_and_removed_validated_like_an_edit() {
        let mut r = root();
        // Same matcher as the last group: joins it; another matcher: a group of its own.
        assert_eq!(add(&mut r, "PreToolUse", &json!({"command": "c"})).unwrap(), 2);
        assert_eq!(
            add(&mut r, "PreToolUse", &json!({"command": "d", "matcher": "edit", "timeoutMs": 9})).unwrap(),
            3
        );
        assert_eq!(add(&mut r, "SessionStart", &json!({"command": "e", "enabled": false})).unwrap(), 0);
        let v = reparse(&r);
        let g = &v["hooks"]["events"]["PreToolUse"];
        assert_eq!(g[1]["hooks"][1], json!({"type": "command", "command": "c"}));
        assert_eq!(
            g[2],
            json!({"matcher": "edit", "hooks": [{"type": "command", "command": "d", "timeoutMs": 9}]})
        );
        assert_eq!(
            v["hooks"]["events"]["SessionStart"],
            json!([{"hooks": [{"type": "command", "command": "e", "enabled": false}]}])
        );
        // Removing a group's last entry removes the group; the others keep their keys.
        remove(&mut r, "PreToolUse", "3").unwrap();
        remove(&mut r, "PreToolUse", "0").unwrap();
        let g = reparse(&r)["hooks"]["events"]["PreToolUse"].clone();
        assert_eq!(
            g,
            json!([{"hooks": [{"type": "command", "command": "b"}, {"type": "command", "command": "c"}]}])
        );
        let before = r.render(0);
        let refused = [
            add(&mut r, "Stop", &json!({})),
            add(&mut r, "Stop", &json!({"command": " "})),
            add(&mut r, "Stop", &json!({"command": "x", "matcher": "("})),
            add(&mut r, "Stop", &json!({"command": "x", "timeoutMs": 0})),
            add(&mut r, "Stop", &json!({"command": "x", "type": "http"})),
            add(&mut r, "Stop", &json!([])),
        ];
        for e in refused {
            assert_eq!(e.map_err(|e| e.status), Err(400));
        }
        assert_eq!(add(&mut r, "OnSave", &json!({"command": "x"})).map_err(|e| e.status), Err(404));
        assert_eq!(remove(&mut r, "PreToolUse", "2").map_err(|e| e.status), Err(404));
        assert_eq!(remove(&mut r, "PreToolUse", "x").map_err(|e| e.status), Err(404));
        assert_eq!(remove(&mut r, "UserPromptSubmit", "0").map_err(|e| e.status), Err(404));
        assert_eq!(r.render(0), before, "a refused write changes nothing");
    }
}
