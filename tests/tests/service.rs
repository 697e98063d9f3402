//! `zcode-acp service`: the systemd unit and launchd agent it writes (checked by
//! `systemd-analyze verify` and Python's `plistlib`), `install`/`status`/`uninstall` against a
//! stand-in `systemctl` (no systemd runs here), and the unit's `ExecStart` run directly: the
//! hub it keeps (never idle-exiting), its tunnel, its log on standard error (the journal), its
//! order at stop (tunnel first) and its failure exit when the hub dies (for a restart).

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Instant;
use zcode_tests::{Home, WAIT, bin};

/// The words of a unit's `ExecStart=` (as `service` quotes them: each in double quotes).
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '"' {
            assert!(c == ' ', "an unquoted character {c:?} in {line}");
            continue;
        }
        let mut w = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => w.push(chars.next().expect("an escape at the end")),
                '"' => break,
                '%' | '$' if chars.peek() == Some(&c) => {
                    chars.next();
                    w.push(c);
                }
                _ => w.push(c),
            }
        }
        out.push(w);
    }
    out
}

/// `(ExecStart words, Environment pairs)` of a unit.
fn parse_unit(unit: &str) -> (Vec<String>, Vec<(String, String)>) {
    let exec = unit.lines().find_map(|l| l.strip_prefix("ExecStart=")).expect("ExecStart");
    let env = unit
        .lines()
        .filter_map(|l| l.strip_prefix("Environment="))
        .map(|l| {
            let w = words(l).pop().expect("an Environment word");
            let (k, v) = w.split_once('=').expect("KEY=value");
            (k.to_owned(), v.to_owned())
        })
        .collect();
    (words(exec), env)
}

fn run(cmd: &mut Command) -> (i32, String, String) {
    let out = cmd.stdin(Stdio::null()).output().expect("run the command");
    let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), s(&out.stdout), s(&out.stderr))
}

fn script(dir: &Path, name: &str, body: &str) {
    let path = dir.join(name);
    std::fs::write(&path, body).expect("write the script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

fn path_with(dir: &Path) -> String {
    format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default())
}

#[test]
fn the_unit_and_the_launchd_agent_verify_and_run_this_binary_with_this_home_and_no_token() {
    let base = Home::new();
    // A hostile home: quotes, a backslash, a specifier and a variable stay one literal word.
    let home = base.path().join(r#"a "b" \c %h $HOME"#);
    std::fs::create_dir(&home).unwrap();
    let cmd = |args: &[&str]| {
        let mut c = base.command(args);
        c.env("ZCODE_ACP_HOME", &home);
        c
    };
    let (code, unit, err) = run(&mut cmd(&["service", "print", "--tunnel", "cloudflare"]));
    assert_eq!(code, 0, "{err}");
    let (exec, env) = parse_unit(&unit);
    let exe = std::fs::canonicalize(bin()).unwrap();
    assert_eq!(exec, [exe.to_str().unwrap(), "service", "run", "--tunnel", "cloudflare"], "{unit}");
    assert!(env.contains(&("ZCODE_ACP_HOME".into(), home.display().to_string())), "{unit}");
    assert!(env.iter().any(|(k, _)| k == "PATH"), "no PATH for the tunnel tool and agents:\n{unit}");
    for line in ["Restart=on-failure", "KillMode=mixed", "WantedBy=default.target", "UMask=0077"] {
        assert!(unit.lines().any(|l| l == line), "no {line}:\n{unit}");
    }
    // Made by `print` (the token file exists now); never written into the unit.
    let token = std::fs::read_to_string(home.join("token")).unwrap_or_default();
    let token = token.trim();
    assert!(token.is_empty() || !unit.contains(token), "the token is in the unit");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("zcode-acp.service");
    std::fs::write(&file, &unit).unwrap();
    let (code, out, err) = run(Command::new("systemd-analyze").arg("verify").arg(&file));
    assert_eq!(code, 0, "systemd-analyze verify rejects the unit:\n{out}{err}\n{unit}");

    let (code, plist, err) = run(&mut cmd(&["service", "print", "--platform", "macos"]));
    assert_eq!(code, 0, "{err}");
    let check = r#"
import json, plistlib, sys
p = plistlib.loads(sys.stdin.buffer.read())
print(json.dumps({k: p[k] for k in ("Label", "ProgramArguments", "EnvironmentVariables", "RunAtLoad", "KeepAlive")}))
"#;
    let mut py = Command::new("python3")
        .args(["-c", check])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut py.stdin.take().unwrap(), plist.as_bytes()).unwrap();
    let out = py.wait_with_output().unwrap();
    assert!(out.status.success(), "not a property list: {}\n{plist}", String::from_utf8_lossy(&out.stderr));
    let p: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(p["Label"], "dev.zcode-acp.hub");
    assert_eq!(p["ProgramArguments"], serde_json::json!([exe.to_str().unwrap(), "service", "run"]));
    assert_eq!(p["EnvironmentVariables"]["ZCODE_ACP_HOME"], home.display().to_string());
    assert_eq!(
        (p["RunAtLoad"].clone(), p["KeepAlive"]["SuccessfulExit"].clone()),
        (true.into(), false.into())
    );

    // A line break would end the directive and start one of the attacker's: refused.
    let evil = base.path().join("x\nExecStartPre=false");
    std::fs::create_dir(&evil).unwrap();
    let mut c = base.command(&["service", "print"]);
    let (code, out, err) = run(c.env("ZCODE_ACP_HOME", &evil));
    assert_eq!(code, 1, "{out}");
    assert!(err.contains("control character") && out.is_empty(), "{err}");
}

#[test]
fn install_status_and_uninstall_drive_the_service_manager_and_say_what_to_do_when_it_cannot() {
    let home = Home::new();
    let tools = tempfile::tempdir().unwrap();
    let user = tempfile::tempdir().unwrap();
    let log = tools.path().join("systemctl.log");
    script(
        tools.path(),
        "systemctl",
        &format!(
            "#!/bin/sh\necho \"$@\" >> '{}'\ncase \"$2\" in is-active) echo active;; is-enabled) echo enabled;; esac\n",
            log.display()
        ),
    );
    let cmd = |args: &[&str]| {
        let mut c = home.command(args);
        c.env("HOME", user.path())
            .env("XDG_CONFIG_HOME", user.path().join("cfg"))
            .env("PATH", path_with(tools.path()));
        c
    };
    let (code, out, err) = run(&mut cmd(&["service", "install"]));
    assert_eq!(code, 0, "{out}{err}");
    let unit_path = user.path().join("cfg/systemd/user/zcode-acp.service");
    let written = std::fs::read_to_string(&unit_path).expect("the unit file");
    let (_, printed, _) = run(&mut cmd(&["service", "print"]));
    assert_eq!(written, printed);
    let calls = std::fs::read_to_string(&log).unwrap();
    assert_eq!(calls, "--user daemon-reload\n--user enable --now zcode-acp.service\n");

    let (code, out, _) = run(&mut cmd(&["service", "status"]));
    assert!(
        out.contains("installed") && out.contains("active, enabled") && out.contains("hub:     not running"),
        "{out}"
    );
    assert_eq!(code, 1, "no hub answers, yet status succeeded:\n{out}");

    let (code, out, err) = run(&mut cmd(&["service", "uninstall"]));
    assert_eq!(code, 0, "{out}{err}");
    assert!(!unit_path.exists());
    assert!(std::fs::read_to_string(&log).unwrap().contains("--user disable --now zcode-acp.service\n"));
    let (code, out, _) = run(&mut cmd(&["service", "uninstall"]));
    assert_eq!((code, out.contains("not installed")), (0, true), "{out}");

    // A session without a user bus (like this machine's): the unit is written, the command to
    // finish is named, and the exit status says it is not running.
    script(
        tools.path(),
        "systemctl",
        "#!/bin/sh\necho 'Failed to connect to bus: No medium found' >&2\nexit 1\n",
    );
    let (code, _, err) = run(&mut cmd(&["service", "install"]));
    assert_eq!(code, 1, "{err}");
    assert!(unit_path.exists());
    assert!(
        err.contains("Failed to connect to bus")
            && err.contains(
                "systemctl --user daemon-reload && systemctl --user enable --now zcode-acp.service"
            ),
        "{err}"
    );
}

/// A `cloudflared` that prints a quick tunnel's banner and, when terminated, records whether
/// the hub still answered `/api/health` through its `--url` port at that moment.
const TUNNEL: &str = r#"#!/usr/bin/python3
import os, signal, socket, sys, time
d = os.path.dirname(os.path.abspath(__file__))
port = int(sys.argv[sys.argv.index("--url") + 1].rsplit(":", 1)[1])
def term(*_):
    said = "hub gone"
    try:
        c = socket.create_connection(("127.0.0.1", port), timeout=2)
        c.sendall(b"GET /api/health HTTP/1.0\r\nHost: x\r\n\r\n")
        if c.recv(64).split(b"\r\n")[0].endswith(b" 200 OK"):
            said = "hub answered"
        c.close()
    except OSError:
        pass
    with open(os.path.join(d, "ended"), "w") as f:
        f.write(said)
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
sys.stderr.write("INF |  https://four-dashed-word-url.trycloudflare.com  |\n")
sys.stderr.flush()
while True:
    time.sleep(1)
"#;

/// The unit's `ExecStart` with its environment, run directly, as systemd would; the lines of
/// its standard error arrive on the receiver.
struct Service {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Service {
    fn start(home: &Home, tools: &Path, tunnel: bool) -> Service {
        Service::start_from(home, bin(), tools, tunnel)
    }

    /// [`Service::start`] with the unit `exe` prints (a copy the test upgrades).
    fn start_from(home: &Home, exe: &Path, tools: &Path, tunnel: bool) -> Service {
        let mut print = home.command_of(exe, &["service", "print"]);
        if tunnel {
            print.args(["--tunnel", "cloudflare"]);
        }
        let (code, unit, err) = run(print.env("PATH", path_with(tools)));
        assert_eq!(code, 0, "{err}");
        let (exec, env) = parse_unit(&unit);
        // The test's own settings (an OS-picked port, not the machine's 8377), then the unit's.
        let mut cmd = home.command_of(Path::new(&exec[0]), &[]);
        cmd.args(&exec[1..]).envs(env).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        cmd.env("ZCODE_ACP_REMOTE_TOKEN", zcode_tests::TEST_TOKEN);
        let mut child = zcode_tests::hub::spawn_copy(&mut cmd);
        let (tx, lines) = channel();
        let err = child.stderr.take().expect("piped stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Service { child, lines, seen: Vec::new() }
    }

    /// Waits for a line containing `what`.
    fn wait_for(&mut self, what: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(l) = self.seen.iter().find(|l| l.contains(what)) {
                return l.clone();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => self.seen.push(l),
                Err(_) => panic!("no line with {what:?} on the service's stderr:\n{}", self.seen.join("\n")),
            }
        }
    }

    fn exit_code(&mut self) -> Option<i32> {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                return s.code();
            }
            assert!(Instant::now() < deadline, "the service did not exit");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn hub_pid(home: &Home) -> u32 {
    let text = std::fs::read_to_string(home.path().join("run/hub.pid")).unwrap_or_default();
    text.trim().parse().unwrap_or_else(|_| panic!("no hub runs (run/hub.pid holds {text:?})"))
}

fn wait_gone(pid: u32) {
    let deadline = Instant::now() + WAIT;
    while zcode_tests::alive(pid) {
        assert!(Instant::now() < deadline, "pid {pid} is still running");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn the_units_command_keeps_a_never_idle_hub_and_its_tunnel_logs_to_the_journal_and_stops_the_tunnel_first() {
    let home = Home::new();
    let tools = tempfile::tempdir().unwrap();
    script(tools.path(), "cloudflared", TUNNEL);
    let mut service = Service::start(&home, tools.path(), true);
    service.wait_for("tunnel https://four-dashed-word-url.trycloudflare.com");
    let pid = hub_pid(&home);
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    assert!(
        environ.split(|b| *b == 0).any(|v| v == b"ZCODE_ACP_HUB_IDLE_MS=0"),
        "the service's hub would exit when idle"
    );
    // hub.log reaches the journal (the service's standard error) as well.
    service.wait_for("hub listening");
    let (code, out, _) = run(&mut home.command(&["status"]));
    assert!(code == 0 && out.contains(&pid.to_string()), "{out}");

    zcode_tests::hub::signal(service.child.id(), "TERM");
    assert_eq!(service.exit_code(), Some(0), "{}", service.seen.join("\n"));
    let ended = std::fs::read_to_string(tools.path().join("ended")).expect("the tunnel was not terminated");
    assert_eq!(ended, "hub answered", "the tunnel outlived the hub's port");
    wait_gone(pid);
}

#[test]
fn a_hub_that_dies_ends_the_service_with_a_failure_for_the_manager_to_restart() {
    let home = Home::new();
    let tools = tempfile::tempdir().unwrap();
    let mut service = Service::start(&home, tools.path(), false);
    service.wait_for("zcode-acp service: hub on");
    zcode_tests::kill9(hub_pid(&home));
    assert_eq!(service.exit_code(), Some(1));
    service.wait_for("the hub exited: exiting for the service manager to restart it");
}

#[test]
fn the_service_keeps_running_through_a_hub_self_upgrade_and_its_successor_never_idles_either() {
    let home = Home::new();
    let tools = tempfile::tempdir().unwrap();
    let copy = tempfile::tempdir().unwrap();
    let exe = copy.path().join("zcode-acp");
    std::fs::copy(bin(), &exe).unwrap();
    let mut service = Service::start_from(&home, &exe, tools.path(), false);
    service.wait_for("zcode-acp service: hub on");
    let old = hub_pid(&home);
    let port = zcode_tests::hub::hub_port(&home).expect("the hub's port");
    // A rebuild that changed nothing but the mtime: the hub restarts onto the same binary.
    std::fs::File::open(&exe).unwrap().set_modified(std::time::SystemTime::now()).unwrap();
    let r = zcode_tests::hub::http(port, "POST", "/api/upgrade", &[zcode_tests::hub::AUTH], b"");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["restarting"], true, "{}", r.text());
    wait_gone(old);
    let deadline = Instant::now() + WAIT;
    let new = loop {
        let text = std::fs::read_to_string(home.path().join("run/hub.pid")).unwrap_or_default();
        match text.trim().parse::<u32>() {
            Ok(p) if p != old && zcode_tests::alive(p) => break p,
            _ => assert!(Instant::now() < deadline, "no successor hub"),
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let environ = std::fs::read(format!("/proc/{new}/environ")).unwrap();
    assert!(environ.split(|b| *b == 0).any(|v| v == b"ZCODE_ACP_HUB_IDLE_MS=0"), "the successor idles out");
    // Exit status 0 and the successor ended: the service followed the upgrade (had it given
    // up on the hub it would have exited 1), and stopped the hub it found then.
    zcode_tests::hub::signal(service.child.id(), "TERM");
    assert_eq!(service.exit_code(), Some(0), "{}", service.seen.join("\n"));
    wait_gone(new);
}
