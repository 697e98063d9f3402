//! Issue 12 against the hub, each attack as it was reproduced: a body read before the token
//! (registration), connection slots held by silent sockets, a forged forwarded address per
//! guess to dodge the limiter, and the token in WebSocket URLs and logs. Each test fails on
//! the code before the fix (the report of issue 12 quotes how).

use base64::Engine;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::sync::mpsc;
use tungstenite::client::IntoClientRequest;
use zcode_tests::hub::{AUTH, Hub, http, listed, parse_reply, post_json, wait_instances};
use zcode_tests::net::connect_from;
use zcode_tests::{Bridge, Home, TEST_TOKEN, WAIT, demo_agent};

/// The hub's cap on unauthenticated connections per client address
/// (`zcode_hub::server::LIMITS.per_addr`).
const PER_ADDR: usize = 256;

/// Everything the hub sends on `s` until it closes it (or [`WAIT`] passes: then what came).
fn read_all(s: &mut TcpStream) -> String {
    s.set_read_timeout(Some(WAIT)).expect("timeout");
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n @ 1..) = s.read(&mut buf) {
        out.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Sends an authenticated `GET /api/instances` on `s` and returns the status.
fn authenticated_get(s: &mut TcpStream) -> u16 {
    write!(
        s,
        "GET /api/instances HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: {}\r\n\r\n",
        AUTH.1
    )
    .expect("send the request");
    parse_reply(read_all(s).as_bytes()).status
}

#[test]
fn a_registration_without_the_right_token_is_refused_before_its_body_is_read() {
    let home = Home::new();
    let hub = Hub::start(&home, &[]);
    let mib = 1 << 20;
    // A wrong token in the head: 401, although not one byte of the announced 1 MiB was sent.
    for path in ["/api/register", "/api/unregister"] {
        let mut s = TcpStream::connect(("127.0.0.1", hub.port)).expect("connect");
        write!(
            s,
            "POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer guess\r\n\
             Content-Type: application/json\r\nContent-Length: {mib}\r\n\r\n"
        )
        .expect("send the head");
        let answer = read_all(&mut s);
        assert!(answer.starts_with("HTTP/1.1 401"), "{path} with a wrong Bearer token: {answer:?}");
    }
    // The token in the body (how bridges register): an announced 1 MiB is refused unread...
    let mut s = TcpStream::connect(("127.0.0.1", hub.port)).expect("connect");
    write!(
        s,
        "POST /api/register HTTP/1.1\r\nHost: x\r\nContent-Length: {mib}\r\n\r\n{{\"token\":\"guess\","
    )
    .expect("send the head");
    let answer = read_all(&mut s);
    assert!(answer.starts_with("HTTP/1.1 413"), "an announced 1 MiB body token: {answer:?}");
    assert!(answer.contains("send the token in the Authorization header"), "{answer:?}");
    // ...and one that does not announce its length is cut after 8 KiB.
    let mut s = TcpStream::connect(("127.0.0.1", hub.port)).expect("connect");
    write!(s, "POST /api/register HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n").expect("head");
    let chunk = format!("{{\"token\":\"guess\",\"pad\":\"{}", "x".repeat(12 * 1024));
    write!(s, "{:x}\r\n{chunk}\r\n", chunk.len()).expect("send 12 KiB of an endless body");
    let answer = read_all(&mut s);
    assert!(answer.starts_with("HTTP/1.1 413"), "a chunked body token: {answer:?}");

    // Real registrations still work: a small one with the token in its body, a large one
    // (200 sessions, ~20 KiB) with the token in the header.
    let small = json!({"token": TEST_TOKEN, "id": "71", "port": 1, "pid": 71, "sessions": []});
    assert_eq!(post_json(hub.port, "/api/register", &small).status, 200);
    let sessions: Vec<Value> = (0..200)
        .map(|i| json!({"sessionId": format!("s{i}"), "title": "t".repeat(60), "status": "running", "updatedAt": 1}))
        .collect();
    let large = json!({"id": "72", "port": 2, "pid": 72, "sessions": sessions}).to_string();
    assert!(large.len() > 16 * 1024, "{}", large.len());
    let r = http(
        hub.port,
        "POST",
        "/api/register",
        &[AUTH, ("Content-Type", "application/json")],
        large.as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    wait_instances(hub.port, "both registrations", |l| listed(l, "71") && listed(l, "72"));
}

#[test]
fn silent_connections_over_an_address_cap_are_evicted_oldest_first_and_others_are_served() {
    let home = Home::new();
    let hub = Hub::start(&home, &[]);
    // A client of another address connects first and stays silent for now.
    let mut other = connect_from(Ipv4Addr::new(127, 0, 0, 3), hub.port).expect("connect from 127.0.0.3");
    // The attacker's address opens two more silent connections than it may hold.
    let attacker = Ipv4Addr::new(127, 0, 0, 2);
    let mut silent: Vec<TcpStream> = (0..PER_ADDR + 2)
        .map(|i| connect_from(attacker, hub.port).unwrap_or_else(|e| panic!("silent connection {i}: {e}")))
        .collect();
    // Its two oldest are told why and closed...
    for (i, s) in silent.iter_mut().take(2).enumerate() {
        let answer = read_all(s);
        assert!(
            answer.starts_with("HTTP/1.1 503") && answer.ends_with("too many connections"),
            "silent connection {i} over the cap was not evicted with a 503: {answer:?}"
        );
    }
    // ...while its newest stays open and is served once it speaks,
    let newest = silent.last_mut().expect("the newest");
    assert_eq!(authenticated_get(newest), 200, "the attacker's newest connection");
    // the other address's connection was never touched,
    assert_eq!(authenticated_get(&mut other), 200, "another address's connection");
    // and a fresh connection from the crowded address itself gets in too.
    let mut fresh = connect_from(attacker, hub.port).expect("connect");
    assert_eq!(authenticated_get(&mut fresh), 200, "a fresh connection from the crowded address");
}

#[test]
fn forwarded_addresses_are_believed_only_from_the_configured_header() {
    // Unconfigured: a fresh CF-Connecting-IP and X-Forwarded-For per guess buys nothing.
    let home = Home::new();
    let hub = Hub::start(&home, &[]);
    let mut limited = false;
    for i in 0..30 {
        let (cf, xff) = (format!("198.51.100.{i}"), format!("203.0.113.{i}"));
        let headers = [("CF-Connecting-IP", cf.as_str()), ("X-Forwarded-For", xff.as_str())];
        let r = http(hub.port, "GET", "/api/instances?token=guess", &headers, b"");
        if r.status == 429 {
            limited = true;
            break;
        }
        assert_eq!(r.status, 401, "{}", r.text());
    }
    assert!(limited, "30 guesses from loopback, each with a fresh forwarded address, were never limited");
    drop(hub);

    // Configured: each CF-Connecting-IP value is its own bucket; no other header is believed.
    let home = Home::new();
    let hub = Hub::start(&home, &[("ZCODE_ACP_CLIENT_ADDRESS_HEADER", "CF-Connecting-IP")]);
    let guess = |cf: &str, xff: &str| {
        http(
            hub.port,
            "GET",
            "/api/instances?token=guess",
            &[("CF-Connecting-IP", cf), ("X-Forwarded-For", xff)],
            b"",
        )
        .status
    };
    let mut tries = 0;
    while guess("192.0.2.1", &format!("203.0.113.{tries}")) != 429 {
        tries += 1;
        assert!(tries < 30, "30 guesses from one configured client address were never limited");
    }
    assert_eq!(guess("192.0.2.2", "203.0.113.1"), 401, "another client address is another bucket");
    assert_eq!(http(hub.port, "GET", "/api/instances?token=guess", &[], b"").status, 401, "the peer's own");
    let cf = ("CF-Connecting-IP", "192.0.2.1");
    assert_eq!(http(hub.port, "GET", "/api/instances", &[cf, AUTH], b"").status, 200, "the right token");
}

/// A WebSocket handshake to the hub's `/acp?instance={id}` offering `protocols` (no other
/// credentials): the socket and the 101 answer, or the refusal's status.
fn ws_with_protocols(
    port: u16,
    id: &str,
    protocols: &str,
) -> Result<(tungstenite::WebSocket<TcpStream>, tungstenite::handshake::client::Response), u16> {
    let mut req = format!("ws://127.0.0.1:{port}/acp?instance={id}").into_client_request().expect("request");
    req.headers_mut().insert("sec-websocket-protocol", protocols.parse().expect("header"));
    let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    match tungstenite::client::client(req, stream) {
        Ok(ok) => Ok(ok),
        Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(resp))) => {
            Err(resp.status().as_u16())
        }
        Err(e) => panic!("websocket handshake failed: {e}"),
    }
}

/// A fake bridge that reports each request head it receives and answers 409.
fn recording_bridge() -> (u16, mpsc::Receiver<String>) {
    let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind");
    let port = listener.local_addr().expect("address").port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for mut s in listener.incoming().map_while(Result::ok) {
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && matches!(s.read(&mut byte), Ok(1)) {
                head.push(byte[0]);
            }
            let _ = s.write_all(b"HTTP/1.1 409 Conflict\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            if tx.send(String::from_utf8_lossy(&head).into_owned()).is_err() {
                return;
            }
        }
    });
    (port, rx)
}

#[test]
fn the_token_rides_the_websocket_subprotocol_and_is_never_echoed_or_forwarded() {
    let home = Home::new();
    let hub = Hub::start(&home, &[]);
    let b = Bridge::start_env(&home, &demo_agent(0), &[("ZCODE_ACP_HEARTBEAT_MS", "200")]);
    wait_instances(hub.port, "the bridge to register", |l| listed(l, &b.id()));
    let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(TEST_TOKEN);
    let offer = format!("zcode-acp, zcode-acp.token.{encoded}");

    let (mut ws, resp) = ws_with_protocols(hub.port, &b.id(), &offer)
        .unwrap_or_else(|status| panic!("the subprotocol token was refused with {status}"));
    assert_eq!(resp.headers().get("sec-websocket-protocol").map(|v| v.as_bytes()), Some(&b"zcode-acp"[..]));
    for (name, value) in resp.headers() {
        let v = String::from_utf8_lossy(value.as_bytes());
        assert!(!v.contains(&encoded) && !v.contains(TEST_TOKEN), "the 101 echoes the token in {name}: {v}");
    }
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": 1, "clientCapabilities": {}}});
    ws.send(tungstenite::Message::text(init.to_string())).expect("send initialize");
    let answer = loop {
        let msg = ws.read().expect("the relay answers");
        let Ok(v) = serde_json::from_str::<Value>(msg.to_text().unwrap_or("")) else { continue };
        if v["id"] == 1 {
            break v;
        }
    };
    assert!(answer["result"].is_object(), "{answer}");
    // A wrong token in the subprotocol is a wrong token.
    let wrong = format!(
        "zcode-acp, zcode-acp.token.{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode("guess")
    );
    assert_eq!(ws_with_protocols(hub.port, &b.id(), &wrong).err(), Some(401));

    // What a bridge is sent never carries the token-bearing subprotocol: not the WebSocket dial,
    // and not a per-instance HTTP relay of a request that offered it next to a Bearer header.
    let (port, heads) = recording_bridge();
    let fake = json!({"token": TEST_TOKEN, "id": "fake", "port": port, "pid": 1, "sessions": []});
    assert_eq!(post_json(hub.port, "/api/register", &fake).status, 200);
    assert_eq!(ws_with_protocols(hub.port, "fake", &offer).err(), Some(502), "the fake bridge refuses");
    let r =
        http(hub.port, "GET", "/api/instances/fake/status", &[AUTH, ("Sec-WebSocket-Protocol", &offer)], b"");
    assert_eq!(r.status, 409, "{}", r.text());
    for what in ["the WebSocket dial", "the HTTP relay"] {
        let head = heads.recv_timeout(WAIT).unwrap_or_else(|_| panic!("{what} never reached the bridge"));
        assert!(
            !head.contains(&encoded) && !head.contains("zcode-acp.token"),
            "{what} forwards the token:\n{head}"
        );
    }
}

#[test]
fn no_spelling_of_a_token_parameter_reaches_the_log() {
    let home = Home::new();
    let hub = Hub::start(&home, &[("ZCODE_ACP_DEBUG", "1"), ("RUST_LOG", "trace")]);
    let paths = [
        "/api/instances?tok%65n=SECRET-A",
        "/api/instances?probe=1;token=SECRET-B",
        "/api/instances?TOKEN=SECRET-C",
        "/api/instances?tok%2565n=SECRET-D",
        "/api/instances?x=1&tok%65n%3DSECRET-E",
        "/acp?instance=1;access_token=SECRET-F",
    ];
    for path in paths {
        http(hub.port, "GET", path, &[], b"");
    }
    // The last request's line is in the log before its answer is sent.
    let log = hub.log();
    assert!(log.matches("uri=").count() >= paths.len(), "the requests were not logged:\n{log}");
    assert!(!log.contains("SECRET"), "a token value reached the log:\n{log}");
}
