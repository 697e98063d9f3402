//! acpx (a real ACP client, 0.19.1) as the editor, spawning `zcode-acp bridge -- <agent>`:
//! the bridge must be invisible to it, with the SDK 1.9.0 example agent and the demo agent.

use zcode_tests::{Home, acpx_command, agent_text, bin, json_lines, sdk_example_agent};

fn bridge_over(agent: &str) -> String {
    format!("{} bridge -- {agent}", bin().display())
}

fn run(
    home: &Home,
    agent: &str,
    flags: &[&str],
    text: &str,
) -> (Option<i32>, Vec<serde_json::Value>, String) {
    let mut cmd = acpx_command(home, home.path(), &bridge_over(agent));
    cmd.env("ZCODE_ACP_REMOTE_PORT", "0").env("ZCODE_ACP_REMOTE_TOKEN", zcode_tests::TEST_TOKEN);
    let out = cmd.args(flags).args(["--format", "json", "exec", text]).output().expect("run acpx");
    (out.status.code(), json_lines(&out.stdout), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn stop_reason(lines: &[serde_json::Value]) -> String {
    lines
        .iter()
        .rev()
        .find_map(|m| m["result"]["stopReason"].as_str())
        .unwrap_or_else(|| panic!("no prompt result in {lines:?}"))
        .to_owned()
}

#[test]
fn acpx_through_the_bridge_to_the_sdk_example_agent_approve_all() {
    let home = Home::new();
    let agent = format!("node {}", sdk_example_agent().display());
    let (code, lines, err) = run(&home, &agent, &["--approve-all"], "Hello");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(stop_reason(&lines), "end_turn");
    let init =
        lines.iter().find(|m| m["result"]["agentCapabilities"].is_object()).expect("initialize result");
    assert_eq!(init["result"]["agentCapabilities"]["_meta"]["zcode"]["fs"], true);
    assert!(agent_text(&lines).contains("successfully updated the configuration"), "{}", agent_text(&lines));
}

#[test]
fn acpx_through_the_bridge_to_the_sdk_example_agent_deny_all() {
    let home = Home::new();
    let agent = format!("node {}", sdk_example_agent().display());
    let (code, lines, err) = run(&home, &agent, &["--deny-all"], "Hello");
    // acpx reports the denial with exit 5; the turn itself ends normally.
    assert_eq!(code, Some(5), "{err}");
    assert_eq!(stop_reason(&lines), "end_turn");
    assert!(agent_text(&lines).contains("prefer not to make that change"), "{}", agent_text(&lines));
}

#[test]
fn acpx_through_the_bridge_to_the_demo_agent_permission_keyword() {
    let home = Home::new();
    let agent = format!("{} demo-agent --delay-ms 0", bin().display());
    let (code, lines, err) = run(&home, &agent, &["--approve-all"], "permission");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(stop_reason(&lines), "end_turn");
    assert!(agent_text(&lines).contains("Permission granted (allow)"), "{}", agent_text(&lines));
}
