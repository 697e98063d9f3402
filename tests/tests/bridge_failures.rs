//! The bridge under failure and hostile input: a dying agent, bad frames, missing tokens,
//! an editor that goes away, a remote client that stops reading.

use serde_json::{Value, json};
use std::time::{Duration, Instant};
use zcode_tests::{
    Bridge, Home, Peer, TEST_TOKEN, WAIT, alive, children_of, demo_agent, initialize, kill9, new_session,
    prompt, shared_session,
};

fn agent_pid(b: &Bridge) -> u32 {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(p) = children_of(b.editor.pid()).into_iter().find(|p| alive(*p)) {
            return p;
        }
        assert!(Instant::now() < deadline, "the bridge has no agent child");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn killing_the_agent_mid_turn_fails_the_pending_prompts_and_the_next_prompt_works() {
    let home = Home::new();
    let (mut b, sid, mut remote) = shared_session(&home, 1, json!({}));

    let running = b.editor.request("session/prompt", prompt(&sid, "long"));
    b.editor.until("the long turn streaming", |m| {
        m["params"]["update"]["content"]["text"].as_str().is_some_and(|t| t.starts_with("tick"))
    });
    // Sent once the editor's turn runs, and seen queued behind it before the kill: two clients'
    // prompts sent together reach the router in either order (the stop-35 race: the remote's
    // ran first, so the editor's was the queued one).
    let queued = remote.request("session/prompt", prompt(&sid, "queued behind the other one"));
    let deadline = std::time::Instant::now() + zcode_tests::WAIT;
    loop {
        let (status, body) = b.http_get("/turns", Some(zcode_tests::TEST_TOKEN));
        let turns: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        let states: Vec<&str> =
            turns["turns"].as_array().into_iter().flatten().filter_map(|t| t["status"].as_str()).collect();
        if status == 200 && states.contains(&"pending") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the second prompt was never queued: {status} {body}");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let old = agent_pid(&b);
    kill9(old);

    let (r, _) = b.editor.response_to(&running);
    let msg = r["error"]["message"].as_str().unwrap_or_else(|| panic!("expected an error, got {r}"));
    assert!(msg.starts_with("zcode-acp: was killed by SIGKILL while handling session/prompt"), "{msg}");
    let (r, _) = remote.response_to(&queued);
    assert!(
        r["error"]["message"].as_str().is_some_and(|m| m.contains("zcode-acp: was killed by SIGKILL")),
        "{r}"
    );

    // The bridge keeps serving: the next prompt restarts the agent, reloads the session, runs.
    let (r, seen) = b.editor.call("session/prompt", prompt(&sid, "after the crash"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert!(zcode_tests::agent_text(&seen).contains("after the crash"));
    let new = agent_pid(&b);
    assert_ne!(old, new, "a new agent process serves the session");
    // The agent's replay of the reloaded session is not shown again to anyone.
    assert!(
        !seen.iter().any(|m| m["params"]["update"]["content"]["text"] == "long"),
        "the reload replayed old history to the editor"
    );
}

#[test]
fn bad_input_from_one_client_disturbs_nobody_else() {
    let home = Home::new();
    let mut b = Bridge::start(&home, &demo_agent(0));
    initialize(&mut b.editor, json!({}));
    let sid = new_session(&mut b.editor, home.path());
    let mut bad = b.remote();

    // Before initialize only initialize is accepted; protocolVersion must be an integer.
    let (r, _) = bad.call("session/new", json!({"cwd": "/tmp", "mcpServers": []}));
    assert_eq!(r["error"]["code"], -32600, "{r}");
    let (r, _) = bad.call("initialize", json!({"protocolVersion": "1"}));
    assert_eq!(r["error"]["code"], -32602, "{r}");
    initialize(&mut bad, json!({}));

    bad.send_raw("{not json");
    let e = bad.recv("a parse error");
    assert_eq!((e["error"]["code"].clone(), e["id"].clone()), (json!(-32700), Value::Null), "{e}");
    bad.send_binary(b"\x00\x01 binary frames are ignored".to_vec());
    // An answer to a request it was never sent: dropped.
    bad.send(&json!({"jsonrpc": "2.0", "id": 424242, "result": {"outcome": {"outcome": "cancelled"}}}));
    // Loading an unknown session: the agent's own error, passed through.
    let (r, _) = bad.call("session/load", json!({"sessionId": "demo_0000", "cwd": "/tmp", "mcpServers": []}));
    assert_eq!(r["error"]["code"], -32002, "{r}");
    // Unknown methods and `_` extensions go to the agent untouched.
    let (r, _) = bad.call("_vendor/thing", json!({"_meta": {"x": 1}}));
    assert_eq!(r["error"]["code"], -32601, "{r}");
    // String and number ids stay distinct.
    bad.send(&json!({"jsonrpc": "2.0", "id": "77", "method": "_x"}));
    assert_eq!(bad.recv("the answer to id \"77\"")["id"], "77");

    // A frame over 32 MiB closes that client with 1009 ...
    bad.send_fragmented(33 << 20);
    assert_eq!(bad.wait_closed(WAIT), Some(1009));

    // ... and the editor never saw any of it, and keeps working.
    while let Some(m) = b.editor.quiet_for(Duration::from_millis(100)) {
        assert_eq!(m["params"]["update"]["sessionUpdate"], "available_commands_update", "the editor got {m}");
    }
    let (r, _) = b.editor.call("session/prompt", prompt(&sid, "still fine"));
    assert_eq!(r["result"]["stopReason"], "end_turn");
}

#[test]
fn the_loopback_server_requires_the_token() {
    let home = Home::new();
    let mut b = Bridge::start(&home, &demo_agent(0));
    assert_eq!(Peer::connect_ws(b.port, "/acp", None).err(), Some(401));
    assert_eq!(Peer::connect_ws(b.port, "/acp", Some("wrong")).err(), Some(401));
    assert_eq!(b.http_get("/status", None).0, 401);
    assert_eq!(b.http_get("/status", Some("wrong")).0, 401);
    assert_eq!(b.http_get("/nope", Some(TEST_TOKEN)).0, 404);
    assert_eq!(zcode_tests::http_request(b.port, "HEAD", "/status", Some(TEST_TOKEN)), (200, String::new()));

    // /status lists a session once its first turn started, running while the turn runs.
    initialize(&mut b.editor, json!({}));
    let sid = new_session(&mut b.editor, home.path());
    let (s, body) = b.http_get("/status", Some(TEST_TOKEN));
    assert_eq!((s, body.as_str()), (200, r#"{"sessions":[]}"#));
    let id = b.editor.request("session/prompt", prompt(&sid, "long"));
    b.editor.until("the turn streaming", |m| m["params"]["update"]["sessionUpdate"] == "agent_thought_chunk");
    let (_, body) = b.http_get("/status", Some(TEST_TOKEN));
    let status: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["sessions"][0]["sessionId"], sid.as_str());
    assert_eq!(status["sessions"][0]["status"], "running");
    assert_eq!(status["sessions"][0]["title"], "long");
    b.editor.notify("session/cancel", json!({"sessionId": sid}));
    let (r, _) = b.editor.response_to(&id);
    assert_eq!(r["result"]["stopReason"], "cancelled");
    let (_, body) = b.http_get("/status", Some(TEST_TOKEN));
    let status: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["sessions"][0]["status"], "idle", "{status}");
}

/// The editor leaving ends everything, in order: remote clients get a 1001 close frame and
/// the port file is gone before the bridge exits cleanly; its agent does not outlive it. (How
/// fast is a production timing, not a test's: see `scripts/bench-shutdown`.)
#[test]
fn when_the_editor_closes_stdin_everything_ends() {
    let home = Home::new();
    let (mut b, sid, mut remote) = shared_session(&home, 1, json!({}));
    b.editor.request("session/prompt", prompt(&sid, "long"));
    remote.until("the turn streaming", |m| m["method"] == "session/update");
    let agent = agent_pid(&b);
    let port_file = home.path().join("run").join(format!("bridge-{}.port", b.editor.pid()));
    assert!(port_file.exists());

    b.editor.close_stdin();
    let status = b.editor.wait_exit(WAIT).expect("the bridge exited");
    assert!(status.success(), "{status:?}");
    assert!(!port_file.exists(), "the bridge exited before removing its port file");
    assert_eq!(remote.wait_closed(WAIT), Some(1001), "remote sockets get a close frame");
    zcode_tests::hub::wait_until("the agent to end with its bridge", || !alive(agent));
}

#[test]
fn a_remote_client_that_stops_reading_is_dropped_and_nobody_waits_for_it() {
    let home = Home::new();
    let mut b = Bridge::start(&home, &demo_agent(0));
    initialize(&mut b.editor, json!({}));
    let sid = new_session(&mut b.editor, home.path());
    let mut slow = b.remote();
    initialize(&mut slow, json!({}));
    slow.call("session/load", json!({"sessionId": sid, "cwd": home.path(), "mcpServers": []}));
    slow.pause_reading(true);

    // Each prompt is echoed to the slow client: 12 × 2 MiB passes its 8 MiB queue (and the
    // socket buffers) while the editor's turns go on unhindered.
    let big = "y".repeat(2 << 20);
    for _ in 0..12 {
        let (r, _) = b.editor.call("session/prompt", prompt(&sid, &big));
        assert_eq!(r["result"]["stopReason"], "end_turn");
    }
    slow.pause_reading(false);
    slow.wait_closed(WAIT);
    let mut late = b.remote();
    initialize(&mut late, json!({}));
}
