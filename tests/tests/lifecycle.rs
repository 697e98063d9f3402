//! Close, rename and delete on the bridge's loopback routes (relayed as-is by the hub).

use serde_json::{Value, json};
use zcode_shared::store::Store;
use zcode_tests::{
    Bridge, Home, HttpResponse, TEST_TOKEN, demo_agent, http_with_body, initialize, new_session, prompt,
};

fn post(b: &Bridge, path: &str, body: Option<&str>) -> HttpResponse {
    http_with_body(b.port, "POST", path, Some(TEST_TOKEN), body.map(str::as_bytes))
}

fn listed(b: &Bridge) -> Vec<Value> {
    let r = zcode_tests::http(b.port, "GET", "/status", Some(TEST_TOKEN));
    let v: Value = serde_json::from_slice(&r.body).expect("status JSON");
    v["sessions"].as_array().expect("a sessions array").clone()
}

#[test]
fn close_retires_a_session_until_it_is_used_again() {
    let home = Home::new();
    let mut b = Bridge::start(&home, &demo_agent(0));
    initialize(&mut b.editor, json!({}));
    let sid = new_session(&mut b.editor, home.path());
    b.editor.call("session/prompt", prompt(&sid, "hello"));
    assert_eq!(listed(&b).len(), 1);

    assert_eq!(post(&b, "/sessions/nope/close", None).status, 404);
    assert_eq!(post(&b, "/sessions/a%20b/close", None).status, 400);
    let id = b.editor.request("session/prompt", prompt(&sid, "long"));
    b.editor.until("the long turn", |m| m["params"]["update"]["sessionUpdate"] == "agent_thought_chunk");
    let r = post(&b, &format!("/sessions/{sid}/close"), None);
    assert_eq!(r.status, 409, "{}", r.text());
    b.editor.notify("session/cancel", json!({"sessionId": sid}));
    b.editor.response_to(&id);

    let r = post(&b, &format!("/sessions/{sid}/close"), None);
    assert_eq!((r.status, r.text()), (200, r#"{"ok":true}"#.to_owned()));
    assert!(listed(&b).is_empty(), "a closed session is not listed");
    // Real use brings it back.
    b.editor.call("session/prompt", prompt(&sid, "I am still here"));
    assert_eq!(listed(&b).len(), 1);
}

#[test]
fn rename_pins_a_normalized_title_everywhere() {
    let home = Home::new();
    let mut b = Bridge::start(&home, &demo_agent(0));
    initialize(&mut b.editor, json!({}));
    let sid = new_session(&mut b.editor, home.path());
    let mut remote = b.remote();
    initialize(&mut remote, json!({}));
    remote.call("session/load", json!({"sessionId": sid, "cwd": home.path(), "mcpServers": []}));
    let path = format!("/sessions/{sid}/rename");
    for (body, why) in
        [(r#"{"title": "   "}"#, "all whitespace"), (r#"{}"#, "missing"), ("not json", "malformed")]
    {
        assert_eq!(post(&b, &path, Some(body)).status, 400, "{why}");
    }
    let huge = format!(r#"{{"title": "{}"}}"#, "x".repeat(5000));
    assert_eq!(post(&b, &path, Some(&huge)).status, 400, "over 4 KiB");
    assert_eq!(post(&b, "/sessions/unknown_1/rename", Some(r#"{"title":"x"}"#)).status, 404);

    let r = post(&b, &path, Some(r#"{"title": "  My\n  renamed   session  "}"#));
    assert_eq!(r.status, 200, "{}", r.text());
    let v: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v, json!({"ok": true, "title": "My renamed session"}));
    for peer in [&mut b.editor, &mut remote] {
        let (u, _) = peer
            .until("the title update", |m| m["params"]["update"]["sessionUpdate"] == "session_info_update");
        assert_eq!(u["params"]["update"]["title"], "My renamed session");
    }
    // The first prompt no longer titles it.
    let (_, seen) = b.editor.call("session/prompt", prompt(&sid, "an automatic title"));
    assert!(!seen.iter().any(|m| m["params"]["update"]["sessionUpdate"] == "session_info_update"));
    assert_eq!(listed(&b)[0]["title"], "My renamed session");
}

#[test]
fn delete_tombstones_only_what_is_not_live() {
    let home = Home::new();
    let mut b = Bridge::start(&home, &demo_agent(0));
    initialize(&mut b.editor, json!({}));
    let sid = new_session(&mut b.editor, home.path());
    b.editor.call("session/prompt", prompt(&sid, "hello"));
    let path = format!("/sessions/{sid}/delete");
    let r = post(&b, &path, None);
    assert_eq!(r.status, 409, "{}", r.text());
    assert_eq!(post(&b, &format!("/sessions/{sid}/close"), None).status, 200);
    let r = post(&b, &path, None);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(serde_json::from_slice::<Value>(&r.body).unwrap(), json!({"ok": true, "deleted": true}));
    let store = Store::open_in(&home.path().join("data")).unwrap();
    assert_eq!(store.is_deleted(&sid).unwrap(), Some(true));
    // A session the index never saw gets a minimal tombstone row.
    assert_eq!(post(&b, "/sessions/older_than_the_index/delete", None).status, 200);
    assert_eq!(store.is_deleted("older_than_the_index").unwrap(), Some(true));
    // Loading it again is real use: the tombstone is cancelled.
    b.editor.call("session/load", json!({"sessionId": sid, "cwd": home.path(), "mcpServers": []}));
    b.editor.call("session/prompt", prompt(&sid, "back"));
    let store = Store::open_in(&home.path().join("data")).unwrap();
    let deadline = std::time::Instant::now() + zcode_tests::WAIT;
    while store.is_deleted(&sid).unwrap() != Some(false) {
        assert!(std::time::Instant::now() < deadline, "the tombstone was not cancelled by real use");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
