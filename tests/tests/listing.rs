//! ACP `session/list`, from the editor and from a remote client alike, agrees with the HTTP
//! history listing: tombstoned sessions are left out and renamed ones carry their new title.

use serde_json::{Value, json};
use zcode_tests::{
    Bridge, Home, Peer, TEST_TOKEN, demo_agent, http_with_body, initialize, new_session, prompt,
};

fn post(b: &Bridge, path: &str, body: Option<&str>) {
    let r = http_with_body(b.port, "POST", path, Some(TEST_TOKEN), body.map(str::as_bytes));
    assert_eq!(r.status, 200, "{path}: {}", r.text());
}

fn list(p: &mut Peer, home: &Home) -> Vec<Value> {
    let (r, _) = p.call("session/list", json!({"cwd": home.path()}));
    r["result"]["sessions"].as_array().unwrap_or_else(|| panic!("session/list failed: {r}")).clone()
}

#[test]
fn session_list_hides_deleted_sessions_and_shows_renamed_titles() {
    let home = Home::new();
    let mut b = Bridge::start(&home, &demo_agent(0));
    initialize(&mut b.editor, json!({}));
    let kept = new_session(&mut b.editor, home.path());
    let doomed = new_session(&mut b.editor, home.path());
    for (sid, text) in [(&kept, "first words"), (&doomed, "throwaway")] {
        let (r, _) = b.editor.call("session/prompt", prompt(sid, text));
        assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    }
    let before = list(&mut b.editor, &home);
    assert_eq!(before.len(), 2, "the agent lists both sessions to begin with: {before:?}");

    post(&b, &format!("/sessions/{kept}/rename"), Some(r#"{"title": "Renamed by a phone"}"#));
    post(&b, &format!("/sessions/{doomed}/close"), None);
    post(&b, &format!("/sessions/{doomed}/delete"), None);

    let mut remote = b.remote();
    initialize(&mut remote, json!({}));
    for (who, rows) in [("editor", list(&mut b.editor, &home)), ("remote", list(&mut remote, &home))] {
        let ids: Vec<&str> = rows.iter().filter_map(|r| r["sessionId"].as_str()).collect();
        assert_eq!(ids, vec![kept.as_str()], "{who}: a deleted session is not listed: {rows:?}");
        assert_eq!(rows[0]["title"], "Renamed by a phone", "{who}: the rename shows: {rows:?}");
    }
}
