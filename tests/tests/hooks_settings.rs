//! The hooks tree through the settings API on its three mounts (the hub's
//! `/api/settings/hooks…`, a bridge's loopback `/settings/hooks…`, the hub's per-instance
//! relay): read complete, entries edited, added and removed, every other key kept, malformed writes
//! refused, and a running bridge taking the new tree when its agent restarts (`needs-restart`).
#![allow(clippy::unwrap_used)] // Setup helpers outside #[test] fns: a failed unwrap is a failed test.

use serde_json::{Value, json};
use std::path::Path;
use zcode_tests::hub::{wait_for_hub, wait_instances, wait_until};
use zcode_tests::{
    Bridge, Home, Peer, TEST_TOKEN, alive, children_of, demo_agent, http, http_with_body, initialize, kill9,
    new_session, prompt,
};

fn send(port: u16, method: &str, path: &str, body: &Value) -> (u16, Value) {
    let r = http_with_body(port, method, path, Some(TEST_TOKEN), Some(body.to_string().as_bytes()));
    (r.status, r.json())
}

/// A Stop hook that appends `tag` to `<out>/stop.txt`.
fn stop_hook(out: &Path, tag: &str) -> String {
    format!("echo {tag} >> '{}'", out.join("stop.txt").display())
}

fn stops(out: &Path) -> Vec<String> {
    std::fs::read_to_string(out.join("stop.txt")).unwrap_or_default().lines().map(str::to_owned).collect()
}

/// A prompt that ends its turn, retried once if it raced the agent's death.
fn turn(p: &mut Peer, sid: &str) {
    let (mut resp, _) = p.call("session/prompt", prompt(sid, "hello"));
    if resp["error"]["message"].as_str().is_some_and(|m| m.contains("restarts on the next request")) {
        resp = p.call("session/prompt", prompt(sid, "hello")).0;
    }
    assert_eq!(resp["result"]["stopReason"], "end_turn", "{resp}");
}

#[test]
fn the_hooks_tree_on_three_mounts_and_taken_at_the_next_agent_start() {
    let home = Home::new();
    let out = home.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let config = json!({"custom": {"kept": true}, "hooks": {"timeoutMs": 5000, "events": {"Stop": [
        {"hooks": [{"type": "command", "command": stop_hook(&out, "v1"), "note": "mine"}]}]}}});
    std::fs::write(home.path().join("config.json"), config.to_string()).unwrap();
    let mut b = Bridge::start(&home, &demo_agent(0));
    initialize(&mut b.editor, json!({}));
    let mut remote = b.remote();
    initialize(&mut remote, json!({}));
    let sid = new_session(&mut remote, home.path());
    turn(&mut remote, &sid);
    wait_until("the v1 Stop hook", || stops(&out) == ["v1"]);

    // The bridge's loopback mount: the whole tree, seven events, defaults filled in.
    let r = http(b.port, "GET", "/settings/hooks", Some(TEST_TOKEN));
    assert_eq!(r.status, 200, "{}", r.text());
    let tree = &r.json()["hooks"];
    assert_eq!(tree["events"].as_object().map(serde_json::Map::len), Some(7), "{tree}");
    assert_eq!((tree["enabled"].clone(), tree["timeoutMs"].clone()), (json!(true), json!(5000)));

    // The per-instance mount, through the hub: an edit, effect needs-restart.
    let hub = wait_for_hub(&home, None);
    let pid = b.editor.pid().to_string();
    wait_instances(hub, "the bridge registered", |l| l.iter().any(|i| i["id"] == pid.as_str()));
    let path = format!("/api/instances/{pid}/settings/hooks/Stop/0");
    let (status, v) = send(hub, "PUT", &path, &json!({"command": stop_hook(&out, "v2"), "timeoutMs": 4000}));
    assert_eq!(
        (status, v["ok"].clone(), v["effect"].clone()),
        (200, json!(true), json!("needs-restart")),
        "{v}"
    );
    let file: Value =
        serde_json::from_str(&std::fs::read_to_string(home.path().join("config.json")).unwrap()).unwrap();
    assert_eq!(file["custom"]["kept"], true, "other keys are kept");
    let entry = &file["hooks"]["events"]["Stop"][0]["hooks"][0];
    assert_eq!((entry["note"].clone(), entry["timeoutMs"].clone()), (json!("mine"), json!(4000)), "{entry}");

    // Refused writes, on the hub's own mount and the bridge's: nothing changes.
    let before = std::fs::read_to_string(home.path().join("config.json")).unwrap();
    for (port, method, path, body, status) in [
        (hub, "PUT", "/api/settings/hooks/Stop/0", json!({"matcher": "x"}), 400),
        (hub, "PUT", "/api/settings/hooks/Stop/0", json!({"timeoutMs": "soon"}), 400),
        (b.port, "PUT", "/settings/hooks/Stop/3", json!({"command": "x"}), 404),
        (b.port, "PUT", "/settings/hooks/OnSave/0", json!({"command": "x"}), 404),
        (b.port, "POST", "/settings/hooks/enabled", json!({"enabled": "no"}), 400),
        (b.port, "DELETE", "/settings/hooks/Stop/3", json!({}), 404),
        (hub, "POST", "/api/settings/hooks/Stop", json!({"command": "x", "matcher": "("}), 400),
        (hub, "POST", "/api/settings/hooks/Stop", json!({"timeoutMs": 5}), 400),
        (hub, "POST", "/api/settings/hooks/OnSave", json!({"command": "x"}), 404),
        (hub, "PATCH", "/api/settings/hooks/Stop/0", json!({}), 405),
    ] {
        let (s, v) = send(port, method, path, &body);
        assert_eq!(s, status, "{method} {path} {body}: {v}");
        assert!(v["ok"] == false && v["error"].is_string(), "{v}");
    }
    assert_eq!(std::fs::read_to_string(home.path().join("config.json")).unwrap(), before);

    // The running agent keeps the tree it started with ...
    turn(&mut remote, &sid);
    wait_until("the second v1 Stop hook", || stops(&out) == ["v1", "v1"]);
    // ... and its next start reads the new one.
    let agent = children_of(b.editor.pid())
        .into_iter()
        .find(|p| {
            std::fs::read_to_string(format!("/proc/{p}/cmdline")).is_ok_and(|c| c.contains("demo-agent"))
        })
        .expect("the agent process");
    kill9(agent);
    wait_until("the agent to be gone", || !alive(agent));
    turn(&mut remote, &sid);
    wait_until("the v2 Stop hook", || stops(&out) == ["v1", "v1", "v2"]);

    // The hub's own mount turns the whole tree off.
    let (status, v) = send(hub, "POST", "/api/settings/hooks/enabled", &json!({"enabled": false}));
    assert_eq!(
        (status, v["effect"].clone(), v["hooks"]["enabled"].clone()),
        (200, json!("needs-restart"), json!(false))
    );
    let r = http(b.port, "GET", "/settings/hooks", Some(TEST_TOKEN));
    assert_eq!(r.json()["hooks"]["enabled"], false);
    assert_eq!(http(hub, "GET", "/api/settings/hooks", None).status, 401, "the hub's mount needs the token");

    // Beyond the contract: an entry added (its index answered) and removed again.
    let (status, v) =
        send(hub, "POST", "/api/settings/hooks/PreToolUse", &json!({"command": "true", "matcher": "^read$"}));
    assert_eq!(
        (status, v["effect"].clone(), v["index"].clone()),
        (200, json!("needs-restart"), json!(0)),
        "{v}"
    );
    let file: Value =
        serde_json::from_str(&std::fs::read_to_string(home.path().join("config.json")).unwrap()).unwrap();
    assert_eq!(
        file["hooks"]["events"]["PreToolUse"],
        json!([{"matcher": "^read$", "hooks": [{"type": "command", "command": "true"}]}])
    );
    let (status, v) = send(b.port, "DELETE", "/settings/hooks/PreToolUse/0", &json!({}));
    assert_eq!((status, v["hooks"]["events"]["PreToolUse"].clone()), (200, json!([])), "{v}");
    assert_eq!(file["custom"]["kept"], true);
}
