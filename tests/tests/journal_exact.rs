//! Replay returns what was sent, through real bridges: an update that passes byte-exact live
//! (big integers, number spellings, escapes, unknown kinds and members) comes back with the
//! same bytes when a second client `session/load`s it from the journal; so does a prompt's
//! block, echoed to the other clients.

use serde_json::value::RawValue;
use serde_json::{Value, json};
use std::collections::HashMap;
use zcode_tests::{Bridge, Home, Peer, initialize, new_session, shared_session};

/// The `update` of a `session/update` line, as the text it arrived as.
fn raw_update(line: &str) -> Option<String> {
    type Members = HashMap<String, Box<RawValue>>;
    let msg: Members = serde_json::from_str(line).ok()?;
    if msg.get("method")?.get() != r#""session/update""# {
        return None;
    }
    let params: Members = serde_json::from_str(msg.get("params")?.get()).ok()?;
    Some(params.get("update")?.get().to_owned())
}

/// Sends a request; returns its response and the raw `update`s that came before it.
fn call_raw(p: &mut Peer, method: &str, params: Value) -> (Value, Vec<String>) {
    let id = p.request(method, params);
    let mut updates = vec![];
    loop {
        let line = p.recv_raw(&format!("the answer to {method}"));
        let msg: Value = serde_json::from_str(&line).expect("JSON");
        if msg.get("id") == Some(&id) && msg.get("method").is_none() {
            return (msg, updates);
        }
        updates.extend(raw_update(&line));
    }
}

fn load_raw(b: &Bridge, sid: &str, cwd: &std::path::Path) -> Vec<String> {
    let mut second = b.remote();
    initialize(&mut second, json!({}));
    let (r, updates) =
        call_raw(&mut second, "session/load", json!({"sessionId": sid, "cwd": cwd, "mcpServers": []}));
    assert!(r["result"]["replayMeta"].is_object(), "{r}");
    updates
}

#[test]
fn the_issues_update_replays_with_the_bytes_it_was_sent_with() {
    let home = Home::new();
    let (b, sid, mut remote) = shared_session(&home, 0, json!({}));
    let want = r#"{"sessionUpdate":"zz_future_kind","_meta":{"zcode-test":[1.50,2e3]},"value":123456789012345678901234567890}"#;
    let (r, live) = call_raw(&mut remote, "_demo/echo", json!({"sessionId": sid}));
    assert!(r["result"].is_object(), "{r}");
    assert!(live.iter().any(|u| u == want), "the live stream changed the update:\n{live:#?}");
    let replay = load_raw(&b, &sid, home.path());
    assert!(replay.iter().any(|u| u == want), "the replay changed the update:\n{replay:#?}");
}

#[test]
fn a_prompts_blocks_are_echoed_to_other_clients_and_replayed_byte_for_byte() {
    let home = Home::new();
    let (mut b, sid, mut remote) = shared_session(&home, 0, json!({}));
    let block = r#"{"type":"text","text":"caf\u00e9 1.50","_meta":{"x":[1.50,2e3],"n":123456789012345678901234567890}}"#;
    let sid_json = Value::from(sid.as_str());
    remote.send_raw(&format!(
        r#"{{"jsonrpc":"2.0","id":"p1","method":"session/prompt","params":{{"sessionId":{sid_json},"prompt":[{block}]}}}}"#
    ));
    let (r, _) = remote.response_to(&json!("p1"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let want = format!(r#""content":{block}}}"#);
    let echo = loop {
        let line = b.editor.recv_raw("the prompt echoed to the editor");
        match raw_update(&line) {
            Some(u) if u.contains(r#""sessionUpdate":"user_message_chunk""#) => break u,
            _ => {}
        }
    };
    assert!(echo.ends_with(&want), "the echo changed the block:\n{echo}\nwant it to end with\n{want}");
    let replay = load_raw(&b, &sid, home.path());
    assert!(
        replay.iter().any(|u| u.contains(r#""user_message_chunk""#) && u.ends_with(&want)),
        "the replay changed the block:\n{replay:#?}"
    );
}

/// A scripted ACP agent: a prompt streams the updates in `UPDATES` exactly as written.
const SCRIPT_AGENT: &str = r#"
import json, sys
UPDATES = [l for l in open(sys.argv[1]).read().split("\n") if l]
def send(line):
    sys.stdout.write(line + "\n"); sys.stdout.flush()
for line in sys.stdin:
    msg = json.loads(line)
    if "method" not in msg or "id" not in msg:
        continue
    m, i = msg["method"], json.dumps(msg["id"])
    if m == "initialize":
        send('{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":1,"agentCapabilities":{"loadSession":true}}}' % i)
    elif m == "session/new":
        send('{"jsonrpc":"2.0","id":%s,"result":{"sessionId":"scripted-1"}}' % i)
    elif m == "session/load":
        send('{"jsonrpc":"2.0","id":%s,"result":{}}' % i)
    elif m == "session/prompt":
        sid = json.dumps(msg["params"]["sessionId"])
        for u in UPDATES:
            send('{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":%s,"update":%s}}' % (sid, u))
        send('{"jsonrpc":"2.0","id":%s,"result":{"stopReason":"end_turn"}}' % i)
    else:
        send('{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no"}}' % i)
"#;

#[test]
fn merged_messages_keep_every_value_as_sent() {
    let home = Home::new();
    let updates = [
        // Two chunks of one message, the same but for their text: merged into one.
        r#"{"sessionUpdate":"agent_message_chunk","messageId":"m1","content":{"type":"text","text":"caf\u00e9 ","_meta":{"n":-0.0}},"_meta":{"x":[1.50,2e3]}}"#,
        r#"{"sessionUpdate":"agent_message_chunk","messageId":"m1","content":{"type":"text","text":"\ud83d\ude00","_meta":{"n":-0.0}},"_meta":{"x":[1.50,2e3]}}"#,
        r#"{"sessionUpdate":"tool_call","toolCallId":"c1","title":"t","rawInput":{"big":123456789012345678901234567890},"status":"pending"}"#,
        r#"{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"completed","rawOutput":{"y":1E+2},"zUnknown":[2e3]}"#,
        r#"{"sessionUpdate":"plan","entries":[{"content":"\u0041","priority":"high","status":"pending"}],"_meta":{"v":1.50}}"#,
        r#"{"sessionUpdate":"usage_update","used":18446744073709551616,"size":2e5}"#,
    ];
    let script = home.path().join("agent.py");
    let lines = home.path().join("updates.jsonl");
    std::fs::write(&script, SCRIPT_AGENT).unwrap();
    std::fs::write(&lines, updates.join("\n")).unwrap();
    let agent: Vec<String> =
        vec!["/usr/bin/python3".into(), script.display().to_string(), lines.display().to_string()];
    let mut b = Bridge::start(&home, &agent);
    initialize(&mut b.editor, json!({}));
    let sid = new_session(&mut b.editor, home.path());
    let (r, live) = call_raw(
        &mut b.editor,
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]}),
    );
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert_eq!(from_agent(&live), updates, "the live stream is byte-exact");

    let replay = load_raw(&b, &sid, home.path());
    let want = [
        // The merged message: the first chunk, texts joined with their escapes as sent.
        r#"{"sessionUpdate":"agent_message_chunk","messageId":"m1","content":{"type":"text","text":"caf\u00e9 \ud83d\ude00","_meta":{"n":-0.0}},"_meta":{"x":[1.50,2e3]}}"#,
        // The call with each member its updates carried replacing its own, values as sent.
        r#"{"sessionUpdate":"tool_call","toolCallId":"c1","title":"t","rawInput":{"big":123456789012345678901234567890},"status":"completed","rawOutput":{"y":1E+2},"zUnknown":[2e3]}"#,
        updates[4],
        updates[5],
    ];
    assert_eq!(from_agent(&replay), want, "the replay");
}

/// The updates the agent sent: not the prompt or the title, which the bridge adds.
fn from_agent(updates: &[String]) -> Vec<&str> {
    let bridges = [r#""sessionUpdate":"user_message_chunk""#, r#""sessionUpdate":"session_info_update""#];
    updates.iter().map(String::as_str).filter(|u| !bridges.iter().any(|b| u.contains(b))).collect()
}
