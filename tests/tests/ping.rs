//! `$/ping`: the application-level liveness check of a remote client (a WebSocket ping is not
//! visible to page scripts). The bridge answers `{}` at once without asking the agent: while
//! a long turn streams, through the hub's relay, and when the agent never answers at all.

use serde_json::{Value, json};
use zcode_tests::hub::{Hub, listed, wait_instances};
use zcode_tests::{Bridge, Home, Peer, demo_agent, initialize, new_session, prompt};

/// Sends `$/ping` and returns its answer (the stream's other messages are skipped).
fn ping(p: &mut Peer) -> Value {
    let id = p.request("$/ping", json!({}));
    p.response_to(&id).0
}

#[test]
fn a_ping_is_answered_at_once_while_a_turn_streams_and_through_the_relay() {
    let home = Home::new();
    let hub = Hub::start(&home, &[]);
    let b = Bridge::start_env(&home, &demo_agent(0), &[("ZCODE_ACP_HEARTBEAT_MS", "200")]);
    let id = b.id();
    wait_instances(hub.port, "the bridge to register", |l| listed(l, &id));
    let mut phone = hub.connect(&id).expect("the relay accepts");
    initialize(&mut phone, json!({}));
    let sid = new_session(&mut phone, home.path());
    let turn = phone.request("session/prompt", prompt(&sid, "long stream please"));
    phone.until("the long turn streaming", |m| {
        m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    });
    let r = ping(&mut phone);
    assert_eq!(r["result"], json!({}), "{r}");
    // The turn was still running: it ends only when cancelled, after the ping's answer.
    phone.notify("session/cancel", json!({"sessionId": sid}));
    let (end, _) = phone.response_to(&turn);
    assert_eq!(end["result"]["stopReason"], "cancelled", "{end}");
}

#[test]
fn a_ping_is_answered_when_the_agent_never_answers() {
    let home = Home::new();
    // An agent that reads nothing and says nothing: `initialize` waits for it forever.
    let b = Bridge::start(&home, &["sleep".into(), "600".into()]);
    let mut phone = b.remote();
    phone.request("initialize", json!({"protocolVersion": 1, "clientCapabilities": {}}));
    let r = ping(&mut phone);
    assert_eq!(r["result"], json!({}), "{r}");
}
