//! The `zcode-acp` command line: its help, the token command, config errors, and subcommands
//! that are not built yet failing honestly.

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
    for name in ["bridge", "serve", "hub", "chat", "up", "token", "demo-agent"] {
        let line = out
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("{name} missing from --help:\n{out}"));
        assert!(line.split_whitespace().count() > 3, "{name} has no description: {line:?}");
    }
    let (code, out, _) = run(&home, &["demo-agent", "--help"], &[]);
    assert_eq!(code, 0);
    for keyword in ["permission", "read:PATH", "write:PATH", "long", "fail"] {
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
    let token = url.split("#token=").nth(1).expect("the token in the fragment").to_owned();
    assert_eq!(token.len(), 43, "{url}");
    let port: u16 = url.trim_start_matches("http://127.0.0.1:").split('/').next().unwrap().parse().unwrap();
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
    if let Ok(pid) = std::fs::read_to_string(home.path().join("run").join("hub.pid")) {
        let _ = std::process::Command::new("kill").arg(pid.trim()).status();
    }
}

#[test]
fn token_is_generated_once_and_rotated() {
    let home = Home::new();
    let (code, first, err) = run(&home, &["token", "--public-url", "https://phone.example/"], &[]);
    assert_eq!(code, 0, "{err}");
    let first = first.trim().to_owned();
    assert!(first.len() >= 43, "{first}");
    // The pairing URL carries the token in the fragment, with a QR code of it.
    assert!(err.contains(&format!("https://phone.example/#token={first}")), "{err}");
    assert!(err.contains('█') && err.contains('▀'), "no QR code: {err}");
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
