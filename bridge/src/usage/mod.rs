//! Token usage, recorded by every bridge for any agent, and read back for `/settings/usage`.
//!
//! - [`track`]: what the router shows it (a one-line hook each in `router::usage_hook`): the
//!   model of each session (from `session/new`/`load` answers' `configOptions` of category
//!   `model` or their `models` state, `config_option_update`s, and the answers to
//!   `session/set_config_option` / `session/set_model`; `unknown` until the agent says), the
//!   tool calls of the running turn, `usage_update` notifications and the `usage` of
//!   `session/prompt` answers.
//! - [`Recorder`]: one thread per bridge writing them to the machine's store (its own
//!   connection; `zcode_shared::store::usage` says what is counted, and why nothing is
//!   counted twice), and answering reports.
//! - [`http`]: `GET /settings/usage?range=7d|30d|all` on the loopback server.

pub mod http;
pub mod track;

pub use track::Tracker;

use serde_json::Value;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;
use zcode_shared::store::Store;
use zcode_shared::store::usage::{ContextUsage, TurnUsage, UsageRange};

type ReportReply = tokio::sync::oneshot::Sender<Result<Value, String>>;

enum Op {
    Turn(TurnUsage),
    Context(ContextUsage),
    Report(UsageRange, ReportReply),
    Flush(mpsc::Sender<()>),
}

/// The handle on the usage thread (cheap to clone). Records are stamped when handed over,
/// `backdate` earlier (a test knob: `timings.usageBackdateMs`).
#[derive(Clone)]
pub struct Recorder {
    tx: Option<mpsc::Sender<Op>>,
    backdate: Duration,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").field("enabled", &self.tx.is_some()).finish()
    }
}

impl Recorder {
    /// Starts the usage thread on the store in `data_dir` (opened on first use, and again
    /// after a failure).
    pub fn start(data_dir: PathBuf, backdate: Duration) -> Recorder {
        let (tx, rx) = mpsc::channel::<Op>();
        let spawned = std::thread::Builder::new().name("usage".into()).spawn(move || run(&data_dir, &rx));
        match spawned {
            Ok(_) => Recorder { tx: Some(tx), backdate },
            Err(e) => {
                tracing::warn!("usage recording is off: cannot start its thread: {e}");
                Recorder::disabled()
            }
        }
    }

    /// A recorder that keeps nothing and reports that no store is available.
    pub fn disabled() -> Recorder {
        Recorder { tx: None, backdate: Duration::ZERO }
    }

    fn stamp(&self) -> u64 {
        zcode_shared::time::now_ms().saturating_sub(self.backdate.as_millis() as u64)
    }

    /// Records a finished turn's usage.
    pub fn turn(&self, mut u: TurnUsage) {
        u.at = self.stamp();
        if let Some(tx) = &self.tx {
            let _ = tx.send(Op::Turn(u));
        }
    }

    /// Records a `usage_update`.
    pub fn context(&self, mut u: ContextUsage) {
        u.at = self.stamp();
        if let Some(tx) = &self.tx {
            let _ = tx.send(Op::Context(u));
        }
    }

    /// The usage payload for `range`, read after every record handed over before it.
    pub async fn report(&self, range: UsageRange) -> Result<Value, String> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        let Some(tx) = &self.tx else { return Err("no store: usage is not recorded".into()) };
        tx.send(Op::Report(range, reply)).map_err(|_| "the usage thread is gone".to_owned())?;
        rx.await.map_err(|_| "the usage thread is gone".to_owned())?
    }

    /// Waits until everything handed over is written (tests, shutdown).
    pub fn flush(&self) {
        let (tx, rx) = mpsc::channel();
        if self.tx.as_ref().is_some_and(|t| t.send(Op::Flush(tx)).is_ok()) {
            let _ = rx.recv_timeout(Duration::from_secs(5));
        }
    }
}

/// The most records written in one transaction (an agent flooding `usage_update`s costs one
/// commit per batch, not one per notification).
const BATCH_MAX: usize = 1000;

fn run(data_dir: &std::path::Path, rx: &mpsc::Receiver<Op>) {
    let mut store: Option<Store> = None;
    let mut warned = false;
    while let Ok(first) = rx.recv() {
        let mut ops = vec![first];
        while ops.len() < BATCH_MAX {
            match rx.try_recv() {
                Ok(op) => ops.push(op),
                Err(_) => break,
            }
        }
        if store.is_none() {
            match Store::open_in(data_dir) {
                Ok(s) => store = Some(s),
                Err(e) if !warned => {
                    warned = true;
                    tracing::warn!("usage is not recorded: {e}");
                }
                Err(_) => {}
            }
        }
        // The records first, in one transaction; then the reads and flushes, which so see them.
        if let Some(st) = store.as_mut() {
            let written = st.write(|w| {
                for op in &ops {
                    match op {
                        Op::Turn(u) => {
                            w.record_turn_usage(u)?;
                        }
                        Op::Context(u) => {
                            w.record_context_usage(u)?;
                        }
                        Op::Report(..) | Op::Flush(_) => {}
                    }
                }
                Ok(())
            });
            if let Err(e) = written {
                tracing::warn!("token usage was not recorded: {e}");
            }
        }
        for op in ops {
            match (op, store.as_ref()) {
                (Op::Report(range, reply), Some(st)) => {
                    let now = zcode_shared::time::now_ms();
                    let _ = reply.send(st.read(|s| s.usage_report(range, now)).map_err(|e| e.to_string()));
                }
                (Op::Report(_, reply), None) => {
                    let _ = reply.send(Err("the store cannot be opened (see the bridge's log)".into()));
                }
                (Op::Flush(done), _) => {
                    let _ = done.send(());
                }
                (Op::Turn(_) | Op::Context(_), _) => {}
            }
        }
    }
}
