//! Log lines say whose they are: the hub's lines about a relay name the client's connection
//! (its address) and the instance relayed to, the bridge's lines about a routed message name
//! the client that sent it and the session it is about (tracing spans, printed before the
//! message: `conn{id=7 peer=127.0.0.1:5000}:relay{instance=123}: …`).

use std::io::{Read, Write};
use std::net::TcpStream;
use zcode_tests::hub::{Hub, listed, wait_instances, wait_log};
use zcode_tests::{Bridge, Home, TEST_TOKEN, demo_agent, prompt};

#[test]
fn a_relay_its_client_breaks_is_logged_under_the_clients_address_and_the_instance() {
    let home = Home::new();
    // Debug: how every relay ends is logged then (a broken one at the default level too).
    // Relayed, not handed to the bridge (whose own lines name the client by its number).
    let hub = Hub::start(&home, &[("ZCODE_ACP_DEBUG", "1"), ("ZCODE_ACP_TEST_NO_HANDOFF", "1")]);
    let b = Bridge::start_env(&home, &demo_agent(0), &[("ZCODE_ACP_HEARTBEAT_MS", "200")]);
    let id = b.id();
    wait_instances(hub.port, "the bridge to register", |l| listed(l, &id));

    // A raw client: its own address is what the hub's line must name.
    let mut s = TcpStream::connect(("127.0.0.1", hub.port)).expect("connect");
    let me = s.local_addr().expect("local address");
    write!(
        s,
        "GET /acp?instance={id} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         Authorization: Bearer {TEST_TOKEN}\r\n\r\n"
    )
    .expect("upgrade request");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).expect("the hub's answer"), 1, "closed mid-answer");
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 101"), "{}", String::from_utf8_lossy(&head));
    // An unmasked frame: a client must mask every frame (RFC 6455 §5.1), so the hub ends the relay.
    s.write_all(&[0x81, 0x02, b'h', b'i']).expect("frame");

    let lines = wait_log(&hub.log_file, "relay closed", 1);
    let line = &lines[0];
    assert!(line.contains(&format!("peer={me}")), "the client's address is named: {line}");
    assert!(line.contains(&format!("relay{{instance=\"{id}\"}}")), "the instance is named: {line}");
    assert!(line.contains(" INFO ") && line.contains("the client broke the WebSocket framing"), "{line}");
}

#[test]
fn a_refused_request_is_logged_under_the_client_and_the_session_it_names() {
    let home = Home::new();
    let (mut b, log) = Bridge::start_logged(&home, &demo_agent(0), &[("ZCODE_ACP_DEBUG", "1")]);
    // Before `initialize` the bridge itself refuses every request.
    let mut phone = b.remote();
    let (r, _) = phone.call("session/prompt", prompt("phone-session", "hi"));
    assert!(r["error"]["message"].as_str().is_some_and(|m| m.contains("initialize")), "{r}");
    let (r, _) = b.editor.call("session/prompt", prompt("editor-session", "hi"));
    assert!(r["error"].is_object(), "{r}");

    let lines = wait_log(&log, "request refused", 2);
    let of = |sid: &str| {
        let needle = format!(":session{{id=\"{sid}\"}}: ");
        let found = lines.iter().find(|l| l.contains(&needle));
        found.unwrap_or_else(|| panic!("no refusal names session {sid}: {lines:#?}")).clone()
    };
    let editor = of("editor-session");
    assert!(editor.contains("client{id=editor}:session"), "the editor is named: {editor}");
    let remote = of("phone-session");
    assert!(
        remote.contains("client{id=") && !remote.contains("client{id=editor}"),
        "the remote client: {remote}"
    );
}
