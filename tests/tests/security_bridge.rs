//! The bridge's loopback server under local attack (issue 12): a ping flood from a client that
//! never reads (direct and through the hub), idle sockets past the connection cap, a partial
//! request left hanging, a scanned port range someone else holds, invalid UTF-8 in a text
//! frame, and the port file of a bridge killed with SIGKILL.

use serde_json::json;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use zcode_tests::hub::{Hub, listed, wait_for_hub, wait_instances};
use zcode_tests::{
    Bridge, Home, Peer, TEST_TOKEN, WAIT, alive, bin, demo_agent, initialize, kill9, new_session, prompt,
    rss_kib,
};

/// The flood's bounds: it stops itself after this many pings or this long.
const FLOOD_PINGS: u64 = 3_000_000;
const FLOOD_FOR: Duration = Duration::from_secs(60);

/// Opens a WebSocket to `port`'s `path` by hand (with the token), returning the raw socket.
fn raw_ws(port: u16, path: &str) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
         Authorization: Bearer {TEST_TOKEN}\r\n\r\n"
    )
    .expect("write upgrade");
    s.set_read_timeout(Some(WAIT)).expect("timeout");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).expect("read the upgrade answer"), 1, "closed during the upgrade");
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 101"), "no upgrade: {head}");
    s
}

/// One masked client frame.
fn client_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    assert!(payload.len() < 126);
    let key = [0x37, 0xfa, 0x21, 0x3d];
    let mut f = vec![0x80 | opcode, 0x80 | payload.len() as u8];
    f.extend_from_slice(&key);
    f.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
    f
}

/// The close code of the first close frame `s` receives (frames before it are skipped).
fn close_code(s: &mut TcpStream) -> Option<u16> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        // Parse what is there: server frames are unmasked; lengths 126 and 127 are extended.
        while buf.len() >= 2 {
            let (op, len7) = (buf[0] & 0x0f, (buf[1] & 0x7f) as usize);
            let (head, len) = match len7 {
                126 if buf.len() >= 4 => (4, u16::from_be_bytes([buf[2], buf[3]]) as usize),
                127 if buf.len() >= 10 => {
                    (10, u64::from_be_bytes(buf[2..10].try_into().expect("8 bytes")) as usize)
                }
                126 | 127 => break,
                n => (2, n),
            };
            if buf.len() < head + len {
                break;
            }
            if op == 0x8 {
                return (len >= 2).then(|| u16::from_be_bytes([buf[head], buf[head + 1]]));
            }
            buf.drain(..head + len);
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => panic!("the connection ended without a close frame"),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Floods `s` with 125-byte pings, never reading, until the peer drops the connection or the
/// flood's bounds are reached. Returns whether it was dropped. The largest RSS growth (KiB) of
/// each of `watched` (pids) meanwhile is printed: a figure of the machine's (its allocator,
/// its socket buffers), measured in docs/PERFORMANCE.md, not asserted.
fn ping_flood(s: &mut TcpStream, watched: &[u32]) -> bool {
    let base: Vec<u64> = watched.iter().map(|p| rss_kib(*p)).collect();
    let mut grew = vec![0u64; watched.len()];
    let one = client_frame(0x9, &[b'p'; 125]);
    let batch: Vec<u8> = one.iter().copied().cycle().take(one.len() * 512).collect();
    s.set_write_timeout(Some(Duration::from_millis(100))).expect("write timeout");
    let (mut sent, mut at) = (0u64, 0usize);
    let started = Instant::now();
    let mut sampled = Instant::now();
    let dropped = loop {
        if sent >= FLOOD_PINGS || started.elapsed() > FLOOD_FOR {
            break false;
        }
        match s.write(&batch[at..]) {
            Ok(0) => break true,
            Ok(n) => {
                at += n;
                if at == batch.len() {
                    at = 0;
                    sent += 512;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break true,
        }
        if sampled.elapsed() > Duration::from_millis(20) {
            sampled = Instant::now();
            for (i, pid) in watched.iter().enumerate() {
                grew[i] = grew[i].max(rss_kib(*pid).saturating_sub(base[i]));
            }
        }
    };
    for (i, pid) in watched.iter().enumerate() {
        grew[i] = grew[i].max(rss_kib(*pid).saturating_sub(base[i]));
    }
    eprintln!(
        "ping flood: {sent} pings sent in {:?}, dropped: {dropped}, growth KiB: {grew:?}",
        started.elapsed()
    );
    dropped
}

/// The editor still works: a session, a turn.
fn editor_still_works(b: &mut Bridge, home: &Home) {
    let sid = new_session(&mut b.editor, home.path());
    let (r, _) = b.editor.call("session/prompt", prompt(&sid, "still here"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
}

#[test]
fn a_ping_flood_that_never_reads_is_bounded_and_dropped() {
    let home = Home::new();
    // The stall limit is the ping period: a client whose socket takes nothing that long goes.
    let mut b = Bridge::start_env(&home, &demo_agent(0), &[("ZCODE_ACP_PING_MS", "1000")]);
    initialize(&mut b.editor, json!({}));
    let mut flood = raw_ws(b.port, "/acp");
    assert!(
        ping_flood(&mut flood, &[b.editor.pid()]),
        "the bridge never dropped a client that sends pings and never reads"
    );

    editor_still_works(&mut b, &home);
    let mut other = b.remote();
    initialize(&mut other, json!({}));
}

#[test]
fn a_ping_flood_through_the_hub_is_dropped_and_the_hub_and_the_bridge_serve_on() {
    let home = Home::new();
    let hub = Hub::start(&home, &[]);
    let env = [("ZCODE_ACP_HEARTBEAT_MS", "200"), ("ZCODE_ACP_PING_MS", "1000")];
    let mut b = Bridge::start_env(&home, &demo_agent(0), &env);
    let id = b.id();
    wait_instances(hub.port, "the bridge to register", |l| listed(l, &id));
    initialize(&mut b.editor, json!({}));

    // The hub relays the pings; the bridge answers; the hub's own frames (its pings, a close)
    // are never stacked, and a leg that does not take bytes stops its partner being read.
    let mut flood = raw_ws(hub.port, &format!("/acp?instance={id}"));
    assert!(
        ping_flood(&mut flood, &[hub.pid(), b.editor.pid()]),
        "a client flooding pings through the hub was never dropped"
    );

    editor_still_works(&mut b, &home);
    let mut phone = hub.connect(&id).expect("the relay still accepts");
    initialize(&mut phone, json!({}));
}

/// A `zcode-acp bridge` over the demo agent (the test is its editor) whose open-file limits
/// are set by `ulimit` first (`limits`: e.g. `-Sn 256`), with `env` on top.
fn limited_bridge(home: &Home, limits: &[&str], env: &[(&str, &str)]) -> Bridge {
    let mut script: Vec<String> = limits.iter().map(|l| format!("ulimit {l} && ")).collect();
    script.push("exec \"$0\" \"$@\"".into());
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c").arg(script.concat()).arg(bin()).args(["bridge", "--"]).args(demo_agent(0));
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("ZCODE_ACP_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("ZCODE_ACP_HOME", home.path())
        .env("ZCODE_ACP_HUB_PORT", "0")
        .env("ZCODE_ACP_HUB_IDLE_MS", "30000")
        .env("ZCODE_ACP_REMOTE_PORT", "0")
        .env("ZCODE_ACP_REMOTE_TOKEN", TEST_TOKEN);
    for (k, v) in env {
        cmd.env(k, v);
    }
    Bridge::spawn(home, cmd, Stdio::inherit())
}

/// (soft, hard) "Max open files" of `pid`.
fn open_file_limits(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("/proc limits");
    let line = limits.lines().find(|l| l.starts_with("Max open files")).expect("a Max open files line");
    let f: Vec<&str> = line.split_whitespace().collect();
    (f[3].to_owned(), f[4].to_owned())
}

#[test]
fn the_bridge_raises_its_open_file_soft_limit_to_the_hard_one() {
    let home = Home::new();
    let (_, hard) = open_file_limits(std::process::id());
    assert_ne!(hard, "256", "this machine's hard limit is 256: the test cannot tell a raise");
    let b = limited_bridge(&home, &["-Sn 256"], &[]);
    let (soft, hard) = open_file_limits(b.editor.pid());
    assert_eq!(soft, hard, "the bridge kept a soft open-file limit of {soft} (hard {hard})");
}

/// `GET /status` with the token, waiting up to [`WAIT`] for the whole answer: its status line.
fn status_line(port: u16) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(WAIT)).expect("timeout");
    write!(
        s,
        "GET /status HTTP/1.1\r\nHost: b\r\nAuthorization: Bearer {TEST_TOKEN}\r\nConnection: close\r\n\r\n"
    )
    .expect("write");
    let mut raw = Vec::new();
    match s.read_to_end(&mut raw) {
        Ok(_) => String::from_utf8_lossy(&raw).lines().next().unwrap_or("").to_owned(),
        Err(e) => panic!("no answer to /status within {WAIT:?}: {e}"),
    }
}

#[test]
fn idle_sockets_past_the_cap_do_not_keep_a_legitimate_request_out() {
    // Enough descriptors here for the sockets we hold.
    zcode_shared::rlimit::raise_open_file_limit();
    let home = Home::new();
    // A bridge that can open 1024 files: without a cap (and eviction) 1100 idle sockets take
    // them all. Headers may take a minute, so only eviction can make room within WAIT.
    let b = limited_bridge(&home, &["-Sn 1024", "-Hn 1024"], &[("ZCODE_ACP_HEADER_TIMEOUT_MS", "60000")]);
    let idle: Vec<TcpStream> =
        (0..1100).map(|_| TcpStream::connect(("127.0.0.1", b.port)).expect("idle connect")).collect();
    let line = status_line(b.port);
    assert!(line.starts_with("HTTP/1.1 200"), "{line}");
    // And a WebSocket client with the token gets in too.
    let mut remote = b.remote();
    initialize(&mut remote, json!({}));
    drop(idle);
}

#[test]
fn a_partial_request_is_cut_at_the_header_deadline() {
    let home = Home::new();
    let b = Bridge::start_env(&home, &demo_agent(0), &[("ZCODE_ACP_HEADER_TIMEOUT_MS", "300")]);
    let mut s = TcpStream::connect(("127.0.0.1", b.port)).expect("connect");
    s.write_all(b"GET /sta").expect("write a partial request line");
    s.set_read_timeout(Some(WAIT)).expect("timeout");
    let mut rest = Vec::new();
    match s.read_to_end(&mut rest) {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        Err(e) => panic!("a partial request was still open after {WAIT:?}: {e}"),
    }
    assert!(status_line(b.port).starts_with("HTTP/1.1 200"));
}

/// 100 consecutive loopback ports held by the test, from a base under the ephemeral range.
fn hold_a_port_range() -> (u16, Vec<TcpListener>) {
    let mut base = 20_000 + (std::process::id() % 100) as u16 * 100;
    for _ in 0..50 {
        let held: Vec<TcpListener> =
            (base..base + 100).map_while(|p| TcpListener::bind(("127.0.0.1", p)).ok()).collect();
        if held.len() == 100 {
            return (base, held);
        }
        base = if base >= 29_800 { 20_000 } else { base + 100 };
    }
    panic!("no 100 free consecutive ports found from 20000 to 30000");
}

#[test]
fn a_bridge_whose_port_range_is_taken_listens_on_an_os_picked_port() {
    let home = Home::new();
    let (base, held) = hold_a_port_range();
    let base_s = base.to_string();
    let env = [("ZCODE_ACP_REMOTE_PORT", base_s.as_str()), ("ZCODE_ACP_HEARTBEAT_MS", "200")];
    let mut b = Bridge::start_env(&home, &demo_agent(0), &env);
    assert!(!(base..base + 100).contains(&b.port), "port file names {} in the held range", b.port);
    let line = status_line(b.port);
    assert!(line.starts_with("HTTP/1.1 200"), "the port file's port {} does not answer: {line}", b.port);
    // The registration carries the same port (the hub is the one the bridge started).
    let (id, port) = (b.id(), b.port);
    wait_instances(wait_for_hub(&home, None), "the bridge registered with its real port", |l| {
        l.iter().any(|i| i["id"] == id.as_str() && i["port"] == port)
    });
    initialize(&mut b.editor, json!({}));
    editor_still_works(&mut b, &home);
    drop(held);
}

#[test]
fn a_text_frame_that_is_not_utf8_is_closed_with_1007() {
    let home = Home::new();
    let mut b = Bridge::start(&home, &demo_agent(0));
    let mut s = raw_ws(b.port, "/acp");
    s.write_all(&client_frame(0x1, &[b'{', 0xff, 0xfe, b'}'])).expect("write");
    assert_eq!(close_code(&mut s), Some(1007));
    initialize(&mut b.editor, json!({}));
    let mut ok = Peer::connect_ws(b.port, "/acp", Some(TEST_TOKEN)).expect("connects");
    initialize(&mut ok, json!({}));
}

#[test]
fn stale_port_files_of_dead_bridges_are_removed_at_start_and_live_ones_kept() {
    let home = Home::new();
    let run = home.path().join("run");
    std::fs::create_dir_all(&run).expect("run dir");
    let mut gone = Command::new("true").spawn().expect("spawn true");
    let dead = gone.id();
    gone.wait().expect("reaped");
    let live = std::process::id();
    let names = [
        format!("bridge-{dead}.port"),
        format!("bridge-{live}.port"),
        format!("bridge-{dead}.port.bak"),
        "bridge-x.port".to_owned(),
        "other.port".to_owned(),
    ];
    for n in &names {
        std::fs::write(run.join(n), "9\n").expect("write");
    }
    // And a real bridge killed with SIGKILL (its editor has not reaped it yet).
    let killed = Bridge::start(&home, &demo_agent(0));
    let killed_file = run.join(format!("bridge-{}.port", killed.editor.pid()));
    kill9(killed.editor.pid());
    let deadline = Instant::now() + WAIT;
    while alive(killed.editor.pid()) {
        assert!(Instant::now() < deadline, "the killed bridge is still alive");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(killed_file.exists(), "SIGKILL leaves the port file behind");

    let _b = Bridge::start(&home, &demo_agent(0));
    assert!(!killed_file.exists(), "the port file of the SIGKILLed bridge is still there");
    assert!(!run.join(&names[0]).exists(), "the port file of dead pid {dead} is still there");
    for n in &names[1..] {
        assert!(run.join(n).exists(), "{n} was removed");
    }
}

/// One token check for both servers: the `Bearer` scheme is matched in any case (RFC 9110
/// §11.1), by the bridge's loopback routes as by the hub's.
#[test]
fn the_bridge_takes_a_lowercase_bearer_scheme_like_the_hub() {
    let home = Home::new();
    let b = Bridge::start(&home, &demo_agent(0));
    let hub = wait_for_hub(&home, None);
    let lower = format!("bearer {TEST_TOKEN}");
    for (who, port, path) in [("hub", hub, "/api/instances"), ("bridge", b.port, "/status")] {
        for scheme in [lower.as_str(), &format!("BEARER {TEST_TOKEN}")] {
            let r = zcode_tests::hub::http(port, "GET", path, &[("authorization", scheme)], b"");
            assert_eq!(r.status, 200, "the {who}'s {path} with `authorization: {scheme}`: {}", r.text());
        }
        let wrong = zcode_tests::hub::http(port, "GET", path, &[("authorization", "bearer wrong")], b"");
        assert_eq!(wrong.status, 401, "the {who} with a wrong token");
    }
}
