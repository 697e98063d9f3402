//! A session's uncommitted git changes through the hub's relay to the bridge: the file list with
//! branch and ahead/behind, one file's hunks (modified, renamed, deleted, untracked, binary, cut),
//! outside a repository, confinement like the files API, and hostile file names kept as data.
//! One hub and one bridge for the whole file; each session has its own directory.

#![allow(clippy::unwrap_used)] // Setup helpers outside #[test] fns: a failed unwrap is a failed test.

use serde_json::{Value, json};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use zcode_tests::hub::{Hub, listed, wait_instances};
use zcode_tests::{Bridge, Home, TEST_TOKEN, demo_agent, http, initialize, new_session};

/// Runs git in `dir` for the setup, without the test's own `GIT_*` environment.
fn git(dir: &Path, args: &[&str]) -> String {
    let mut cmd = std::process::Command::new("git");
    cmd.args(["-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir);
    for (k, _) in std::env::vars_os() {
        if k.as_encoded_bytes().starts_with(b"GIT_") {
            cmd.env_remove(k);
        }
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn write(dir: &Path, name: impl AsRef<OsStr>, body: impl AsRef<[u8]>) {
    std::fs::write(dir.join(name.as_ref()), body).unwrap();
}

/// Percent-encodes every byte but the unreserved ones.
fn enc(b: &[u8]) -> String {
    b.iter()
        .map(|c| {
            if c.is_ascii_alphanumeric() || b"-._~".contains(c) {
                (*c as char).to_string()
            } else {
                format!("%{c:02X}")
            }
        })
        .collect()
}

/// The repository: one commit on `base` and `main` each past their fork (so `main`, tracking
/// `base`, is 1 ahead and 1 behind), then uncommitted changes of every kind.
fn make_repo(p: &Path) {
    let lib: String = (1..=30).map(|n| format!("fn f{n}() {{ let x = {n}; }}\n")).collect();
    write(p, "lib.rs", &lib);
    write(p, "old.txt", "one\ntwo\nthree\n");
    write(p, "gone.txt", "bye\nnow\n");
    write(p, "data.bin", [0u8, 1, 2, 0, 3]);
    write(p, "*", "star\n");
    write(p, "a.txt", "a\n");
    write(p, "--output=pwned", "x\n");
    write(p, "big.txt", "small\n");
    write(p, OsStr::from_bytes(b"was\xff.txt"), "a\nb\nc\nd\n");
    std::fs::create_dir(p.join("sub")).unwrap();
    write(p, "sub/inner.txt", "in\n");
    git(p, &["init", "-q"]);
    git(p, &["add", "-A"]);
    git(p, &["commit", "-qm", "first"]);
    git(p, &["branch", "base"]);
    git(p, &["checkout", "-q", "base"]);
    write(p, "theirs.txt", "t\n");
    git(p, &["add", "theirs.txt"]);
    git(p, &["commit", "-qm", "theirs"]);
    git(p, &["checkout", "-q", "main"]);
    write(p, "ours.txt", "o\n");
    git(p, &["add", "ours.txt"]);
    git(p, &["commit", "-qm", "ours"]);
    git(p, &["branch", "-q", "--set-upstream-to=base"]);

    write(p, "lib.rs", lib.replace("let x = 5;", "let x = 50;").replace("fn f20() { let x = 20; }\n", ""));
    git(p, &["mv", "old.txt", "new.txt"]);
    std::fs::rename(p.join(OsStr::from_bytes(b"was\xff.txt")), p.join("now.txt")).unwrap();
    git(p, &["add", "-A"]);
    write(p, "now.txt", "a\nb\nc\nD\n");
    write(p, "new.txt", "one\ntwo\nthree\nfour\n");
    std::fs::remove_file(p.join("gone.txt")).unwrap();
    write(p, "data.bin", [0u8, 9, 9, 0]);
    write(p, "*", "star!\n");
    write(p, "a.txt", "a!\n");
    write(p, "--output=pwned", "y\n");
    write(p, "sub/inner.txt", "in!\n");
    let big: String = (0..40_000).map(|n| format!("line {n} of a large change\n")).collect();
    write(p, "big.txt", big);
    write(p, "notes.md", "# notes\nfirst\nsecond");
    write(p, "blob.dat", b"\x7fELF\0\0\x01");
    write(p, "-n\nx\x1b[31m.txt", "hostile\n");
    write(p, OsStr::from_bytes(b"caf\xe9.txt"), "latin-1 name\n");
}

struct Setup {
    _home: Home,
    _hub: Hub,
    _bridge: Bridge,
    hub: u16,
    id: String,
}

impl Setup {
    fn get(&self, route: &str, sid: &str, query: &str) -> (u16, String) {
        let r = http(
            self.hub,
            "GET",
            &format!("/api/instances/{}/{route}?sessionId={sid}&{query}", self.id),
            Some(TEST_TOKEN),
        );
        (r.status, r.text())
    }

    fn json(&self, route: &str, sid: &str, query: &str) -> Value {
        let (status, body) = self.get(route, sid, query);
        assert_eq!(status, 200, "{route}?{query}: {body}");
        serde_json::from_str(&body).unwrap()
    }

    fn diff(&self, sid: &str, path: &[u8]) -> Value {
        self.json("changes/diff", sid, &format!("path={}", enc(path)))
    }
}

fn lines(hunk: &Value) -> Vec<String> {
    hunk["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| format!("{}{}", l["kind"].as_str().unwrap(), l["text"].as_str().unwrap()))
        .collect()
}

#[test]
fn changes_and_diffs_of_a_session_confined_to_its_root() {
    let home = Home::new();
    let base = tempfile::tempdir().unwrap();
    let project = base.path().join("proj");
    let outside = base.path().join("proj2");
    let plain = base.path().join("plain");
    let fresh = base.path().join("fresh");
    for d in [&project, &outside, &plain, &fresh] {
        std::fs::create_dir(d).unwrap();
    }
    make_repo(&project);
    std::fs::write(outside.join("secret"), "OUTSIDE\n").unwrap();
    std::os::unix::fs::symlink(&outside, project.join("link")).unwrap();
    std::fs::write(plain.join("x.txt"), "x\n").unwrap();
    git(&fresh, &["init", "-q"]);
    std::fs::write(fresh.join("first.txt"), "1\n2\n").unwrap();
    git(&fresh, &["add", "first.txt"]);

    let hub = Hub::start(&home, &[]);
    let mut bridge = Bridge::start_env(&home, &demo_agent(0), &[("ZCODE_ACP_HEARTBEAT_MS", "200")]);
    let id = bridge.id();
    wait_instances(hub.port, "the bridge", |l| listed(l, &id));
    initialize(&mut bridge.editor, json!({}));
    let sid = new_session(&mut bridge.editor, &project);
    let sub_sid = new_session(&mut bridge.editor, &project.join("sub"));
    let plain_sid = new_session(&mut bridge.editor, &plain);
    let fresh_sid = new_session(&mut bridge.editor, &fresh);
    let s = Setup { hub: hub.port, id, _home: home, _hub: hub, _bridge: bridge };

    // The list: branch, head, ahead/behind against the upstream, every kind of change.
    let v = s.json("changes", &sid, "");
    assert_eq!(v["git"], true);
    assert_eq!(v["root"], std::fs::canonicalize(&project).unwrap().display().to_string());
    assert_eq!((v["branch"].as_str(), v["upstream"].as_str()), (Some("main"), Some("base")));
    assert_eq!(v["head"], git(&project, &["rev-parse", "HEAD"]));
    assert_eq!((v["ahead"].as_u64(), v["behind"].as_u64()), (Some(1), Some(1)));
    assert_eq!(v["truncated"], false);
    let files = v["files"].as_array().unwrap();
    let by = |p: &str| files.iter().find(|f| f["path"] == p).unwrap_or_else(|| panic!("{p} not in {v}"));
    let row = |p: &str| {
        let f = by(p);
        (
            f["status"].as_str().unwrap(),
            f["additions"].as_u64().unwrap(),
            f["deletions"].as_u64().unwrap(),
            f["binary"].as_bool().unwrap(),
        )
    };
    assert_eq!(row("lib.rs"), ("modified", 1, 2, false));
    assert_eq!(row("new.txt"), ("renamed", 1, 0, false));
    assert_eq!(by("new.txt")["oldPath"], "old.txt");
    assert!(by("lib.rs").get("oldPath").is_none());
    assert_eq!(row("gone.txt"), ("deleted", 0, 2, false));
    assert_eq!(row("data.bin"), ("modified", 0, 0, true));
    assert_eq!(row("notes.md"), ("untracked", 3, 0, false));
    assert_eq!(row("blob.dat"), ("untracked", 0, 0, true));
    assert_eq!(
        row("-n\nx\x1b[31m.txt"),
        ("untracked", 1, 0, false),
        "a hostile name is one file, byte for byte"
    );
    assert_eq!(row("caf\u{fffd}.txt").0, "untracked", "a name that is not UTF-8 is shown, not dropped");
    assert_eq!(row("*"), ("modified", 1, 1, false));
    assert_eq!(row("--output=pwned"), ("modified", 1, 1, false));
    assert_eq!(row("sub/inner.txt"), ("modified", 1, 1, false));
    assert_eq!(row("big.txt").1, 40_000);
    assert!(!files.iter().any(|f| f["path"] == "old.txt" || f["path"] == "ours.txt"));
    // An untracked symlink counts as one line (its target's name, as git shows a link), never
    // the lines of what it points to (its diff is refused below: it leads outside).
    assert_eq!(row("link"), ("untracked", 1, 0, false));

    // One file's hunks, with old and new line numbers.
    let d = s.diff(&sid, b"lib.rs");
    assert_eq!(
        (d["path"].as_str(), d["status"].as_str(), d["binary"].as_bool()),
        (Some("lib.rs"), Some("modified"), Some(false))
    );
    let hunks = d["hunks"].as_array().unwrap();
    assert_eq!(hunks.len(), 2, "{d}");
    let h = &hunks[0];
    assert_eq!(
        (h["oldStart"].as_u64(), h["oldLines"].as_u64(), h["newStart"].as_u64(), h["newLines"].as_u64()),
        (Some(2), Some(7), Some(2), Some(7))
    );
    assert_eq!(lines(h)[3], "-fn f5() { let x = 5; }");
    assert_eq!(lines(h)[4], "+fn f5() { let x = 50; }");
    let minus = &h["lines"][3];
    assert_eq!((minus["oldNo"].as_u64(), minus.get("newNo")), (Some(5), None));
    let plus = &h["lines"][4];
    assert_eq!((plus.get("oldNo"), plus["newNo"].as_u64()), (None, Some(5)));
    assert_eq!((h["lines"][0]["oldNo"].as_u64(), h["lines"][0]["newNo"].as_u64()), (Some(2), Some(2)));
    let wide = s.json("changes/diff", &sid, "path=lib.rs&context=100");
    assert_eq!(wide["hunks"].as_array().unwrap().len(), 1, "a wider context joins the hunks");
    assert_eq!(wide["hunks"][0]["lines"].as_array().unwrap().len(), 31);

    let d = s.diff(&sid, b"new.txt");
    assert_eq!((d["status"].as_str(), d["oldPath"].as_str()), (Some("renamed"), Some("old.txt")));
    assert_eq!(lines(&d["hunks"][0]), [" one", " two", " three", "+four"]);
    let d = s.diff(&sid, b"now.txt");
    assert_eq!(
        (d["status"].as_str(), d["oldPath"].as_str()),
        (Some("renamed"), Some("was\u{fffd}.txt")),
        "{d}"
    );
    assert_eq!(
        lines(&d["hunks"][0]),
        [" a", " b", " c", "-d", "+D"],
        "a rename from a name that is not UTF-8"
    );
    let d = s.diff(&sid, b"gone.txt");
    assert_eq!(lines(&d["hunks"][0]), ["-bye", "-now"]);
    let d = s.diff(&sid, b"data.bin");
    assert_eq!((d["binary"].as_bool(), d["hunks"].as_array().unwrap().len()), (Some(true), 0));
    let d = s.diff(&sid, b"notes.md");
    assert_eq!(d["status"], "untracked");
    assert_eq!(lines(&d["hunks"][0]), ["+# notes", "+first", "+second"]);
    assert_eq!(d["hunks"][0]["lines"][2]["newNo"], 3);
    let d = s.diff(&sid, b"blob.dat");
    assert_eq!(
        (d["status"].as_str(), d["binary"].as_bool(), d["hunks"].as_array().unwrap().len()),
        (Some("untracked"), Some(true), 0)
    );
    let d = s.diff(&sid, b"big.txt");
    assert_eq!(d["truncated"], true, "a very large diff is cut, and says so");
    let n = d["hunks"][0]["lines"].as_array().unwrap().len();
    assert!(n > 1000 && n < 40_001, "{n} lines");

    // Hostile names are data: a name that looks like an option, a glob, a newline and escapes.
    let d = s.diff(&sid, b"--output=pwned");
    assert_eq!(lines(&d["hunks"][0]), ["-x", "+y"]);
    assert!(!project.join("pwned").exists() && !project.parent().unwrap().join("pwned").exists());
    let d = s.diff(&sid, b"*");
    assert_eq!(lines(&d["hunks"][0]), ["-star", "+star!"], "`*` is that file, not every file");
    assert_eq!(d["hunks"].as_array().unwrap().len(), 1);
    let d = s.diff(&sid, b"-n\nx\x1b[31m.txt");
    assert_eq!(lines(&d["hunks"][0]), ["+hostile"]);

    // A session in a subdirectory sees what is beneath it, with paths relative to it.
    let v = s.json("changes", &sub_sid, "");
    let paths: Vec<&str> =
        v["files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["inner.txt"]);
    assert_eq!(lines(&s.diff(&sub_sid, b"inner.txt")["hunks"][0]), ["-in", "+in!"]);

    // Before the first commit, against the empty tree.
    let v = s.json("changes", &fresh_sid, "");
    assert_eq!(
        (v["head"].clone(), v["branch"].as_str(), v["ahead"].clone()),
        (Value::Null, Some("main"), Value::Null)
    );
    assert_eq!(
        v["files"],
        json!([{"path": "first.txt", "status": "added", "additions": 2, "deletions": 0, "binary": false}])
    );
    assert_eq!(lines(&s.diff(&fresh_sid, b"first.txt")["hunks"][0]), ["+1", "+2"]);

    // Not a git project.
    assert_eq!(s.json("changes", &plain_sid, ""), json!({"git": false}));
    assert_eq!(s.json("changes/diff", &plain_sid, "path=x.txt"), json!({"git": false}));

    // Confined like the files API.
    let secret = outside.join("secret").display().to_string();
    for q in [
        "path=../x",
        "path=%2e%2e/x",
        "path=sub/../../x",
        "path=/etc/passwd",
        "path=a%00b",
        "path=link/secret",
        "path=link",
    ]
    .into_iter()
    .map(str::to_owned)
    .chain([format!("path={}", enc(secret.as_bytes()))])
    {
        let (status, body) = s.get("changes/diff", &sid, &q);
        assert_eq!(status, 403, "{q}: {body}");
        assert!(!body.contains("OUTSIDE") && !body.contains("root:"));
    }
    for q in ["", "path=", "path=sub", "path=lib.rs&context=x", "path=%ff"] {
        let (status, body) = s.get("changes/diff", &sid, q);
        assert_eq!(status, 400, "{q}: {body}");
    }
    let (status, body) = s.get("changes/diff", &sid, "path=ours.txt");
    assert_eq!(status, 404, "an unchanged file: {body}");
    assert_eq!(s.get("changes", "not_a_session", "").0, 403);
    assert_eq!(s.get("changes", "a%2Fb", "").0, 400);
    let anon = http(s.hub, "GET", &format!("/api/instances/{}/changes?sessionId={sid}", s.id), None);
    assert_eq!(anon.status, 401);
}
