//! The hub's HTTP surface: health, token auth (header, query, precedence), CORS and OPTIONS,
//! the failed-auth rate limit, tokens kept out of logs, and hostile input (huge, malformed,
//! deeply nested or never-finished requests) that must not slow anyone else down.

use serde_json::json;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use zcode_tests::hub::{AUTH, Hub, http, post_json};
use zcode_tests::{Home, TEST_TOKEN, WAIT};

#[test]
fn health_needs_no_token_and_everything_else_needs_the_right_one() {
    let home = Home::new();
    let hub = Hub::start(&home, &[]);
    let r = http(hub.port, "GET", "/api/health", &[], b"");
    assert_eq!((r.status, r.text().as_str()), (200, "ok"));

    let q = format!("/api/instances?token={TEST_TOKEN}");
    for (path, headers, want) in [
        ("/api/instances", vec![], 401),
        ("/api/instances", vec![("Authorization", "Bearer wrong")], 401),
        ("/api/instances", vec![("Authorization", "Basic abc")], 401),
        ("/api/instances?token=wrong", vec![], 401),
        ("/api/instances", vec![AUTH], 200),
        (q.as_str(), vec![], 200),
        // The header takes precedence over the query.
        (q.as_str(), vec![("Authorization", "Bearer wrong")], 401),
        ("/api/instances?token=wrong", vec![AUTH], 200),
        // Unknown routes: 401 without the token, 404 with it.
        ("/api/nothing-here", vec![], 401),
        ("/api/nothing-here", vec![AUTH], 404),
    ] {
        let r = http(hub.port, "GET", path, &headers, b"");
        assert_eq!(r.status, want, "GET {path} with {headers:?}: {}", r.text());
        if want == 401 {
            assert_eq!(r.text(), "unauthorized");
            assert!(r.header("content-type").is_some_and(|c| c.starts_with("text/plain")), "{r:?}");
        }
    }
    assert_eq!(http(hub.port, "GET", "/api/instances", &[AUTH], b"").json(), json!([]));
}

#[test]
fn every_answer_carries_cors_and_any_options_is_204_without_auth() {
    let home = Home::new();
    let hub = Hub::start(&home, &[]);
    for (method, path, headers) in [
        ("OPTIONS", "/api/instances", vec![]),
        ("OPTIONS", "/api/instances/123/sessions/x/rename", vec![]),
        ("OPTIONS", "/acp?instance=1", vec![]),
        ("GET", "/api/health", vec![]),
        ("GET", "/api/instances", vec![]),
        ("GET", "/api/instances", vec![AUTH]),
        ("GET", "/api/instances/404/status", vec![AUTH]),
        ("DELETE", "/nope", vec![AUTH]),
    ] {
        let r = http(hub.port, method, path, &headers, b"");
        if method == "OPTIONS" {
            assert_eq!(r.status, 204, "{method} {path}");
        }
        assert_eq!(r.header("access-control-allow-origin"), Some("*"), "{method} {path}: {r:?}");
        assert_eq!(r.header("access-control-allow-methods"), Some("GET, POST, PUT, PATCH, DELETE, OPTIONS"));
        assert_eq!(r.header("access-control-allow-headers"), Some("Authorization, Content-Type"));
        assert_eq!(r.header("access-control-expose-headers"), Some("X-Zcode-First-Line"));
    }
}

#[test]
fn a_flood_of_bad_tokens_gets_429_for_that_address_only_and_never_locks_out_the_right_token() {
    let home = Home::new();
    // The tunnel's header is believed only when configured (security_preauth.rs shows why).
    let hub = Hub::start(&home, &[("ZCODE_ACP_CLIENT_ADDRESS_HEADER", "X-Forwarded-For")]);
    let attacker = ("X-Forwarded-For", "203.0.113.7, 198.51.100.9");
    let mut limited = None;
    for _ in 0..30 {
        let r = http(hub.port, "GET", "/api/instances?token=guess", &[attacker], b"");
        assert!(r.status == 401 || r.status == 429, "{r:?}");
        if r.status == 429 {
            limited = Some(r);
            break;
        }
    }
    let r = limited.expect("30 bad tokens from one address were never limited");
    let retry: u64 = r.header("retry-after").and_then(|v| v.parse().ok()).expect("Retry-After");
    assert!(retry >= 1, "{r:?}");
    // Registration with a bad body token counts against the same address, and is limited too.
    let r = http(
        hub.port,
        "POST",
        "/api/register",
        &[attacker],
        json!({"token": "guess", "id": "1", "port": 1}).to_string().as_bytes(),
    );
    assert_eq!(r.status, 429);
    // The right token from the same address still works, header or query.
    assert_eq!(http(hub.port, "GET", "/api/instances", &[attacker, AUTH], b"").status, 200);
    let q = format!("/api/instances?token={TEST_TOKEN}");
    assert_eq!(http(hub.port, "GET", &q, &[attacker], b"").status, 200);
    // Other addresses are not affected: another tunnel client, and the loopback peer itself.
    let other = ("X-Forwarded-For", "192.0.2.1");
    assert_eq!(http(hub.port, "GET", "/api/instances?token=guess", &[other], b"").status, 401);
    assert_eq!(http(hub.port, "GET", "/api/instances?token=guess", &[], b"").status, 401);
    // Only the last hop counts: the client's own earlier hops change nothing.
    let forged = ("X-Forwarded-For", "192.0.2.55, 198.51.100.9");
    assert_eq!(http(hub.port, "GET", "/api/instances?token=guess", &[forged], b"").status, 429);
}

#[test]
fn tokens_never_reach_the_log() {
    let home = Home::new();
    let hub = Hub::start(&home, &[("ZCODE_ACP_DEBUG", "1"), ("RUST_LOG", "trace")]);
    let wrong = "wrong-secret-4711";
    for path in [
        format!("/api/instances?token={TEST_TOKEN}&probe=1"),
        format!("/api/instances?token={wrong}"),
        format!("/api/instances/42/status?token={TEST_TOKEN}"),
        format!("/acp?instance=42&token={TEST_TOKEN}"),
    ] {
        http(hub.port, "GET", &path, &[], b"");
    }
    http(hub.port, "GET", "/api/instances", &[("Authorization", &format!("Bearer {wrong}"))], b"");
    post_json(hub.port, "/api/register", &json!({"token": TEST_TOKEN, "id": "42", "port": 1}));
    post_json(hub.port, "/api/register", &json!({"token": wrong, "id": "43", "port": 1}));
    let log = hub.log();
    assert!(log.contains("token=REDACTED"), "the requests were logged (redacted):\n{log}");
    assert!(!log.contains(TEST_TOKEN), "the token is in the log:\n{log}");
    assert!(!log.contains(wrong), "a presented token is in the log:\n{log}");
}

#[test]
fn bodies_over_1_mib_are_refused_before_they_are_read() {
    let home = Home::new();
    let hub = Hub::start(&home, &[]);
    // Announced: 413 at once, although not one byte of the body was sent.
    let mut s = TcpStream::connect(("127.0.0.1", hub.port)).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    write!(s, "POST /api/register HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\n").unwrap();
    let mut buf = [0u8; 512];
    let n = s.read(&mut buf).expect("an answer before the body");
    let head = String::from_utf8_lossy(&buf[..n]);
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    // Also on a relayed route, before the instance is even looked at.
    let mut s = TcpStream::connect(("127.0.0.1", hub.port)).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    write!(
        s,
        "POST /api/instances/1/settings/x HTTP/1.1\r\nHost: x\r\nAuthorization: {}\r\nContent-Length: 5000000\r\n\r\n",
        AUTH.1
    )
    .unwrap();
    let n = s.read(&mut buf).expect("an answer before the body");
    let head = String::from_utf8_lossy(&buf[..n]);
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    // Chunked, with no length announced: cut at 1 MiB.
    let mut s = TcpStream::connect(("127.0.0.1", hub.port)).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    write!(s, "POST /api/register HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n").unwrap();
    let chunk = vec![b' '; 64 * 1024];
    let mut answer = String::new();
    for _ in 0..20 {
        let ok = write!(s, "{:x}\r\n", chunk.len())
            .and_then(|()| s.write_all(&chunk))
            .and_then(|()| s.write_all(b"\r\n"));
        if ok.is_err() {
            break;
        }
    }
    let _ = s.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
}

#[test]
fn malformed_or_too_deep_json_is_400() {
    let home = Home::new();
    let hub = Hub::start(&home, &[]);
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    for body in ["{not json", "", "[1,2", deep.as_str(), "\"just a string\""] {
        let r = http(hub.port, "POST", "/api/register", &[AUTH], body.as_bytes());
        assert_eq!(r.status, 400, "{body:.40}: {}", r.text());
    }
    // The hub is fine afterwards.
    assert_eq!(http(hub.port, "GET", "/api/health", &[], b"").status, 200);
}

#[test]
fn slow_or_partial_requests_are_cut_and_slow_nobody_else() {
    let home = Home::new();
    let hub = Hub::start(&home, &[]);
    let mut stalled: Vec<TcpStream> = (0..50)
        .map(|_| {
            let mut s = TcpStream::connect(("127.0.0.1", hub.port)).unwrap();
            s.write_all(b"GET /api/instances HTTP/1.1\r\nHost: x\r\nAuthor").unwrap();
            s
        })
        .collect();
    // Everyone else is served meanwhile.
    for _ in 0..20 {
        assert_eq!(http(hub.port, "GET", "/api/instances", &[AUTH], b"").status, 200);
    }
    // The stalled ones are cut by the header-read timeout (10 s): the hub closes them (end of
    // stream or a reset), where without it the read would still wait when WAIT runs out.
    for s in &mut stalled {
        s.set_read_timeout(Some(WAIT)).unwrap();
        let mut buf = Vec::new();
        if let Err(e) = s.read_to_end(&mut buf) {
            assert!(
                !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
                "a partial request held its connection for {WAIT:?}"
            );
        }
        assert!(!String::from_utf8_lossy(&buf).contains("200 OK"), "the partial request was answered");
    }
}
