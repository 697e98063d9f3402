//! Resume by number (issue 31): every session message a remote client gets carries
//! `_meta.zcode.seq` and `.epoch`; a `session/load` with `_meta.zcode.afterSeq` and `.epoch`
//! replays exactly what followed, then the live stream, or falls back to the tail replay
//! saying why (`epoch`, `gap`); a pending permission is delivered again and answering it works;
//! the same through the hub's relay, and across the hub's self-upgrade restart. The editor's
//! bytes carry no numbers.

use serde_json::{Value, json};
use zcode_tests::hub::{AUTH, Hub, http, hub_pid, hub_port, listed, wait_instances, wait_until};
use zcode_tests::{Bridge, Home, Peer, demo_agent, initialize, new_session, prompt, shared_session};

/// A message's `_meta.zcode.seq`, if it has one.
fn seq(m: &Value) -> Option<u64> {
    m["params"]["_meta"]["zcode"]["seq"].as_u64()
}

fn turn_end(m: &Value) -> bool {
    m["method"] == "_zcode/turn_end"
}

fn is_chunk(m: &Value) -> bool {
    m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
}

/// `session/load` of `sid` with `_meta.zcode` set to `zcode`: (result, messages before it).
fn load(p: &mut Peer, sid: &str, cwd: &std::path::Path, zcode: Value) -> (Value, Vec<Value>) {
    let (r, seen) = p.call(
        "session/load",
        json!({"sessionId": sid, "cwd": cwd, "mcpServers": [], "_meta": {"zcode": zcode}}),
    );
    assert!(r["result"].is_object(), "session/load failed: {r}");
    (r["result"].clone(), seen)
}

/// The numbering a load's result reports: (epoch, lastSeq).
fn numbering(result: &Value) -> (String, u64) {
    let meta = &result["_meta"]["zcode"]["replayMeta"];
    assert_eq!(meta, &result["replayMeta"], "replayMeta at the top level and under _meta.zcode");
    let epoch = meta["epoch"].as_str().unwrap_or_else(|| panic!("no replayMeta.epoch: {result}"));
    let last = meta["lastSeq"].as_u64().unwrap_or_else(|| panic!("no replayMeta.lastSeq: {result}"));
    (epoch.to_owned(), last)
}

/// Asserts `msgs` are numbered `from`, `from + 1`, … in `epoch`, every one of them.
fn assert_contiguous(msgs: &[Value], from: u64, epoch: &str) {
    for (i, m) in msgs.iter().enumerate() {
        assert_eq!(
            seq(m),
            Some(from + i as u64),
            "message {i} out of sequence (expected {}): {m}",
            from + i as u64
        );
        assert_eq!(m["params"]["_meta"]["zcode"]["epoch"], epoch, "{m}");
    }
}

/// Reads numbered messages until the turn's end; the unnumbered ones (answers) are left out.
fn numbered_until_turn_end(p: &mut Peer, what: &str) -> Vec<Value> {
    let (end, seen) = p.until(what, turn_end);
    seen.into_iter().chain([end]).filter(|m| m.get("method").is_some()).collect()
}

#[test]
fn remote_messages_are_numbered_the_editor_gets_none_and_a_resume_repeats_them_exactly() {
    let home = Home::new();
    let (mut b, sid, mut watcher) = shared_session(&home, 0, json!({}));
    // The watcher attached with a plain load: its result names the numbering.
    let mut phone = b.remote();
    initialize(&mut phone, json!({}));
    let (r, _) = load(&mut phone, &sid, home.path(), json!({}));
    let (epoch, before) = numbering(&r);

    let id = b.editor.request("session/prompt", prompt(&sid, "hello numbers"));
    let (answer, editor_saw) = b.editor.response_to(&id);
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert!(!editor_saw.is_empty());
    for m in &editor_saw {
        assert!(m["params"]["_meta"]["zcode"].get("seq").is_none(), "the editor got a number: {m}");
    }
    let mut live = numbered_until_turn_end(&mut watcher, "the turn on the watcher");
    live.retain(|m| seq(m) > Some(before));
    assert!(live.iter().any(is_chunk), "{live:?}");
    assert_contiguous(&live, before + 1, &epoch);
    let last = seq(live.last().expect("a message")).expect("numbered");

    // A resume from the phone's number gives the same messages, byte for byte in meaning.
    let mut again = b.remote();
    initialize(&mut again, json!({}));
    let (r, replayed) = load(&mut again, &sid, home.path(), json!({"afterSeq": before, "epoch": epoch}));
    assert_eq!(r["replayMeta"]["resumed"], true, "{r}");
    assert_eq!(numbering(&r), (epoch.clone(), last));
    assert_eq!(replayed, live, "the resume differs from what was sent live");
    // From 0: the session's first message is number 1, and the phone's part is the tail.
    let (r, all) = load(&mut again, &sid, home.path(), json!({"afterSeq": 0, "epoch": epoch}));
    assert_eq!(r["replayMeta"]["resumed"], true, "{r}");
    assert_contiguous(&all, 1, &epoch);
    assert_eq!(all[before as usize..], live[..]);
}

/// A long turn streams; a phone reads part of it, leaves, and a new connection resumes from
/// its last number: exactly what followed, then the live stream, none twice, none missing,
/// compared with a client attached throughout.
fn resume_mid_stream(home: &Home, b: &mut Bridge, sid: &str, connect: &dyn Fn() -> Peer) {
    let mut watcher = b.remote();
    initialize(&mut watcher, json!({}));
    load(&mut watcher, sid, home.path(), json!({"limit": 0}));
    let mut phone = connect();
    initialize(&mut phone, json!({}));
    let (r, _) = load(&mut phone, sid, home.path(), json!({"limit": 0}));
    let (epoch, _) = numbering(&r);

    // `hold`: the turn ends only on a cancel, so the resume lands in the middle of it.
    let id = b.editor.request("session/prompt", prompt(sid, "long stream then hold"));
    let mut got = Vec::new();
    while got.iter().filter(|m| is_chunk(m)).count() < 40 {
        let m = phone.recv("the long turn on the phone");
        assert!(!turn_end(&m), "the turn ended before the phone left: {m}");
        got.push(m);
    }
    let after = seq(got.last().expect("a message")).expect("numbered");
    phone.hang_up();

    let mut back = connect();
    initialize(&mut back, json!({}));
    let (r, mut resumed) = load(&mut back, sid, home.path(), json!({"afterSeq": after, "epoch": epoch}));
    assert_eq!(r["replayMeta"]["resumed"], true, "{r}");
    assert!(r["replayMeta"].get("reason").is_none(), "{r}");
    assert!(!resumed.iter().any(turn_end), "the turn ended before the resume");
    b.editor.notify("session/cancel", json!({"sessionId": sid}));
    resumed.extend(numbered_until_turn_end(&mut back, "the rest of the turn after the resume"));
    assert_contiguous(&resumed, after + 1, &epoch);

    let all = numbered_until_turn_end(&mut watcher, "the whole turn on the watcher");
    let expected: Vec<Value> = all.into_iter().filter(|m| seq(m) > Some(after)).collect();
    assert_eq!(
        resumed.len(),
        expected.len(),
        "resumed {} messages, the watcher got {}",
        resumed.len(),
        expected.len()
    );
    assert_eq!(resumed, expected, "the resumed stream differs from the live one");
    let (answer, _) = b.editor.response_to(&id);
    assert_eq!(answer["result"]["stopReason"], "cancelled", "{answer}");
}

#[test]
fn a_resume_mid_stream_gives_exactly_what_followed_then_the_live_stream() {
    let home = Home::new();
    let (mut b, sid, _first) = shared_session(&home, 3, json!({}));
    let port = b.port;
    resume_mid_stream(&home, &mut b, &sid, &|| {
        Peer::connect_ws(port, "/acp", Some(zcode_tests::TEST_TOKEN)).expect("remote connects")
    });
}

#[test]
fn a_resume_through_the_hubs_relay_works_the_same() {
    let home = Home::new();
    let hub = Hub::start(&home, &[]);
    let mut b = Bridge::start_env(&home, &demo_agent(3), &[("ZCODE_ACP_HEARTBEAT_MS", "200")]);
    let bid = b.id();
    wait_instances(hub.port, "the bridge to register", |l| listed(l, &bid));
    initialize(&mut b.editor, json!({}));
    let sid = new_session(&mut b.editor, home.path());
    resume_mid_stream(&home, &mut b, &sid, &|| hub.connect(&bid).expect("the relay accepts"));
}

#[test]
fn a_resume_it_cannot_fill_falls_back_to_the_tail_replay_and_says_why() {
    let home = Home::new();
    let mut b = Bridge::start_env(&home, &demo_agent(0), &[("ZCODE_ACP_TEST_BACKLOG", "5")]);
    initialize(&mut b.editor, json!({}));
    let sid = new_session(&mut b.editor, home.path());
    let (r, _) = b.editor.call("session/prompt", prompt(&sid, "remember the walrus"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let mut phone = b.remote();
    initialize(&mut phone, json!({}));
    let (r, _) = load(&mut phone, &sid, home.path(), json!({"limit": 0}));
    let (epoch, last) = numbering(&r);
    assert!(last > 6, "the turn numbered only {last} messages");

    // Another numbering (a bridge restart, say): the tail replay, reason "epoch".
    let (r, tail) = load(&mut phone, &sid, home.path(), json!({"afterSeq": 3, "epoch": "not-this-one"}));
    assert_eq!(r["replayMeta"]["resumed"], false, "{r}");
    assert_eq!(r["replayMeta"]["reason"], "epoch", "{r}");
    assert_eq!(numbering(&r), (epoch.clone(), last));
    assert!(zcode_tests::agent_text(&tail).contains("remember the walrus"), "no tail replay: {tail:?}");
    assert!(tail.iter().all(|m| seq(m).is_none()), "the tail replay is not numbered");

    // Older than what is held (5 messages here): the tail replay, reason "gap".
    let (r, tail) =
        load(&mut phone, &sid, home.path(), json!({"afterSeq": last - 6, "epoch": epoch, "limit": 500}));
    assert_eq!(r["replayMeta"]["resumed"], false, "{r}");
    assert_eq!(r["replayMeta"]["reason"], "gap", "{r}");
    assert!(zcode_tests::agent_text(&tail).contains("remember the walrus"), "no tail replay: {tail:?}");
    // Ahead of the numbering: a gap too.
    let (r, _) = load(&mut phone, &sid, home.path(), json!({"afterSeq": last + 1, "epoch": epoch}));
    assert_eq!(r["replayMeta"]["reason"], "gap", "{r}");
    // What is still held resumes.
    let (r, held) = load(&mut phone, &sid, home.path(), json!({"afterSeq": last - 5, "epoch": epoch}));
    assert_eq!(r["replayMeta"]["resumed"], true, "{r}");
    assert_contiguous(&held, last - 4, &epoch);
    assert_eq!(held.len(), 5);

    // A malformed ask is refused, saying what is wrong.
    let (r, _) = phone.call(
        "session/load",
        json!({"sessionId": sid, "cwd": home.path(), "mcpServers": [], "_meta": {"zcode": {"afterSeq": "3"}}}),
    );
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(r["error"]["message"].as_str().expect("a message").contains("afterSeq"), "{r}");
}

#[test]
fn a_pending_permission_is_delivered_again_on_resume_and_answering_it_ends_the_turn() {
    let home = Home::new();
    let (b, sid, mut phone) = shared_session(&home, 0, json!({}));
    let mut first = b.remote();
    initialize(&mut first, json!({}));
    let (r, _) = load(&mut first, &sid, home.path(), json!({"limit": 0}));
    let (epoch, _) = numbering(&r);
    let _id = phone.request("session/prompt", prompt(&sid, "permission please"));
    let (ask, _) = first.until("the permission", |m| m["method"] == "session/request_permission");
    let n = seq(&ask).unwrap_or_else(|| panic!("the permission request is not numbered: {ask}"));
    assert_eq!(ask["params"]["_meta"]["zcode"]["epoch"], epoch);
    first.hang_up();

    // Resumed after the request's number: delivered again, same id, same number.
    let mut second = b.remote();
    initialize(&mut second, json!({}));
    let (r, seen) = load(&mut second, &sid, home.path(), json!({"afterSeq": n, "epoch": epoch}));
    assert_eq!(r["replayMeta"]["resumed"], true, "{r}");
    assert!(seen.is_empty(), "nothing followed the request: {seen:?}");
    let (again, _) = second.until("the permission again", |m| m["method"] == "session/request_permission");
    assert_eq!(again, ask, "not the same request");
    second.hang_up();

    // Resumed from before it: it comes in its place, once; answering it ends the turn.
    let mut third = b.remote();
    initialize(&mut third, json!({}));
    let (r, seen) = load(&mut third, &sid, home.path(), json!({"afterSeq": n - 1, "epoch": epoch}));
    assert_eq!(r["replayMeta"]["resumed"], true, "{r}");
    assert_eq!(seen, vec![ask.clone()]);
    let answer = json!({"outcome": {"outcome": "selected", "optionId": "allow"}});
    third.send(&json!({"jsonrpc": "2.0", "id": ask["id"], "result": answer}));
    let rest = numbered_until_turn_end(&mut third, "the turn's end after the answer");
    assert!(zcode_tests::agent_text(&rest).contains("Permission granted"), "{rest:?}");
    assert_eq!(rest.last().expect("the turn end")["params"]["stopReason"], "end_turn");
    assert!(rest.iter().all(|m| m["method"] != "session/request_permission"), "delivered twice: {rest:?}");
    assert_contiguous(&rest, n + 1, &epoch);
}

/// A hub self-upgrade (`POST /api/upgrade`, a new build on disk) while a phone follows a long
/// turn through its relay: the phone keeps what came before the close (1012), reconnects
/// through the successor on the same port and resumes from its last number: `resumed: true`,
/// then every message to the turn's end, none missing, none twice, the same as a client
/// attached straight to the bridge throughout.
#[test]
fn a_hub_self_upgrade_mid_stream_loses_nothing_the_phone_resumes_through_the_successor() {
    /// The ticks of the demo agent's `long` turn.
    const TICKS: usize = 600;
    let home = Home::new();
    // The hub runs from a copy a new build is installed over (by rename, like an install).
    let disk = tempfile::tempdir().expect("temp dir");
    let exe = disk.path().join("zcode-acp");
    std::fs::copy(zcode_tests::bin(), &exe).expect("copy the binary");
    let mut hub = Hub::start_exe(&home, &exe, &[]);
    let port = hub.port;
    let mut b = Bridge::start_env(&home, &demo_agent(5), &[("ZCODE_ACP_HEARTBEAT_MS", "200")]);
    let bid = b.id();
    wait_instances(port, "the bridge to register", |l| listed(l, &bid));
    initialize(&mut b.editor, json!({}));
    let sid = new_session(&mut b.editor, home.path());
    let mut watcher = b.remote();
    initialize(&mut watcher, json!({}));
    load(&mut watcher, &sid, home.path(), json!({"limit": 0}));
    // The watcher, attached first, is sent a message the phone's numbering starts after (as
    // it may be sent the agent's commands, which follow session/new's answer, under load): the
    // agent's update precedes its answer, and the router numbers and fans it out at once.
    let (r, seen) = b.editor.call("session/set_mode", json!({"sessionId": sid, "modeId": "default"}));
    assert!(r["result"].is_object(), "{r}");
    assert!(seen.iter().any(|m| m["params"]["update"]["sessionUpdate"] == "current_mode_update"), "{seen:?}");
    let mut phone = hub.connect(&bid).expect("the relay accepts");
    initialize(&mut phone, json!({}));
    let (r, _) = load(&mut phone, &sid, home.path(), json!({"limit": 0}));
    let (epoch, start) = numbering(&r);

    // `hold`: after its last tick the turn waits for a cancel, so it cannot end before the
    // restart however slow the machine (the test would prove nothing).
    let turn = b.editor.request("session/prompt", prompt(&sid, "long stream then hold"));
    let mut got = Vec::new();
    while got.iter().filter(|m| is_chunk(m)).count() < 40 {
        got.push(phone.recv("the long turn on the phone"));
    }
    let new_build = exe.with_extension("new");
    let mut bytes = std::fs::read(&exe).expect("read the binary");
    bytes.extend_from_slice(b"another build");
    std::fs::write(&new_build, bytes).expect("write the new build");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&new_build, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::rename(&new_build, &exe).expect("install the new build");
    let r = http(port, "POST", "/api/upgrade", &[AUTH], b"").json();
    assert_eq!((&r["restarting"], &r["reason"]), (&json!(true), &json!("fingerprint")), "{r}");
    // What reached the phone before the hub went is the phone's.
    while let Some(m) = phone.quiet_for(zcode_tests::WAIT) {
        got.push(m);
    }
    assert_eq!(phone.closed, Some(Some(1012)), "the phone is told: service restart");
    let after = got.iter().filter_map(seq).max().expect("numbered messages");
    assert!(!got.iter().any(turn_end), "the turn ended before the restart: the test proves nothing");

    assert!(hub.wait_exit(zcode_tests::WAIT).is_some_and(|s| s.success()), "the old hub exits cleanly");
    wait_until("the successor hub on the same port", || {
        hub_pid(&home).is_some_and(|p| p != hub.pid())
            && hub_port(&home) == Some(port)
            && http(port, "GET", "/api/health", &[], b"").status == 200
    });
    wait_instances(port, "the bridge re-registered with the successor", |l| listed(l, &bid));
    let mut back = hub.connect(&bid).expect("the successor's relay accepts");
    initialize(&mut back, json!({}));
    let (r, mut resumed) = load(&mut back, &sid, home.path(), json!({"afterSeq": after, "epoch": epoch}));
    assert_eq!(r["replayMeta"]["resumed"], true, "{r}");
    assert!(r["replayMeta"].get("reason").is_none(), "{r}");
    let last_tick = |m: &Value| m["params"]["update"]["content"]["text"] == format!("tick {TICKS} ");
    if !resumed.iter().any(last_tick) {
        let (m, more) = back.until("the last tick after the resume", last_tick);
        resumed.extend(more.into_iter().filter(|m| m.get("method").is_some()).chain([m]));
    }
    b.editor.notify("session/cancel", json!({"sessionId": sid}));
    resumed.extend(numbered_until_turn_end(&mut back, "the rest of the turn after the resume"));
    assert_eq!(resumed.last().expect("the turn end")["params"]["stopReason"], "cancelled");

    // The phone's whole view of the turn: numbered from its attach on, each number once.
    let mut phone_saw: Vec<Value> = got.into_iter().filter(|m| m.get("method").is_some()).collect();
    phone_saw.extend(resumed);
    assert_contiguous(&phone_saw, start + 1, &epoch);
    // The watcher's stream from the phone's attach on (it attached first: it may hold more).
    let all: Vec<Value> = numbered_until_turn_end(&mut watcher, "the whole turn on the watcher")
        .into_iter()
        .filter(|m| seq(m) > Some(start))
        .collect();
    assert_eq!(
        phone_saw.len(),
        all.len(),
        "the phone got {} messages, the watcher {}",
        phone_saw.len(),
        all.len()
    );
    assert_eq!(phone_saw, all, "the phone's stream differs from the watcher's");
    assert_eq!(zcode_tests::agent_text(&all).matches("tick ").count(), TICKS);
    let (answer, _) = b.editor.response_to(&turn);
    assert_eq!(answer["result"]["stopReason"], "cancelled", "{answer}");
    // The successor is not the test's child: it is stopped here.
    if let Some(pid) = hub_pid(&home) {
        zcode_tests::kill_in_home(pid, home.path(), false);
        zcode_tests::hub::wait_gone(pid, zcode_tests::WAIT);
    }
}
