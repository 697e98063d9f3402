//! Web Push end to end: a real hub, fake bridges' heartbeats, and a push service played by
//! the test on loopback http. The test is also the browser: it makes the subscription's key
//! pair and auth secret, checks the VAPID token (ES256 with the `k=` key, `aud`, `exp`, `sub`)
//! and decrypts every push per RFC 8291.

use aes_gcm::aead::Aead;
use aes_gcm::{Aes128Gcm, KeyInit, Nonce};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use hkdf::Hkdf;
use p256::ecdsa::signature::Verifier;
use p256::ecdsa::{Signature, VerifyingKey};
use p256::elliptic_curve::sec1::ToEncodedPoint;
use p256::{PublicKey, SecretKey};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use zcode_tests::hub::{AUTH, Hub, Reply, http, post_json};
use zcode_tests::{Home, TEST_TOKEN, WAIT};

/// One request the push service received.
#[derive(Debug)]
struct Pushed {
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Pushed {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// A push service on 127.0.0.1: `/ok/…` answers 201, `/gone/…` 410, and `/hang/…` never
/// answers, holding the connection until [`PushService::release`] (noting whether the hub
/// closed it first).
struct PushService {
    port: u16,
    received: Receiver<Pushed>,
    release: Arc<AtomicBool>,
    /// Whether the hub gave up on a held connection (closed it) before the release.
    hub_closed: Arc<AtomicBool>,
}

impl PushService {
    fn start() -> PushService {
        let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let (tx, received) = channel();
        let release = Arc::new(AtomicBool::new(false));
        let hub_closed = Arc::new(AtomicBool::new(false));
        let (r, c) = (release.clone(), hub_closed.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let (tx, r, c) = (tx.clone(), r.clone(), c.clone());
                std::thread::spawn(move || serve(conn, &tx, &r, &c));
            }
        });
        PushService { port, received, release, hub_closed }
    }

    fn endpoint(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// The next push, within [`WAIT`].
    fn next(&self, what: &str) -> Pushed {
        self.received.recv_timeout(WAIT).unwrap_or_else(|_| panic!("no push arrived: {what}"))
    }
}

impl Drop for PushService {
    fn drop(&mut self) {
        self.release.store(true, Ordering::SeqCst);
    }
}

fn serve(mut s: TcpStream, tx: &Sender<Pushed>, release: &AtomicBool, hub_closed: &AtomicBool) {
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    let split = loop {
        if let Some(at) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
    };
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.lines();
    let path = lines.next().and_then(|l| l.split_whitespace().nth(1)).unwrap_or_default().to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let len: usize =
        headers.iter().find(|(k, _)| k == "content-length").and_then(|(_, v)| v.parse().ok()).unwrap_or(0);
    let mut body = raw[split + 4..].to_vec();
    while body.len() < len {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => body.extend_from_slice(&buf[..n]),
        }
    }
    let status = match path.split('/').nth(1) {
        Some("ok") => "201 Created",
        Some("gone") => "410 Gone",
        _ => "",
    };
    let _ = tx.send(Pushed { path, headers, body });
    if status.is_empty() {
        // Hold the connection: never answer; notice when the hub hangs up.
        let _ = s.set_read_timeout(Some(Duration::from_millis(20)));
        while !release.load(Ordering::SeqCst) {
            match s.read(&mut buf) {
                Ok(0) => {
                    hub_closed.store(true, Ordering::SeqCst);
                    return;
                }
                Ok(_) => {}
                Err(e)
                    if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                Err(_) => {
                    hub_closed.store(true, Ordering::SeqCst);
                    return;
                }
            }
        }
        return;
    }
    let _ = s
        .write_all(format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").as_bytes());
}

/// A browser's side of a subscription: its ECDH key pair and auth secret.
struct Browser {
    secret: SecretKey,
    auth: [u8; 16],
}

impl Browser {
    fn new(seed: &str) -> Browser {
        let secret = (0u32..)
            .find_map(|n| SecretKey::from_slice(&Sha256::digest(format!("{seed}-{n}").as_bytes())).ok())
            .expect("a key");
        let auth: [u8; 16] =
            Sha256::digest(format!("auth-{seed}").as_bytes())[..16].try_into().expect("16 bytes");
        Browser { secret, auth }
    }

    fn public(&self) -> Vec<u8> {
        self.secret.public_key().to_encoded_point(false).as_bytes().to_vec()
    }

    /// `PushSubscription.toJSON()` for `endpoint`.
    fn subscription(&self, endpoint: &str) -> Value {
        json!({"endpoint": endpoint, "expirationTime": null,
               "keys": {"p256dh": B64.encode(self.public()), "auth": B64.encode(self.auth)}})
    }

    /// Decrypts an `aes128gcm` push body (RFC 8291 §3.4, RFC 8188): the payload as JSON.
    fn decrypt(&self, body: &[u8]) -> Value {
        assert!(body.len() > 86, "a body shorter than its header: {} bytes", body.len());
        let (salt, rs, idlen) =
            (&body[..16], u32::from_be_bytes(body[16..20].try_into().expect("4 bytes")), body[20]);
        assert_eq!((rs, idlen), (4096, 65), "record size and key id length");
        let as_public = &body[21..86];
        let sealed = &body[86..];
        assert!(sealed.len() <= rs as usize, "one record");
        let sender = PublicKey::from_sec1_bytes(as_public).expect("the sender's key is a P-256 point");
        let shared = p256::ecdh::diffie_hellman(self.secret.to_nonzero_scalar(), sender.as_affine());
        let mut info = b"WebPush: info\0".to_vec();
        info.extend_from_slice(&self.public());
        info.extend_from_slice(as_public);
        let mut ikm = [0u8; 32];
        Hkdf::<Sha256>::new(Some(&self.auth), shared.raw_secret_bytes())
            .expand(&info, &mut ikm)
            .expect("IKM");
        let prk = Hkdf::<Sha256>::new(Some(salt), &ikm);
        let (mut cek, mut nonce) = ([0u8; 16], [0u8; 12]);
        prk.expand(b"Content-Encoding: aes128gcm\0", &mut cek).expect("CEK");
        prk.expand(b"Content-Encoding: nonce\0", &mut nonce).expect("nonce");
        let plain = Aes128Gcm::new_from_slice(&cek)
            .expect("a 16-byte key")
            .decrypt(Nonce::from_slice(&nonce), sealed)
            .expect("the record decrypts with the subscription's keys");
        // Padding is zeros after the delimiter; the last record's delimiter is 0x02.
        let end = plain.iter().rposition(|b| *b != 0).expect("a delimiter");
        assert_eq!(plain[end], 2, "the last record's delimiter");
        serde_json::from_slice(&plain[..end]).expect("a JSON payload")
    }
}

/// Checks the VAPID `Authorization` of a push to the service at `origin`: signed with the key
/// `k=` names (which must be `public_key`), for that audience, expiring within 24 h.
fn check_vapid(p: &Pushed, origin: &str, public_key: &str) {
    let auth = p.header("authorization").expect("an Authorization header");
    let rest = auth.strip_prefix("vapid ").unwrap_or_else(|| panic!("not a vapid scheme: {auth}"));
    let mut t = None;
    let mut k = None;
    for part in rest.split(',').map(str::trim) {
        match part.split_once('=') {
            Some(("t", v)) => t = Some(v),
            Some(("k", v)) => k = Some(v),
            _ => {}
        }
    }
    let (t, k) = (t.expect("t="), k.expect("k="));
    assert_eq!(k, public_key, "k= is the hub's published key");
    let (signed, sig) = t.rsplit_once('.').expect("a JWS");
    let key = VerifyingKey::from_sec1_bytes(&B64.decode(k).expect("base64url key")).expect("a P-256 key");
    let sig = Signature::from_slice(&B64.decode(sig).expect("base64url signature")).expect("r || s");
    key.verify(signed.as_bytes(), &sig).expect("the ES256 signature verifies with k=");
    let (head, claims) = signed.split_once('.').expect("header.claims");
    let json = |part: &str| -> Value {
        serde_json::from_slice(&B64.decode(part).expect("base64url")).expect("a JSON part")
    };
    let (head, claims) = (json(head), json(claims));
    assert_eq!(head["alg"], "ES256");
    assert_eq!(claims["aud"], origin);
    let now = SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_secs();
    let exp = claims["exp"].as_u64().expect("exp");
    assert!(exp > now && exp <= now + 24 * 3600, "exp {exp} now {now}");
    let sub = claims["sub"].as_str().expect("sub");
    assert!(sub.starts_with("mailto:") || sub.starts_with("https://"), "{sub}");
}

fn send(port: u16, method: &str, path: &str, body: &Value) -> Reply {
    http(port, method, path, &[AUTH, ("Content-Type", "application/json")], body.to_string().as_bytes())
}

/// A fake bridge's heartbeat: instance 4242 in /w/proj with these sessions.
fn heartbeat(port: u16, sessions: Value) {
    let body = json!({"token": TEST_TOKEN, "id": "4242", "port": 9, "pid": 4242, "workspace": "/w/proj",
                      "origin": "editor", "sessions": sessions});
    let r = post_json(port, "/api/register", &body);
    assert_eq!(r.status, 200, "{}", r.text());
}

fn session(id: &str, status: &str) -> Value {
    json!({"sessionId": id, "title": "Fix login", "status": status, "updatedAt": 1})
}

fn vapid_key(hub: &Hub) -> String {
    let r = http(hub.port, "GET", "/api/push/vapid-public-key", &[AUTH], b"");
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["publicKey"].as_str().expect("publicKey").to_owned()
}

/// Waits until `pred` holds for the stored subscriptions file (its endpoints).
fn wait_stored(home: &Home, what: &str, pred: impl Fn(&[String]) -> bool) {
    let file = home.path().join("data/push/subscriptions.json");
    let deadline = Instant::now() + WAIT;
    loop {
        let stored: Vec<String> = std::fs::read(&file)
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .and_then(|v| v["subscriptions"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|s| s["endpoint"].as_str().map(str::to_owned))
            .collect();
        if pred(&stored) {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}: {stored:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_waiting_session_and_a_turn_end_are_pushed_encrypted_and_signed() {
    let home = Home::new();
    let hub = Hub::start(&home, &[]);
    let service = PushService::start();
    assert_eq!(http(hub.port, "GET", "/api/push/vapid-public-key", &[], b"").status, 401, "token-gated");
    let key = vapid_key(&hub);
    assert_eq!(B64.decode(&key).expect("base64url").len(), 65, "an uncompressed P-256 point");
    let vapid_file = home.path().join("data/push/vapid.json");
    assert_eq!(std::fs::metadata(&vapid_file).expect("the key file").permissions().mode() & 0o777, 0o600);

    let (phone, laptop) = (Browser::new("phone"), Browser::new("laptop"));
    let mut sub = phone.subscription(&service.endpoint("/ok/phone"));
    sub["notifyTurnEnd"] = json!(true);
    let r = send(hub.port, "POST", "/api/push/subscriptions", &sub);
    assert_eq!((r.status, r.json()["notifyTurnEnd"].clone()), (201, json!(true)), "{}", r.text());
    assert_eq!(send(hub.port, "POST", "/api/push/subscriptions", &sub).status, 200, "the same device again");
    let r = send(
        hub.port,
        "POST",
        "/api/push/subscriptions",
        &laptop.subscription(&service.endpoint("/ok/laptop")),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let subs_file = home.path().join("data/push/subscriptions.json");
    assert_eq!(std::fs::metadata(&subs_file).expect("stored").permissions().mode() & 0o777, 0o600);

    // Running: nothing. Waiting: both devices, urgently.
    heartbeat(hub.port, json!([session("s1", "running")]));
    heartbeat(hub.port, json!([session("s1", "waiting")]));
    let origin = format!("http://127.0.0.1:{}", service.port);
    let mut waits: Vec<Pushed> = vec![service.next("the wait, 1 of 2"), service.next("the wait, 2 of 2")];
    waits.sort_by(|a, b| a.path.cmp(&b.path));
    assert_eq!(waits.iter().map(|p| p.path.as_str()).collect::<Vec<_>>(), ["/ok/laptop", "/ok/phone"]);
    for (p, browser) in waits.iter().zip([&laptop, &phone]) {
        check_vapid(p, &origin, &key);
        assert_eq!(p.header("content-encoding"), Some("aes128gcm"));
        assert_eq!(p.header("urgency"), Some("high"));
        assert_eq!(p.header("ttl"), Some("600"));
        assert!(p.header("topic").is_some_and(|t| t.len() <= 32), "{:?}", p.header("topic"));
        let payload = browser.decrypt(&p.body);
        assert_eq!(payload["title"], "Waiting for you");
        assert_eq!(payload["url"], "/s/4242/s1?cwd=%2Fw%2Fproj");
        assert_eq!(payload["tag"], "session:s1");
        assert!(payload["body"].as_str().unwrap().contains("Fix login"), "{payload}");
    }
    // The listing keeps the contract's two statuses.
    let list = http(hub.port, "GET", "/api/instances", &[AUTH], b"").json();
    assert_eq!(list[0]["sessions"][0]["status"], "running");

    // The same wait heard again is not pushed again; the turn's end goes to the phone only,
    // the laptop's notification of the wait is withdrawn (closed) under the same tag.
    heartbeat(hub.port, json!([session("s1", "waiting")]));
    heartbeat(hub.port, json!([session("s1", "idle")]));
    let mut ends = [service.next("the turn's end"), service.next("the wait's withdrawal")];
    ends.sort_by(|a, b| a.path.cmp(&b.path));
    let (gone, end) = (&ends[0], &ends[1]);
    assert_eq!(end.path, "/ok/phone", "only the device that asked hears of turn ends");
    assert_eq!(end.header("urgency"), Some("normal"));
    let payload = phone.decrypt(&end.body);
    assert_eq!(
        (payload["title"].clone(), payload["tag"].clone()),
        (json!("Turn finished"), json!("session:s1"))
    );
    let payload = laptop.decrypt(&gone.body);
    assert_eq!((payload["kind"].clone(), payload["tag"].clone()), (json!("withdraw"), json!("session:s1")));
    // A later wait reaches both again, and nothing else was sent meanwhile.
    heartbeat(hub.port, json!([session("s1", "waiting")]));
    let mut next: Vec<String> = (0..2).map(|i| service.next(&format!("the second wait {i}")).path).collect();
    next.sort();
    assert_eq!(next, ["/ok/laptop", "/ok/phone"], "no repeated wait, nothing else for the laptop");
    assert!(!hub.log().contains("/ok/phone"), "the endpoint (a capability) is not logged");
}

#[test]
fn bad_subscriptions_are_400_with_a_reason_and_delete_forgets() {
    let home = Home::new();
    let hub = Hub::start(&home, &[]);
    let b = Browser::new("b");
    let good = b.subscription("https://push.example.net/x");
    let mut bad_flag = good.clone();
    bad_flag["notifyTurnEnd"] = json!("yes");
    for (body, want) in [
        (json!([1]), "JSON object"),
        (json!({"keys": good["keys"]}), "endpoint"),
        (b.subscription("http://push.example.net/x"), "https://"),
        (json!({"endpoint": "https://push.example.net/x"}), "keys"),
        (
            json!({"endpoint": "https://h/x", "keys": {"p256dh": "AAAA", "auth": good["keys"]["auth"]}}),
            "p256dh",
        ),
        (
            json!({"endpoint": "https://h/x", "keys": {"p256dh": good["keys"]["p256dh"], "auth": "AA"}}),
            "auth",
        ),
        (bad_flag, "notifyTurnEnd"),
    ] {
        let r = send(hub.port, "POST", "/api/push/subscriptions", &body);
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        assert!(r.text().contains(want), "{body}: {}", r.text());
    }
    let r = http(hub.port, "POST", "/api/push/subscriptions", &[AUTH], b"{not json");
    assert_eq!(r.status, 400);
    let unauth = http(hub.port, "POST", "/api/push/subscriptions", &[], good.to_string().as_bytes());
    assert_eq!(unauth.status, 401);

    assert_eq!(send(hub.port, "POST", "/api/push/subscriptions", &good).status, 201);
    wait_stored(&home, "the subscription", |s| s == ["https://push.example.net/x"]);
    assert_eq!(send(hub.port, "DELETE", "/api/push/subscriptions", &json!({})).status, 400);
    let gone = json!({"endpoint": "https://push.example.net/x"});
    assert_eq!(
        http(hub.port, "DELETE", "/api/push/subscriptions", &[], gone.to_string().as_bytes()).status,
        401
    );
    let r = send(hub.port, "DELETE", "/api/push/subscriptions", &gone);
    assert_eq!((r.status, r.json()), (200, json!({"ok": true, "removed": true})));
    let r = send(hub.port, "DELETE", "/api/push/subscriptions", &gone);
    assert_eq!((r.status, r.json()), (200, json!({"ok": true, "removed": false})));
    wait_stored(&home, "no subscription", <[String]>::is_empty);
}

#[test]
fn a_subscription_the_push_service_calls_gone_is_forgotten() {
    let home = Home::new();
    let hub = Hub::start(&home, &[]);
    let service = PushService::start();
    let (old, kept) = (service.endpoint("/gone/old"), service.endpoint("/ok/kept"));
    for (who, endpoint) in [("old", &old), ("kept", &kept)] {
        let r = send(hub.port, "POST", "/api/push/subscriptions", &Browser::new(who).subscription(endpoint));
        assert_eq!(r.status, 201, "{}", r.text());
    }
    heartbeat(hub.port, json!([session("s1", "waiting")]));
    let mut paths: Vec<String> = (0..2).map(|i| service.next(&format!("push {i}")).path).collect();
    paths.sort();
    assert_eq!(paths, ["/gone/old", "/ok/kept"]);
    wait_stored(&home, "the 410'd subscription to go", |s| s == [kept.clone()]);
}

#[test]
fn a_push_service_that_never_answers_delays_no_heartbeat() {
    let home = Home::new();
    let hub = Hub::start(&home, &[]);
    let service = PushService::start();
    let r = send(
        hub.port,
        "POST",
        "/api/push/subscriptions",
        &Browser::new("slow").subscription(&service.endpoint("/hang/x")),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    heartbeat(hub.port, json!([session("s1", "waiting")]));
    let held = service.next("the push the service sits on");
    assert_eq!(held.path, "/hang/x");
    // While the service holds that connection, heartbeats (each implying another push) and
    // the listing are answered; the hub has not even given up on the held push yet.
    for (i, status) in ["idle", "waiting", "idle"].into_iter().enumerate() {
        heartbeat(hub.port, json!([session("s1", status), session(&format!("t{i}"), "waiting")]));
    }
    assert_eq!(http(hub.port, "GET", "/api/instances", &[AUTH], b"").status, 200);
    assert!(
        !service.hub_closed.load(Ordering::SeqCst),
        "the answers came only after the hub gave up on the push service"
    );
}

/// A hub with a phone subscribed at a push stand-in, and a real bridge whose new session was
/// just sent `text` (its answer not awaited).
struct Prompted {
    _hub: Hub,
    service: PushService,
    phone: Browser,
    _bridge: zcode_tests::Bridge,
    sid: String,
}

fn prompted(home: &Home, text: &str) -> Prompted {
    // A heartbeat period no test outlives: only the nudge can tell the hub in time.
    let env = [("ZCODE_ACP_HEARTBEAT_MS", "600000")];
    let hub = Hub::start(home, &env);
    let service = PushService::start();
    let phone = Browser::new("phone");
    let r = send(
        hub.port,
        "POST",
        "/api/push/subscriptions",
        &phone.subscription(&service.endpoint("/ok/phone")),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let mut b = zcode_tests::Bridge::start_env(home, &zcode_tests::demo_agent(0), &env);
    zcode_tests::initialize(&mut b.editor, json!({}));
    let sid = zcode_tests::new_session(&mut b.editor, home.path());
    b.editor.request("session/prompt", zcode_tests::prompt(&sid, text));
    Prompted { _hub: hub, service, phone, _bridge: b, sid }
}

/// A real bridge whose session waits on a permission is pushed without waiting for a heartbeat
/// period: the router's status nudge sends `waiting` at once, and the hub turns it into a push.
#[test]
fn a_real_bridge_waiting_on_a_permission_is_pushed_at_once() {
    let home = Home::new();
    // Bound whole: the hub and the bridge live to the test's end.
    let Prompted { service, phone, sid, _hub, _bridge } = prompted(&home, "permission please");
    let pushed = service.next("the wait on a permission");
    let payload = phone.decrypt(&pushed.body);
    assert_eq!(payload["kind"], "waiting", "{payload}");
    assert!(payload["url"].as_str().is_some_and(|u| u.contains(&sid)), "{payload}");
    assert_eq!(pushed.header("urgency"), Some("high"));
}

/// Two requests of one session waiting together (an agent with parallel tool calls): the
/// session is pushed again when the second arrives, and the app badge counts both.
#[test]
fn two_requests_waiting_together_are_counted_on_the_badge() {
    let home = Home::new();
    let Prompted { service, phone, _hub, _bridge, .. } = prompted(&home, "together");
    let mut counts = Vec::new();
    while counts.last() != Some(&json!(2)) {
        assert!(counts.len() < 4, "no push counted both requests: {counts:?}");
        let payload = phone.decrypt(&service.next("a wait counting both requests").body);
        assert_eq!(payload["kind"], "waiting", "{payload}");
        counts.push(payload["pending"].clone());
    }
}

/// A device paired through the hub with `scope`: its token.
fn paired_token(port: u16, scope: &str) -> String {
    let r = send(port, "POST", "/api/pairing", &json!({"scope": scope}));
    assert_eq!(r.status, 200, "{}", r.text());
    let code = r.json()["code"].as_str().expect("a code").to_owned();
    let body = json!({"code": code, "name": format!("{scope} phone")}).to_string();
    let r = http(port, "POST", "/api/pair", &[("Content-Type", "application/json")], body.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["token"].as_str().expect("a token").to_owned()
}

/// POSTs `{optionId}` to a permission's route with `token`.
fn answer(port: u16, path: &str, token: &str, option: &str) -> Reply {
    let bearer = format!("Bearer {token}");
    let body = json!({"optionId": option}).to_string();
    http(
        port,
        "POST",
        path,
        &[("Authorization", &bearer), ("Content-Type", "application/json")],
        body.as_bytes(),
    )
}

/// Waits until the hub lists session `sid` as idle (it heard the turn's end).
fn wait_idle(port: u16, sid: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        let list = http(port, "GET", "/api/instances", &[AUTH], b"").json();
        let idle = list
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|i| i["sessions"].as_array().cloned().unwrap_or_default())
            .any(|s| s["sessionId"] == sid && s["status"] == "idle");
        if idle {
            return;
        }
        assert!(Instant::now() < deadline, "the hub never heard {sid} go idle: {list}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Answering from the notification: a wait's push names the tool and its command or path and
/// carries what Allow and Deny send; the HTTP route answers (200), refuses a watcher (403), an
/// unknown request (404), a second answer (409 naming the winner), and each is audited. A wait
/// answered anywhere else is withdrawn by a push under the same tag; one answered before its
/// push went out is never sent; a muted session reaches nobody who muted it.
#[test]
fn a_permission_pushed_with_its_details_is_answered_over_http_and_withdrawn_when_answered_elsewhere() {
    let home = Home::new();
    let hold = tempfile::tempdir().expect("a hold dir");
    let hold_dir = hold.path().to_str().expect("utf-8").to_owned();
    let env = [("ZCODE_ACP_HEARTBEAT_MS", "600000"), ("ZCODE_ACP_TEST_HOLD_DIR", hold_dir.as_str())];
    // Only the wait's send is held: storing subscriptions goes through.
    std::fs::write(hold.path().join("push-save.release"), b"").expect("a release");
    let hub = Hub::start(&home, &env);
    let service = PushService::start();
    let (phone, laptop) = (Browser::new("phone"), Browser::new("laptop"));
    for (b, path) in [(&phone, "/ok/phone"), (&laptop, "/ok/laptop")] {
        let r = send(hub.port, "POST", "/api/push/subscriptions", &b.subscription(&service.endpoint(path)));
        assert_eq!(r.status, 201, "{}", r.text());
    }
    let mut b = zcode_tests::Bridge::start_env(&home, &zcode_tests::demo_agent(0), &env);
    let instance = b.editor.pid().to_string();
    zcode_tests::initialize(&mut b.editor, json!({}));
    let sid = zcode_tests::new_session(&mut b.editor, home.path());

    // Answered on the editor while its push is held: it never goes out (nor a withdrawal).
    let turn = b.editor.request("session/prompt", zcode_tests::prompt(&sid, "permission please"));
    let deadline = Instant::now() + WAIT;
    while !hold.path().join("push-send.held").exists() {
        assert!(Instant::now() < deadline, "the wait's push never reached the send");
        std::thread::sleep(Duration::from_millis(10));
    }
    let (req, _) = b.editor.until("the permission", |m| m["method"] == "session/request_permission");
    b.editor.send(&json!({"jsonrpc": "2.0", "id": req["id"], "result": {"outcome": {"outcome": "selected", "optionId": "allow"}}}));
    b.editor.response_to(&turn);
    wait_idle(hub.port, &sid);
    std::fs::write(hold.path().join("push-send.release"), b"").expect("release");

    // The laptop mutes the session; the next wait reaches the phone only, with its details.
    let r = send(
        hub.port,
        "POST",
        "/api/push/mute",
        &json!({"endpoint": service.endpoint("/ok/laptop"), "sessionId": sid, "muted": true}),
    );
    assert_eq!((r.status, r.json()["muted"].clone()), (200, json!([sid])), "{}", r.text());
    let turn = b.editor.request("session/prompt", zcode_tests::prompt(&sid, "permission please"));
    let (req, _) = b.editor.until("the permission", |m| m["method"] == "session/request_permission");
    let pushed = service.next("the wait");
    assert_eq!(pushed.path, "/ok/phone", "the first push is the second wait's, to the phone only");
    let wait = phone.decrypt(&pushed.body);
    assert_eq!(
        (wait["kind"].as_str(), wait["tag"].clone()),
        (Some("waiting"), json!(format!("session:{sid}")))
    );
    assert_eq!(wait["title"], "permission please asks: Edit", "{wait}");
    assert!(wait["body"].as_str().is_some_and(|b| b.starts_with("Edit: demo.txt")), "{wait}");
    let route = format!("/api/instances/{instance}/sessions/{sid}/permissions/{}", req["id"]);
    assert_eq!(wait["answer"], json!({"path": route, "allow": "allow", "deny": "reject"}));

    // A watcher is refused; an unknown request and an option not offered are named.
    assert_eq!(answer(hub.port, &route, &paired_token(hub.port, "watch"), "allow").status, 403);
    let unknown = format!("/api/instances/{instance}/sessions/{sid}/permissions/999999");
    assert_eq!(answer(hub.port, &unknown, TEST_TOKEN, "allow").status, 404);
    let r = answer(hub.port, &route, TEST_TOKEN, "maybe");
    assert!(r.status == 400 && r.text().contains("unknown optionId"), "{} {}", r.status, r.text());
    // Allow from the notification: the editor's copy is withdrawn, the agent hears the answer.
    let r = answer(hub.port, &route, &paired_token(hub.port, "full"), "allow");
    assert_eq!((r.status, r.json()["optionId"].clone()), (200, json!("allow")), "{}", r.text());
    let (cancel, _) = b.editor.until("the editor's copy withdrawn", |m| m["method"] == "$/cancel_request");
    assert_eq!(cancel["params"]["requestId"], req["id"]);
    let (_, updates) = b.editor.response_to(&turn);
    assert!(zcode_tests::agent_text(&updates).contains("Permission granted (allow)"), "{updates:?}");
    let withdrawn = service.next("the withdrawal");
    assert_eq!(withdrawn.path, "/ok/phone");
    let w = phone.decrypt(&withdrawn.body);
    assert_eq!((w["kind"].as_str(), w["tag"].clone()), (Some("withdraw"), wait["tag"].clone()), "{w}");
    let r = answer(hub.port, &route, TEST_TOKEN, "reject");
    assert_eq!(r.status, 409, "{}", r.text());
    assert!(r.json()["answeredBy"].as_str().is_some_and(|b| b.starts_with("device ")), "{}", r.text());
    assert_eq!(r.json()["optionId"], "allow");

    // Followed again on the laptop: an execute names its command; answered on the editor, it
    // is withdrawn on both, and a late HTTP answer names the editor.
    let r = send(
        hub.port,
        "POST",
        "/api/push/mute",
        &json!({"endpoint": service.endpoint("/ok/laptop"), "sessionId": sid, "muted": false}),
    );
    assert_eq!(r.json()["muted"], json!([]));
    let turn = b.editor.request("session/prompt", zcode_tests::prompt(&sid, "execute"));
    let (req, _) = b.editor.until("the execute permission", |m| m["method"] == "session/request_permission");
    let mut waits: Vec<Pushed> =
        vec![service.next("the execute wait, 1 of 2"), service.next("the execute wait, 2 of 2")];
    waits.sort_by(|a, b| a.path.cmp(&b.path));
    let wait = laptop.decrypt(&waits[0].body);
    assert_eq!(
        wait["body"],
        "Run: cargo test --workspace -- --nocapture · ".to_owned()
            + home.path().file_name().unwrap().to_str().unwrap(),
        "{wait}"
    );
    b.editor.send(&json!({"jsonrpc": "2.0", "id": req["id"], "result": {"outcome": {"outcome": "selected", "optionId": "reject"}}}));
    b.editor.response_to(&turn);
    let mut gone: Vec<Pushed> =
        vec![service.next("the withdrawal, 1 of 2"), service.next("the withdrawal, 2 of 2")];
    gone.sort_by(|a, b| a.path.cmp(&b.path));
    for (p, browser) in gone.iter().zip([&laptop, &phone]) {
        let w = browser.decrypt(&p.body);
        assert_eq!((w["kind"].as_str(), w["tag"].clone()), (Some("withdraw"), wait["tag"].clone()), "{w}");
    }
    // A local tool may answer on the bridge itself (its own loopback route): recorded there.
    let direct = format!("/sessions/{sid}/permissions/{}", req["id"]);
    let r = answer(b.port, &direct, TEST_TOKEN, "allow");
    assert_eq!(
        (r.status, r.json()["answeredBy"].clone(), r.json()["optionId"].clone()),
        (409, json!("editor"), json!("reject"))
    );

    // Every HTTP answer is in the audit trail, with its status: the hub's (whose device) and
    // the bridge's (the machine token's, straight to it).
    let deadline = Instant::now() + WAIT;
    loop {
        let trail = http(hub.port, "GET", "/api/audit", &[AUTH], b"").json();
        let mut seen: Vec<(bool, i64)> = trail["entries"]
            .as_array()
            .expect("entries")
            .iter()
            .filter(|e| {
                e["action"] == "permission.answer"
                    && e["target"].as_str().is_some_and(|t| t.contains(" request "))
            })
            .map(|e| {
                (
                    e["target"].as_str().unwrap_or_default().starts_with("instance"),
                    e["status"].as_i64().unwrap_or(0),
                )
            })
            .collect();
        seen.sort();
        let want = [(false, 409), (true, 200), (true, 400), (true, 403), (true, 404), (true, 409)];
        if seen == want {
            break;
        }
        assert!(Instant::now() < deadline, "the audit trail: {seen:?}, expected {want:?}: {trail}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
