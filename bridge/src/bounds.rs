//! What bounds the bridge's memory by bytes: the largest message ([`max_message`],
//! `ZCODE_ACP_MAX_MESSAGE_MIB`, 64 MiB), the line reader that refuses a longer line without
//! holding it ([`LineReader`]), and the byte gates the agent's stdout reader waits on
//! ([`EDITOR`]: the editor's outbox; [`JOURNAL`]: the journal's channel), and the one every
//! reader feeding the router waits on ([`ROUTER`]: its event channel). The agent's stdin
//! queue is bounded in [`crate::upstream`], a remote client's outbox by
//! [`crate::router::REMOTE_QUEUE_LIMIT`].
//!
//! Every queue's bound is the message limit: a queue must take one whole message, and a
//! smaller limit (the tests' 1 MiB) shrinks them all together.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::Notify;
use zcode_shared::jsonrpc::{Id, ParseError, RawMessage};

/// The default of `ZCODE_ACP_MAX_MESSAGE_MIB`.
pub const DEFAULT_MAX_MESSAGE_MIB: usize = 64;

/// The largest line read from the editor or the agent, in bytes (`ZCODE_ACP_MAX_MESSAGE_MIB`,
/// read once per process), and the bound of every queue the agent's reader waits on.
pub fn max_message() -> usize {
    static MAX: OnceLock<usize> = OnceLock::new();
    *MAX.get_or_init(|| {
        let mib = std::env::var("ZCODE_ACP_MAX_MESSAGE_MIB")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|m| *m > 0)
            .unwrap_or(DEFAULT_MAX_MESSAGE_MIB);
        mib.saturating_mul(1 << 20)
    })
}

/// `bytes` as a person reads it: "64 MiB", "1.5 MiB", "200 bytes".
pub fn size_text(bytes: usize) -> String {
    const MIB: usize = 1 << 20;
    if bytes >= MIB && bytes % MIB == 0 {
        format!("{} MiB", bytes / MIB)
    } else if bytes >= MIB {
        #[allow(clippy::cast_precision_loss)] // a size shown to a person
        let mib = bytes as f64 / MIB as f64;
        format!("{mib:.1} MiB")
    } else {
        format!("{bytes} bytes")
    }
}

/// A count of bytes waiting in a queue, which the agent's stdout reader waits on while it is
/// over the limit ([`Gate::below`]). The queue's producer adds, its consumer subtracts.
#[derive(Debug)]
pub struct Gate {
    bytes: AtomicUsize,
    /// A reader waits: the consumer wakes it when the count is back under the limit.
    waiting: AtomicBool,
    notify: Notify,
}

/// The editor's outbox: live bytes queued for the editor's stdout.
pub static EDITOR: Gate = Gate::new();

/// The journal's channel: `session/update` bytes sent to the journal thread and not yet taken.
pub static JOURNAL: Gate = Gate::new();

/// The router's event channel: the bytes of the messages the editor's, the remote clients' and
/// the agent's readers sent to the router and it has not taken yet ([`Gate::message_taken`]).
/// Its count of events alone would let 4096 messages of up to the limit each wait.
pub static ROUTER: Gate = Gate::new();

impl Gate {
    const fn new() -> Gate {
        Gate { bytes: AtomicUsize::new(0), waiting: AtomicBool::new(false), notify: Notify::const_new() }
    }

    /// `n` more bytes wait.
    pub fn add(&self, n: usize) {
        self.bytes.fetch_add(n, Ordering::SeqCst);
    }

    /// `n` bytes were taken; a waiting reader is woken once the count is under the limit.
    pub fn sub(&self, n: usize) {
        let now = self.bytes.fetch_sub(n, Ordering::SeqCst).saturating_sub(n);
        if now <= max_message() && self.waiting.load(Ordering::SeqCst) {
            self.waiting.store(false, Ordering::SeqCst);
            self.notify.notify_waiters();
        }
    }

    /// The bytes waiting.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::SeqCst)
    }

    /// More than [`max_message`] bytes wait.
    pub fn over(&self) -> bool {
        self.bytes() > max_message()
    }

    /// The bytes of a message a reader sends on (0 for one that did not parse).
    pub fn message_size(msg: &Result<RawMessage, ParseError>) -> usize {
        msg.as_ref().map_or(0, RawMessage::size)
    }

    /// Waits while over the limit, then counts `msg` in: for a reader about to send it.
    pub async fn admit(&self, msg: &Result<RawMessage, ParseError>) {
        self.below().await;
        self.add(Self::message_size(msg));
    }

    /// The router took `msg` (or it was never delivered): counted out.
    pub fn message_taken(&self, msg: &Result<RawMessage, ParseError>) {
        self.sub(Self::message_size(msg));
    }

    /// Returns once at most [`max_message`] bytes wait (at once when they do: two atomic loads).
    pub async fn below(&self) {
        while self.over() {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            self.waiting.store(true, Ordering::SeqCst);
            if !self.over() {
                return;
            }
            notified.await;
        }
    }
}

/// What [`LineReader::next`] read.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A line (without its newline; invalid UTF-8 replaced).
    Text(String),
    /// A line over the limit, skipped to its newline: its size, and its first bytes.
    TooLong {
        /// Its size in bytes.
        size: usize,
        /// Its first [`HEAD`] bytes, where a JSON-RPC envelope's `id` usually is.
        head: Vec<u8>,
    },
}

/// How much of a refused line is kept, to find its `id` ([`head_id`]).
pub const HEAD: usize = 4096;

/// Newline-delimited lines of at most `limit` bytes from a byte stream. A longer line is read
/// through to its newline without being held (only its first [`HEAD`] bytes are kept), so
/// memory stays at the limit whatever the other side writes, and the stream goes on after it.
pub struct LineReader<R> {
    inner: BufReader<R>,
    limit: usize,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    /// A reader of `inner` refusing lines over `limit` bytes.
    pub fn new(inner: R, limit: usize) -> LineReader<R> {
        LineReader { inner: BufReader::with_capacity(64 * 1024, inner), limit }
    }

    /// The next line; `None` at the end of the stream. Cancel-unsafe (a partial line is lost).
    pub async fn next(&mut self) -> std::io::Result<Option<Line>> {
        let mut line = Vec::new();
        let mut size = 0usize;
        let mut head: Option<Vec<u8>> = None;
        loop {
            let buf = self.inner.fill_buf().await?;
            if buf.is_empty() {
                return Ok(match head {
                    Some(head) => Some(Line::TooLong { size, head }),
                    None if line.is_empty() => None,
                    None => Some(Line::Text(text(line))),
                });
            }
            let newline = buf.iter().position(|b| *b == b'\n');
            let part = &buf[..newline.unwrap_or(buf.len())];
            size += part.len();
            match &mut head {
                None if size > self.limit => {
                    let keep = HEAD.saturating_sub(line.len()).min(part.len());
                    line.extend_from_slice(&part[..keep]);
                    line.truncate(HEAD);
                    head = Some(std::mem::take(&mut line));
                }
                None => line.extend_from_slice(part),
                Some(_) => {}
            }
            let used = newline.map_or(buf.len(), |i| i + 1);
            self.inner.consume(used);
            if newline.is_some() {
                return Ok(Some(match head {
                    Some(head) => Line::TooLong { size, head },
                    None => Line::Text(text(line)),
                }));
            }
        }
    }
}

fn text(line: Vec<u8>) -> String {
    String::from_utf8(line).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// What the start of a refused line says of its JSON-RPC envelope: its `id` and whether it has
/// a `method`, as far as the top-level members before the first object or array (the params
/// or result, the big part) tell. Serializers put `jsonrpc`, `id` and `method` first.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Envelope {
    /// The `id`, when one came before the big part.
    pub id: Option<Id>,
    /// Whether a `method` came before the big part (a request or notification).
    pub method: bool,
}

/// Reads the top-level scalar members at the start of a JSON object ([`Envelope`]).
pub fn head_id(head: &[u8]) -> Envelope {
    let mut env = Envelope::default();
    let mut s = Scan { b: head, at: 0 };
    if !s.eat(b'{') {
        return env;
    }
    loop {
        let Some(key) = s.string() else { return env };
        if !s.eat(b':') {
            return env;
        }
        s.ws();
        let start = s.at;
        match s.b.get(s.at) {
            Some(b'"') => {
                if s.string().is_none() {
                    return env;
                }
            }
            Some(c) if c.is_ascii_digit() || *c == b'-' || matches!(c, b't' | b'f' | b'n') => {
                while s.b.get(s.at).is_some_and(|c| !matches!(c, b',' | b'}') && !c.is_ascii_whitespace()) {
                    s.at += 1;
                }
            }
            _ => return env,
        }
        let raw = &s.b[start..s.at];
        match key.as_str() {
            "id" => {
                env.id =
                    serde_json::from_slice::<serde_json::Value>(raw).ok().as_ref().and_then(Id::from_value);
            }
            "method" => env.method = true,
            _ => {}
        }
        if !s.eat(b',') {
            return env;
        }
    }
}

struct Scan<'a> {
    b: &'a [u8],
    at: usize,
}

impl Scan<'_> {
    fn ws(&mut self) {
        while self.b.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        self.ws();
        if self.b.get(self.at) == Some(&c) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    /// A JSON string at the cursor (after white space), decoded.
    fn string(&mut self) -> Option<String> {
        self.ws();
        let start = self.at;
        if self.b.get(self.at) != Some(&b'"') {
            return None;
        }
        self.at += 1;
        loop {
            match self.b.get(self.at)? {
                b'\\' => self.at += 2,
                b'"' => {
                    self.at += 1;
                    return serde_json::from_slice(&self.b[start..self.at]).ok();
                }
                _ => self.at += 1,
            }
        }
    }
}

/// Unit tests that count on [`EDITOR`]'s exact figure take turns.
#[cfg(test)]
pub static EDITOR_GATE_TESTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(input: &[u8], limit: usize) -> Vec<Line> {
        let mut r = LineReader::new(input, limit);
        let mut out = vec![];
        while let Some(l) = r.next().await.unwrap() {
            out.push(l);
        }
        out
    }

    #[tokio::test]
    async fn a_line_over_the_limit_is_refused_with_its_head_and_the_stream_goes_on() {
        let mut input = b"short\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', 10_000));
        input.extend(b"\n\nlast");
        let got = lines(&input, 100).await;
        assert_eq!(got[0], Line::Text("short".into()));
        assert_eq!(got[1], Line::TooLong { size: 10_000, head: vec![b'x'; HEAD] });
        assert_eq!(got[2..], [Line::Text(String::new()), Line::Text("last".into())]);
        // Exactly the limit is fine; one more byte is not; invalid UTF-8 is replaced.
        let got = lines(b"12345\n123456\n\xff\n", 5).await;
        assert_eq!(got[0], Line::Text("12345".into()));
        assert!(matches!(&got[1], Line::TooLong { size: 6, head } if head == b"123456"));
        assert_eq!(got[2], Line::Text("\u{fffd}".into()));
    }

    #[test]
    fn the_head_of_a_refused_line_tells_its_id_when_it_comes_before_the_big_part() {
        let h = |s: &str| head_id(s.as_bytes());
        assert_eq!(
            h(r#"{"jsonrpc":"2.0","id":7,"result":{"x":"aaaa"#),
            Envelope { id: Some(Id::from(7)), method: false }
        );
        assert_eq!(
            h(r#" { "jsonrpc" : "2.0" , "id" : "a\"b", "method":"session/prompt","params":{"#),
            Envelope { id: Some(Id::String("a\"b".into())), method: true }
        );
        assert_eq!(h(r#"{"jsonrpc":"2.0","method":"session/update","params":{"id":3"#).id, None);
        assert_eq!(h(r#"{"params":{"id":3},"id":4"#), Envelope::default());
        assert_eq!(h("xxxxxxxx"), Envelope::default());
    }

    #[tokio::test]
    async fn a_gate_lets_the_reader_through_once_the_bytes_fall_under_the_limit() {
        static G: Gate = Gate::new();
        G.add(max_message() + 1);
        let waiter = tokio::spawn(async { G.below().await });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        G.sub(1);
        waiter.await.unwrap();
        G.sub(max_message());
        assert_eq!(G.bytes(), 0);
    }
}
