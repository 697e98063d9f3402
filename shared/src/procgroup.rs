//! The one way a child runs in a process group of its own: [`Group::spawn`] starts it as the
//! leader of a new group, [`Group::signal`] signals the whole group, and the leader is reaped
//! here and nowhere else.
//!
//! A group's id is its leader's pid. Once the leader is reaped and the rest of the group has
//! gone, that id is free for an unrelated process (a pid and a new group), so a signal sent to
//! it late would hit a stranger. The guard: the leader's exit is observed without reaping it
//! (`waitid` with `WNOWAIT`, on a thread of its own), so while a [`Group`] lives its leader is at
//! worst a zombie that keeps the id taken, and signals stay safe, also for children that
//! outlive the leader. A group is signalled only until its leader is reaped: after that
//! [`Group::signal`] sends nothing. Dropping a [`Group`] kills the whole group (SIGKILL) and
//! reaps the leader (at once if it has exited, else on its waiter thread when it does);
//! [`Group::detach`] lets it run on and only reaps it.

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid, waitpid};
use nix::unistd::Pid;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{ChildStderr, ChildStdin, ChildStdout, Command, ExitStatus};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// A child spawned into a new process group, and its pipes (those the command asked for).
pub struct Spawned {
    /// The group.
    pub group: Group,
    /// Its stdin, when piped.
    pub stdin: Option<ChildStdin>,
    /// Its stdout, when piped.
    pub stdout: Option<ChildStdout>,
    /// Its stderr, when piped.
    pub stderr: Option<ChildStderr>,
}

/// A process group whose leader this process spawned (see the module docs).
pub struct Group {
    inner: Arc<Inner>,
    /// Drop kills the group (cleared by [`Group::detach`]).
    kill_on_drop: bool,
}

/// A handle that can signal a group, with the same guard, but neither reap nor kill it on drop:
/// for a task that may signal the group later, while the [`Group`] lives elsewhere.
#[derive(Clone)]
pub struct Handle {
    inner: Arc<Inner>,
}

struct Inner {
    pid: Pid,
    state: Mutex<State>,
    changed: Condvar,
    exit: watch::Sender<Option<ExitStatus>>,
}

#[derive(Default)]
struct State {
    /// The leader's exit, once observed (it is a zombie until reaped).
    exit: Option<ExitStatus>,
    /// The leader was reaped: its id may belong to anyone now.
    reaped: bool,
    /// Reap the leader as soon as it exits (its [`Group`] is gone).
    reap_on_exit: bool,
}

impl Group {
    /// Spawns `cmd` as the leader of a new process group. The command's stdio settings apply;
    /// piped streams are handed back in [`Spawned`].
    pub fn spawn(cmd: &mut Command) -> std::io::Result<Spawned> {
        let mut child = cmd.process_group(0).spawn()?;
        let raw = i32::try_from(child.id()).map_err(|_| std::io::Error::other("a pid out of range"))?;
        let inner = Arc::new(Inner {
            pid: Pid::from_raw(raw),
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            exit: watch::channel(None).0,
        });
        let (stdin, stdout, stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
        // `child` is dropped without being waited for: the waiter below is the only reaper.
        drop(child);
        let watched = inner.clone();
        let waiter = std::thread::Builder::new().name(format!("pgroup-{raw}")).spawn(move || watched.watch());
        if let Err(e) = waiter {
            // Without its waiter the leader can be neither observed nor reaped: end it now.
            let _ = killpg(inner.pid, Signal::SIGKILL);
            let _ = waitpid(inner.pid, None);
            inner.lock().reaped = true;
            return Err(e);
        }
        Ok(Spawned { group: Group { inner, kill_on_drop: true }, stdin, stdout, stderr })
    }

    /// The leader's pid, which is also the group's id.
    pub fn id(&self) -> u32 {
        self.inner.id()
    }

    /// Sends `sig` to every process of the group, unless the leader was already reaped; whether
    /// the signal was sent (a group that has emptied answers `false` too).
    pub fn signal(&self, sig: Signal) -> bool {
        self.inner.signal(sig)
    }

    /// A handle that can signal the group later (see [`Handle`]).
    pub fn handle(&self) -> Handle {
        Handle { inner: self.inner.clone() }
    }

    /// The leader's exit status, if it has exited (it is not reaped by this).
    pub fn try_exit(&self) -> Option<ExitStatus> {
        self.inner.lock().exit
    }

    /// Waits for the leader to exit (without reaping it).
    pub async fn exited(&self) -> ExitStatus {
        self.exit_future().await
    }

    /// The leader's exit as a future that holds no borrow of the group (for a task of its own).
    pub fn exit_future(&self) -> impl Future<Output = ExitStatus> + Send + 'static {
        let mut rx = self.inner.exit.subscribe();
        async move {
            match rx.wait_for(Option::is_some).await {
                Ok(status) => status.unwrap_or_else(|| ExitStatus::from_raw(0)),
                // The sender lives in the group: never closed while the group is awaited.
                Err(_) => ExitStatus::from_raw(0),
            }
        }
    }

    /// Blocks until the leader exits or `within` passes; its status if it exited.
    pub fn wait_exit(&self, within: Duration) -> Option<ExitStatus> {
        let until = Instant::now() + within;
        let mut state = self.inner.lock();
        loop {
            if let Some(status) = state.exit {
                return Some(status);
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            state = self.inner.changed.wait_timeout(state, left).unwrap_or_else(PoisonError::into_inner).0;
        }
    }

    /// SIGTERM to the group; once the leader has exited or `grace` has passed, SIGKILL to what is
    /// left; then reaps the leader. Whether the whole group is gone within `linger` more (a
    /// process that ignores SIGKILL, stuck in the kernel, keeps it; after the reap only signal 0
    /// probes the id, which cannot harm whoever holds it by then).
    pub async fn terminate(self, grace: Duration, linger: Duration) -> bool {
        self.signal(Signal::SIGTERM);
        let _ = tokio::time::timeout(grace, self.exited()).await;
        self.signal(Signal::SIGKILL);
        let exited = tokio::time::timeout(linger, self.exited()).await.is_ok();
        let pgid = self.inner.pid;
        drop(self);
        if !exited {
            return false;
        }
        let until = tokio::time::Instant::now() + linger;
        loop {
            if matches!(killpg(pgid, None), Err(Errno::ESRCH)) {
                return true;
            }
            if tokio::time::Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Lets the group run on: it is not killed when this handle goes, and its leader is reaped
    /// when it exits.
    pub fn detach(mut self) {
        self.kill_on_drop = false;
    }
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group").field("id", &self.id()).field("exit", &self.try_exit()).finish()
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let mut state = self.inner.lock();
        if state.reaped {
            return;
        }
        if self.kill_on_drop {
            // The leader is not reaped (the lock is held): the id is still the group's.
            let _ = killpg(self.inner.pid, Signal::SIGKILL);
        }
        if state.exit.is_some() {
            let _ = waitpid(self.inner.pid, None);
            state.reaped = true;
        } else {
            state.reap_on_exit = true;
        }
    }
}

impl Handle {
    /// As [`Group::signal`].
    pub fn signal(&self, sig: Signal) -> bool {
        self.inner.signal(sig)
    }

    /// Whether the leader has exited.
    pub fn exited(&self) -> bool {
        self.inner.lock().exit.is_some()
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn id(&self) -> u32 {
        self.pid.as_raw().unsigned_abs()
    }

    fn signal(&self, sig: Signal) -> bool {
        let state = self.lock();
        // Held across the call: the leader cannot be reaped between the check and the signal.
        !state.reaped && killpg(self.pid, sig).is_ok()
    }

    /// The waiter thread: observes the leader's exit without reaping it, reaps it if its
    /// group is gone by then.
    fn watch(&self) {
        let status = loop {
            match waitid(Id::Pid(self.pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT) {
                Err(Errno::EINTR) => {}
                Ok(WaitStatus::Exited(_, code)) => break Some(ExitStatus::from_raw((code & 0xff) << 8)),
                Ok(WaitStatus::Signaled(_, sig, core)) => {
                    break Some(ExitStatus::from_raw(sig as i32 | if core { 0x80 } else { 0 }));
                }
                Ok(_) => {}
                // Not our child any more (reaped elsewhere): nothing can be observed or reaped.
                Err(_) => break None,
            }
        };
        let mut state = self.lock();
        let status = match status {
            Some(s) => s,
            None => {
                state.reaped = true;
                ExitStatus::from_raw(0)
            }
        };
        state.exit = Some(status);
        if state.reap_on_exit && !state.reaped {
            let _ = waitpid(self.pid, None);
            state.reaped = true;
        }
        drop(state);
        self.changed.notify_all();
        self.exit.send_replace(Some(status));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Stdio;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null());
        c
    }

    fn alive(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s.rsplit(')').next().and_then(|r| r.split_whitespace().next()) != Some("Z"))
    }

    fn until(what: &str, mut ok: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !ok() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The grandchild's pid, printed by the script as its first line.
    fn first_line(out: &mut ChildStdout) -> u32 {
        use std::io::BufRead;
        let mut line = String::new();
        std::io::BufReader::new(out).read_line(&mut line).expect("read");
        line.trim().parse().unwrap_or_else(|_| panic!("a pid, got {line:?}"))
    }

    #[test]
    fn a_reaped_leaders_group_is_never_signalled_again() {
        let s = Group::spawn(&mut sh("exit 3")).expect("spawn");
        let handle = s.group.handle();
        assert_eq!(s.group.wait_exit(Duration::from_secs(20)).and_then(|e| e.code()), Some(3));
        // Exited, not reaped: the zombie keeps the id, so the group may still be signalled.
        assert!(Path::new(&format!("/proc/{}", s.group.id())).exists(), "the leader is kept as a zombie");
        assert!(handle.signal(Signal::SIGCONT), "a group whose leader is not reaped is signalled");
        let pid = s.group.id();
        drop(s);
        // Reaped now: whatever holds that id later, the old handle sends it nothing.
        until("the leader to be reaped", || !Path::new(&format!("/proc/{pid}")).exists());
        assert!(!handle.signal(Signal::SIGKILL), "a signal went to the id of a reaped leader");
    }

    use std::path::Path;

    #[test]
    fn children_that_outlive_the_leader_go_with_the_group() {
        let mut s = Group::spawn(&mut sh("sleep 30 & echo $!")).expect("spawn");
        let grandchild = first_line(s.stdout.as_mut().expect("stdout"));
        s.group.wait_exit(Duration::from_secs(20)).expect("the shell exits");
        assert!(alive(grandchild));
        assert!(s.group.signal(Signal::SIGKILL));
        until("the grandchild to die", || !alive(grandchild));
    }

    #[test]
    fn dropping_a_running_group_kills_all_of_it_and_detach_does_not() {
        let mut s = Group::spawn(&mut sh("sleep 30 & echo $!; sleep 30")).expect("spawn");
        let grandchild = first_line(s.stdout.as_mut().expect("stdout"));
        let leader = s.group.id();
        drop(s);
        until("the group to die", || !alive(grandchild) && !alive(leader));
        until("the leader to be reaped", || !Path::new(&format!("/proc/{leader}")).exists());

        let mut s = Group::spawn(&mut sh("sleep 30 & echo $!")).expect("spawn");
        let grandchild = first_line(s.stdout.as_mut().expect("stdout"));
        let leader = s.group.id();
        s.group.detach();
        until("the detached leader to be reaped", || !Path::new(&format!("/proc/{leader}")).exists());
        assert!(alive(grandchild), "detaching killed the group");
        let _ = nix::sys::signal::kill(Pid::from_raw(grandchild as i32), Signal::SIGKILL);
    }

    #[tokio::test]
    async fn terminate_ends_a_group_that_ignores_sigterm() {
        let s = Group::spawn(&mut sh("trap '' TERM; sleep 30 & echo $!; wait")).expect("spawn");
        let mut out = s.stdout.expect("stdout");
        let grandchild = tokio::task::spawn_blocking(move || first_line(&mut out)).await.expect("join");
        let leader = s.group.id();
        let exit = s.group.exit_future();
        assert!(s.group.terminate(Duration::from_millis(50), Duration::from_secs(20)).await);
        assert_eq!(exit.await.signal(), Some(9), "the shell ignored SIGTERM, so SIGKILL ended it");
        assert!(!alive(grandchild) && !Path::new(&format!("/proc/{leader}")).exists());
    }
}
