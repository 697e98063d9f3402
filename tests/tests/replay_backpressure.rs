//! A replay bigger than a client's live-queue limit, read by a client that is slow to take it:
//! the bridge feeds it as the socket drains (the client is not dropped), and the live turn
//! that runs meanwhile reaches that client after the replay, whole and in order.
//! (Through the hub at 50 KiB/s: `hub_relay.rs`.)

use serde_json::{Value, json};
use zcode_tests::{Bridge, Home, demo_agent, history, initialize, prompt};

/// The text of a session/update's content, if it has one.
fn text(m: &Value) -> Option<&str> {
    m["params"]["update"]["content"]["text"].as_str()
}

#[test]
fn live_updates_during_a_replay_past_the_queue_limit_come_after_it_in_order_and_nobody_is_dropped() {
    let home = Home::new();
    // 16 MiB: twice the bridge's 8 MiB live-queue limit, and more than the socket buffers hold.
    let filler = history::filler_for_mib(16);
    let sid = history::session_with_filler(&home, filler);
    let mut b = Bridge::start(&home, &demo_agent(0));
    initialize(&mut b.editor, json!({}));
    // The editor attaches with no replay (limit 0): the session is live, its turns stream.
    let tail0 =
        json!({"sessionId": sid, "cwd": home.path(), "mcpServers": [], "_meta": {"zcode": {"limit": 0}}});
    let (r, _) = b.editor.call("session/load", tail0);
    assert!(r["result"].is_object(), "{r}");

    let mut slow = b.remote();
    initialize(&mut slow, json!({}));
    let load = slow.request("session/load", json!({"sessionId": sid, "cwd": home.path(), "mcpServers": []}));
    // The replay is under way; then the client stops reading while two turns run.
    let first = slow.recv("the first replayed update");
    assert!(history::filler_index(&first).is_none(), "the seed turn comes first: {first}");
    slow.pause_reading(true);
    for words in ["live one", "live two"] {
        let (r, _) = b.editor.call("session/prompt", prompt(&sid, words));
        assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    }
    slow.pause_reading(false);

    let (answer, replay) = slow.response_to(&load);
    let meta = &answer["result"]["replayMeta"];
    assert_eq!(meta["replayedMessages"], meta["totalMessages"], "{answer}");
    let order: Vec<usize> = replay.iter().filter_map(history::filler_index).collect();
    assert_eq!(order, (0..filler).collect::<Vec<_>>(), "the whole replay, in order");
    assert!(
        !replay.iter().filter_map(text).any(|t| t.contains("live")),
        "a live update came inside the replay batch"
    );
    // Then the live turns, both, in the order they ran, each once: the echoed prompt, then
    // the agent's answer (`You said: "…"`).
    let mut transcript = String::new();
    while !transcript.contains("said: \"live two\"") {
        let m = slow.recv("the live turns after the replay");
        match (m["params"]["update"]["sessionUpdate"].as_str(), text(&m)) {
            (Some("user_message_chunk"), Some(t)) => transcript.push_str(&format!("\n[user] {t}\n")),
            (Some("agent_message_chunk"), Some(t)) => transcript.push_str(t),
            _ => {}
        }
    }
    let at = |needle: &str| {
        assert_eq!(transcript.matches(needle).count(), 1, "{needle:?} not exactly once in {transcript:?}");
        transcript.find(needle).unwrap_or_default()
    };
    let order =
        [at("[user] live one"), at("said: \"live one\""), at("[user] live two"), at("said: \"live two\"")];
    assert!(order.is_sorted(), "the live turns out of order: {transcript:?}");
    // Still connected: a later request is answered.
    let (r, _) = slow.call("_demo/echo", json!({"still": "here"}));
    assert!(r["result"].is_object(), "{r}");
}
