//! Big session histories for replay tests: a session the demo agent knows (one real turn),
//! then filler messages written straight into the journal while no bridge runs.

use crate::{Bridge, Home, demo_agent, initialize, new_session, prompt};
use serde_json::json;
use zcode_shared::store::{NewMessage, Store};

/// The text of each filler message, so `n` messages weigh about `n` × 10 KiB on the wire.
const FILLER_BYTES: usize = 10 * 1024;

/// A session with one real turn and then `n` filler messages (`agent_message_chunk`s with
/// `messageId` `f0`…`f{n-1}`, oldest first). Returns its id; no bridge is left running. Start
/// the test's hub first: the seeding bridge would otherwise start one for the home.
pub fn session_with_filler(home: &Home, n: usize) -> String {
    let sid = {
        let mut b = Bridge::start(home, &demo_agent(0));
        initialize(&mut b.editor, json!({}));
        let sid = new_session(&mut b.editor, home.path());
        let (r, _) = b.editor.call("session/prompt", prompt(&sid, "seed"));
        assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
        assert!(b.editor.close_then_exited(), "the seeding bridge did not exit");
        sid
    };
    let mut store = Store::open_in(&home.path().join("data")).expect("the journal");
    let text = "z".repeat(FILLER_BYTES);
    store
        .write(|w| {
            for i in 0..n {
                let body = json!({
                    "sessionUpdate": "agent_message_chunk",
                    "messageId": format!("f{i}"),
                    "content": {"type": "text", "text": text},
                });
                let msg =
                    NewMessage { msg_id: format!("f{i}"), kind: "agent".into(), body: body.to_string() };
                w.append(&sid, &msg, 1)?;
            }
            Ok(())
        })
        .expect("filling the journal");
    sid
}

/// How many filler messages make about `mib` MiB of replay.
pub fn filler_for_mib(mib: usize) -> usize {
    (mib << 20).div_ceil(FILLER_BYTES)
}

/// The filler index of a replayed `session/update`, if it is one.
pub fn filler_index(update: &serde_json::Value) -> Option<usize> {
    update["params"]["update"]["messageId"].as_str()?.strip_prefix('f')?.parse().ok()
}
