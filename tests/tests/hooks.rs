//! Hooks run by the bridge (`config.json` `hooks`), with real shell hooks, the demo agent and
//! the ACP SDK example agent: each event fires once with its stdin, matchers, the deciding
//! events (UserPromptSubmit blocks or adds context; PermissionRequest allows, denies, or loses
//! to a phone that answers first), disabled trees, and hooks that hang or flood.
#![allow(clippy::unwrap_used)] // Setup helpers outside #[test] fns: a failed unwrap is a failed test.

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use zcode_tests::hub::wait_until;
use zcode_tests::{
    Bridge, Home, Peer, agent_text, alive, demo_agent, initialize, new_session, prompt, sdk_example_agent,
};

/// A project directory inside the home (the sessions' cwd) and where hooks write.
fn dirs(home: &Home) -> (PathBuf, PathBuf) {
    let (proj, out) = (home.path().join("proj"), home.path().join("out"));
    std::fs::create_dir_all(&proj).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    (proj, out)
}

fn write_hooks(home: &Home, tree: Value) {
    let text = serde_json::to_string_pretty(&json!({"hooks": tree})).unwrap();
    std::fs::write(home.path().join("config.json"), text).unwrap();
}

fn cmd(command: String) -> Value {
    json!({"type": "command", "command": command})
}

/// A hook that appends its stdin (one JSON line) to `<out>/<name>.jsonl`.
fn log_to(out: &Path, name: &str) -> Value {
    let f = out.join(format!("{name}.jsonl"));
    cmd(format!("line=$(cat); printf '%s\\n' \"$line\" >> '{}'", f.display()))
}

fn logged(out: &Path, name: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(out.join(format!("{name}.jsonl"))).unwrap_or_default();
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

fn is_run(m: &Value) -> bool {
    m["method"] == "session/update" && m["params"]["update"]["sessionUpdate"] == "zcode_hook_run"
}

/// Reads until `n` hook-run records have arrived (the messages in between are returned too).
fn runs(p: &mut Peer, n: usize, mut seen: Vec<Value>) -> (Vec<Value>, Vec<Value>) {
    while seen.iter().filter(|m| is_run(m)).count() < n {
        let what = format!("{n} hook-run records; so far: {seen:?}");
        seen.push(p.recv(&what));
    }
    let records = seen.iter().filter(|m| is_run(m)).map(|m| m["params"]["update"].clone()).collect();
    (records, seen)
}

fn remote_session(b: &Bridge, cwd: &Path) -> (Peer, String) {
    let mut remote = b.remote();
    initialize(&mut remote, json!({}));
    let sid = new_session(&mut remote, cwd);
    (remote, sid)
}

fn answer(p: &mut Peer, req: &Value, option: &str) {
    p.send(&json!({"jsonrpc": "2.0", "id": req["id"], "result": {"outcome": {"outcome": "selected", "optionId": option}}}));
}

#[test]
fn each_event_fires_once_with_its_documented_stdin() {
    let home = Home::new();
    let (proj, out) = dirs(&home);
    let env_file = out.join("env.txt");
    let env_hook = cmd(format!(
        "printf '%s %s %s %s' \"$ZCODE_ACP_HOOK_EVENT\" \"$ZCODE_ACP_SESSION_ID\" \"$ZCODE_ACP_INSTANCE_ID\" \"${{ZCODE_ACP_REMOTE_TOKEN:-no-token}}\" > '{}'",
        env_file.display()
    ));
    let tools = "^(think|edit)$";
    write_hooks(
        &home,
        json!({"events": {
            "SessionStart": [{"hooks": [log_to(&out, "SessionStart"), env_hook]}],
            "UserPromptSubmit": [{"hooks": [log_to(&out, "UserPromptSubmit")]}],
            "PreToolUse": [{"matcher": tools, "hooks": [log_to(&out, "PreToolUse")]}],
            "PermissionRequest": [{"hooks": [log_to(&out, "PermissionRequest")]}],
            "PostToolUse": [{"matcher": tools, "hooks": [log_to(&out, "PostToolUse")]}],
            "PostToolUseFailure": [{"hooks": [log_to(&out, "PostToolUseFailure")]}],
            "Stop": [{"hooks": [log_to(&out, "Stop")]}],
        }}),
    );
    let mut b = Bridge::start(&home, &demo_agent(0));
    initialize(&mut b.editor, json!({}));
    let (mut remote, sid) = remote_session(&b, &proj);
    let id = remote.request("session/prompt", prompt(&sid, "permission please"));
    let (req, mut seen) = remote.until("the permission", |m| m["method"] == "session/request_permission");
    answer(&mut remote, &req, "reject");
    let (resp, more) = remote.response_to(&id);
    assert_eq!(resp["result"]["stopReason"], "end_turn", "{resp}");
    assert!(agent_text(&more).contains("Permission denied (reject)"), "no hook decided: the client did");
    seen.extend(more);
    // 1 SessionStart (2 hooks) + 1 prompt + 2 tool calls + 1 permission + 1 completion + 1
    // failure + 1 stop.
    let (records, _) = runs(&mut remote, 9, seen);
    assert!(
        records.iter().all(|r| r["exitCode"] == 0 && r["timedOut"] == false && r["durationMs"].is_u64()),
        "{records:?}"
    );

    let cwd = proj.display().to_string();
    for (event, n) in [
        ("SessionStart", 1),
        ("UserPromptSubmit", 1),
        ("PreToolUse", 2),
        ("PermissionRequest", 1),
        ("PostToolUse", 1),
        ("PostToolUseFailure", 1),
        ("Stop", 1),
    ] {
        let got = logged(&out, event);
        assert_eq!(got.len(), n, "{event}: {got:?}");
        for e in &got {
            assert_eq!(e["hook_event_name"], event);
            assert_eq!(e["session_id"], sid.as_str());
            assert_eq!(e["cwd"], cwd.as_str());
        }
        assert_eq!(
            records.iter().filter(|r| r["event"] == event).count(),
            n + usize::from(event == "SessionStart")
        );
    }
    assert_eq!(logged(&out, "SessionStart")[0]["source"], "new");
    assert_eq!(logged(&out, "UserPromptSubmit")[0]["prompt"], "permission please");
    let kinds: Vec<Value> = logged(&out, "PreToolUse").iter().map(|e| e["tool_kind"].clone()).collect();
    assert!(kinds.contains(&json!("think")) && kinds.contains(&json!("edit")), "{kinds:?}");
    let perm = &logged(&out, "PermissionRequest")[0];
    assert_eq!(perm["tool_name"], "Touch demo.txt (needs your permission)");
    assert_eq!(perm["permission_options"].as_array().map(Vec::len), Some(3), "{perm}");
    let post = &logged(&out, "PostToolUse")[0];
    assert_eq!(
        (post["tool_kind"].clone(), post["tool_status"].clone()),
        (json!("think"), json!("completed"))
    );
    assert_eq!(post["tool_response"][0]["content"]["text"], "2 words", "{post}");
    let failed = &logged(&out, "PostToolUseFailure")[0];
    assert_eq!(
        (failed["tool_kind"].clone(), failed["tool_status"].clone()),
        (json!("edit"), json!("failed"))
    );
    assert_eq!(logged(&out, "Stop")[0]["stop_reason"], "end_turn");
    let env = std::fs::read_to_string(&env_file).unwrap();
    assert_eq!(
        env,
        format!("SessionStart {sid} {} no-token", b.editor.pid()),
        "instance and session, never the token"
    );

    // The runs are journaled: a client loading the session later sees them in the history.
    let mut late = b.remote();
    initialize(&mut late, json!({}));
    let (r, replay) = late.call("session/load", json!({"sessionId": sid, "cwd": proj, "mcpServers": []}));
    assert!(r["result"].is_object(), "{r}");
    assert_eq!(replay.iter().filter(|m| is_run(m)).count(), 9);
}

#[test]
fn permission_hooks_allow_deny_or_leave_it_to_the_clients_sdk_example_agent() {
    let agent = vec!["node".to_owned(), sdk_example_agent().display().to_string()];
    for (hook, text, decided) in [
        ("echo '{\"decision\":\"allow\"}'", "successfully updated", Some(("allow", "allow"))),
        (
            "echo 'checking'; echo '{\"decision\":\"deny\"}'",
            "prefer not to make that change",
            Some(("deny", "reject")),
        ),
        ("echo 'no opinion'", "", None),
    ] {
        let home = Home::new();
        let (proj, out) = dirs(&home);
        write_hooks(
            &home,
            json!({"events": {
                "PermissionRequest": [{"matcher": "^edit$", "hooks": [cmd(hook.into())]},
                                      {"matcher": "^read$", "hooks": [log_to(&out, "never")]}],
                "PreToolUse": [{"matcher": "Reading project", "hooks": [log_to(&out, "PreToolUse")]}],
            }}),
        );
        let mut b = Bridge::start(&home, &agent);
        initialize(&mut b.editor, json!({}));
        let (mut remote, sid) = remote_session(&b, &proj);
        let id = remote.request("session/prompt", prompt(&sid, "Hello"));
        let (req, mut seen) = remote.until("the permission", |m| m["method"] == "session/request_permission");
        let Some((decision, option)) = decided else {
            // No decision: the request is the clients' as it would be without hooks.
            answer(&mut remote, &req, "allow");
            let (resp, more) = remote.response_to(&id);
            seen.extend(more);
            assert_eq!(resp["result"]["stopReason"], "end_turn");
            assert!(agent_text(&seen).contains("successfully updated"), "{}", agent_text(&seen));
            let (records, _) = runs(&mut remote, 2, seen);
            let perm = records.iter().find(|r| r["event"] == "PermissionRequest").expect("the hook ran");
            assert!(perm.get("answeredBy").is_none() && perm["stdout"] == "no opinion\n", "{perm}");
            continue;
        };
        // The hook answers: the client's copy is withdrawn.
        let (cancel, more) = remote.until("$/cancel_request", |m| m["method"] == "$/cancel_request");
        seen.extend(more);
        assert_eq!(cancel["params"]["requestId"], req["id"]);
        let (resp, more) = remote.response_to(&id);
        seen.extend(more);
        assert_eq!(resp["result"]["stopReason"], "end_turn");
        assert!(agent_text(&seen).contains(text), "{decision}: {}", agent_text(&seen));
        let (records, _) = runs(&mut remote, 2, seen);
        let perm = records.iter().find(|r| r["event"] == "PermissionRequest").expect("the hook's record");
        assert_eq!(
            (perm["decision"].as_str(), perm["optionId"].as_str(), perm["answeredBy"].as_str()),
            (Some(decision), Some(option), Some("hook")),
            "{perm}"
        );
        // Matchers: the read tool call matched PreToolUse by its title; no read permission hook ran.
        let pre = logged(&out, "PreToolUse");
        assert_eq!(pre.len(), 1, "{pre:?}");
        assert_eq!(
            (pre[0]["tool_kind"].clone(), pre[0]["tool_input"]["path"].clone()),
            (json!("read"), json!("/project/README.md"))
        );
        assert!(logged(&out, "never").is_empty());
    }
}

#[test]
fn a_phone_that_answers_first_wins_over_a_permission_hook() {
    let home = Home::new();
    let (proj, out) = dirs(&home);
    let go = out.join("go");
    // The hook denies, but only once the test lets it: after the phone has answered.
    let hook =
        format!("while [ ! -e '{}' ]; do sleep 0.05; done; echo '{{\"decision\":\"deny\"}}'", go.display());
    write_hooks(&home, json!({"events": {"PermissionRequest": [{"hooks": [cmd(hook)]}]}}));
    let mut b = Bridge::start(&home, &demo_agent(0));
    initialize(&mut b.editor, json!({}));
    let (mut phone, sid) = remote_session(&b, &proj);
    let (r, _) = b.editor.call("session/load", json!({"sessionId": sid, "cwd": proj, "mcpServers": []}));
    assert!(r["result"].is_object(), "{r}");
    let id = phone.request("session/prompt", prompt(&sid, "permission"));
    let (ereq, _) = b.editor.until("the editor's copy", |m| m["method"] == "session/request_permission");
    let (preq, _) = phone.until("the phone's copy", |m| m["method"] == "session/request_permission");
    answer(&mut phone, &preq, "allow");
    let (cancel, _) = b.editor.until("$/cancel_request on the editor", |m| m["method"] == "$/cancel_request");
    assert_eq!(cancel["params"]["requestId"], ereq["id"]);
    let (resp, seen) = phone.response_to(&id);
    assert_eq!(resp["result"]["stopReason"], "end_turn");
    assert!(agent_text(&seen).contains("Permission granted (allow)"), "{}", agent_text(&seen));
    std::fs::write(&go, "").unwrap();
    let (records, _) = runs(&mut phone, 1, seen);
    assert_eq!(
        (records[0]["decision"].as_str(), records[0]["answeredBy"].as_str()),
        (Some("deny"), Some("client")),
        "the hook's late deny is recorded, not applied: {}",
        records[0]
    );
    // The agent got one answer: a later turn runs normally.
    let (resp, _) = phone.call("session/prompt", prompt(&sid, "again"));
    assert_eq!(resp["result"]["stopReason"], "end_turn");
}

#[test]
fn a_prompt_hook_refuses_prompts_or_adds_context() {
    let home = Home::new();
    let (proj, _) = dirs(&home);
    let hook = r#"in=$(cat); case "$in" in
        *production*) echo "prompts about production are refused" >&2; exit 2;;
        *staging*) echo '{"decision":"block","reason":"not on staging"}';;
        *) echo '{"additionalContext":"CTX-42"}';;
    esac"#;
    write_hooks(&home, json!({"events": {"UserPromptSubmit": [{"hooks": [cmd(hook.into())]}]}}));
    let mut b = Bridge::start(&home, &demo_agent(0));
    initialize(&mut b.editor, json!({}));
    let (mut remote, sid) = remote_session(&b, &proj);
    for (text, reason) in
        [("deploy to production", "prompts about production are refused"), ("staging too", "not on staging")]
    {
        let (resp, seen) = remote.call("session/prompt", prompt(&sid, text));
        let err = &resp["error"];
        assert!(err["message"].as_str().is_some_and(|m| m.contains(reason)), "{resp}");
        assert_eq!(err["data"]["reason"], reason);
        assert!(
            !seen.iter().any(|m| m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"),
            "the agent never saw it"
        );
        let (records, _) = runs(&mut remote, 1, seen.into_iter().filter(is_run).collect());
        assert_eq!(
            (records[0]["decision"].as_str(), records[0]["reason"].as_str()),
            (Some("block"), Some(reason))
        );
    }
    let (resp, seen) = remote.call("session/prompt", prompt(&sid, "hello there"));
    assert_eq!(resp["result"]["stopReason"], "end_turn", "{resp}");
    // The demo agent answers with the prompt's first line: the context block came first.
    assert!(agent_text(&seen).contains("You said: \"CTX-42\""), "{}", agent_text(&seen));
    // The context is the agent's only: the session's title is the user's prompt.
    let title = seen.iter().find(|m| m["params"]["update"]["sessionUpdate"] == "session_info_update");
    assert_eq!(title.map(|m| m["params"]["update"]["title"].clone()), Some(json!("hello there")));
}

#[test]
fn a_disabled_tree_runs_nothing() {
    let home = Home::new();
    let (proj, out) = dirs(&home);
    write_hooks(
        &home,
        json!({"enabled": false, "events": {
            "UserPromptSubmit": [{"hooks": [cmd("exit 2".into())]}],
            "Stop": [{"hooks": [log_to(&out, "Stop")]}],
        }}),
    );
    let mut b = Bridge::start(&home, &demo_agent(0));
    initialize(&mut b.editor, json!({}));
    let (mut remote, sid) = remote_session(&b, &proj);
    let (resp, seen) = remote.call("session/prompt", prompt(&sid, "hello"));
    assert_eq!(resp["result"]["stopReason"], "end_turn", "the refusing hook did not run: {resp}");
    assert!(!seen.iter().any(is_run));
    assert!(logged(&out, "Stop").is_empty());
}

#[test]
fn a_hook_that_times_out_is_killed_with_its_children_and_output_is_capped() {
    let home = Home::new();
    let (proj, out) = dirs(&home);
    let pid_file = out.join("child.pid");
    let late = out.join("late");
    let hang = format!(
        "sh -c 'echo $$ > \"{}\"; while :; do sleep 0.05; done; touch \"{}\"' & sleep 600",
        pid_file.display(),
        late.display()
    );
    write_hooks(
        &home,
        json!({"maxOutputBytes": 1000, "events": {"Stop": [{"hooks": [
            {"type": "command", "command": hang, "timeoutMs": 300},
            cmd("yes | head -c 100000".into()),
        ]}]}}),
    );
    let mut b = Bridge::start(&home, &demo_agent(0));
    initialize(&mut b.editor, json!({}));
    let (mut remote, sid) = remote_session(&b, &proj);
    let (resp, seen) = remote.call("session/prompt", prompt(&sid, "hello"));
    assert_eq!(resp["result"]["stopReason"], "end_turn");
    let (records, _) = runs(&mut remote, 2, seen);
    let timed = records.iter().find(|r| r["timedOut"] == true).expect("the hanging hook timed out");
    assert!(timed["exitCode"].is_null(), "{timed}");
    let child: u32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    wait_until("the hook's child to be killed with its group", || !alive(child));
    assert!(!late.exists());
    let flood = records.iter().find(|r| r["timedOut"] == false).expect("the flood's record");
    assert_eq!((flood["exitCode"].clone(), flood["truncated"].clone()), (json!(0), json!(true)), "{flood}");
    assert_eq!(flood["stdout"].as_str().map(str::len), Some(1000));
}

#[test]
fn a_hook_that_hangs_or_floods_disturbs_no_other_session() {
    let home = Home::new();
    let (proj, out) = dirs(&home);
    // Only in sessions with a `hang-<id>` marker: floods its output, then hangs.
    let hang = format!(
        "if [ -e '{}/hang-'\"$ZCODE_ACP_SESSION_ID\" ]; then echo $$ > '{}/hung.pid'; yes | head -c 20000000; sleep 600; fi",
        out.display(),
        out.display()
    );
    let hook = json!({"type": "command", "command": hang, "timeoutMs": 600_000});
    write_hooks(
        &home,
        json!({"events": {
            "UserPromptSubmit": [{"hooks": [hook.clone()]}],
            "PreToolUse": [{"hooks": [hook]}],
        }}),
    );
    let mut b = Bridge::start(&home, &demo_agent(0));
    initialize(&mut b.editor, json!({}));
    let (mut a, sid_a) = remote_session(&b, &proj);
    std::fs::write(out.join(format!("hang-{sid_a}")), "").unwrap();
    let held = a.request("session/prompt", prompt(&sid_a, "stuck behind its hook"));
    // The shell creates the file before it writes the pid (read in between, it was empty).
    let mut hung = 0;
    wait_until("the hanging hook to write its pid", || {
        let text = std::fs::read_to_string(out.join("hung.pid")).unwrap_or_default();
        hung = text.strip_suffix('\n').and_then(|t| t.parse().ok()).unwrap_or(0);
        hung > 0
    });

    let (mut other, sid_b) = remote_session(&b, &proj);
    for _ in 0..3 {
        let (resp, _) = other.call("session/prompt", prompt(&sid_b, "hello"));
        assert_eq!(resp["result"]["stopReason"], "end_turn", "{resp}");
    }
    // The held prompt is still the client's to cancel: it ends cancelled, not stuck.
    a.notify("session/cancel", json!({"sessionId": sid_a}));
    let (resp, _) = a.response_to(&held);
    assert_eq!(resp["result"]["stopReason"], "cancelled", "{resp}");
    assert!(alive(hung));
    assert!(b.editor.close_then_exited(), "the bridge exits with a hook still running");
    wait_until("the hanging hook to be killed when its bridge stopped", || !alive(hung));
}

#[test]
fn a_malformed_tree_stops_the_agent_start_with_a_clear_error() {
    let home = Home::new();
    write_hooks(&home, json!({"events": {"PreToolUse": [{"matcher": "(", "hooks": []}]}}));
    let mut b = Bridge::start(&home, &demo_agent(0));
    let (resp, _) = b.editor.call("initialize", json!({"protocolVersion": 1, "clientCapabilities": {}}));
    let msg = resp["error"]["message"].as_str().unwrap_or_default().to_owned();
    assert!(
        msg.contains("hooks.events.PreToolUse[0].matcher") && msg.contains("not a valid regular expression"),
        "{resp}"
    );
}
