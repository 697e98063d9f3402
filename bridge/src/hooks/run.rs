//! Running one hook: `sh -c <command>` in the session's directory, in its own process group,
//! the event as JSON on stdin, stdout and stderr kept up to a cap (the rest is read and
//! dropped, so a chatty hook never blocks on a full pipe), the whole group killed at the
//! timeout. A hook whose shell has exited but whose children still hold its output is not
//! waited for: its result is taken and the group is killed when the timeout comes.

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use zcode_shared::procgroup::Group;

/// What a hook did.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Its exit code (`None`: killed by a signal, timed out, or never started).
    pub exit: Option<i32>,
    /// Killed at its timeout.
    pub timed_out: bool,
    /// From start to result.
    pub duration: Duration,
    /// Its stdout, lossily decoded, at most the cap.
    pub stdout: String,
    /// Its stderr, likewise.
    pub stderr: String,
    /// Some output was dropped at the cap.
    pub truncated: bool,
    /// It could not be started (the reason).
    pub error: Option<String>,
}

/// How long output still flowing after the shell exited is waited for: children that hold
/// the pipes (a notifier sent to the background) do not hold up the result.
const DRAIN_GRACE: Duration = Duration::from_millis(100);

/// Runs `command` (see the module docs). `env` is added to the bridge's environment, from
/// which the token is removed.
pub async fn run(
    command: &str,
    cwd: &Path,
    stdin: Vec<u8>,
    env: &[(&'static str, String)],
    timeout: Duration,
    cap: usize,
) -> Outcome {
    let started = Instant::now();
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c")
        .arg(command)
        .current_dir(cwd)
        .env_remove(super::TOKEN_VAR)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let spawned = match Group::spawn(&mut cmd) {
        Ok(c) => c,
        Err(e) => {
            return Outcome {
                error: Some(format!("cannot start sh in {}: {e}", cwd.display())),
                ..Outcome::default()
            };
        }
    };
    // Dropped, the group is killed (all of it) and the shell reaped: at the timeout, or when the
    // bridge stops (its tasks are dropped).
    let group = spawned.group;
    if let Some(input) = spawned.stdin.and_then(|i| tokio::process::ChildStdin::from_std(i).ok()) {
        tokio::spawn(async move {
            let mut input = input;
            // A hook that does not read its stdin closes the pipe: not an error.
            let _ = input.write_all(&stdin).await;
        });
    }
    let out = Arc::new(Mutex::new(Capped::new(cap)));
    let err = Arc::new(Mutex::new(Capped::new(cap)));
    let readers = (
        spawned
            .stdout
            .and_then(|s| tokio::process::ChildStdout::from_std(s).ok())
            .map(|s| tokio::spawn(drain(s, out.clone()))),
        spawned
            .stderr
            .and_then(|s| tokio::process::ChildStderr::from_std(s).ok())
            .map(|s| tokio::spawn(drain(s, err.clone()))),
    );
    let deadline = tokio::time::Instant::now() + timeout;
    let mut outcome = Outcome::default();
    match tokio::time::timeout_at(deadline, group.exited()).await {
        Ok(status) => {
            outcome.exit = status.code();
            let pipes = async {
                if let Some(r) = readers.0 {
                    let _ = r.await;
                }
                if let Some(r) = readers.1 {
                    let _ = r.await;
                }
            };
            let grace = DRAIN_GRACE.min(deadline.saturating_duration_since(tokio::time::Instant::now()));
            if tokio::time::timeout(grace, pipes).await.is_ok() {
                // Nothing holds its output: what it started on purpose (with its output sent
                // elsewhere) runs on, as it would from a shell.
                group.detach();
            } else {
                // Its children still run: they get the rest of the timeout, then the group goes.
                tokio::spawn(async move {
                    tokio::time::sleep_until(deadline).await;
                    drop(group);
                });
            }
        }
        Err(_) => {
            outcome.timed_out = true;
            drop(group);
        }
    }
    outcome.duration = started.elapsed();
    let (o, e) = (take(&out), take(&err));
    outcome.truncated = o.1 || e.1;
    outcome.stdout = o.0;
    outcome.stderr = e.0;
    outcome
}

/// Output kept up to a cap.
struct Capped {
    bytes: Vec<u8>,
    cap: usize,
    dropped: bool,
}

impl Capped {
    fn new(cap: usize) -> Capped {
        Capped { bytes: Vec::new(), cap, dropped: false }
    }
}

fn take(c: &Mutex<Capped>) -> (String, bool) {
    let c = c.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    (String::from_utf8_lossy(&c.bytes).into_owned(), c.dropped)
}

/// Reads a pipe to its end, keeping what fits under the cap.
async fn drain(mut pipe: impl AsyncRead + Unpin, into: Arc<Mutex<Capped>>) {
    let mut buf = vec![0u8; 8192];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let mut c = into.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                let room = c.cap.saturating_sub(c.bytes.len());
                let keep = room.min(n);
                c.bytes.extend_from_slice(&buf[..keep]);
                c.dropped |= keep < n;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stdin_env_cwd_exit_and_the_output_cap() {
        let dir = tempfile::tempdir().unwrap();
        let o = run(
            "cat; echo \" $X $(pwd)\"; echo oops >&2; exit 3",
            dir.path(),
            b"{\"a\":1}".to_vec(),
            &[("X", "x-value".into())],
            Duration::from_secs(20),
            1024,
        )
        .await;
        assert_eq!(o.exit, Some(3));
        let pwd = std::fs::canonicalize(dir.path()).unwrap();
        assert_eq!(o.stdout, format!("{{\"a\":1}} x-value {}\n", pwd.display()));
        assert_eq!(o.stderr, "oops\n");
        assert!(!o.truncated && !o.timed_out);

        let flood = run("yes | head -c 1000000", dir.path(), vec![], &[], Duration::from_secs(20), 100).await;
        assert_eq!(flood.exit, Some(0), "the flood is read to its end: {flood:?}");
        assert_eq!(flood.stdout.len(), 100);
        assert!(flood.truncated);
    }

    #[tokio::test]
    async fn a_timeout_kills_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let o =
            run("(sleep 1; touch late) & sleep 30", dir.path(), vec![], &[], Duration::from_millis(200), 64)
                .await;
        assert!(o.timed_out && o.exit.is_none(), "{o:?}");
        // The background child was in the group: 1.5 s later it has not touched its file.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(!dir.path().join("late").exists(), "a child of the hook outlived its timeout");
    }

    #[tokio::test]
    async fn children_that_outlive_the_shell_are_killed_at_the_timeout() {
        let dir = tempfile::tempdir().unwrap();
        // The shell exits at once; its child holds the output and would write its file after
        // the timeout.
        let o =
            run("(sleep 1; touch late) & echo $!", dir.path(), vec![], &[], Duration::from_millis(300), 64)
                .await;
        assert_eq!(o.exit, Some(0), "{o:?}");
        let child: i32 = o.stdout.trim().parse().expect("the child's pid");
        let gone = || {
            std::fs::read_to_string(format!("/proc/{child}/stat"))
                .map_or(true, |s| s.rsplit(')').next().and_then(|r| r.split_whitespace().next()) == Some("Z"))
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !gone() {
            assert!(Instant::now() < deadline, "the hook's child outlived its timeout");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!dir.path().join("late").exists(), "a child of the hook ran past its timeout");
    }

    /// Set in the copy of this test run inside a new user and pid namespace.
    const IN_PIDNS: &str = "ZCODE_TEST_HOOK_PIDNS";

    /// The guard against a reused group id. A hook's shell exits while a background child
    /// holds its output, so its group is to be killed at the timeout; the child then ends and
    /// an unrelated process takes the shell's pid as its group id (forced: in a pid namespace
    /// of its own this test sets the next pid). The hook's late kill must not reach it: the
    /// shell's pid stays taken (its zombie) until the group is killed and reaped.
    #[test]
    fn a_late_kill_never_reaches_a_group_that_took_a_finished_hooks_id() {
        if std::env::var_os(IN_PIDNS).is_none() {
            let exe = std::env::current_exe().expect("this test binary");
            let name = "hooks::run::tests::a_late_kill_never_reaches_a_group_that_took_a_finished_hooks_id";
            let out = std::process::Command::new("unshare")
                .args(["--user", "--map-root-user", "--pid", "--fork", "--mount-proc"])
                .arg(exe)
                .args(["--exact", name, "--nocapture", "--test-threads=1"])
                .env(IN_PIDNS, "1")
                .output()
                .expect("unshare (util-linux) runs");
            let text =
                format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            assert!(out.status.success() && text.contains("1 passed"), "in a pid namespace:\n{text}");
            return;
        }
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        rt.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let o = run("sleep 0.5 & echo $$ $!", dir.path(), vec![], &[], Duration::from_secs(3), 64).await;
            let mut ids = o.stdout.split_whitespace().map(|p| p.parse::<i32>().expect("a pid"));
            let (shell, child) = (ids.next().expect("the shell's pid"), ids.next().expect("its child's pid"));
            // The child outlives the drain grace (so the group is to be killed at the timeout)
            // and ends before the timeout; orphaned, it is this process's (pid 1) to reap.
            let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(child), None);
            std::fs::write("/proc/sys/kernel/ns_last_pid", (shell - 1).to_string()).expect("set the next pid");
            let mut stranger = {
                use std::os::unix::process::CommandExt;
                std::process::Command::new("sleep").arg("30").process_group(0).spawn().expect("sleep")
            };
            // Whichever comes first: the hook's group killed and its shell reaped at the timeout
            // (the stranger could not take its id), or the stranger killed.
            let deadline = Instant::now() + Duration::from_secs(20);
            let shell_proc = format!("/proc/{shell}");
            loop {
                let taken_by_stranger = stranger.id() == shell.unsigned_abs();
                if stranger.try_wait().unwrap().is_some() || (!taken_by_stranger && !Path::new(&shell_proc).exists()) {
                    break;
                }
                assert!(Instant::now() < deadline, "the hook's timeout never came");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let status = stranger.try_wait().unwrap();
            let _ = stranger.kill();
            assert!(
                status.is_none(),
                "the hook's late kill reached an unrelated process group that took its id {shell} ({status:?})"
            );
        });
    }

    #[tokio::test]
    async fn a_missing_directory_is_an_error_not_a_panic() {
        let o = run("true", Path::new("/nonexistent/dir"), vec![], &[], Duration::from_secs(5), 64).await;
        assert!(o.error.as_deref().is_some_and(|e| e.contains("/nonexistent/dir")), "{o:?}");
    }
}
