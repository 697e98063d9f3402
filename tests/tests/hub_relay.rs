//! The hub's relays: the WebSocket relay to a real bridge (ACP through it, refusals before the
//! upgrade, pings, a slow reader of a big replay, a vanished bridge, the message cap, a failing
//! relay thread, shutdown) and the per-instance HTTP relays (to a real bridge's `/status`, and
//! byte for byte to a recording fake bridge).

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};
use zcode_tests::hub::{
    AUTH, Hub, closed_port, http, hub_port, listed, log_lines, post_json, signal, wait_gone, wait_instances,
    wait_port_closed, wait_until,
};
use zcode_tests::{
    Bridge, Home, Peer, TEST_TOKEN, WAIT, demo_agent, history, initialize, kill9, new_session, prompt,
};

/// The hub relays every client instead of handing it to its bridge (the relay's own tests).
const NO_HANDOFF: (&str, &str) = ("ZCODE_ACP_TEST_NO_HANDOFF", "1");

/// A hub, a demo-agent bridge registered with it, and a client through the hub that did
/// `initialize`.
fn one_client(home: &Home) -> (Hub, Bridge, Peer) {
    let (hub, b) = hub_and_bridge(home, &[]);
    let mut c = hub.connect(&b.id()).expect("the hub takes the WebSocket");
    initialize(&mut c, json!({}));
    (hub, b, c)
}

/// A hub and a demo-agent bridge registered with it.
fn hub_and_bridge(home: &Home, hub_env: &[(&str, &str)]) -> (Hub, Bridge) {
    let hub = Hub::start(home, hub_env);
    let b = Bridge::start_env(home, &demo_agent(0), &[("ZCODE_ACP_HEARTBEAT_MS", "200")]);
    let id = b.id();
    wait_instances(hub.port, "the bridge to register", |l| listed(l, &id));
    (hub, b)
}

fn fake_registration(hub: &Hub, id: &str, port: u16) {
    let body = json!({"token": TEST_TOKEN, "id": id, "port": port, "pid": 1, "startedAt": 1, "sessions": []});
    assert_eq!(post_json(hub.port, "/api/register", &body).status, 200);
}

#[test]
fn acp_flows_through_the_relay_to_a_real_bridge_shared_with_the_editor() {
    let home = Home::new();
    let (hub, mut b) = hub_and_bridge(&home, &[]);
    initialize(&mut b.editor, json!({}));
    let sid = new_session(&mut b.editor, home.path());

    let mut phone = hub.connect(&b.id()).expect("the relay accepts");
    let init = initialize(&mut phone, json!({}));
    assert_eq!(init["agentCapabilities"]["_meta"]["zcode"]["fs"], true, "{init}");
    let (r, _) = phone.call("session/load", json!({"sessionId": sid, "cwd": home.path(), "mcpServers": []}));
    assert!(r["result"].is_object(), "{r}");
    let (r, seen) = phone.call("session/prompt", prompt(&sid, "hello through the hub"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert!(zcode_tests::agent_text(&seen).contains("hello through the hub"), "{seen:?}");
    // The editor sees the phone's turn (echoed prompt and the stream).
    let (echo, _) = b.editor.until("the phone's prompt echoed to the editor", |m| {
        m["params"]["update"]["sessionUpdate"] == "user_message_chunk"
    });
    assert_eq!(echo["params"]["update"]["content"]["text"], "hello through the hub");

    // The query token works too (browsers cannot set headers), and a 1 MiB message round-trips.
    let path = format!("/acp?instance={}&token={TEST_TOKEN}", b.id());
    let mut browser = Peer::connect_ws(hub.port, &path, None).expect("query token accepted");
    initialize(&mut browser, json!({}));
    let big = "x".repeat(1 << 20);
    let (r, _) = browser.call("_demo/echo", json!({"big": big}));
    let echoed: Value = serde_json::from_str(r["result"]["params"].as_str().expect("echo")).unwrap();
    assert_eq!(echoed["big"].as_str().map(str::len), Some(1 << 20));
}

#[test]
fn refused_upgrades_get_a_plain_status_before_the_upgrade() {
    let home = Home::new();
    let (hub, b) = hub_and_bridge(&home, &[]);
    let id = b.id();
    let dead = closed_port();
    fake_registration(&hub, "dead", dead.port);
    let ok = format!("/acp?instance={id}");
    for (path, token, want) in [
        (ok.as_str(), None, 401),
        (ok.as_str(), Some("wrong"), 401),
        ("/acp?instance=999999", Some(TEST_TOKEN), 404),
        ("/acp", Some(TEST_TOKEN), 404),
        ("/elsewhere?instance=1", Some(TEST_TOKEN), 404),
        ("/acp?instance=dead", Some(TEST_TOKEN), 502),
    ] {
        match Peer::connect_ws(hub.port, path, token) {
            Ok(_) => panic!("{path} with {token:?} was upgraded"),
            Err(status) => assert_eq!(status, want, "{path} with {token:?}"),
        }
    }
    // A plain GET of /acp is not an upgrade.
    assert_eq!(http(hub.port, "GET", &ok, &[AUTH], b"").status, 400);
    assert!(hub.connect(&id).is_ok());
}

#[test]
fn the_hubs_socket_to_a_relayed_client_has_a_bounded_send_buffer() {
    // 2 × the 128 KiB the hub asks (`zcode_hub::relay`): set on its listener once on Linux,
    // copied by the kernel to every accepted socket, or set per relay. Autotuned (4 MiB on the
    // loopback), a slow phone left the relay unwritable for tens of seconds.
    let home = Home::new();
    let (hub, _b, _c) = one_client(&home);
    let out = std::process::Command::new("ss")
        .args(["-tmnH", &format!("sport = :{}", hub.port)])
        .output()
        .expect("run ss");
    let out = String::from_utf8_lossy(&out.stdout);
    let sizes: Vec<u64> = out
        .lines()
        .filter_map(|m| m.split(['(', ',']).find_map(|w| w.strip_prefix("tb")?.parse().ok()))
        .collect();
    assert!(!sizes.is_empty() && sizes.iter().all(|&tb| tb == 262_144), "{out}");
}

/// A request head over the hub's first look at a connection (4 KiB): hyper reads it, where a
/// shorter one is answered without hyper (`zcode_hub::routes::acp::direct`).
const PAD: usize = 5000;

/// One upgrade request to `port` on a raw socket (`pad`: a header making the head longer
/// than [`PAD`]): the answer's status line, headers (lower-case names) and body.
fn raw_upgrade(port: u16, path: &str, extra: &str, pad: bool) -> (String, Vec<(String, String)>, String) {
    let pad = if pad { format!("x-pad: {}\r\n", "a".repeat(PAD)) } else { String::new() };
    let head = format!(
        "GET {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nupgrade: websocket\r\nconnection: Upgrade\r\n{extra}{pad}\r\n"
    );
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(WAIT)).expect("timeout");
    s.write_all(head.as_bytes()).expect("send the head");
    let mut r = BufReader::new(s);
    let mut status = String::new();
    r.read_line(&mut status).expect("the status line");
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line).expect("a header line");
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (k, v) = line.split_once(':').expect("a header");
        headers.push((k.to_ascii_lowercase(), v.trim().to_owned()));
    }
    let len =
        headers.iter().find(|(k, _)| k == "content-length").map_or(0, |(_, v)| v.parse().expect("a length"));
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).expect("the body");
    (status.trim_end().to_owned(), headers, String::from_utf8(body).expect("text"))
}

#[test]
fn an_upgrade_is_answered_alike_whether_hyper_reads_its_head_or_not() {
    let home = Home::new();
    let (hub, b) = hub_and_bridge(&home, &[]);
    let id = b.id();
    let dead = closed_port();
    fake_registration(&hub, "dead", dead.port);
    let key = "sec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n";
    let token = format!("authorization: Bearer {TEST_TOKEN}\r\n{key}");
    let ok = format!("/acp?instance={id}");
    for pad in [false, true] {
        for (path, extra, want, body) in [
            (ok.as_str(), key.to_owned(), "401", "unauthorized"),
            (ok.as_str(), format!("authorization: Bearer wrong\r\n{key}"), "401", "unauthorized"),
            ("/acp?instance=999999", token.clone(), "404", "unknown instance"),
            ("/acp?instance=dead", token.clone(), "502", "bridge unreachable"),
            (
                ok.as_str(),
                format!("authorization: Bearer {TEST_TOKEN}\r\n"),
                "400",
                "a WebSocket upgrade (version 13) is required",
            ),
        ] {
            let (status, headers, got) = raw_upgrade(hub.port, path, &extra, pad);
            let what = format!("{path} {extra:?} (hyper: {pad})");
            assert!(status.starts_with(&format!("HTTP/1.1 {want} ")), "{what}: {status}");
            assert_eq!(got, body, "{what}");
            let cors = headers.iter().find(|(k, _)| k == "access-control-allow-origin");
            assert_eq!(cors.map(|(_, v)| v.as_str()), Some("*"), "{what}: {headers:?}");
        }
        // Accepted: the key's proof, the plain subprotocol back (never the token-carrying one).
        let offer = format!("sec-websocket-protocol: zcode-acp, zcode-acp.token.{}\r\n", b64(TEST_TOKEN));
        let (status, headers, _) = raw_upgrade(hub.port, &ok, &format!("{key}{offer}"), pad);
        let header = |name: &str| headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        assert!(status.starts_with("HTTP/1.1 101 "), "{status} (hyper: {pad})");
        assert_eq!(header("sec-websocket-accept").as_deref(), Some("s3pPLMBiTxaQ9kYGzzhZRbK+xOo="));
        assert_eq!(header("sec-websocket-protocol").as_deref(), Some("zcode-acp"), "hyper: {pad}");
        assert_eq!(header("upgrade").as_deref(), Some("websocket"));
        // And it relays, what the client sent right behind its head included.
        let pad_header = "a".repeat(PAD);
        let extra: &[(&str, &str)] = if pad { &[("x-pad", &pad_header)] } else { &[] };
        let mut headers = vec![("authorization", format!("Bearer {TEST_TOKEN}"))];
        headers.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let mut c = Peer::connect_ws_with(hub.port, &ok, &headers).expect("relayed");
        initialize(&mut c, json!({}));
    }
}

/// `s` in URL-safe base64 without padding, as a browser puts its token in the subprotocol.
fn b64(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s)
}

#[test]
fn an_open_under_way_when_the_hub_is_told_to_stop_is_answered_not_dropped() {
    // A bridge that takes the hub's dial and holds its 101 until told.
    let home = Home::new();
    let hub = Hub::start(&home, &[]);
    let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind the slow bridge");
    fake_registration(&hub, "slow", listener.local_addr().expect("its address").port());
    let (dialed_tx, dialed) = mpsc::channel();
    let (release, released) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        let (s, _) = listener.accept().expect("the hub's dial");
        let mut r = BufReader::new(s.try_clone().expect("clone"));
        let mut key = String::new();
        loop {
            let mut line = String::new();
            r.read_line(&mut line).expect("the dial's head");
            if let Some(k) = line.to_ascii_lowercase().strip_prefix("sec-websocket-key:") {
                key = line[line.len() - k.len()..].trim().to_owned();
            }
            if line == "\r\n" {
                break;
            }
        }
        dialed_tx.send(()).expect("tell the test");
        let _ = released.recv();
        let accept = tungstenite::handshake::derive_accept_key(key.as_bytes());
        let mut s = s;
        let _ = write!(
            s,
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Accept: {accept}\r\n\r\n"
        );
        // Held open until the hub closes it.
        let _ = r.read(&mut [0u8; 64]);
    });
    let port = hub.port;
    let client =
        std::thread::spawn(move || Peer::connect_ws(port, "/acp?instance=slow", Some(TEST_TOKEN)).map(drop));
    dialed.recv_timeout(WAIT).expect("the hub dials the slow bridge");
    signal(hub.pid(), "TERM");
    // The hub is shutting down with the open on its way; then the bridge answers.
    wait_until("the hub to stop accepting", || hub.log().contains("no longer accepting connections"));
    release.send(()).expect("release the bridge");
    assert_eq!(client.join().expect("the client"), Ok(()), "the open was answered with its 101");
}

#[test]
fn a_client_that_stops_answering_pings_is_dropped_and_one_that_answers_stays() {
    // Pings every second (production: 30 s). Not less: the client that answers must do so
    // within two periods, and on a loaded machine (three suites on 2 cores) a test's reader
    // thread was seen to miss 300 ms ones.
    // Relayed (hand-overs off): the hub's relay thread pings; handed over, the bridge does
    // (`a_handed_over_client_that_stops_answering_pings_is_dropped_by_its_bridge`).
    let home = Home::new();
    let (hub, b) = hub_and_bridge(
        &home,
        &[("ZCODE_ACP_PING_MS", "1000"), ("RUST_LOG", "info,zcode_hub=debug"), NO_HANDOFF],
    );
    let mut mute = hub.connect(&b.id()).unwrap();
    let mut alive = hub.connect(&b.id()).unwrap();
    initialize(&mut mute, json!({}));
    initialize(&mut alive, json!({}));
    mute.pause_reading(true);
    // Until the hub has given up on a leg (the mute one: the other answers).
    wait_until("the hub to find a relayed leg silent", || {
        hub.log().contains("a relayed leg left a ping unanswered")
    });
    // The relay thread's line says whose relay it is, like the hub's own lines of it.
    let log = hub.log();
    let line = log.lines().find(|l| l.contains("a relayed leg left a ping unanswered")).unwrap();
    assert!(line.contains(&format!("relay{{instance=\"{}\"}}", b.id())), "{line}");
    mute.pause_reading(false);
    // Dropped without a close frame: it is not listening.
    assert_eq!(mute.wait_closed(WAIT), None);
    // Two ping periods and more later, the client that answers is still relayed.
    let (r, _) = alive.call("_demo/echo", json!({"still": "here"}));
    assert!(r["result"].is_object(), "{r}\nthe hub's log:\n{}", hub.log());
}

#[test]
fn a_handed_over_client_that_stops_answering_pings_is_dropped_by_its_bridge() {
    // The hub hands the clients' sockets to the bridge, which pings them at the hub's period
    // (1 s here) and drops one that leaves a ping unanswered; the hub holds neither.
    let home = Home::new();
    let hub = Hub::start(&home, &[("ZCODE_ACP_PING_MS", "1000")]);
    let (b, log) = Bridge::start_logged(&home, &demo_agent(0), &[("ZCODE_ACP_HEARTBEAT_MS", "200")]);
    let id = b.id();
    wait_instances(hub.port, "the bridge to register", |l| listed(l, &id));
    let mut mute = hub.connect(&id).unwrap();
    let mut alive = hub.connect(&id).unwrap();
    initialize(&mut mute, json!({}));
    initialize(&mut alive, json!({}));
    mute.pause_reading(true);
    wait_until("the bridge to find a handed-over client silent", || {
        !log_lines(&log, "remote client left a ping unanswered").is_empty()
    });
    mute.pause_reading(false);
    assert_eq!(mute.wait_closed(WAIT), None, "dropped without a close frame: it is not listening");
    let (r, _) = alive.call("_demo/echo", json!({"still": "here"}));
    assert!(r["result"].is_object(), "{r}");
    assert!(
        !hub.log().contains("a relayed leg left a ping unanswered"),
        "the hub relayed it:\n{}",
        hub.log()
    );
}

#[test]
fn a_client_is_handed_to_its_bridge_and_relayed_when_the_bridge_takes_no_hand_over() {
    let home = Home::new();
    let (hub, b) = hub_and_bridge(&home, &[("RUST_LOG", "info,zcode_hub=debug")]);
    let id = b.id();
    let mut handed = hub.connect(&id).unwrap();
    initialize(&mut handed, json!({}));
    // The client's socket is the bridge's alone: the hub closed its own descriptor of it.
    let owners = socket_owners(hub.port, handed.local_port());
    assert_eq!(owners, vec![b.editor.pid()], "the processes holding the hub's end");
    // A bridge without a hand-over socket (an older build's) gets its clients relayed.
    let old = Bridge::start_env(&home, &demo_agent(0), &[("ZCODE_ACP_HEARTBEAT_MS", "200")]);
    wait_instances(hub.port, "the second bridge to register", |l| listed(l, &old.id()));
    let socket = home.path().join("run").join(format!("handoff-{}.sock", old.port));
    std::fs::remove_file(&socket).expect("the bridge's hand-over socket");
    let mut relayed = hub.connect(&old.id()).unwrap();
    initialize(&mut relayed, json!({}));
    let (r, _) = relayed.call("_demo/echo", json!({"relayed": true}));
    assert!(r["result"].is_object(), "{r}");
    assert_eq!(socket_owners(hub.port, relayed.local_port()), vec![hub.pid()]);
    assert!(hub.log().contains("relayed, not handed over"), "{}", hub.log());
    let (r, _) = handed.call("_demo/echo", json!({"handed": true}));
    assert!(r["result"].is_object(), "{r}");
}

/// The pids of the processes holding the local end at `port` of the connection from
/// `peer_port` (`ss -tnp`).
fn socket_owners(port: u16, peer_port: u16) -> Vec<u32> {
    let out = std::process::Command::new("ss")
        .args(["-Htnp", "state", "established", &format!("( sport = :{port} and dport = :{peer_port} )")])
        .output()
        .expect("ss");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut pids: Vec<u32> = text
        .split("pid=")
        .skip(1)
        .filter_map(|p| p.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

#[test]
fn a_killed_bridge_ends_its_handed_over_clients_at_once() {
    let home = Home::new();
    let (hub, b, mut c) = one_client(&home);
    kill9(b.editor.pid());
    // The connection was the bridge's: it ends with the process (no close frame: nobody is
    // left to send one), and the client reconnects as it does after any drop.
    assert_eq!(c.wait_closed(WAIT), None);
    drop(hub);
}

#[test]
fn a_killed_bridge_closes_its_relayed_clients_with_1011_and_leaves_the_listing() {
    let home = Home::new();
    let (hub, b) = hub_and_bridge(&home, &[("ZCODE_ACP_PROBE_GRACE_MS", "300"), NO_HANDOFF]);
    let id = b.id();
    let mut clients: Vec<Peer> = (0..3).map(|_| hub.connect(&id).unwrap()).collect();
    for c in &mut clients {
        initialize(c, json!({}));
    }
    kill9(b.editor.pid());
    // At once (the relay sees the connection end), not after a ping period (30 s here).
    for c in &mut clients {
        assert_eq!(c.wait_closed(WAIT), Some(1011));
    }
    assert!(wait_gone(b.editor.pid(), WAIT), "the bridge survived kill -9");
    wait_port_closed(b.port);
    // Gone from a probed listing once the probe grace has passed.
    let probe = || http(hub.port, "GET", "/api/instances?probe=1", &[AUTH], b"").json();
    let deadline = Instant::now() + WAIT;
    while probe().as_array().unwrap().iter().any(|i| i["id"] == id.as_str()) {
        assert!(Instant::now() < deadline, "a dead bridge is still listed after {WAIT:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(b);
}

#[test]
fn a_message_over_32_mib_closes_the_client_with_1009() {
    let home = Home::new();
    let (hub, b, mut c) = one_client(&home);
    c.send_fragmented(33 << 20);
    assert_eq!(c.wait_closed(Duration::from_secs(20)), Some(1009));
    // The bridge and the relay are fine for everyone else.
    let mut other = hub.connect(&b.id()).unwrap();
    initialize(&mut other, json!({}));
}

#[test]
fn sigterm_closes_relays_with_1001_and_exits() {
    let home = Home::new();
    let (mut hub, _b, mut c) = one_client(&home);
    signal(hub.pid(), "TERM");
    assert_eq!(c.wait_closed(WAIT), Some(1001));
    let status = hub.wait_exit(WAIT).expect("the hub exited");
    assert!(status.success(), "{status:?}");
    // Its port file went with it. (The bridge, finding no hub, may have started a new one by
    // now, which names its own port there.)
    assert_ne!(hub_port(&home), Some(hub.port), "the exited hub's port file is removed");
}

#[test]
fn status_is_relayed_from_a_real_bridge_with_get_and_head() {
    let home = Home::new();
    let (hub, mut b) = hub_and_bridge(&home, &[]);
    initialize(&mut b.editor, json!({}));
    let sid = new_session(&mut b.editor, home.path());
    b.editor.call("session/prompt", prompt(&sid, "a title"));
    let path = format!("/api/instances/{}/status", b.id());
    let via_hub = http(hub.port, "GET", &path, &[AUTH], b"");
    let (status, direct) = b.http_get("/status", Some(TEST_TOKEN));
    assert_eq!((via_hub.status, status), (200, 200));
    assert_eq!(via_hub.json(), serde_json::from_str::<Value>(&direct).unwrap());
    assert_eq!(via_hub.json()["sessions"][0]["sessionId"], sid.as_str());
    assert_eq!(via_hub.header("access-control-allow-origin"), Some("*"));
    let head = http(hub.port, "HEAD", &path, &[AUTH], b"");
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    assert_eq!(head.header("content-length"), via_hub.header("content-length"));

    assert_eq!(http(hub.port, "GET", &path, &[], b"").status, 401);
    let r = http(hub.port, "GET", "/api/instances/999999/status", &[AUTH], b"");
    assert_eq!((r.status, r.text().as_str()), (404, "unknown instance"));
    let dead = closed_port();
    fake_registration(&hub, "dead", dead.port);
    let r = http(hub.port, "GET", "/api/instances/dead/status", &[AUTH], b"");
    assert_eq!((r.status, r.text().as_str()), (502, "bridge unreachable"));
    // A route the bridge does not have comes back as the bridge answered it.
    let r = http(hub.port, "POST", &format!("/api/instances/{}/no-such-route", b.id()), &[AUTH], b"{}");
    assert_eq!((r.status, r.text().as_str()), (404, "not found"));
}

/// One request as a fake bridge saw it.
struct Seen {
    head: String,
    body: Vec<u8>,
}

/// A fake bridge: answers each request with 409, a JSON body and a custom header, and reports
/// what it received.
fn fake_bridge() -> (u16, mpsc::Receiver<Seen>) {
    let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind the fake bridge");
    let port = listener.local_addr().expect("its address").port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let mut reader = BufReader::new(stream);
            let mut head = String::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                head.push_str(&line);
            }
            let len = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned())
                })
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let mut body = vec![0; len];
            let _ = reader.read_exact(&mut body);
            let answer = b"{\"ok\":false,\"error\":\"busy\"}";
            let mut s = reader.into_inner();
            let _ = write!(
                s,
                "HTTP/1.1 409 Conflict\r\nContent-Type: application/json\r\nX-Zcode-First-Line: 7\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n",
                answer.len()
            );
            let _ = s.write_all(answer);
            if tx.send(Seen { head, body }).is_err() {
                return;
            }
        }
    });
    (port, rx)
}

#[test]
fn every_per_instance_route_is_relayed_with_method_body_and_status_kept() {
    let home = Home::new();
    let hub = Hub::start(&home, &[]);
    let (port, seen) = fake_bridge();
    fake_registration(&hub, "fake", port);
    let body = br#"{"title": "renamed \u00e9", "n": [1.50, 2e3]}"#;
    for (method, route) in [
        ("POST", "sessions/abc/rename"),
        ("POST", "sessions/abc/close"),
        ("POST", "sessions/abc/delete"),
        ("PUT", "settings/mcp/x"),
        ("DELETE", "settings/agents/y"),
        ("GET", "fs/list"),
        ("POST", "backend/restart"),
    ] {
        let path = format!("/api/instances/fake/{route}?token={TEST_TOKEN}&sessionId=abc&path=a%20b");
        let sent: &[u8] = if method == "GET" { b"" } else { body };
        let r = http(
            hub.port,
            method,
            &path,
            &[("X-Custom", "kept"), ("Content-Type", "application/json")],
            sent,
        );
        assert_eq!(r.status, 409, "{method} {route}: {}", r.text());
        assert_eq!(r.text(), r#"{"ok":false,"error":"busy"}"#);
        assert_eq!(r.header("x-zcode-first-line"), Some("7"));
        assert_eq!(r.header("access-control-allow-origin"), Some("*"));
        let got = seen.recv_timeout(Duration::from_secs(10)).expect("the fake bridge got the request");
        let first = got.head.lines().next().unwrap_or_default().to_owned();
        assert_eq!(first, format!("{method} /{route}?sessionId=abc&path=a%20b HTTP/1.1"));
        let lower = got.head.to_ascii_lowercase();
        assert!(
            lower.contains(&format!("authorization: bearer {}", TEST_TOKEN.to_ascii_lowercase())),
            "{}",
            got.head
        );
        assert!(lower.contains("x-custom: kept"), "{}", got.head);
        assert!(!lower.contains(&format!("token={}", TEST_TOKEN.to_ascii_lowercase())), "{}", got.head);
        assert_eq!(got.body, sent, "{method} {route}: the body arrives byte for byte");
    }
}

/// A client's connection that reads at most `rate` bytes per second (a phone on a slow link).
struct SlowLink {
    tcp: std::net::TcpStream,
    rate: u64,
    read: u64,
    since: Instant,
}

impl Read for SlowLink {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let due = Duration::from_millis(self.read * 1000 / self.rate);
        if let Some(wait) = due.checked_sub(self.since.elapsed()) {
            std::thread::sleep(wait);
        }
        let room = buf.len().min(4096);
        let n = self.tcp.read(&mut buf[..room])?;
        self.read += n as u64;
        Ok(n)
    }
}

impl Write for SlowLink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.tcp.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.tcp.flush()
    }
}

/// Watches the hub's sockets to a bridge (`ss`, every 20 ms) until stopped or dropped (a
/// failing test does not leave it polling beside the binary's other tests): the most bytes the
/// bridge sent that the hub had not read yet, and each socket's receive buffer, first and
/// largest seen.
struct Backlog {
    stop: Arc<AtomicBool>,
    watcher: Option<std::thread::JoinHandle<Watched>>,
}

#[derive(Default)]
struct Watched {
    /// The largest receive queue.
    most: u64,
    /// Per socket (its local address): its receive buffer when first seen and at its largest.
    buffers: std::collections::BTreeMap<String, (u64, u64)>,
}

impl Backlog {
    fn watch(bridge_port: u16) -> Backlog {
        let stop = Arc::new(AtomicBool::new(false));
        let done = stop.clone();
        let watcher = std::thread::spawn(move || {
            let mut seen = Watched::default();
            let filter = format!("dport = :{bridge_port}");
            while !done.load(Ordering::Relaxed) {
                let out = std::process::Command::new("ss").args(["-tmnH", &filter]).output().expect("run ss");
                for (local, queue, buffer) in sockets(&String::from_utf8_lossy(&out.stdout)) {
                    seen.most = seen.most.max(queue);
                    let b = seen.buffers.entry(local).or_insert((buffer, buffer));
                    b.1 = b.1.max(buffer);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            seen
        });
        Backlog { stop, watcher: Some(watcher) }
    }

    fn stop(mut self) -> Watched {
        self.stop.store(true, Ordering::Relaxed);
        self.watcher.take().map(|w| w.join().expect("the watcher")).unwrap_or_default()
    }
}

impl Drop for Backlog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The sockets of `ss -tmnH` output: (local address, receive queue, receive buffer `rb`).
fn sockets(ss: &str) -> Vec<(String, u64, u64)> {
    let mut out = vec![];
    let mut lines = ss.lines();
    while let Some(line) = lines.next() {
        // State Recv-Q Send-Q Local Peer, then an indented line `skmem:(r0,rb131072,…)`.
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(queue), Some(local)) = (f.get(1).and_then(|q| q.parse().ok()), f.get(3)) else { continue };
        let buffer = lines
            .next()
            .and_then(|m| m.split(['(', ',']).find_map(|w| w.strip_prefix("rb")?.parse().ok()))
            .unwrap_or(0);
        out.push(((*local).to_owned(), queue, buffer));
    }
    out
}

#[test]
fn sockets_reads_the_queue_and_buffer_of_each_socket() {
    let ss = "ESTAB 128000 0      127.0.0.1:45678 127.0.0.1:40051
\t skmem:(r131072,rb131072,t0,tb2626560,f0,w0,o0,bl0,d0)
ESTAB 0      0      127.0.0.1:45680 127.0.0.1:40051
\t skmem:(r0,rb6291456,t0,tb2626560,f0,w0,o0,bl0,d0)
";
    assert_eq!(
        sockets(ss),
        [("127.0.0.1:45678".to_owned(), 128000, 131072), ("127.0.0.1:45680".to_owned(), 0, 6291456)]
    );
}

/// The slow reader's replay: `ZCODE_TEST_SLOW_MB` MiB read at `ZCODE_TEST_SLOW_KIBPS` KiB/s.
/// The default suite reads 2 MiB at 256 KiB/s (seconds; with the hub before `cd0218e` it
/// held 0.95-1.4 MB of the bridge's output unread); `scripts/soak` reads 20 MiB at
/// 50 KiB/s (minutes, the phone on a bad line the bound was found with).
fn slow_replay() -> (usize, u64) {
    let knob = |name: &str, default| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    (knob("ZCODE_TEST_SLOW_MB", 2) as usize, knob("ZCODE_TEST_SLOW_KIBPS", 256))
}

#[test]
fn a_slow_reader_gets_a_whole_replay_through_the_hub_and_stays_connected() {
    // The hub pings both legs every 200 ms (production: 30 s), some 2000 times during the
    // soak's replay: the client's pongs come up to minutes behind the replay queued ahead of
    // them, and the bridge's wait behind data the hub cannot pass on yet.
    //
    // The bridge→hub leg must move as the client drains, not in bursts seconds apart: the
    // bridge drops a client whose socket takes nothing for its stall period (10 s here). With
    // the kernel's autotuned receive buffer on the hub's end (it grew past 1 MiB in the
    // replay's first burst) the hub held ~0.5 MB of the bridge's output unread, the window
    // it offered reopened only once a few hundred KiB of that had been drained (receiver-side
    // silly window avoidance), and the bridge's writes stood still 6–9 s at a time (seen with
    // `ss` and a packet capture), once past 10 s. So the hub's socket on the bridge leg is
    // watched here (`ss`): the small buffer the hub sets on it (`hub::upstream`) must hold,
    // not be autotuned; bounded so, the window reopens every ~64 KiB drained.
    let (mb, kib_per_s) = slow_replay();
    let home = Home::new();
    // The hub first: the bridge that makes the history would otherwise start one of its own.
    let hub =
        Hub::start(&home, &[("ZCODE_ACP_PING_MS", "200"), ("RUST_LOG", "info,zcode_hub=debug"), NO_HANDOFF]);
    let filler = history::filler_for_mib(mb);
    let sid = history::session_with_filler(&home, filler);
    // The bridge drops a client whose socket takes nothing for a ping period: 10 s here (30 s
    // in production). The relay between them must keep taking what the slow client drains,
    // not in bursts a period apart (with the hub's send buffer to the client autotuned to
    // 4 MiB, it took ~40 s at a time).
    let b = Bridge::start_env(
        &home,
        &demo_agent(0),
        &[("ZCODE_ACP_HEARTBEAT_MS", "200"), ("ZCODE_ACP_PING_MS", "10000")],
    );
    let id = b.id();
    wait_instances(hub.port, "the bridge to register", |l| listed(l, &id));
    let backlog = Backlog::watch(b.port);

    let tcp = std::net::TcpStream::connect(("127.0.0.1", hub.port)).expect("connect");
    tcp.set_read_timeout(Some(WAIT)).expect("timeout");
    let link = SlowLink { tcp, rate: kib_per_s * 1024, read: 0, since: Instant::now() };
    use tungstenite::client::IntoClientRequest;
    let mut req =
        format!("ws://127.0.0.1:{}/acp?instance={}", hub.port, b.id()).into_client_request().unwrap();
    req.headers_mut().insert("authorization", format!("Bearer {TEST_TOKEN}").parse().unwrap());
    let (mut ws, _) = tungstenite::client::client(req, link).expect("the relay accepts");
    // What went wrong, with the hub's account of it.
    let fail = |what: String| -> ! { panic!("{what}\nthe hub's log:\n{}", hub.log()) };
    // Every message up to the answer to `id`, then the answer and the bytes read.
    let answer = |ws: &mut tungstenite::WebSocket<SlowLink>, id: usize| -> (Value, Vec<Value>, usize) {
        let (mut bytes, mut before) = (0, Vec::new());
        loop {
            match ws.read() {
                Ok(tungstenite::Message::Text(t)) => {
                    bytes += t.len();
                    let v: Value = serde_json::from_str(&t).expect("JSON");
                    if v["id"] == id && v.get("method").is_none() {
                        return (v, before, bytes);
                    }
                    before.push(v);
                }
                Ok(tungstenite::Message::Close(f)) => {
                    fail(format!("the client was closed after {bytes} bytes: {f:?}"))
                }
                Ok(_) => {}
                Err(e) => fail(format!("the client's connection failed after {bytes} bytes: {e}")),
            }
        }
    };
    let send = |ws: &mut tungstenite::WebSocket<SlowLink>, msg: Value| {
        if let Err(e) = ws.send(tungstenite::Message::text(msg.to_string())) {
            fail(format!("sending {msg} failed: {e}"));
        }
    };
    send(
        &mut ws,
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}),
    );
    answer(&mut ws, 0);
    let load = json!({"sessionId": sid, "cwd": home.path(), "mcpServers": []});
    send(&mut ws, json!({"jsonrpc": "2.0", "id": 1, "method": "session/load", "params": load}));
    let (r, updates, bytes) = answer(&mut ws, 1);
    assert!(bytes >= mb << 20, "{bytes} bytes");
    // The buffer the hub set holds (the kernel does not autotune a buffer a program set); left
    // to the kernel, it grew past 1 MiB in the first burst. How much it held is a figure of the
    // kernel's (128 KiB for the 64 KiB asked, ~400 KB to 1.3 MB unbounded): printed, and
    // measured in docs/PERFORMANCE.md, never asserted.
    let seen = backlog.stop();
    assert!(seen.most > 0, "the hub's socket to the bridge was never seen with data to read");
    let grown: Vec<_> = seen.buffers.iter().filter(|(_, (first, most))| most > first).collect();
    assert!(
        grown.is_empty(),
        "the hub's receive buffer on the bridge leg grew during the replay (first, largest): {grown:?}"
    );
    eprintln!("the hub held at most {} bytes of the bridge's output unread", seen.most);
    // Complete: every update the journal has, the filler whole and in order.
    let meta = &r["result"]["replayMeta"];
    assert_eq!(meta["hasMore"], false, "{r}");
    assert_eq!(meta["replayedMessages"], meta["totalMessages"], "{r}");
    let replayed = meta["replayedMessages"].as_u64().expect("replayedMessages") as usize;
    assert!(replayed > filler, "{r}: the seed turn and {filler} filler messages");
    let updates: Vec<&Value> = updates.iter().filter(|u| u["method"] == "session/update").collect();
    assert!(updates.len() >= replayed, "{} updates for {replayed} messages", updates.len());
    let order: Vec<usize> = updates.iter().filter_map(|u| history::filler_index(u)).collect();
    assert_eq!(order, (0..filler).collect::<Vec<_>>(), "the filler, whole and in order");
    // Still relayed, both ways.
    send(&mut ws, json!({"jsonrpc": "2.0", "id": 2, "method": "_demo/echo", "params": {"still": "here"}}));
    let (r, _, _) = answer(&mut ws, 2);
    assert!(r["result"].is_object(), "{r}");
}

#[test]
fn a_relay_thread_that_fails_closes_its_relays_with_1011_logs_it_and_relays_again() {
    for fault in ["panic", "poll"] {
        let home = Home::new();
        let (hub, b) = hub_and_bridge(&home, &[("ZCODE_ACP_TEST_RELAY_FAULT", fault), NO_HANDOFF]);
        // The fault strikes when the first relay opens.
        let mut first = hub.connect(&b.id()).expect("the relay accepts");
        assert_eq!(first.wait_closed(WAIT), Some(1011), "{fault}");
        let log = hub.log();
        assert!(log.contains("the relay thread failed"), "{fault}: {log}");
        assert!(log.contains(&format!("ZCODE_ACP_TEST_RELAY_FAULT={fault}")), "{fault}: {log}");
        // The next client is relayed.
        let mut next = hub.connect(&b.id()).expect("the relay accepts");
        initialize(&mut next, json!({}));
        let (r, _) = next.call("_demo/echo", json!({"after": fault}));
        assert!(r["result"].is_object(), "{fault}: {r}");
    }
}

#[test]
fn a_burst_of_relay_opens_never_passes_the_relay_cap() {
    // The cap (2 here; 16 384 in production) is taken before the hub awaits its dial to the
    // bridge: checked first and counted after the dial, a burst all passed the check.
    // Relayed: a hand-over the bridge's queue cannot take at once is relayed after a while,
    // and the relay's cap is the hub's own (the bridge's is below).
    let home = Home::new();
    let (hub, b) = hub_and_bridge(&home, &[("ZCODE_ACP_TEST_MAX_RELAYS", "2"), NO_HANDOFF]);
    let id = b.id();
    let burst = 12;
    let start = std::sync::Barrier::new(burst);
    let outcomes: Vec<Result<Peer, u16>> = std::thread::scope(|s| {
        let opens: Vec<_> = (0..burst)
            .map(|_| {
                s.spawn(|| {
                    start.wait();
                    Peer::connect_ws(hub.port, &format!("/acp?instance={id}"), Some(TEST_TOKEN))
                })
            })
            .collect();
        opens.into_iter().map(|t| t.join().expect("an opener")).collect()
    });
    let opened = outcomes.iter().filter(|o| o.is_ok()).count();
    let refused: Vec<u16> = outcomes.iter().filter_map(|o| o.as_ref().err().copied()).collect();
    assert!(opened <= 2, "{opened} relays opened under a cap of 2 (refused: {refused:?})");
    assert!(opened >= 1, "the cap of 2 let none through: {refused:?}");
    assert!(refused.iter().all(|s| *s == 503), "{refused:?}");
    // The ones that opened relay; closing one makes room for the next.
    let mut open: Vec<Peer> = outcomes.into_iter().filter_map(Result::ok).collect();
    for p in &mut open {
        initialize(p, json!({}));
    }
    drop(open);
    wait_until("a closed relay to make room", || {
        Peer::connect_ws(hub.port, &format!("/acp?instance={id}"), Some(TEST_TOKEN)).is_ok()
    });
}

#[test]
fn a_bridge_serves_no_more_handed_over_clients_than_the_cap_and_refuses_the_next_with_503() {
    let home = Home::new();
    let (hub, b) = hub_and_bridge(&home, &[("ZCODE_ACP_TEST_MAX_RELAYS", "2")]);
    let id = b.id();
    let mut open: Vec<Peer> = (0..2).map(|_| hub.connect(&id).expect("under the cap")).collect();
    for p in &mut open {
        initialize(p, json!({}));
    }
    // The bridge answers the third itself, as the hub would: a status, CORS, no upgrade.
    let extra = format!(
        "sec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nauthorization: Bearer {TEST_TOKEN}\r\n"
    );
    let (status, headers, body) = raw_upgrade(hub.port, &format!("/acp?instance={id}"), &extra, false);
    assert!(status.contains(" 503 "), "{status}");
    assert!(headers.iter().any(|(k, v)| k == "access-control-allow-origin" && v == "*"), "{headers:?}");
    assert_eq!(body, "too many connections");
    let (r, _) = open[0].call("_demo/echo", json!({"still": "served"}));
    assert!(r["result"].is_object(), "{r}");
    // A closed one makes room.
    open.pop();
    wait_until("a closed client to make room", || hub.connect(&id).is_ok());
}

#[test]
fn a_killed_hubs_handed_over_clients_are_closed_by_their_bridge() {
    // A connection must not outlive the hub that checked its credential (a revocation needs a
    // hub to be heard): the bridge closes a hub's clients when that hub's connection ends.
    let home = Home::new();
    let (mut hub, _b, mut c) = one_client(&home);
    signal(hub.pid(), "KILL");
    assert!(hub.wait_exit(WAIT).is_some(), "the hub survived SIGKILL");
    assert_eq!(c.wait_closed(WAIT), Some(1001), "told by the bridge");
}
