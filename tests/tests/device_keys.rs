//! Devices that hold a key instead of a credential (issue 32 point 8, the web client's way):
//! paired with a public key, they sign the hub's one-time challenges for access tokens that
//! live 15 minutes in memory; a used, expired or unknown challenge, another key's signature and
//! a removed device's key are refused in words and charged like wrong tokens; a device paired
//! with a token swaps it for a key; revoking closes what the access tokens opened.

#![allow(clippy::unwrap_used)] // Setup helpers outside #[test] fns: a failed unwrap is a failed test.

use base64::Engine;
use p256::ecdsa::SigningKey;
use p256::ecdsa::signature::Signer;
use serde_json::{Value, json};
use std::io::{Read, Write};
use zcode_tests::hub::{Hub, Reply, http, listed, wait_instances, wait_until};
use zcode_tests::{Bridge, Home, Peer, TEST_TOKEN, WAIT, demo_agent, initialize};

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// `method path` with a JSON `body`, and `token` as Bearer when given.
fn call(port: u16, method: &str, path: &str, token: Option<&str>, body: Option<Value>) -> Reply {
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![("Content-Type", "application/json")];
    if let Some(a) = &auth {
        headers.push(("Authorization", a.as_str()));
    }
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    http(port, method, path, &headers, body.as_bytes())
}

/// A key (from `seed`) and its public half as WebCrypto's `exportKey('raw')` gives it, base64url.
fn key(seed: u8) -> (SigningKey, String) {
    let sk = SigningKey::from_slice(&[seed; 32]).unwrap();
    let public = sk.verifying_key().to_encoded_point(false);
    (sk, b64(public.as_bytes()))
}

/// A pairing code made with the machine's token.
fn code(port: u16) -> String {
    let r = call(port, "POST", "/api/pairing", Some(TEST_TOKEN), Some(json!({})));
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["code"].as_str().unwrap().to_owned()
}

/// A fresh challenge.
fn challenge(port: u16) -> Value {
    let r = call(port, "POST", "/api/pair/challenge", None, None);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

/// Asks for an access token for device `id`, signing `challenge` with `sk`.
fn mint_with(port: u16, id: &str, sk: &SigningKey, challenge: &str) -> Reply {
    let sig: p256::ecdsa::Signature = sk.sign(format!("zcode-acp device token:{challenge}").as_bytes());
    let body = json!({"deviceId": id, "challenge": challenge, "signature": b64(&sig.to_bytes())});
    call(port, "POST", "/api/pair/token", None, Some(body))
}

/// An access token for device `id` (a fresh challenge signed with `sk`).
fn mint(port: u16, id: &str, sk: &SigningKey) -> String {
    let c = challenge(port);
    let r = mint_with(port, id, sk, c["challenge"].as_str().unwrap());
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["expiresIn"], 900, "an access token lives 15 minutes: {v}");
    v["token"].as_str().unwrap().to_owned()
}

fn refused(r: &Reply, words: &str) {
    assert_eq!(r.status, 401, "{}", r.text());
    let said = r.json()["error"].as_str().unwrap_or_default().to_owned();
    assert!(said.contains(words), "{said:?} should say {words:?}");
}

#[test]
fn a_device_with_a_key_signs_one_time_challenges_for_short_lived_tokens_and_nothing_else_gets_one() {
    let home = Home::new();
    let hub = Hub::start(&home, &[("ZCODE_ACP_TEST_DEVICE_CHALLENGE_MS", "2000")]);
    let b = Bridge::start_env(&home, &demo_agent(0), &[("ZCODE_ACP_HEARTBEAT_MS", "200")]);
    let instance = b.id();
    wait_instances(hub.port, "the bridge to register", |l| listed(l, &instance));
    let port = hub.port;
    let (sk, public) = key(1);

    // Paired with a key: no credential is handed out at all. A bad key is refused in words
    // before the code is spent.
    let c = code(port);
    let r = call(port, "POST", "/api/pair", None, Some(json!({"code": c, "publicKey": b64(&[4; 65])})));
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("not a point on P-256"), "{}", r.text());
    let r =
        call(port, "POST", "/api/pair", None, Some(json!({"code": c, "name": "phone", "publicKey": public})));
    assert_eq!(r.status, 200, "{}", r.text());
    let paired = r.json();
    assert!(paired.get("token").is_none(), "no credential for a device with a key: {paired}");
    let id = paired["deviceId"].as_str().unwrap().to_owned();

    // Asked without what it needs: a 400 saying what.
    let r = call(port, "POST", "/api/pair/token", None, Some(json!({"deviceId": id})));
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("challenge"), "{}", r.text());

    // A signed challenge buys an access token, good every way the token is.
    let access = mint(port, &id, &sk);
    assert_eq!(call(port, "GET", "/api/instances", Some(&access), None).status, 200);
    assert_eq!(http(port, "GET", &format!("/api/instances?token={access}"), &[], b"").status, 200);
    let path = format!("/acp?instance={instance}");
    let mut ws = Peer::connect_ws(port, &path, Some(&access)).expect("relay with the access token");
    assert!(initialize(&mut ws, json!({}))["protocolVersion"].is_number());
    let mut api = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    api.write_all(
        format!("GET /api/version HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {access}\r\n\r\n").as_bytes(),
    )
    .unwrap();
    api.set_read_timeout(Some(WAIT)).unwrap();
    let mut first = [0u8; 12];
    api.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
    let me = call(port, "GET", "/api/devices", Some(&access), None).json();
    assert!(
        me["devices"].as_array().unwrap().iter().any(|d| d["id"] == id.as_str() && d["current"] == true),
        "{me}"
    );

    // A device paired with a token (as before keys) swaps it for a key: the token stops working.
    let c = code(port);
    let r = call(port, "POST", "/api/pair", None, Some(json!({"code": c, "name": "old phone"})));
    let old = r.json();
    let (old_id, old_token) =
        (old["deviceId"].as_str().unwrap().to_owned(), old["token"].as_str().unwrap().to_owned());
    let (old_sk, old_public) = key(2);
    let r = call(port, "POST", "/api/pair/key", Some(TEST_TOKEN), Some(json!({"publicKey": old_public})));
    assert_eq!(r.status, 409, "the machine token is no device: {}", r.text());
    let r = call(port, "POST", "/api/pair/key", Some(&old_token), Some(json!({"publicKey": old_public})));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(call(port, "GET", "/api/instances", Some(&old_token), None).status, 401); // failure 1
    let old_access = mint(port, &old_id, &old_sk);
    assert_eq!(call(port, "GET", "/api/instances", Some(&old_access), None).status, 200);

    // A challenge works once; an unknown one, another key's signature and an expired one fail.
    let used = challenge(port)["challenge"].as_str().unwrap().to_owned();
    assert_eq!(mint_with(port, &id, &sk, &used).status, 200);
    refused(&mint_with(port, &id, &sk, &used), "already used or expired"); // 2
    refused(&mint_with(port, &id, &sk, "never-given"), "unknown"); // 3
    let fresh = challenge(port)["challenge"].as_str().unwrap().to_owned();
    refused(&mint_with(port, &id, &key(3).0, &fresh), "not this device's key"); // 4
    refused(&mint_with(port, &id, &sk, &fresh), "already used or expired"); // 5: spent by the try
    let late = challenge(port);
    let at = late["expiresAt"].as_u64().unwrap();
    wait_until("the challenge to expire", || zcode_shared::time::now_ms() > at);
    refused(&mint_with(port, &id, &sk, late["challenge"].as_str().unwrap()), "expired"); // 6

    // Revoked: every connection its access tokens opened closes, and its key buys nothing.
    let r = call(port, "DELETE", &format!("/api/devices/{id}"), Some(TEST_TOKEN), None);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(ws.wait_closed(WAIT), Some(1008), "the relay is closed with 1008");
    let mut rest = Vec::new();
    let _ = api.read_to_end(&mut rest); // ends (EOF) once the hub closes it
    assert_eq!(call(port, "GET", "/api/instances", Some(&access), None).status, 401); // 7
    let c = challenge(port)["challenge"].as_str().unwrap().to_owned();
    refused(&mint_with(port, &id, &sk, &c), "device was removed"); // 8
    assert_eq!(
        call(port, "GET", "/api/instances", Some(&old_access), None).status,
        200,
        "the other device stays"
    );

    // Charged like wrong tokens (10 at once, one earned back per 2 s): soon 429, even for a right
    // signature (the limit is checked first), and the address's challenges too.
    let c = challenge(port)["challenge"].as_str().unwrap().to_owned();
    let mut wrong = 0;
    let limited = loop {
        let r = mint_with(port, &id, &sk, "never-given");
        if r.status != 401 {
            break r;
        }
        wrong += 1;
        assert!(wrong <= 10, "still not limited after 8 failures and {wrong} more");
    };
    assert_eq!(limited.status, 429, "{}", limited.text());
    assert!(limited.header("retry-after").is_some());
    let r = mint_with(port, &old_id, &old_sk, &c);
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(call(port, "POST", "/api/pair/challenge", None, None).status, 429);
    assert_eq!(
        call(port, "GET", "/api/instances", Some(&old_access), None).status,
        200,
        "a live token still works"
    );
}
