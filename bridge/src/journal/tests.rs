//! The journal thread end to end on a real store: merging, seeding, retention, reads.

use super::*;
use proptest::prelude::*;
use serde_json::{Value, json};
use std::sync::mpsc as std_mpsc;

fn line(session: &str, update: Value) -> Bytes {
    Bytes::from(json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session, "update": update}}).to_string())
}

fn read_now(j: &Journal, session: &str, mode: ReadMode) -> Result<Slice, ReadError> {
    let (tx, rx) = std_mpsc::channel();
    j.read(session, mode, Box::new(move |r| tx.send(r).unwrap()));
    rx.recv().unwrap()
}

fn updates(slice: &Slice) -> Vec<Value> {
    slice
        .lines
        .iter()
        .map(|l| serde_json::from_slice::<Value>(l).unwrap()["params"]["update"].clone())
        .collect()
}

/// Another connection on the store in `dir` holding its write lock, until `release` is sent
/// (then join the thread).
fn hold_write_lock(dir: &std::path::Path) -> (std_mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    let (locked_tx, locked) = std_mpsc::channel();
    let (release, release_rx) = std_mpsc::channel::<()>();
    let path = dir.to_owned();
    let locker = std::thread::spawn(move || {
        let mut other = Store::open_in(&path).unwrap();
        other
            .write(|_| {
                locked_tx.send(()).unwrap();
                release_rx.recv().unwrap();
                Ok(())
            })
            .unwrap();
    });
    locked.recv().unwrap();
    (release, locker)
}

fn agent(text: &str) -> Value {
    json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}})
}

fn user(text: &str) -> Value {
    json!({"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": text}})
}

#[test]
fn a_read_sees_every_update_sent_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::open(dir.path(), Retention { max_messages: 1000 }).unwrap();
    j.update("s", line("s", user("hi")), false);
    j.update("s", line("s", agent("Hel")), false);
    j.update("s", line("s", agent("lo")), false);
    j.update("s", line("s", json!({"sessionUpdate": "usage_update", "used": 5})), false);
    j.title("s", "hi", false);
    let slice = read_now(&j, "s", ReadMode::Load { limit: None }).unwrap();
    let u = updates(&slice);
    assert_eq!(u.len(), 3);
    assert_eq!(u[1]["content"]["text"], "Hello");
    assert_eq!(u[2]["sessionUpdate"], "usage_update");
    assert_eq!(slice.title.as_deref(), Some("hi"));
    assert_eq!(slice.meta["totalTurns"], 1);
    assert_eq!(slice.meta["lastMessageId"], u[1]["messageId"]);
    // More chunks of the same message later rewrite it, not append.
    j.update("s", line("s", agent("!")), false);
    let slice = read_now(&j, "s", ReadMode::Load { limit: None }).unwrap();
    assert_eq!(updates(&slice)[1]["content"]["text"], "Hello!");
    assert_eq!(slice.meta["totalMessages"], 2);
}

#[test]
fn the_agents_replay_seeds_an_empty_journal_and_is_dropped_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::open(dir.path(), Retention { max_messages: 1000 }).unwrap();
    j.update("s", line("s", user("from the agent")), true);
    j.update("s", line("s", agent("answer")), true);
    j.end_seed("s");
    let slice = read_now(&j, "s", ReadMode::Load { limit: None }).unwrap();
    assert_eq!(slice.meta["totalMessages"], 2);
    // A second load of the same session: the agent replays again; the journal has it already.
    j.update("s", line("s", user("from the agent")), true);
    j.update("s", line("s", agent("answer")), true);
    j.end_seed("s");
    let slice = read_now(&j, "s", ReadMode::Load { limit: None }).unwrap();
    assert_eq!(slice.meta["totalMessages"], 2, "the replay was recorded twice");
}

#[test]
fn retention_drops_whole_old_turns_and_expires_cursors() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::open(dir.path(), Retention { max_messages: 20 }).unwrap();
    j.update("s", line("s", user("q0")), false);
    j.update("s", line("s", agent("a0")), false);
    let first = read_now(&j, "s", ReadMode::Load { limit: Some(1) }).unwrap();
    let cursor = first.meta["cursor"].as_str().unwrap().to_owned();
    for t in 1..15 {
        j.update("s", line("s", user(&format!("q{t}"))), false);
        j.update("s", line("s", json!({"sessionUpdate": "tool_call", "toolCallId": format!("c{t}")})), false);
    }
    j.flush();
    let all = read_now(&j, "s", ReadMode::Load { limit: None }).unwrap();
    let u = updates(&all);
    assert!(u.len() <= 20, "{}", u.len());
    assert_eq!(u[0]["sessionUpdate"], "user_message_chunk", "history starts at a turn");
    assert!(matches!(
        read_now(&j, "s", ReadMode::Earlier { cursor, limit: 5 }),
        Err(ReadError::CursorExpired)
    ));
}

#[test]
fn a_disabled_journal_answers_empty_histories() {
    let j = Journal::disabled();
    j.update("s", line("s", user("x")), false);
    let slice = read_now(&j, "s", ReadMode::Load { limit: Some(5) }).unwrap();
    assert!(slice.lines.is_empty());
    assert_eq!(slice.meta["totalMessages"], 0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever the interleaving, merged messages lose and duplicate no text, and the pages of
    /// load_earlier concatenate to the full history.
    #[test]
    fn merging_and_paging_lose_nothing(
        steps in proptest::collection::vec((0u8..5, "[a-z]{1,3}"), 1..60),
        limit in 1u64..7,
        page in 1u64..7,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(dir.path(), Retention { max_messages: 100_000 }).unwrap();
        let mut sent = String::new();
        for (i, (kind, text)) in steps.iter().enumerate() {
            let u = match kind {
                0 => user(text),
                1 | 2 => agent(text),
                3 => json!({"sessionUpdate": "agent_message_chunk", "messageId": format!("m{}", i / 3), "content": {"type": "text", "text": text}}),
                _ => json!({"sessionUpdate": "tool_call", "toolCallId": format!("c{i}"), "title": text}),
            };
            if *kind < 4 { sent.push_str(text); }
            j.update("s", line("s", u), false);
        }
        let full = read_now(&j, "s", ReadMode::Load { limit: None }).unwrap();
        let got: String = updates(&full).iter().filter_map(|u| u["content"]["text"].as_str()).collect();
        prop_assert_eq!(&got, &sent);

        let tail = read_now(&j, "s", ReadMode::Load { limit: Some(limit) }).unwrap();
        let mut pages = updates(&tail);
        let mut meta = tail.meta.clone();
        while meta["hasMore"] == true {
            let p = read_now(&j, "s", ReadMode::Earlier { cursor: meta["cursor"].as_str().unwrap().into(), limit: page }).unwrap();
            prop_assert!(p.meta["replayedMessages"].as_u64().unwrap() <= page);
            let mut u = updates(&p);
            u.append(&mut pages);
            pages = u;
            meta = p.meta;
        }
        prop_assert_eq!(pages, updates(&full));
    }
}

fn ended(session: &str) -> Op {
    Op::TurnEnd(TurnRecord {
        session_id: session.into(),
        turn: 0,
        stop_reason: "end_turn".into(),
        error: None,
        started_at: 1,
        ended_at: 2,
        prompted_by: "editor".into(),
    })
}

#[test]
fn the_writers_per_session_state_is_dropped_when_a_session_ends() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = Worker::new(Store::open_in(dir.path()).unwrap(), Retention { max_messages: 1000 });
    let up = |s: &str, u: Value| Op::Update { session: s.into(), line: line(s, u), seed: false };
    for s in ["a", "b", "c"] {
        w.handle(up(s, user("hi")));
        w.handle(up(s, agent("Hel")));
    }
    w.commit();
    assert_eq!(w.sessions.len(), 3);
    // A turn ends (its last chunk still rewrites the message first), a session is deleted, a
    // load's replay ends; the fourth session's turn ended but a new one began in the same batch.
    w.handle(up("a", agent("lo")));
    w.handle(ended("a"));
    let (tx, _rx) = std_mpsc::channel();
    w.handle(Op::Delete { session: "b".into(), reply: Box::new(move |r| tx.send(r).unwrap()) });
    w.handle(up("d", user("one")));
    w.handle(ended("d"));
    w.handle(up("d", user("two")));
    w.handle(Op::EndSeed { session: "c".into() });
    w.commit();
    let mut left: Vec<&String> = w.sessions.keys().collect();
    left.sort();
    assert_eq!(left, ["d"]);
    // The ended session's next turn starts a fresh merger: its ids do not collide with the
    // first turn's, and the rewrite before the end was kept.
    w.handle(up("a", user("again")));
    w.handle(up("a", agent("more")));
    w.commit();
    let slice = replay::read(&w.store, "a", &ReadMode::Load { limit: None }).unwrap();
    let u = updates(&slice);
    let texts: Vec<&str> = u.iter().filter_map(|m| m["content"]["text"].as_str()).collect();
    assert_eq!(texts, ["hi", "Hello", "again", "more"]);
    let ids: HashSet<&str> = u.iter().filter_map(|m| m["messageId"].as_str()).collect();
    assert_eq!(ids.len(), 4, "{u:#?}");
}

#[test]
fn a_failed_commit_keeps_its_batch_and_is_retried_while_updates_keep_coming() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_in(dir.path()).unwrap();
    store.set_busy_timeout(Duration::from_millis(10)).unwrap();
    let mut w = Worker::new(store, Retention { max_messages: 100_000 });
    w.retry = Retry { first: Duration::from_millis(10), max: Duration::from_millis(40) };
    let (error_tx, error) = tokio::sync::watch::channel(None);
    w.error = Some(error_tx);
    let (tx, rx) = std_mpsc::channel();
    let worker = std::thread::spawn(move || w.run(&rx));
    let send = |op: Op| tx.send((Instant::now(), op)).unwrap();
    let up = |u: Value| Op::Update { session: "s".into(), line: line("s", u), seed: false };

    // Another connection holds the write lock until told to let go.
    let (release, locker) = hold_write_lock(dir.path());
    send(up(user("hi")));
    let mut text = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut chunk = |n: &mut usize| {
        let t = format!("{n} ");
        text.push_str(&t);
        send(up(agent(&t)));
        *n += 1;
        assert!(Instant::now() < deadline, "the error did not change while streaming: {:?}", error.borrow());
        std::thread::sleep(Duration::from_millis(2));
    };
    let mut n = 0;
    // Updates keep coming while the store is locked: the failure is reported...
    while error.borrow().is_none() {
        chunk(&mut n);
    }
    assert!(error.borrow().as_deref().unwrap_or_default().contains("locked"), "{:?}", error.borrow());
    // ...and once the lock is gone a retry goes through though the channel never empties.
    release.send(()).unwrap();
    locker.join().unwrap();
    while error.borrow().is_some() {
        chunk(&mut n);
    }
    let (reply, answer) = std_mpsc::channel();
    send(Op::Read {
        session: "s".into(),
        mode: ReadMode::Load { limit: None },
        reply: Box::new(move |r| reply.send(r).unwrap()),
    });
    let slice = answer.recv().unwrap().unwrap();
    let u = updates(&slice);
    assert_eq!(u.len(), 2, "{u:#?}");
    assert_eq!(u[0]["content"]["text"], "hi");
    assert_eq!(u[1]["content"]["text"], text.as_str(), "every chunk kept, in order");
    drop(tx);
    worker.join().unwrap();
}

#[test]
fn an_agents_replay_is_not_kept_while_the_sessions_own_messages_wait_for_a_failed_commit() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_in(dir.path()).unwrap();
    store.set_busy_timeout(Duration::from_millis(10)).unwrap();
    let mut w = Worker::new(store, Retention { max_messages: 1000 });
    // The next try is far off: the batch stays uncommitted while the replay arrives.
    w.retry = Retry { first: Duration::from_secs(3600), max: Duration::from_secs(3600) };
    let up = |u: Value, seed: bool| Op::Update { session: "s".into(), line: line("s", u), seed };
    // Another connection holds the write lock until told to let go.
    let (release, locker) = hold_write_lock(dir.path());
    w.handle(up(user("hi"), false));
    w.handle(up(agent("Hello"), false));
    w.handle(ended("s"));
    w.commit();
    assert!(w.failing.is_some(), "the commit failed on the locked store");
    // A client loads the session meanwhile: the agent replays it (a seed), which the journal
    // must not keep, as it holds the session already (in the batch).
    w.handle(up(user("hi"), true));
    w.handle(up(agent("Hello"), true));
    w.handle(Op::EndSeed { session: "s".into() });
    release.send(()).unwrap();
    locker.join().unwrap();
    w.commit();
    assert!(w.failing.is_none(), "the retry went through");
    let slice = replay::read(&w.store, "s", &ReadMode::Load { limit: None }).unwrap();
    let u = updates(&slice);
    let texts: Vec<&str> = u.iter().filter_map(|m| m["content"]["text"].as_str()).collect();
    assert_eq!(texts, ["hi", "Hello"], "the history once: {u:#?}");
}
