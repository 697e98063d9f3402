//! Unit tests of the settings routes (through [`super::api::handle`]).

use super::api::handle;
use super::{Host, Mount, ReportedAgent, Settings};
use crate::paths::Paths;
use serde_json::{Value, json};

struct T {
    _dir: tempfile::TempDir,
    s: Settings,
    host: Host,
}

fn setup() -> T {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::under(&dir.path().join("zhome"));
    std::fs::create_dir_all(dir.path().join("zhome")).unwrap();
    let home = dir.path().join("home");
    let s = Settings { paths, home: Some(home), agent: None };
    T { _dir: dir, s, host: Host::new(Mount::Bridge) }
}

impl T {
    fn call(&self, method: &str, path: &str, body: &str) -> (u16, Value) {
        let r = handle(&self.s, &self.host, method, path, None, body.as_bytes());
        (r.status, r.body)
    }
    fn config(&self) -> String {
        std::fs::read_to_string(&self.s.paths.config_file).unwrap_or_default()
    }
    fn agents_dir(&self) -> std::path::PathBuf {
        self.s.home.as_ref().unwrap().join(".claude/agents")
    }
}

#[test]
fn mcp_validation_table_writes_nothing() {
    let t = setup();
    std::fs::write(&t.s.paths.config_file, "{\"remote\": {\"hubPort\": 0}}\n").unwrap();
    let before = t.config();
    let bad = [
        ("mcp/x", r#"{"command": 1}"#),
        ("mcp/x", r#"{"url": 5}"#),
        ("mcp/x", r#"{"type": [], "command": "a"}"#),
        ("mcp/x", r#"{"command": "a", "args": "b"}"#),
        ("mcp/x", r#"{"command": "a", "args": [1]}"#),
        ("mcp/x", r#"{"command": "a", "env": {"K": 1}}"#),
        ("mcp/x", r#"{"url": "https://h", "headers": {"K": true}}"#),
        ("mcp/x", r#"{"command": "a", "enabled": "no"}"#),
        ("mcp/x", r#"{}"#),
        ("mcp/.hidden", r#"{"command": "a"}"#),
        ("mcp/x", r#"{"command": "#),
    ];
    for (path, body) in bad {
        let (status, v) = t.call("PUT", path, body);
        assert_eq!(status, 400, "{path} {body}: {v}");
        assert_eq!(v["ok"], false);
        assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()));
    }
    assert_eq!(t.config(), before, "a refused write changed the file");
    assert!(super::safe::backups_of(&t.s.paths.config_file).is_empty());
}

#[test]
fn mcp_write_keeps_unknown_keys_and_reports_needs_restart() {
    let t = setup();
    let original = "{\n  \"someday\": {\"x\":  1.50},\n  \"mcpServers\": {\"old\": {\"url\": \"https://o\", \"vendorKey\": [1,2]}}\n}\n";
    std::fs::write(&t.s.paths.config_file, original).unwrap();
    let (status, v) =
        t.call("PUT", "mcp/fs", r#"{"command": "mcp-fs", "args": ["--ro"], "mine": {"kept": true}}"#);
    assert_eq!((status, &v["effect"]), (200, &json!("needs-restart")));
    let text = t.config();
    assert!(text.contains("\"someday\": {\"x\":  1.50}"), "{text}");
    assert!(text.contains("{\"url\": \"https://o\", \"vendorKey\": [1,2]}"), "{text}");
    let (_, read) = t.call("GET", "mcp", "");
    let names: Vec<&str> =
        read["servers"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["old", "fs"]);
    assert_eq!(read["servers"][1]["mine"], json!({"kept": true}));
    let (status, _) = t.call("POST", "mcp/enable", r#"{"name": "fs", "enable": false}"#);
    assert_eq!(status, 200);
    assert_eq!(t.call("GET", "mcp", "").1["servers"][1]["enabled"], false);
    assert_eq!(t.call("DELETE", "mcp/fs", "").0, 200);
    assert_eq!(t.call("DELETE", "mcp/fs", "").0, 404);
}

#[test]
fn a_corrupt_config_refuses_writes_and_is_left_untouched() {
    let t = setup();
    std::fs::write(&t.s.paths.config_file, "{\"mcpServers\": {").unwrap();
    let (status, v) = t.call("PUT", "mcp/fs", r#"{"command": "x"}"#);
    assert_eq!(status, 500, "{v}");
    assert_eq!(t.config(), "{\"mcpServers\": {");
    assert_eq!(t.call("GET", "all", "").0, 500);
    // A write that would make the config invalid for zcode-acp itself is refused too.
    std::fs::write(&t.s.paths.config_file, "{\"remote\": {\"hubPort\": \"eighty\"}}").unwrap();
    assert_eq!(t.call("PUT", "mcp/fs", r#"{"command": "x"}"#).0, 400);
    assert_eq!(t.config(), "{\"remote\": {\"hubPort\": \"eighty\"}}");
}

#[test]
fn backups_restore_one() {
    let t = setup();
    t.call("PUT", "mcp/a", r#"{"command": "a"}"#);
    t.call("PUT", "mcp/b", r#"{"command": "b"}"#);
    let (_, list) = t.call("GET", "backups", "");
    let newest = &list["backups"][0];
    assert_eq!(newest["file"], t.s.paths.config_file.display().to_string());
    let (status, v) = t.call("POST", "backups/restore", &json!({"path": newest["path"]}).to_string());
    assert_eq!((status, &v["effect"]), (200, &json!("needs-restart")), "{v}");
    let names: Vec<Value> =
        t.call("GET", "mcp", "").1["servers"].as_array().unwrap().iter().map(|s| s["name"].clone()).collect();
    assert_eq!(names, [json!("a")]);
    let (status, _) = t.call("POST", "backups/restore", r#"{"path": "/etc/passwd"}"#);
    assert_eq!(status, 404);
}

#[test]
fn subagents_edit_disable_and_builtins() {
    let t = setup();
    let dir = t.agents_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let text = "---\nname: rev\ndescription: reviews\ntools: Read, Grep\n---\nYou review code.\n";
    std::fs::write(dir.join("rev.md"), text).unwrap();
    let (status, v) = t.call("PUT", "agents/rev", r#"{"model": "sonnet", "color": "blue"}"#);
    assert_eq!((status, &v["effect"]), (200, &json!("needs-restart")), "{v}");
    let now = std::fs::read_to_string(dir.join("rev.md")).unwrap();
    assert_eq!(
        now,
        "---\nname: rev\ndescription: reviews\ntools: Read, Grep\ncolor: blue\nmodel: sonnet\n---\nYou review code.\n"
    );
    assert_eq!(t.call("POST", "agents/rev/enable", r#"{"enable": false}"#).0, 200);
    assert!(!dir.join("rev.md").exists() && dir.join("rev.md.disabled").is_file());
    let (_, list) = t.call("GET", "agents", "");
    assert_eq!(list["agents"][0]["enabled"], false);
    assert_eq!(list["agents"][0]["model"], "sonnet");
    // Built-ins: no edit, no delete, no disable; the model override only.
    assert_eq!(t.call("PUT", "agents/Explore", r#"{"description": "x"}"#).0, 400);
    assert_eq!(t.call("DELETE", "agents/general-purpose", "").0, 400);
    assert_eq!(t.call("PUT", "agents/Explore", r#"{"providerId": "claude", "modelId": "haiku"}"#).0, 200);
    let explore = |t: &T| {
        t.call("GET", "agents", "").1["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["id"] == "Explore")
            .cloned()
            .unwrap()
    };
    assert_eq!(explore(&t)["model"], "haiku");
    assert_eq!(t.call("PUT", "agents/Explore", r#"{"providerId": null, "modelId": null}"#).0, 200);
    assert_eq!(explore(&t)["model"], Value::Null);
    // Bad fields: 400, nothing written.
    for body in [r#"{"model": 3}"#, r#"{"description": "two\nlines"}"#, r#"{"prompt": "new body"}"#] {
        assert_eq!(t.call("PUT", "agents/rev", body).0, 400, "{body}");
    }
    assert_eq!(
        t.call("PUT", "agents/new", r#"{"color": "red"}"#).0,
        400,
        "a new subagent needs a description"
    );
    assert_eq!(t.call("PUT", "agents/..%2Fx", r#"{"description": "d"}"#).0, 400);
    // A subagent file without frontmatter is refused and left as it is.
    std::fs::write(dir.join("plain.md"), "just text").unwrap();
    assert_eq!(t.call("PUT", "agents/plain", r#"{"model": "m"}"#).0, 500);
    assert_eq!(std::fs::read_to_string(dir.join("plain.md")).unwrap(), "just text");
    assert_eq!(t.call("DELETE", "agents/rev", "").0, 200);
    assert!(!dir.join("rev.md.disabled").exists());
}

#[test]
fn skills_disable_the_way_the_agent_reads_them() {
    let t = setup();
    let dir = t.s.home.as_ref().unwrap().join(".claude/skills");
    std::fs::create_dir_all(dir.join("pdf")).unwrap();
    std::fs::write(dir.join("pdf/SKILL.md"), "---\nname: pdf\ndescription: PDFs\n---\nbody").unwrap();
    let (_, list) = t.call("GET", "skills", "");
    let path = list["skills"][0]["path"].as_str().unwrap().to_owned();
    assert_eq!(list["skills"][0]["enabled"], true);
    let (status, v) = t.call("POST", "skills/enable", &json!({"path": path, "enable": false}).to_string());
    assert_eq!((status, &v["effect"]), (200, &json!("immediate")));
    assert!(!dir.join("pdf/SKILL.md").exists());
    assert_eq!(t.call("GET", "skills", "").1["skills"][0]["enabled"], false);
    assert_eq!(t.call("POST", "skills/enable", r#"{"path": "/etc", "enable": true}"#).0, 400);
    assert_eq!(
        t.call("POST", "skills/enable", &json!({"path": format!("{path}/.."), "enable": true}).to_string()).0,
        400
    );
    let encoded = path.replace('/', "%2F");
    assert_eq!(t.call("DELETE", &format!("skills/{encoded}"), "").0, 200);
    assert!(!dir.join("pdf").exists());
}

#[test]
fn models_default_and_entries() {
    let mut t = setup();
    t.host.agent = Some(ReportedAgent {
        key: "demo".into(),
        name: "Demo".into(),
        models: vec![("fast".into(), "Fast".into()), ("smart".into(), "Smart".into())],
        current: Some("fast".into()),
        transports: vec!["stdio"],
    });
    assert_eq!(t.call("PUT", "providers/nobody", r#"{"enabled": false}"#).0, 404);
    let (status, v) = t.call("PUT", "providers/demo", r#"{"defaultModel": "smart", "name": "Demo agent"}"#);
    assert_eq!((status, &v["effect"]), (200, &json!("immediate")));
    assert_eq!(t.call("POST", "models", r#"{"providerId": "demo", "modelId": "extra"}"#).0, 200);
    assert_eq!(t.call("POST", "models", r#"{"providerId": "demo", "modelId": "extra"}"#).0, 409);
    assert_eq!(t.call("POST", "models", r#"{"providerId": "demo", "modelId": "has space"}"#).0, 400);
    assert_eq!(t.call("PUT", "providers/demo", r#"{"models": [{"id": "fast", "enabled": false}]}"#).0, 200);
    let (_, m) = t.call("GET", "models", "");
    let p = &m["providers"][0];
    assert_eq!((&p["defaultModel"], &p["name"]), (&json!("smart"), &json!("Demo agent")));
    let ids: Vec<(Value, Value)> =
        p["models"].as_array().unwrap().iter().map(|m| (m["id"].clone(), m["enabled"].clone())).collect();
    assert_eq!(
        ids,
        [(json!("fast"), json!(false)), (json!("smart"), json!(true)), (json!("extra"), json!(true))]
    );
    assert_eq!(t.call("DELETE", "models/demo/extra", "").0, 200);
    assert_eq!(t.call("DELETE", "models/demo/smart", "").0, 404);
    let root = crate::ordered::Ordered::parse_file(&t.config()).unwrap();
    assert_eq!(super::models::default_for(&root, "demo").as_deref(), Some("smart"));
}

#[test]
fn not_on_this_machine_and_mount_differences() {
    let mut t = setup();
    let (status, v) = t.call("GET", "app-update", "");
    assert_eq!(status, 200);
    assert_eq!(
        (&v["appUpdate"]["updateAvailable"], &v["appUpdate"]["currentVersion"]),
        (&json!(false), &Value::Null)
    );
    assert_eq!(handle(&t.s, &t.host, "GET", "app-update", Some("channel=nightly"), b"").status, 400);
    assert_eq!(t.call("POST", "app-update/install", r#"{"version": "1", "url": "https://evil/x"}"#).0, 400);
    assert_eq!(
        t.call("POST", "app-update/install", r#"{"version": "1", "url": "https://cdn-zcode.z.ai/x.zip"}"#).0,
        409
    );
    assert_eq!(t.call("GET", "reset-cards", "").0, 400);
    let r = handle(&t.s, &t.host, "GET", "reset-cards", Some("providerId=account:x"), b"");
    assert_eq!(r.status, 503);
    assert!(r.body["error"].as_str().unwrap().starts_with("credentials_unavailable"));
    assert_eq!(
        t.call(
            "POST",
            "reset-cards/use",
            r#"{"providerId": "glm", "resetType": "WEEK", "nonce": "n", "idempotencyKey": "k"}"#
        )
        .0,
        403
    );
    assert_eq!(t.call("GET", "all", "").1["resetCards"]["credentialsAvailable"], false);
    assert_eq!(t.call("GET", "pending-restart", "").1["pendingRestart"], false);
    t.host.mount = Mount::Hub;
    assert_eq!(t.call("GET", "pending-restart", "").0, 409);
    assert_eq!(t.call("GET", "nope", "").0, 404);
    assert_eq!(t.call("PATCH", "mcp/x", "{}").0, 405);
    let big = format!("{{\"command\": \"{}\"}}", "a".repeat(super::MAX_BODY));
    assert_eq!(t.call("PUT", "mcp/x", &big).0, 413);
}

#[test]
fn directories_are_named_per_agent() {
    let mut t = setup();
    let own = t._dir.path().join("own-agents");
    std::fs::create_dir_all(&own).unwrap();
    std::fs::write(own.join("x.md"), "---\nname: x\ndescription: d\n---\n").unwrap();
    let cfg = json!({"settings": {"agents": {"demo": {"subagentsDir": own}}}});
    std::fs::write(&t.s.paths.config_file, cfg.to_string()).unwrap();
    let ids = |t: &T| -> Vec<Value> {
        t.call("GET", "agents", "").1["agents"].as_array().unwrap().iter().map(|a| a["id"].clone()).collect()
    };
    assert_eq!(ids(&t), [json!("general-purpose"), json!("Explore")], "another agent: the default directory");
    t.host.agent = Some(ReportedAgent { key: "demo".into(), ..ReportedAgent::default() });
    assert_eq!(ids(&t), [json!("x"), json!("general-purpose"), json!("Explore")]);
}
