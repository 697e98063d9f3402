//! The bridge shared by an editor (stdio) and remote clients (loopback WebSocket): fan-out,
//! permissions (first answer wins), prompt echo, titles, FIFO prompts, headless fs service.

use serde_json::{Value, json};
use std::time::Duration;
use zcode_tests::{
    Bridge, Home, Peer, agent_text, demo_agent, initialize, new_session, prompt, shared_session, update_kinds,
};

const EDITOR_CAPS: &str = r#"{"fs": {"readTextFile": false, "writeTextFile": false}, "terminal": false}"#;

fn caps() -> Value {
    serde_json::from_str(EDITOR_CAPS).expect("valid capabilities")
}

fn load(p: &mut Peer, sid: &str, cwd: &std::path::Path) -> (Value, Vec<Value>) {
    p.call("session/load", json!({"sessionId": sid, "cwd": cwd, "mcpServers": []}))
}

#[test]
fn editor_and_remote_share_a_session_and_the_first_permission_answer_wins() {
    let home = Home::new();
    let mut b = Bridge::start(&home, &demo_agent(1));
    let init = initialize(&mut b.editor, caps());
    assert_eq!(init["agentCapabilities"]["_meta"]["zcode"]["fs"], true, "{init}");
    assert_eq!(init["agentCapabilities"]["loadSession"], true);
    assert!(
        init["agentInfo"]["title"].as_str().unwrap().contains("demo"),
        "the agent's own info passes through"
    );
    let sid = new_session(&mut b.editor, home.path());
    let (r, _) = b.editor.call("session/prompt", prompt(&sid, "Fix the login bug\nplease"));
    assert_eq!(r["result"]["stopReason"], "end_turn");

    // A remote client loads the live session: it gets the history, the agent is not asked.
    let mut remote = b.remote();
    let rinit = initialize(&mut remote, json!({}));
    assert_eq!(rinit, init, "every client gets the same cached initialize result");
    let (resp, replay) = load(&mut remote, &sid, home.path());
    assert!(resp["result"].is_object(), "{resp}");
    assert!(replay.iter().all(|m| m["params"]["sessionId"] == sid.as_str()));
    let kinds = update_kinds(&replay);
    assert!(
        kinds.contains(&"agent_message_chunk".to_owned()) && kinds.contains(&"plan".to_owned()),
        "{kinds:?}"
    );
    assert!(kinds.contains(&"session_info_update".to_owned()), "the title is part of the replay: {kinds:?}");

    // The editor prompts; both see the stream and both get the permission request.
    let id = b.editor.request("session/prompt", prompt(&sid, "permission"));
    let (ereq, _) =
        b.editor.until("permission on the editor", |m| m["method"] == "session/request_permission");
    let (rreq, rseen) =
        remote.until("permission on the remote", |m| m["method"] == "session/request_permission");
    assert!(update_kinds(&rseen).contains(&"tool_call".to_owned()), "the remote sees the live stream");
    // The remote answers first: the editor's copy is withdrawn.
    remote.send(&json!({"jsonrpc": "2.0", "id": rreq["id"], "result": {"outcome": {"outcome": "selected", "optionId": "allow"}}}));
    let (cancel, _) = b.editor.until("$/cancel_request on the editor", |m| m["method"] == "$/cancel_request");
    assert_eq!(cancel["params"]["requestId"], ereq["id"]);
    // A late answer from the editor is dropped: the agent saw exactly one.
    b.editor.send(&json!({"jsonrpc": "2.0", "id": ereq["id"], "result": {"outcome": {"outcome": "selected", "optionId": "reject"}}}));
    let (resp, updates) = b.editor.response_to(&id);
    assert_eq!(resp["result"]["stopReason"], "end_turn");
    let text = agent_text(&updates);
    assert!(text.contains("Permission granted (allow)") && !text.contains("denied"), "{text}");
    let (_, rupdates) = remote.until("the end of the turn on the remote", |m| {
        m["params"]["update"]["sessionUpdate"] == "usage_update"
    });
    assert!(agent_text(&rupdates).contains("Permission granted (allow)"));
}

#[test]
fn a_remote_prompt_is_echoed_to_the_editor_only_and_titles_the_session() {
    let home = Home::new();
    let mut b = Bridge::start(&home, &demo_agent(1));
    initialize(&mut b.editor, caps());
    let mut remote = b.remote();
    initialize(&mut remote, json!({}));
    let sid = new_session(&mut remote, home.path());
    let (r, _) = load(&mut b.editor, &sid, home.path());
    assert!(r["result"].is_object(), "{r}");

    let (resp, rseen) =
        remote.call("session/prompt", prompt(&sid, "  \n  Rename   the\tmodule  \nsecond line"));
    assert_eq!(resp["result"]["stopReason"], "end_turn");
    assert!(
        !rseen.iter().any(|m| m["params"]["update"]["sessionUpdate"] == "user_message_chunk"),
        "the sender must not get its own prompt echoed"
    );
    let title = rseen.iter().find(|m| m["params"]["update"]["sessionUpdate"] == "session_info_update");
    assert_eq!(title.expect("a title update")["params"]["update"]["title"], "Rename the module");

    let (echo, _) =
        b.editor.until("the prompt echo", |m| m["params"]["update"]["sessionUpdate"] == "user_message_chunk");
    let u = &echo["params"]["update"];
    assert!(u["messageId"].as_str().unwrap().starts_with("uprompt_"), "{u}");
    assert_eq!(u["content"]["text"], "  \n  Rename   the\tmodule  \nsecond line");
    let (info, _) =
        b.editor.until("the title", |m| m["params"]["update"]["sessionUpdate"] == "session_info_update");
    assert_eq!(info["params"]["update"]["title"], "Rename the module");

    // Later turns never change the title.
    let (_, rseen) = remote.call("session/prompt", prompt(&sid, "another subject"));
    assert!(!update_kinds(&rseen).contains(&"session_info_update".to_owned()));
    let (s, body) = b.http_get("/status", Some(zcode_tests::TEST_TOKEN));
    assert_eq!(s, 200);
    let status: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["sessions"][0]["title"], "Rename the module", "{status}");
}

#[test]
fn prompts_from_two_clients_run_one_after_the_other() {
    let home = Home::new();
    let (mut b, sid, mut remote) = shared_session(&home, 3, caps());

    let first = b.editor.request("session/prompt", prompt(&sid, "first from the editor"));
    // The two prompts come over different connections: send the second once the first has
    // started (its echo reached the remote), or the bridge may well see the remote's first.
    remote.until("the echo of the first prompt", |m| {
        m["params"]["update"]["sessionUpdate"] == "user_message_chunk"
    });
    let second = remote.request("session/prompt", prompt(&sid, "second from the remote"));
    let (r1, before_first) = b.editor.response_to(&first);
    assert_eq!(r1["result"]["stopReason"], "end_turn");
    // Nothing of the second turn reached the editor before the first turn ended.
    assert!(
        !before_first.iter().any(|m| m["params"]["update"]["sessionUpdate"] == "user_message_chunk"),
        "the second prompt started while the first was running"
    );
    let ids: Vec<&str> = before_first
        .iter()
        .filter_map(|m| m["params"]["update"]["messageId"].as_str())
        .filter(|id| id.starts_with("msg_"))
        .collect();
    assert!(ids.windows(2).all(|w| w[0] == w[1]), "chunks of two turns interleaved: {ids:?}");
    let (r2, _) = remote.response_to(&second);
    assert_eq!(r2["result"]["stopReason"], "end_turn");
    // The editor then sees the second turn: its echo, then its chunks.
    let (echo, _) = b.editor.until("the echo of the second prompt", |m| {
        m["params"]["update"]["sessionUpdate"] == "user_message_chunk"
    });
    assert_eq!(echo["params"]["update"]["content"]["text"], "second from the remote");
}

#[test]
fn a_headless_session_writes_inside_its_cwd_and_is_refused_outside() {
    let home = Home::new();
    let project = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let b = Bridge::start(&home, &demo_agent(0));
    let mut remote = b.remote();
    // Even a remote advertising fs is not asked: only the editor serves fs, else the bridge.
    initialize(&mut remote, json!({"fs": {"readTextFile": true, "writeTextFile": true}}));
    let sid = new_session(&mut remote, project.path());
    let escape = outside.path().join("escaped.txt");
    let text = format!("write:inside.txt write:{} read:../../etc/passwd", escape.display());
    let (resp, seen) = remote.call("session/prompt", prompt(&sid, &text));
    assert_eq!(resp["result"]["stopReason"], "end_turn", "{resp}");
    assert!(
        !seen.iter().any(|m| m["method"].as_str().is_some_and(|m| m.starts_with("fs/"))),
        "fs went to the remote"
    );
    let written = std::fs::read_to_string(project.path().join("inside.txt")).unwrap();
    assert!(written.contains("demo agent"), "{written}");
    assert!(!escape.exists(), "a write outside the session's cwd landed");
    let said = agent_text(&seen);
    assert!(said.contains("Wrote inside.txt"), "{said}");
    assert!(said.contains(&format!("Could not write {}", escape.display())), "{said}");
    assert!(said.contains("Could not read ../../etc/passwd: path is outside"), "{said}");
    let (_, seen) = remote.call("session/prompt", prompt(&sid, "read:inside.txt"));
    assert!(agent_text(&seen).contains("inside.txt has 1 lines"), "{}", agent_text(&seen));
}

#[test]
fn a_permission_nobody_sees_waits_for_the_next_client_and_cancel_withdraws_it() {
    let home = Home::new();
    let b = Bridge::start(&home, &demo_agent(0));
    let mut first = b.remote();
    initialize(&mut first, json!({}));
    let sid = new_session(&mut first, home.path());
    let id = first.request("session/prompt", prompt(&sid, "permission"));
    first.until("the permission", |m| m["method"] == "session/request_permission");
    drop(first);

    // A client attaching later gets the pending request too.
    let mut second = b.remote();
    initialize(&mut second, json!({}));
    let (_, replay) = load(&mut second, &sid, home.path());
    let pending = replay.iter().any(|m| m["method"] == "session/request_permission");
    let req = if pending {
        replay.into_iter().find(|m| m["method"] == "session/request_permission").unwrap()
    } else {
        second.until("the pending permission", |m| m["method"] == "session/request_permission").0
    };
    // session/cancel answers it `cancelled` upstream and withdraws it from every client.
    second.notify("session/cancel", json!({"sessionId": sid}));
    let (cancel, _) = second.until("$/cancel_request", |m| m["method"] == "$/cancel_request");
    assert_eq!(cancel["params"]["requestId"], req["id"]);
    let _ = id;
    // The turn ends `cancelled`; the next prompt works.
    let (r, _) = second.call("session/prompt", prompt(&sid, "hello again"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert!(
        second
            .quiet_for(Duration::from_millis(100))
            .is_none_or(|m| m["method"] != "session/request_permission")
    );
}

/// The first message `peer` receives, as the raw text it arrived as, for which `pick` holds
/// (the ones before it are skipped).
fn raw_until(peer: &mut Peer, what: &str, pick: impl Fn(&str) -> bool) -> String {
    loop {
        let raw = peer.recv_raw(what);
        if pick(&raw) {
            return raw;
        }
    }
}

#[test]
fn messages_pass_through_untouched_but_for_their_ids() {
    let home = Home::new();
    let (mut b, sid, mut remote) = shared_session(&home, 0, caps());

    // Client → agent: params arrive byte for byte (key order, number spellings, `_meta`).
    let params = format!(
        r#"{{"sessionId":"{sid}","z":1,"a":{{"_meta":{{"k":[1.50,2e3,-0.0]}}}},"big":123456789012345678901234567890}}"#
    );
    remote.send_raw(&format!(r#"{{"jsonrpc":"2.0","id":"str-id","method":"_demo/echo","params":{params}}}"#));
    // Agent → clients: an update of an unknown kind reaches every attached client as sent.
    let want = r#"{"sessionUpdate":"zz_future_kind","_meta":{"zcode-test":[1.50,2e3]},"value":123456789012345678901234567890}"#;
    // (Other updates of the new session, such as its commands, may come first, or late on a
    // loaded machine: each peer reads until the messages it waits for.)
    for peer in [&mut b.editor, &mut remote] {
        let raw = raw_until(peer, "the unknown update", |raw| raw.contains("zz_future_kind"));
        assert!(raw.contains(want), "{raw}");
    }
    let answer = raw_until(&mut remote, "the echo", |raw| raw.contains(r#""id":"str-id""#));
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["id"], "str-id");
    assert_eq!(answer["result"]["params"], params.as_str());
}

#[test]
fn fs_requests_go_to_an_editor_that_can_serve_them() {
    let home = Home::new();
    let mut b = Bridge::start(&home, &demo_agent(0));
    initialize(&mut b.editor, json!({"fs": {"readTextFile": true, "writeTextFile": true}}));
    let sid = new_session(&mut b.editor, std::path::Path::new("/nonexistent/project"));
    let id = b.editor.request("session/prompt", prompt(&sid, "read:notes.md"));
    let (req, _) = b.editor.until("fs/read_text_file on the editor", |m| m["method"] == "fs/read_text_file");
    assert_eq!(req["params"]["path"], "/nonexistent/project/notes.md");
    b.editor.send(&json!({"jsonrpc": "2.0", "id": req["id"], "result": {"content": "from the editor\n"}}));
    let (r, seen) = b.editor.response_to(&id);
    assert_eq!(r["result"]["stopReason"], "end_turn");
    assert!(agent_text(&seen).contains("the first is \"from the editor\""), "{}", agent_text(&seen));
}

#[test]
fn an_elicitation_goes_to_every_client_and_the_first_answer_wins() {
    let home = Home::new();
    // Both advertise forms: an elicitation goes only to clients that can show it.
    let forms = json!({"elicitation": {"form": {}}});
    let mut b = Bridge::start(&home, &demo_agent(0));
    initialize(&mut b.editor, forms.clone());
    let sid = new_session(&mut b.editor, home.path());
    let mut remote = b.remote();
    initialize(&mut remote, forms);
    let (r, _) = load(&mut remote, &sid, home.path());
    assert!(r["result"].is_object(), "{r}");
    let id = remote.request("session/prompt", prompt(&sid, "elicit"));
    let (ereq, _) = b.editor.until("the elicitation on the editor", |m| m["method"] == "elicitation/create");
    let (rreq, _) = remote.until("the elicitation on the remote", |m| m["method"] == "elicitation/create");
    // The same request; the remote's copy carries its number (`_meta.zcode.seq`, resume.rs).
    let mut numbered = rreq["params"].clone();
    assert!(numbered["_meta"]["zcode"]["seq"].is_u64(), "{rreq}");
    numbered.as_object_mut().expect("params").remove("_meta");
    assert_eq!(ereq["params"], numbered);
    b.editor.send(&json!({"jsonrpc": "2.0", "id": ereq["id"], "result": {"action": "accept", "content": {"name": "Ada"}}}));
    let (cancel, _) = remote.until("$/cancel_request on the remote", |m| m["method"] == "$/cancel_request");
    assert_eq!(cancel["params"]["requestId"], rreq["id"]);
    let (r, seen) = remote.response_to(&id);
    assert_eq!(r["result"]["stopReason"], "end_turn");
    assert!(agent_text(&seen).contains(r#"You answered {"name":"Ada"}"#), "{}", agent_text(&seen));
}

#[test]
fn terminals_run_locally_for_a_headless_session_and_on_an_editor_that_offers_them() {
    let home = Home::new();
    let mut b = Bridge::start(&home, &demo_agent(0));
    let mut remote = b.remote();
    initialize(&mut remote, json!({"terminal": true}));
    let sid = new_session(&mut remote, home.path());
    let (r, seen) = remote.call("session/prompt", prompt(&sid, "terminal"));
    assert_eq!(r["result"]["stopReason"], "end_turn");
    assert!(
        !seen.iter().any(|m| m["method"] == "terminal/create"),
        "a remote client was asked to run a terminal"
    );
    assert!(
        agent_text(&seen).contains("printed \"zcode terminal says hi\" and exited with 0"),
        "{}",
        agent_text(&seen)
    );

    initialize(&mut b.editor, json!({"terminal": true}));
    let esid = new_session(&mut b.editor, home.path());
    let id = b.editor.request("session/prompt", prompt(&esid, "terminal"));
    let (create, _) = b.editor.until("terminal/create on the editor", |m| m["method"] == "terminal/create");
    assert_eq!(create["params"]["command"], "echo");
    b.editor.send(&json!({"jsonrpc": "2.0", "id": create["id"], "result": {"terminalId": "ed-1"}}));
    let (wait, _) =
        b.editor.until("wait_for_exit on the editor", |m| m["method"] == "terminal/wait_for_exit");
    assert_eq!(wait["params"]["terminalId"], "ed-1");
    b.editor.send(&json!({"jsonrpc": "2.0", "id": wait["id"], "result": {"exitCode": 0, "signal": null}}));
    let (out, _) = b.editor.until("terminal/output on the editor", |m| m["method"] == "terminal/output");
    b.editor.send(&json!({"jsonrpc": "2.0", "id": out["id"], "result": {"output": "from the editor\n", "truncated": false}}));
    let (rel, _) = b.editor.until("terminal/release on the editor", |m| m["method"] == "terminal/release");
    b.editor.send(&json!({"jsonrpc": "2.0", "id": rel["id"], "result": null}));
    let (r, seen) = b.editor.response_to(&id);
    assert_eq!(r["result"]["stopReason"], "end_turn");
    assert!(agent_text(&seen).contains("printed \"from the editor\""), "{}", agent_text(&seen));
}

#[test]
fn a_live_session_loads_from_the_bridge_and_a_closed_one_from_the_agent() {
    let home = Home::new();
    let sid;
    {
        let mut b = Bridge::start(&home, &demo_agent(0));
        initialize(&mut b.editor, caps());
        sid = new_session(&mut b.editor, home.path());
        b.editor.call("session/prompt", prompt(&sid, "first life"));
        let mut remote = b.remote();
        initialize(&mut remote, json!({}));
        let (_, replay) = load(&mut remote, &sid, home.path());
        // Served from the bridge: its own record of the prompt (an uprompt_ message), not the
        // agent's replay.
        let users: Vec<&Value> = replay
            .iter()
            .filter(|m| m["params"]["update"]["sessionUpdate"] == "user_message_chunk")
            .collect();
        assert_eq!(users.len(), 1, "{replay:?}");
        assert!(users[0]["params"]["update"]["messageId"].as_str().unwrap().starts_with("uprompt_"));
        assert!(b.editor.close_then_exited());
    }
    // A new bridge does not hold it: the load goes upstream and the agent replays it.
    let b = Bridge::start(&home, &demo_agent(0));
    let mut remote = b.remote();
    initialize(&mut remote, json!({}));
    let (r, replay) = load(&mut remote, &sid, home.path());
    assert!(r["result"].is_object(), "{r}");
    let text: Vec<&str> =
        replay.iter().filter_map(|m| m["params"]["update"]["content"]["text"].as_str()).collect();
    assert!(text.contains(&"first life"), "{text:?}");
    let (r, _) = remote.call("session/prompt", prompt(&sid, "second life"));
    assert_eq!(r["result"]["stopReason"], "end_turn");
    // A second client loading it now gets the bridge's copy, which holds both lives.
    let mut other = b.remote();
    initialize(&mut other, json!({}));
    let (_, replay) = load(&mut other, &sid, home.path());
    let text: Vec<&str> =
        replay.iter().filter_map(|m| m["params"]["update"]["content"]["text"].as_str()).collect();
    assert!(text.contains(&"first life") && text.contains(&"second life"), "{text:?}");
}

#[test]
fn an_agent_that_can_only_resume_is_resumed() {
    let home = Home::new();
    let mut agent = demo_agent(0);
    agent.push("--resume-only".into());
    let sid;
    {
        let mut b = Bridge::start(&home, &agent);
        let init = initialize(&mut b.editor, caps());
        assert_eq!(
            init["agentCapabilities"]["loadSession"], true,
            "clients can always load through the bridge"
        );
        sid = new_session(&mut b.editor, home.path());
        b.editor.call("session/prompt", prompt(&sid, "before"));
        assert!(b.editor.close_then_exited());
    }
    let b = Bridge::start(&home, &agent);
    let mut remote = b.remote();
    initialize(&mut remote, json!({}));
    let (r, _) = load(&mut remote, &sid, home.path());
    assert!(r["result"].is_object(), "session/load was not turned into session/resume: {r}");
    let (r, _) = remote.call("session/prompt", prompt(&sid, "after"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
}

#[test]
fn a_resume_forwarded_as_a_load_carries_mcp_servers() {
    // `mcpServers` is optional in `session/resume` and required in `session/load` (ACP v1):
    // codex-acp, claude-agent-acp and gemini-cli refused the load a resume was turned into.
    let home = Home::new();
    let record = home.path().join("received.jsonl");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/recording_agent.py");
    let agent: Vec<String> = vec![
        "/usr/bin/python3".into(),
        script.display().to_string(),
        "--record".into(),
        record.display().to_string(),
    ];
    let b = Bridge::start(&home, &agent);
    let mut remote = b.remote();
    initialize(&mut remote, json!({}));
    let cwd = home.path().display().to_string();
    let (r, _) = remote.call("session/resume", json!({"sessionId": "earlier_1", "cwd": cwd}));
    assert!(r["result"].is_object(), "the resume, forwarded as a load, was refused: {r}");
    let (r, _) = remote.call("session/prompt", prompt("earlier_1", "after the resume"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    // A client's own servers go as they were.
    let servers = json!([{"name": "x", "command": "/bin/true", "args": [], "env": []}]);
    let (r, _) =
        remote.call("session/resume", json!({"sessionId": "earlier_2", "cwd": cwd, "mcpServers": servers}));
    assert!(r["result"].is_object(), "{r}");
    let received: Vec<Value> = std::fs::read_to_string(&record)
        .expect("the agent's record")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let loads: Vec<&Value> = received.iter().filter(|m| m["method"] == "session/load").collect();
    assert_eq!(loads.len(), 2, "{received:?}");
    assert_eq!(loads[0]["params"], json!({"sessionId": "earlier_1", "cwd": cwd, "mcpServers": []}));
    assert_eq!(loads[1]["params"]["mcpServers"], servers);
    assert!(!received.iter().any(|m| m["method"] == "session/resume"), "the agent offers load only");
}
