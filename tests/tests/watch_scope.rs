//! Watch scope, the bridge's side (issue 32 point 4): a connection the hub dials with
//! `X-Zcode-Scope: watch` (driven here straight at the bridge, as the hub sends it, with the
//! machine token) lists, loads, reads files and usage and sees the live stream and the agent's
//! requests; every prompt, answer, cancel, create, resume, close, rename, mode/model/config
//! change and extension call it sends is refused with a JSON-RPC error saying the device can
//! only watch (a cancel, a notification, is dropped), and every HTTP write answers 403.

use serde_json::{Value, json};
use zcode_tests::hub::{AUTH, Reply, http};
use zcode_tests::{
    Bridge, Home, Peer, agent_text, demo_agent, initialize, new_session, prompt, update_kinds,
};

const WATCH: (&str, &str) = ("X-Zcode-Scope", "watch");

/// The JSON-RPC error code of a watcher's refused request.
const WATCH_ONLY_CODE: i64 = -32003;

fn watcher(b: &Bridge) -> Peer {
    Peer::connect_ws_with(b.port, "/acp", &[AUTH, WATCH]).expect("a watcher connects")
}

fn assert_watch_only(resp: &Value, what: &str) {
    assert_eq!(resp["error"]["code"], WATCH_ONLY_CODE, "{what} was not refused as watch-only: {resp}");
    let msg = resp["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("can only watch"), "{what}: {msg}");
}

fn assert_not_watch_refused(resp: &Value, what: &str) {
    assert_ne!(resp["error"]["code"], WATCH_ONLY_CODE, "{what} is a read, refused: {resp}");
}

/// A bridge over the demo agent whose editor made a session and ran one turn in it.
fn bridge_with_a_turn(home: &Home) -> (Bridge, String) {
    let mut b = Bridge::start(home, &demo_agent(1));
    initialize(&mut b.editor, json!({}));
    let sid = new_session(&mut b.editor, home.path());
    let (r, _) = b.editor.call("session/prompt", prompt(&sid, "first turn"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    (b, sid)
}

#[test]
fn a_watcher_lists_and_loads_but_every_acp_write_it_sends_is_refused_by_the_bridge() {
    let home = Home::new();
    let (mut b, sid) = bridge_with_a_turn(&home);
    let mut w = watcher(&b);
    initialize(&mut w, json!({}));
    let cwd = home.path();

    // What it may do.
    let (r, _) = w.call("$/ping", json!({}));
    assert!(r["result"].is_object(), "{r}");
    let (r, _) = w.call("session/list", json!({}));
    assert!(r["result"]["sessions"].as_array().is_some_and(|s| !s.is_empty()), "{r}");
    let (r, replay) = w.call("session/load", json!({"sessionId": sid, "cwd": cwd, "mcpServers": []}));
    assert!(r["result"].is_object(), "{r}");
    assert!(update_kinds(&replay).contains(&"agent_message_chunk".to_owned()), "history replayed");
    let (r, _) = w.call("_session/load_earlier", json!({"sessionId": sid, "limit": 5}));
    assert_not_watch_refused(&r, "session/load_earlier");

    // What it may not, each answered in words, none reaching the agent.
    let writes = [
        ("session/prompt", prompt(&sid, "a prompt from a watcher")),
        ("session/new", json!({"cwd": cwd, "mcpServers": []})),
        ("session/resume", json!({"sessionId": sid, "cwd": cwd})),
        ("session/close", json!({"sessionId": sid})),
        ("session/set_mode", json!({"sessionId": sid, "modeId": "plan"})),
        ("session/set_model", json!({"sessionId": sid, "modelId": "other"})),
        ("session/set_config_option", json!({"sessionId": sid, "configId": "mode", "value": "plan"})),
        ("_zcode/rename", json!({"sessionId": sid, "title": "renamed"})),
        ("_demo/echo", json!({"sessionId": sid})),
    ];
    for (method, params) in writes {
        let (r, seen) = w.call(method, params);
        assert_watch_only(&r, method);
        assert!(seen.is_empty(), "{method} had an effect: {seen:?}");
    }
    let (_, status) = b.http_get("/status", Some(zcode_tests::TEST_TOKEN));
    let status: Value = serde_json::from_str(&status).expect("status JSON");
    assert_eq!(status["sessions"].as_array().map(Vec::len), Some(1), "no session was made: {status}");
    assert_eq!(status["sessions"][0]["status"], "idle", "no turn runs: {status}");

    // The agent asks a permission: the watcher sees it, its answer is refused and its cancel
    // dropped; the editor's answer is the one the agent gets.
    let turn = b.editor.request("session/prompt", prompt(&sid, "permission"));
    let (ereq, _) =
        b.editor.until("the permission on the editor", |m| m["method"] == "session/request_permission");
    let (wreq, _) = w.until("the permission on the watcher", |m| m["method"] == "session/request_permission");
    w.send(&json!({"jsonrpc": "2.0", "id": wreq["id"],
        "result": {"outcome": {"outcome": "selected", "optionId": "allow"}}}));
    let (r, _) = w.response_to(&wreq["id"]);
    assert_watch_only(&r, "an answer to the permission");
    w.notify("session/cancel", json!({"sessionId": sid}));
    // Handled in order: once the ping is answered, the cancel was too.
    let (r, _) = w.call("$/ping", json!({}));
    assert!(r["result"].is_object(), "{r}");
    b.editor.send(&json!({"jsonrpc": "2.0", "id": ereq["id"],
        "result": {"outcome": {"outcome": "selected", "optionId": "reject"}}}));
    let (r, updates) = b.editor.response_to(&turn);
    assert_eq!(r["result"]["stopReason"], "end_turn", "the watcher's cancel took effect: {r}");
    let text = agent_text(&updates);
    assert!(text.contains("Permission denied (reject)") && !text.contains("granted"), "{text}");
}

/// `method path` on the bridge with the token, `extra` headers and `body`.
fn call(b: &Bridge, method: &str, path: &str, extra: &[(&str, &str)], body: &[u8]) -> Reply {
    let mut headers = vec![AUTH, ("Content-Type", "application/json")];
    headers.extend_from_slice(extra);
    http(b.port, method, path, &headers, body)
}

#[test]
fn a_watchers_http_reads_answer_and_its_writes_are_403_at_the_bridge() {
    let home = Home::new();
    let (b, sid) = bridge_with_a_turn(&home);

    for path in ["/status".to_owned(), format!("/fs/list?sessionId={sid}"), "/settings/usage".to_owned()] {
        let r = call(&b, "GET", &path, &[WATCH], b"");
        assert_eq!(r.status, 200, "GET {path}: {}", r.text());
    }
    let rename = format!("/sessions/{sid}/rename");
    let writes: [(&str, &str, &[u8]); 5] = [
        ("POST", &rename, br#"{"title": "from a watcher"}"#),
        ("POST", &format!("/sessions/{sid}/close"), b""),
        ("POST", &format!("/sessions/{sid}/delete"), b""),
        ("POST", "/backend/restart", b""),
        ("PUT", "/settings/mcp/watcher", br#"{"command": "x"}"#),
    ];
    for (method, path, body) in writes {
        let r = call(&b, method, path, &[WATCH], body);
        assert_eq!(r.status, 403, "{method} {path}: {}", r.text());
        assert!(r.text().contains("can only watch"), "{method} {path}: {}", r.text());
    }
    let r = call(&b, "PUT", "/settings/mcp/watcher", &[WATCH], br#"{"command": "x"}"#);
    assert_eq!(r.json()["ok"], false, "the settings routes' error shape");
    let (_, status) = b.http_get("/status", Some(zcode_tests::TEST_TOKEN));
    assert!(!status.contains("from a watcher"), "the rename took effect: {status}");
    assert!(status.contains(&sid), "the close or delete took effect: {status}");

    // An unknown scope is an error, not full; without the header the same write is allowed.
    let r = call(&b, "POST", &rename, &[("X-Zcode-Scope", "admin")], br#"{"title": "x"}"#);
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("`full` or `watch`"), "{}", r.text());
    let r = call(&b, "POST", &rename, &[], br#"{"title": "from the editor's machine"}"#);
    assert_eq!(r.status, 200, "{}", r.text());
    // A watch header among several values is still watch.
    let r = call(&b, "POST", &rename, &[("X-Zcode-Scope", "full"), WATCH], br#"{"title": "y"}"#);
    assert_eq!(r.status, 403, "{}", r.text());
}
