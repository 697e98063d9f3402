//! Session files, read-only, through the bridge's loopback server (and, with the hub, through
//! its relay): listing, whole files, byte and line windows, downloads, and containment.

#![allow(clippy::unwrap_used)] // Setup helpers outside #[test] fns: a failed unwrap is a failed test.

use serde_json::{Value, json};
use std::io::{Read, Write};
use std::path::Path;
use zcode_tests::{Bridge, Home, HttpResponse, TEST_TOKEN, demo_agent, http, initialize, new_session};

struct Setup {
    _home: Home,
    project: tempfile::TempDir,
    outside: tempfile::TempDir,
    bridge: Bridge,
    sid: String,
}

fn setup() -> Setup {
    let home = Home::new();
    let base = tempfile::tempdir().unwrap();
    let project = tempfile::Builder::new().prefix("proj").tempdir_in(base.path()).unwrap();
    let p = project.path();
    std::fs::create_dir_all(p.join("src")).unwrap();
    std::fs::create_dir_all(p.join(".hidden")).unwrap();
    std::fs::write(p.join("README.md"), "# title\nline 2\nline 3\nline 4\n").unwrap();
    std::fs::write(p.join("data.bin"), (0..=255u8).collect::<Vec<_>>()).unwrap();
    std::fs::write(p.join("src/main.rs"), "fn main() {}\n").unwrap();
    std::fs::write(p.join("Zed.txt"), "z").unwrap();
    std::fs::write(p.join("naïve file.txt"), "n").unwrap();
    std::os::unix::fs::symlink("/etc", p.join("link")).unwrap();
    // A sibling that shares the project's name as a prefix.
    let outside = tempfile::Builder::new()
        .prefix(&format!("{}2", p.file_name().unwrap().to_string_lossy()))
        .tempdir_in(base.path())
        .unwrap();
    std::fs::write(outside.path().join("secret"), "OUTSIDE").unwrap();
    std::mem::forget(base);
    let mut bridge = Bridge::start(&home, &demo_agent(0));
    initialize(&mut bridge.editor, json!({}));
    let sid = new_session(&mut bridge.editor, p);
    Setup { _home: home, project, outside, bridge, sid }
}

impl Setup {
    fn get(&self, method: &str, route: &str, query: &str) -> HttpResponse {
        http(
            self.bridge.port,
            method,
            &format!("/fs/{route}?sessionId={}&{query}", self.sid),
            Some(TEST_TOKEN),
        )
    }
}

fn enc(p: &Path) -> String {
    p.display().to_string().replace(' ', "%20")
}

#[test]
fn lists_one_level_dirs_first_in_byte_order() {
    let s = setup();
    let r = s.get("GET", "list", "path=");
    assert_eq!(r.status, 200, "{}", r.text());
    let v: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["root"], std::fs::canonicalize(s.project.path()).unwrap().display().to_string());
    let names: Vec<(&str, &str)> = v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["name"].as_str().unwrap(), e["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(
        names,
        [
            (".hidden", "dir"),
            ("src", "dir"),
            ("README.md", "file"),
            ("Zed.txt", "file"),
            ("data.bin", "file"),
            ("link", "symlink"),
            ("naïve file.txt", "file")
        ]
    );
    let link = v["entries"].as_array().unwrap().iter().find(|e| e["name"] == "link").unwrap();
    assert_eq!(link["size"], 0);
    let data = v["entries"].as_array().unwrap().iter().find(|e| e["name"] == "data.bin").unwrap();
    assert_eq!(data["size"], 256);
    assert!(data["mtime"].as_i64().unwrap() > 1_600_000_000_000);
    assert_eq!(v["truncated"], false);
    let sub = s.get("GET", "list", "path=src");
    let v: Value = serde_json::from_slice(&sub.body).unwrap();
    assert_eq!(v["entries"][0]["name"], "main.rs");

    for i in 0..2001 {
        std::fs::write(s.project.path().join("src").join(format!("f{i:04}")), "").unwrap();
    }
    let v: Value = serde_json::from_slice(&s.get("GET", "list", "path=src").body).unwrap();
    assert_eq!(v["truncated"], true);
    assert_eq!(v["entries"].as_array().unwrap().len(), 2000);
    assert_eq!(s.get("GET", "list", "path=README.md").status, 404, "a file is not a directory");
    assert_eq!(s.get("GET", "list", "path=nope").status, 404);
}

#[test]
fn files_whole_windows_and_downloads() {
    let s = setup();
    let r = s.get("GET", "file", "path=README.md");
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "# title\nline 2\nline 3\nline 4\n");
    assert_eq!(r.header("content-length"), Some("29"));
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    assert!(r.header("content-disposition").unwrap().starts_with("inline"));
    assert_eq!(r.header("content-security-policy"), Some("sandbox"));
    let bin = s.get("GET", "file", "path=data.bin");
    assert_eq!(bin.header("content-type"), Some("application/octet-stream"));
    assert_eq!(bin.body, (0..=255u8).collect::<Vec<_>>());
    let head = s.get("HEAD", "file", "path=data.bin");
    assert_eq!((head.status, head.header("content-length"), head.body.len()), (200, Some("256"), 0));

    let w = s.get("GET", "file", "path=data.bin&offset=10&length=5");
    assert_eq!(w.status, 206);
    assert_eq!(w.body, vec![10, 11, 12, 13, 14]);
    assert_eq!(w.header("content-range"), Some("bytes 10-14/256"));
    let tail = s.get("GET", "file", "path=data.bin&offset=250");
    assert_eq!((tail.status, tail.body.len()), (206, 6));
    assert_eq!(s.get("GET", "file", "path=data.bin&offset=256").status, 416);

    let lines = s.get("GET", "file", "path=README.md&line=2&limit=2");
    assert_eq!(lines.status, 200);
    assert_eq!(lines.text(), "line 2\nline 3\n");
    assert_eq!(lines.header("x-zcode-first-line"), Some("2"));
    assert_eq!(lines.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(s.get("GET", "file", "path=README.md&line=3").text(), "line 3\nline 4\n");

    let dl = s.get("GET", "file", &format!("path={}&dl=1", "na%C3%AFve%20file.txt"));
    assert_eq!(dl.status, 200, "{}", dl.text());
    assert_eq!(
        dl.header("content-disposition"),
        Some("attachment; filename=\"na_ve file.txt\"; filename*=UTF-8''na%C3%AFve%20file.txt")
    );
    let abs = s.get("GET", "file", &format!("path={}/src/main.rs", enc(s.project.path())));
    assert_eq!((abs.status, abs.text().as_str()), (200, "fn main() {}\n"));
}

#[test]
fn a_line_window_past_the_cap_is_served_capped() {
    // The contract caps a line window at 5000 lines: a larger `limit` is clamped, not a 400.
    let s = setup();
    let lines: String = (1..=6000).map(|n| format!("{n}\n")).collect();
    std::fs::write(s.project.path().join("big.log"), lines).unwrap();
    for limit in ["5001", "99999", "18446744073709551615"] {
        let r = s.get("GET", "file", &format!("path=big.log&line=2&limit={limit}"));
        assert_eq!(r.status, 200, "limit={limit}: {}", r.text());
        let text = r.text();
        let served: Vec<&str> = text.lines().collect();
        assert_eq!((served.len(), served[0], served[4999]), (5000, "2", "5001"), "limit={limit}");
    }
    assert_eq!(s.get("GET", "file", "path=big.log&limit=3").text(), "1\n2\n3\n", "a window within the cap");
}

#[test]
fn bad_parameters_are_400_and_escapes_are_403() {
    let s = setup();
    for q in [
        "path=README.md&offset=abc",
        "path=README.md&length=-5",
        "path=README.md&limit=many",
        "path=README.md&offset=1&line=2",
        "path=README.md&line=0",
        "path=%zz",
        "path=src",
    ] {
        assert_eq!(s.get("GET", "file", q).status, 400, "{q}");
    }
    let sibling = s.outside.path().join("secret");
    for q in [
        "path=../x".to_owned(),
        "path=%2e%2e/x".to_owned(),
        "path=src/../../x".to_owned(),
        "path=/etc/passwd".to_owned(),
        "path=a%00b".to_owned(),
        format!("path={}", enc(&sibling)),
        "path=link/passwd".to_owned(),
        "path=link".to_owned(),
    ] {
        let r = s.get("GET", "file", &q);
        assert_eq!(r.status, 403, "{q}: {}", r.text());
        assert!(!r.text().contains("root:") && !r.text().contains("OUTSIDE"));
    }
    assert_eq!(s.get("GET", "list", "path=link").status, 403);
    assert_eq!(s.get("GET", "list", "path=..").status, 403);
    assert_eq!(s.get("GET", "file", "path=nope.txt").status, 404);
    let unknown =
        http(s.bridge.port, "GET", "/fs/file?sessionId=not_a_session&path=README.md", Some(TEST_TOKEN));
    assert_eq!(unknown.status, 403);
    let bad_id = http(s.bridge.port, "GET", "/fs/file?sessionId=a%2Fb&path=README.md", Some(TEST_TOKEN));
    assert_eq!(bad_id.status, 400);
    assert_eq!(
        http(s.bridge.port, "GET", "/fs/list?path=", Some(TEST_TOKEN)).status,
        400,
        "sessionId required"
    );
    assert_eq!(http(s.bridge.port, "GET", &format!("/fs/list?sessionId={}", s.sid), None).status, 401);
}

#[test]
fn a_directory_swapped_for_an_outside_symlink_never_leaks_a_byte() {
    let s = setup();
    let p = s.project.path().to_owned();
    std::fs::create_dir(p.join("d")).unwrap();
    std::fs::write(p.join("d/f"), "inside").unwrap();
    std::fs::create_dir(s.outside.path().join("d")).unwrap();
    std::fs::write(s.outside.path().join("d/f"), "OUTSIDE").unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (p, outside, stop) = (p.clone(), s.outside.path().join("d"), stop.clone());
        std::thread::spawn(move || {
            let mut swaps = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::fs::rename(p.join("d"), p.join("d.real")).unwrap();
                std::os::unix::fs::symlink(&outside, p.join("d")).unwrap();
                std::fs::remove_file(p.join("d")).unwrap();
                std::fs::rename(p.join("d.real"), p.join("d")).unwrap();
                swaps += 1;
            }
            swaps
        })
    };
    let mut served = 0;
    for _ in 0..1500 {
        let r = s.get("GET", "file", "path=d/f");
        assert!(!r.text().contains("OUTSIDE"), "served an outside byte");
        if r.status == 200 {
            assert_eq!(r.text(), "inside");
            served += 1;
        } else {
            assert!([403, 404].contains(&r.status), "{} {}", r.status, r.text());
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    assert!(swaps > 1000, "only {swaps} swaps: the race was not exercised");
    assert!(served > 0, "nothing was ever served");
}

#[test]
fn a_line_window_of_a_256_mib_sparse_file_streams_in_bounded_memory() {
    let s = setup();
    let big = s.project.path().join("huge.log");
    let mut f = std::fs::File::create(&big).unwrap();
    f.write_all(b"first\nsecond\n").unwrap();
    // Twice the memory bound below: a bridge that held the line whole could not stay under it.
    f.set_len(1 << 28).unwrap();
    let mut f = std::fs::OpenOptions::new().append(true).open(&big).unwrap();
    f.write_all(b"\nlast\n").unwrap();

    let r = s.get("GET", "file", "path=huge.log&line=1&limit=2");
    assert_eq!((r.status, r.text().as_str()), (200, "first\nsecond\n"));

    // Line 3 is 256 MiB of NULs; stream it through and watch the bridge's memory.
    let mut sock = std::net::TcpStream::connect(("127.0.0.1", s.bridge.port)).unwrap();
    write!(
        sock,
        "GET /fs/file?sessionId={}&path=huge.log&line=3&limit=2 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TEST_TOKEN}\r\nConnection: close\r\n\r\n",
        s.sid
    )
    .unwrap();
    let pid = s.bridge.editor.pid();
    let mut buf = vec![0u8; 1 << 20];
    let (mut total, mut peak, mut tail) = (0usize, 0u64, Vec::new());
    loop {
        let n = sock.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        total += n;
        tail.extend_from_slice(&buf[..n]);
        if tail.len() > 64 {
            tail.drain(..tail.len() - 64);
        }
        if total % (16 << 20) < n {
            peak = peak.max(zcode_tests::rss_kib(pid));
        }
    }
    assert!(total > 1 << 28, "only {total} bytes came");
    // Chunked: the window ends with line 4, then the last chunk.
    assert!(tail.ends_with(b"last\n\r\n0\r\n\r\n"), "{:?}", String::from_utf8_lossy(&tail));
    assert!(peak < 128 * 1024, "the bridge grew to {peak} KiB while streaming");
}

#[test]
fn files_through_the_hub_relay() {
    use zcode_tests::hub::{Hub, listed, wait_instances};
    let home = Home::new();
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("notes.txt"), "one\ntwo\nthree\n").unwrap();
    let hub = Hub::start(&home, &[]);
    let mut b = zcode_tests::Bridge::start_env(&home, &demo_agent(0), &[("ZCODE_ACP_HEARTBEAT_MS", "200")]);
    let id = b.id();
    wait_instances(hub.port, "the bridge", |l| listed(l, &id));
    initialize(&mut b.editor, json!({}));
    let sid = new_session(&mut b.editor, project.path());
    let base = format!("/api/instances/{id}/fs");
    let r = http(
        hub.port,
        "GET",
        &format!("{base}/file?sessionId={sid}&path=notes.txt&line=2&limit=1"),
        Some(TEST_TOKEN),
    );
    assert_eq!((r.status, r.text().as_str()), (200, "two\n"));
    assert_eq!(r.header("x-zcode-first-line"), Some("2"));
    let r = http(
        hub.port,
        "GET",
        &format!("{base}/file?sessionId={sid}&path=notes.txt&offset=4&length=3"),
        Some(TEST_TOKEN),
    );
    assert_eq!((r.status, r.text().as_str(), r.header("content-range")), (206, "two", Some("bytes 4-6/14")));
    let r = http(hub.port, "HEAD", &format!("{base}/file?sessionId={sid}&path=notes.txt"), Some(TEST_TOKEN));
    assert_eq!((r.status, r.header("content-length")), (200, Some("14")));
    let l = http(hub.port, "GET", &format!("{base}/list?sessionId={sid}&path="), Some(TEST_TOKEN));
    assert_eq!(l.status, 200);
    assert!(l.text().contains("notes.txt"));
    for q in ["path=../x", "path=%2e%2e/x", "path=/etc/passwd", "path=a%00b"] {
        let r = http(hub.port, "GET", &format!("{base}/file?sessionId={sid}&{q}"), Some(TEST_TOKEN));
        assert_eq!(r.status, 403, "{q} through the hub");
    }
    assert_eq!(
        http(
            hub.port,
            "GET",
            &format!("{base}/file?sessionId={sid}&path=notes.txt&offset=99"),
            Some(TEST_TOKEN)
        )
        .status,
        416
    );
    assert_eq!(
        http(
            hub.port,
            "GET",
            &format!("{base}/file?sessionId={sid}&path=notes.txt&offset=x"),
            Some(TEST_TOKEN)
        )
        .status,
        400
    );
    assert_eq!(
        http(hub.port, "GET", &format!("{base}/file?sessionId={sid}&path=nope"), Some(TEST_TOKEN)).status,
        404
    );
    assert_eq!(
        http(hub.port, "GET", &format!("{base}/file?sessionId={sid}&path=notes.txt"), None).status,
        401
    );
    assert_eq!(
        http(
            hub.port,
            "GET",
            &format!("/api/instances/424242/fs/file?sessionId={sid}&path=notes.txt"),
            Some(TEST_TOKEN)
        )
        .status,
        404
    );
    // The bridge goes away: its port is dead → 502 (until the registration expires).
    let port = b.port;
    let pid = b.editor.pid();
    zcode_tests::kill9(pid);
    let deadline = std::time::Instant::now() + zcode_tests::WAIT;
    loop {
        let r =
            http(hub.port, "GET", &format!("{base}/file?sessionId={sid}&path=notes.txt"), Some(TEST_TOKEN));
        if r.status == 502 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "still {} after the bridge on {port} died", r.status);
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
