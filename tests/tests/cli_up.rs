//! `zcode-acp up` as a newcomer runs it: an agent after `--` or by name, the loopback note,
//! `--tunnel` with stand-ins for `cloudflared` and `tailscale` that print what the real tools
//! print, a missing tunnel tool, and a quiet Ctrl-C.

#![allow(clippy::unwrap_used)] // Setup helpers outside #[test] fns: a failed unwrap is a failed test.

use serde_json::json;
use std::io::BufRead;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};
use zcode_tests::hub::{hub_pid, signal, wait_gone};
use zcode_tests::{Home, Peer, WAIT, alive, bin};

/// A running `zcode-acp up`: its stdout lines as they come, its stderr in a file.
struct Up {
    child: Child,
    lines: Receiver<String>,
    stderr: PathBuf,
    home_path: PathBuf,
}

impl Up {
    /// Starts `up {args}` in a fresh project directory of `home`, with `path` as `PATH` when given.
    fn start(home: &Home, args: &[&str], path: Option<&str>) -> Up {
        Up::start_with(home, None, args, path, &[])
    }

    /// [`Up::start`] from the binary `exe` (default: the suite's), with `env` on top.
    fn start_with(
        home: &Home,
        exe: Option<&Path>,
        args: &[&str],
        path: Option<&str>,
        env: &[(&str, &str)],
    ) -> Up {
        let project = home.path().join("project");
        std::fs::create_dir_all(&project).unwrap();
        let stderr = home.path().join(format!("up-{}.err", args.len()));
        let mut all = vec!["up"];
        all.extend_from_slice(args);
        let mut cmd = home.command(&all);
        if let Some(exe) = exe {
            let mut other = std::process::Command::new(exe);
            other.args(cmd.get_args());
            for (k, v) in cmd.get_envs() {
                match v {
                    Some(v) => other.env(k, v),
                    None => other.env_remove(k),
                };
            }
            cmd = other;
        }
        cmd.env("ZCODE_ACP_REMOTE_PORT", "0").current_dir(&project).envs(env.iter().copied());
        if let Some(p) = path {
            cmd.env("PATH", p);
        }
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(std::fs::File::create(&stderr).unwrap());
        // A copy of the binary may still be "busy" for a moment (see `spawn_copy`).
        let mut child = zcode_tests::hub::spawn_copy(&mut cmd);
        let out = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Up { child, lines, stderr, home_path: home.path().to_owned() }
    }

    /// The first stdout line whose trimmed text starts with `prefix`.
    fn line(&self, prefix: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l.trim_start().starts_with(prefix) => return l,
                Ok(_) => {}
                Err(_) => panic!("no `{prefix}` line from up; stderr:\n{}", self.stderr()),
            }
        }
    }

    /// The stdout lines up to and including the first whose trimmed text starts with `prefix`.
    fn lines_until(&self, prefix: &str) -> Vec<String> {
        let deadline = Instant::now() + WAIT;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    let done = l.trim_start().starts_with(prefix);
                    seen.push(l);
                    if done {
                        return seen;
                    }
                }
                Err(_) => panic!("no `{prefix}` line from up after {seen:?}; stderr:\n{}", self.stderr()),
            }
        }
    }

    /// The pairing URL it printed.
    fn url(&self) -> String {
        self.line("open:").split_whitespace().nth(1).expect("a URL").to_owned()
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// SIGINT (the terminal's Ctrl-C) and the exit status.
    fn interrupt(&mut self) -> std::process::ExitStatus {
        signal(self.child.id(), "INT");
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                assert!(s.success(), "up ended with {s}; stderr:\n{}", self.stderr());
                return s;
            }
            assert!(Instant::now() < deadline, "up did not exit on SIGINT; stderr:\n{}", self.stderr());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let pid = std::fs::read_to_string(self.home_path.join("run/hub.pid")).unwrap_or_default();
        if let Ok(pid) = pid.trim().parse::<u32>() {
            zcode_tests::kill_in_home(pid, &self.home_path, false);
        }
    }
}

/// The credential a phone gets for the one-time code in `up`'s pairing URL (`…/#pair=CODE`),
/// redeemed at the home's hub as the web client does.
fn token_of(home: &Home, url: &str) -> String {
    let port = zcode_tests::hub::hub_port(home).expect("the hub's port file");
    zcode_tests::hub::redeem_pairing_url(port, url)
}

/// A shell script agent that leaves `marker` behind, then runs the demo agent.
fn marking_agent(marker: &Path) -> Vec<String> {
    let script = format!("touch '{}'; exec '{}' demo-agent --delay-ms 1", marker.display(), bin().display());
    vec!["sh".into(), "-c".into(), script]
}

/// Connects to the `up` bridge through the hub and initializes, so that the agent starts.
fn start_the_agent(home: &Home, url: &str) -> Peer {
    let token = token_of(home, url);
    let port = zcode_tests::hub::hub_port(home).expect("the hub's port file");
    let deadline = Instant::now() + WAIT;
    let id = loop {
        let (_, body) = zcode_tests::http_get(port, "/api/instances", Some(&token));
        let list: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        if let Some(i) = list.as_array().into_iter().flatten().find(|i| i["origin"] == "serve") {
            break i["id"].as_str().unwrap().to_owned();
        }
        assert!(Instant::now() < deadline, "the up bridge never registered: {body}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut p = Peer::connect_ws(port, &format!("/acp?instance={id}"), Some(&token)).expect("relay");
    zcode_tests::initialize(&mut p, json!({}));
    p
}

fn wait_for_file(path: &Path) {
    let deadline = Instant::now() + WAIT;
    while !path.exists() {
        assert!(Instant::now() < deadline, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn up_runs_the_agent_given_after_double_dash() {
    let home = Home::new();
    let marker = home.path().join("agent-ran");
    let agent = marking_agent(&marker);
    let mut args = vec!["--"];
    args.extend(agent.iter().map(String::as_str));
    let mut up = Up::start(&home, &args, None);
    let url = up.url();
    assert!(!up.stderr().contains("no agent given"), "{}", up.stderr());
    let _client = start_the_agent(&home, &url);
    wait_for_file(&marker);
    assert!(up.interrupt().success());
}

#[test]
fn up_runs_a_named_agent_from_the_config() {
    let home = Home::new();
    let marker = home.path().join("named-ran");
    let agent = marking_agent(&marker);
    let config = json!({"agents": {"marked": {"command": agent[0], "args": agent[1..]}}});
    std::fs::write(home.path().join("config.json"), config.to_string()).unwrap();
    let mut up = Up::start(&home, &["--agent", "marked"], None);
    let url = up.url();
    let _client = start_the_agent(&home, &url);
    wait_for_file(&marker);
    assert!(up.interrupt().success());

    // An unknown name is refused with the names there are.
    let (code, err) = zcode_tests::hub::run_cli(&home, &["up", "--agent", "nope"], &[]);
    assert_ne!(code, 0);
    assert!(err.contains("no agent named \"nope\"") && err.contains("marked"), "{err}");
}

#[test]
fn a_loopback_pairing_url_says_that_a_phone_needs_a_tunnel() {
    let home = Home::new();
    let up = Up::start(&home, &[], None);
    let url = up.url();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let before = up.lines_until("note:");
    let note = before.last().unwrap();
    assert!(note.contains("--tunnel cloudflare") && note.contains("--public-url https://"), "{note}");
    // Said before the QR code, where a person reads it before scanning.
    assert!(
        !before.iter().any(|l| l.contains('▀') || l.contains('▄')),
        "the note comes after the QR code: {before:?}"
    );
    let after = up.lines_until("hub:");
    assert!(after.iter().any(|l| l.contains('▀') || l.contains('▄')), "no QR code after the note: {after:?}");
}

/// The processes whose parent is `pid` and which are zombies (exited, never waited for).
fn zombie_children(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(child) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else { continue };
        let mut f = stat.rsplit(')').next().unwrap_or("").split_whitespace();
        let (state, ppid) = (f.next(), f.next().and_then(|p| p.parse::<u32>().ok()));
        if state == Some("Z") && ppid == Some(pid) {
            found.push(child);
        }
    }
    found
}

#[test]
fn up_reaps_the_hub_it_started_so_stop_leaves_no_zombie() {
    let home = Home::new();
    let up = Up::start(&home, &[], None);
    up.url();
    let hub = hub_pid(&home).expect("the hub's pid");
    let up_pid = up.child.id();
    assert_ne!(
        zcode_tests::hub::proc_stat_field(hub, 4),
        Some(u64::from(up_pid)),
        "the hub is a child of up, which never waits for it"
    );
    let out = home.command(&["stop"]).stdin(Stdio::null()).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    // `up`'s own bridge stays (Ctrl-C stops it), and stop says it will start a new hub.
    let line =
        text.lines().find(|l| l.contains(&format!("pid {up_pid}"))).unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("up"), "{line}");
    zcode_tests::hub::wait_until("no zombie child of up", || zombie_children(up_pid).is_empty());
}

#[test]
fn ctrl_c_on_up_stops_the_agent_without_a_warning() {
    let home = Home::new();
    let marker = home.path().join("agent-ran");
    let agent = marking_agent(&marker);
    let mut args = vec!["--"];
    args.extend(agent.iter().map(String::as_str));
    let mut up = Up::start(&home, &args, None);
    let url = up.url();
    let _client = start_the_agent(&home, &url);
    wait_for_file(&marker);
    assert!(up.interrupt().success());
    let err = up.stderr();
    assert!(err.contains("agent started"), "the agent never ran:\n{err}");
    assert!(!err.contains("WARN"), "Ctrl-C warned:\n{err}");
}

/// A directory with a stand-in `name` that records its pid and arguments in `dir`, prints
/// `stdout` and `stderr` as the real tool does, then stays up like it.
fn stand_in(dir: &Path, name: &str, stdout: &str, stderr: &str) {
    let script = format!(
        "#!/bin/sh\necho $$ > '{d}/{name}.pid.tmp'\nmv '{d}/{name}.pid.tmp' '{d}/{name}.pid'\n\
         echo \"$@\" > '{d}/{name}.args'\nenv > '{d}/{name}.env'\ncat <<'EOF'\n{stdout}\nEOF\ncat >&2 <<'EOF'\n{stderr}\nEOF\nexec sleep 1000\n",
        d = dir.display()
    );
    let path = dir.join(name);
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// `PATH` with `dir` first.
fn path_with(dir: &Path) -> String {
    format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default())
}

/// What `cloudflared tunnel --url …` prints on stderr for a quick tunnel.
const CLOUDFLARED_STDERR: &str = "\
2024-05-01T10:00:00Z INF Thank you for trying Cloudflare Tunnel. Doing so, without a Cloudflare account, is a quick way to experiment and try it out. However, be aware that these account-less Tunnels have no uptime guarantee. If you intend to use Tunnels in production you should use a pre-created named tunnel by following: https://developers.cloudflare.com/cloudflare-one/connections/connect-apps
2024-05-01T10:00:00Z INF Requesting new quick Tunnel on trycloudflare.com...
2024-05-01T10:00:02Z INF +--------------------------------------------------------------------------------------------+
2024-05-01T10:00:02Z INF |  Your quick Tunnel has been created! Visit it at (it may take some time to be reachable):  |
2024-05-01T10:00:02Z INF |  https://four-dashed-word-url.trycloudflare.com                                            |
2024-05-01T10:00:02Z INF +--------------------------------------------------------------------------------------------+
2024-05-01T10:00:02Z INF Version 2024.4.1
2024-05-01T10:00:03Z INF Registered tunnel connection connIndex=0 location=ams01 protocol=quic";

/// What `tailscale serve <target>` prints (on stdout) in the foreground.
const TAILSCALE_STDOUT: &str = "\
Available within your tailnet:

https://laptop.tail1234.ts.net/
|-- proxy http://127.0.0.1:8377

Press Ctrl+C to exit.";

fn tunnel_case(tool: &str, flag: &str, stdout: &str, stderr: &str, public: &str, args_start: &str) {
    let home = Home::new();
    let tools = tempfile::tempdir().unwrap();
    stand_in(tools.path(), tool, stdout, stderr);
    let mut up = Up::start(&home, &["--tunnel", flag], Some(&path_with(tools.path())));
    let url = up.url();
    assert!(url.starts_with(&format!("{public}/#pair=")), "{url}\n{}", up.stderr());
    let port = zcode_tests::hub::hub_port(&home).expect("the hub's port");
    let args = std::fs::read_to_string(tools.path().join(format!("{tool}.args"))).unwrap();
    assert!(args.starts_with(args_start), "{args}");
    // Pointed at `up`'s own origin port, which forwards to the hub, never at the hub's port.
    let target = args.trim_end().rsplit(' ').next().unwrap();
    let origin: u16 = target.strip_prefix("http://127.0.0.1:").and_then(|p| p.parse().ok()).expect(&args);
    assert_ne!(origin, port, "the tunnel points at the hub's port: {args}");
    assert_eq!(zcode_tests::squat::get_status(origin, "/api/health"), Ok(200), "{args}");
    // `status` shows the tunnel with the hub.
    let out = home.command(&["status"]).stdin(Stdio::null()).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let hub_line = text.lines().find(|l| l.starts_with("hub")).unwrap_or_else(|| panic!("{text}"));
    assert!(hub_line.contains(&format!("tunnel {public}")), "{hub_line}");
    // No loopback note: the URL is the tunnel's.
    let rest: Vec<String> = up.lines.try_iter().collect();
    assert!(!rest.iter().any(|l| l.contains("note:")), "{rest:?}");
    let tool_pid: u32 =
        std::fs::read_to_string(tools.path().join(format!("{tool}.pid"))).unwrap().trim().parse().unwrap();
    assert!(alive(tool_pid), "the tunnel is not running");
    assert!(up.interrupt().success());
    assert!(wait_gone(tool_pid, WAIT), "the {tool} stand-in outlived up");
}

#[test]
fn up_tunnel_cloudflare_pairs_through_the_quick_tunnel_and_ends_it() {
    tunnel_case(
        "cloudflared",
        "cloudflare",
        "",
        CLOUDFLARED_STDERR,
        "https://four-dashed-word-url.trycloudflare.com",
        "tunnel ",
    );
}

#[test]
fn up_tunnel_tailscale_pairs_through_tailscale_serve_and_ends_it() {
    tunnel_case("tailscale", "tailscale", TAILSCALE_STDOUT, "", "https://laptop.tail1234.ts.net", "serve ");
}

#[test]
fn the_tunnel_dies_with_a_killed_up() {
    let home = Home::new();
    let tools = tempfile::tempdir().unwrap();
    stand_in(tools.path(), "cloudflared", "", CLOUDFLARED_STDERR);
    let mut up = Up::start(&home, &["--tunnel", "cloudflare"], Some(&path_with(tools.path())));
    up.url();
    let tool_pid: u32 =
        std::fs::read_to_string(tools.path().join("cloudflared.pid")).unwrap().trim().parse().unwrap();
    assert!(alive(tool_pid), "the tunnel is not running");
    // SIGKILL: no drop, no signal handler runs in `up`.
    up.child.kill().unwrap();
    up.child.wait().unwrap();
    assert!(wait_gone(tool_pid, WAIT), "the tunnel outlived a killed up");
}

#[test]
fn a_missing_tunnel_tool_is_one_line_and_starts_nothing() {
    let home = Home::new();
    let empty = tempfile::tempdir().unwrap();
    for (flag, tool) in [("cloudflare", "cloudflared"), ("tailscale", "tailscale")] {
        let mut cmd = home.command(&["up", "--tunnel", flag]);
        cmd.env("PATH", empty.path()).current_dir(home.path());
        let out = cmd.stdin(Stdio::null()).output().unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{err}");
        assert!(
            lines[0].contains(&format!("`{tool}` is not installed")) && lines[0].contains("install"),
            "{err}"
        );
        assert_eq!(hub_pid(&home), None, "a hub was started anyway");
    }
}

#[test]
fn up_with_an_agent_that_cannot_start_says_so_and_exits_non_zero() {
    let home = Home::new();
    let config = json!({"agents": {"fast": {"command": "zcode-acpp"}}});
    std::fs::write(home.path().join("config.json"), config.to_string()).unwrap();
    let mut up = Up::start(&home, &["--agent", "fast"], None);
    let deadline = Instant::now() + WAIT;
    let status = loop {
        if let Some(s) = up.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "up kept running; stdout so far: {:?}",
            up.lines.try_iter().collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let out: Vec<String> = up.lines.try_iter().collect();
    assert!(!status.success(), "{status}");
    assert!(!out.iter().any(|l| l.contains("is up") || l.contains("token")), "{out:?}");
    let err = up.stderr();
    assert!(
        err.contains("zcode-acp up: the agent did not start: fast: command not found: zcode-acpp"),
        "{err}"
    );
}

#[test]
fn up_with_an_unknown_agent_fails_before_printing_a_url_or_the_token() {
    let home = Home::new();
    let config = json!({"agents": {"fast": {"command": "zcode-acpp"}}});
    std::fs::write(home.path().join("config.json"), config.to_string()).unwrap();
    let out = home
        .command(&["up", "--agent", "nosuch"])
        .current_dir(home.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(stdout.trim().is_empty(), "{stdout}");
    assert!(!stderr.contains("token") && !stderr.contains("http"), "{stderr}");
    assert!(stderr.contains("no agent named \"nosuch\"") && stderr.contains("fast"), "{stderr}");
    assert_eq!(hub_pid(&home), None, "a hub was started for nothing");
}

#[test]
fn the_tunnel_tool_is_not_given_the_token() {
    let home = Home::new();
    let tools = tempfile::tempdir().unwrap();
    stand_in(tools.path(), "cloudflared", "", CLOUDFLARED_STDERR);
    let token = zcode_tests::TEST_TOKEN;
    let env = [("ZCODE_ACP_REMOTE_TOKEN", token)];
    let up = Up::start_with(&home, None, &["--tunnel", "cloudflare"], Some(&path_with(tools.path())), &env);
    let url = up.url();
    let port = zcode_tests::hub::hub_port(&home).expect("the hub's port");
    assert!(!url.contains(token), "the token is in the pairing URL: {url}");
    let (status, _) = zcode_tests::http_get(port, "/api/instances", Some(token));
    assert_eq!(status, 200, "up runs with the token from its environment");
    let dumped = std::fs::read_to_string(tools.path().join("cloudflared.env")).unwrap();
    assert!(dumped.contains("PATH="), "the stand-in dumped its environment: {dumped}");
    assert!(!dumped.contains(token), "the tunnel tool was given the token:\n{dumped}");
    assert!(!dumped.contains("ZCODE_ACP_"), "the tunnel tool was given zcode-acp's variables:\n{dumped}");
}

/// A `cloudflared` that forwards: it listens on a port of its own (written to
/// `cloudflared.port`), connects each client to the `--url` port and copies both ways.
const FORWARDER: &str = r#"#!/usr/bin/python3
import os, socket, sys, threading
d = os.path.dirname(os.path.abspath(__file__))
target = int(sys.argv[sys.argv.index("--url") + 1].rsplit(":", 1)[1])
with open(os.path.join(d, "origin.tmp"), "w") as f:
    f.write(str(target))
os.rename(os.path.join(d, "origin.tmp"), os.path.join(d, "cloudflared.origin"))
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(64)
with open(os.path.join(d, "port.tmp"), "w") as f:
    f.write(str(srv.getsockname()[1]))
os.rename(os.path.join(d, "port.tmp"), os.path.join(d, "cloudflared.port"))
with open(os.path.join(d, "banner.txt")) as f:
    sys.stderr.write(f.read() + "\n")
sys.stderr.flush()
def pipe(a, b):
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            b.sendall(data)
    except OSError:
        pass
    for s in (a, b):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
def handle(c):
    try:
        u = socket.create_connection(("127.0.0.1", target))
    except OSError:
        c.close()
        return
    threading.Thread(target=pipe, args=(c, u), daemon=True).start()
    pipe(u, c)
while True:
    c, _ = srv.accept()
    threading.Thread(target=handle, args=(c,), daemon=True).start()
"#;

/// `up --tunnel` with the forwarding stand-in, run from a copy of the binary (so that touching
/// it upgrades only this test's hub); with the hub's port, the tunnel's, and a uid 65534 bind
/// loop on the hub's port.
/// The hub's idle limit in the tunnel tests: short, yet long enough for `up` to start its tunnel
/// (until then nothing keeps the hub).
const IDLE_MS: &str = "3000";

struct TunnelCase {
    up: Up,
    squatter: zcode_tests::squat::Squatter,
    home: Home,
    exe: PathBuf,
    port: u16,
    tunnel: u16,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

fn tunnel_with_squatter() -> TunnelCase {
    let home = Home::new();
    let copy = tempfile::tempdir().unwrap();
    let exe = copy.path().join("zcode-acp");
    std::fs::copy(bin(), &exe).unwrap();
    let tools = tempfile::tempdir().unwrap();
    let tool = tools.path().join("cloudflared");
    std::fs::write(&tool, FORWARDER).unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(tools.path().join("banner.txt"), CLOUDFLARED_STDERR).unwrap();
    let env = [("ZCODE_ACP_REMOTE_TOKEN", zcode_tests::TEST_TOKEN), ("ZCODE_ACP_HUB_IDLE_MS", IDLE_MS)];
    let up =
        Up::start_with(&home, Some(&exe), &["--tunnel", "cloudflare"], Some(&path_with(tools.path())), &env);
    up.url();
    let port = zcode_tests::hub::hub_port(&home).expect("the hub's port");
    let tunnel: u16 =
        std::fs::read_to_string(tools.path().join("cloudflared.port")).unwrap().parse().unwrap();
    assert_eq!(zcode_tests::squat::get_status(tunnel, "/api/health"), Ok(200), "through the tunnel");
    let squatter = zcode_tests::squat::Squatter::start(port);
    TunnelCase { up, squatter, home, exe, port, tunnel, _dirs: (copy, tools) }
}

/// Issue 32, point 7: a tunnel `up` started forwards only to a port its hub holds, while
/// another user (uid 65534) binds in a loop on that port: through an upgrade (the successor
/// inherits the socket) and well past the hub's idle limit (it stays while the tunnel runs).
#[test]
fn a_tunnel_keeps_its_port_through_an_upgrade_and_idle_time() {
    use zcode_tests::hub::{AUTH, http, wait_until};
    use zcode_tests::squat::get_status;
    // Bound so that they drop in reverse: `up` (and the hub it names) before the home.
    let TunnelCase { _dirs, home, exe, port, tunnel, squatter, up: _up } = tunnel_with_squatter();
    let f = std::fs::File::open(&exe).unwrap();
    f.set_modified(std::time::SystemTime::now()).unwrap();
    let first = hub_pid(&home).expect("the hub's pid");
    let r = http(port, "POST", "/api/upgrade", &[AUTH], b"").json();
    assert_eq!(r["restarting"], true, "{r}");
    wait_until("the successor answering through the tunnel", || {
        squatter.bound()
            || hub_pid(&home).is_some_and(|p| p != first) && get_status(tunnel, "/api/health") == Ok(200)
    });
    assert!(!squatter.bound(), "uid 65534 took the hub's port during the upgrade");
    // Well past its idle limit, the hub still holds the port the tunnel uses.
    let idle = Duration::from_millis(IDLE_MS.parse().unwrap());
    let since = Instant::now();
    while since.elapsed() < idle * 3 / 2 {
        assert_eq!(get_status(tunnel, "/api/health"), Ok(200), "through the tunnel while idle");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!squatter.bound(), "uid 65534 took the hub's port while the tunnel ran");
    assert_eq!(squatter.connections(), 0);
}

/// Issue 32, point 7: `stop` ends the tunnel before the hub lets its port go, so a uid 65534
/// bind loop that then takes the port is sent nothing through the tunnel.
#[test]
fn stop_ends_the_tunnel_before_the_hub_lets_its_port_go() {
    use zcode_tests::squat::get_status;
    let TunnelCase { _dirs, home, tunnel, squatter, mut up, .. } = tunnel_with_squatter();
    let out = home.command(&["stop"]).stdin(Stdio::null()).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    squatter.wait_bound();
    let after = get_status(tunnel, "/api/health");
    assert_eq!(squatter.connections(), 0, "the tunnel forwarded to uid 65534: {}", squatter.received());
    assert!(after.is_err(), "the tunnel still forwards after stop: {after:?}");
    assert!(text.contains("stopped the tunnel"), "{text}");
    // `up` ends with its tunnel: the URL it printed no longer opens.
    let deadline = Instant::now() + WAIT;
    while up.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "up outlived its tunnel; stderr:\n{}", up.stderr());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(up.stderr().contains("the tunnel ended"), "{}", up.stderr());
}

/// A request by uid 65534 to 127.0.0.1:`argv[1]`: prints how many bytes of answer it got.
const ASK_AS_NOBODY: &str = r#"
import socket, sys
print("started", flush=True)
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.settimeout(20)
s.sendall(b"GET /api/health HTTP/1.1\r\nHost: hub\r\nConnection: close\r\n\r\n")
got = b""
try:
    while True:
        d = s.recv(65536)
        if not d:
            break
        got += d
except OSError:
    pass
print("reply", len(got), flush=True)
"#;

/// Issue 32, point 7: a hub killed by SIGKILL lets its port go while `up`'s tunnel still runs;
/// uid 65534 binds it at once, and the tunnel's next requests reach nobody (an error), never
/// the squatter: the tunnel forwards to `up`'s own port, which relays only to this user's hub
/// (and serves only this user: another's request there is closed unanswered).
#[test]
fn a_killed_hub_s_port_taken_by_another_user_gets_nothing_from_the_tunnel() {
    use zcode_tests::squat::get_status;
    let TunnelCase { _dirs, home, port, tunnel, squatter, up, .. } = tunnel_with_squatter();
    let origin: u16 =
        std::fs::read_to_string(_dirs.1.path().join("cloudflared.origin")).unwrap().parse().unwrap();
    let (mut asker, mut lines) =
        zcode_tests::squat::as_nobody(ASK_AS_NOBODY, &[origin.to_string()], "the asker");
    let reply = lines.next().and_then(Result::ok).unwrap_or_default();
    let _ = (asker.kill(), asker.wait());
    assert_eq!(reply, "reply 0", "uid 65534 was answered on up's origin port {origin}");
    let first = hub_pid(&home).expect("the hub's pid");
    signal(first, "KILL");
    assert_eq!(squatter.port(), port, "uid 65534 did not get the killed hub's port");
    // An error, or (once `up`'s bridge has started a new hub, on another port) that hub.
    let restarted = || hub_pid(&home).is_some_and(|p| p != first);
    for _ in 0..3 {
        let r = get_status(tunnel, "/api/health");
        assert!(r.is_err() || restarted(), "the tunnel answered {r:?} with the hub's port held by uid 65534");
    }
    squatter.assert_learned_nothing();
    if !restarted() {
        assert!(up.stderr().contains("held by another user (uid 65534)"), "{}", up.stderr());
    }
}

#[test]
fn up_refuses_a_port_another_user_holds_before_printing_a_url() {
    let home = Home::new();
    let port = zcode_tests::squat::free_port();
    let squatter = zcode_tests::squat::Squatter::start(port);
    squatter.wait_bound();
    let project = home.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    let out = home
        .command(&["up"])
        .env("ZCODE_ACP_HUB_PORT", port.to_string())
        .env("ZCODE_ACP_REMOTE_PORT", "0")
        .current_dir(&project)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert!(!stdout.contains("#pair=") && !stderr.contains("#pair="), "{stdout}{stderr}");
    assert!(stderr.contains("another user (uid 65534)"), "{stderr}");
    assert_eq!(squatter.received(), "");
}
