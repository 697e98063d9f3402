//! Fan-out under load: an agent streaming thousands of `session/update`s as fast as it can
//! write them reaches the editor (stdio) and 20 remote clients complete and in order, and the
//! journal records every one of them. No timing is asserted: `scripts/bench-bridge` measures
//! speed; this checks what must hold however slow the machine is.

use serde_json::json;
use zcode_shared::store::Store;
use zcode_tests::hub::wait_until;
use zcode_tests::{Bridge, Home, Peer, initialize, new_session, prompt, streamed_seq};

const CLIENTS: usize = 20;
const UPDATES: u64 = 3000;

/// The scripted streaming agent of `scripts/bench-bridge` (`bench-bridge agent`).
fn streaming_agent() -> Vec<String> {
    vec![env!("CARGO_BIN_EXE_bench-bridge").into(), "agent".into()]
}

/// Reads `p` until the phase's last update; returns every seq seen, in arrival order.
fn collect(p: &mut Peer, phase: u64) -> Vec<u64> {
    let mut seqs = Vec::new();
    while seqs.last() != Some(&(UPDATES - 1)) {
        let line = p.recv_raw("the streamed updates");
        if let Some(seq) = streamed_seq(&line, phase) {
            seqs.push(seq);
        }
    }
    seqs
}

#[test]
fn a_fast_stream_reaches_the_editor_and_twenty_remote_clients_complete_and_in_order_and_is_journaled() {
    let home = Home::new();
    let mut b = Bridge::start(&home, &streaming_agent());
    initialize(&mut b.editor, json!({}));
    let sid = new_session(&mut b.editor, home.path());
    let mut remotes: Vec<Peer> = (0..CLIENTS)
        .map(|_| {
            let mut r = b.remote();
            initialize(&mut r, json!({}));
            let (resp, _) = r.call(
                "session/load",
                json!({"sessionId": sid, "cwd": home.path(), "mcpServers": [], "_meta": {"zcode": {"limit": 0}}}),
            );
            assert!(resp["result"].is_object(), "a remote client could not attach: {resp}");
            r
        })
        .collect();

    // A rate far above what the machine can carry: the agent writes as fast as it can.
    let id = b.editor.request("session/prompt", prompt(&sid, &format!("stream 1 {UPDATES} 100000000")));
    let expected: Vec<u64> = (0..UPDATES).collect();
    let readers: Vec<_> =
        remotes.drain(..).map(|mut r| std::thread::spawn(move || (collect(&mut r, 1), r))).collect();
    let editor = collect(&mut b.editor, 1);
    assert_eq!(editor, expected, "the editor got every update once, in order");
    let (answer, _) = b.editor.response_to(&id);
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    for (i, r) in readers.into_iter().enumerate() {
        let (seqs, _peer) = r.join().expect("a reader");
        assert_eq!(seqs.len() as u64, UPDATES, "remote client {i} got every update once");
        assert!(seqs == expected, "remote client {i} got the updates out of order");
    }

    // Every update is journaled (each has its own messageId: one message each).
    let store = Store::open_in(&home.path().join("data")).expect("the journal");
    // The session also journals the prompt's echo, so a count of messages reaches UPDATES before
    // the last update is committed: wait for the updates themselves.
    let texts = || -> Vec<u64> {
        let rows = store.messages_before(&sid, i64::MAX, UPDATES as i64 + 10).expect("the messages");
        rows.iter().filter_map(|m| streamed_seq(&m.body, 1)).collect()
    };
    wait_until("every streamed update to be journaled", || texts().len() as u64 >= UPDATES);
    let texts = texts();
    assert_eq!(texts, expected, "the journal holds every update once, in order");
}
