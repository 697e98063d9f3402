//! The upstream agent process: spawned in its own process group, stdin fed by a writer task,
//! stdout parsed into [`UpstreamEvent`]s (whoever listens turns them into its own events),
//! stderr copied to our log, its last lines kept ([`StderrTail`]) for the error that names a
//! failed agent.
//!
//! Bounded by bytes ([`crate::bounds`]): a stdout line over the message limit is refused unread
//! (an answer's client gets an error, a request's agent an error answer, a notification is
//! dropped; each logged); stdout is not read while the editor's outbox or the journal's
//! channel holds more than the limit (the agent's pipe fills and the agent waits: the editor
//! cannot be dropped like a remote client); an agent that leaves more than the limit unread
//! on its stdin is stopped as hung (the router never waits on it), which fails its requests.

use crate::bounds::{Line, LineReader, max_message, size_text};
use bytes::Bytes;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::collections::{BTreeMap, VecDeque};
use std::process::Stdio;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;
use tokio::sync::mpsc;
use zcode_shared::jsonrpc::{ParseError, RawMessage};

/// How to start the upstream agent.
#[derive(Clone, Debug)]
pub struct AgentSpec {
    /// The program.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment.
    pub env: BTreeMap<String, String>,
    /// A human name for logs and errors (the command line).
    pub display: String,
    /// What the hub's listings and the tasks index call it: its `config.json` name (the
    /// built-in demo agent's is `demo-agent`), else the command line with the program's file name.
    pub name: String,
    /// What errors call it ("claude: command not found: …"): its name in config.json when it
    /// has one, else the program.
    pub label: String,
}

/// What an agent process reports, tagged with its generation (a restarted agent is a new one).
pub enum UpstreamEvent {
    /// A line from its stdout, parsed (or not).
    Line {
        /// Which agent process.
        generation: u64,
        /// The message.
        msg: Result<RawMessage, ParseError>,
    },
    /// It exited.
    Exited {
        /// Which agent process.
        generation: u64,
        /// How it ended, for error messages.
        reason: String,
    },
}

/// How many of an agent's last stderr lines an error carries, and how many bytes at most.
const TAIL_LINES: usize = 20;
const TAIL_BYTES: usize = 4096;

/// The last lines an agent wrote on stderr (at most [`TAIL_LINES`] lines, [`TAIL_BYTES`]
/// bytes), control sequences removed: they end up on a phone's screen.
#[derive(Debug, Default)]
pub struct StderrTail {
    lines: VecDeque<String>,
    bytes: usize,
}

impl StderrTail {
    /// Keeps `line`, dropping the oldest lines beyond the bounds.
    pub fn push(&mut self, line: &str) {
        let mut line = zcode_shared::text::strip_controls(line).trim_end().to_owned();
        if line.trim().is_empty() {
            return;
        }
        if line.len() > TAIL_BYTES {
            let mut cut = TAIL_BYTES;
            while !line.is_char_boundary(cut) {
                cut -= 1;
            }
            line.truncate(cut);
        }
        self.bytes += line.len();
        self.lines.push_back(line);
        while self.lines.len() > TAIL_LINES || self.bytes > TAIL_BYTES {
            let Some(old) = self.lines.pop_front() else { break };
            self.bytes -= old.len();
        }
    }

    /// The kept lines, oldest first, one per line.
    pub fn text(&self) -> String {
        self.lines.iter().map(String::as_str).collect::<Vec<_>>().join("\n")
    }
}

/// How long a killed agent gets between SIGTERM and SIGKILL.
const KILL_GRACE: Duration = Duration::from_millis(500);

/// The longest stderr line logged whole; a longer one is logged cut.
const STDERR_LINE: usize = 64 * 1024;

/// The agent's stdin queue, bounded by bytes: see [`Input::send`].
#[derive(Clone)]
struct Input {
    tx: mpsc::UnboundedSender<Bytes>,
    /// Bytes queued and not yet written.
    queued: Arc<AtomicUsize>,
    /// Set once the agent was stopped for leaving too much unread: its exit says so.
    overflow: Arc<AtomicBool>,
    pid: u32,
}

impl Input {
    /// Queues `line`. Past [`max_message`] bytes unread (a message is always taken into an
    /// empty queue) the agent is stopped as hung: the router, one task for every client, never
    /// waits on it, and its requests fail with the reason (see the exit's `reason`).
    fn send(&self, line: Bytes) {
        if self.overflow.load(Ordering::Relaxed) {
            return;
        }
        let len = line.len();
        let before = self.queued.fetch_add(len, Ordering::Relaxed);
        if before > 0 && before + len > max_message() {
            self.queued.fetch_sub(len, Ordering::Relaxed);
            if !self.overflow.swap(true, Ordering::Relaxed) {
                let waiting = size_text(before);
                tracing::error!(
                    pid = self.pid,
                    "the agent left {waiting} of input unread: stopping it as hung"
                );
                kill_group(self.pid);
            }
            return;
        }
        let _ = self.tx.send(line);
    }
}

/// The stdout reader's way to the agent's stdin ([`refused`]), which does not keep it open.
struct Answers {
    tx: mpsc::WeakUnboundedSender<Bytes>,
    queued: Arc<AtomicUsize>,
    overflow: Arc<AtomicBool>,
}

/// A running agent process.
pub struct AgentProcess {
    pid: u32,
    stdin: Input,
    /// Set when the bridge ends it itself: that death is expected, not worth a warning.
    ending: Arc<AtomicBool>,
    /// Its last stderr lines.
    tail: Arc<Mutex<StderrTail>>,
}

impl AgentProcess {
    /// Spawns the agent; its lines and its exit arrive on `events` as [`UpstreamEvent`]s tagged
    /// with `generation`.
    pub fn spawn<E: From<UpstreamEvent> + Send + 'static>(
        spec: &AgentSpec,
        generation: u64,
        events: mpsc::Sender<E>,
    ) -> std::io::Result<AgentProcess> {
        let mut cmd = Command::new(&spec.command);
        cmd.args(&spec.args)
            .envs(&spec.env)
            // The token is the bridge's, not the agent's: nothing the agent runs may read it.
            .env_remove("ZCODE_ACP_REMOTE_TOKEN")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own group, so killing it takes its children (npx → node → …) along.
            .process_group(0)
            .kill_on_drop(true);
        let mut child = cmd.spawn()?;
        let pid = child.id().unwrap_or(0);
        let (Some(mut stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(std::io::Error::other("agent stdio was not captured"));
        };
        let (tx, mut rx) = mpsc::unbounded_channel::<Bytes>();
        let input = Input {
            tx,
            queued: Arc::new(AtomicUsize::new(0)),
            overflow: Arc::new(AtomicBool::new(false)),
            pid,
        };
        let written = input.queued.clone();
        tokio::spawn(async move {
            while let Some(line) = rx.recv().await {
                if stdin.write_all(&line).await.is_err() || stdin.write_all(b"\n").await.is_err() {
                    break;
                }
                written.fetch_sub(line.len(), Ordering::Relaxed);
                if rx.is_empty() && stdin.flush().await.is_err() {
                    break;
                }
            }
        });
        let reader_events = events.clone();
        // Weak: the writer ends (closing the agent's stdin) once the process handle is dropped.
        let answers = Answers {
            tx: input.tx.downgrade(),
            queued: input.queued.clone(),
            overflow: input.overflow.clone(),
        };
        let reader = tokio::spawn(async move {
            let limit = max_message();
            let mut lines = LineReader::new(stdout, limit);
            loop {
                // Not a line more while the editor's outbox or the journal's channel is full.
                crate::bounds::EDITOR.below().await;
                crate::bounds::JOURNAL.below().await;
                let msg = match lines.next().await {
                    Ok(Some(Line::Text(line))) if line.trim().is_empty() => continue,
                    Ok(Some(Line::Text(line))) => RawMessage::parse(&line),
                    Ok(Some(Line::TooLong { size, head })) => {
                        let Some(msg) = refused(pid, size, &head, limit, &answers) else { continue };
                        msg
                    }
                    Ok(None) | Err(_) => break,
                };
                if reader_events.send(UpstreamEvent::Line { generation, msg }.into()).await.is_err() {
                    break;
                }
            }
        });
        let tail = Arc::new(Mutex::new(StderrTail::default()));
        let kept = tail.clone();
        let stderr_reader = tokio::spawn(async move {
            let mut lines = LineReader::new(stderr, STDERR_LINE);
            while let Ok(Some(line)) = lines.next().await {
                let line = match line {
                    Line::Text(line) => line,
                    Line::TooLong { size, head } => {
                        format!("{}… (a line of {}, cut)", String::from_utf8_lossy(&head), size_text(size))
                    }
                };
                tracing::info!(target: "agent", pid, "{line}");
                kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(&line);
            }
        });
        let ending = Arc::new(AtomicBool::new(false));
        let expected = ending.clone();
        let overflow = input.overflow.clone();
        tokio::spawn(async move {
            let reason = match child.wait().await {
                Ok(_) if overflow.load(Ordering::Relaxed) => format!(
                    "stopped reading its input (over {} waited for it): it was stopped as hung",
                    size_text(max_message())
                ),
                Ok(status) => describe(status),
                Err(e) => format!("could not be waited for: {e}"),
            };
            // Its last lines come before the news of its death (a grandchild holding stdout
            // open must not stall us forever).
            // So are its last stderr lines, which the error quotes.
            let _ = tokio::time::timeout(Duration::from_millis(500), async {
                let _ = tokio::join!(reader, stderr_reader);
            })
            .await;
            if expected.load(Ordering::Relaxed) {
                tracing::info!(pid, generation, "agent stopped ({reason})");
            } else {
                tracing::warn!(pid, generation, "agent {reason}");
            }
            let _ = events.send(UpstreamEvent::Exited { generation, reason }.into()).await;
        });
        Ok(AgentProcess { pid, stdin: input, ending, tail })
    }

    /// Its last stderr lines (complete once its exit has been reported).
    pub fn tail(&self) -> Arc<Mutex<StderrTail>> {
        self.tail.clone()
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Queues one line for its stdin (bounded: see the module's note).
    pub fn send(&self, line: String) {
        self.stdin.send(Bytes::from(line));
    }

    /// SIGTERM to its process group, SIGKILL after a short grace (only when some of it is still
    /// there: an agent that ends on SIGTERM ends the wait); whether the group is gone
    /// within 2 s more (a backend restart reports a group that refused to die).
    pub async fn stop(self) -> bool {
        let Some(pgid) = self.group() else { return true };
        self.ending.store(true, Ordering::Relaxed);
        let gone = || matches!(killpg(pgid, None), Err(nix::errno::Errno::ESRCH));
        let _ = killpg(pgid, Signal::SIGTERM);
        let until = tokio::time::Instant::now() + KILL_GRACE;
        while !gone() && tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = killpg(pgid, Signal::SIGKILL);
        let until = tokio::time::Instant::now() + Duration::from_secs(2);
        while !gone() && tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        gone()
    }

    fn group(&self) -> Option<Pid> {
        i32::try_from(self.pid).ok().filter(|p| *p > 0).map(Pid::from_raw)
    }

    /// SIGTERM to its process group, SIGKILL after a short grace, without waiting.
    pub fn kill(self) {
        self.ending.store(true, Ordering::Relaxed);
        kill_group(self.pid);
    }
}

/// SIGTERM to process group `pid`, SIGKILL after a short grace, without waiting.
fn kill_group(pid: u32) {
    let Ok(raw) = i32::try_from(pid) else { return };
    if raw <= 0 {
        return;
    }
    let pgid = Pid::from_raw(raw);
    let _ = killpg(pgid, Signal::SIGTERM);
    std::thread::spawn(move || {
        std::thread::sleep(KILL_GRACE);
        let _ = killpg(pgid, Signal::SIGKILL);
    });
}

/// What stands for a stdout line of `size` bytes over `limit`, refused unread (logged): an
/// answer becomes an error answer to the same id (the client that asked gets an error, not a
/// wait for ever); a request is answered with an error on the agent's stdin; a notification,
/// or a line whose id is not among its first bytes, is dropped (`None`).
fn refused(
    pid: u32,
    size: usize,
    head: &[u8],
    limit: usize,
    answers: &Answers,
) -> Option<Result<RawMessage, ParseError>> {
    let env = crate::bounds::head_id(head);
    let (size, limit) = (size_text(size), size_text(limit));
    let what = match (&env.id, env.method) {
        (Some(_), false) => "an answer: its request fails",
        (Some(_), true) => "a request: answered with an error",
        (None, _) => "dropped",
    };
    tracing::warn!(
        pid,
        "the agent wrote a message of {size}, over the {limit} limit: refused unread ({what})"
    );
    let id = env.id?;
    if env.method {
        let input = Input {
            tx: answers.tx.upgrade()?,
            queued: answers.queued.clone(),
            overflow: answers.overflow.clone(),
            pid,
        };
        let error = serde_json::json!({"code": zcode_shared::jsonrpc::INVALID_REQUEST,
            "message": format!("zcode-acp: a message of over {limit} was refused ({size})")});
        input.send(Bytes::from(zcode_shared::jsonrpc::response_line(&id, Err(error))));
        return None;
    }
    let error = serde_json::json!({"code": zcode_shared::jsonrpc::INTERNAL_ERROR,
        "message": format!("zcode-acp: the agent's answer was over the {limit} limit ({size}) and was refused")});
    Some(RawMessage::parse(&zcode_shared::jsonrpc::response_line(&id, Err(error))))
}

fn describe(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => {
            let name = Signal::try_from(sig).map_or_else(|_| sig.to_string(), |s| s.as_str().to_owned());
            format!("was killed by {name}")
        }
        _ => "exited".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_the_last_lines_bounded_and_inert() {
        let mut t = StderrTail::default();
        for i in 0..30 {
            t.push(&format!("line {i}"));
        }
        t.push("\x1b[31mred\x1b[0m and a bell\x07");
        t.push("   ");
        let text = t.text();
        assert_eq!(text.lines().count(), TAIL_LINES);
        assert!(text.starts_with("line 11\n"), "{text}");
        assert!(text.ends_with("line 29\nred and a bell"), "{text}");
        t.push(&"é".repeat(5000));
        assert!(t.text().len() <= TAIL_BYTES, "{}", t.text().len());
        assert_eq!(t.text().lines().count(), 1, "a long line pushes the rest out");
    }
}
