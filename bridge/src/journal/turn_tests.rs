//! Turn-end records through the journal thread: numbered by the journal's turns, replayed
//! right after each finished turn's last message (in a tail, a full load and pages), dropped
//! with their turns by retention, and listed across sessions newest first.

use super::*;
use serde_json::{Value, json};
use std::sync::mpsc as std_mpsc;

fn line(session: &str, update: Value) -> Bytes {
    let msg = zcode_shared::jsonrpc::notification(
        "session/update",
        json!({"sessionId": session, "update": update}),
    );
    Bytes::from(msg.to_string())
}

fn user(session: &str, j: &Journal, text: &str) {
    let u = json!({"sessionUpdate": "user_message_chunk", "messageId": format!("u-{text}"),
        "content": {"type": "text", "text": text}});
    j.update(session, line(session, u), false);
}

fn agent(session: &str, j: &Journal, text: &str) {
    let u = json!({"sessionUpdate": "agent_message_chunk", "messageId": format!("a-{text}"),
        "content": {"type": "text", "text": text}});
    j.update(session, line(session, u), false);
}

fn end(session: &str, j: &Journal, why: &str, at: i64) {
    j.turn_end(TurnRecord {
        session_id: session.into(),
        turn: 0,
        stop_reason: why.into(),
        error: None,
        started_at: at - 5,
        ended_at: at,
        prompted_by: "remote:7".into(),
    });
}

fn read_now(j: &Journal, session: &str, mode: ReadMode) -> Slice {
    let (tx, rx) = std_mpsc::channel();
    j.read(session, mode, Box::new(move |r| tx.send(r).unwrap()));
    rx.recv().unwrap().unwrap()
}

/// Each line as `text` (a message) or `end:<stopReason>:<turn>` (a record).
fn shape(slice: &Slice) -> Vec<String> {
    slice
        .lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let v: Value = serde_json::from_slice(l).unwrap();
            if v["method"] == turn_end::METHOD {
                assert!(slice.remote_only.contains(&i), "a record is marked remote-only");
                format!("end:{}:{}", v["params"]["stopReason"].as_str().unwrap(), v["params"]["turn"])
            } else {
                assert!(!slice.remote_only.contains(&i));
                v["params"]["update"]["content"]["text"].as_str().unwrap_or("?").to_owned()
            }
        })
        .collect()
}

#[test]
fn records_replay_after_the_last_message_of_their_turn() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::open(dir.path(), Retention { max_messages: 1000 }).unwrap();
    user("s", &j, "one");
    agent("s", &j, "a1");
    end("s", &j, "cancelled", 100);
    user("s", &j, "two");
    agent("s", &j, "a2");
    end("s", &j, "end_turn", 200);
    user("s", &j, "three");
    agent("s", &j, "a3");
    // Turn three still runs: no record, nothing after its last message.
    let full = read_now(&j, "s", ReadMode::Load { limit: None });
    assert_eq!(shape(&full), ["one", "a1", "end:cancelled:1", "two", "a2", "end:end_turn:2", "three", "a3"]);
    assert_eq!(full.meta["replayedMessages"], 6, "records are not messages");
    assert_eq!(full.meta["totalMessages"], 6);
    let v: Value = serde_json::from_slice(&full.lines[2]).unwrap();
    assert_eq!(v["params"]["sessionId"], "s");
    assert_eq!(v["params"]["promptedBy"], "remote:7");
    assert_eq!((v["params"]["startedAt"].clone(), v["params"]["endedAt"].clone()), (json!(95), json!(100)));

    // A page that ends inside turn two (its last message comes later) carries no record for
    // it; the tail that starts at turn three's prompt carries none of the older ones.
    let tail = read_now(&j, "s", ReadMode::Load { limit: Some(2) });
    assert_eq!(shape(&tail), ["three", "a3"]);
    let cursor = tail.meta["cursor"].as_str().unwrap().to_owned();
    let page = read_now(&j, "s", ReadMode::Earlier { cursor, limit: 3 });
    assert_eq!(shape(&page), ["a1", "end:cancelled:1", "two", "a2", "end:end_turn:2"]);
    let cut = read_now(&j, "s", ReadMode::Earlier { cursor: replay::encode("s", 0, 4), limit: 3 });
    assert_eq!(shape(&cut), ["one", "a1", "end:cancelled:1", "two"], "turn two goes on past this page");

    end("s", &j, "max_tokens", 300);
    let tail = read_now(&j, "s", ReadMode::Load { limit: Some(2) });
    assert_eq!(shape(&tail), ["three", "a3", "end:max_tokens:3"]);
}

#[test]
fn recent_turns_span_sessions_newest_first_and_retention_drops_old_records() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::open(dir.path(), Retention { max_messages: 4 }).unwrap();
    j.meta(
        SessionMeta {
            session_id: "a".into(),
            workspace: "/w/a".into(),
            cwd: "/w/a".into(),
            origin: "serve".into(),
            agent: None,
        },
        true,
    );
    j.title("a", "the a", false);
    for (n, sid) in [(1, "a"), (2, "b"), (3, "a")] {
        user(sid, &j, &format!("p{n}"));
        agent(sid, &j, &format!("r{n}"));
        end(sid, &j, if n == 2 { "cancelled" } else { "end_turn" }, n * 1000);
    }
    j.flush();
    let store = Store::open_in(dir.path()).unwrap();
    let recent = store.recent_turns(10).unwrap();
    let got: Vec<(String, i64, String, i64)> = recent
        .iter()
        .map(|r| {
            (r.record.session_id.clone(), r.record.turn, r.record.stop_reason.clone(), r.record.ended_at)
        })
        .collect();
    assert_eq!(
        got,
        [
            ("a".into(), 2, "end_turn".into(), 3000),
            ("b".into(), 1, "cancelled".into(), 2000),
            ("a".into(), 1, "end_turn".into(), 1000)
        ]
    );
    assert_eq!((recent[0].workspace.as_str(), recent[0].title.as_deref()), ("/w/a", Some("the a")));
    // Each row carries its own turn's first prompt, not the session's.
    let prompts: Vec<Option<&str>> = recent.iter().map(|r| r.prompt.as_deref()).collect();
    assert_eq!(prompts, [Some("p3"), Some("p2"), Some("p1")]);
    assert_eq!(store.recent_turns(1).unwrap().len(), 1);

    // Session a passes its 4 messages: its oldest turn goes, and its record with it.
    user("a", &j, "p4");
    agent("a", &j, "r4");
    end("a", &j, "end_turn", 4000);
    j.flush();
    let turns: Vec<i64> = store.turns_between("a", 0, 10).unwrap().iter().map(|t| t.turn).collect();
    assert!(!turns.contains(&1), "turn 1 was dropped with its messages: {turns:?}");
    assert!(turns.contains(&3));
}
