//! Paired devices (issue 32): pairing by one-time code, each device its own credential
//! (accepted as Bearer, `?token=` and the WebSocket subprotocol), listing, renaming and
//! revoking (which closes the device's live connections), `token --rotate` closing what the
//! old token opened, the `watch` scope refused every change, the audit trail, and the CLI.

#![allow(clippy::unwrap_used)] // Setup helpers outside #[test] fns: a failed unwrap is a failed test.

use base64::Engine;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::time::{Duration, Instant};
use zcode_tests::hub::{AUTH, Hub, http, listed, run_cli, signal, wait_instances, wait_until};
use zcode_tests::{Bridge, Home, Peer, TEST_TOKEN, WAIT, demo_agent, initialize};

fn bearer(token: &str) -> (&'static str, String) {
    ("Authorization", format!("Bearer {token}"))
}

/// `method path` with `token` and a JSON `body`.
fn call(port: u16, method: &str, path: &str, token: &str, body: Option<Value>) -> zcode_tests::hub::Reply {
    let (k, v) = bearer(token);
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    http(port, method, path, &[(k, &v), ("Content-Type", "application/json")], body.as_bytes())
}

/// A pairing code from the hub (asked with the machine's token): its JSON.
fn new_code(port: u16, body: Value) -> Value {
    let r = call(port, "POST", "/api/pairing", TEST_TOKEN, Some(body));
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

/// Redeems `code` (no token): the reply.
fn redeem(port: u16, code: &str, name: &str) -> zcode_tests::hub::Reply {
    let body = json!({"code": code, "name": name}).to_string();
    http(port, "POST", "/api/pair", &[("Content-Type", "application/json")], body.as_bytes())
}

/// A device paired with `scope`: (id, token).
fn paired(port: u16, name: &str, scope: &str) -> (String, String) {
    let code = new_code(port, json!({"scope": scope}));
    let r = redeem(port, code["code"].as_str().unwrap(), name);
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    (v["deviceId"].as_str().unwrap().to_owned(), v["token"].as_str().unwrap().to_owned())
}

/// A WebSocket to instance `id` with `token` in the subprotocol (as a browser sends it).
fn ws_subprotocol(port: u16, id: &str, token: &str) -> Result<(), u16> {
    use tungstenite::client::IntoClientRequest;
    let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(token);
    let mut req = format!("ws://127.0.0.1:{port}/acp?instance={id}").into_client_request().unwrap();
    let offer = format!("zcode-acp, zcode-acp.token.{encoded}");
    req.headers_mut().insert("sec-websocket-protocol", offer.parse().unwrap());
    let stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    match tungstenite::client::client(req, stream) {
        Ok(_) => Ok(()),
        Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(resp))) => {
            Err(resp.status().as_u16())
        }
        Err(e) => panic!("websocket handshake failed: {e}"),
    }
}

/// A browser's `PushSubscription.toJSON()` for `endpoint` (a real P-256 key).
fn push_subscription(endpoint: &str) -> Value {
    use p256::elliptic_curve::sec1::ToEncodedPoint;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let secret = p256::SecretKey::from_slice(&[7u8; 32]).expect("a key");
    let public = secret.public_key().to_encoded_point(false).as_bytes().to_vec();
    json!({"endpoint": endpoint, "keys": {"p256dh": b64.encode(public), "auth": b64.encode([9u8; 16])}})
}

fn hub_and_bridge(home: &Home, hub_env: &[(&str, &str)]) -> (Hub, Bridge) {
    let hub = Hub::start(home, hub_env);
    let b = Bridge::start_env(home, &demo_agent(0), &[("ZCODE_ACP_HEARTBEAT_MS", "200")]);
    let id = b.id();
    wait_instances(hub.port, "the bridge to register", |l| listed(l, &id));
    (hub, b)
}

#[test]
fn a_one_time_code_pairs_a_device_whose_own_credential_works_every_way_the_token_does() {
    let home = Home::new();
    let (hub, b) = hub_and_bridge(&home, &[]);
    let code = new_code(hub.port, json!({"name": "phone"}));
    let (c, url) = (code["code"].as_str().unwrap(), code["url"].as_str().unwrap());
    assert!(url.ends_with(&format!("/#pair={c}")) && !url.contains(TEST_TOKEN), "{url}");
    let expires = code["expiresAt"].as_u64().unwrap();
    let now = zcode_shared::time::now_ms();
    assert!(expires > now && expires <= now + 5 * 60 * 1000 + 1000, "{code}");
    // Not without the token.
    assert_eq!(http(hub.port, "POST", "/api/pairing", &[], b"").status, 401);

    let r = redeem(hub.port, &c.to_lowercase(), "my phone");
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let (id, token) = (v["deviceId"].as_str().unwrap(), v["token"].as_str().unwrap());
    assert!(token.len() >= 43 && token != TEST_TOKEN, "{v}");
    // Once only, and a made-up code the same: 401 in words.
    for again in [c, "ABCDE-FGHJK"] {
        let r = redeem(hub.port, again, "thief");
        assert_eq!(r.status, 401, "{}", r.text());
        assert!(
            r.json()["error"].as_str().unwrap().contains("wrong, already used or expired"),
            "{}",
            r.text()
        );
    }
    assert_eq!(http(hub.port, "POST", "/api/pair", &[], b"{}").status, 400);

    // Bearer, ?token= and the subprotocol; the machine's token still works.
    assert_eq!(call(hub.port, "GET", "/api/instances", token, None).status, 200);
    assert_eq!(http(hub.port, "GET", &format!("/api/instances?token={token}"), &[], b"").status, 200);
    assert_eq!(ws_subprotocol(hub.port, &b.id(), token), Ok(()));
    assert_eq!(ws_subprotocol(hub.port, &b.id(), "not-a-device"), Err(401));
    let mut phone =
        Peer::connect_ws(hub.port, &format!("/acp?instance={}", b.id()), Some(token)).expect("relay");
    assert!(initialize(&mut phone, json!({}))["protocolVersion"].is_number());
    assert_eq!(http(hub.port, "GET", "/api/instances", &[AUTH], b"").status, 200);

    // Listed, and marked as the one asking; the credential is kept hashed only.
    let list = call(hub.port, "GET", "/api/devices", token, None).json();
    let d = &list["devices"][0];
    assert_eq!(
        (d["id"].as_str(), d["name"].as_str(), d["scope"].as_str()),
        (Some(id), Some("my phone"), Some("full"))
    );
    assert_eq!(d["current"], true, "{list}");
    assert!(d["createdAt"].is_u64() && d["lastSeenAt"].is_u64(), "{list}");
    let store = std::fs::read(home.path().join("data").join("zcode-acp.sqlite3")).unwrap_or_default();
    let wal = std::fs::read(home.path().join("data").join("zcode-acp.sqlite3-wal")).unwrap_or_default();
    for bytes in [store, wal] {
        assert!(
            !bytes.windows(token.len()).any(|w| w == token.as_bytes()),
            "the device token is stored in clear"
        );
    }
}

#[test]
fn wrong_codes_are_rate_limited_before_they_are_checked_and_a_code_expires() {
    let home = Home::new();
    let hub = Hub::start(&home, &[("ZCODE_ACP_TEST_PAIRING_CODE_MS", "1500")]);
    let code = new_code(hub.port, json!({}));
    let c = code["code"].as_str().unwrap();
    let mut statuses = Vec::new();
    for _ in 0..12 {
        statuses.push(redeem(hub.port, "00000-00000", "guess").status);
    }
    assert_eq!(&statuses[..10], &[401; 10], "{statuses:?}");
    assert_eq!(&statuses[10..], &[429; 2], "{statuses:?}");
    // Over the limit, even the right code is not looked at: guessing learns nothing.
    let r = redeem(hub.port, c, "phone");
    assert_eq!(r.status, 429, "{}", r.text());
    assert!(r.header("retry-after").is_some());

    // From another address (127.0.0.2 counts apart), once the code's life is over: refused.
    let fresh = new_code(hub.port, json!({}));
    wait_until("the code to expire", || zcode_shared::time::now_ms() > fresh["expiresAt"].as_u64().unwrap());
    let body = json!({"code": fresh["code"], "name": "late"}).to_string();
    let mut s = zcode_tests::net::connect_from("127.0.0.2".parse().unwrap(), hub.port).expect("connect");
    let req = format!(
        "POST /api/pair HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let r = zcode_tests::hub::parse_reply(&raw);
    assert_eq!(r.status, 401, "an expired code: {}", r.text());
}

#[test]
fn a_revoked_device_is_refused_and_its_live_connections_close_at_once() {
    let home = Home::new();
    let (hub, b) = hub_and_bridge(&home, &[]);
    let (lost, lost_token) = paired(hub.port, "lost phone", "full");
    let (kept, kept_token) = paired(hub.port, "laptop", "watch");

    // Renamed through the API.
    let r = call(
        hub.port,
        "PATCH",
        &format!("/api/devices/{kept}"),
        TEST_TOKEN,
        Some(json!({"name": "work laptop"})),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let names: Vec<String> = call(hub.port, "GET", "/api/devices", TEST_TOKEN, None).json()["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["lost phone", "work laptop"]);

    // The lost phone holds a relayed session and a kept-alive API connection.
    let path = format!("/acp?instance={}", b.id());
    let mut ws = Peer::connect_ws(hub.port, &path, Some(&lost_token)).expect("relay");
    assert!(initialize(&mut ws, json!({}))["protocolVersion"].is_number());
    let mut kept_ws = Peer::connect_ws(hub.port, &path, Some(&kept_token)).expect("relay");
    let mut api = std::net::TcpStream::connect(("127.0.0.1", hub.port)).unwrap();
    let req = format!("GET /api/version HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {lost_token}\r\n\r\n");
    api.write_all(req.as_bytes()).unwrap();
    api.set_read_timeout(Some(WAIT)).unwrap();
    let mut first = [0u8; 12];
    api.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");

    // And a push subscription of its own.
    let endpoint = "https://push.example/lost-phone";
    let r = call(hub.port, "POST", "/api/push/subscriptions", &lost_token, Some(push_subscription(endpoint)));
    assert_eq!(r.status, 201, "{}", r.text());
    let subs = home.path().join("data").join("push").join("subscriptions.json");
    assert!(std::fs::read_to_string(&subs).unwrap().contains(endpoint));

    let r = call(hub.port, "DELETE", &format!("/api/devices/{lost}"), TEST_TOKEN, None);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(!std::fs::read_to_string(&subs).unwrap().contains(endpoint), "its push subscription is removed");
    let t0 = Instant::now();
    assert_eq!(ws.wait_closed(WAIT), Some(1008), "the relay is closed with 1008");
    let mut rest = Vec::new();
    let _ = api.read_to_end(&mut rest); // ends (EOF) once the hub closes it
    let closed_in = t0.elapsed();
    assert!(
        kept_ws.quiet_for(Duration::from_millis(100)).is_none() && kept_ws.closed.is_none(),
        "another device's relay stays"
    );
    eprintln!("the revoked device's connections closed {closed_in:?} after the revoke");
    assert_eq!(call(hub.port, "GET", "/api/instances", &lost_token, None).status, 401);
    assert_eq!(Peer::connect_ws(hub.port, &path, Some(&lost_token)).err(), Some(401));
    assert_eq!(call(hub.port, "DELETE", &format!("/api/devices/{lost}"), TEST_TOKEN, None).status, 404);
    assert_eq!(
        call(hub.port, "PATCH", "/api/devices/nope", TEST_TOKEN, Some(json!({"name": "x"}))).status,
        404
    );
    assert_eq!(call(hub.port, "GET", "/api/instances", &kept_token, None).status, 200);
}

/// Before: a WebSocket opened with the old token still ran `session/load` 30 s after
/// `token --rotate`.
#[test]
fn token_rotate_closes_the_connections_the_old_token_opened() {
    let home = Home::new();
    let env = [
        ("ZCODE_ACP_REMOTE_TOKEN", ""),
        ("ZCODE_ACP_INSTANCE_TTL_MS", "2000"),
        ("ZCODE_ACP_HEARTBEAT_MS", "300"),
    ];
    let hub = Hub::start(&home, &env);
    let mut cmd = home.command(&["bridge", "--", &demo_agent(0)[0], "demo-agent", "--delay-ms", "0"]);
    cmd.env("ZCODE_ACP_REMOTE_PORT", "0")
        .env("ZCODE_ACP_HEARTBEAT_MS", "300")
        .env("ZCODE_ACP_INSTANCE_TTL_MS", "2000");
    let bridge = Bridge::spawn(&home, cmd, std::process::Stdio::inherit());
    let old = std::fs::read_to_string(home.path().join("token")).unwrap().trim().to_owned();
    let id = bridge.editor.pid().to_string();
    wait_until("the bridge listed", || {
        let r = call(hub.port, "GET", "/api/instances", &old, None);
        r.status == 200 && r.json().as_array().is_some_and(|l| l.iter().any(|i| i["id"] == id.as_str()))
    });
    let path = format!("/acp?instance={id}");
    let rotate = || {
        let out = home.command(&["token", "--rotate"]).output().expect("token --rotate");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let mut old_ws = Peer::connect_ws(hub.port, &path, Some(&old)).expect("relay");
    assert!(initialize(&mut old_ws, json!({}))["protocolVersion"].is_number());
    let new = rotate();
    assert_eq!(old_ws.wait_closed(WAIT), Some(1008), "the old token's relay is closed");
    assert_eq!(call(hub.port, "GET", "/api/instances", &old, None).status, 401);

    // A device's own credential is not the machine's token: its relay outlives a rotation.
    let code = call(hub.port, "POST", "/api/pairing", &new, Some(json!({}))).json()["code"].clone();
    let device_token =
        redeem(hub.port, code.as_str().unwrap(), "phone").json()["token"].as_str().unwrap().to_owned();
    let mut device_ws = Peer::connect_ws(hub.port, &path, Some(&device_token)).expect("relay");
    assert!(initialize(&mut device_ws, json!({}))["protocolVersion"].is_number());
    let mut second_ws = Peer::connect_ws(hub.port, &path, Some(&new)).expect("relay with the new token");
    assert!(initialize(&mut second_ws, json!({}))["protocolVersion"].is_number());
    let newest = rotate();
    assert_eq!(second_ws.wait_closed(WAIT), Some(1008), "the second token's relay is closed");
    assert!(device_ws.quiet_for(Duration::from_millis(100)).is_none() && device_ws.closed.is_none());
    let (r, _) = device_ws.call("session/list", json!({}));
    assert!(r["result"].is_object() || r["error"].is_object(), "the device's relay still answers: {r}");
    let mut fresh = Peer::connect_ws(hub.port, &path, Some(&newest)).expect("relay with the newest token");
    assert!(initialize(&mut fresh, json!({}))["protocolVersion"].is_number());
}

#[test]
fn a_watch_device_reads_but_every_change_is_refused_and_the_audit_trail_records_it() {
    let home = Home::new();
    let hub = Hub::start(&home, &[]);
    let (watch, watch_token) = paired(hub.port, "tv", "watch");
    assert_eq!(call(hub.port, "GET", "/api/instances", &watch_token, None).status, 200);
    assert_eq!(call(hub.port, "GET", "/api/devices", &watch_token, None).status, 200);
    let changes: &[(&str, &str, Value)] = &[
        ("POST", "/api/instances", json!({"workspacePath": "/tmp"})),
        ("POST", "/api/instances/1/sessions/s/close", json!({})),
        ("POST", "/api/instances/1/sessions/s/rename", json!({"title": "x"})),
        ("POST", "/api/instances/1/sessions/s/delete", json!({})),
        ("POST", "/api/projects/delete", json!({"workspacePath": "/tmp"})),
        ("PUT", "/api/settings/mcp/x", json!({"command": "x"})),
        ("POST", "/api/instances/1/backend/restart", json!({})),
        ("POST", "/api/upgrade", json!({})),
        ("POST", "/api/pairing", json!({})),
        ("DELETE", &format!("/api/devices/{watch}"), json!({})),
    ];
    for (method, path, body) in changes {
        let r = call(hub.port, method, path, &watch_token, Some(body.clone()));
        assert_eq!(r.status, 403, "{method} {path}: {}", r.text());
        assert_eq!(r.json()["error"], "this device can only watch", "{method} {path}");
    }
    // Still paired (its own revoke was refused).
    assert_eq!(
        call(hub.port, "GET", "/api/devices", TEST_TOKEN, None).json()["devices"][0]["id"],
        watch.as_str()
    );
    let r = call(hub.port, "DELETE", &format!("/api/devices/{watch}"), TEST_TOKEN, None);
    assert_eq!(r.status, 200);

    let trail = call(hub.port, "GET", "/api/audit", TEST_TOKEN, None);
    assert_eq!(trail.status, 200, "{}", trail.text());
    let entries = trail.json()["entries"].as_array().cloned().unwrap();
    let seen = |action: &str, device: &str, status: u64| {
        entries.iter().any(|e| {
            e["action"] == action && e["deviceId"] == device && e["status"] == status && e["at"].is_u64()
        })
    };
    assert!(seen("pairing.code", "machine", 200), "{entries:#?}");
    assert!(seen("pair", &watch, 200), "{entries:#?}");
    assert!(seen("settings.write", &watch, 403), "{entries:#?}");
    assert!(seen("session.close", &watch, 403), "{entries:#?}");
    assert!(seen("hub.upgrade", &watch, 403), "{entries:#?}");
    assert!(seen("device.revoke", "machine", 200), "{entries:#?}");
    let revoke = entries.iter().find(|e| e["action"] == "device.revoke" && e["status"] == 200).unwrap();
    assert_eq!(revoke["target"], format!("device {watch}"));
    assert_eq!(entries[0]["action"], "device.revoke", "newest first");
    let page = call(hub.port, "GET", "/api/audit?limit=1", TEST_TOKEN, None).json();
    assert_eq!(page["entries"].as_array().unwrap().len(), 1);
    assert_eq!(call(hub.port, "GET", "/api/audit?limit=x", TEST_TOKEN, None).status, 400);
}

#[test]
fn pair_and_devices_on_the_command_line() {
    let home = Home::new();
    let hub = Hub::start(&home, &[]);
    let env = [("ZCODE_ACP_REMOTE_TOKEN", TEST_TOKEN)];
    let out = home
        .command(&["pair", "--watch", "--name", "kitchen tablet"])
        .env("ZCODE_ACP_REMOTE_TOKEN", TEST_TOKEN)
        .output()
        .expect("pair");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}{stderr}");
    let url = stdout.trim();
    let code =
        url.split_once("/#pair=").map(|(_, c)| c).unwrap_or_else(|| panic!("no pairing URL: {stdout}"));
    assert!(url.starts_with(&format!("http://127.0.0.1:{}/", hub.port)), "{url}");
    assert!(!stdout.contains(TEST_TOKEN) && !stderr.contains(TEST_TOKEN), "the token is printed");
    assert!(stderr.contains('█'), "a QR code: {stderr}");
    let v = redeem(hub.port, code, "").json();
    assert!(v["error"].is_string(), "an empty name is refused: {v}");
    let r = http(hub.port, "POST", "/api/pair", &[], json!({"code": code}).to_string().as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    let id = r.json()["deviceId"].as_str().unwrap().to_owned();

    let list = home.command(&["devices"]).env("ZCODE_ACP_REMOTE_TOKEN", TEST_TOKEN).output().unwrap();
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(
        list.status.success()
            && text.contains(&id)
            && text.contains("kitchen tablet")
            && text.contains("watch"),
        "{text}"
    );
    let (code, err) = run_cli(&home, &["devices", "rename", &id, "hall tablet"], &env);
    assert_eq!(code, 0, "{err}");
    let (code, err) = run_cli(&home, &["devices", "revoke", &id], &env);
    assert_eq!(code, 0, "{err}");
    let (code, err) = run_cli(&home, &["devices", "revoke", &id], &env);
    assert_eq!(code, 1);
    assert!(err.contains("404") && err.contains("no such device"), "{err}");
    let devices = call(hub.port, "GET", "/api/devices", TEST_TOKEN, None).json();
    assert_eq!(devices["devices"], json!([]), "{devices}");
}

/// The whole way: a `watch` device's WebSocket through the hub's relay loads and follows a
/// session, and the bridge (told the scope by the hub's dial) refuses its prompt; a `full`
/// device's prompt on the same session runs. A client's own `X-Zcode-Scope: full` changes
/// nothing: the hub sets the header itself.
#[test]
fn a_watch_device_through_the_hubs_relay_cannot_prompt_and_a_full_one_can() {
    let home = Home::new();
    let (hub, b) = hub_and_bridge(&home, &[]);
    let id = b.id();
    let (_, watch_token) = paired(hub.port, "tv", "watch");
    let (_, full_token) = paired(hub.port, "phone", "full");
    let path = format!("/acp?instance={id}");
    let (wh, fh) = (bearer(&watch_token), bearer(&full_token));
    let mut full =
        Peer::connect_ws_with(hub.port, &path, &[(wh.0, &fh.1)]).expect("the full device connects");
    initialize(&mut full, json!({}));
    let sid = zcode_tests::new_session(&mut full, home.path());
    let mut watch = Peer::connect_ws_with(hub.port, &path, &[(wh.0, &wh.1), ("X-Zcode-Scope", "full")])
        .expect("the watch device connects");
    initialize(&mut watch, json!({}));
    let (r, _) = watch.call("session/load", json!({"sessionId": sid, "cwd": home.path(), "mcpServers": []}));
    assert!(r["result"].is_object(), "a watcher loads: {r}");

    let (r, seen) = watch.call("session/prompt", zcode_tests::prompt(&sid, "from the watcher"));
    assert_eq!(r["error"]["code"], -32003, "the watcher's prompt ran: {r}");
    assert!(r["error"]["message"].as_str().unwrap_or_default().contains("can only watch"), "{r}");
    assert!(seen.is_empty(), "the watcher's prompt had an effect: {seen:?}");

    let (r, _) = full.call("session/prompt", zcode_tests::prompt(&sid, "from the phone"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    // The watcher follows the full device's turn.
    watch.until("the full device's turn on the watcher", |m| {
        m["method"] == "session/update" && m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    });
}

/// Prompts and permission answers travel inside the byte-level relay: the bridge, told by the
/// hub's dial whose connection it is, records them in the same trail, naming the device.
#[test]
fn a_devices_prompts_and_permission_answers_are_in_the_audit_trail() {
    let home = Home::new();
    let (hub, mut b) = hub_and_bridge(&home, &[]);
    let id = b.id();
    let (phone, phone_token) = paired(hub.port, "my phone", "full");
    let auth = bearer(&phone_token);
    let mut p = Peer::connect_ws_with(hub.port, &format!("/acp?instance={id}"), &[(auth.0, &auth.1)])
        .expect("the phone connects");
    initialize(&mut p, json!({}));
    initialize(&mut b.editor, json!({}));
    let sid = zcode_tests::new_session(&mut p, home.path());
    let turn = p.request("session/prompt", zcode_tests::prompt(&sid, "permission"));
    let (req, _) = p.until("the permission on the phone", |m| m["method"] == "session/request_permission");
    p.send(&json!({"jsonrpc": "2.0", "id": req["id"],
        "result": {"outcome": {"outcome": "selected", "optionId": "allow"}}}));
    let (r, _) = p.response_to(&turn);
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    // The editor's own prompt is recorded as the editor's.
    let (r, _) = b.editor.call("session/prompt", zcode_tests::prompt(&sid, "hello"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");

    let target = format!("session {sid}");
    let entries = || -> Vec<Value> {
        let trail = call(hub.port, "GET", "/api/audit", TEST_TOKEN, None);
        assert_eq!(trail.status, 200, "{}", trail.text());
        trail.json()["entries"].as_array().cloned().unwrap_or_default()
    };
    let has = |e: &[Value], action: &str, device: &str, name: &str, target: &str| {
        e.iter().any(|x| {
            x["action"] == action
                && x["deviceId"] == device
                && x["deviceName"] == name
                && x["target"] == target
        })
    };
    wait_until("the phone's prompt, its answer and the editor's prompt in the audit trail", || {
        let e = entries();
        has(&e, "prompt", &phone, "my phone", &target)
            && has(&e, "permission.answer", &phone, "my phone", &format!("{target}: allow"))
            && has(&e, "prompt", "editor", "editor", &target)
    });
}

/// The idle rule: a hub with a paired device does not exit idle (the device reaches this port,
/// maybe through a tunnel `up` did not start, and a port let go is another user's to take),
/// even a hub started after the pairing that no device has spoken to; once the last device is
/// revoked it exits idle as before.
#[test]
fn a_hub_with_a_paired_device_does_not_exit_idle_and_exits_once_none_is_left() {
    const IDLE_MS: u64 = 400;
    let home = Home::new();
    let idle = [("ZCODE_ACP_HUB_IDLE_MS", IDLE_MS.to_string())];
    let idle: Vec<(&str, &str)> = idle.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut first = Hub::start(&home, &idle);
    let (phone, _) = paired(first.port, "phone", "full");
    // A hub started later, which no device has spoken to yet, knows from the store.
    signal(first.pid(), "TERM");
    assert!(first.wait_exit(WAIT).is_some(), "the first hub did not stop");
    let mut hub = Hub::start(&home, &idle);
    // Well past its idle limit, it still answers.
    let since = Instant::now();
    while since.elapsed() < Duration::from_millis(IDLE_MS * 5 / 2) {
        assert_eq!(
            hub.wait_exit(Duration::from_millis(50)),
            None,
            "the hub exited idle with a device paired"
        );
        assert_eq!(call(hub.port, "GET", "/api/health", TEST_TOKEN, None).status, 200);
    }
    assert_eq!(call(hub.port, "DELETE", &format!("/api/devices/{phone}"), TEST_TOKEN, None).status, 200);
    assert!(hub.wait_exit(WAIT).is_some(), "the hub did not exit idle once no device was left");
    assert!(hub.log().contains("no instances, relays, tunnel or paired device: exiting"), "{}", hub.log());
}
