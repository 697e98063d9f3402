//! The registry: registration payloads, the listing (fields, order, dedupe), TTL expiry and
//! the probe grace, with registrations posted by the test (fake bridges) and by real bridges.

use serde_json::{Value, json};
use std::time::{Duration, Instant};
use zcode_tests::hub::{
    AUTH, Hub, closed_port, http, instances, listed, post_json, wait_gone, wait_instances, wait_port_closed,
    wait_until,
};
use zcode_tests::{Bridge, Home, TEST_TOKEN, WAIT, demo_agent, initialize, kill9, new_session, prompt};

fn reg(id: &str, port: u16, started: u64, sessions: Value) -> Value {
    json!({"token": TEST_TOKEN, "id": id, "port": port, "pid": 4242, "startedAt": started,
           "workspace": "/w", "origin": "editor", "sessions": sessions, "version": "0.1.0", "nonce": "n1"})
}

#[test]
fn register_list_reregister_unregister() {
    let home = Home::new();
    let hub = Hub::start(&home, &[]);
    let sessions = json!([
        {"sessionId": "s1", "title": "Fix login", "status": "running", "updatedAt": 20},
        {"sessionId": "s2", "status": "exploded", "updatedAt": 10}
    ]);
    let r = post_json(hub.port, "/api/register", &reg("4242", 9001, 1000, sessions.clone()));
    assert_eq!((r.status, r.json()), (200, json!({"ok": true})));
    let list = instances(hub.port);
    assert_eq!(
        list,
        vec![json!({"id": "4242", "port": 9001, "pid": 4242, "startedAt": 1000, "workspace": "/w",
                    "origin": "editor", "version": "0.1.0", "sessions": [
                        {"sessionId": "s1", "title": "Fix login", "status": "running", "updatedAt": 20},
                        {"sessionId": "s2", "updatedAt": 10}]})],
        "no internal fields (token, nonce); the bridge's version is listed (additive: the About sheet shows it); an unknown status is dropped"
    );
    // A heartbeat with a later startedAt keeps the first one; the rest is refreshed.
    let r = post_json(hub.port, "/api/register", &reg("4242", 9001, 5000, json!([])));
    assert_eq!(r.status, 200);
    let list = instances(hub.port);
    assert_eq!((list[0]["startedAt"].clone(), list[0]["sessions"].clone()), (json!(1000), json!([])));
    // Unregister: gone, and unregistering again is fine.
    for _ in 0..2 {
        let r = post_json(hub.port, "/api/unregister", &json!({"token": TEST_TOKEN, "id": "4242"}));
        assert_eq!((r.status, r.json()), (200, json!({"ok": true})));
    }
    assert!(instances(hub.port).is_empty());
}

#[test]
fn bad_registrations_are_400_and_bad_tokens_401() {
    let home = Home::new();
    let hub = Hub::start(&home, &[]);
    for (body, want) in [
        (reg("1", 0, 1, json!([])), 400),
        (json!({"token": TEST_TOKEN, "id": "1", "port": 9000, "sessions": "none"}), 400),
        (json!({"token": TEST_TOKEN, "id": "1", "port": 9000, "sessions": [{"title": "x"}]}), 400),
        (json!({"token": TEST_TOKEN, "port": 9000}), 400),
        (json!({"token": TEST_TOKEN, "id": "../x", "port": 9000}), 400),
        (json!({"token": TEST_TOKEN, "id": "1", "port": 9000, "origin": "phone"}), 400),
        (json!({"token": "wrong", "id": "1", "port": 9000}), 401),
        (json!({"id": "1", "port": 9000}), 401),
    ] {
        let r = post_json(hub.port, "/api/register", &body);
        assert_eq!(r.status, want, "{body}: {}", r.text());
    }
    assert_eq!(post_json(hub.port, "/api/unregister", &json!({"token": TEST_TOKEN})).status, 400);
    assert_eq!(post_json(hub.port, "/api/unregister", &json!({"token": "x", "id": "1"})).status, 401);
    // A Bearer header is accepted in place of the body token.
    let body = json!({"id": "7", "port": 9000}).to_string();
    assert_eq!(http(hub.port, "POST", "/api/register", &[AUTH], body.as_bytes()).status, 200);
    assert!(instances(hub.port).iter().all(|i| i["id"] == "7"));
}

#[test]
fn sessions_are_deduplicated_across_three_bridges_and_bridges_sort_oldest_first() {
    let home = Home::new();
    let hub = Hub::start(&home, &[]);
    // Registered out of order; startedAt: a < b < c.
    let c = json!([{"sessionId": "shared-equal", "updatedAt": 500, "status": "idle"},
                   {"sessionId": "newest-on-a", "updatedAt": 100}]);
    let a = json!([{"sessionId": "shared-equal", "updatedAt": 500},
                   {"sessionId": "newest-on-a", "updatedAt": 900, "title": "from a"},
                   {"sessionId": "only-a", "updatedAt": 1}]);
    let b = json!([{"sessionId": "shared-equal", "updatedAt": 400},
                   {"sessionId": "newest-on-a", "updatedAt": 899}]);
    for (id, started, sessions) in [("300", 3000, c), ("100", 1000, a), ("200", 2000, b)] {
        assert_eq!(post_json(hub.port, "/api/register", &reg(id, 9000, started, sessions)).status, 200);
    }
    let list = instances(hub.port);
    let ids: Vec<&str> = list.iter().map(|i| i["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["100", "200", "300"], "oldest bridge first");
    let sessions = |i: usize| -> Vec<&str> {
        list[i]["sessions"].as_array().unwrap().iter().map(|s| s["sessionId"].as_str().unwrap()).collect()
    };
    // newest-on-a: a's copy is newest. shared-equal: a and c tie, c started last.
    assert_eq!(sessions(0), ["newest-on-a", "only-a"]);
    assert_eq!(sessions(1), Vec::<&str>::new());
    assert_eq!(sessions(2), ["shared-equal"]);
    assert_eq!(list[0]["sessions"][0]["title"], "from a");
}

#[test]
fn instances_expire_after_the_ttl_unless_heartbeats_keep_them() {
    let home = Home::new();
    // A TTL of 20 heartbeats: a bridge starved for a while by a loaded machine stays listed.
    let env = [("ZCODE_ACP_INSTANCE_TTL_MS", "2000"), ("ZCODE_ACP_HEARTBEAT_MS", "100")];
    let hub = Hub::start(&home, &env);
    let bridge = Bridge::start_env(&home, &demo_agent(0), &env);
    wait_instances(hub.port, "the bridge", |l| listed(l, &bridge.id()));
    // Registered after the bridge's first registration, expired a TTL later: by then the
    // bridge's first registration is older than the TTL, and only heartbeats keep it.
    post_json(hub.port, "/api/register", &reg("silent", 9000, 1, json!([])));
    assert!(listed(&instances(hub.port), "silent"));
    let list = wait_instances(hub.port, "the silent instance to expire", |l| !listed(l, "silent"));
    assert!(listed(&list, &bridge.id()), "the heartbeating bridge expired too: {list:?}");
}

#[test]
fn probe_grace_one_failure_keeps_it_sustained_failure_prunes_it_a_heartbeat_revives_it() {
    let probe = |port: u16| http(port, "GET", "/api/instances?probe=1", &[AUTH], b"").json();
    let has = |v: &Value| v.as_array().unwrap().iter().any(|i| i["id"] == "dead");
    let closed = closed_port();
    let dead = closed.port;

    // A grace no test outlives: failed probes, however many, only mark it.
    let home = Home::new();
    let hub = Hub::start(&home, &[("ZCODE_ACP_PROBE_GRACE_MS", "3600000")]);
    post_json(hub.port, "/api/register", &reg("dead", dead, 1, json!([])));
    for _ in 0..5 {
        assert!(has(&probe(hub.port)), "pruned although its failures are within the grace");
    }
    drop(hub);

    // A 300 ms grace. A heartbeat clears the mark: while every probe follows a heartbeat, each
    // failure is the first since it, so it stays, for three graces and more. Without the
    // clearing, the first probe's mark would prune it once a grace had passed.
    let home = Home::new();
    let grace = Duration::from_millis(300);
    let hub = Hub::start(&home, &[("ZCODE_ACP_PROBE_GRACE_MS", "300")]);
    let heartbeat =
        || assert_eq!(post_json(hub.port, "/api/register", &reg("dead", dead, 1, json!([]))).status, 200);
    heartbeat();
    assert!(has(&probe(hub.port)), "one failed probe only marks it");
    let marked = Instant::now();
    while marked.elapsed() < grace * 3 {
        heartbeat();
        assert!(has(&probe(hub.port)), "pruned although a heartbeat came since its last failure");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The heartbeats stop: failures spanning the grace prune it.
    wait_until("failed probes to prune it", || !has(&probe(hub.port)));
    // Its next heartbeat lists it again.
    heartbeat();
    assert!(has(&probe(hub.port)));
}

#[test]
fn a_real_bridge_registers_its_sessions_and_unregisters_when_its_editor_leaves() {
    let home = Home::new();
    let hub = Hub::start(&home, &[]);
    let mut b = Bridge::start_env(&home, &demo_agent(0), &[("ZCODE_ACP_HEARTBEAT_MS", "100")]);
    let id = b.id();
    let list = wait_instances(hub.port, "the bridge", |l| listed(l, &id));
    let me = &list[0];
    assert_eq!(
        (me["port"].as_u64(), me["pid"].as_u64()),
        (Some(u64::from(b.port)), Some(u64::from(b.editor.pid())))
    );
    assert_eq!(me["origin"], "editor");
    let cwd = std::fs::canonicalize(home.path()).unwrap();
    assert_eq!(me["workspace"], cwd.display().to_string());
    let started = me["startedAt"].clone();

    initialize(&mut b.editor, json!({}));
    let sid = new_session(&mut b.editor, home.path());
    let (r, _) = b.editor.call("session/prompt", prompt(&sid, "Fix the login bug\nplease"));
    assert_eq!(r["result"]["stopReason"], "end_turn");
    // A heartbeat sent during the turn says "running": wait for one sent after it.
    let list = wait_instances(hub.port, "the idle session in the heartbeat", |l| {
        l.first().is_some_and(|i| i["sessions"][0]["status"] == "idle")
    });
    let s = &list[0]["sessions"][0];
    assert_eq!(
        (s["sessionId"].as_str(), s["title"].as_str(), s["status"].as_str()),
        (Some(sid.as_str()), Some("Fix the login bug"), Some("idle"))
    );
    assert!(s["updatedAt"].as_u64().is_some_and(|t| t >= started.as_u64().unwrap()), "{s}");
    assert_eq!(list[0]["startedAt"], started, "startedAt is the bridge's, kept across heartbeats");

    assert!(b.editor.close_then_exited());
    assert!(!listed(&instances(hub.port), &id), "the bridge unregistered on its way out");
}

#[test]
fn a_killed_bridge_is_pruned_by_probes_after_the_grace() {
    let home = Home::new();
    let hub = Hub::start(&home, &[("ZCODE_ACP_PROBE_GRACE_MS", "300")]);
    let b = Bridge::start_env(&home, &demo_agent(0), &[]);
    let id = b.id();
    wait_instances(hub.port, "the bridge", |l| listed(l, &id));
    kill9(b.editor.pid());
    assert!(wait_gone(b.editor.pid(), WAIT), "the bridge survived kill -9");
    wait_port_closed(b.port);
    let probe = || http(hub.port, "GET", "/api/instances?probe=1", &[AUTH], b"").json();
    let first = probe();
    assert!(first.as_array().unwrap().iter().any(|i| i["id"] == id.as_str()), "listed after one failure");
    wait_until("failed probes spanning the grace to prune it", || {
        probe().as_array().unwrap().iter().all(|i| i["id"] != id.as_str())
    });
    drop(b);
}
