//! The demo agent under a real ACP client: acpx (0.19.1) drives it as an editor would.

use serde_json::Value;
use zcode_tests::{Home, acpx_command, agent_text, bin, json_lines};

fn demo_agent_command() -> String {
    format!("{} demo-agent --delay-ms 0", bin().display())
}

#[test]
fn acpx_runs_a_turn_and_answers_the_permission() {
    let home = Home::new();
    let mut cmd = acpx_command(&home, home.path(), &demo_agent_command());
    let out = cmd.args(["--approve-all", "--format", "json", "exec", "permission please"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "acpx failed: {stderr}");
    let lines = json_lines(&out.stdout);
    let granted = lines.iter().find(|m| m["method"] == "session/request_permission");
    assert!(granted.is_some(), "no permission request in {lines:?}");
    assert!(agent_text(&lines).contains("Permission granted (allow)"), "{}", agent_text(&lines));
    let done = lines.iter().rev().find(|m| m["result"]["stopReason"].is_string()).expect("a prompt result");
    assert_eq!(done["result"]["stopReason"], "end_turn");
}

#[test]
fn acpx_deny_all_is_honoured() {
    let home = Home::new();
    let mut cmd = acpx_command(&home, home.path(), &demo_agent_command());
    let out = cmd.args(["--deny-all", "--format", "json", "exec", "permission"]).output().unwrap();
    // acpx exits 5 (permission denied) while the turn itself ends normally.
    assert_eq!(out.status.code(), Some(5), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<Value> = json_lines(&out.stdout);
    assert!(agent_text(&lines).contains("Permission denied (reject)"), "{}", agent_text(&lines));
}
