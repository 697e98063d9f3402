//! Discovery keeps what ran: `/status` and `/api/instances` list a conversation while it is
//! "currently running" (an open editor tab, or a remote attachment that ran a turn) until it is
//! closed or its bridge exits, whoever is still attached.

use serde_json::{Value, json};
use std::collections::BTreeSet;
use zcode_tests::hub::{Hub, wait_instances};
use zcode_tests::{
    Bridge, Home, Peer, TEST_TOKEN, demo_agent, http_with_body, initialize, new_session, prompt,
};

/// The session ids `/status` of bridge `b` lists.
fn status_ids(b: &Bridge) -> BTreeSet<String> {
    let r = zcode_tests::http(b.port, "GET", "/status", Some(TEST_TOKEN));
    assert_eq!(r.status, 200, "{}", r.text());
    ids(&r.json()["sessions"])
}

fn ids(rows: &Value) -> BTreeSet<String> {
    let rows = rows.as_array().unwrap_or_else(|| panic!("a sessions array: {rows}"));
    rows.iter().map(|s| s["sessionId"].as_str().expect("sessionId").to_owned()).collect()
}

fn post(b: &Bridge, path: &str, body: Option<&str>) {
    let r = http_with_body(b.port, "POST", path, Some(TEST_TOKEN), body.map(str::as_bytes));
    assert_eq!(r.status, 200, "{path}: {}", r.text());
}

/// A remote client on `b`, initialized.
fn remote(b: &Bridge) -> Peer {
    let mut r = b.remote();
    initialize(&mut r, json!({}));
    r
}

/// A session `p` creates in `home` and runs one turn on.
fn ran(p: &mut Peer, home: &Home) -> String {
    let sid = new_session(p, home.path());
    let (resp, _) = p.call("session/prompt", prompt(&sid, "hello"));
    assert_eq!(resp["result"]["stopReason"], "end_turn", "{resp}");
    sid
}

/// One bridge with a session in every state, a listed one renamed to `marker` last (a heartbeat
/// with that title was taken after everything else); returns the bridge, what must be listed,
/// and the remotes still connected.
fn bridge_in_every_state(home: &Home, marker: &str) -> (Bridge, BTreeSet<String>, Vec<Peer>) {
    let mut b = Bridge::start_env(home, &demo_agent(0), &[("ZCODE_ACP_HEARTBEAT_MS", "100")]);
    initialize(&mut b.editor, json!({}));
    let mut want = BTreeSet::new();
    // An open editor tab that ran a turn.
    let editor_tab = ran(&mut b.editor, home);
    want.insert(editor_tab.clone());
    // An editor tab never prompted: not a conversation yet.
    new_session(&mut b.editor, home.path());
    // Editor-driven, then closed.
    let closed_editor = ran(&mut b.editor, home);
    post(&b, &format!("/sessions/{closed_editor}/close"), None);

    // A remote still attached after its turn.
    let mut attached = remote(&b);
    want.insert(ran(&mut attached, home));
    // A remote that ran a turn and went away (a phone locking its screen).
    let mut gone = remote(&b);
    want.insert(ran(&mut gone, home));
    // A remote that created a session, never prompted it, and went away.
    new_session(&mut gone, home.path());
    gone.hang_up();
    // A remote that ran a turn, closed its session and stayed.
    let closed_remote = ran(&mut attached, home);
    post(&b, &format!("/sessions/{closed_remote}/close"), None);
    // A remote attached to a session it never prompted: listed only while it is on it.
    let mut never = remote(&b);
    new_session(&mut never, home.path());
    post(&b, &format!("/sessions/{editor_tab}/rename"), Some(&json!({"title": marker}).to_string()));
    (b, want, vec![attached, never])
}

#[test]
fn discovery_lists_what_ran_until_it_is_closed() {
    let home = Home::new();
    let hub = Hub::start(&home, &[]);
    let mut remotes = Vec::new();
    let bridges: Vec<(Bridge, BTreeSet<String>, String)> = (0..3)
        .map(|i| {
            let marker = format!("marker {i}");
            let (b, want, peers) = bridge_in_every_state(&home, &marker);
            remotes.extend(peers);
            (b, want, marker)
        })
        .collect();

    for (b, want, _) in &bridges {
        assert_eq!(&status_ids(b), want, "/status of bridge {}", b.id());
    }
    // The heartbeat that carries each marker title was taken after everything else happened.
    let list = wait_instances(hub.port, "every bridge's marker heartbeat", |list| {
        bridges.iter().all(|(b, _, marker)| {
            list.iter()
                .filter(|i| i["id"] == b.id())
                .flat_map(|i| i["sessions"].as_array().cloned().unwrap_or_default())
                .any(|s| s["title"] == marker.as_str())
        })
    });
    assert_eq!(list.len(), 3, "{list:?}");
    for (b, want, _) in &bridges {
        let instance = list.iter().find(|i| i["id"] == b.id()).expect("listed");
        assert_eq!(&ids(&instance["sessions"]), want, "/api/instances entry of bridge {}", b.id());
    }
    drop(remotes);
}
