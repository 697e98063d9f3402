//! The journal: every session's history, written to the machine's SQLite store by one thread
//! per bridge process, merged into the contract's messages, and read back as replay slices.
//!
//! The router hands it `session/update` lines as they fan out (cheap: a channel send that
//! wakes nobody while a batch is open); the thread parses, merges ([`merge`]) and commits in
//! small batches (a write is durable within 100 ms of its send, [`BATCH_WINDOW`], unless the
//! machine stalls the commit). A read
//! is queued behind every write the router sent before it, so it sees exactly the history the
//! router had at that instant: the replay's read and the start of the client's queue are one
//! atomic step.

pub mod merge;
pub mod replay;
pub mod turn_end;

pub use replay::{MAX_LIMIT, ReadError, ReadMode, Slice};

use bytes::Bytes;
use merge::{Effect, Merger};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use zcode_shared::store::devices::AuditRow;
use zcode_shared::store::{NewMessage, SessionMeta, Store, StoreError, TurnRecord};

/// The longest a write waits, from when the router sends it, until it is committed.
pub const BATCH_WINDOW: Duration = Duration::from_millis(WINDOW_MS);
const WINDOW_MS: u64 = 100;
/// A batch's commit starts once its oldest write has waited this long: the other half of
/// [`BATCH_WINDOW`] is for the commit itself (~5–30 ms for 500 new messages on a 100 k-row
/// store, longer on a loaded machine), so a write is durable within the window, not a window
/// plus a commit (plus the commit before it, which the write waited behind).
const COMMIT_AFTER: Duration = Duration::from_millis(WINDOW_MS / 2);
/// A batch is committed early once it holds this many operations.
const BATCH_MAX: usize = 1000;
/// A commit that failed (the store locked past its busy timeout, a full disk) keeps its batch
/// and is tried again after this, doubled per failure up to [`RETRY_MAX`]; writes sent
/// meanwhile join the batch. Tests shorten both and the busy timeout with
/// `ZCODE_ACP_TEST_JOURNAL_BUSY_MS` (the busy timeout, ms; the backoff starts there).
const RETRY_FIRST: Duration = Duration::from_millis(250);
const RETRY_MAX: Duration = Duration::from_secs(10);
/// From this many failed commits in a row the failure is reported (`journalError` in the
/// registration and the bridge's `/status`): the first retry failed too.
const REPORT_AFTER: u32 = 2;
/// A batch kept through failures is dropped past this many writes (memory stays bounded in
/// a store that never comes back); the loss is logged and stays reported until a commit works.
const PENDING_MAX: usize = 200_000;
/// …or past this many times the message limit in update bytes ([`crate::bounds`]).
const PENDING_MESSAGES: usize = 4;

/// Where a read's answer goes.
pub type Reply = Box<dyn FnOnce(Result<Slice, ReadError>) + Send>;

/// Where a delete's answer goes.
pub type DeleteReply = Box<dyn FnOnce(Result<(), String>) + Send>;

/// A read of the store, run on the journal thread after every write sent before it.
pub type Query = Box<dyn FnOnce(Option<&Store>) + Send>;

enum Op {
    Meta(SessionMeta, bool),
    Title { session: String, title: String, overridden: bool },
    Update { session: String, line: Bytes, seed: bool },
    EndSeed { session: String },
    TurnEnd(TurnRecord),
    Audit(Box<AuditRow>, &'static str),
    Read { session: String, mode: ReadMode, reply: Reply },
    Delete { session: String, reply: DeleteReply },
    Query(Query),
    Flush(mpsc::Sender<()>),
}

impl Op {
    /// Someone waits for this op's answer: it wakes the thread even while a batch is open.
    fn awaited(&self) -> bool {
        matches!(self, Op::Read { .. } | Op::Delete { .. } | Op::Query(_) | Op::Flush(_))
    }
}

/// The journal connection's page cache, KiB.
const JOURNAL_CACHE_KIB: u32 = 256;

/// The handle the router holds. Cloning is cheap; a disabled journal (no store) answers every
/// read with an empty history, so the bridge keeps serving without one.
#[derive(Clone)]
pub struct Journal {
    /// The writer thread's channel (each op with when it was sent: a batch's age counts from
    /// its oldest write's send) and the thread itself, unparked for an [`Op::awaited`] op (see
    /// [`Worker::run`]). `None`: disabled.
    to: Option<(mpsc::Sender<(Instant, Op)>, std::thread::Thread)>,
    /// Why the journal cannot commit, while it cannot ([`REPORT_AFTER`]): `journalError`.
    error: tokio::sync::watch::Receiver<Option<String>>,
}

/// Retention: a session keeps at most this many messages (older whole turns are dropped).
#[derive(Clone, Copy, Debug)]
pub struct Retention {
    /// The most messages kept per session.
    pub max_messages: u64,
}

impl Journal {
    /// Opens the store in `data_dir` and starts the writer thread.
    pub fn open(data_dir: &Path, retention: Retention) -> Result<Journal, StoreError> {
        let store = Store::open_in(data_dir)?;
        // The bridge's memory budget (20 MiB with 50 clients and 100 k journaled messages;
        // `scripts/bench-bridge`) has no room for SQLite's default 2 MiB page cache: appends touch
        // only the tree's right edge, and a replay reads its slice once.
        store.cap_cache(JOURNAL_CACHE_KIB)?;
        let knob =
            zcode_shared::env::test_knob(&zcode_shared::env::ProcessEnv, "ZCODE_ACP_TEST_JOURNAL_BUSY_MS")
                .and_then(|v| v.parse().ok())
                .map(Duration::from_millis);
        let retry = match knob {
            Some(busy) => {
                store.set_busy_timeout(busy)?;
                Retry { first: busy, max: busy * 4 }
            }
            None => Retry { first: RETRY_FIRST, max: RETRY_MAX },
        };
        let (tx, rx) = mpsc::channel();
        let (error_tx, error) = tokio::sync::watch::channel(None);
        let mut worker = Worker::new(store, retention);
        worker.retry = retry;
        worker.error = Some(error_tx);
        let thread = std::thread::Builder::new()
            .name("journal".into())
            .spawn(move || worker.run(&rx))
            .map_err(|e| StoreError::Open { path: data_dir.to_owned(), reason: e.to_string() })?;
        Ok(Journal { to: Some((tx, thread.thread().clone())), error })
    }

    /// A journal that keeps nothing (the store could not be opened).
    pub fn disabled() -> Journal {
        Journal { to: None, error: tokio::sync::watch::channel(None).1 }
    }

    /// Why the journal cannot commit, while a commit has failed [`REPORT_AFTER`] times in a
    /// row (`journalError`); `None` once one succeeds.
    pub fn error(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        self.error.clone()
    }

    fn send(&self, op: Op) -> Result<(), Op> {
        let Some((tx, thread)) = &self.to else { return Err(op) };
        let awaited = op.awaited();
        tx.send((Instant::now(), op)).map_err(|e| e.0.1)?;
        if awaited {
            thread.unpark();
        }
        Ok(())
    }

    /// Records where a session lives (`workspace` is resolved to its real path on the journal
    /// thread); `revive`: real use from an editor or CLI, which cancels a tombstone (see
    /// `Writer::set_meta`).
    pub fn meta(&self, meta: SessionMeta, revive: bool) {
        let _ = self.send(Op::Meta(meta, revive));
    }

    /// Records a session's title (`overridden`: a rename, which automatic titles never replace).
    pub fn title(&self, session: &str, title: &str, overridden: bool) {
        let _ = self.send(Op::Title { session: session.into(), title: title.into(), overridden });
    }

    /// Records one `session/update` line. `seed`: it is the agent's replay of a session being
    /// loaded, kept only if the journal has nothing for that session yet.
    /// Its bytes count in [`crate::bounds::JOURNAL`] until the thread takes it: the agent's
    /// reader waits while more than the message limit is queued (a journal that falls behind
    /// slows the agent down instead of growing without bound).
    pub fn update(&self, session: &str, line: Bytes, seed: bool) {
        let len = line.len();
        crate::bounds::JOURNAL.add(len);
        if self.send(Op::Update { session: session.into(), line, seed }).is_err() {
            crate::bounds::JOURNAL.sub(len);
        }
    }

    /// The agent's replay of `session` is over.
    pub fn end_seed(&self, session: &str) {
        let _ = self.send(Op::EndSeed { session: session.into() });
    }

    /// Records how the session's current turn ended (its number is the journal's: the turn
    /// of the newest message written before this).
    pub fn turn_end(&self, rec: TurnRecord) {
        let _ = self.send(Op::TurnEnd(rec));
    }

    /// Records in the audit trail what a client did here (a prompt, a permission answered),
    /// with the next commit; `fallback_name` names a device the store does not list (`machine`,
    /// `editor`).
    pub fn audit(&self, row: AuditRow, fallback_name: &'static str) {
        let _ = self.send(Op::Audit(Box::new(row), fallback_name));
    }

    /// Reads a slice; `reply` runs on the journal thread (or here, when disabled).
    pub fn read(&self, session: &str, mode: ReadMode, reply: Reply) {
        if let Err(Op::Read { reply, session, mode }) =
            self.send(Op::Read { session: session.into(), mode, reply })
        {
            reply(empty_slice(&session, &mode));
        }
    }

    /// Tombstones a session in the tasks index (creating its row if needed).
    pub fn delete(&self, session: &str, reply: DeleteReply) {
        if let Err(Op::Delete { reply, .. }) = self.send(Op::Delete { session: session.into(), reply }) {
            reply(Err("the journal is not available".into()));
        }
    }

    /// Runs `query` against the store once everything sent before it is committed (`None`:
    /// no store).
    pub fn query(&self, query: Query) {
        if let Err(Op::Query(q)) = self.send(Op::Query(query)) {
            q(None);
        }
    }

    /// Commits everything sent so far and waits for it (shutdown, tests).
    pub fn flush(&self) {
        let (tx, rx) = mpsc::channel();
        if self.send(Op::Flush(tx)).is_ok() {
            let _ = rx.recv_timeout(Duration::from_secs(5));
        }
    }
}

fn empty_slice(session: &str, mode: &ReadMode) -> Result<Slice, ReadError> {
    if let ReadMode::Earlier { .. } = mode {
        return Err(ReadError::CursorExpired);
    }
    let meta = serde_json::json!({"cursor": replay::encode(session, 0, 1), "hasMore": false, "replayedMessages": 0,
        "replayedTurns": 0, "totalMessages": 0, "totalTurns": 0, "lastMessageId": null});
    Ok(Slice { lines: vec![], remote_only: vec![], meta, title: None })
}

/// A `session/update` line, its `update` left as the text received.
#[derive(Deserialize)]
struct UpdateLine<'a> {
    #[serde(borrow)]
    params: UpdateParams<'a>,
}

/// The params of a `session/update`.
#[derive(Deserialize)]
struct UpdateParams<'a> {
    #[serde(borrow)]
    update: &'a RawValue,
}

/// A write waiting for the next commit.
enum Write {
    Meta(SessionMeta, bool),
    Title { session: String, title: String, overridden: bool },
    Append { session: String, key: u64, msg_id: String, kind: &'static str },
    Body { session: String, key: u64 },
    State { session: String, kind: String, body: String },
    Turn(TurnRecord),
    Audit(Box<AuditRow>, &'static str),
}

/// Per-session state of the writer.
struct SessionState {
    merger: Merger,
    /// Seqs of messages the merger may still rewrite.
    seqs: HashMap<u64, i64>,
    /// While the agent replays a session being loaded: keep its replay (journal was empty)?
    seeding: Option<bool>,
    /// The session ended (its turn ended, its load's replay ended, or it was deleted) and
    /// nothing came since: its state is dropped after the next successful commit (no write of
    /// the batch then refers to its keys). A later update starts a fresh merger.
    ended: bool,
}

/// How a failed commit is retried.
#[derive(Clone, Copy)]
struct Retry {
    first: Duration,
    max: Duration,
}

/// The failed commits of the batch being kept.
struct Failing {
    /// Failed commits in a row.
    count: u32,
    /// When the next try is due.
    at: Instant,
}

struct Worker {
    store: Store,
    retention: Retention,
    sessions: HashMap<String, SessionState>,
    batch: Vec<Write>,
    /// Latest merged body (JSON text) per (session, key) of this batch.
    bodies: HashMap<(String, u64), String>,
    /// When the oldest write of the batch was sent.
    since: Option<Instant>,
    /// The update bytes taken into the batch: it is committed early at the message limit
    /// (its merged bodies are held until then).
    batch_bytes: usize,
    /// When the op being handled was sent.
    sent: Instant,
    prefix: String,
    /// Merger states made so far: each one's generated ids are its own.
    made: u64,
    retry: Retry,
    /// Set while commits fail: the batch is kept and tried again at `at`.
    failing: Option<Failing>,
    /// Where a reported failure goes ([`Journal::error`]).
    error: Option<tokio::sync::watch::Sender<Option<String>>>,
}

impl Worker {
    fn new(store: Store, retention: Retention) -> Worker {
        let prefix = format!("{:x}", zcode_shared::time::now_ms());
        Worker {
            store,
            retention,
            sessions: HashMap::new(),
            batch: vec![],
            bodies: HashMap::new(),
            since: None,
            batch_bytes: 0,
            sent: Instant::now(),
            prefix,
            made: 0,
            retry: Retry { first: RETRY_FIRST, max: RETRY_MAX },
            failing: None,
            error: None,
        }
    }

    /// When the open batch is due: its window, or the next try of a failed commit.
    fn due(&self) -> Option<Instant> {
        match &self.failing {
            Some(f) => Some(f.at),
            None => self.since.map(|t| t + COMMIT_AFTER),
        }
    }

    /// The thread's loop. With no batch open it waits in `recv`: the first write wakes it.
    /// While a batch is open it does not wait on the channel (a sender wakes a receiver
    /// blocked in `recv` on every send: a futex wake per streamed update, a fifth of the
    /// bridge's CPU in a fan-out, `scripts/bench-bridge`). It parks until the batch is due,
    /// then takes what came meanwhile; an op someone waits for ([`Op::awaited`]) unparks it.
    fn run(mut self, rx: &mpsc::Receiver<(Instant, Op)>) {
        loop {
            // A kept batch at its bound takes nothing more until its retry: the channel fills,
            // and the agent's reader waits on it ([`crate::bounds::JOURNAL`]).
            if let Some(f) = &self.failing
                && self.batch_bytes >= PENDING_MESSAGES * crate::bounds::max_message()
            {
                match f.at.checked_duration_since(Instant::now()).filter(|left| !left.is_zero()) {
                    Some(left) => std::thread::park_timeout(left),
                    None => self.commit(),
                }
                continue;
            }
            let op = match self.due() {
                None => rx.recv().map_err(|_| mpsc::TryRecvError::Disconnected),
                Some(due) => match rx.try_recv() {
                    Err(mpsc::TryRecvError::Empty) => {
                        match due.checked_duration_since(Instant::now()).filter(|left| !left.is_zero()) {
                            Some(left) => std::thread::park_timeout(left),
                            None => self.commit(),
                        }
                        continue;
                    }
                    op => op,
                },
            };
            match op {
                Ok((at, op)) => {
                    self.sent = at;
                    self.taken(&op);
                    self.handle(op)
                }
                Err(_) => {
                    self.commit();
                    if !self.batch.is_empty() {
                        tracing::error!(
                            "journal: {} writes lost at exit (the store is not writable)",
                            self.batch.len()
                        );
                    }
                    return;
                }
            }
            let due = match &self.failing {
                // A stream of updates keeps the channel busy: a retry is not put off by it.
                Some(f) => Instant::now() >= f.at,
                None => {
                    self.batch.len() >= BATCH_MAX
                        || self.batch_bytes >= crate::bounds::max_message()
                        || self.since.is_some_and(|t| t.elapsed() >= COMMIT_AFTER)
                }
            };
            if due {
                // Everything already queued goes in this commit: a journal that fell behind
                // (a slow commit, a starved thread) catches up in big batches, not in one
                // commit per write that is already due.
                while self.batch.len() < BATCH_MAX && self.batch_bytes < crate::bounds::max_message() {
                    let Ok((at, op)) = rx.try_recv() else { break };
                    self.sent = at;
                    self.taken(&op);
                    self.handle(op);
                }
                self.commit();
            }
        }
    }

    /// An op is out of the channel: an update's bytes leave the journal's gate and join the
    /// batch's.
    fn taken(&mut self, op: &Op) {
        if let Op::Update { line, .. } = op {
            crate::bounds::JOURNAL.sub(line.len());
            self.batch_bytes += line.len();
        }
    }

    fn queue(&mut self, w: Write) {
        self.batch.push(w);
        self.since.get_or_insert(self.sent);
    }

    fn handle(&mut self, op: Op) {
        match op {
            Op::Meta(mut m, revive) => {
                // Resolved here, not on the router: a path lookup can block (a hung mount).
                if let Ok(p) = std::fs::canonicalize(&m.workspace) {
                    m.workspace = p.display().to_string();
                }
                self.queue(Write::Meta(m, revive))
            }
            Op::Title { session, title, overridden } => {
                self.queue(Write::Title { session, title, overridden })
            }
            Op::Update { session, line, seed } => self.update(session, &line, seed),
            Op::TurnEnd(rec) => {
                if let Some(s) = self.sessions.get_mut(&rec.session_id) {
                    s.ended = true;
                }
                self.queue(Write::Turn(rec))
            }
            Op::Audit(row, name) => self.queue(Write::Audit(row, name)),
            Op::EndSeed { session } => {
                if let Some(s) = self.sessions.get_mut(&session) {
                    s.seeding = None;
                    s.ended = true;
                }
            }
            Op::Read { session, mode, reply } => {
                self.commit_if_due();
                reply(replay::read(&self.store, &session, &mode));
            }
            Op::Delete { session, reply } => {
                self.commit_if_due();
                if let Some(s) = self.sessions.get_mut(&session) {
                    s.ended = true;
                }
                let now = zcode_shared::time::now_ms();
                reply(self.store.write(|w| w.set_deleted(&session, true, now)).map_err(|e| e.to_string()));
            }
            Op::Query(q) => {
                self.commit_if_due();
                q(Some(&self.store));
            }
            Op::Flush(done) => {
                self.commit();
                let _ = done.send(());
            }
        }
    }

    fn state(&mut self, session: &str) -> &mut SessionState {
        let (prefix, made) = (&self.prefix, &mut self.made);
        let s = self.sessions.entry(session.to_owned()).or_insert_with(|| {
            *made += 1;
            SessionState {
                merger: Merger::new(format!("{prefix}-{made:x}")),
                seqs: HashMap::new(),
                seeding: None,
                ended: false,
            }
        });
        s.ended = false;
        s
    }

    fn update(&mut self, session: String, line: &Bytes, seed: bool) {
        if seed && !self.keep_seed(&session) {
            return;
        }
        // The update is taken as the text it arrived as: the journal never re-encodes a value.
        let Ok(msg) = serde_json::from_slice::<UpdateLine<'_>>(line) else { return };
        let effects = self.state(&session).merger.apply(msg.params.update.get());
        for e in effects {
            match e {
                Effect::New { key, msg_id, kind, body } => {
                    self.bodies.insert((session.clone(), key), body);
                    self.queue(Write::Append { session: session.clone(), key, msg_id, kind });
                }
                Effect::Update { key, body } => {
                    self.bodies.insert((session.clone(), key), body);
                    self.queue(Write::Body { session: session.clone(), key });
                }
                Effect::State { kind, body } => {
                    self.queue(Write::State { session: session.clone(), kind, body });
                }
            }
        }
    }

    /// Whether to keep the agent's replay of `session`: only when the journal has nothing, in
    /// the store or in the batch (kept while commits fail: the store lacks it then).
    fn keep_seed(&mut self, session: &str) -> bool {
        if let Some(keep) = self.sessions.get(session).and_then(|s| s.seeding) {
            return keep;
        }
        self.commit_if_due();
        let pending =
            self.batch.iter().any(|w| matches!(w, Write::Append { session: s, .. } if s == session));
        let has =
            pending || self.store.counters(session).ok().flatten().is_some_and(|c| c.next_seq > c.first_seq);
        self.state(session).seeding = Some(!has);
        !has
    }

    /// Commits the batch, unless commits are failing and the next try is not due yet (a read
    /// then sees the store without the kept batch rather than wait on a locked store).
    fn commit_if_due(&mut self) {
        if self.failing.as_ref().is_none_or(|f| Instant::now() >= f.at) {
            self.commit();
        }
    }

    /// Commits the batch. A failed commit keeps it (and the merged bodies it refers to) for
    /// the next try ([`Retry`]): nothing of it was written, and the seqs it assigned are not
    /// kept, so the writer's state stays what the database holds.
    fn commit(&mut self) {
        if self.batch.is_empty() {
            self.since = None;
            self.batch_bytes = 0;
            return;
        }
        let batch = std::mem::take(&mut self.batch);
        let bodies = std::mem::take(&mut self.bodies);
        let now = zcode_shared::time::now_ms();
        let sessions = &self.sessions;
        let mut touched: HashSet<String> = HashSet::new();
        let mut seqs: Vec<(String, u64, i64)> = vec![];
        let result = self.store.write(|w| {
            let mut appended: HashSet<(String, u64)> = HashSet::new();
            let mut rewritten: HashSet<(String, u64)> = HashSet::new();
            let mut i = 0;
            while i < batch.len() {
                let write = &batch[i];
                i += 1;
                match write {
                    Write::Meta(m, revive) => w.set_meta(m, *revive, now)?,
                    Write::Title { session, title, overridden } => {
                        w.set_title(session, title, *overridden, now)?
                    }
                    Write::State { session, kind, body } => w.put_state(session, kind, body, now)?,
                    Write::Turn(rec) => w.put_turn(rec, now)?,
                    Write::Audit(row, name) => w.audit_add_seen(row, name)?,
                    Write::Append { session, .. } => {
                        // The run of appends to this session starting here goes in as one (the
                        // session's counters read and written once, not once per message).
                        let mut keys = vec![];
                        let mut msgs = vec![];
                        while let Some(Write::Append { session: s, key, msg_id, kind }) = batch.get(i - 1)
                            && (s == session)
                        {
                            let body = bodies.get(&(session.clone(), *key)).cloned().unwrap_or_default();
                            msgs.push(NewMessage { msg_id: msg_id.clone(), kind: (*kind).into(), body });
                            keys.push(*key);
                            i += 1;
                        }
                        i -= 1;
                        let first = w.append_all(session, &msgs, now)?;
                        seqs.extend(keys.iter().zip(first..).map(|(k, seq)| (session.clone(), *k, seq)));
                        appended.extend(keys.into_iter().map(|k| (session.clone(), k)));
                        touched.insert(session.clone());
                    }
                    Write::Body { session, key } => {
                        let k = (session.clone(), *key);
                        if appended.contains(&k) || !rewritten.insert(k.clone()) {
                            continue;
                        }
                        let seq = sessions.get(session).and_then(|s| s.seqs.get(key)).copied();
                        if let (Some(seq), Some(body)) = (seq, bodies.get(&k)) {
                            w.update_body(session, seq, body)?;
                        }
                    }
                }
            }
            Ok(())
        });
        if let Err(e) = result {
            self.failed(batch, bodies, &e);
            return;
        }
        self.since = None;
        self.batch_bytes = 0;
        if let Some(f) = self.failing.take() {
            tracing::info!("journal commit succeeded after {} failed tries", f.count);
        }
        self.report(None);
        for (session, key, seq) in seqs {
            if let Some(s) = self.sessions.get_mut(&session) {
                s.seqs.insert(key, seq);
            }
        }
        // Sessions that ended drop their state: nothing left in a batch refers to their keys.
        self.sessions.retain(|_, s| !s.ended);
        for s in self.sessions.values_mut() {
            let open: HashSet<u64> = s.merger.open_keys().into_iter().collect();
            s.seqs.retain(|k, _| open.contains(k));
        }
        for session in touched {
            self.enforce_retention(&session);
        }
    }

    /// A commit failed: its batch goes back in front of what came meanwhile, to be tried
    /// again after a backoff; from [`REPORT_AFTER`] failures on, the failure is reported.
    fn failed(&mut self, mut batch: Vec<Write>, bodies: HashMap<(String, u64), String>, e: &StoreError) {
        let count = self.failing.as_ref().map_or(0, |f| f.count) + 1;
        let wait = self.retry.first.saturating_mul(1 << (count - 1).min(16)).min(self.retry.max);
        self.failing = Some(Failing { count, at: Instant::now() + wait });
        // Bodies merged since are newer than the kept ones.
        let newer = std::mem::replace(&mut self.bodies, bodies);
        self.bodies.extend(newer);
        batch.append(&mut self.batch);
        self.batch = batch;
        if self.batch.len() > PENDING_MAX
            || self.batch_bytes >= PENDING_MESSAGES * crate::bounds::max_message()
        {
            tracing::error!("journal commit failed {count} times, {} writes dropped: {e}", self.batch.len());
            self.report(Some(format!("{} journal writes lost: {e}", self.batch.len())));
            self.batch.clear();
            self.batch_bytes = 0;
            self.bodies.clear();
            self.since = None;
            self.failing = None;
            // The writer's state refers to keys that were never written: start it over.
            self.sessions.clear();
            return;
        }
        let pending = self.batch.len();
        if count < REPORT_AFTER {
            tracing::warn!("journal commit failed ({pending} writes kept, retrying in {wait:?}): {e}");
        } else {
            if count == REPORT_AFTER {
                tracing::error!("journal commit keeps failing ({pending} writes kept, retrying): {e}");
            }
            self.report(Some(format!("history is not being saved (retrying): {e}")));
        }
    }

    /// Publishes why the journal cannot commit (`None`: it can).
    fn report(&self, error: Option<String>) {
        if let Some(tx) = &self.error {
            // Published only when it changes: a registration is sent per change.
            tx.send_if_modified(|cur| {
                let changed = *cur != error;
                if changed {
                    *cur = error;
                }
                changed
            });
        }
    }

    /// Drops the oldest whole turns of a session over its retention, bumping its epoch.
    fn enforce_retention(&mut self, session: &str) {
        let Ok(Some(c)) = self.store.counters(session) else { return };
        let max = self.retention.max_messages as i64;
        if c.next_seq - c.first_seq <= max {
            return;
        }
        // Keep 90% of the cap, cut at a turn boundary so no turn is left without its prompt.
        let cut = c.next_seq - max * 9 / 10;
        let cut = self.store.next_turn_start(session, cut).ok().flatten().unwrap_or(cut);
        if let Err(e) = self.store.write(|w| w.truncate_before(session, cut)) {
            tracing::warn!(session, "journal retention failed: {e}");
        }
    }
}

#[cfg(test)]
mod exact_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod turn_tests;
