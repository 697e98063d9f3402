//! The machine at a glance: the attention inbox (`GET /api/attention`; with the listing and the
//! board in one `GET /api/home`) across bridges, answered
//! from a metadata-only attach, and the turn board (`GET /api/workflow-overview`) through a
//! turn's life.

use serde_json::{Value, json};
use zcode_tests::hub::{AUTH, Hub, http, wait_instances, wait_until};
use zcode_tests::{Bridge, Home, Peer, demo_agent, initialize, new_session, prompt};

const FAST: &[(&str, &str)] = &[("ZCODE_ACP_HEARTBEAT_MS", "300")];

fn get(port: u16, path: &str) -> Value {
    let r = http(port, "GET", path, &[AUTH], b"");
    assert_eq!(r.status, 200, "{path}: {}", r.text());
    r.json()
}

fn attention(port: u16) -> Value {
    get(port, "/api/attention")
}

/// A bridge in `home` (its directory is the workspace), its editor initialized with `caps`,
/// registered with `hub`: (bridge, its id).
fn bridge(home: &Home, hub: &Hub, caps: Value) -> (Bridge, String) {
    let mut b = Bridge::start_env(home, &demo_agent(5), FAST);
    initialize(&mut b.editor, caps);
    let id = b.id();
    wait_instances(hub.port, "the bridge registered", |l| zcode_tests::hub::listed(l, &id));
    (b, id)
}

/// A relayed remote client attached to `sid` with metadata only (`limit` 0); returns it and
/// the agent requests the attach handed it.
fn attach_metadata_only(
    hub: &Hub,
    id: &str,
    sid: &str,
    cwd: &std::path::Path,
    caps: Value,
) -> (Peer, Vec<Value>) {
    let mut remote = hub.connect(id).expect("relay");
    initialize(&mut remote, caps);
    let (r, seen) = remote.call(
        "session/load",
        json!({"sessionId": sid, "cwd": cwd, "mcpServers": [], "_meta": {"zcode": {"limit": 0}}}),
    );
    assert!(r["result"].is_object(), "{r}");
    assert_eq!(r["result"]["replayMeta"]["replayedMessages"], 0, "metadata only: {r}");
    let mut requests: Vec<Value> =
        seen.into_iter().filter(|m| m["id"].is_u64() && m["method"].is_string()).collect();
    if requests.is_empty() {
        let (m, _) = remote.until("the pending request", |m| m["id"].is_u64() && m["method"].is_string());
        requests.push(m);
    }
    (remote, requests)
}

#[test]
fn the_inbox_lists_every_pending_request_across_bridges_and_a_dead_bridge_as_an_error() {
    let home = Home::new();
    let hub = Hub::start(&home, &[("ZCODE_ACP_INSTANCE_TTL_MS", "120000")]);
    assert_eq!(http(hub.port, "GET", "/api/attention", &[], b"").status, 401);
    assert_eq!(attention(hub.port), json!({"ok": true, "pending": [], "errors": []}));

    let (mut a, a_id) = bridge(&home, &hub, json!({}));
    let a_sid = new_session(&mut a.editor, home.path());
    a.editor.request("session/prompt", prompt(&a_sid, "please ask permission"));
    let (perm, _) = a.editor.until("the permission", |m| m["method"] == "session/request_permission");

    let (mut b, b_id) = bridge(&home, &hub, json!({"elicitation": {"form": {}}}));
    let b_sid = new_session(&mut b.editor, home.path());
    b.editor.request("session/prompt", prompt(&b_sid, "elicit a name"));
    b.editor.until("the question", |m| m["method"] == "elicitation/create");

    let (c, c_id) = bridge(&home, &hub, json!({}));
    zcode_tests::kill9(c.editor.pid());
    zcode_tests::hub::wait_port_closed(c.port);

    let inbox = attention(hub.port);
    let pending = inbox["pending"].as_array().expect("pending");
    assert_eq!(pending.len(), 2, "{inbox}");
    let (first, second) = (&pending[0], &pending[1]);
    assert_eq!(first["instanceId"], a_id.as_str(), "oldest first, newest last: {inbox}");
    assert_eq!(first["sessionId"], a_sid.as_str());
    assert_eq!(first["title"], "please ask permission");
    assert_eq!(first["method"], "session/request_permission");
    assert_eq!(first["params"]["toolCall"], perm["params"]["toolCall"], "the request's params");
    assert_eq!(first["requestId"], perm["id"], "the id an attached client answers");
    assert_eq!(first["workspace"].as_str(), Some(workspace(&home).as_str()));
    assert_eq!(second["instanceId"], b_id.as_str());
    assert_eq!(second["method"], "elicitation/create");
    assert_eq!(second["params"]["message"], "What is your name?");
    let (s1, s2) = (first["since"].as_u64().expect("since"), second["since"].as_u64().expect("since"));
    assert!(s1 <= s2 && s2 <= now_ms(), "since when: {inbox}");
    let errors = inbox["errors"].as_array().expect("errors");
    assert_eq!(errors.len(), 1, "{inbox}");
    assert_eq!(errors[0]["instanceId"], c_id.as_str());
    assert!(errors[0]["error"].as_str().is_some_and(|e| !e.is_empty()), "{inbox}");

    // The home screen's one read (issue 33): the same inbox, with the listing and the board.
    assert_eq!(http(hub.port, "GET", "/api/home", &[], b"").status, 401);
    let state = get(hub.port, "/api/home");
    assert_eq!(state["attention"]["pending"], inbox["pending"], "{state}");
    let listed = state["instances"].as_array().expect("instances");
    assert!(
        listed.iter().any(|i| i["id"] == a_id.as_str()) && listed.iter().any(|i| i["id"] == b_id.as_str()),
        "{state}"
    );
    let runs = state["overview"]["activeRuns"].as_array().expect("the board's runs");
    assert!(runs.iter().any(|r| r["sessionId"] == a_sid.as_str()), "{state}");

    // A metadata-only attach is enough to answer the question.
    let form = json!({"elicitation": {"form": {}}});
    let (mut remote, got) = attach_metadata_only(&hub, &b_id, &b_sid, home.path(), form);
    let q = got.iter().find(|m| m["method"] == "elicitation/create").expect("the question on attach");
    assert_eq!(q["id"], second["requestId"]);
    remote.send(
        &json!({"jsonrpc": "2.0", "id": q["id"], "result": {"action": "accept", "content": {"name": "Ada"}}}),
    );
    let (done, seen) = b.editor.until("the turn's end", |m| m["result"]["stopReason"].is_string());
    assert_eq!(done["result"]["stopReason"], "end_turn");
    assert!(zcode_tests::agent_text(&seen).contains("Ada"), "the answer reached the agent");
    wait_until("only the permission left in the inbox", || {
        let p = attention(hub.port)["pending"].clone();
        p.as_array().is_some_and(|p| p.len() == 1 && p[0]["instanceId"] == a_id.as_str())
    });
}

#[test]
fn answering_from_the_inbox_while_the_editor_races_settles_once() {
    let home = Home::new();
    let hub = Hub::start(&home, &[]);
    let (mut a, a_id) = bridge(&home, &hub, json!({}));
    let sid = new_session(&mut a.editor, home.path());
    let turn = a.editor.request("session/prompt", prompt(&sid, "permission please"));
    let (perm, _) = a.editor.until("the permission", |m| m["method"] == "session/request_permission");
    let row = attention(hub.port)["pending"][0].clone();
    assert_eq!(row["requestId"], perm["id"]);
    let (mut remote, got) = attach_metadata_only(&hub, &a_id, &sid, home.path(), json!({}));
    let copy = got.iter().find(|m| m["method"] == "session/request_permission").expect("handed on attach");
    assert_eq!(copy["id"], row["requestId"]);
    // Both answer at once: the phone allows from the inbox, the editor rejects.
    let allow = json!({"outcome": {"outcome": "selected", "optionId": "allow"}});
    let reject = json!({"outcome": {"outcome": "selected", "optionId": "reject"}});
    remote.send(&json!({"jsonrpc": "2.0", "id": copy["id"], "result": allow}));
    a.editor.send(&json!({"jsonrpc": "2.0", "id": perm["id"], "result": reject}));
    let (done, seen) = a.editor.response_to(&turn);
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    let text = zcode_tests::agent_text(&seen);
    let outcomes = ["Permission granted", "Permission denied"].iter().filter(|o| text.contains(*o)).count();
    assert_eq!(outcomes, 1, "exactly one answer reached the agent: {text}");
    wait_until("the inbox is empty", || attention(hub.port)["pending"].as_array().is_some_and(Vec::is_empty));
}

/// The workspace a bridge started in `home` registers (its canonical path).
fn workspace(home: &Home) -> String {
    std::fs::canonicalize(home.path()).expect("canonical home").display().to_string()
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970").as_millis() as u64
}

fn board(port: u16) -> Value {
    get(port, "/api/workflow-overview")
}

fn runs_of(board: &Value, sid: &str) -> Vec<String> {
    let runs = board["activeRuns"].as_array().cloned().unwrap_or_default();
    runs.iter()
        .filter(|r| r["sessionId"] == sid)
        .map(|r| r["status"].as_str().unwrap_or("?").to_owned())
        .collect()
}

#[test]
fn the_board_follows_a_turn_from_queued_to_finished_with_one_group_per_workspace() {
    let home = Home::new();
    let hub = Hub::start(&home, &[]);
    assert_eq!(http(hub.port, "GET", "/api/workflow-overview", &[], b"").status, 401);
    let (mut a, a_id) = bridge(&home, &hub, json!({}));
    // A second bridge on the same project: the board shows the project once.
    let (_b, b_id) = bridge(&home, &hub, json!({}));
    let sid = new_session(&mut a.editor, home.path());
    let first = a.editor.request("session/prompt", prompt(&sid, "go long"));
    a.editor.until("the long turn streams", |m| m["method"] == "session/update");
    let second = a.editor.request("session/prompt", prompt(&sid, "then ask permission"));
    let mut snapshot = Value::Null;
    wait_until("running, with the second turn queued", || {
        snapshot = board(hub.port);
        runs_of(&snapshot, &sid) == ["running", "pending"]
    });
    assert_eq!(snapshot["ok"], true);
    let groups = snapshot["groups"].as_array().expect("groups");
    assert_eq!(groups.len(), 1, "editor bridges of one project render once: {snapshot}");
    let ids: Vec<&str> =
        groups[0]["instanceIds"].as_array().expect("instanceIds").iter().filter_map(Value::as_str).collect();
    assert!(ids.contains(&a_id.as_str()) && ids.contains(&b_id.as_str()), "{snapshot}");
    assert_eq!(groups[0]["error"], Value::Null);
    let running = &snapshot["activeRuns"][0];
    assert_eq!(running["ownerInstanceId"], a_id.as_str());
    assert_eq!(running["title"], "go long");
    assert_eq!(running["promptedBy"], "editor");
    assert!(running["startedAt"].as_u64().is_some_and(|t| t <= now_ms()));

    a.editor.notify("session/cancel", json!({"sessionId": sid}));
    let (r, _) = a.editor.response_to(&first);
    assert_eq!(r["result"]["stopReason"], "cancelled");
    let (perm, _) = a.editor.until("the permission", |m| m["method"] == "session/request_permission");
    wait_until("the second turn waits for a permission", || runs_of(&board(hub.port), &sid) == ["waiting"]);
    a.editor.send(&json!({"jsonrpc": "2.0", "id": perm["id"],
        "result": {"outcome": {"outcome": "selected", "optionId": "allow"}}}));
    let (r, _) = a.editor.response_to(&second);
    assert_eq!(r["result"]["stopReason"], "end_turn");
    wait_until("both turns finished", || {
        snapshot = board(hub.port);
        let recent = snapshot["recentRuns"].as_array().cloned().unwrap_or_default();
        runs_of(&snapshot, &sid).is_empty() && recent.iter().filter(|r| r["sessionId"] == sid).count() == 2
    });
    let recent = snapshot["recentRuns"].as_array().expect("recentRuns");
    let stops: Vec<&str> = recent.iter().filter_map(|r| r["stopReason"].as_str()).collect();
    assert_eq!(stops, ["end_turn", "cancelled"], "newest first: {snapshot}");
    for r in recent {
        assert_eq!(r["status"], "finished");
        assert!(r["durationMs"].as_i64().is_some_and(|d| d >= 0), "{r}");
        assert_eq!(r["workspace"].as_str(), Some(workspace(&home).as_str()));
        assert_eq!(r["promptedBy"], "editor");
    }
    assert_eq!(recent[0]["ownerInstanceId"], a_id.as_str(), "the bridge listing the session");
}

#[test]
fn a_dead_bridge_degrades_only_its_own_group() {
    let home = Home::new();
    let hub = Hub::start(&home, &[("ZCODE_ACP_INSTANCE_TTL_MS", "120000")]);
    let (_a, a_id) = bridge(&home, &hub, json!({}));
    let other = tempfile::tempdir().expect("another project");
    let mut cmd = home.command(&["bridge", "--"]);
    cmd.args(demo_agent(5))
        .env("ZCODE_ACP_REMOTE_PORT", "0")
        .env("ZCODE_ACP_REMOTE_TOKEN", zcode_tests::TEST_TOKEN);
    cmd.env("ZCODE_ACP_HEARTBEAT_MS", "300").current_dir(other.path());
    let dead = Bridge::spawn(&home, cmd, std::process::Stdio::null());
    let dead_id = dead.id();
    wait_instances(hub.port, "both bridges", |l| {
        zcode_tests::hub::listed(l, &dead_id) && zcode_tests::hub::listed(l, &a_id)
    });
    zcode_tests::kill9(dead.editor.pid());
    zcode_tests::hub::wait_port_closed(dead.port);
    let snapshot = board(hub.port);
    let groups = snapshot["groups"].as_array().expect("groups");
    assert_eq!(groups.len(), 2, "{snapshot}");
    let by_id = |id: &str| groups.iter().find(|g| g["instanceId"] == id).cloned().expect("its group");
    assert_eq!(by_id(&a_id)["error"], Value::Null, "{snapshot}");
    assert!(by_id(&dead_id)["error"].as_str().is_some_and(|e| e.contains(&dead_id)), "{snapshot}");
    assert_eq!(snapshot["ok"], true);
}
