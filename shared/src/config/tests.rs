//! Config precedence (env over file over default), error messages, and key preservation.

use super::*;
use std::collections::HashMap;

fn env_with_home(dir: &std::path::Path, extra: &[(&str, &str)]) -> HashMap<String, String> {
    let mut env = HashMap::from([
        ("ZCODE_ACP_HOME".to_owned(), dir.to_string_lossy().into_owned()),
        ("HOME".to_owned(), "/home/user".to_owned()),
    ]);
    for (k, v) in extra {
        env.insert((*k).to_owned(), (*v).to_owned());
    }
    env
}

fn write_config(dir: &std::path::Path, text: &str) {
    std::fs::write(dir.join("config.json"), text).unwrap();
}

#[test]
fn defaults_without_file_or_env() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config::load_from(&env_with_home(dir.path(), &[])).unwrap();
    assert_eq!(cfg.remote.hub_port, 8377);
    assert_eq!(cfg.remote.hub_host, "127.0.0.1");
    assert_eq!(cfg.remote.bridge_port, 8378);
    assert_eq!(cfg.remote.token, None);
    assert!(cfg.remote.terminal.enabled);
    assert_eq!(cfg.remote.client_address_header, None, "no forwarded address is believed by default");
    assert_eq!(cfg.timings.heartbeat, Duration::from_secs(10));
    assert_eq!(cfg.timings.instance_ttl, Duration::from_secs(30));
    assert_eq!(cfg.timings.hub_idle, Duration::from_secs(600));
    assert!(cfg.agents.default_agent().is_none());
    assert_eq!(cfg.paths.config_file, dir.path().join("config.json"));
}

#[test]
fn file_beats_default_and_env_beats_file() {
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        r#"{"remote": {"token": "file-token", "hubPort": 9000, "hubHost": "0.0.0.0",
            "bridgePort": 9100, "projectRoots": ["~/Develop", "/srv"],
            "terminal": {"enabled": false, "app": "kitty", "command": "x {script}"},
            "clientAddressHeader": "CF-Connecting-IP"},
            "timings": {"heartbeatMs": 50}}"#,
    );
    let from_file = Config::load_from(&env_with_home(dir.path(), &[])).unwrap();
    assert_eq!(from_file.remote.token, Some(("file-token".into(), TokenOrigin::File)));
    assert_eq!(from_file.remote.hub_port, 9000);
    assert_eq!(from_file.remote.hub_host, "0.0.0.0");
    assert_eq!(from_file.remote.bridge_port, 9100);
    assert_eq!(
        from_file.remote.project_roots,
        vec![PathBuf::from("/home/user/Develop"), PathBuf::from("/srv")]
    );
    assert!(!from_file.remote.terminal.enabled);
    assert_eq!(from_file.remote.terminal.app.as_deref(), Some("kitty"));
    assert_eq!(from_file.timings.heartbeat, Duration::from_millis(50));
    assert_eq!(from_file.remote.client_address_header.as_deref(), Some("cf-connecting-ip"));

    let env = env_with_home(
        dir.path(),
        &[
            ("ZCODE_ACP_REMOTE_TOKEN", "env-token"),
            ("ZCODE_ACP_HUB_PORT", "0"),
            ("ZCODE_ACP_HUB_HOST", "127.0.0.2"),
            ("ZCODE_ACP_REMOTE_PORT", "9200"),
            ("ZCODE_ACP_PROJECT_ROOTS", "/a:~/b"),
            ("ZCODE_ACP_HUB_TERMINAL", "1"),
            ("ZCODE_ACP_HUB_TERMINAL_APP", "tmux"),
            ("ZCODE_ACP_HEARTBEAT_MS", "20"),
            ("ZCODE_ACP_SERVE_IDLE_MS", "30"),
            ("ZCODE_ACP_CLIENT_ADDRESS_HEADER", " X-Forwarded-For "),
        ],
    );
    let from_env = Config::load_from(&env).unwrap();
    assert_eq!(from_env.remote.token, Some(("env-token".into(), TokenOrigin::Env)));
    assert_eq!(from_env.remote.hub_port, 0);
    assert_eq!(from_env.remote.hub_host, "127.0.0.2");
    assert_eq!(from_env.remote.bridge_port, 9200);
    assert_eq!(from_env.remote.project_roots, vec![PathBuf::from("/a"), PathBuf::from("/home/user/b")]);
    assert!(from_env.remote.terminal.enabled);
    assert_eq!(from_env.remote.terminal.app.as_deref(), Some("tmux"));
    // Not overridden by env: still from the file.
    assert_eq!(from_env.remote.terminal.command.as_deref(), Some("x {script}"));
    assert_eq!(from_env.timings.heartbeat, Duration::from_millis(20));
    assert_eq!(from_env.timings.serve_idle, Duration::from_millis(30));
    assert_eq!(from_env.remote.client_address_header.as_deref(), Some("x-forwarded-for"));
    // An empty variable is unset: the file's value stands.
    let cleared =
        Config::load_from(&env_with_home(dir.path(), &[("ZCODE_ACP_CLIENT_ADDRESS_HEADER", "")])).unwrap();
    assert_eq!(cleared.remote.client_address_header.as_deref(), Some("cf-connecting-ip"));
}

#[test]
fn every_timing_knob_reads_its_variable() {
    let dir = tempfile::tempdir().unwrap();
    for (i, (var, _, _, field)) in KNOBS.iter().enumerate() {
        let ms = (i as u64 + 1) * 7;
        let cfg = Config::load_from(&env_with_home(dir.path(), &[(var, &ms.to_string())])).unwrap();
        let mut t = cfg.timings.clone();
        assert_eq!(*field(&mut t), Duration::from_millis(ms), "{var}");
    }
}

#[test]
fn agents_section_is_parsed() {
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        r#"{"agents": {"default": "claude",
            "claude": {"command": "npx", "args": ["claude-agent-acp"], "env": {"A": "1"}},
            "gemini": {"command": "gemini", "args": ["--acp"]}}}"#,
    );
    let cfg = Config::load_from(&env_with_home(dir.path(), &[])).unwrap();
    let a = cfg.agents.default_agent().unwrap();
    assert_eq!(a.command, "npx");
    assert_eq!(a.args, vec!["claude-agent-acp"]);
    assert_eq!(a.env.get("A").map(String::as_str), Some("1"));
    assert_eq!(cfg.agents.named.len(), 2);
    assert_eq!(cfg.agents.default_name(), "claude");
    assert_eq!(
        cfg.agents.choices(),
        vec![("claude".into(), "npx claude-agent-acp".into()), ("gemini".into(), "gemini --acp".into())]
    );
    assert!(!cfg.agents.knows(DEMO_AGENT), "the demo agent is a choice only as the default");
}

#[test]
fn without_a_default_the_demo_agent_is_the_first_choice() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), r#"{"agents": {"gemini": {"command": "gemini"}}}"#);
    let cfg = Config::load_from(&env_with_home(dir.path(), &[])).unwrap();
    assert_eq!(cfg.agents.default_name(), DEMO_AGENT);
    let names: Vec<String> = cfg.agents.choices().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, [DEMO_AGENT, "gemini"]);
    assert!(cfg.agents.knows(DEMO_AGENT) && cfg.agents.knows("gemini") && !cfg.agents.knows("claude"));
}

#[test]
fn invalid_files_name_the_file_and_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("{not json", "config.json is not valid"),
        ("[1,2]", "expected a JSON object"),
        (r#"{"remote": {"hubPort": "abc"}}"#, "`remote.hubPort` must be a port number"),
        (r#"{"remote": {"hubPort": 70000}}"#, "`remote.hubPort` must be a port number"),
        (r#"{"remote": {"projectRoots": "/a"}}"#, "`remote.projectRoots` must be an array"),
        (r#"{"remote": {"terminal": {"enabled": "no"}}}"#, "`remote.terminal.enabled` must be true or false"),
        (r#"{"agents": {"x": {"args": []}}}"#, "`agents.x.command` must be a non-empty string"),
        (r#"{"agents": {"default": "nope"}}"#, "`agents.default` names \"nope\""),
        (r#"{"timings": {"pingMs": -1}}"#, "`timings.pingMs` must be a non-negative integer"),
        (
            r#"{"remote": {"clientAddressHeader": "CF Connecting IP"}}"#,
            "`remote.clientAddressHeader` must be an HTTP header name",
        ),
        (r#"{"remote": {"clientAddressHeader": 5}}"#, "`remote.clientAddressHeader` must be a string"),
    ];
    for (text, want) in cases {
        write_config(dir.path(), text);
        let err = Config::load_from(&env_with_home(dir.path(), &[])).unwrap_err().to_string();
        assert!(err.contains(want), "{text}: {err}");
        assert!(err.contains(&dir.path().join("config.json").display().to_string()), "{err}");
        // The file is never rewritten with defaults.
        assert_eq!(std::fs::read_to_string(dir.path().join("config.json")).unwrap(), text);
    }
}

#[test]
fn bad_environment_values_name_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    for (var, val) in [
        ("ZCODE_ACP_HUB_PORT", "eighty"),
        ("ZCODE_ACP_REMOTE_PORT", "-1"),
        ("ZCODE_ACP_PING_MS", "1s"),
        ("ZCODE_ACP_HUB_TERMINAL", "maybe"),
        ("ZCODE_ACP_CLIENT_ADDRESS_HEADER", "X-Forwarded-For:"),
    ] {
        let err = Config::load_from(&env_with_home(dir.path(), &[(var, val)])).unwrap_err().to_string();
        assert!(err.contains(var), "{err}");
    }
}

#[test]
fn unreadable_file_is_an_error_not_a_default() {
    let dir = tempfile::tempdir().unwrap();
    // A directory where the file should be cannot be read as a file.
    std::fs::create_dir(dir.path().join("config.json")).unwrap();
    let err = Config::load_from(&env_with_home(dir.path(), &[])).unwrap_err();
    assert!(matches!(err, ConfigError::Unreadable { .. }), "{err}");
    assert!(err.to_string().contains("config.json"));
}

#[test]
fn writing_keeps_unknown_keys() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    write_config(dir.path(), r#"{"mine": {"x": [1, 2]}, "remote": {"hubPort": 9000, "extra": true}}"#);
    RawConfig::update(&path, |raw| {
        raw.set("remote.token", Value::String("t".into()))?;
        raw.set("remote.terminal.app", Value::String("tmux".into()))
    })
    .unwrap();
    let back: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(back["mine"]["x"], serde_json::json!([1, 2]));
    assert_eq!(back["remote"]["extra"], Value::Bool(true));
    assert_eq!(back["remote"]["hubPort"], serde_json::json!(9000));
    assert_eq!(back["remote"]["token"], "t");
    assert_eq!(back["remote"]["terminal"]["app"], "tmux");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
}

#[test]
fn set_refuses_to_replace_a_non_object() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), r#"{"remote": 5}"#);
    let mut raw = RawConfig::read(&dir.path().join("config.json")).unwrap();
    let err = raw.set("remote.token", Value::String("t".into())).unwrap_err().to_string();
    assert!(err.contains("`remote` must be an object"), "{err}");
}

#[test]
fn tilde_expansion() {
    let home = std::path::Path::new("/h");
    assert_eq!(expand_tilde("~", Some(home)), PathBuf::from("/h"));
    assert_eq!(expand_tilde("~/x", Some(home)), PathBuf::from("/h/x"));
    assert_eq!(expand_tilde("~other/x", Some(home)), PathBuf::from("~other/x"));
    assert_eq!(expand_tilde("/abs", Some(home)), PathBuf::from("/abs"));
}

#[test]
fn spawn_caps_default_file_env_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config::load_from(&env_with_home(dir.path(), &[])).unwrap();
    assert_eq!(cfg.remote.max_creates_in_flight, DEFAULT_MAX_CREATES_IN_FLIGHT);
    assert_eq!(cfg.remote.max_serve_bridges, DEFAULT_MAX_SERVE_BRIDGES);
    write_config(dir.path(), r#"{"remote": {"maxCreatesInFlight": 2, "maxServeBridges": 5}}"#);
    let cfg = Config::load_from(&env_with_home(dir.path(), &[])).unwrap();
    assert_eq!((cfg.remote.max_creates_in_flight, cfg.remote.max_serve_bridges), (2, 5));
    let env = [("ZCODE_ACP_MAX_CREATES_IN_FLIGHT", "1"), ("ZCODE_ACP_MAX_SERVE_BRIDGES", "7")];
    let cfg = Config::load_from(&env_with_home(dir.path(), &env)).unwrap();
    assert_eq!((cfg.remote.max_creates_in_flight, cfg.remote.max_serve_bridges), (1, 7));
    let err = Config::load_from(&env_with_home(dir.path(), &[("ZCODE_ACP_MAX_SERVE_BRIDGES", "0")]));
    assert!(err.unwrap_err().to_string().contains("ZCODE_ACP_MAX_SERVE_BRIDGES: expected a whole number"));
    write_config(dir.path(), r#"{"remote": {"maxCreatesInFlight": 0}}"#);
    let err = Config::load_from(&env_with_home(dir.path(), &[])).unwrap_err().to_string();
    assert!(err.contains("`remote.maxCreatesInFlight` must be at least 1"), "{err}");
}

#[test]
fn the_push_subject_is_a_contact_url_with_a_default() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config::load_from(&env_with_home(dir.path(), &[])).unwrap();
    assert_eq!(cfg.remote.push_subject, DEFAULT_PUSH_SUBJECT);
    write_config(dir.path(), r#"{"remote": {"pushSubject": "mailto:me@example.com"}}"#);
    let cfg = Config::load_from(&env_with_home(dir.path(), &[])).unwrap();
    assert_eq!(cfg.remote.push_subject, "mailto:me@example.com");
    let env = env_with_home(dir.path(), &[("ZCODE_ACP_PUSH_SUBJECT", "https://me.example.com/")]);
    assert_eq!(Config::load_from(&env).unwrap().remote.push_subject, "https://me.example.com/");
    for bad in ["me@example.com", "http://me.example.com", "mailto:nobody", "https://"] {
        let env = env_with_home(dir.path(), &[("ZCODE_ACP_PUSH_SUBJECT", bad)]);
        let e = Config::load_from(&env).unwrap_err().to_string();
        assert!(e.contains("ZCODE_ACP_PUSH_SUBJECT") && e.contains("mailto:"), "{bad}: {e}");
    }
    write_config(dir.path(), r#"{"remote": {"pushSubject": "me"}}"#);
    let e = Config::load_from(&env_with_home(dir.path(), &[])).unwrap_err().to_string();
    assert!(e.contains("remote.pushSubject"), "{e}");
}
