//! The `zcode-acp` command line: its help, the token command, config errors, and subcommands
//! that are not built yet failing honestly.

use std::os::unix::fs::PermissionsExt;
use zcode_tests::Home;

fn run(home: &Home, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = home.command(args);
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
fn unbuilt_subcommands_say_so_and_fail() {
    let home = Home::new();
    for args in [&["serve"][..], &["hub"], &["chat"], &["up"]] {
        let (code, out, err) = run(&home, args, &[]);
        assert_ne!(code, 0, "{args:?} pretended to work");
        assert!(err.contains("not built yet"), "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?} wrote to stdout: {out}");
    }
}

#[test]
fn token_is_generated_once_and_rotated() {
    let home = Home::new();
    let (code, first, err) = run(&home, &["token"], &[]);
    assert_eq!(code, 0, "{err}");
    let first = first.trim().to_owned();
    assert!(first.len() >= 43, "{first}");
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
