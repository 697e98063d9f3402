//! The settings API on its three mounts (the hub's `/api/settings/*`, the bridge's loopback
//! `/settings/*`, the hub's per-instance relay), writes from several processes at once, and
//! the effects: MCP servers in the agent's session starts, the backend restart mid-turn,
//! the default model applied through the agent's own call.

#![allow(clippy::unwrap_used)] // Setup helpers outside #[test] fns: a failed unwrap is a failed test.

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use zcode_tests::hub::{Hub, listed, wait_instances, wait_until};
use zcode_tests::{Bridge, Home, TEST_TOKEN, demo_agent, http_with_body, initialize};

/// A home with a user HOME of its own (the agent's `~/.claude/…`) and a hub.
struct World {
    home: Home,
    user: tempfile::TempDir,
    hub: Hub,
}

impl World {
    fn new(config: &Value) -> World {
        World::with_text(&serde_json::to_string_pretty(config).unwrap())
    }

    fn with_text(config: &str) -> World {
        let home = Home::new();
        let user = tempfile::tempdir().unwrap();
        std::fs::write(home.path().join("config.json"), config).unwrap();
        let u = user.path().display().to_string();
        let hub = Hub::start(&home, &[("HOME", &u)]);
        World { home, user, hub }
    }

    fn bridge(&self, agent: &[String]) -> Bridge {
        let u = self.user.path().display().to_string();
        let b = Bridge::start_env(&self.home, agent, &[("HOME", &u), ("ZCODE_ACP_HEARTBEAT_MS", "200")]);
        let id = b.editor.pid().to_string();
        wait_instances(self.hub.port, "the bridge", |l| listed(l, &id));
        b
    }

    fn config(&self) -> String {
        std::fs::read_to_string(self.home.path().join("config.json")).unwrap()
    }
}

/// A mount: its port and prefix.
#[derive(Clone)]
struct Mount {
    port: u16,
    prefix: String,
    hub_local: bool,
}

impl Mount {
    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let bytes = body.map(|b| b.to_string().into_bytes());
        let r = http_with_body(
            self.port,
            method,
            &format!("{}/{path}", self.prefix),
            Some(TEST_TOKEN),
            bytes.as_deref(),
        );
        let v = serde_json::from_slice(&r.body).unwrap_or_else(|_| json!({"raw": r.text()}));
        (r.status, v)
    }
    fn raw(&self, method: &str, path: &str, body: &[u8]) -> u16 {
        http_with_body(self.port, method, &format!("{}/{path}", self.prefix), Some(TEST_TOKEN), Some(body))
            .status
    }
}

fn mounts(w: &World, b: &Bridge) -> Vec<Mount> {
    let id = b.editor.pid();
    vec![
        Mount { port: w.hub.port, prefix: "/api/settings".into(), hub_local: true },
        Mount { port: b.port, prefix: "/settings".into(), hub_local: false },
        Mount { port: w.hub.port, prefix: format!("/api/instances/{id}/settings"), hub_local: false },
    ]
}

fn names(v: &Value, list: &str, key: &str) -> Vec<String> {
    v[list].as_array().unwrap_or(&vec![]).iter().filter_map(|x| x[key].as_str().map(str::to_owned)).collect()
}

#[test]
fn every_route_on_all_three_mounts() {
    let w = World::new(&json!({"models": {"glm": {"name": "GLM", "models": [{"id": "glm-5"}]}},
        "hooks": {"events": {"Stop": [{"hooks": [{"type": "command", "command": "true", "note": "mine"}]}]}}}));
    let agents_dir = w.user.path().join(".claude/agents");
    let skills_dir = w.user.path().join(".claude/skills");
    std::fs::create_dir_all(skills_dir.join("pdf")).unwrap();
    std::fs::write(skills_dir.join("pdf/SKILL.md"), "---\nname: pdf\ndescription: PDFs\n---\n").unwrap();
    let b = w.bridge(&demo_agent(0));
    for (i, m) in mounts(&w, &b).into_iter().enumerate() {
        let tag = format!("m{i}");
        // Reads.
        let (s, all) = m.call("GET", "all", None);
        assert_eq!(s, 200, "{}: {all}", m.prefix);
        for section in
            ["models", "mcp", "agents", "skills", "hooks", "usage", "backups", "resetCards", "appUpdate"]
        {
            assert!(all[section].is_object(), "{}: all lacks {section}: {all}", m.prefix);
        }
        assert_eq!(all["resetCards"]["credentialsAvailable"], false);
        assert_eq!(all["hooks"]["events"].as_object().map(serde_json::Map::len), Some(7), "{all}");
        assert_eq!((&all["usage"]["range"], &all["usage"]["available"]), (&json!("7d"), &json!(false)));
        assert!(all.get("quota").is_none(), "quota is the hub's own route, not a section of all");
        let (s, models) = m.call("GET", "models", None);
        assert_eq!(
            (s, names(&models, "providers", "id").contains(&"glm".to_owned())),
            (200, true),
            "{models}"
        );
        let (s, skills) = m.call("GET", "skills", None);
        assert_eq!((s, names(&skills, "skills", "name")), (200, vec!["pdf".to_owned()]));
        assert_eq!(m.call("GET", "agents", None).0, 200);
        assert_eq!(m.call("GET", "backups", None).0, 200);
        let (s, up) = m.call("GET", "app-update?channel=stable", None);
        assert_eq!(
            (s, &up["appUpdate"]["updateAvailable"], &up["appUpdate"]["currentVersion"]),
            (200, &json!(false), &Value::Null)
        );
        let (s, rc) = m.call("GET", "reset-cards?providerId=account:bigmodel", None);
        assert_eq!(s, 503, "{rc}");
        assert!(rc["error"].as_str().unwrap().starts_with("credentials_unavailable"), "{rc}");
        let (s, pr) = m.call("GET", "pending-restart", None);
        assert_eq!(s, if m.hub_local { 409 } else { 200 }, "{}: {pr}", m.prefix);
        // Writes, with their effects.
        let server = format!("srv-{tag}");
        let (s, v) =
            m.call("PUT", &format!("mcp/{server}"), Some(&json!({"command": "mcp-x", "args": ["-v"]})));
        assert_eq!((s, &v["effect"]), (200, &json!("needs-restart")), "{}: {v}", m.prefix);
        assert!(names(&m.call("GET", "mcp", None).1, "servers", "name").contains(&server));
        assert_eq!(
            m.call("POST", "mcp/enable", Some(&json!({"name": server, "enable": false}))).1["effect"],
            "needs-restart"
        );
        let (s, v) = m.call("PUT", "providers/glm", Some(&json!({"enabled": true, "name": "GLM!"})));
        assert_eq!((s, &v["effect"]), (200, &json!("immediate")), "{v}");
        let model = format!("glm-{tag}");
        assert_eq!(
            m.call("POST", "models", Some(&json!({"providerId": "glm", "modelId": model}))).1["effect"],
            "immediate"
        );
        assert_eq!(m.call("DELETE", &format!("models/glm/{model}"), None).0, 200);
        assert_eq!(m.call("PUT", "providers/nope", Some(&json!({"enabled": true}))).0, 404);
        let agent = format!("rev-{tag}");
        let (s, v) = m.call(
            "PUT",
            &format!("agents/{agent}"),
            Some(&json!({"description": "reviews", "model": "m1"})),
        );
        assert_eq!((s, &v["effect"]), (200, &json!("needs-restart")), "{v}");
        assert!(agents_dir.join(format!("{agent}.md")).is_file());
        assert_eq!(m.call("POST", &format!("agents/{agent}/enable"), Some(&json!({"enable": false}))).0, 200);
        assert!(agents_dir.join(format!("{agent}.md.disabled")).is_file());
        assert_eq!(m.call("DELETE", &format!("agents/{agent}"), None).0, 200);
        assert_eq!(m.call("PUT", "agents/Explore", Some(&json!({"description": "x"}))).0, 400);
        let pdf = skills_dir.join("pdf").display().to_string();
        let (s, v) = m.call("POST", "skills/enable", Some(&json!({"path": pdf, "enable": false})));
        assert_eq!((s, &v["effect"]), (200, &json!("immediate")), "{v}");
        assert!(skills_dir.join("pdf/SKILL.md.disabled").is_file());
        assert_eq!(m.call("POST", "skills/enable", Some(&json!({"path": pdf, "enable": true}))).0, 200);
        let (_, backups) = m.call("GET", "backups", None);
        let newest = backups["backups"][0]["path"].clone();
        let (s, v) = m.call("POST", "backups/restore", Some(&json!({"path": newest})));
        assert_eq!((s, &v["effect"]), (200, &json!("needs-restart")), "{v}");
        // Hooks: the same writer, the same effect, counted by the bridge that took the write.
        let pending = |m: &Mount| m.call("GET", "pending-restart", None).1["writes"].as_u64();
        let before = pending(&m);
        let (s, v) = m.call("PUT", "hooks/Stop/0", Some(&json!({"command": format!("echo {tag}")})));
        assert_eq!((s, &v["effect"]), (200, &json!("needs-restart")), "{}: {v}", m.prefix);
        assert_eq!(v["hooks"]["events"]["Stop"][0]["hooks"][0]["command"], format!("echo {tag}"));
        assert_eq!(pending(&m), before.map(|n| n + 1), "{}: the hooks write is pending a restart", m.prefix);
        let (s, v) = m.call("GET", "hooks", None);
        assert_eq!((s, &v["hooks"]["events"]["Stop"][0]["hooks"][0]["note"]), (200, &json!("mine")), "{v}");
        assert_eq!(m.call("POST", "hooks/enabled", Some(&json!({"enabled": true}))).0, 200);
        // Entries can be removed too (beyond the contract); one that is not there is a 404.
        assert_eq!(m.call("DELETE", "hooks/Stop/9", None).0, 404);
        let newest = w.home.path().join("config.json.bak-");
        assert!(
            std::fs::read_dir(w.home.path()).unwrap().filter_map(Result::ok).any(|e| e
                .path()
                .display()
                .to_string()
                .starts_with(&newest.display().to_string())),
            "a hooks write takes a backup"
        );
        // Not on this machine: never a pretend success.
        assert_eq!(
            m.call(
                "POST",
                "app-update/install",
                Some(&json!({"version": "1", "url": "https://cdn-zcode.z.ai/a.zip"}))
            )
            .0,
            409
        );
        let spend =
            json!({"providerId": "account:x", "resetType": "WEEK", "nonce": "n", "idempotencyKey": "k"});
        assert_eq!(m.call("POST", "reset-cards/use", Some(&spend)).0, 503);
        // Bad input: 400 / 413, the file as it was.
        let before = w.config();
        assert_eq!(m.raw("PUT", "mcp/x", b"{not json"), 400);
        assert_eq!(m.call("PUT", "mcp/x", Some(&json!({"command": "a", "args": [1]}))).0, 400);
        assert_eq!(m.call("PUT", "mcp/x", Some(&json!({"url": "https://h", "headers": {"A": 1}}))).0, 400);
        let big = format!("{{\"command\": \"{}\"}}", "a".repeat(300 * 1024));
        assert_eq!(m.raw("PUT", "mcp/x", big.as_bytes()), 413);
        assert_eq!(
            m.raw("PUT", "hooks/Stop/0", big.as_bytes()),
            413,
            "{}: hooks bodies are capped",
            m.prefix
        );
        assert_eq!(m.call("PUT", "hooks/Stop/0", Some(&json!({"matcher": "x"}))).0, 400);
        assert_eq!(w.config(), before, "{}: a refused write changed config.json", m.prefix);
        let (s, v) = m.call("GET", "no-such-section", None);
        assert_eq!((s, &v["ok"]), (404, &json!(false)));
    }
    // The hub has no backend: its spelling of the restart is 501.
    let r = http_with_body(w.hub.port, "POST", "/api/backend/restart", Some(TEST_TOKEN), Some(b"{}"));
    assert_eq!(r.status, 501, "{}", r.text());
    // Without the token the hub's mount is closed.
    assert_eq!(http_with_body(w.hub.port, "GET", "/api/settings/all", None, None).status, 401);
}

#[test]
fn a_browser_preflight_for_a_settings_put_or_delete_is_allowed() {
    let home = Home::new();
    let hub = Hub::start(&home, &[]);
    for path in ["/api/settings/mcp/x", "/api/instances/1/settings/mcp/x", "/api/settings/hooks/Stop/0"] {
        for wanted in ["PUT", "DELETE"] {
            let headers = [
                ("Origin", "https://client.example"),
                ("Access-Control-Request-Method", wanted),
                ("Access-Control-Request-Headers", "authorization, content-type"),
            ];
            let r = zcode_tests::hub::http(hub.port, "OPTIONS", path, &headers, b"");
            assert_eq!(r.status, 204, "OPTIONS {path} ({wanted}): {r:?}");
            assert_eq!(r.header("access-control-allow-origin"), Some("*"));
            let methods: Vec<&str> =
                r.header("access-control-allow-methods").unwrap_or("").split(", ").collect();
            assert_eq!(methods, ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"], "{path}");
            let allowed = r.header("access-control-allow-headers").unwrap_or("").to_ascii_lowercase();
            assert!(allowed.contains("authorization") && allowed.contains("content-type"), "{allowed}");
        }
    }
}

#[test]
fn writers_in_the_hub_and_two_bridges_at_once_lose_nothing() {
    // Four hook entries: writer i edits entry i while the others add MCP servers.
    let entry = r#"{"type": "command", "command": "true"}"#;
    let w = World::with_text(&format!(
        "{{\"keep\": {{\"unknown\": [1, 2.50]}}, \"hooks\": {{\"events\": {{\"Stop\": [{{\"hooks\": [{}]}}]}}}}}}",
        [entry; 4].join(", ")
    ));
    let b1 = w.bridge(&demo_agent(0));
    let b2 = w.bridge(&demo_agent(0));
    let mut all = mounts(&w, &b1);
    all.push(Mount { port: b2.port, prefix: "/settings".into(), hub_local: false });
    const EACH: usize = 12;
    let threads: Vec<_> = all
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let m = m.clone();
            std::thread::spawn(move || {
                for n in 0..EACH {
                    let (s, v) = m.call("PUT", &format!("mcp/w{i}-{n}"), Some(&json!({"command": "x"})));
                    assert_eq!(s, 200, "{v}");
                    let hook = json!({"command": format!("echo w{i}-{n}")});
                    let (s, v) = m.call("PUT", &format!("hooks/Stop/{i}"), Some(&hook));
                    assert_eq!(s, 200, "{v}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let text = w.config();
    let v: Value = serde_json::from_str(&text).unwrap();
    let servers = v["mcpServers"].as_object().unwrap();
    assert_eq!(servers.len(), all.len() * EACH, "lost updates: {text}");
    let hooks = &v["hooks"]["events"]["Stop"][0]["hooks"];
    for i in 0..all.len() {
        let last = format!("echo w{i}-{}", EACH - 1);
        assert_eq!(hooks[i], json!({"type": "command", "command": last}), "a hooks write was lost: {text}");
    }
    assert!(text.contains("[1, 2.50]"), "an unknown key was rewritten: {text}");
}

fn scripted(log: &Path, extra: &[&str]) -> Vec<String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/scripted_agent.py");
    let mut v =
        vec!["python3".into(), script.display().to_string(), "--log".into(), log.display().to_string()];
    v.extend(extra.iter().map(|s| (*s).to_owned()));
    v
}

/// What the scripted agent logged: (pid, method, params).
fn agent_log(path: &Path) -> Vec<(u64, String, Value)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| {
            (
                v["pid"].as_u64().unwrap_or(0),
                v["method"].as_str().unwrap_or("").to_owned(),
                v["params"].clone(),
            )
        })
        .collect()
}

fn server_names(params: &Value) -> Vec<String> {
    params["mcpServers"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap().to_owned()).collect()
}

#[test]
fn mcp_servers_reach_the_agent_and_a_restart_mid_turn_applies_new_ones() {
    let log_dir = tempfile::tempdir().unwrap();
    let log = log_dir.path().join("agent.log");
    let w = World::new(&json!({"mcpServers": {
        "files": {"command": "mcp-files", "args": ["--ro"], "env": {"K": "v"}},
        "web": {"type": "http", "url": "https://mcp.example/web", "headers": {"A": "b"}},
        "feed": {"type": "sse", "url": "https://mcp.example/sse"},
        "clash": {"command": "from-config"},
        "off": {"command": "disabled", "enabled": false},
    }}));
    let b = w.bridge(&scripted(&log, &["--mcp", "http"]));
    let id = b.editor.pid();
    let inst = Mount { port: w.hub.port, prefix: format!("/api/instances/{id}/settings"), hub_local: false };
    let mut remote = b.remote();
    initialize(&mut remote, json!({}));
    let client_server = json!({"name": "clash", "command": "from-client", "args": [], "env": []});
    let (r, _) = remote.call("session/new", json!({"cwd": w.home.path(), "mcpServers": [client_server]}));
    let sid = r["result"]["sessionId"].as_str().unwrap_or_else(|| panic!("{r}")).to_owned();
    let entries = agent_log(&log);
    let (pid1, _, new) = entries.iter().find(|(_, m, _)| m == "session/new").unwrap().clone();
    assert_eq!(server_names(&new), ["clash", "files", "web"], "{new}");
    assert_eq!(new["mcpServers"][0]["command"], "from-client", "the client's server wins a clash");
    assert_eq!(
        new["mcpServers"][1],
        json!({"name": "files", "command": "mcp-files", "args": ["--ro"], "env": [{"name": "K", "value": "v"}]})
    );
    assert_eq!(
        new["mcpServers"][2],
        json!({"type": "http", "name": "web", "url": "https://mcp.example/web", "headers": [{"name": "A", "value": "b"}]})
    );
    // The sse server the agent cannot take is reported, not silently dropped.
    let (_, mcp) = inst.call("GET", "mcp", None);
    let feed = mcp["servers"].as_array().unwrap().iter().find(|s| s["name"] == "feed").unwrap().clone();
    assert_eq!(feed["agentAccepts"], false, "{feed}");
    assert!(feed["agentSkipReason"].as_str().unwrap().contains("sse"), "{feed}");

    // A turn runs; the phone adds a server (needs-restart) and restarts the backend.
    let turn = remote.request("session/prompt", zcode_tests::prompt(&sid, "wait for it"));
    wait_until("the prompt reaches the agent", || {
        agent_log(&log).iter().any(|(_, m, _)| m == "session/prompt")
    });
    assert_eq!(inst.call("GET", "pending-restart", None).1["pendingRestart"], false);
    let (s, v) = inst.call("PUT", "mcp/added", Some(&json!({"command": "mcp-added"})));
    assert_eq!((s, &v["effect"]), (200, &json!("needs-restart")));
    assert_eq!(inst.call("GET", "pending-restart", None).1["pendingRestart"], true);
    let r = http_with_body(
        w.hub.port,
        "POST",
        &format!("/api/instances/{id}/backend/restart"),
        Some(TEST_TOKEN),
        Some(b"{}"),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json(), json!({"ok": true, "cancelledTurns": 1, "closed": true}));
    let (answer, _) = remote.response_to(&turn);
    assert_eq!(answer["result"]["stopReason"], "cancelled", "{answer}");
    assert!(agent_log(&log).iter().any(|(_, m, p)| m == "session/cancel" && p["sessionId"] == sid));
    assert!(!zcode_tests::alive(pid1 as u32), "the old agent still runs");
    assert_eq!(inst.call("GET", "pending-restart", None).1["pendingRestart"], false);

    // The same client, still attached, prompts again: a new agent process, the session
    // re-loaded into it with the new server list.
    let (answer, _) = remote.call("session/prompt", zcode_tests::prompt(&sid, "again"));
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let entries = agent_log(&log);
    let (pid2, _, load) = entries.iter().find(|(p, m, _)| *p != pid1 && m == "session/load").unwrap().clone();
    assert_eq!(load["sessionId"], sid);
    // The config's servers in the file's order (this test wrote it sorted), the new one last.
    assert_eq!(server_names(&load), ["clash", "files", "web", "added"], "{load}");
    assert!(entries.iter().any(|(p, m, _)| *p == pid2 && m == "session/prompt"));
}

#[test]
fn the_sdk_example_agent_takes_the_servers_the_bridge_adds() {
    let w = World::new(&json!({"mcpServers": {
        "files": {"command": "mcp-files", "args": ["--ro"], "env": {"K": "v"}},
        "web": {"url": "https://mcp.example/web"},
    }}));
    let agent = vec!["node".to_owned(), zcode_tests::sdk_example_agent().display().to_string()];
    let b = w.bridge(&agent);
    let mut remote = b.remote();
    initialize(&mut remote, json!({}));
    // The SDK checks session/new's params against ACP's schema: a malformed server is refused…
    let (bad, _) = remote
        .call("session/new", json!({"cwd": w.home.path(), "mcpServers": [{"name": "x", "command": 5}]}));
    assert!(bad["error"].is_object(), "the SDK took a malformed server: {bad}");
    // …and what the bridge adds (a stdio server; the http one it cannot take) is accepted.
    let (ok, _) = remote.call("session/new", json!({"cwd": w.home.path(), "mcpServers": []}));
    assert!(ok["result"]["sessionId"].is_string(), "{ok}");
    let (_, mcp) =
        Mount { port: b.port, prefix: "/settings".into(), hub_local: false }.call("GET", "mcp", None);
    let accepts: Vec<(String, Value)> = mcp["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["name"].as_str().unwrap().to_owned(), s["agentAccepts"].clone()))
        .collect();
    assert_eq!(accepts, [("files".to_owned(), json!(true)), ("web".to_owned(), json!(false))]);
}

#[test]
fn the_default_model_is_applied_through_the_agents_own_call() {
    let dir = tempfile::tempdir().unwrap();
    let (state_log, option_log): (PathBuf, PathBuf) = (dir.path().join("a.log"), dir.path().join("b.log"));
    let w = World::new(&json!({"models": {"scripted": {"defaultModel": "smart"}}}));
    let by_state = w.bridge(&scripted(&state_log, &["--models", "fast,smart"]));
    let by_option = w.bridge(&scripted(&option_log, &["--config-models", "fast,smart"]));
    for (b, log, method) in
        [(&by_state, &state_log, "session/set_model"), (&by_option, &option_log, "session/set_config_option")]
    {
        let mut remote = b.remote();
        initialize(&mut remote, json!({}));
        let sid = zcode_tests::new_session(&mut remote, w.home.path());
        wait_until("the default model is set", || agent_log(log).iter().any(|(_, m, _)| m == method));
        let (_, _, p) = agent_log(log).into_iter().find(|(_, m, _)| m == method).unwrap();
        assert_eq!(p["sessionId"], sid.as_str());
        assert!(p["modelId"] == "smart" || (p["configId"] == "model" && p["value"] == "smart"), "{p}");
        // The models the agent reported, with the default, on its bridge's mount.
        let (_, models) =
            Mount { port: b.port, prefix: "/settings".into(), hub_local: false }.call("GET", "models", None);
        let p =
            models["providers"].as_array().unwrap().iter().find(|p| p["id"] == "scripted").unwrap().clone();
        assert_eq!((&p["defaultModel"], &p["reported"]), (&json!("smart"), &json!(true)), "{p}");
        assert_eq!(names(&p, "models", "id"), ["fast", "smart"]);
    }
    // Immediate: a new default applies to the next session start, no restart.
    let m = Mount { port: by_state.port, prefix: "/settings".into(), hub_local: false };
    assert_eq!(
        m.call("PUT", "providers/scripted", Some(&json!({"defaultModel": "fast"}))).1["effect"],
        "immediate"
    );
    let mut remote = by_state.remote();
    initialize(&mut remote, json!({}));
    zcode_tests::new_session(&mut remote, w.home.path());
    assert_eq!(m.call("PUT", "providers/scripted", Some(&json!({"defaultModel": "smart"}))).0, 200);
    let last = zcode_tests::new_session(&mut remote, w.home.path());
    let sets =
        || agent_log(&state_log).into_iter().filter(|(_, m, _)| m == "session/set_model").collect::<Vec<_>>();
    wait_until("the new default applies", || sets().iter().any(|(_, _, p)| p["sessionId"] == last.as_str()));
    // The session that started under `fast` (the agent's own current model) needed no call.
    assert_eq!(sets().len(), 2, "{:?}", sets());
}

#[test]
fn the_hubs_mount_sees_the_providers_the_live_agents_reported() {
    // The hub runs no agent: its mount asks the live bridges what theirs reported, so it lists
    // and writes the same providers as the per-instance mount (it said `providers: []` and
    // `404 no provider`).
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("a.log");
    let w = World::new(&json!({}));
    let b = w.bridge(&scripted(&log, &["--models", "fast,smart"]));
    let mut remote = b.remote();
    initialize(&mut remote, json!({}));
    zcode_tests::new_session(&mut remote, w.home.path());
    let ms = mounts(&w, &b);
    let bridge_view = || ms[1].call("GET", "models", None).1;
    wait_until("the agent's models on its bridge", || {
        names(&bridge_view()["providers"][0], "models", "id") == ["fast", "smart"]
    });
    for (i, m) in ms.iter().enumerate() {
        let (s, models) = m.call("GET", "models", None);
        assert_eq!(s, 200, "{}: {models}", m.prefix);
        assert_eq!(models, bridge_view(), "{}: the same providers as the bridge's own mount", m.prefix);
        let p = &models["providers"][0];
        assert_eq!((&p["id"], &p["reported"]), (&json!("scripted"), &json!(true)), "{}: {models}", m.prefix);
        let (_, all) = m.call("GET", "all", None);
        assert_eq!(all["models"]["providers"], models["providers"], "{}: all", m.prefix);
        // A write to the reported provider (not in config.json yet) is accepted everywhere.
        let name = format!("Scripted {i}");
        let (s, v) =
            m.call("PUT", "providers/scripted", Some(&json!({"name": name, "defaultModel": "smart"})));
        assert_eq!(s, 200, "{}: {v}", m.prefix);
        assert_eq!(bridge_view()["providers"][0]["name"], name.as_str(), "{}", m.prefix);
        assert_eq!(m.call("PUT", "providers/nobody", Some(&json!({"enabled": true}))).0, 404, "{}", m.prefix);
    }
}
