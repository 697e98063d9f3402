//! The official ACP Python SDK (agent-client-protocol 0.12.1, pinned in tests/peers/venv by
//! scripts/install-test-deps) drives the bridge as an SDK user would: over stdio (the SDK
//! spawns the bridge) and through the hub (the SDK's own WebSocket transport). Tail replay
//! (`_meta.zcode.limit`), paging (`_session/load_earlier`: the only spelling the SDK's
//! extension call can send), `replayMeta` where the SDK's typed result keeps it, and an
//! elicitation form answered by the SDK. The script prints a report; this file judges it.

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use zcode_tests::hub::{Hub, listed, wait_instances};
use zcode_tests::{Bridge, Home, TEST_TOKEN, agent_text, bin, demo_agent, initialize, new_session, prompt};

fn venv_python() -> PathBuf {
    let py = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/venv/bin/python");
    assert!(py.exists(), "the Python ACP SDK is not installed: run scripts/install-test-deps");
    py
}

/// Runs tests/peers/sdk_client.py with `args` in `home`'s environment; its JSON report.
fn run_sdk_client(home: &Home, args: &[String]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/sdk_client.py");
    let mut cmd = Command::new(venv_python());
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("ZCODE_ACP_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("ZCODE_ACP_HOME", home.path())
        .env("ZCODE_ACP_HUB_PORT", "0")
        .env("ZCODE_ACP_HUB_IDLE_MS", "30000")
        .env("ZCODE_ACP_REMOTE_PORT", "0")
        .env("ZCODE_ACP_REMOTE_TOKEN", TEST_TOKEN)
        .current_dir(home.path())
        .arg(script)
        .args(args);
    let out = cmd.output().expect("run the Python SDK client");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the Python SDK client failed ({}):\n{stderr}", out.status);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_else(|| panic!("no report; stderr:\n{stderr}"));
    serde_json::from_str(last).unwrap_or_else(|e| panic!("bad report ({e}): {last}"))
}

/// What every run must show, whatever the transport.
fn check_report(r: &Value, history: &[&str]) {
    assert_eq!(r["protocolVersion"], 1, "{r}");
    // The SDK's typed session/load result keeps `_meta`, so replayMeta is readable there.
    let meta = &r["loadMeta"]["zcode"]["replayMeta"];
    assert_eq!(meta["hasMore"], true, "a tail of a longer history: {r}");
    assert!(meta["cursor"].is_string(), "{meta}");
    let tail = r["tail"].as_array().expect("tail");
    assert!(!tail.is_empty() && tail.len() < history.len(), "a tail, not the whole history: {r}");
    let pages = r["pages"].as_array().expect("pages");
    assert!(!pages.is_empty(), "`_session/load_earlier` paged: {r}");
    for p in pages {
        let res = &p["result"];
        assert!(res["replayMeta"].is_object(), "top-level replayMeta, as the contract says: {res}");
        assert_eq!(res["replayMeta"], res["_meta"]["zcode"]["replayMeta"], "mirrored: {res}");
    }
    assert_eq!(pages[pages.len() - 1]["result"]["replayMeta"]["hasMore"], false, "paged to the beginning");
    let got: Vec<&str> = r["history"].as_array().expect("history").iter().filter_map(Value::as_str).collect();
    assert_eq!(got, history, "tail + pages = the whole history, in order, once");
    assert_eq!(r["elicit"]["asked"], json!(["What is your name?"]), "the SDK was asked: {r}");
    let said = r["elicit"]["said"].as_str().unwrap_or_default();
    assert!(said.contains(r#"You answered {"name":"Py"}"#), "{said}");
}

#[test]
fn the_python_sdk_drives_the_bridge_over_stdio() {
    let home = Home::new();
    let b = bin().display().to_string();
    let args: Vec<String> = ["stdio", "--cwd", &home.path().display().to_string(), "--", &b, "bridge", "--"]
        .into_iter()
        .map(str::to_owned)
        .chain(demo_agent(0))
        .collect();
    let r = run_sdk_client(&home, &args);
    let turns: Vec<String> = (1..=6).map(|i| format!("turn {i}")).collect();
    let mut history: Vec<&str> = turns.iter().map(String::as_str).collect();
    history.push("elicit");
    check_report(&r, &history);
    // The bridge the SDK spawned kept to the test's home (the SDK trims its child's
    // environment unless given one): its journal holds the session.
    let sid = r["sessionId"].as_str().expect("the session id");
    let store = zcode_shared::store::Store::open_in(&home.path().join("data")).expect("the journal");
    assert!(store.counters(sid).expect("counters").is_some(), "{sid} is not in the test home's journal");
}

#[test]
fn the_python_sdk_drives_the_bridge_through_the_hub() {
    let home = Home::new();
    let hub = Hub::start(&home, &[]);
    let mut b = Bridge::start_env(&home, &demo_agent(0), &[("ZCODE_ACP_HEARTBEAT_MS", "200")]);
    let id = b.id();
    wait_instances(hub.port, "the bridge to register", |l| listed(l, &id));
    // The editor renders no forms: the phone's form must not reach it.
    initialize(&mut b.editor, json!({}));
    let sid = new_session(&mut b.editor, home.path());
    let turns: Vec<String> = (1..=6).map(|i| format!("turn {i}")).collect();
    for t in &turns {
        let (r, _) = b.editor.call("session/prompt", prompt(&sid, t));
        assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    }
    let url = format!("ws://127.0.0.1:{}/acp?instance={id}&token={TEST_TOKEN}", hub.port);
    let cwd = home.path().display().to_string();
    let args: Vec<String> =
        ["ws", "--url", &url, "--session", &sid, "--cwd", &cwd].into_iter().map(str::to_owned).collect();
    let r = run_sdk_client(&home, &args);
    check_report(&r, &turns.iter().map(String::as_str).collect::<Vec<_>>());
    let (_, editor_saw) = b.editor.until("the SDK's turn on the editor", |m| {
        m["params"]["update"]["content"]["text"].as_str().is_some_and(|t| t.contains("You answered"))
    });
    assert!(!editor_saw.iter().any(|m| m["method"] == "elicitation/create"), "{editor_saw:?}");
    assert!(!agent_text(&editor_saw).contains("cannot answer"), "{}", agent_text(&editor_saw));
}

#[test]
fn the_python_sdks_resume_session_without_mcp_servers_goes_through_the_bridge() {
    // The bridge forwards the resume as `session/load` (the demo agent offers load), which
    // requires `mcpServers`; the SDK leaves it out of a resume, as ACP v1 allows.
    let home = Home::new();
    let b = bin().display().to_string();
    let args: Vec<String> = ["resume", "--cwd", &home.path().display().to_string(), "--", &b, "bridge", "--"]
        .into_iter()
        .map(str::to_owned)
        .chain(demo_agent(0))
        .collect();
    let r = run_sdk_client(&home, &args);
    assert_eq!(r["stopReason"], "end_turn", "{r}");
    assert!(r["said"].as_str().is_some_and(|s| s.contains("You said: \"after the resume\"")), "{r}");
}
