//! Token usage: bridges record what a (scripted) agent reports — `usage_update` notifications
//! and the `session/prompt` answers' `usage` — per session, turn and model, and the contract's
//! usage payload comes back alike from the hub (`/api/settings/usage`), the bridge's loopback
//! server (`/settings/usage`) and per instance (`/api/instances/{id}/settings/usage`).
//! "Yesterday" and "ten days ago" are bridges whose records are stamped that far back
//! (`ZCODE_ACP_USAGE_BACKDATE_MS`), so nothing sleeps.

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use zcode_tests::hub::{AUTH, Hub, http, listed, wait_instances};
use zcode_tests::{Bridge, Home, initialize, new_session};

const DAY_MS: u64 = 86_400_000;

fn usage_agent() -> Vec<String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/usage_agent.py");
    vec!["/usr/bin/python3".into(), script.display().to_string()]
}

/// Starts a bridge on the usage agent whose records are stamped `days_ago` days back.
fn bridge(home: &Home, days_ago: u64) -> Bridge {
    let backdate = (days_ago * DAY_MS).to_string();
    Bridge::start_env(home, &usage_agent(), &[("ZCODE_ACP_USAGE_BACKDATE_MS", backdate.as_str())])
}

/// One turn driven by `script` (see usage_agent.py); returns the prompt's answer.
fn turn(b: &mut Bridge, sid: &str, script: &Value) -> Value {
    let (resp, _) = b.editor.call(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": script.to_string()}]}),
    );
    assert_eq!(resp["result"]["stopReason"], "end_turn", "{resp}");
    resp
}

fn get(port: u16, path: &str) -> (u16, Value) {
    let r = http(port, "GET", path, &[AUTH], b"");
    (r.status, r.json())
}

fn cwd(home: &Home) -> PathBuf {
    home.path().to_owned()
}

#[test]
fn nothing_recorded_is_unavailable_with_zeros_and_a_bad_range_is_400_on_every_mount() {
    let home = Home::new();
    let hub = Hub::start(&home, &[]);
    let b = bridge(&home, 0);
    let id = b.id();
    wait_instances(hub.port, "the bridge's registration", |l| listed(l, &id));
    let mounts = [
        (hub.port, "/api/settings/usage".to_owned()),
        (b.port, "/settings/usage".to_owned()),
        (hub.port, format!("/api/instances/{id}/settings/usage")),
    ];
    for (port, path) in &mounts {
        for range in ["7d", "30d", "all"] {
            let (status, v) = get(*port, &format!("{path}?range={range}"));
            assert_eq!(status, 200, "{path}: {v}");
            assert_eq!(v["available"], false, "{path}: {v}");
            assert_eq!(v["range"], range);
            assert_eq!(v["summary"]["totalTokens"], 0);
            assert_eq!(v["summary"]["requestCount"], 0);
            assert_eq!(v["summary"]["models"], 0);
            assert_eq!(v["models"], json!([]));
            assert_eq!(v["daily"], json!([]));
        }
        assert_eq!(get(*port, path).1["range"], "7d", "no range: the last 7 days");
        let all_path = path.replace("/usage", "/all");
        let (status, all) = get(*port, &all_path);
        assert_eq!(status, 200, "{all_path}: {all}");
        assert_eq!(all["usage"], get(*port, path).1, "{all_path}: nothing recorded, no error");
        assert!(all["hooks"]["events"].is_object(), "{all_path}: {all}");
        for bad in ["1y", "", "7D", "all%20", "%FF"] {
            let (status, v) = get(*port, &format!("{path}?range={bad}"));
            assert_eq!(status, 400, "{path}?range={bad}: {v}");
            assert_eq!(v["ok"], false);
            assert!(v["error"].as_str().is_some_and(|e| e.contains("range")), "{v}");
        }
    }
    let r = http(hub.port, "GET", "/api/settings/usage", &[], b"");
    assert_eq!(r.status, 401, "the hub's mount needs the token");
}

#[test]
fn usage_across_two_models_and_two_days_adds_up_alike_on_every_mount() {
    let home = Home::new();
    let hub = Hub::start(&home, &[]);

    // Ten days ago: one turn on alpha, usage in the first RFD's snake_case.
    let mut c = bridge(&home, 10);
    initialize(&mut c.editor, json!({}));
    let sid = new_session(&mut c.editor, &cwd(&home));
    turn(&mut c, &sid, &json!({"usage": {"input_tokens": 900, "output_tokens": 100}}));
    assert!(c.editor.close(), "the bridge exits when its editor leaves");

    // Yesterday: a turn on alpha with a tool call, then the client switches to beta.
    let mut a = bridge(&home, 1);
    initialize(&mut a.editor, json!({}));
    let sid = new_session(&mut a.editor, &cwd(&home));
    turn(
        &mut a,
        &sid,
        &json!({"tool": true, "costs": [0.01], "usage": {"totalTokens": 125, "inputTokens": 100,
            "outputTokens": 20, "thoughtTokens": 5, "cachedReadTokens": 50}}),
    );
    let (resp, _) = a
        .editor
        .call("session/set_config_option", json!({"sessionId": sid, "configId": "model", "value": "beta"}));
    assert!(resp["result"]["configOptions"].is_array(), "{resp}");
    // The second cost is a repeat of an older cumulative total: it adds nothing.
    turn(
        &mut a,
        &sid,
        &json!({"costs": [0.03, 0.01], "usage": {"totalTokens": 300, "inputTokens": 200, "outputTokens": 100}}),
    );
    assert!(a.editor.close(), "the bridge exits when its editor leaves");

    // Today: alpha, then the agent itself switches to beta; a turn without usage counts nothing.
    let mut b = bridge(&home, 0);
    let id = b.id();
    initialize(&mut b.editor, json!({}));
    let sid = new_session(&mut b.editor, &cwd(&home));
    turn(
        &mut b,
        &sid,
        &json!({"costs": [0.02], "usage": {"totalTokens": 60, "inputTokens": 50, "outputTokens": 10}}),
    );
    turn(
        &mut b,
        &sid,
        &json!({"switch": "beta", "usage": {"totalTokens": 40, "inputTokens": 30, "outputTokens": 10}}),
    );
    turn(&mut b, &sid, &json!({}));
    wait_instances(hub.port, "the bridge's registration", |l| listed(l, &id));

    // The bridge's own mount first: its answer is read after everything it recorded.
    let mounts = [
        (b.port, "/settings/usage".to_owned()),
        (hub.port, "/api/settings/usage".to_owned()),
        (hub.port, format!("/api/instances/{id}/settings/usage")),
    ];
    for (port, path) in &mounts {
        let (status, week) = get(*port, &format!("{path}?range=7d"));
        assert_eq!(status, 200, "{path}: {week}");
        assert_eq!(week["available"], true, "{path}: {week}");
        assert_eq!(week["range"], "7d");
        let s = &week["summary"];
        assert_eq!(s["totalTokens"], 525, "{path}: {week}");
        assert_eq!(s["inputTokens"], 380);
        assert_eq!(s["outputTokens"], 140);
        assert_eq!(s["reasoningTokens"], 5);
        assert_eq!(s["cacheReadTokens"], 50);
        assert_eq!(s["requestCount"], 4);
        assert_eq!(s["turnCount"], 4);
        assert_eq!(s["sessionCount"], 2);
        assert_eq!(s["toolCallCount"], 1);
        assert_eq!(s["models"], 2);
        assert_eq!(s["activeDays"], 2);
        assert_eq!(s["cost"], json!([{"currency": "USD", "amount": 0.05}]), "cumulative costs counted once");
        let models = week["models"].as_array().expect("models");
        assert_eq!(models.len(), 2, "{week}");
        assert_eq!((&models[0]["modelId"], &models[0]["totalTokens"]), (&json!("beta"), &json!(340)));
        assert_eq!((&models[1]["modelId"], &models[1]["totalTokens"]), (&json!("alpha"), &json!(185)));
        assert_eq!(models[0]["share"], 0.6476);
        assert_eq!(models[1]["share"], 0.3524);
        assert_eq!((&models[0]["requestCount"], &models[1]["requestCount"]), (&json!(2), &json!(2)));
        let daily = week["daily"].as_array().expect("daily");
        assert_eq!(daily.len(), 2, "{week}");
        assert_eq!(
            daily[0]["models"],
            json!([{"modelId": "beta", "totalTokens": 300}, {"modelId": "alpha", "totalTokens": 125}])
        );
        assert_eq!(
            daily[1]["models"],
            json!([{"modelId": "alpha", "totalTokens": 60}, {"modelId": "beta", "totalTokens": 40}])
        );
        assert_consecutive(&daily[0]["date"], &daily[1]["date"]);
        // The same mount's `all` snapshot carries the same 7-day payload as its `usage` section.
        let all_path = path.replace("/usage", "/all");
        let (status, all) = get(*port, &all_path);
        assert_eq!(status, 200, "{all_path}: {all}");
        assert_eq!(all["usage"], week, "{all_path}: the usage section is the 7d payload");

        for range in ["30d", "all"] {
            let (status, v) = get(*port, &format!("{path}?range={range}"));
            assert_eq!(status, 200, "{path}: {v}");
            assert_eq!(v["range"], range);
            assert_eq!(v["summary"]["totalTokens"], 1525, "{path}?range={range}: {v}");
            assert_eq!(v["summary"]["sessionCount"], 3);
            assert_eq!(v["summary"]["activeDays"], 3);
            assert_eq!(v["models"][0]["modelId"], "alpha");
            assert_eq!(v["models"][0]["totalTokens"], 1185);
            assert_eq!(v["daily"].as_array().map(Vec::len), Some(3));
            assert_eq!(v["daily"][0]["models"], json!([{"modelId": "alpha", "totalTokens": 1000}]));
        }
    }
}

/// `a` and `b` are `YYYY-MM-DD` dates one day apart.
fn assert_consecutive(a: &Value, b: &Value) {
    let days = |v: &Value| {
        let s = v.as_str().unwrap_or_else(|| panic!("a date: {v}"));
        let p: Vec<i64> = s.split('-').map(|x| x.parse().expect("a number")).collect();
        // Days from civil (H. Hinnant), enough to compare two dates.
        let (y, m, d) = (if p[1] <= 2 { p[0] - 1 } else { p[0] }, p[1], p[2]);
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
        era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy
    };
    assert_eq!(days(b) - days(a), 1, "{a} then {b}");
}

#[test]
fn a_corrupt_store_is_a_503_with_the_reason_and_the_turn_still_ends() {
    let home = Home::new();
    std::fs::create_dir_all(home.path().join("data")).unwrap();
    let db = home.path().join("data").join("zcode-acp.sqlite3");
    std::fs::write(&db, "definitely not SQLite ".repeat(500)).unwrap();
    let hub = Hub::start(&home, &[]);
    let mut b = bridge(&home, 0);
    initialize(&mut b.editor, json!({}));
    let sid = new_session(&mut b.editor, &cwd(&home));
    turn(
        &mut b,
        &sid,
        &json!({"costs": [0.5], "usage": {"totalTokens": 10, "inputTokens": 5, "outputTokens": 5}}),
    );
    for (port, path) in [(hub.port, "/api/settings/usage?range=all"), (b.port, "/settings/usage?range=all")] {
        let (status, v) = get(port, path);
        assert_eq!(status, 503, "{path}: {v}");
        assert_eq!(v["ok"], false);
        assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{path}: {v}");
    }
    // The snapshot does not fail for it: its usage section says why, the others are there.
    let id = b.id();
    wait_instances(hub.port, "the bridge's registration", |l| listed(l, &id));
    let relayed = format!("/api/instances/{id}/settings/all");
    for (port, path) in
        [(hub.port, "/api/settings/all"), (b.port, "/settings/all"), (hub.port, relayed.as_str())]
    {
        let (status, v) = get(port, path);
        assert_eq!(status, 200, "{path}: {v}");
        let u = &v["usage"];
        assert_eq!((&u["available"], &u["range"]), (&json!(false), &json!("7d")), "{path}: {v}");
        assert!(u["error"].as_str().is_some_and(|e| e.contains("unavailable")), "{path}: {u}");
        assert!(v["mcp"].is_object() && v["hooks"].is_object(), "{path}: {v}");
    }
    assert!(
        std::fs::read_to_string(&db).unwrap().starts_with("definitely not SQLite"),
        "the file was overwritten"
    );
}

#[test]
fn a_demo_turn_shows_on_the_usage_screen() {
    // The demo agent reports usage like a real agent (a prompt answer's `usage`, a
    // `usage_update` with its cost), so a demo's usage screen is not all zeros.
    let home = Home::new();
    let hub = Hub::start(&home, &[]);
    let mut b = Bridge::start(&home, &zcode_tests::demo_agent(0));
    let id = b.id();
    initialize(&mut b.editor, json!({}));
    let sid = new_session(&mut b.editor, &cwd(&home));
    turn(&mut b, &sid, &json!("how many tokens was that?"));
    wait_instances(hub.port, "the bridge's registration", |l| listed(l, &id));
    // The bridge's mount first: its answer is read after everything it recorded.
    for (port, path) in [(b.port, "/settings/usage"), (hub.port, "/api/settings/usage")] {
        let (status, v) = get(port, path);
        assert_eq!(status, 200, "{path}: {v}");
        assert_eq!(v["available"], true, "{path}: {v}");
        let s = &v["summary"];
        assert!(s["totalTokens"].as_u64().is_some_and(|n| n > 0), "{path}: {v}");
        assert!(s["inputTokens"].as_u64().is_some_and(|n| n > 0), "{path}: {v}");
        assert!(s["outputTokens"].as_u64().is_some_and(|n| n > 0), "{path}: {v}");
        assert_eq!(s["turnCount"], 1, "{path}: {v}");
        assert_eq!(s["cost"][0]["currency"], "USD", "{path}: {v}");
        assert!(s["cost"][0]["amount"].as_f64().is_some_and(|a| a > 0.0), "{path}: {v}");
    }
}
