//! The journal through real bridges: tail replay arithmetic, paging, across lifetimes,
//! seeding from the agent, a replay racing a live turn, concurrent bridges, kill -9, bad input.

use serde_json::{Value, json};
use zcode_tests::{Bridge, Home, Peer, WAIT, demo_agent, initialize, kill9, new_session, prompt};

fn load(p: &mut Peer, sid: &str, cwd: &std::path::Path, limit: Option<Value>) -> (Value, Vec<Value>) {
    let mut params = json!({"sessionId": sid, "cwd": cwd, "mcpServers": []});
    if let Some(l) = limit {
        params["_meta"] = json!({"zcode": {"limit": l}});
    }
    p.call("session/load", params)
}

fn updates(msgs: &[Value]) -> Vec<Value> {
    msgs.iter().filter(|m| m["method"] == "session/update").map(|m| m["params"]["update"].clone()).collect()
}

/// Messages only (state updates — commands, usage, titles — come after them).
fn messages(msgs: &[Value]) -> Vec<Value> {
    const STATE: [&str; 5] = [
        "available_commands_update",
        "current_mode_update",
        "config_option_update",
        "session_info_update",
        "usage_update",
    ];
    updates(msgs)
        .into_iter()
        .filter(|u| !STATE.contains(&u["sessionUpdate"].as_str().unwrap_or("")))
        .collect()
}

fn earlier(p: &mut Peer, sid: &str, cursor: &Value, limit: u64) -> (Value, Vec<Value>) {
    p.call("session/load_earlier", json!({"sessionId": sid, "before": cursor, "limit": limit}))
}

/// A bridge with one session that ran `turns` prompts; returns (bridge, session id).
fn with_history(home: &Home, turns: usize) -> (Bridge, String) {
    let mut b = Bridge::start(home, &demo_agent(0));
    initialize(&mut b.editor, json!({}));
    let sid = new_session(&mut b.editor, home.path());
    for t in 0..turns {
        let (r, _) = b.editor.call("session/prompt", prompt(&sid, &format!("prompt number {t}")));
        assert_eq!(r["result"]["stopReason"], "end_turn");
    }
    (b, sid)
}

#[test]
fn tail_replay_and_pages_follow_the_contract() {
    let home = Home::new();
    let (b, sid) = with_history(&home, 4);
    let mut remote = b.remote();
    initialize(&mut remote, json!({}));

    // The full replay: one update per message (user, thought, plan, tool, agent) × 4 turns.
    let (full, full_msgs) = load(&mut remote, &sid, home.path(), None);
    let all = messages(&full_msgs);
    assert_eq!(all.len(), 20, "{all:#?}");
    let meta = &full["result"]["replayMeta"];
    assert_eq!((meta["totalMessages"].clone(), meta["totalTurns"].clone()), (json!(20), json!(4)));
    assert_eq!(meta["hasMore"], false);
    assert_eq!(all[0]["sessionUpdate"], "user_message_chunk");
    assert_eq!(all[0]["content"]["text"], "prompt number 0");
    assert!(all[0]["messageId"].as_str().unwrap().starts_with("uprompt_"));
    let agent_msg = all.iter().find(|u| u["sessionUpdate"] == "agent_message_chunk").unwrap();
    assert!(
        agent_msg["content"]["text"].as_str().unwrap().contains("You said: \"prompt number 0\""),
        "chunks merged: {agent_msg}"
    );
    let tool = all.iter().find(|u| u["sessionUpdate"] == "tool_call").unwrap();
    assert_eq!(tool["status"], "completed", "the tool call is merged with its updates");
    // The latest state follows the messages.
    let states: Vec<String> = updates(&full_msgs)
        .iter()
        .skip(20)
        .map(|u| u["sessionUpdate"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        states.contains(&"usage_update".to_owned()) && states.contains(&"session_info_update".to_owned()),
        "{states:?}"
    );

    // limit 2: the last turn, aligned back to its prompt.
    let (tail, tail_msgs) = load(&mut remote, &sid, home.path(), Some(json!(2)));
    let tail_m = messages(&tail_msgs);
    assert_eq!(tail_m, all[15..].to_vec());
    let m = &tail["result"]["replayMeta"];
    assert_eq!(m["replayedMessages"], 5);
    assert_eq!(m["replayedTurns"], 1);
    assert_eq!(m["totalMessages"], 20);
    assert_eq!(m["totalTurns"], 4);
    assert_eq!(m["hasMore"], true);
    assert_eq!(m["lastMessageId"], all[19]["messageId"]);
    assert!(tail["result"]["modes"].is_object(), "the load result keeps the agent's fields");

    // Pages back concatenate to the full history: no gaps, no repeats.
    let mut got = tail_m;
    let mut cursor = m["cursor"].clone();
    loop {
        let (page, page_msgs) = earlier(&mut remote, &sid, &cursor, 3);
        let pm = &page["result"]["replayMeta"];
        assert!(pm["replayedMessages"].as_u64().unwrap() <= 3, "{page}");
        let mut p = messages(&page_msgs);
        assert_eq!(updates(&page_msgs).len(), p.len(), "a page carries no state updates");
        p.append(&mut got);
        got = p;
        if pm["hasMore"] == false {
            break;
        }
        cursor = pm["cursor"].clone();
    }
    assert_eq!(got, all);

    // limit 0: metadata only.
    let (meta_only, msgs) = load(&mut remote, &sid, home.path(), Some(json!(0)));
    assert!(messages(&msgs).is_empty());
    assert_eq!(meta_only["result"]["replayMeta"]["totalMessages"], 20);
    assert_eq!(meta_only["result"]["replayMeta"]["lastMessageId"], all[19]["messageId"]);

    // A cursor stays valid while turns are appended.
    let (r, _) = remote.call("session/prompt", prompt(&sid, "one more"));
    assert_eq!(r["result"]["stopReason"], "end_turn");
    let (page, page_msgs) = earlier(&mut remote, &sid, &m["cursor"], 5);
    assert_eq!(messages(&page_msgs), all[10..15].to_vec(), "{page}");
}

#[test]
fn bad_limits_and_cursors_are_refused() {
    let home = Home::new();
    let (b, sid) = with_history(&home, 1);
    let (_, other) = {
        let mut e = b.remote();
        initialize(&mut e, json!({}));
        let other = new_session(&mut e, home.path());
        (e, other)
    };
    let mut remote = b.remote();
    initialize(&mut remote, json!({}));
    for bad in [json!("5"), json!(1.5), json!({"n": 5})] {
        let (r, _) = load(&mut remote, &sid, home.path(), Some(bad.clone()));
        assert_eq!(r["error"]["code"], -32602, "{bad}: {r}");
    }
    // load_earlier needs the session attached on this connection.
    let (r, _) = earlier(&mut remote, &sid, &json!("z1.0.1.00000000"), 5);
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(r["error"]["message"].as_str().unwrap().contains("load it first"), "{r}");

    let (tail, _) = load(&mut remote, &sid, home.path(), Some(json!(1)));
    let cursor = tail["result"]["replayMeta"]["cursor"].clone();
    for bad in [json!("garbage"), json!("z1.9.1.ffffffff")] {
        let (r, _) = earlier(&mut remote, &sid, &bad, 5);
        assert_eq!(r["error"]["message"], "cursor expired", "{bad}: {r}");
    }
    // A cursor of another session.
    load(&mut remote, &other, home.path(), Some(json!(0)));
    let (r, _) = earlier(&mut remote, &other, &cursor, 5);
    assert_eq!(r["error"]["message"], "cursor expired", "{r}");
    let (r, _) =
        remote.call("session/load_earlier", json!({"sessionId": sid, "before": cursor, "limit": -3}));
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let (r, _) = remote.call("session/load_earlier", json!({"sessionId": sid}));
    assert_eq!(r["error"]["code"], -32602, "{r}");
    // Out of range is clamped to [0, 500] (the contract), not refused.
    let (r, _) = load(&mut remote, &sid, home.path(), Some(json!(-5)));
    let m = &r["result"]["replayMeta"];
    assert_eq!(m["replayedMessages"], 0, "-5 is 0, a metadata-only attach: {r}");
    assert!(m["totalMessages"].as_u64().is_some_and(|n| n > 0), "{r}");
    let (r, _) = load(&mut remote, &sid, home.path(), Some(json!(9000)));
    let m = &r["result"]["replayMeta"];
    assert_eq!(m["replayedMessages"], m["totalMessages"], "9000 is 500, the whole short history: {r}");
}

#[test]
fn history_survives_the_bridge_and_the_agents_replay_is_not_shown_twice() {
    let home = Home::new();
    let (mut b, sid) = with_history(&home, 2);
    assert!(b.editor.close_then_exited());

    let b = Bridge::start(&home, &demo_agent(0));
    let mut remote = b.remote();
    initialize(&mut remote, json!({}));
    let (r, msgs) = load(&mut remote, &sid, home.path(), None);
    let m = messages(&msgs);
    assert_eq!(r["result"]["replayMeta"]["totalMessages"], 10, "{r}");
    assert_eq!(m.len(), 10);
    let prompts: Vec<&str> = m
        .iter()
        .filter(|u| u["sessionUpdate"] == "user_message_chunk")
        .filter_map(|u| u["content"]["text"].as_str())
        .collect();
    assert_eq!(prompts, ["prompt number 0", "prompt number 1"]);
    let title =
        updates(&msgs).into_iter().find(|u| u["sessionUpdate"] == "session_info_update").expect("title");
    assert_eq!(title["title"], "prompt number 0");
    let (s, body) = b.http_get("/status", Some(zcode_tests::TEST_TOKEN));
    assert_eq!(s, 200);
    let status: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["sessions"][0]["title"], "prompt number 0", "the title comes back from the journal");
}

#[test]
fn an_empty_journal_is_seeded_from_the_agents_replay() {
    let home = Home::new();
    let (mut b, sid) = with_history(&home, 2);
    assert!(b.editor.close_then_exited());
    for f in ["zcode-acp.sqlite3", "zcode-acp.sqlite3-wal", "zcode-acp.sqlite3-shm"] {
        let _ = std::fs::remove_file(home.path().join("data").join(f));
    }
    let b = Bridge::start(&home, &demo_agent(0));
    let mut remote = b.remote();
    initialize(&mut remote, json!({}));
    let (r, msgs) = load(&mut remote, &sid, home.path(), Some(json!(500)));
    let first = messages(&msgs);
    assert!(!first.is_empty(), "{r}");
    let prompts: Vec<&str> = first
        .iter()
        .filter(|u| u["sessionUpdate"] == "user_message_chunk")
        .filter_map(|u| u["content"]["text"].as_str())
        .collect();
    assert_eq!(prompts, ["prompt number 0", "prompt number 1"], "the agent's replay seeded the journal");
    // Another client, another load: the same history, once.
    let mut other = b.remote();
    initialize(&mut other, json!({}));
    let (r2, msgs2) = load(&mut other, &sid, home.path(), None);
    assert_eq!(messages(&msgs2), first);
    assert_eq!(r2["result"]["replayMeta"]["totalMessages"], r["result"]["replayMeta"]["totalMessages"]);
}

#[test]
fn a_replay_racing_a_live_turn_neither_loses_nor_repeats_anything() {
    let home = Home::new();
    let (mut b, sid) = with_history(&home, 1);
    let id = b.editor.request("session/prompt", prompt(&sid, "long"));
    b.editor.until("ticks", |m| {
        m["params"]["update"]["content"]["text"].as_str().is_some_and(|t| t.starts_with("tick 3 "))
    });
    let mut late = b.remote();
    initialize(&mut late, json!({}));
    let (r, replay) = load(&mut late, &sid, home.path(), Some(json!(3)));
    assert!(r["result"]["replayMeta"].is_object(), "{r}");
    // Live ticks after the replay.
    let (_, live) = late.until("tick 40", |m| m["params"]["update"]["content"]["text"] == "tick 40 ");
    b.editor.notify("session/cancel", json!({"sessionId": sid}));
    b.editor.response_to(&id);
    let replayed = messages(&replay)
        .into_iter()
        .filter(|u| u["messageId"].as_str().is_some_and(|m| m.ends_with("_long")))
        .filter_map(|u| u["content"]["text"].as_str().map(str::to_owned))
        .collect::<String>();
    let streamed: String = updates(&live).iter().filter_map(|u| u["content"]["text"].as_str()).collect();
    let text = format!("{replayed}{streamed}tick 40 ");
    let expected: String = (1..=40).map(|i| format!("tick {i} ")).collect();
    assert_eq!(text, expected, "replay + live must be every tick once, in order");
}

#[test]
fn four_bridges_write_the_journal_at_once() {
    let home = Home::new();
    let mut bridges: Vec<(Bridge, String)> = (0..4)
        .map(|_| {
            let mut b = Bridge::start(&home, &demo_agent(0));
            initialize(&mut b.editor, json!({}));
            let sid = new_session(&mut b.editor, home.path());
            (b, sid)
        })
        .collect();
    for round in 0..5 {
        let ids: Vec<Value> = bridges
            .iter_mut()
            .map(|(b, sid)| b.editor.request("session/prompt", prompt(sid, &format!("round {round}"))))
            .collect();
        for ((b, _), id) in bridges.iter_mut().zip(ids) {
            let (r, _) = b.editor.response_to(&id);
            assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
        }
    }
    for (b, sid) in &bridges {
        // Four writers at once may make a commit wait out SQLite's lock and be retried (the
        // batch is kept, `journalError` says so meanwhile): a load until then shows what is
        // committed. Every message must be there once the retry went through.
        let deadline = std::time::Instant::now() + zcode_tests::WAIT;
        loop {
            let mut remote = b.remote();
            initialize(&mut remote, json!({}));
            let (r, msgs) = load(&mut remote, sid, home.path(), None);
            if r["result"]["replayMeta"]["totalMessages"] != 25 && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(50));
                continue;
            }
            assert_eq!(r["result"]["replayMeta"]["totalMessages"], 25, "{r}");
            assert_eq!(messages(&msgs).len(), 25);
            break;
        }
    }
}

/// SQLite's locks are POSIX record locks, which a process loses on ALL its descriptors of a
/// file when it closes ANY one of them. A second connection opened in a process (the bridge's
/// usage thread opens one beside its journal thread's) must therefore never open and close the
/// store's files itself: when it did (to make them private), the first connection's write lock
/// was gone mid-transaction, another process's commit went into the WAL beside it, and one of
/// the two commits was overwritten (a turn missing from a replay, no error anywhere) or the
/// file was left malformed.
#[test]
fn a_second_connection_in_a_process_leaves_the_first_ones_write_lock_in_place() {
    use std::sync::mpsc;
    use zcode_shared::store::Store;
    let home = Home::new();
    let mut b = Bridge::start_env(&home, &demo_agent(0), &[("ZCODE_ACP_TEST_JOURNAL_BUSY_MS", "50")]);
    initialize(&mut b.editor, json!({}));
    let sid = new_session(&mut b.editor, home.path());
    let (r, _) = b.editor.call("session/prompt", prompt(&sid, "before the lock"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let data = home.path().join("data");

    // This process holds a write transaction open, as a journal thread does while it commits.
    let (held_tx, held) = mpsc::channel();
    let (release, go) = mpsc::channel::<()>();
    let writer = {
        let (data, sid) = (data.clone(), sid.clone());
        std::thread::spawn(move || {
            let mut store = Store::open_in(&data).expect("the store");
            store.write(|w| {
                held_tx.send(()).expect("the test waits");
                let _ = go.recv();
                w.set_title(&sid, "renamed while held", true, zcode_shared::time::now_ms())
            })
        })
    };
    held.recv().expect("the transaction is open");
    // Meanwhile another connection is opened in this process.
    let second = Store::open_in(&data).expect("a second connection");

    // The bridge's turn must wait for the lock (its commit kept and retried, `journalError`
    // meanwhile), not be written beside the held transaction.
    let (r, _) = b.editor.call("session/prompt", prompt(&sid, "while the lock is held"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    zcode_tests::hub::wait_until("the bridge's journal to try to commit the turn", || {
        let (_, status) = b.http_get("/status", Some(zcode_tests::TEST_TOKEN));
        let committed = second.counters(&sid).ok().flatten().is_some_and(|c| c.next_seq - c.first_seq == 10);
        committed || status.contains("journalError")
    });
    release.send(()).expect("the writer waits");
    writer.join().expect("the writer").expect("the held transaction commits");

    // Both writes are kept: every message of both turns, and the title.
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let mut remote = b.remote();
        initialize(&mut remote, json!({}));
        let (r, msgs) = load(&mut remote, &sid, home.path(), None);
        if r["result"]["replayMeta"]["totalMessages"] != 10 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(50));
            continue;
        }
        assert_eq!(r["result"]["replayMeta"]["totalMessages"], 10, "a commit was overwritten: {r}");
        assert_eq!(messages(&msgs).len(), 10);
        break;
    }
    assert_eq!(
        second.counters(&sid).expect("read").expect("the session").title.as_deref(),
        Some("renamed while held")
    );
}

#[test]
fn kill_dash_nine_mid_turn_loses_nothing_older_than_the_last_batch() {
    let home = Home::new();
    let (mut b, sid) = with_history(&home, 1);
    let id = b.editor.request("session/prompt", prompt(&sid, "long"));
    let _ = id;
    b.editor.until("tick 10", |m| m["params"]["update"]["content"]["text"] == "tick 10 ");
    // The journal commits in batches: kill it once a batch with tick 10 is on disk (the event,
    // not a guess at how long a batch takes on a loaded machine).
    let store = zcode_shared::store::Store::open_in(&home.path().join("data")).expect("the store");
    zcode_tests::hub::wait_until("the journal to commit tick 10", || {
        store
            .messages_before(&sid, i64::MAX, 1000)
            .is_ok_and(|rows| rows.iter().any(|m| m.body.contains("tick 10 ")))
    });
    drop(store);
    kill9(b.editor.pid());
    b.editor.wait_exit(WAIT).expect("the bridge died");

    let b = Bridge::start(&home, &demo_agent(0));
    let mut remote = b.remote();
    initialize(&mut remote, json!({}));
    let (r, msgs) = load(&mut remote, &sid, home.path(), None);
    assert!(r["result"].is_object(), "the store still opens and serves: {r}");
    let long: String = messages(&msgs)
        .iter()
        .filter(|u| u["messageId"].as_str().is_some_and(|m| m.ends_with("_long")))
        .filter_map(|u| u["content"]["text"].as_str().map(str::to_owned))
        .collect();
    let expected: String = (1..=10).map(|i| format!("tick {i} ")).collect();
    assert!(long.starts_with(&expected), "lost ticks: {long:?}");
}

#[test]
fn a_corrupt_journal_is_named_and_the_editor_is_still_served() {
    let home = Home::new();
    std::fs::create_dir_all(home.path().join("data")).unwrap();
    let db = home.path().join("data").join("zcode-acp.sqlite3");
    std::fs::write(&db, "definitely not SQLite ".repeat(500)).unwrap();
    let log = home.path().join("bridge.stderr");
    let mut b = Bridge::start_with_stderr(&home, &demo_agent(0), std::fs::File::create(&log).unwrap().into());
    initialize(&mut b.editor, json!({}));
    let sid = new_session(&mut b.editor, home.path());
    let (r, _) = b.editor.call("session/prompt", prompt(&sid, "still working"));
    assert_eq!(r["result"]["stopReason"], "end_turn");
    let mut remote = b.remote();
    initialize(&mut remote, json!({}));
    let (r, _) = load(&mut remote, &sid, home.path(), Some(json!(10)));
    assert_eq!(r["result"]["replayMeta"]["totalMessages"], 0, "{r}");
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(
        stderr.contains(&db.display().to_string()) && stderr.contains("not a SQLite database"),
        "{stderr}"
    );
    assert!(
        std::fs::read_to_string(&db).unwrap().starts_with("definitely not SQLite"),
        "the file was overwritten"
    );
}
