//! A deleted session stays deleted (issue 29, point 1): only real use from an editor or CLI
//! (the bridge's stdio client; `chat` is one) lifts a tombstone. A remote client's attach,
//! even with history, and its prompts never do; the web client used to attach the session it
//! had just deleted (a metadata-only `session/load` when leaving its screen), and the load
//! brought it back to the history, the project's count and `session/list`.

use serde_json::{Value, json};
use std::path::Path;
use zcode_shared::store::Store;
use zcode_tests::hub::{AUTH, Hub, Reply, http, listed, wait_instances, wait_until};
use zcode_tests::{Bridge, Home, Peer, demo_agent, initialize, new_session, prompt};

fn get(hub: &Hub, path: &str) -> Reply {
    http(hub.port, "GET", path, &[AUTH], b"")
}

fn post(hub: &Hub, path: &str) -> Reply {
    http(hub.port, "POST", path, &[AUTH, ("Content-Type", "application/json")], b"{}")
}

/// The session ids the editor's `session/list` shows for `cwd` (read through the tasks index
/// after every write the bridge queued before it).
fn session_list(editor: &mut Peer, cwd: &Path) -> Vec<String> {
    let (r, _) = editor.call("session/list", json!({"cwd": cwd}));
    let rows = r["result"]["sessions"].as_array().unwrap_or_else(|| panic!("session/list failed: {r}"));
    rows.iter().filter_map(|s| s["sessionId"].as_str().map(str::to_owned)).collect()
}

/// What the hub's history and project list say: (history ids, the project's session count).
fn hub_view(hub: &Hub, p: &Path) -> (Vec<String>, Value) {
    let enc: String = url_encode(&p.display().to_string());
    let page = get(hub, &format!("/api/projects/sessions?workspacePath={enc}"));
    assert_eq!(page.status, 200, "{}", page.text());
    let ids = page.json()["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .filter_map(|s| s["sessionId"].as_str().map(str::to_owned))
        .collect();
    let projects = get(hub, "/api/projects").json();
    let count = projects
        .as_array()
        .and_then(|l| l.iter().find(|r| r["workspacePath"] == p.display().to_string()))
        .map_or(Value::Null, |r| r["sessions"].clone());
    (ids, count)
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'/' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn load(peer: &mut Peer, sid: &str, cwd: &Path, limit: Option<u64>) -> Value {
    let mut params = json!({"sessionId": sid, "cwd": cwd, "mcpServers": []});
    if let Some(n) = limit {
        params["_meta"] = json!({"zcode": {"limit": n}});
    }
    let (r, _) = peer.call("session/load", params);
    assert!(r["result"].is_object(), "session/load failed: {r}");
    r
}

#[test]
fn a_session_deleted_from_a_phone_is_not_revived_by_the_phones_attach_only_by_an_editor() {
    let home = Home::new();
    let roots = home.path().display().to_string();
    let hub =
        Hub::start(&home, &[("ZCODE_ACP_PROJECT_ROOTS", roots.as_str()), ("ZCODE_ACP_HUB_TERMINAL", "0")]);
    let p = home.path().join("proj");
    std::fs::create_dir_all(&p).unwrap();
    let p = std::fs::canonicalize(&p).unwrap();
    let mut b = Bridge::start_env(&home, &demo_agent(0), &[("ZCODE_ACP_HEARTBEAT_MS", "200")]);
    let id = b.id();
    initialize(&mut b.editor, json!({}));
    let kept = new_session(&mut b.editor, &p);
    b.editor.call("session/prompt", prompt(&kept, "a conversation to keep"));
    wait_instances(hub.port, "the bridge's registration", |l| listed(l, &id));

    // The phone's session, closed and deleted from the phone, as the web client does.
    let mut phone = hub.connect(&id).unwrap();
    initialize(&mut phone, json!({}));
    let sid = new_session(&mut phone, &p);
    phone.call("session/prompt", prompt(&sid, "a conversation to delete"));
    assert_eq!(post(&hub, &format!("/api/instances/{id}/sessions/{sid}/close")).status, 200);
    let r = post(&hub, &format!("/api/instances/{id}/sessions/{sid}/delete"));
    assert_eq!(r.status, 200, "{}", r.text());

    // What leaving the deleted session's screen sent: a metadata-only attach. Then the phone
    // goes, so the session is no longer live anywhere (and the history would list it).
    load(&mut phone, &sid, &p, Some(0));
    drop(phone);
    wait_until("the hub to stop advertising the session", || {
        !get(&hub, "/api/instances").text().contains(&sid)
    });
    assert_eq!(
        session_list(&mut b.editor, &p),
        std::slice::from_ref(&kept),
        "session/list after a limit-0 load"
    );
    let store = Store::open_in(&home.path().join("data")).unwrap();
    assert_eq!(store.is_deleted(&sid).unwrap(), Some(true), "the store row after a limit-0 load");
    assert_eq!(hub_view(&hub, &p), (vec![kept.clone()], json!(1)), "history and project count");

    // A remote's load with history and its prompt are not an editor's use either.
    let mut phone = hub.connect(&id).unwrap();
    initialize(&mut phone, json!({}));
    load(&mut phone, &sid, &p, None);
    let (r, _) = phone.call("session/prompt", prompt(&sid, "still hidden"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert_eq!(
        session_list(&mut b.editor, &p),
        std::slice::from_ref(&kept),
        "session/list after a remote's use"
    );
    assert_eq!(store.is_deleted(&sid).unwrap(), Some(true));
    assert_eq!(hub_view(&hub, &p).1, json!(1));
    drop(phone);

    // An editor's load with history (an editor tab's, the `chat` CLI's) is real use: it
    // comes back everywhere.
    load(&mut b.editor, &sid, &p, None);
    let mut back = session_list(&mut b.editor, &p);
    back.sort();
    let mut want = vec![kept, sid.clone()];
    want.sort();
    assert_eq!(back, want, "an editor's load with history revives it");
    assert_eq!(store.is_deleted(&sid).unwrap(), Some(false));
    assert_eq!(hub_view(&hub, &p).1, json!(2));
}
