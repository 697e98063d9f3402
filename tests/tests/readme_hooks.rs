//! The worked examples of docs/HOOKS.md (README.md's "Hooks" section points there), taken from
//! the document itself (a broken example fails here) and run for real: as hooks of a real bridge fronting the
//! demo agent, with `HOME` a temp dir. The ntfy command posts to a local listener standing in
//! for ntfy.sh; `allow-reads.sh` answers read permissions inside the project and nothing else;
//! the tool-call log gets one JSON line per completed or failed tool call.
#![allow(clippy::unwrap_used)] // Setup helpers outside #[test] fns: a failed unwrap is a failed test.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use zcode_tests::hub::wait_until;
use zcode_tests::{Bridge, Home, Peer, agent_text, demo_agent, initialize, new_session, prompt};

/// docs/HOOKS.md, which the README's hooks section points at.
fn section() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert!(readme.contains("](docs/HOOKS.md)"), "README.md points at docs/HOOKS.md");
    std::fs::read_to_string(root.join("docs/HOOKS.md")).unwrap()
}

/// The first ```` ```lang ```` block after `heading` in the section.
fn block(section: &str, heading: &str, lang: &str) -> String {
    let at = section.find(heading).unwrap_or_else(|| panic!("docs/HOOKS.md lost {heading:?}"));
    let open = format!("```{lang}\n");
    let from = at + section[at..].find(&open).unwrap_or_else(|| panic!("no {lang} block after {heading:?}"));
    let body = &section[from + open.len()..];
    body[..body.find("```").expect("a closed block")].to_owned()
}

/// A docs/HOOKS.md JSON fragment (`"Event": [...], ...`) as an object of events.
fn events(fragment: &str) -> serde_json::Map<String, Value> {
    let v: Value = serde_json::from_str(&format!("{{{fragment}}}"))
        .unwrap_or_else(|e| panic!("docs/HOOKS.md hook fragment is not JSON once braced ({e}):\n{fragment}"));
    v.as_object().unwrap().clone()
}

/// The examples need `jq` and `curl` (and coreutils' `realpath`): fail, never skip, without them.
fn require_tools() {
    for tool in ["jq", "curl", "realpath"] {
        let found = Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().unwrap();
        assert!(
            found.status.success(),
            "`{tool}` is missing: docs/HOOKS.md's examples need it (run scripts/install-test-deps)"
        );
    }
}

/// A stand-in for ntfy.sh on loopback: sends (request line, body) of each POST, answers like ntfy.
fn ntfy_listener() -> (u16, mpsc::Receiver<(String, String)>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut r = BufReader::new(conn.try_clone().unwrap());
            let mut request = String::new();
            r.read_line(&mut request).unwrap();
            let mut len = 0;
            loop {
                let mut h = String::new();
                r.read_line(&mut h).unwrap();
                if h.trim().is_empty() {
                    break;
                }
                if let Some((k, v)) = h.split_once(':') {
                    if k.eq_ignore_ascii_case("content-length") {
                        len = v.trim().parse().unwrap();
                    }
                }
            }
            let mut body = vec![0; len];
            r.read_exact(&mut body).unwrap();
            let body = String::from_utf8(body).unwrap();
            let reply =
                json!({"id": "readme1", "time": 1, "event": "message", "topic": "topic", "message": body})
                    .to_string();
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
                reply.len()
            );
            if tx.send((request.trim_end().to_owned(), body)).is_err() {
                return;
            }
        }
    });
    (port, rx)
}

fn is_run(m: &Value) -> bool {
    m["method"] == "session/update" && m["params"]["update"]["sessionUpdate"] == "zcode_hook_run"
}

/// One prompt `text` that asks one permission: waits for the permission request and the
/// `hooks` runs of its PermissionRequest hooks; if no hook answered, answers `reject` itself.
/// Returns (those runs, the turn's agent text).
fn permission_turn(p: &mut Peer, sid: &str, text: &str, hooks: usize) -> (Vec<Value>, String) {
    let id = p.request("session/prompt", prompt(sid, text));
    let (mut req, mut cancelled) = (None::<Value>, false);
    let (mut runs, mut seen): (Vec<Value>, Vec<Value>) = (vec![], vec![]);
    while req.is_none()
        || runs.len() < hooks
        || (runs.iter().any(|r| r["answeredBy"] == "hook") && !cancelled)
    {
        let m = p.recv(&format!("{text:?}: the permission and {hooks} hook runs; so far {seen:?}"));
        if m["method"] == "session/request_permission" {
            req = Some(m.clone());
        } else if m["method"] == "$/cancel_request" {
            cancelled = true;
        } else if is_run(&m) && m["params"]["update"]["event"] == "PermissionRequest" {
            runs.push(m["params"]["update"].clone());
        }
        seen.push(m);
    }
    if !cancelled {
        let req = req.unwrap();
        p.send(&json!({"jsonrpc": "2.0", "id": req["id"], "result": {"outcome": {"outcome": "selected", "optionId": "reject"}}}));
    }
    let (resp, more) = p.response_to(&id);
    assert_eq!(resp["result"]["stopReason"], "end_turn", "{text:?}: {resp}");
    seen.extend(more);
    (runs, agent_text(&seen))
}

/// Runs `script` with `input` on stdin in `cwd`: (exit code, stdout).
fn run_script(script: &Path, cwd: &Path, input: &Value) -> (i32, String) {
    let mut child =
        Command::new(script).current_dir(cwd).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(input.to_string().as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8(out.stdout).unwrap())
}

const ALLOW: &str = "{\"decision\":\"allow\"}\n";

#[test]
fn the_readme_hook_examples_work_in_a_real_bridge() {
    require_tools();
    let hooks = section();
    let ntfy = events(&block(&hooks, "**Notify your phone (ntfy)", "json"));
    let script = block(&hooks, "**Auto-approve read-only tools", "sh");
    let allow_reads = events(&block(&hooks, "**Auto-approve read-only tools", "json"));
    let log = events(&block(&hooks, "**Log every tool call", "json"));

    let home = Home::new();
    let user = home.path().join("user"); // HOME: where `~` of the examples points
    let proj = home.path().join("proj");
    let outside = home.path().join("outside");
    for d in [&user.join("bin"), &proj, &outside] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::os::unix::fs::symlink(&outside, proj.join("link")).unwrap();
    std::fs::write(outside.join("secret"), "not yours\n").unwrap();

    // The document's script, where its JSON says it is: `~/bin/allow-reads.sh`, executable.
    let command = allow_reads["PermissionRequest"][0]["hooks"][0]["command"].as_str().unwrap().to_owned();
    assert_eq!(command, "~/bin/allow-reads.sh", "docs/HOOKS.md's JSON runs the script it shows");
    let script_path = user.join("bin/allow-reads.sh");
    std::fs::write(&script_path, &script).unwrap();
    std::fs::set_permissions(&script_path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();

    // The ntfy command, posting to the local listener instead of ntfy.sh.
    let (port, posts) = ntfy_listener();
    let mut ntfy = ntfy["PermissionRequest"].clone();
    let ntfy_cmd = ntfy[0]["hooks"][0]["command"].as_str().unwrap().to_owned();
    let topic = "https://ntfy.sh/YOUR-SECRET-TOPIC";
    assert!(ntfy_cmd.contains(topic), "{ntfy_cmd}");
    ntfy[0]["hooks"][0]["command"] =
        json!(ntfy_cmd.replace(topic, &format!("http://127.0.0.1:{port}/topic")));

    // The PermissionRequest hooks of both examples, plus one that keeps what a hook reads.
    let captured = home.path().join("stdin.jsonl");
    let capture = format!("line=$(cat); printf '%s\\n' \"$line\" >> '{}'", captured.display());
    let mut permission = ntfy.as_array().unwrap().clone();
    permission.extend(allow_reads["PermissionRequest"].as_array().unwrap().iter().cloned());
    permission.push(json!({"hooks": [{"type": "command", "command": capture}]}));
    let mut tree = log.clone();
    tree.insert("PermissionRequest".into(), Value::Array(permission));
    let config = json!({"hooks": {"events": tree}});
    std::fs::write(home.path().join("config.json"), serde_json::to_string_pretty(&config).unwrap()).unwrap();

    let mut cmd = home.command(&["bridge", "--"]);
    cmd.args(demo_agent(0))
        .env("ZCODE_ACP_REMOTE_PORT", "0")
        .env("ZCODE_ACP_REMOTE_TOKEN", zcode_tests::TEST_TOKEN);
    cmd.env("HOME", &user);
    let mut b = Bridge::spawn(&home, cmd, Stdio::inherit());
    initialize(&mut b.editor, json!({}));
    let mut remote = b.remote();
    initialize(&mut remote, json!({}));
    let sid = new_session(&mut remote, &proj);
    let cwd = proj.display().to_string();

    let absolute = outside.join("secret").display().to_string();
    let cases =
        [("notes/inside.txt", true), ("../x", false), (absolute.as_str(), false), ("link/secret", false)];
    for (path, allowed) in cases {
        let (runs, text) = permission_turn(&mut remote, &sid, &format!("permission:{path}"), 3);
        let mine = runs.iter().find(|r| r["command"] == command.as_str()).expect("allow-reads.sh ran");
        assert_eq!(mine["exitCode"], 0, "{path}: {mine}");
        if allowed {
            assert_eq!(mine["stdout"], ALLOW, "{path}: {mine}");
            assert_eq!(
                (mine["decision"].as_str(), mine["answeredBy"].as_str()),
                (Some("allow"), Some("hook"))
            );
            assert!(text.contains("Permission granted (allow)"), "{path}: {text}");
        } else {
            assert_eq!(mine["stdout"], "", "{path}: {mine}");
            assert!(mine.get("answeredBy").is_none(), "{path}: {mine}");
            assert!(text.contains("Permission denied (reject)"), "{path}: the client decided: {text}");
        }
        let (request, body) = posts.recv_timeout(zcode_tests::WAIT).expect("the ntfy hook posted");
        assert_eq!(request, "POST /topic HTTP/1.1");
        assert_eq!(body, format!("Read {path} (needs your permission) waits for you in {cwd}"));
    }
    // An edit: the document's matcher keeps the script out; the phone is still notified.
    let (runs, text) = permission_turn(&mut remote, &sid, "permission", 2);
    assert!(runs.iter().all(|r| r["command"] != command.as_str()), "{runs:?}");
    assert!(text.contains("Permission denied (reject)"), "{text}");
    let (_, body) = posts.recv_timeout(zcode_tests::WAIT).expect("the ntfy hook posted");
    assert_eq!(body, format!("Touch demo.txt (needs your permission) waits for you in {cwd}"));

    // The tool-call log: 5 turns, each a completed think call and a permission call that
    // completed (allowed) or failed (rejected).
    let log_file = user.join("zcode-tool-calls.jsonl");
    let lines = || -> Vec<Value> {
        let text = std::fs::read_to_string(&log_file).unwrap_or_default();
        text.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect()
    };
    wait_until("10 lines in ~/zcode-tool-calls.jsonl", || lines().len() >= 10);
    let lines = lines();
    assert_eq!(lines.len(), 10, "{lines:?}");
    for l in &lines {
        let at = l["at"].as_str().unwrap();
        assert!(at.len() == 20 && at.ends_with('Z') && at.as_bytes()[10] == b'T', "{l}");
        assert_eq!(l["session"], sid.as_str());
        assert_eq!(l.as_object().unwrap().len(), 6, "{l}");
    }
    // Observing hooks run in the background, each its own process: two turns' lines can land
    // in either order (docs/HOOKS.md says so), so the lines are compared as a set.
    let mut reads: Vec<(String, String)> = lines
        .iter()
        .filter(|l| l["kind"] == "read")
        .map(|l| (l["status"].to_string(), l["input"]["path"].to_string()))
        .collect();
    let mut want: Vec<(String, String)> = cases
        .iter()
        .map(|(p, ok)| (json!(if *ok { "completed" } else { "failed" }).to_string(), json!(p).to_string()))
        .collect();
    reads.sort();
    want.sort();
    assert_eq!(reads, want);
    assert_eq!(lines.iter().filter(|l| l["kind"] == "think" && l["status"] == "completed").count(), 5);
    let edit = lines.iter().find(|l| l["kind"] == "edit").expect("the edit's line");
    assert_eq!(
        (edit["tool"].clone(), edit["status"].clone()),
        (json!("Touch demo.txt (needs your permission)"), json!("failed"))
    );

    // The script on its own, fed what the bridge gave hooks, varied where no agent here varies.
    let got: Vec<Value> = std::fs::read_to_string(&captured)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(got.len(), 5);
    let inside = got[0].clone();
    assert_eq!(inside["tool_input"], json!({"path": "notes/inside.txt"}));
    assert_eq!(run_script(&script_path, &proj, &inside), (0, ALLOW.into()));
    let edit = &got[4];
    assert_eq!(edit["tool_kind"], "edit");
    assert_eq!(run_script(&script_path, &proj, edit), (0, String::new()), "not a read");
    let variant = |locations: Value, input: Value| {
        let mut v = inside.clone();
        v["tool_locations"] = locations;
        v["tool_input"] = input;
        v
    };
    let inside_abs = inside["tool_locations"][0].clone();
    for (what, v, allowed) in [
        ("no paths", variant(Value::Null, Value::Null), false),
        ("empty paths", variant(json!([]), json!({})), false),
        ("file_path inside", variant(json!([]), json!({"file_path": format!("{cwd}/a.txt")})), true),
        (
            "file_path outside",
            variant(json!([inside_abs.clone()]), json!({"file_path": "/etc/passwd"})),
            false,
        ),
        (
            "one of two outside",
            variant(json!([inside_abs.clone(), {"path": "/etc/passwd"}]), Value::Null),
            false,
        ),
        ("a path over two lines", variant(json!([{"path": "a\nb"}]), Value::Null), false),
        ("a location without a path", variant(json!([inside_abs, {"line": 3}]), Value::Null), false),
    ] {
        let want = if allowed { ALLOW } else { "" };
        assert_eq!(run_script(&script_path, &proj, &v), (0, want.to_owned()), "{what}: {v}");
    }
}
