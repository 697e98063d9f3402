//! A journal whose store is locked is never silent (issue 30, point 13): a turn streamed while
//! another connection holds the SQLite file's write lock past the busy timeout and the
//! retries is kept, `journalError` shows in `/api/instances` and the bridge's `/status` while
//! it cannot be saved, and once the lock is released every message is in the journal.

use serde_json::{Value, json};
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use zcode_tests::hub::{Hub, wait_instances};
use zcode_tests::{Bridge, Home, TEST_TOKEN, WAIT, demo_agent, initialize, new_session, prompt};

/// Another process holding the store's write lock (`BEGIN EXCLUSIVE`) until it is killed.
fn hold_store_lock(home: &Home) -> Child {
    let script = "import sqlite3,sys,time\n\
                  c=sqlite3.connect(sys.argv[1],isolation_level=None,timeout=20)\n\
                  c.execute('BEGIN EXCLUSIVE')\n\
                  print('locked',flush=True); time.sleep(600)";
    let mut c = Command::new("/usr/bin/python3")
        .args(["-c", script])
        .arg(home.path().join("data").join("zcode-acp.sqlite3"))
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    std::io::BufReader::new(c.stdout.take().expect("stdout")).read_line(&mut line).expect("read");
    assert_eq!(line.trim(), "locked");
    c
}

fn journal_error(list: &[Value], id: &str) -> Option<String> {
    let row = list.iter().find(|i| i["id"] == id)?;
    row.get("journalError").map(|e| e.as_str().unwrap_or_default().to_owned())
}

fn bridge_status(b: &Bridge) -> Value {
    let (code, body) = b.http_get("/status", Some(TEST_TOKEN));
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).expect("status JSON")
}

#[test]
fn a_turn_written_while_the_store_is_locked_is_kept_and_the_failure_is_reported() {
    let home = Home::new();
    let env = [("ZCODE_ACP_HEARTBEAT_MS", "100"), ("ZCODE_ACP_TEST_JOURNAL_BUSY_MS", "50")];
    let hub = Hub::start(&home, &env);
    let mut b = Bridge::start_env(&home, &demo_agent(0), &env);
    initialize(&mut b.editor, json!({}));
    let sid = new_session(&mut b.editor, home.path());
    let id = b.id();
    wait_instances(hub.port, "the bridge", |l| l.iter().any(|i| i["id"] == id.as_str()));
    assert_eq!(journal_error(&zcode_tests::hub::instances(hub.port), &id), None);
    assert!(bridge_status(&b).get("journalError").is_none());

    let mut lock = hold_store_lock(&home);
    let (r, _) = b.editor.call("session/prompt", prompt(&sid, "written while locked"));
    assert_eq!(r["result"]["stopReason"], "end_turn");
    // Locked past the busy timeout and the retries: the listing and the bridge say so.
    let list = wait_instances(hub.port, "journalError in the listing", |l| journal_error(l, &id).is_some());
    let e = journal_error(&list, &id).unwrap();
    assert!(e.contains("history is not being saved") && e.contains("locked"), "{e}");
    let status = bridge_status(&b);
    assert!(status["journalError"].as_str().is_some_and(|e| e.contains("locked")), "{status}");
    assert!(status["sessions"].is_array(), "{status}");

    lock.kill().expect("kill the lock holder");
    lock.wait().expect("reap the lock holder");
    wait_instances(hub.port, "journalError to clear", |l| {
        l.iter().any(|i| i["id"] == id.as_str()) && journal_error(l, &id).is_none()
    });
    let deadline = std::time::Instant::now() + WAIT;
    while bridge_status(&b).get("journalError").is_some() {
        assert!(std::time::Instant::now() < deadline, "journalError stays in /status");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }

    // Every message of the turn is in the journal: a remote replay shows them all.
    let mut remote = b.remote();
    initialize(&mut remote, json!({}));
    let (resp, msgs) =
        remote.call("session/load", json!({"sessionId": sid, "cwd": home.path(), "mcpServers": []}));
    assert_eq!(resp["result"]["replayMeta"]["totalMessages"], 5, "{resp}");
    let kinds: Vec<&str> = msgs
        .iter()
        .filter(|m| m["method"] == "session/update")
        .filter_map(|m| m["params"]["update"]["sessionUpdate"].as_str())
        .filter(|k| {
            ["user_message_chunk", "agent_thought_chunk", "plan", "tool_call", "agent_message_chunk"]
                .contains(k)
        })
        .collect();
    assert_eq!(kinds.len(), 5, "{msgs:#?}");
    let agent = msgs
        .iter()
        .find(|m| m["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .expect("the agent's answer");
    let text = agent["params"]["update"]["content"]["text"].as_str().unwrap_or_default();
    assert!(text.contains("You said: \"written while locked\""), "{text}");
}
