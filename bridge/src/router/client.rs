//! The router's view of one connected client: its outbox, what it advertised, what it is
//! attached to, and which of the agent's requests it holds copies of.

use bytes::Bytes;
use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use zcode_shared::jsonrpc::Id;

/// A client's id inside this bridge. The editor is always [`EDITOR`].
pub type ClientId = u64;

/// The editor on stdio.
pub const EDITOR: ClientId = 0;

/// A remote client's queued live writes may not pass this many bytes: past it, it is
/// disconnected. Replay batches are bounded separately (see [`Outbox::send_batch`]).
pub const REMOTE_QUEUE_LIMIT: usize = 8 * 1024 * 1024;

/// One entry of an outbox: a live message, or a whole replay batch the writer feeds to the
/// socket line by line as it drains.
#[derive(Debug)]
enum Item {
    Line(Bytes),
    Batch(Vec<Bytes>),
}

/// Where a client's messages go: a queue drained by the connection's writer, with byte counts
/// so a client that stops reading is noticed instead of waited for.
///
/// Live messages and replay batches share one queue, so their order is the order they were
/// queued (a batch is atomic: nothing interleaves with it). They are bounded apart: the live
/// bytes waiting (behind a batch too) by `limit`; a replay batch is exempt while it is the
/// only one waiting, so one slow client can take a replay of any size at its own pace.
///
/// An idle client's queue holds no buffer: it is allocated when a message is queued and given
/// back when the writer finds it empty (a channel would keep its first block, ~1 KiB, for the
/// client's life; thousands of idle clients are the common case behind the hub).
#[derive(Debug)]
pub struct Outbox {
    shared: Arc<Shared>,
    limit: Option<usize>,
}

/// The writer's end of an [`Outbox`].
pub struct OutboxReader {
    shared: Arc<Shared>,
    /// The rest of the replay batch being written (none once it is done: its buffer, a slot
    /// per replayed line, is not kept). Boxed: 8 bytes, not 32, in every idle client.
    batch: Option<Box<std::vec::IntoIter<Bytes>>>,
}

/// What both ends share.
#[derive(Debug, Default)]
struct Shared {
    queue: Mutex<Queue>,
    /// Live bytes waiting.
    queued: AtomicUsize,
    /// Replay bytes waiting (batches the writer has not started).
    replay: AtomicUsize,
    /// The editor's: its live bytes are counted in this gate too, which the agent's reader
    /// waits on ([`crate::bounds::EDITOR`]).
    gate: Option<&'static crate::bounds::Gate>,
}

#[derive(Debug, Default)]
struct Queue {
    items: VecDeque<Item>,
    /// The writer, parked on an empty queue.
    waker: Option<Waker>,
    /// The router dropped the client: the writer ends once the queue is drained.
    closed: bool,
    /// The writer is gone: nothing more is queued.
    gone: bool,
    /// The router dropped the client at once (not reading, shutdown): see [`Outbox::kill`].
    killed: bool,
    /// Killed by a [`Killer`] with this close code (not the router's 1001).
    cut: Option<u16>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `item`; `false` when the writer is gone.
    fn push(&self, item: Item) -> bool {
        let waker = {
            let mut q = self.lock();
            if q.gone {
                return false;
            }
            q.items.push_back(item);
            q.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
        true
    }
}

impl Outbox {
    /// A new outbox; `limit` bounds the queued bytes (`None`: never dropped).
    pub fn new(limit: Option<usize>) -> (Outbox, OutboxReader) {
        let shared = Arc::new(Shared::default());
        (Outbox { shared: shared.clone(), limit }, OutboxReader { shared, batch: None })
    }

    /// The editor's outbox: never dropped, and bounded instead by the agent's reader, which
    /// stops reading the agent while more than [`crate::bounds::max_message`] bytes wait here
    /// ([`crate::bounds::EDITOR`]).
    pub fn editor() -> (Outbox, OutboxReader) {
        let shared = Arc::new(Shared { gate: Some(&crate::bounds::EDITOR), ..Shared::default() });
        (Outbox { shared: shared.clone(), limit: None }, OutboxReader { shared, batch: None })
    }

    /// The live-bytes limit (`None`: never dropped).
    pub fn limit(&self) -> Option<usize> {
        self.limit
    }

    /// Queues one live message. `false` when the client is gone or over its limit.
    pub fn send(&self, line: Bytes) -> bool {
        let total = self.shared.queued.fetch_add(line.len(), Ordering::Relaxed) + line.len();
        if self.limit.is_some_and(|l| total > l) {
            return false;
        }
        let Some(gate) = self.shared.gate else { return self.shared.push(Item::Line(line)) };
        let len = line.len();
        gate.add(len);
        let queued = self.shared.push(Item::Line(line));
        if !queued {
            gate.sub(len);
        }
        queued
    }

    /// Queues a replay batch (its lines and the answer), written in one piece and paced by the
    /// socket. A batch is never refused for its own size: memory is the journal slice, already
    /// read. A batch queued while another still waits for the writer must fit, with the
    /// waiting ones, in the limit; `false` when it does not (a client that asks for replays
    /// faster than it reads them) or the client is gone.
    pub fn send_batch(&self, lines: Vec<Bytes>) -> bool {
        let size: usize = lines.iter().map(Bytes::len).sum();
        let waiting = self.shared.replay.fetch_add(size, Ordering::Relaxed);
        if waiting > 0 && self.limit.is_some_and(|l| waiting + size > l) {
            return false;
        }
        self.shared.push(Item::Batch(lines))
    }

    /// Ends the connection now, without waiting for the queue to drain (a client that does not
    /// read, shutdown): its task sees [`OutboxReader::poll_killed`]. A flag here rather than a
    /// cancellation token per client: a token is a tree node (~128 B) and a waiter in the
    /// task, for each of thousands of idle clients.
    pub fn kill(&self) {
        self.shared.kill(None);
    }

    /// A handle that ends the connection like [`Outbox::kill`], with a close code of its
    /// own: how a handed-over client is cut when its hub says so ([`crate::handoff`]).
    pub fn killer(&self) -> Killer {
        Killer { shared: self.shared.clone() }
    }
}

/// Ends one client's connection with a close code (see [`Outbox::killer`]).
pub struct Killer {
    shared: Arc<Shared>,
}

impl Killer {
    /// Ends the connection now, its close frame carrying `code`.
    pub fn kill_with(&self, code: u16) {
        self.shared.kill(Some(code));
    }
}

impl Shared {
    fn kill(&self, cut: Option<u16>) {
        let waker = {
            let mut q = self.lock();
            q.killed = true;
            q.cut = q.cut.or(cut);
            q.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        let waker = {
            let mut q = self.shared.lock();
            q.closed = true;
            q.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl OutboxReader {
    /// The next message to write; `None` once the router dropped the client (and everything
    /// it queued before was taken). Cancel-safe.
    pub async fn recv(&mut self) -> Option<Bytes> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// [`OutboxReader::recv`] as a poll: `Pending` registers `cx` to be woken by the next
    /// message. An empty queue gives its buffer back here.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        loop {
            if let Some(line) = self.batch_line() {
                return Poll::Ready(Some(line));
            }
            let mut q = self.shared.lock();
            let Some(item) = q.items.pop_front() else {
                if q.closed {
                    return Poll::Ready(None);
                }
                if q.items.capacity() > 0 {
                    q.items = VecDeque::new();
                }
                if !q.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    q.waker = Some(cx.waker().clone());
                }
                return Poll::Pending;
            };
            drop(q);
            if let Some(line) = self.take(item) {
                return Poll::Ready(Some(line));
            }
        }
    }

    /// `Ready` once the router killed the client ([`Outbox::kill`]); `Pending` registers `cx`
    /// (the same task's waker as [`OutboxReader::poll_recv`]'s: one slot serves both).
    pub fn poll_killed(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let mut q = self.shared.lock();
        if q.killed {
            return Poll::Ready(());
        }
        if !q.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            q.waker = Some(cx.waker().clone());
        }
        Poll::Pending
    }

    /// The close code a [`Killer`] ended the connection with, if one did.
    pub fn cut_code(&self) -> Option<u16> {
        self.shared.lock().cut
    }

    /// The next message if one is queued now (a writer batching what piled up).
    /// A replay batch is taken like in [`OutboxReader::recv`], a line at a time.
    pub fn try_recv(&mut self) -> Option<Bytes> {
        loop {
            if let Some(line) = self.batch_line() {
                return Some(line);
            }
            let item = self.shared.lock().items.pop_front()?;
            if let Some(line) = self.take(item) {
                return Some(line);
            }
        }
    }

    /// The next line of the replay batch being written; the batch's buffer goes once it is done.
    fn batch_line(&mut self) -> Option<Bytes> {
        let batch = self.batch.as_mut()?;
        let line = batch.next();
        if batch.len() == 0 {
            self.batch = None;
        }
        line
    }

    /// Counts an item out of the queue: a live line is returned; a replay batch becomes the
    /// batch being written (it no longer counts as waiting) and `None` is returned.
    fn take(&mut self, item: Item) -> Option<Bytes> {
        match item {
            Item::Line(line) => {
                self.shared.queued.fetch_sub(line.len(), Ordering::Relaxed);
                if let Some(gate) = self.shared.gate {
                    gate.sub(line.len());
                }
                Some(line)
            }
            Item::Batch(lines) => {
                let size: usize = lines.iter().map(Bytes::len).sum();
                self.shared.replay.fetch_sub(size, Ordering::Relaxed);
                self.batch = Some(Box::new(lines.into_iter()));
                None
            }
        }
    }
}

impl Drop for OutboxReader {
    fn drop(&mut self) {
        let mut q = self.shared.lock();
        q.gone = true;
        // What was queued for a writer that is gone is freed now, not with the router's entry.
        let items = std::mem::take(&mut q.items);
        if let Some(gate) = self.shared.gate {
            gate.sub(items.iter().map(|i| if let Item::Line(l) = i { l.len() } else { 0 }).sum());
        }
    }
}

/// What kind of connection a client is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientKind {
    /// The editor that spawned the bridge, on stdio.
    Editor,
    /// A remote client on the loopback WebSocket (dialled by the hub).
    Remote,
}

/// What a client advertised in `initialize`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Caps {
    /// `fs.readTextFile`.
    pub read: bool,
    /// `fs.writeTextFile`.
    pub write: bool,
    /// `terminal`.
    pub terminal: bool,
    /// `elicitation.form` (present and not null).
    pub elicit_form: bool,
    /// `elicitation.url` (present and not null).
    pub elicit_url: bool,
    /// `_meta.zcode.turnEnd`: an editor that asks for the live `_zcode/turn_end` (the
    /// `chat` client, which shows another device's turn ending); remote clients always get it.
    pub turn_end: bool,
}

impl Caps {
    /// Reads `clientCapabilities` from initialize params.
    pub fn from_params(params: &serde_json::Value) -> Caps {
        let c = &params["clientCapabilities"];
        Caps {
            read: c["fs"]["readTextFile"] == true,
            write: c["fs"]["writeTextFile"] == true,
            terminal: c["terminal"] == true,
            elicit_form: c["elicitation"].get("form").is_some_and(|v| !v.is_null()),
            elicit_url: c["elicitation"].get("url").is_some_and(|v| !v.is_null()),
            turn_end: c["_meta"]["zcode"]["turnEnd"] == true,
        }
    }

    /// Whether this client may be sent the agent's message `method` (request or
    /// notification): an elicitation only if it advertised the elicitation's mode (ACP: an
    /// omitted or null mode means unsupported); anything else always.
    pub fn accepts(&self, method: &str, params: &serde_json::Value) -> bool {
        match method {
            // URL mode is the only one that completes out of band.
            "elicitation/complete" => self.elicit_url,
            m if m.starts_with("elicitation/") => match params["mode"].as_str() {
                Some("url") => self.elicit_url,
                // MCP's rule, which ACP follows: a request without a mode is a form.
                Some("form") | None => self.elicit_form,
                Some(_) => false,
            },
            _ => true,
        }
    }

    /// Whether this client can serve the agent request `method` itself.
    pub fn serves(&self, method: &str) -> bool {
        match method {
            "fs/read_text_file" => self.read,
            "fs/write_text_file" => self.write,
            m if m.starts_with("terminal/") => self.terminal,
            _ => false,
        }
    }
}

/// Where a client is in its handshake.
#[derive(Clone, Debug, PartialEq)]
pub enum Init {
    /// Nothing but `initialize` is accepted yet.
    No,
    /// Its `initialize` waits for the upstream agent's (boxed: a rare state, and every
    /// client's entry is as big as its largest).
    Waiting(Box<Id>),
    /// Initialized.
    Done,
}

/// One connected client.
pub struct Client {
    /// Editor or remote.
    pub kind: ClientKind,
    /// What it may send ([`super::watch`] judges a watcher's messages).
    pub scope: zcode_shared::scope::Scope,
    /// Whose it is, as the hub said (see `Event::Connected`): who the audit trail names.
    pub device: Option<Box<str>>,
    /// Its queue.
    pub outbox: Outbox,
    /// Handshake state.
    pub init: Init,
    /// What it advertised.
    pub caps: Caps,
    /// Its `clientInfo.name`, made inert (who prompted a turn, on the turn board).
    pub name: Option<String>,
    /// Sessions it created or loaded.
    pub sessions: BTreeSet<String>,
    /// Agent requests it holds a copy of (by the id it was sent with). A tree, not a hash
    /// set: empty it is 24 bytes and no allocation, where a hash set is 48 with its hasher's
    /// keys, in every idle client's entry.
    pub copies: BTreeSet<u64>,
    /// Replays being read for it: while any is, its other messages wait in `held`.
    pub holds: u32,
    /// Messages waiting behind a replay.
    pub held: Vec<Bytes>,
    /// Their bytes, bounded like the live queue.
    pub held_bytes: usize,
    /// Its loads in flight that asked to resume by number (`_meta.zcode.afterSeq`).
    pub resumes: Vec<(Id, super::backlog::Resume)>,
}

impl Client {
    /// A freshly connected client.
    pub fn new(kind: ClientKind, outbox: Outbox) -> Client {
        Client {
            kind,
            scope: zcode_shared::scope::Scope::Full,
            device: None,
            outbox,
            init: Init::No,
            caps: Caps::default(),
            name: None,
            sessions: BTreeSet::new(),
            copies: BTreeSet::new(),
            holds: 0,
            held: Vec::new(),
            held_bytes: 0,
            resumes: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_remote_outbox_refuses_past_its_limit_and_counts_down_as_it_drains() {
        let (out, mut reader) = Outbox::new(Some(10));
        assert!(out.send(Bytes::from_static(b"12345")));
        assert!(out.send(Bytes::from_static(b"12345")));
        assert!(!out.send(Bytes::from_static(b"1")), "11 bytes queued is over a 10-byte limit");
        let (out, mut reader2) = Outbox::new(Some(10));
        assert!(out.send(Bytes::from_static(b"1234567890")));
        assert_eq!(reader2.recv().await.unwrap(), Bytes::from_static(b"1234567890"));
        assert!(out.send(Bytes::from_static(b"1234567890")), "drained bytes no longer count");
        assert!(reader.recv().await.is_some());
    }

    fn lines(n: usize, size: usize) -> Vec<Bytes> {
        (0..n).map(|i| Bytes::from(format!("{i:0size$}"))).collect()
    }

    #[tokio::test]
    async fn a_replay_batch_past_the_limit_is_taken_at_the_writers_pace_and_live_lines_wait_behind_it() {
        let (out, mut reader) = Outbox::new(Some(10));
        assert!(out.send(Bytes::from_static(b"l0")));
        // 40 bytes of replay, four times the live limit: queued, not refused.
        assert!(out.send_batch(lines(4, 10)));
        // Live lines behind the batch are bounded by the limit as before.
        assert!(out.send(Bytes::from_static(b"l1")));
        assert!(out.send(Bytes::from_static(b"l2")));
        let mut got = Vec::new();
        for _ in 0..7 {
            got.push(reader.recv().await.unwrap());
        }
        let want: Vec<Bytes> = [Bytes::from_static(b"l0")]
            .into_iter()
            .chain(lines(4, 10))
            .chain([Bytes::from_static(b"l1"), Bytes::from_static(b"l2")])
            .collect();
        assert_eq!(got, want, "the batch whole, in order, live lines after it");
        assert!(out.send(Bytes::from_static(b"1234567890")), "everything drained");
    }

    #[tokio::test]
    async fn live_lines_queued_behind_a_replay_still_hit_the_limit() {
        let (out, mut reader) = Outbox::new(Some(10));
        assert!(out.send_batch(lines(100, 10)));
        assert_eq!(reader.recv().await.unwrap(), lines(1, 10)[0], "the writer is in the batch");
        assert!(out.send(Bytes::from_static(b"12345")));
        assert!(out.send(Bytes::from_static(b"12345")));
        assert!(!out.send(Bytes::from_static(b"1")), "a client behind on live traffic still goes");
    }

    #[tokio::test]
    async fn replays_asked_faster_than_read_are_bounded() {
        let (out, mut reader) = Outbox::new(Some(10));
        assert!(out.send_batch(lines(3, 10)), "the first waiting batch may be any size");
        assert!(!out.send_batch(lines(1, 1)), "a second one behind a big waiting batch is refused");
        let (out, mut reader2) = Outbox::new(Some(10));
        assert!(out.send_batch(lines(3, 10)));
        reader2.recv().await.unwrap();
        // The first is being written (not waiting): the next may again be any size…
        assert!(out.send_batch(lines(3, 10)));
        // …but a third behind it must fit the limit with it.
        assert!(!out.send_batch(lines(1, 1)));
        assert!(reader.recv().await.is_some());
        // The editor's outbox has no limit.
        let (out, _reader) = Outbox::new(None);
        assert!(out.send_batch(lines(3, 10)) && out.send_batch(lines(3, 10)) && out.send_batch(lines(3, 10)));
    }

    #[test]
    fn try_recv_takes_what_is_queued_in_order_replay_lines_included_and_counts_them_down() {
        let (out, mut reader) = Outbox::new(Some(10));
        assert!(out.send(Bytes::from_static(b"l0")));
        assert!(out.send_batch(lines(3, 10)));
        assert!(out.send(Bytes::from_static(b"l1")));
        let mut got = Vec::new();
        while let Some(line) = reader.try_recv() {
            got.push(line);
        }
        let mut want = vec![Bytes::from_static(b"l0")];
        want.extend(lines(3, 10));
        want.push(Bytes::from_static(b"l1"));
        assert_eq!(got, want);
        assert!(out.send_batch(lines(1, 10)), "nothing waits: a new replay is taken whatever its size");
        assert!(out.send(Bytes::from_static(b"0123456789")), "the live bytes were counted down");
    }

    #[tokio::test]
    async fn a_drained_outbox_keeps_no_buffer_not_even_a_replay_batchs() {
        let (out, mut reader) = Outbox::new(Some(1 << 20));
        assert_eq!(out.shared.lock().items.capacity(), 0, "nothing allocated before a message");
        for i in 0..100 {
            assert!(out.send(Bytes::from(format!("{i}"))));
        }
        assert!(out.send_batch(lines(1000, 10)));
        for _ in 0..1100 {
            reader.recv().await.unwrap();
        }
        assert!(reader.batch.is_none(), "the finished batch's buffer is not kept");
        // The writer finds the queue empty and parks: the queue's buffer goes.
        let parked = tokio::time::timeout(std::time::Duration::from_millis(10), reader.recv()).await;
        assert!(parked.is_err());
        assert_eq!(out.shared.lock().items.capacity(), 0, "an idle client holds no queue");
        // …and a message queued after that still wakes the writer.
        let woken = tokio::spawn(async move { reader.recv().await });
        tokio::task::yield_now().await;
        assert!(out.send(Bytes::from_static(b"again")));
        assert_eq!(woken.await.unwrap(), Some(Bytes::from_static(b"again")));
    }

    #[tokio::test]
    async fn the_editors_outbox_counts_its_live_bytes_in_the_gate_the_agents_reader_waits_on() {
        let _one = crate::bounds::EDITOR_GATE_TESTS.lock().await;
        let gate = &crate::bounds::EDITOR;
        let before = gate.bytes();
        let (out, mut reader) = Outbox::editor();
        assert!(out.send(Bytes::from_static(b"12345")) && out.send(Bytes::from_static(b"678")));
        assert!(out.send_batch(lines(3, 10)), "a replay is not live: not counted");
        assert_eq!(gate.bytes(), before + 8);
        assert_eq!(reader.recv().await, Some(Bytes::from_static(b"12345")));
        assert_eq!(gate.bytes(), before + 3, "taken bytes no longer count");
        drop(reader);
        assert_eq!(gate.bytes(), before, "what a gone writer never took no longer counts");
        assert!(!out.send(Bytes::from_static(b"x")));
        assert_eq!(gate.bytes(), before, "nor what was refused");
    }

    #[tokio::test]
    async fn the_writer_ends_after_what_was_queued_and_a_gone_writer_takes_nothing() {
        let (out, mut reader) = Outbox::new(Some(100));
        assert!(out.send(Bytes::from_static(b"last")));
        assert!(out.send_batch(lines(2, 3)));
        drop(out);
        assert_eq!(reader.recv().await, Some(Bytes::from_static(b"last")));
        assert_eq!(reader.recv().await, Some(lines(2, 3)[0].clone()));
        assert_eq!(reader.recv().await, Some(lines(2, 3)[1].clone()));
        assert_eq!(reader.recv().await, None, "the router dropped the client");
        let (out, reader) = Outbox::new(Some(100));
        assert!(out.send(Bytes::from_static(b"queued")));
        drop(reader);
        assert!(!out.send(Bytes::from_static(b"x")) && !out.send_batch(lines(1, 1)));
        assert_eq!(out.shared.lock().items.capacity(), 0, "what was queued for it is freed");
    }

    #[test]
    fn capabilities_decide_who_serves_fs_and_terminal() {
        let caps = Caps::from_params(&serde_json::json!({
            "clientCapabilities": {"fs": {"readTextFile": true, "writeTextFile": false}, "terminal": true}
        }));
        assert!(caps.serves("fs/read_text_file"));
        assert!(!caps.serves("fs/write_text_file"));
        assert!(caps.serves("terminal/create"));
        assert!(!caps.serves("session/request_permission"));
    }

    #[test]
    fn elicitations_go_only_to_a_client_that_advertised_their_mode() {
        let form = serde_json::json!({"mode": "form", "message": "?"});
        let url = serde_json::json!({"mode": "url", "url": "https://example.com"});
        let none = Caps::from_params(&serde_json::json!({"clientCapabilities": {}}));
        let empty = Caps::from_params(&serde_json::json!({"clientCapabilities": {"elicitation": {}}}));
        let nulls = Caps::from_params(
            &serde_json::json!({"clientCapabilities": {"elicitation": {"form": null, "url": null}}}),
        );
        for c in [&none, &empty, &nulls] {
            assert!(
                !c.accepts("elicitation/create", &form) && !c.accepts("elicitation/create", &url),
                "{c:?}"
            );
            assert!(c.accepts("session/request_permission", &form));
        }
        let f = Caps::from_params(&serde_json::json!({"clientCapabilities": {"elicitation": {"form": {}}}}));
        assert!(f.accepts("elicitation/create", &form));
        assert!(f.accepts("elicitation/create", &serde_json::json!({"message": "no mode: a form"})));
        assert!(!f.accepts("elicitation/create", &url) && !f.accepts("elicitation/complete", &url));
        let u = Caps::from_params(&serde_json::json!({"clientCapabilities": {"elicitation": {"url": {}}}}));
        assert!(
            u.accepts("elicitation/create", &url)
                && u.accepts("elicitation/complete", &serde_json::json!({}))
        );
        assert!(!u.accepts("elicitation/create", &form));
    }
}
