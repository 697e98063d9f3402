//! ACP as the spec negotiates it: protocol versions (a client asking for another version gets
//! the bridge's, an agent answering one the bridge does not speak fails the client's
//! `initialize` naming both), capabilities (the agent hears every capability the bridge can
//! serve for some client) and elicitations (only to clients that render them, declined when no
//! attached client can, cancelled with the turn).

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use zcode_tests::{Bridge, Home, Peer, agent_text, demo_agent, initialize, new_session, prompt};

/// The scripted agent (system python3): answers `initialize` with `version` and records what
/// it was told in `record`.
fn scripted_agent(version: u32, record: &Path) -> Vec<String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/scripted_agent.py");
    vec![
        "/usr/bin/python3".into(),
        script.display().to_string(),
        "--version".into(),
        version.to_string(),
        "--record".into(),
        record.display().to_string(),
    ]
}

fn recorded_inits(record: &PathBuf) -> Vec<Value> {
    let text = std::fs::read_to_string(record).unwrap_or_default();
    text.lines().map(|l| serde_json::from_str(l).expect("a recorded initialize")).collect()
}

#[test]
fn a_client_asking_for_another_protocol_version_gets_version_1_back() {
    let home = Home::new();
    let b = Bridge::start(&home, &demo_agent(0));
    for asked in [json!(2), json!(0), json!(65535), json!(-1)] {
        let mut c = b.remote();
        let (r, _) = c.call("initialize", json!({"protocolVersion": asked, "clientCapabilities": {}}));
        assert_eq!(r["result"]["protocolVersion"], 1, "asked for {asked}: {r}");
        // The client decided to stay: it is initialized.
        let sid = new_session(&mut c, home.path());
        assert!(!sid.is_empty());
    }
    for bad in [json!("1"), json!(1.5), json!(null), json!(true), json!([1])] {
        let mut c = b.remote();
        let (r, _) = c.call("initialize", json!({"protocolVersion": bad, "clientCapabilities": {}}));
        assert_eq!(r["error"]["code"], -32602, "{bad}: {r}");
        let msg = r["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains("protocolVersion") && msg.contains("integer"), "{msg}");
    }
}

#[test]
fn an_agent_answering_a_version_the_bridge_does_not_speak_fails_initialize_naming_both() {
    let home = Home::new();
    let record = home.path().join("inits.jsonl");
    let mut b = Bridge::start(&home, &scripted_agent(7, &record));
    let (r, _) = b.editor.call("initialize", json!({"protocolVersion": 1, "clientCapabilities": {}}));
    let msg = r["error"]["message"].as_str().unwrap_or_else(|| panic!("initialize did not fail: {r}"));
    assert!(msg.contains("protocolVersion 7") && msg.contains("protocolVersion 1"), "{msg}");
    // Nothing is half-open: a remote client's initialize fails the same way (a fresh agent).
    let mut c = b.remote();
    let (r, _) = c.call("initialize", json!({"protocolVersion": 1, "clientCapabilities": {}}));
    assert!(r["error"]["message"].as_str().is_some_and(|m| m.contains("protocolVersion 7")), "{r}");
    assert_eq!(recorded_inits(&record).len(), 2, "each initialize tried a fresh agent");
}

#[test]
fn the_agent_is_told_every_capability_the_bridge_can_serve() {
    let home = Home::new();
    let record = home.path().join("inits.jsonl");
    let mut b = Bridge::start(&home, &scripted_agent(1, &record));
    // The editor offers nothing; the agent still hears what the bridge can serve for someone.
    initialize(&mut b.editor, json!({}));
    let inits = recorded_inits(&record);
    let caps =
        &inits.first().unwrap_or_else(|| panic!("the agent was never initialized"))["clientCapabilities"];
    assert_eq!(caps["fs"], json!({"readTextFile": true, "writeTextFile": true}), "{caps}");
    assert_eq!(caps["terminal"], true, "{caps}");
    assert!(caps["elicitation"]["form"].is_object(), "elicitation forms not offered: {caps}");
    assert!(caps["elicitation"]["url"].is_object(), "elicitation URLs not offered: {caps}");
}

/// A bridge whose editor renders no forms, a session it created, and a phone that renders
/// forms attached to it.
fn editor_and_phone(home: &Home) -> (Bridge, String, Peer) {
    let mut b = Bridge::start(home, &demo_agent(0));
    initialize(&mut b.editor, json!({"fs": {"readTextFile": false}, "terminal": false}));
    let sid = new_session(&mut b.editor, home.path());
    let mut phone = b.remote();
    initialize(&mut phone, json!({"elicitation": {"form": {}}}));
    let (r, _) = phone.call("session/load", json!({"sessionId": sid, "cwd": home.path(), "mcpServers": []}));
    assert!(r["result"].is_object(), "{r}");
    (b, sid, phone)
}

#[test]
fn an_elicitation_reaches_the_client_that_renders_forms_and_never_the_one_that_does_not() {
    let home = Home::new();
    let (mut b, sid, mut phone) = editor_and_phone(&home);
    let id = phone.request("session/prompt", prompt(&sid, "elicit"));
    let (ask, _) = phone.until("the form on the phone", |m| m["method"] == "elicitation/create");
    assert_eq!(ask["params"]["mode"], "form", "{ask}");
    // Clients attaching while it waits: a pending form goes only to one that renders forms.
    let load = json!({"sessionId": sid, "cwd": home.path(), "mcpServers": []});
    let mut watcher = b.remote();
    initialize(&mut watcher, json!({"elicitation": {"url": {}}}));
    let (r, _) = watcher.call("session/load", load.clone());
    assert!(r["result"].is_object(), "{r}");
    let mut tablet = b.remote();
    initialize(&mut tablet, json!({"elicitation": {"form": {}}}));
    let (r, _) = tablet.call("session/load", load);
    assert!(r["result"].is_object(), "{r}");
    let (copy, _) = tablet.until("the pending form on the tablet", |m| m["method"] == "elicitation/create");
    assert_eq!(copy["params"], ask["params"]);
    phone.send(&json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept", "content": {"name": "Ada"}}}));
    let (r, seen) = phone.response_to(&id);
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert!(agent_text(&seen).contains(r#"You answered {"name":"Ada"}"#), "{}", agent_text(&seen));
    // The editor saw the whole turn, but not the form it cannot render.
    let (_, editor_saw) = b.editor.until("the end of the phone's turn on the editor", |m| {
        m["params"]["update"]["content"]["text"].as_str().is_some_and(|t| t.contains("You said"))
    });
    assert!(!editor_saw.iter().any(|m| m["method"] == "elicitation/create"), "{editor_saw:?}");
    let (_, watcher_saw) = watcher.until("the end of the turn on the watcher", |m| {
        m["params"]["update"]["content"]["text"].as_str().is_some_and(|t| t.contains("You said"))
    });
    assert!(!watcher_saw.iter().any(|m| m["method"] == "elicitation/create"), "{watcher_saw:?}");
    tablet.until("the tablet's copy withdrawn", |m| m["method"] == "$/cancel_request");
}

#[test]
fn an_elicitation_no_attached_client_can_render_is_declined_at_once() {
    let home = Home::new();
    let mut b = Bridge::start(&home, &demo_agent(0));
    initialize(&mut b.editor, json!({}));
    let sid = new_session(&mut b.editor, home.path());
    // A phone that renders forms, but attached elsewhere: it does not count.
    let mut phone = b.remote();
    initialize(&mut phone, json!({"elicitation": {"form": {}, "url": {}}}));
    let (r, seen) = b.editor.call("session/prompt", prompt(&sid, "elicit"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert!(!seen.iter().any(|m| m["method"] == "elicitation/create"), "{seen:?}");
    assert!(agent_text(&seen).contains("answered with `decline`"), "{}", agent_text(&seen));
}

#[test]
fn session_cancel_answers_a_pending_elicitation_and_withdraws_it() {
    let home = Home::new();
    let (_b, sid, mut phone) = editor_and_phone(&home);
    let id = phone.request("session/prompt", prompt(&sid, "elicit"));
    let (ask, _) = phone.until("the form on the phone", |m| m["method"] == "elicitation/create");
    phone.notify("session/cancel", json!({"sessionId": sid}));
    let (withdrawn, _) = phone.until("the form withdrawn", |m| m["method"] == "$/cancel_request");
    assert_eq!(withdrawn["params"]["requestId"], ask["id"]);
    let (r, _) = phone.response_to(&id);
    assert!(r["result"]["stopReason"].is_string(), "the turn ended: {r}");
}
