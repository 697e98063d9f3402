//! Plan quota end to end: the hub's `GET /api/quota` (token, `no-store`, every section's kind,
//! one upstream query for concurrent callers), ACP `account/usage_stats` answered by the
//! bridge through the hub relay and over stdio (from the hub's cache, or by itself when no
//! hub knows the route), and the `zcode-acp quota` card on a terminal and not. The vendors are
//! local HTTP servers speaking their real shapes (the test-only origin variables).

use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use zcode_tests::hub::{AUTH, Hub, http, wait_instances};
use zcode_tests::{Bridge, Home, WAIT, demo_agent, initialize};

/// A vendor on 127.0.0.1 answering every request with `route(method, path)`, after `delay`.
struct Vendor {
    origin: String,
    hits: Arc<AtomicUsize>,
}

fn vendor(delay: Duration, route: impl Fn(&str, &str) -> (u16, String) + Send + Sync + 'static) -> Vendor {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let origin = format!("http://{}", listener.local_addr().expect("addr"));
    let hits = Arc::new(AtomicUsize::new(0));
    let (h, route) = (hits.clone(), Arc::new(route));
    std::thread::spawn(move || {
        for sock in listener.incoming().flatten() {
            let (h, route) = (h.clone(), route.clone());
            std::thread::spawn(move || {
                let mut sock = sock;
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match sock.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let mut words = head.split_whitespace();
                let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
                h.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(delay);
                let (status, body) = route(method, path);
                let _ = write!(
                    sock,
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    Vendor { origin, hits }
}

const GLM_OK: &str = r#"{"code":200,"msg":"ok","success":true,"data":{"level":"pro","limits":[
 {"type":"TOKENS_LIMIT","number":5,"usage":100,"currentValue":35,"remaining":65,"percentage":35,"nextResetTime":1723812000000},
 {"type":"TIME_LIMIT","number":1,"usage":30,"currentValue":3,"remaining":27,"nextResetTime":1723812000000,
  "usageDetails":[{"modelCode":"search-prime","usage":2}]}]}}"#;

fn glm_vendor(delay: Duration) -> Vendor {
    vendor(delay, |_, path| match path {
        "/api/monitor/usage/quota/limit" => (200, GLM_OK.into()),
        _ => (404, "{}".into()),
    })
}

/// The environment that points GLM at `glm`, Ollama at a vendor refusing the key, and leaves
/// OpenCode Go unconfigured.
fn env<'a>(glm: &'a Vendor, ollama: &'a Vendor) -> Vec<(&'static str, &'a str)> {
    vec![
        ("ZCODE_ACP_GLM_API_KEY", "glm-secret-key"),
        ("ZCODE_ACP_QUOTA_TEST_GLM_URL", glm.origin.as_str()),
        ("OLLAMA_API_KEY", "ollama-secret-key"),
        ("ZCODE_ACP_QUOTA_TEST_OLLAMA_URL", ollama.origin.as_str()),
        ("OPENCODE_GO_WORKSPACE_ID", ""),
        ("OPENCODE_GO_AUTH_COOKIE", ""),
    ]
}

fn refusing() -> Vendor {
    vendor(Duration::ZERO, |_, _| (401, r#"{"error":"unauthorized"}"#.into()))
}

fn expected_glm() -> Value {
    json!({"kind": "success", "level": "pro", "items": [
        {"key": "token_5h", "label": "5h", "usedPercent": 35, "usedCount": 35, "totalCount": 100, "nextResetTime": 1723812000000u64},
        {"key": "mcp", "label": "MCP", "usedPercent": 10, "usedCount": 3, "totalCount": 30, "nextResetTime": 1723812000000u64,
         "detail": [{"modelCode": "search-prime", "usage": 2}]}]})
}

fn write_config(home: &Home, config: &Value) {
    std::fs::write(home.path().join("config.json"), config.to_string()).expect("config.json");
}

#[test]
fn api_quota_needs_the_token_and_answers_each_section_kind_uncached_by_clients() {
    let home = Home::new();
    let (glm, ollama) = (glm_vendor(Duration::ZERO), refusing());
    let script = home.path().join("minimax.sh");
    std::fs::write(&script, "#!/bin/sh\necho '{\"kind\":\"success\",\"windows\":[{\"key\":\"daily\",\"label\":\"Day\",\"usagePercent\":40}]}'\n")
        .expect("script");
    write_config(
        &home,
        &json!({"quota": {"commands": {"minimax": {"command": "/bin/sh", "args": [script]}}}}),
    );
    let hub = Hub::start(&home, &env(&glm, &ollama));
    let r = http(hub.port, "GET", "/api/quota", &[], b"");
    assert_eq!((r.status, r.text().as_str()), (401, "unauthorized"));
    assert_eq!(glm.hits.load(Ordering::SeqCst), 0, "nothing is asked without the token");
    let r = http(hub.port, "GET", "/api/quota", &[AUTH], b"");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("cache-control"), Some("no-store"));
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    assert_eq!(
        r.json(),
        json!({"glm": expected_glm(), "opencode": {"kind": "not_configured"}, "ollama": {"kind": "auth_error"},
            "minimax": {"kind": "success", "windows": [{"key": "daily", "label": "Day", "usagePercent": 40}]}})
    );
    let log = hub.log();
    assert!(!log.contains("secret-key"), "a credential reached the hub's log:\n{log}");
}

#[test]
fn concurrent_callers_share_one_upstream_query_and_the_hub_caches_it() {
    let home = Home::new();
    let (glm, ollama) = (glm_vendor(Duration::from_millis(700)), refusing());
    let hub = Hub::start(&home, &env(&glm, &ollama));
    let port = hub.port;
    let callers: Vec<_> =
        (0..8).map(|_| std::thread::spawn(move || http(port, "GET", "/api/quota", &[AUTH], b""))).collect();
    let answers: Vec<Value> = callers
        .into_iter()
        .map(|c| {
            let r = c.join().expect("caller");
            assert_eq!(r.status, 200);
            r.json()
        })
        .collect();
    assert!(answers.windows(2).all(|w| w[0] == w[1]), "{answers:?}");
    assert_eq!(glm.hits.load(Ordering::SeqCst), 1, "eight callers, one GLM request");
    assert_eq!(ollama.hits.load(Ordering::SeqCst), 2, "eight callers, one Ollama query (usage + me)");
    assert_eq!(http(port, "GET", "/api/quota", &[AUTH], b"").json(), answers[0]);
    assert_eq!(glm.hits.load(Ordering::SeqCst), 1, "the payload is cached");
    // The settings API's hub-only `quota` read is the same payload from the same cache.
    let settings = http(port, "GET", "/api/settings/quota", &[AUTH], b"");
    assert_eq!((settings.status, settings.json()), (200, answers[0].clone()));
    assert_eq!(http(port, "GET", "/api/settings/quota", &[], b"").status, 401);
    assert_eq!(glm.hits.load(Ordering::SeqCst), 1, "the settings read shares the cache");
}

#[test]
fn usage_stats_is_answered_by_the_bridge_through_the_hub_relay_and_over_stdio() {
    let home = Home::new();
    let (glm, ollama) = (glm_vendor(Duration::ZERO), refusing());
    let hub = Hub::start(&home, &env(&glm, &ollama));
    // The bridge has no credentials of its own: a payload with GLM in it came from the hub.
    let b =
        Bridge::start_env(&home, &demo_agent(0), &[("ZCODE_ACP_GLM_API_KEY", ""), ("OLLAMA_API_KEY", "")]);
    wait_instances(hub.port, "the bridge registered", |l| l.iter().any(|i| i["id"] == b.id()));
    let via_http = http(hub.port, "GET", "/api/quota", &[AUTH], b"").json();
    assert_eq!(via_http["glm"], expected_glm());

    let mut phone = hub.connect(&b.id()).expect("relayed");
    let (r, _) = phone.call("account/usage_stats", json!({}));
    assert_eq!(r["error"]["message"].as_str().map(|m| m.contains("initialize")), Some(true), "{r}");
    initialize(&mut phone, json!({}));
    for method in ["account/usage_stats", "_account/usage_stats"] {
        let (r, _) = phone.call(method, json!({}));
        assert_eq!(r["result"], via_http, "{method}: {r}");
    }
    let mut editor = b.editor;
    initialize(&mut editor, json!({}));
    let (r, _) = editor.call("account/usage_stats", json!({}));
    assert_eq!(r["result"], via_http, "over stdio: {r}");
    assert_eq!(glm.hits.load(Ordering::SeqCst), 1, "every channel shared the hub's cache");
}

#[test]
fn usage_stats_without_a_hub_that_knows_the_route_queries_itself() {
    let home = Home::new();
    let (glm, ollama) = (glm_vendor(Duration::ZERO), refusing());
    // Something of this user holds the hub's port and knows no /api/quota (an older hub).
    let old_hub = vendor(Duration::ZERO, |_, _| (404, "not found".into()));
    let port = old_hub.origin.rsplit(':').next().unwrap_or_default().to_owned();
    let mut e = env(&glm, &ollama);
    e.push(("ZCODE_ACP_HUB_PORT", port.as_str()));
    let e: Vec<(&str, &str)> = e.into_iter().filter(|(_, v)| !v.is_empty()).collect();
    let mut b = Bridge::start_env(&home, &demo_agent(0), &e);
    initialize(&mut b.editor, json!({}));
    let (r, _) = b.editor.call("_account/usage_stats", json!({}));
    assert_eq!(r["result"]["glm"], expected_glm(), "{r}");
    assert_eq!(r["result"]["ollama"], json!({"kind": "auth_error"}));
    assert_eq!(glm.hits.load(Ordering::SeqCst), 1);
    assert!(old_hub.hits.load(Ordering::SeqCst) >= 1, "the hub was asked first");
}

/// `zcode-acp quota ARGS` with `env`: (exit code, stdout).
fn quota_cli(home: &Home, args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let mut all = vec!["quota"];
    all.extend_from_slice(args);
    let mut cmd = home.command(&all);
    for (k, v) in env {
        match v.is_empty() {
            true => cmd.env_remove(k),
            false => cmd.env(k, v),
        };
    }
    let out = cmd.stdin(Stdio::null()).output().expect("run zcode-acp quota");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn the_cli_card_on_a_pipe_json_filters_and_exit_status() {
    let home = Home::new();
    let (glm, ollama) = (glm_vendor(Duration::ZERO), refusing());
    let mut e = env(&glm, &ollama);
    e.push(("TZ", "UTC"));
    let (code, out) = quota_cli(&home, &[], &e);
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains('\x1b'), "no colour on a pipe: {out:?}");
    let glm_block =
        "GLM Coding Plan (pro)\n  5h     ███████░░░░░░░░░░░░░   35%  35/100  resets Fri 16 Aug 12:40 UTC\n";
    assert!(out.starts_with(glm_block), "{out}");
    assert!(out.contains("Ollama Cloud\n  credentials refused or expired: check OLLAMA_API_KEY"), "{out}");
    assert!(!out.contains("OpenCode"), "unconfigured providers are left out: {out}");

    let (code, out) = quota_cli(&home, &["glm", "--json"], &e);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v, json!({"glm": expected_glm()}));

    let (code, out) = quota_cli(&home, &["ollama"], &e);
    assert_eq!(code, 1, "the one provider asked for did not answer: {out}");
    let (code, out) = quota_cli(&home, &["go"], &e);
    assert_eq!(
        (code, out.as_str()),
        (1, "OpenCode Go\n  not configured: set OPENCODE_GO_WORKSPACE_ID and OPENCODE_GO_AUTH_COOKIE\n")
    );
    let (code, _) = quota_cli(&home, &["nosuch"], &e);
    assert_eq!(code, 2);

    // Every provider failing (a timeout included: the test knob, not 8 s) is exit status 1.
    let slow = glm_vendor(Duration::from_secs(3));
    let e = [
        ("ZCODE_ACP_GLM_API_KEY", "k"),
        ("ZCODE_ACP_QUOTA_TEST_GLM_URL", slow.origin.as_str()),
        ("ZCODE_ACP_QUOTA_TIMEOUT_MS", "300"),
        ("OLLAMA_API_KEY", ""),
        ("OPENCODE_GO_WORKSPACE_ID", ""),
        ("OPENCODE_GO_AUTH_COOKIE", ""),
    ];
    let (code, out) = quota_cli(&home, &[], &e);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("GLM Coding Plan\n  unavailable: no usable answer from the vendor in time"),
        "{out}"
    );
}

#[test]
fn the_cli_card_on_a_terminal_has_colour() {
    let home = Home::new();
    let (glm, ollama) = (glm_vendor(Duration::ZERO), refusing());
    // `script` gives the command a pseudo-terminal, as a person's shell would.
    let line = format!("{} quota glm", zcode_tests::bin().display());
    let mut cmd = Command::new("script");
    cmd.args(["-qefc", &line, "/dev/null"]);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("ZCODE_ACP_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("ZCODE_ACP_HOME", home.path()).env("TZ", "UTC").env_remove("NO_COLOR");
    for (k, v) in env(&glm, &ollama) {
        match v.is_empty() {
            true => cmd.env_remove(k),
            false => cmd.env(k, v),
        };
    }
    let out = cmd.stdin(Stdio::null()).output().expect("script");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("\x1b[1mGLM Coding Plan (pro)\x1b[0m"), "{text:?}");
    // 35 % is between green and yellow: a truecolor bar of 7 cells.
    assert!(text.contains("\x1b[38;2;"), "{text:?}");
    assert!(text.contains("███████\x1b[2m░░░░░░░░░░░░░"), "{text:?}");
}

#[test]
fn watch_mode_refreshes_until_interrupted() {
    use std::io::BufRead;
    let home = Home::new();
    let (glm, ollama) = (glm_vendor(Duration::ZERO), refusing());
    let mut cmd = home.command(&["quota", "glm", "-w", "-i", "10"]);
    // A refresh 200 ms after the last instead of the 10 s `-i` asks for.
    cmd.env("ZCODE_ACP_TEST_QUOTA_PERIOD_MS", "200");
    for (k, v) in env(&glm, &ollama) {
        match v.is_empty() {
            true => cmd.env_remove(k),
            false => cmd.env(k, v),
        };
    }
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).spawn().expect("zcode-acp quota -w");
    let mut lines = std::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let first = lines.next().and_then(Result::ok);
    assert_eq!(first.as_deref(), Some("GLM Coding Plan (pro)"));
    // The second card comes after the period, from a new query.
    let again = lines.by_ref().map_while(Result::ok).find(|l| l == "GLM Coding Plan (pro)");
    assert!(again.is_some(), "a second card");
    assert_eq!(glm.hits.load(Ordering::SeqCst), 2, "each refresh asks the vendor again");
    assert!(child.try_wait().expect("try_wait").is_none(), "-w keeps running");
    let _ = child.kill();
    let _ = child.wait();
}

/// `zcode-acp quota ARGS` with `env`, which must end within the suite's deadline (a watch
/// that never ends is killed and fails the test): (exit code, stdout, stderr).
fn quota_cli_ends(home: &Home, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut all = vec!["quota"];
    all.extend_from_slice(args);
    let mut cmd = home.command(&all);
    for (k, v) in env {
        match v.is_empty() {
            true => cmd.env_remove(k),
            false => cmd.env(k, v),
        };
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run zcode-acp quota");
    let read = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = read(Box::new(child.stdout.take().expect("stdout")));
    let err = read(Box::new(child.stderr.take().expect("stderr")));
    let deadline = std::time::Instant::now() + WAIT;
    let code = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status.code().unwrap_or(-1);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let (out, err) = (out.join().unwrap_or_default(), err.join().unwrap_or_default());
            panic!("`zcode-acp quota {}` never ended\nstdout: {out}\nstderr: {err}", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (code, out.join().unwrap_or_default(), err.join().unwrap_or_default())
}

/// Issue 29 point 11: a command's RFC 3339 `resetsAt` was dropped from the card, and one of
/// another type was too, without a word; long labels pushed their bars out of the column.
#[test]
fn command_resets_in_rfc3339_are_shown_bad_ones_say_the_type_and_bars_line_up() {
    let home = Home::new();
    let (glm, ollama) = (glm_vendor(Duration::ZERO), refusing());
    let mine = r#"{"kind":"success","windows":[
        {"key":"rolling","label":"5h","usagePercent":5,"resetsAt":"2030-01-15T10:00:00Z"},
        {"key":"weekly","label":"Week","usagePercent":25,"resetsAt":"2030-01-15T12:00:00+02:00"},
        {"key":"premium","label":"Premium requests","usagePercent":50}]}"#;
    let broken = r#"{"kind":"success","windows":[{"key":"weekly","label":"Week","usagePercent":5,"resetsAt":"next tuesday"}]}"#;
    let printf = |json: &str| json!({"command": "/bin/sh", "args": ["-c", format!("printf '%s' '{json}'")]});
    write_config(&home, &json!({"quota": {"commands": {"mine": printf(mine), "broken": printf(broken)}}}));
    let mut e = env(&glm, &ollama);
    e.push(("TZ", "UTC"));
    let (code, out, err) = quota_cli_ends(&home, &[], &e);
    assert_eq!(code, 0, "{out}{err}");
    let line = |label: &str| {
        out.lines()
            .find(|l| l.trim_start().starts_with(label))
            .unwrap_or_else(|| panic!("no {label} line:\n{out}"))
    };
    let rolling = out.lines().rfind(|l| l.trim_start().starts_with("5h ")).unwrap_or_default();
    assert!(rolling.ends_with("resets Tue 15 Jan 10:00 UTC"), "the RFC 3339 reset is shown:\n{out}");
    let week = out.lines().find(|l| l.trim_start().starts_with("Week ")).unwrap_or_default();
    assert!(week.ends_with("resets Tue 15 Jan 10:00 UTC"), "an offset is applied:\n{out}");
    assert!(
        out.contains(
            "broken\n  unavailable: window \"weekly\": `resetsAt` must be epoch milliseconds (a whole number) \
             or an RFC 3339 time such as \"2026-12-03T10:00:00Z\"; got \"next tuesday\"\n"
        ),
        "{out}"
    );
    // Every window line's bar starts in one column, across sections.
    let cols: Vec<usize> = out.lines().filter_map(|l| l.chars().position(|c| c == '█' || c == '░')).collect();
    assert_eq!(cols.len(), 5, "GLM's two windows and the command's three:\n{out}");
    assert!(cols.iter().all(|c| *c == cols[0]), "the bars are not in one column:\n{out}");
    assert!(line("Premium requests").contains("Premium requests ██████████"), "{out}");
}

/// Issue 29 point 11: `-i 5` was raised to 10 without a word; it is refused with the minimum.
#[test]
fn an_interval_under_ten_seconds_is_refused_with_the_minimum() {
    let home = Home::new();
    let (glm, ollama) = (glm_vendor(Duration::ZERO), refusing());
    let (code, out, err) = quota_cli_ends(&home, &["-i", "5"], &env(&glm, &ollama));
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("'5'") && err.contains("at least 10 seconds"), "{err}");
    assert_eq!(glm.hits.load(Ordering::SeqCst), 0, "nothing was asked");
}

/// Issue 29 point 11: with no provider configured, `-w` printed the same advice every 30 s
/// forever; it says it once and exits 1.
#[test]
fn watch_with_nothing_configured_says_so_once_and_exits_non_zero() {
    let home = Home::new();
    let none = [
        ("ZCODE_ACP_GLM_API_KEY", ""),
        ("OLLAMA_API_KEY", ""),
        ("OPENCODE_GO_WORKSPACE_ID", ""),
        ("OPENCODE_GO_AUTH_COOKIE", ""),
    ];
    let (code, out, err) = quota_cli_ends(&home, &["-w"], &none);
    assert_eq!(code, 1, "{out}{err}");
    assert_eq!(out.matches("no quota provider is configured").count(), 1, "{out}");
    // One provider asked for by name and not configured: the same.
    let (code, out, _) = quota_cli_ends(&home, &["go", "-w", "-i", "10"], &none);
    assert_eq!(
        (code, out.as_str()),
        (1, "OpenCode Go\n  not configured: set OPENCODE_GO_WORKSPACE_ID and OPENCODE_GO_AUTH_COOKIE\n")
    );
}
