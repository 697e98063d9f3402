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
use nix::sys::signal::Signal;
use std::collections::{BTreeMap, VecDeque};
use std::process::Stdio;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use zcode_shared::jsonrpc::{ParseError, RawMessage};
use zcode_shared::procgroup::{Group, Handle};

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
    /// To stop it as hung (guarded against a reused group id).
    group: Handle,
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
                self.group.signal(Signal::SIGTERM);
                let group = self.group.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(KILL_GRACE);
                    group.signal(Signal::SIGKILL);
                });
            }
            return;
        }
        let _ = self.tx.send(line);
    }
}

/// The stdout reader's way to the agent's stdin ([`refused`]), which does not keep it open.
struct Answers {
    tx: mpsc::WeakUnboundedSender<Bytes>,
    group: Handle,
    queued: Arc<AtomicUsize>,
    overflow: Arc<AtomicBool>,
}

/// A running agent process.
pub struct AgentProcess {
    pid: u32,
    /// Its process group (dropped: killed, all of it).
    group: Group,
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
        let mut cmd = std::process::Command::new(&spec.command);
        cmd.args(&spec.args)
            .envs(&spec.env)
            // The token is the bridge's, not the agent's: nothing the agent runs may read it.
            .env_remove("ZCODE_ACP_REMOTE_TOKEN")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // Its own group, so killing it takes its children (npx → node → …) along.
        let spawned = Group::spawn(&mut cmd)?;
        let group = spawned.group;
        let pid = group.id();
        let (Some(stdin), Some(stdout), Some(stderr)) = (spawned.stdin, spawned.stdout, spawned.stderr)
        else {
            return Err(std::io::Error::other("agent stdio was not captured"));
        };
        let mut stdin = tokio::process::ChildStdin::from_std(stdin)?;
        let stdout = tokio::process::ChildStdout::from_std(stdout)?;
        let stderr = tokio::process::ChildStderr::from_std(stderr)?;
        let (tx, mut rx) = mpsc::unbounded_channel::<Bytes>();
        // Its tasks' lines (its stderr's among them) name it; not inside whatever span the
        // router was handling when it started the agent.
        let span = tracing::info_span!(parent: None, "agent", generation, pid);
        let input = Input {
            tx,
            queued: Arc::new(AtomicUsize::new(0)),
            overflow: Arc::new(AtomicBool::new(false)),
            pid,
            group: group.handle(),
        };
        let written = input.queued.clone();
        spawn_in(&span, async move {
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
            group: input.group.clone(),
            queued: input.queued.clone(),
            overflow: input.overflow.clone(),
        };
        let reader = spawn_in(&span, async move {
            let limit = max_message();
            let mut lines = LineReader::new(stdout, limit);
            loop {
                // Not a line more while the editor's outbox or the journal's channel is full.
                crate::bounds::EDITOR.below().await;
                crate::bounds::JOURNAL.below().await;
                crate::bounds::ROUTER.below().await;
                let msg = match lines.next().await {
                    Ok(Some(Line::Text(line))) if line.trim().is_empty() => continue,
                    Ok(Some(Line::Text(line))) => RawMessage::parse(&line),
                    Ok(Some(Line::TooLong { size, head })) => {
                        let Some(msg) = refused(pid, size, &head, limit, &answers) else { continue };
                        msg
                    }
                    Ok(None) | Err(_) => break,
                };
                crate::bounds::ROUTER.admit(&msg).await;
                let size = crate::bounds::Gate::message_size(&msg);
                if reader_events.send(UpstreamEvent::Line { generation, msg }.into()).await.is_err() {
                    crate::bounds::ROUTER.sub(size);
                    break;
                }
            }
        });
        let tail = Arc::new(Mutex::new(StderrTail::default()));
        let kept = tail.clone();
        let stderr_reader = spawn_in(&span, async move {
            let mut lines = LineReader::new(stderr, STDERR_LINE);
            while let Ok(Some(line)) = lines.next().await {
                let line = match line {
                    Line::Text(line) => line,
                    Line::TooLong { size, head } => {
                        format!("{}… (a line of {}, cut)", String::from_utf8_lossy(&head), size_text(size))
                    }
                };
                tracing::info!(target: "agent", "{line}");
                kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(&line);
            }
        });
        let ending = Arc::new(AtomicBool::new(false));
        let expected = ending.clone();
        let overflow = input.overflow.clone();
        let exit = group.exit_future();
        spawn_in(&span, async move {
            let status = exit.await;
            let reason = if overflow.load(Ordering::Relaxed) {
                format!(
                    "stopped reading its input (over {} waited for it): it was stopped as hung",
                    size_text(max_message())
                )
            } else {
                describe(status)
            };
            // Its last lines come before the news of its death (a grandchild holding stdout
            // open must not stall us forever).
            // So are its last stderr lines, which the error quotes.
            let _ = tokio::time::timeout(Duration::from_millis(500), async {
                let _ = tokio::join!(reader, stderr_reader);
            })
            .await;
            if expected.load(Ordering::Relaxed) {
                tracing::info!("agent stopped ({reason})");
            } else {
                tracing::warn!("agent {reason}");
            }
            let _ = events.send(UpstreamEvent::Exited { generation, reason }.into()).await;
        });
        Ok(AgentProcess { pid, group, stdin: input, ending, tail })
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

    /// SIGTERM to its process group, SIGKILL to what is left once it exited or after a short
    /// grace; whether the group is gone within 2 s more (a backend restart reports a group
    /// that refused to die).
    pub async fn stop(self) -> bool {
        self.ending.store(true, Ordering::Relaxed);
        self.group.terminate(KILL_GRACE, Duration::from_secs(2)).await
    }

    /// SIGTERM to its process group, SIGKILL after a short grace, without waiting.
    pub fn kill(self) {
        self.ending.store(true, Ordering::Relaxed);
        self.group.signal(Signal::SIGTERM);
        let group = self.group;
        std::thread::spawn(move || {
            let _ = group.wait_exit(KILL_GRACE);
            // Dropped: SIGKILL to what is left of the group, and the leader reaped.
            drop(group);
        });
    }
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
            group: answers.group.clone(),
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

/// Spawns `task` inside `span` (an agent process's: its tasks' lines name it).
fn spawn_in<F>(span: &tracing::Span, task: F) -> tokio::task::JoinHandle<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    tokio::spawn(tracing::Instrument::instrument(task, span.clone()))
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
