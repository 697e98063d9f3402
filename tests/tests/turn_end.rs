//! The turn-end record: when a prompt is answered, every remote client attached to the session
//! gets `_zcode/turn_end` (stop reason, when, who prompted) whoever prompted, and a later
//! `session/load` replays it right after the turn's last message, so a reloading device shows
//! "stopped: cancelled" for a turn another device cancelled. The editor on stdio gets neither:
//! its stream and its replays are what they were.

use serde_json::{Value, json};
use zcode_tests::{Bridge, Home, Peer, demo_agent, initialize, new_session, prompt};

const METHOD: &str = "_zcode/turn_end";

fn load(p: &mut Peer, sid: &str, cwd: &std::path::Path) -> (Value, Vec<Value>) {
    p.call("session/load", json!({"sessionId": sid, "cwd": cwd, "mcpServers": []}))
}

fn is_end(m: &Value) -> bool {
    m["method"] == METHOD
}

/// A replay as `user:<text>` (prompts), `end:<stopReason>:<promptedBy>` (records) and
/// nothing else, in order.
fn outline(replay: &[Value]) -> Vec<String> {
    replay
        .iter()
        .filter_map(|m| {
            if is_end(m) {
                let p = &m["params"];
                return Some(format!("end:{}:{}", p["stopReason"].as_str()?, p["promptedBy"].as_str()?));
            }
            let u = &m["params"]["update"];
            (u["sessionUpdate"] == "user_message_chunk")
                .then(|| format!("user:{}", u["content"]["text"].as_str().unwrap_or("")))
        })
        .collect()
}

#[test]
fn every_remote_client_learns_how_a_turn_ended_and_a_reload_replays_it_in_order() {
    let home = Home::new();
    let mut b = Bridge::start(&home, &demo_agent(0));
    initialize(&mut b.editor, json!({}));
    let mut phone = b.remote();
    initialize(&mut phone, json!({}));
    let mut tablet = b.remote();
    initialize(&mut tablet, json!({}));
    let sid = new_session(&mut phone, home.path());
    load(&mut tablet, &sid, home.path());
    load(&mut b.editor, &sid, home.path());

    // The phone starts a long turn and cancels it.
    let id = phone.request("session/prompt", prompt(&sid, "long"));
    tablet.until("the turn streaming on the tablet", |m| {
        m["params"]["update"]["sessionUpdate"] == "agent_thought_chunk"
    });
    phone.notify("session/cancel", json!({"sessionId": sid}));
    // The prompter gets the record right before the answer (its next turn may start on it).
    let (end, _) = phone.until("the record on the phone", is_end);
    let r = phone.recv("the answer to the prompt");
    assert_eq!((r["id"].clone(), r["result"]["stopReason"].clone()), (id, json!("cancelled")));
    assert_eq!(end["params"]["sessionId"], sid.as_str());
    assert!(end["params"]["promptedBy"].as_str().unwrap().starts_with("remote:"), "{end}");
    let (started, ended) =
        (end["params"]["startedAt"].as_u64().unwrap(), end["params"]["endedAt"].as_u64().unwrap());
    assert!(started > 0 && started <= ended, "{end}");
    // The tablet did not prompt: the record is how it learns the turn is over.
    let (tend, before) = tablet.until("the record on the tablet", is_end);
    assert_eq!(tend["params"]["stopReason"], "cancelled");
    assert!(before.iter().all(|m| m["method"] == "session/update"), "{before:?}");

    // The editor prompts: both remotes get its record; the editor sees the whole turn and no
    // record, now or before.
    let (r, seen) = b.editor.call("session/prompt", prompt(&sid, "hello"));
    assert_eq!(r["result"]["stopReason"], "end_turn");
    assert!(!seen.iter().any(is_end), "the editor never gets a record: {seen:?}");
    let (pend, _) = phone.until("the editor's record on the phone", is_end);
    assert_eq!(
        (pend["params"]["stopReason"].as_str(), pend["params"]["promptedBy"].as_str()),
        (Some("end_turn"), Some("editor"))
    );
    tablet.until("the editor's record on the tablet", is_end);

    // A prompt the agent fails is recorded as `error` with the agent's message.
    let (r, seen) = phone.call("session/prompt", prompt(&sid, "fail"));
    assert!(r["error"].is_object(), "{r}");
    assert!(seen.iter().any(is_end), "the failed turn's record precedes the error");
    let (fend, _) = tablet.until("the failed turn's record", is_end);
    assert_eq!(fend["params"]["stopReason"], "error");
    assert!(!fend["params"]["error"].as_str().unwrap_or("").is_empty(), "{fend}");

    // The phone reloads (a new connection): the replay carries each record right after its
    // turn, numbered; replayedMessages counts messages only.
    let mut reloaded = b.remote();
    initialize(&mut reloaded, json!({}));
    let (resp, replay) = load(&mut reloaded, &sid, home.path());
    assert_eq!(
        outline(&replay),
        [
            "user:long",
            "end:cancelled:remote:1",
            "user:hello",
            "end:end_turn:editor",
            "user:fail",
            "end:error:remote:1"
        ]
        .map(|s| s.replace("remote:1", end["params"]["promptedBy"].as_str().unwrap()))
    );
    let records: Vec<&Value> = replay.iter().filter(|m| is_end(m)).collect();
    assert_eq!(records.iter().map(|m| m["params"]["turn"].as_i64().unwrap()).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(records[0]["params"]["startedAt"], end["params"]["startedAt"]);
    let messages = replay.len() - records.len();
    let meta = &resp["result"]["replayMeta"];
    assert!(meta["replayedMessages"].as_u64().unwrap() as usize <= messages, "{meta}");
    // The record follows the turn's last message: nothing of turn 1 comes after it.
    let first_end = replay.iter().position(is_end).unwrap();
    assert_eq!(replay[first_end + 1]["params"]["update"]["sessionUpdate"], "user_message_chunk");

    // The editor reloads too: the same history without the records, and it goes on working.
    let (eresp, ereplay) = load(&mut b.editor, &sid, home.path());
    assert!(eresp["result"]["replayMeta"].is_object(), "{eresp}");
    assert!(!ereplay.iter().any(is_end), "no record in the editor's replay");
    // (What came before it is the live stream of the failed turn the editor had not read.)
    let theirs: Vec<&Value> = replay.iter().filter(|m| !is_end(m)).collect();
    let ours: Vec<&Value> = ereplay[ereplay.len() - messages..].iter().collect();
    assert_eq!(ours, theirs, "the editor's replay is the remote's without the records");
    let (r, _) = b.editor.call("session/prompt", prompt(&sid, "again"));
    assert_eq!(r["result"]["stopReason"], "end_turn");
    reloaded.until("the last record", is_end);
}
