//! The `zcode-acp` command line: its help, the token command and its pairing URL, `stop`,
//! config errors, a quiet Ctrl-C and a missing agent binary (`up` itself: `cli_up.rs`).

use std::os::unix::fs::PermissionsExt;
use zcode_tests::Home;

fn run(home: &Home, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = home.command(args);
    // These tests read config.json's own values: the suite's default hub port must not shadow them.
    cmd.env_remove("ZCODE_ACP_HUB_PORT");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run zcode-acp");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn help_lists_every_subcommand_with_a_description() {
    let home = Home::new();
    let (code, out, _) = run(&home, &["--help"], &[]);
    assert_eq!(code, 0);
    for name in ["bridge", "serve", "hub", "chat", "up", "stop", "status", "token", "demo-agent"] {
        let line = out
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("{name} missing from --help:\n{out}"));
        assert!(line.split_whitespace().count() > 3, "{name} has no description: {line:?}");
    }
    let (code, out, _) = run(&home, &["demo-agent", "--help"], &[]);
    assert_eq!(code, 0);
    for keyword in ["permission", "permission:PATH", "read:PATH", "write:PATH", "long", "fail"] {
        assert!(out.contains(keyword), "demo-agent --help does not document {keyword}:\n{out}");
    }
}

#[test]
fn up_starts_the_hub_and_a_bridge_and_prints_the_pairing_url() {
    use std::io::BufRead;
    let home = Home::new();
    let project = tempfile::tempdir().unwrap();
    let mut cmd = home.command(&["up"]);
    cmd.env("ZCODE_ACP_REMOTE_PORT", "0").env("ZCODE_ACP_HEARTBEAT_MS", "200").current_dir(project.path());
    let mut child =
        cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::null()).spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = std::io::BufReader::new(stdout).lines();
    let open = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.trim_start().starts_with("open:"))
        .expect("an open: line");
    let url = open.split_whitespace().nth(1).unwrap().to_owned();
    // A one-time code, never the machine's token: redeemed, it is this device's own credential.
    let port: u16 = url.trim_start_matches("http://127.0.0.1:").split('/').next().unwrap().parse().unwrap();
    let token = zcode_tests::hub::redeem_pairing_url(port, &url);
    let machine = std::fs::read_to_string(home.path().join("token")).unwrap();
    assert!(!url.contains(machine.trim()), "the machine's token is in {url}");
    // The bridge registers with origin serve, in the project directory.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (s, body) = zcode_tests::http_get(port, "/api/instances", Some(&token));
        let list: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        let found = list.as_array().into_iter().flatten().any(|i| {
            i["origin"] == "serve"
                && i["workspace"] == std::fs::canonicalize(project.path()).unwrap().display().to_string()
        });
        if s == 200 && found {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the up bridge never registered: {s} {body}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = std::process::Command::new("kill").arg(child.id().to_string()).status();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    if let Some(pid) = zcode_tests::hub::hub_pid(&home).filter(|&pid| zcode_tests::runs_in(pid, home.path()))
    {
        let _ = std::process::Command::new("kill").arg(pid.to_string()).status();
    }
}

#[test]
fn token_is_generated_once_and_rotated() {
    let home = Home::new();
    let (code, first, err) = run(&home, &["token"], &[]);
    assert_eq!(code, 0, "{err}");
    let first = first.trim().to_owned();
    assert!(first.len() >= 43, "{first}");
    // The token is for local tools: never in a URL or a QR code; a phone pairs with a code.
    assert!(!err.contains(&first) && !err.contains('█'), "{err}");
    assert!(err.contains("zcode-acp pair"), "{err}");
    let file = home.path().join("token");
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(run(&home, &["token"], &[]).1.trim(), first);

    let (code, rotated, err) = run(&home, &["token", "--rotate"], &[]);
    assert_eq!(code, 0, "{err}");
    assert_ne!(rotated.trim(), first);
    assert_eq!(run(&home, &["token"], &[]).1.trim(), rotated.trim());
}

#[test]
fn the_environment_token_wins_and_cannot_be_rotated_from_here() {
    let home = Home::new();
    let env = [("ZCODE_ACP_REMOTE_TOKEN", "env-secret")];
    let (code, out, _) = run(&home, &["token"], &env);
    assert_eq!((code, out.trim()), (0, "env-secret"));
    let (code, _, err) = run(&home, &["token", "--rotate"], &env);
    assert_ne!(code, 0);
    assert!(err.contains("ZCODE_ACP_REMOTE_TOKEN"), "{err}");
    assert!(!home.path().join("token").exists(), "a token file was written anyway");
}

#[test]
fn an_invalid_config_file_is_named_and_never_overwritten() {
    let home = Home::new();
    let path = home.path().join("config.json");
    let text = "{\"remote\": {\"hubPort\": \"eighty\"}, \"mine\": 1}";
    std::fs::write(&path, text).unwrap();
    for args in [&["token"][..], &["token", "--rotate"]] {
        let (code, _, err) = run(&home, args, &[]);
        assert_ne!(code, 0);
        assert!(err.contains(&path.display().to_string()), "{err}");
        assert!(err.contains("remote.hubPort"), "{err}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    }
}

#[test]
fn pair_prints_a_one_time_code_for_the_running_hubs_port_and_says_when_a_phone_needs_a_tunnel() {
    use zcode_tests::TEST_TOKEN;
    let home = Home::new();
    // A hub on an OS-picked port while config.json says nothing (the default port, 8377).
    let hub = zcode_tests::hub::Hub::start(&home, &[]);
    let env = [("ZCODE_ACP_REMOTE_TOKEN", TEST_TOKEN)];
    let (code, url, err) = run(&home, &["pair"], &env);
    assert_eq!(code, 0, "{err}");
    let url = url.trim();
    assert!(url.starts_with(&format!("http://127.0.0.1:{}/#pair=", hub.port)), "{url}");
    assert!(!url.contains(TEST_TOKEN) && !err.contains(TEST_TOKEN), "the token was printed: {url} {err}");
    assert!(err.contains('█') && err.contains('▀'), "no QR code: {err}");
    let note = err.lines().find(|l| l.trim_start().starts_with("note:")).unwrap_or_else(|| panic!("{err}"));
    assert!(note.contains("--tunnel cloudflare") && note.contains("--public-url https://"), "{note}");
    // A tunnel's address needs no such note; each code is new.
    let (_, url2, err) = run(&home, &["pair", "--public-url", "https://phone.example"], &env);
    assert!(url2.trim().starts_with("https://phone.example/#pair="), "{url2}");
    assert!(!err.contains("note:"), "{err}");
    assert_ne!(url.split("#pair=").nth(1), url2.trim().split("#pair=").nth(1));
}

#[test]
fn pair_with_an_os_picked_port_and_no_hub_says_there_is_none() {
    let home = Home::new();
    let (code, out, err) = run(&home, &["pair"], &[("ZCODE_ACP_HUB_PORT", "0")]);
    assert_ne!(code, 0, "{out}{err}");
    assert!(!out.contains("#pair=") && !err.contains(":0/"), "a pairing URL with no hub: {out}{err}");
    assert!(err.contains("no hub is running"), "{err}");
}

#[test]
fn pair_and_token_hand_nothing_to_a_port_another_user_holds() {
    use zcode_tests::TEST_TOKEN;
    let home = Home::new();
    let port = zcode_tests::squat::free_port();
    let squatter = zcode_tests::squat::Squatter::start(port);
    squatter.wait_bound();
    let env = [("ZCODE_ACP_REMOTE_TOKEN", TEST_TOKEN), ("ZCODE_ACP_HUB_PORT", &port.to_string())];
    let (code, out, err) = run(&home, &["pair"], &env);
    assert_ne!(code, 0, "pair printed a URL for a port uid 65534 holds:\n{out}\n{err}");
    assert!(!out.contains("#pair=") && !err.contains("#pair="), "a pairing URL was printed:\n{out}\n{err}");
    // `token` prints the bare token for local tools, and no URL at all.
    let (code, out, err) = run(&home, &["token"], &env);
    assert_eq!((code, out.trim()), (0, TEST_TOKEN), "{err}");
    assert!(!err.contains("http"), "{err}");
    assert_eq!(squatter.received(), "", "the squatter was sent something");
}

#[test]
fn stop_stops_the_running_hub_and_says_so_or_says_there_is_none() {
    let home = Home::new();
    let mut hub = zcode_tests::hub::Hub::start(&home, &[]);
    let (code, out, err) = run(&home, &["stop"], &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&format!("stopped the hub (pid {})", hub.pid())), "{out}{err}");
    assert!(out.contains(&format!(":{}", hub.port)), "the port it served: {out}");
    let status = hub.wait_exit(zcode_tests::WAIT).expect("the hub exited");
    assert!(status.success(), "{status:?}");
    let (code, out, err) = run(&home, &["stop"], &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("no hub is running"), "{out}{err}");
}

#[test]
fn ctrl_c_on_a_bridge_stops_its_agent_without_a_warning() {
    use std::process::Stdio;
    let home = Home::new();
    let log = home.path().join("bridge.err");
    let stderr = Stdio::from(std::fs::File::create(&log).unwrap());
    let mut b = zcode_tests::Bridge::start_with_stderr(&home, &zcode_tests::demo_agent(1), stderr);
    zcode_tests::initialize(&mut b.editor, serde_json::json!({}));
    zcode_tests::new_session(&mut b.editor, home.path());
    zcode_tests::hub::signal(b.editor.pid(), "INT");
    let status = b.editor.wait_exit(zcode_tests::WAIT).expect("the bridge exited on SIGINT");
    assert!(status.success(), "{status:?}");
    let err = std::fs::read_to_string(&log).unwrap();
    assert!(err.contains("agent started"), "the agent never ran:\n{err}");
    assert!(!err.contains("WARN"), "Ctrl-C warned:\n{err}");
}

#[test]
fn a_missing_agent_binary_is_named_once_and_said_to_be_not_found() {
    use std::process::Stdio;
    let home = Home::new();
    let log = home.path().join("bridge.err");
    let stderr = Stdio::from(std::fs::File::create(&log).unwrap());
    let mut b = zcode_tests::Bridge::start_with_stderr(&home, &["zcode-no-such-agent".into()], stderr);
    let (resp, _) =
        b.editor.call("initialize", serde_json::json!({"protocolVersion": 1, "clientCapabilities": {}}));
    let msg = resp["error"]["message"].as_str().unwrap_or_else(|| panic!("not an error: {resp}"));
    let want = "zcode-no-such-agent: command not found: zcode-no-such-agent";
    assert!(msg.starts_with(want), "{msg}");
    assert_eq!(msg.matches("command not found").count(), 1, "{msg}");
    let err = std::fs::read_to_string(&log).unwrap();
    assert!(err.contains(want), "{err}");
}

#[test]
fn stop_signals_only_a_zcode_acp_hub_of_this_user() {
    use std::process::Command;
    let home = Home::new();
    // Another user's process, named in a pid file whose lock is held, as a hub's would be.
    let mut other = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "sleep", "60"])
        .spawn()
        .expect("setpriv: cannot drop privileges to uid 65534 for this test");
    // setpriv changes the uid, then becomes `sleep`: wait for the exec.
    let deadline = std::time::Instant::now() + zcode_tests::WAIT;
    loop {
        let status = std::fs::read_to_string(format!("/proc/{}/status", other.id())).unwrap_or_default();
        if status.lines().any(|l| l == "Name:\tsleep") {
            assert!(
                status.lines().any(|l| l.starts_with("Uid:\t65534")),
                "cannot drop privileges to uid 65534 for this test (setpriv): {status}"
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline && other.try_wait().unwrap().is_none(),
            "cannot drop privileges to uid 65534 for this test (setpriv did not run sleep)"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    for (victim, why) in [(other.id(), "belongs to uid 65534"), (0, "not `zcode-acp hub`")] {
        let mut holder = zcode_tests::hub::hold_hub_lock(&home, victim);
        let victim = if victim == 0 { holder.id() } else { victim };
        let (code, out, err) = run(&home, &["stop"], &[]);
        assert_eq!(code, 1, "{out}{err}");
        assert!(err.contains(&format!("not stopping pid {victim}")) && err.contains(why), "{err}");
        assert!(zcode_tests::alive(victim), "stop signalled pid {victim} anyway");
        let _ = holder.kill();
        let _ = holder.wait();
    }
    let _ = Command::new("kill").arg(other.id().to_string()).status();
    let _ = other.wait();
}

#[test]
fn serve_takes_a_named_agent_and_names_the_ones_there_are_for_an_unknown_name() {
    let home = Home::new();
    let config =
        serde_json::json!({"agents": {"demo": {"command": zcode_tests::bin(), "args": ["demo-agent"]}}});
    std::fs::write(home.path().join("config.json"), config.to_string()).unwrap();
    let (code, _, err) = run(&home, &["serve", "--cwd", "/tmp", "--agent", "nope"], &[]);
    assert_ne!(code, 0);
    assert!(err.contains("no agent named \"nope\"") && err.contains("demo"), "{err}");
    let (code, _, err) = run(&home, &["serve", "--agent", "demo", "--", "sh"], &[]);
    assert_eq!(code, 2, "--agent and a command after -- are one or the other: {err}");
}

#[test]
fn a_config_error_is_one_line_without_a_backtrace_whatever_rust_backtrace_says() {
    let home = Home::new();
    let path = home.path().join("config.json");
    std::fs::write(&path, "{\"remote\": {\"hubPort\": \"eighty\"}}").unwrap();
    let project = home.path().display().to_string();
    for args in [
        &["token"][..],
        &["stop"],
        &["status"],
        &["up"],
        &["hub"],
        &["hub", "--background"],
        &["bridge"],
        &["serve", "--cwd", &project],
        &["chat", "--cwd", &project],
        &["quota"],
    ] {
        let (code, out, err) = run(&home, args, &[("RUST_BACKTRACE", "1"), ("RUST_LIB_BACKTRACE", "1")]);
        assert_eq!(code, 1, "{args:?}: {out}{err}");
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?} printed more than one line:\n{err}");
        assert!(lines[0].starts_with("zcode-acp: "), "{args:?}: {err}");
        assert!(
            lines[0].contains(&path.display().to_string()) && lines[0].contains("remote.hubPort"),
            "{err}"
        );
    }
}

/// The lines of the QR code in `text`: those made of the half-block characters and spaces
/// (inside any colour escapes), at least 20 wide.
fn qr_lines(text: &str) -> Vec<(usize, String)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i, strip_sgr(l.trim_end_matches('\r'))))
        .filter(|(_, l)| l.chars().count() >= 20 && l.chars().all(|c| " █▀▄".contains(c)))
        .collect()
}

/// `line` without its SGR escapes (`ESC [ … m`).
fn strip_sgr(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[test]
fn the_qr_code_has_a_quiet_zone_and_explicit_colours_on_a_terminal() {
    let home = Home::new();
    let _hub = zcode_tests::hub::Hub::start(&home, &[]);
    // Under a pseudo-terminal (script(1)), as a person runs it.
    let line = format!("'{}' pair --public-url https://phone.example/", zcode_tests::bin().display());
    let mut cmd = std::process::Command::new("script");
    cmd.args(["-qec", &line, "/dev/null"]).env("ZCODE_ACP_HOME", home.path()).env_remove("NO_COLOR");
    cmd.env("ZCODE_ACP_REMOTE_TOKEN", zcode_tests::TEST_TOKEN);
    let out = cmd.stdin(std::process::Stdio::null()).output().expect("script(1)");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let rows = qr_lines(&text);
    assert!(rows.len() >= 12, "no QR code:\n{text}");
    let raw: Vec<&str> = text.lines().collect();
    for (i, plain) in &rows {
        // Every cell's two modules have explicit colours: dark on light, set before the first
        // module and reset after the last, so the terminal's own colours never show through.
        let l = raw[*i].trim_end_matches('\r');
        assert!(l.starts_with("\u{1b}["), "row {i} has no colours of its own: {l:?}");
        assert!(l.ends_with("\u{1b}[0m"), "row {i} does not reset its colours: {l:?}");
        // A quiet zone of 4 modules left and right (one module per column).
        assert!(plain.starts_with("    ") && plain.ends_with("    "), "no quiet zone: {plain:?}");
    }
    // And 4 modules (two rows of half blocks) above and below.
    for (_, plain) in rows.iter().take(2).chain(rows.iter().rev().take(2)) {
        assert!(plain.trim().is_empty(), "no quiet zone above or below: {plain:?}\n{text}");
    }
}

#[test]
fn the_only_this_machine_note_comes_before_the_qr_code() {
    use zcode_tests::TEST_TOKEN;
    let home = Home::new();
    let _hub = zcode_tests::hub::Hub::start(&home, &[]);
    let (code, _, err) = run(&home, &["pair"], &[("ZCODE_ACP_REMOTE_TOKEN", TEST_TOKEN)]);
    assert_eq!(code, 0, "{err}");
    let note =
        err.lines().position(|l| l.trim_start().starts_with("note:")).unwrap_or_else(|| panic!("{err}"));
    let qr = qr_lines(&err);
    assert!(!qr.is_empty(), "no QR code:\n{err}");
    assert!(note < qr[0].0, "the note comes after the QR code:\n{err}");
    // Piped (not a terminal), the code keeps its quiet zone, without colour escapes.
    assert!(!err.contains('\u{1b}'), "colour escapes in piped output:\n{err}");
    assert!(qr.iter().all(|(_, l)| l.starts_with("    ") && l.ends_with("    ")), "{err}");
}
