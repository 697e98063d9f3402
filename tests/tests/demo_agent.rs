//! The demo agent, driven over stdio by raw JSON-RPC: the fixture every other test stands on.

use serde_json::{Value, json};
use std::time::Duration;
use zcode_tests::{Home, Peer, agent_text, update_kinds};

fn agent(home: &Home) -> Peer {
    let mut cmd = home.command(&["demo-agent"]);
    cmd.env("ZCODE_ACP_DEMO_DELAY_MS", "0");
    Peer::spawn(cmd)
}

fn initialize(p: &mut Peer) -> Value {
    let (resp, _) = p.call("initialize", json!({"protocolVersion": 1, "clientCapabilities": {}}));
    resp["result"].clone()
}

fn new_session(p: &mut Peer, cwd: &str) -> String {
    let (resp, _) = p.call("session/new", json!({"cwd": cwd, "mcpServers": []}));
    resp["result"]["sessionId"].as_str().expect("sessionId").to_owned()
}

fn prompt_params(sid: &str, text: &str) -> Value {
    json!({"sessionId": sid, "prompt": [{"type": "text", "text": text}]})
}

/// Answers the next permission request with `outcome`; returns the request.
fn answer_permission(p: &mut Peer, outcome: Value) -> Value {
    let (req, _) = p.until("session/request_permission", |m| m["method"] == "session/request_permission");
    p.send(&json!({"jsonrpc": "2.0", "id": req["id"], "result": {"outcome": outcome}}));
    req
}

#[test]
fn a_whole_conversation_survives_an_agent_restart() {
    let home = Home::new();
    let cwd = home.path().display().to_string();
    let mut p = agent(&home);

    let init = initialize(&mut p);
    assert_eq!(init["protocolVersion"], 1);
    assert_eq!(init["agentCapabilities"]["loadSession"], true);
    assert!(init["agentCapabilities"]["sessionCapabilities"]["list"].is_object());
    assert!(init["agentInfo"]["title"].as_str().unwrap().contains("demo"), "{init}");

    let sid = new_session(&mut p, &cwd);

    // A plain prompt streams every kind of update.
    let (resp, updates) = p.call("session/prompt", prompt_params(&sid, "Fix the login bug\nsecond line"));
    assert_eq!(resp["result"]["stopReason"], "end_turn", "{resp}");
    let kinds = update_kinds(&updates);
    for k in ["agent_thought_chunk", "plan", "tool_call", "tool_call_update", "usage_update"] {
        assert!(kinds.iter().any(|x| x == k), "missing {k} in {kinds:?}");
    }
    assert!(kinds.iter().filter(|k| *k == "agent_message_chunk").count() >= 3, "{kinds:?}");
    assert!(agent_text(&updates).contains("You said: \"Fix the login bug\""), "{}", agent_text(&updates));

    // A permission round trip, allowed.
    let id = p.request("session/prompt", prompt_params(&sid, "permission please"));
    let req = answer_permission(&mut p, json!({"outcome": "selected", "optionId": "allow"}));
    assert_eq!(req["params"]["sessionId"], sid.as_str());
    let kinds: Vec<&str> =
        req["params"]["options"].as_array().unwrap().iter().map(|o| o["kind"].as_str().unwrap()).collect();
    assert!(kinds.contains(&"allow_once") && kinds.contains(&"reject_once"), "{kinds:?}");
    let (resp, updates) = p.response_to(&id);
    assert_eq!(resp["result"]["stopReason"], "end_turn");
    assert!(agent_text(&updates).contains("Permission granted (allow)"), "{}", agent_text(&updates));

    // ... and rejected.
    let id = p.request("session/prompt", prompt_params(&sid, "permission again"));
    answer_permission(&mut p, json!({"outcome": "selected", "optionId": "reject"}));
    let (resp, updates) = p.response_to(&id);
    assert_eq!(resp["result"]["stopReason"], "end_turn");
    assert!(agent_text(&updates).contains("Permission denied (reject)"), "{}", agent_text(&updates));

    // A long turn stops with `cancelled` on session/cancel.
    let id = p.request("session/prompt", prompt_params(&sid, "long"));
    p.until("a tick of the long turn", |m| {
        m["params"]["update"]["content"]["text"].as_str().is_some_and(|t| t.starts_with("tick"))
    });
    p.notify("session/cancel", json!({"sessionId": sid}));
    let (resp, updates) = p.response_to(&id);
    assert_eq!(resp["result"]["stopReason"], "cancelled", "{resp}");
    assert!(updates.len() < 600, "the long turn ran to its end instead of stopping");

    assert!(p.close(), "demo agent exited uncleanly");

    // A new agent process on the same home replays the whole history on session/load.
    let mut p = agent(&home);
    initialize(&mut p);
    let (resp, replay) = p.call("session/load", json!({"sessionId": sid, "cwd": cwd, "mcpServers": []}));
    assert!(resp["result"].is_object(), "{resp}");
    let prompts: Vec<&str> = replay
        .iter()
        .filter(|m| m["params"]["update"]["sessionUpdate"] == "user_message_chunk")
        .map(|m| m["params"]["update"]["content"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(prompts, ["Fix the login bug\nsecond line", "permission please", "permission again", "long"]);
    let text = agent_text(&replay);
    assert!(
        text.contains("Permission granted (allow)") && text.contains("Permission denied (reject)"),
        "{text}"
    );
    assert!(replay.iter().all(|m| m["params"]["sessionId"] == sid.as_str()));

    // session/list knows it, titled by its first prompt.
    let (resp, _) = p.call("session/list", json!({"cwd": cwd}));
    let sessions = resp["result"]["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1, "{resp}");
    assert_eq!(sessions[0]["sessionId"], sid.as_str());
    assert_eq!(sessions[0]["title"], "Fix the login bug");
    assert!(sessions[0]["updatedAt"].as_str().unwrap().ends_with('Z'));

    // The loaded session keeps working, and its turn numbers continue.
    let (resp, _) = p.call("session/prompt", prompt_params(&sid, "after the restart"));
    assert_eq!(resp["result"]["stopReason"], "end_turn");
}

#[test]
fn a_cancelled_permission_cancels_the_turn() {
    let home = Home::new();
    let mut p = agent(&home);
    initialize(&mut p);
    let sid = new_session(&mut p, "/tmp");
    let id = p.request("session/prompt", prompt_params(&sid, "permission"));
    answer_permission(&mut p, json!({"outcome": "cancelled"}));
    let (resp, _) = p.response_to(&id);
    assert_eq!(resp["result"]["stopReason"], "cancelled");

    // session/cancel while the permission is pending also ends the turn.
    let id = p.request("session/prompt", prompt_params(&sid, "permission"));
    let (req, _) = p.until("session/request_permission", |m| m["method"] == "session/request_permission");
    p.notify("session/cancel", json!({"sessionId": sid}));
    let (resp, _) = p.response_to(&id);
    assert_eq!(resp["result"]["stopReason"], "cancelled");
    // The client answers `cancelled` afterwards, as ACP requires; the agent takes it quietly.
    p.send(&json!({"jsonrpc": "2.0", "id": req["id"], "result": {"outcome": {"outcome": "cancelled"}}}));
    assert_eq!(p.quiet_for(Duration::from_millis(200)), None);
}

#[test]
fn files_are_read_and_written_through_the_client() {
    let home = Home::new();
    let mut p = agent(&home);
    initialize(&mut p);
    let sid = new_session(&mut p, "/work/proj");
    let id = p.request("session/prompt", prompt_params(&sid, "read:notes.txt write:/tmp/out.txt"));

    let (read, _) = p.until("fs/read_text_file", |m| m["method"] == "fs/read_text_file");
    assert_eq!(read["params"]["path"], "/work/proj/notes.txt");
    assert_eq!(read["params"]["sessionId"], sid.as_str());
    p.send(&json!({"jsonrpc": "2.0", "id": read["id"], "result": {"content": "hello\nworld\n"}}));

    let (write, mut updates) = p.until("fs/write_text_file", |m| m["method"] == "fs/write_text_file");
    assert_eq!(write["params"]["path"], "/tmp/out.txt");
    assert!(write["params"]["content"].as_str().unwrap().contains("demo agent"));
    p.send(&json!({"jsonrpc": "2.0", "id": write["id"], "result": null}));

    let (resp, rest) = p.response_to(&id);
    updates.extend(rest);
    assert_eq!(resp["result"]["stopReason"], "end_turn");
    let text = agent_text(&updates);
    assert!(text.contains("notes.txt has 2 lines; the first is \"hello\""), "{text}");
    assert!(text.contains("Wrote /tmp/out.txt"), "{text}");

    // A client that refuses a read gets it reported, and the turn still ends normally.
    let id = p.request("session/prompt", prompt_params(&sid, "read:secret"));
    let (read, _) = p.until("fs/read_text_file", |m| m["method"] == "fs/read_text_file");
    p.send(
        &json!({"jsonrpc": "2.0", "id": read["id"], "error": {"code": -32002, "message": "no such file"}}),
    );
    let (resp, updates) = p.response_to(&id);
    assert_eq!(resp["result"]["stopReason"], "end_turn");
    assert!(agent_text(&updates).contains("Could not read secret: no such file"));
}

#[test]
fn bad_input_gets_json_rpc_errors_and_the_agent_keeps_serving() {
    let home = Home::new();
    let mut p = agent(&home);

    p.send_raw("{this is not json");
    let e = p.recv("a parse error");
    assert_eq!(e["error"]["code"], -32700, "{e}");
    assert_eq!(e["id"], Value::Null);

    p.send_raw("[1, 2, 3]");
    assert_eq!(p.recv("an invalid request error")["error"]["code"], -32600);

    let (e, _) = p.call("no/such_method", json!({}));
    assert_eq!(e["error"]["code"], -32601);
    assert!(e["error"]["message"].as_str().unwrap().contains("no/such_method"));

    // Unknown notifications are ignored, not answered.
    p.notify("_vendor/ping", json!({}));
    assert_eq!(p.quiet_for(Duration::from_millis(200)), None);

    let (e, _) = p.call("initialize", json!({}));
    assert_eq!(e["error"]["code"], -32602);
    assert!(e["error"]["message"].as_str().unwrap().contains("protocolVersion"), "{e}");

    initialize(&mut p);
    for (method, params, field) in [
        ("session/new", json!({"mcpServers": []}), "cwd"),
        ("session/new", json!({"cwd": "/tmp"}), "mcpServers"),
        ("session/prompt", json!({"prompt": []}), "sessionId"),
        ("session/load", json!({"cwd": "/tmp", "mcpServers": []}), "sessionId"),
        ("session/set_mode", json!({"sessionId": "x"}), "modeId"),
    ] {
        let (e, _) = p.call(method, params);
        assert_eq!(e["error"]["code"], -32602, "{method}: {e}");
        assert!(e["error"]["message"].as_str().unwrap().contains(field), "{method}: {e}");
    }
    // String and number ids are answered as sent.
    p.send(&json!({"jsonrpc": "2.0", "id": "7", "method": "nope"}));
    assert_eq!(p.recv("the answer to id \"7\"")["id"], "7");

    let (e, _) = p.call("session/load", json!({"sessionId": "demo_00", "cwd": "/tmp", "mcpServers": []}));
    assert_eq!(e["error"]["code"], -32002, "{e}");
    let (e, _) = p.call("session/prompt", prompt_params("demo_ffff", "hi"));
    assert_eq!(e["error"]["code"], -32002, "{e}");

    // A scripted failure is a JSON-RPC error, and the session is still usable after it.
    let sid = new_session(&mut p, "/tmp");
    let (e, _) = p.call("session/prompt", prompt_params(&sid, "fail"));
    assert_eq!(e["error"]["code"], -32603, "{e}");
    let (ok, _) = p.call("session/prompt", prompt_params(&sid, "hello"));
    assert_eq!(ok["result"]["stopReason"], "end_turn");

    // Modes: a known one is announced, an unknown one refused.
    let (ok, updates) = p.call("session/set_mode", json!({"sessionId": sid, "modeId": "plan"}));
    assert!(ok["result"].is_object());
    assert_eq!(update_kinds(&updates), ["current_mode_update"]);
    let (e, _) = p.call("session/set_mode", json!({"sessionId": sid, "modeId": "yolo"}));
    assert_eq!(e["error"]["code"], -32602);
    assert!(p.close());
}

#[test]
fn a_resume_needs_no_mcp_servers_and_a_load_does() {
    // ACP v1: `mcpServers` is required by `session/load`, optional in `session/resume`.
    let home = Home::new();
    let mut cmd = home.command(&["demo-agent", "--resume-only"]);
    cmd.env("ZCODE_ACP_DEMO_DELAY_MS", "0");
    let mut p = Peer::spawn(cmd);
    initialize(&mut p);
    let sid = new_session(&mut p, "/tmp");
    let (ok, _) = p.call("session/resume", json!({"sessionId": sid, "cwd": "/tmp"}));
    assert!(ok["result"].is_object(), "{ok}");
    let (e, _) = p.call("session/resume", json!({"sessionId": sid, "cwd": "/tmp", "mcpServers": "none"}));
    assert_eq!(e["error"]["code"], -32602, "present, it is still an array: {e}");
    assert!(p.close());

    let mut p = agent(&home);
    initialize(&mut p);
    let (e, _) = p.call("session/load", json!({"sessionId": sid, "cwd": "/tmp"}));
    assert_eq!(e["error"]["code"], -32602, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("mcpServers"), "{e}");
    assert!(p.close());
}

#[test]
fn a_turn_reports_its_token_usage_like_a_real_agent() {
    let home = Home::new();
    let mut p = agent(&home);
    initialize(&mut p);
    let sid = new_session(&mut p, "/tmp");
    let mut spent = 0.0;
    for n in 1..=2 {
        let (resp, updates) = p.call("session/prompt", prompt_params(&sid, "count my tokens"));
        let usage = &resp["result"]["usage"];
        assert!(usage["inputTokens"].as_u64().is_some_and(|n| n > 0), "{resp}");
        assert!(usage["outputTokens"].as_u64().is_some_and(|n| n > 0), "{resp}");
        let parts: u64 =
            ["inputTokens", "outputTokens", "thoughtTokens"].iter().filter_map(|k| usage[k].as_u64()).sum();
        assert_eq!(usage["totalTokens"].as_u64(), Some(parts), "{resp}");
        let u = updates
            .iter()
            .map(|m| &m["params"]["update"])
            .find(|u| u["sessionUpdate"] == "usage_update")
            .unwrap_or_else(|| panic!("turn {n}: no usage_update"));
        assert!(
            u["used"].as_u64().is_some_and(|used| used > 0) && u["size"].as_u64() == Some(200_000),
            "{u}"
        );
        assert_eq!(u["cost"]["currency"], "USD", "{u}");
        let amount = u["cost"]["amount"].as_f64().expect("a cost amount");
        assert!(amount > spent, "the session's cost only grows (it is cumulative): {amount} after {spent}");
        spent = amount;
    }
    assert!(p.close());
}
