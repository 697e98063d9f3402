//! One direction of a relay: bytes read from one leg, checked frame by frame, and written to
//! the other leg unchanged. Headers are parsed to find frame boundaries and enforce the rules
//! (masking direction, control frames, fragmentation, the 32 MiB message cap); payloads are
//! approved as they arrive, so a message is streamed, never assembled. A client's masked frames
//! go to the bridge with the client's own masking key: nothing is unmasked or re-masked.
//!
//! Memory: the 16 KiB buffer is taken from a per-thread pool when the source is read and given
//! back as soon as everything read has been written, so an idle pipe holds no buffer at all.
//! Backpressure: a full buffer is not read into; the unwritten bytes are the pipe's whole
//! write queue (16 KiB, well under the 8 MiB cap).

use super::MAX_MESSAGE;
use super::frame::{self, Malformed, Op};
use std::cell::RefCell;
use std::io::{self, ErrorKind};

/// The size of a pipe's buffer while it is in use.
pub const BUF: usize = 16 * 1024;
/// Buffers each thread keeps for reuse.
const POOL_MAX: usize = 64;

/// The payload of the hub's own pings; pongs carrying it are not forwarded.
pub const PING_PAYLOAD: &[u8] = b"zcode-hub";

thread_local! {
    static POOL: RefCell<Vec<Box<[u8]>>> = const { RefCell::new(Vec::new()) };
}

fn take_buffer() -> Box<[u8]> {
    POOL.with(|p| p.borrow_mut().pop()).unwrap_or_else(|| vec![0; BUF].into_boxed_slice())
}

fn give_buffer(b: Box<[u8]>) {
    if b.len() == BUF {
        POOL.with(|p| {
            let mut p = p.borrow_mut();
            if p.len() < POOL_MAX {
                p.push(b);
            }
        });
    }
}

/// Why a source's frames cannot be relayed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// A message over [`MAX_MESSAGE`] (close 1009).
    TooBig,
    /// A framing violation (close 1002).
    Protocol,
}

impl From<Malformed> for Fault {
    fn from(_: Malformed) -> Fault {
        Fault::Protocol
    }
}

/// What the approved frames carried that the relay reacts to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Found {
    /// A pong answering the hub's ping (the source has read up to that ping). Other pongs are
    /// relayed and count as any bytes read do.
    pub pong: bool,
    /// A close frame, with its code if it had one.
    pub close: Option<Option<u16>>,
}

/// The outcome of one read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    /// Bytes arrived and filled the room there was: there may be more.
    Data,
    /// Bytes arrived, fewer than there was room for: the socket is drained for now (its next
    /// bytes come with a new readiness event), which saves the read that would say so.
    Drained,
    /// The source closed its side.
    Eof,
    /// Nothing to read now (a readiness event will come).
    Pending,
    /// The buffer is full of unwritten bytes: write first.
    Full,
}

/// One direction. See the module docs.
pub struct Pipe {
    buf: Option<Box<[u8]>>,
    /// Written up to here.
    start: usize,
    /// Approved (checked, complete headers) up to here.
    fwd: usize,
    /// Read up to here.
    end: usize,
    /// Payload bytes of the current frame not yet approved (0: the next byte is a header).
    remaining: u64,
    /// Length so far of the data message being relayed (fragments added up).
    msg_len: u64,
    /// A fragmented message is in progress.
    in_message: bool,
    /// Frames arriving here must be masked (they come from the client), or must not be.
    masked: bool,
    /// The hub's own frames (pings, a close) waiting for a frame boundary.
    inject: Vec<u8>,
    injected: usize,
}

impl Pipe {
    /// A pipe whose source is a client (`masked`) or a bridge, starting with `early`: bytes
    /// read during the handshake.
    pub fn new(masked: bool, early: Vec<u8>) -> Pipe {
        let mut p = Pipe {
            buf: None,
            start: 0,
            fwd: 0,
            end: 0,
            remaining: 0,
            msg_len: 0,
            in_message: false,
            masked,
            inject: Vec::new(),
            injected: 0,
        };
        if !early.is_empty() {
            let mut b =
                if early.len() <= BUF { take_buffer() } else { vec![0; early.len()].into_boxed_slice() };
            b[..early.len()].copy_from_slice(&early);
            p.end = early.len();
            p.buf = Some(b);
        }
        p
    }

    /// Queues one of the hub's own frames; it goes out at the next frame boundary.
    pub fn queue(&mut self, frame: &[u8]) {
        self.inject.extend_from_slice(frame);
    }

    /// Whether an injected frame is still waiting.
    pub fn injecting(&self) -> bool {
        self.injected < self.inject.len()
    }

    /// Whether what has been approved ends at a frame boundary (a frame may be injected).
    pub fn at_boundary(&self) -> bool {
        self.remaining == 0
    }

    /// Whether anything approved or injected is still unwritten.
    pub fn pending(&self) -> bool {
        self.start < self.fwd || (self.at_boundary() && self.injecting())
    }

    /// Writes what it can to `dst` (non-blocking): approved bytes first, then (at a boundary)
    /// injected frames. Returns whether `dst` would block (it takes nothing more until its
    /// next readiness event).
    pub fn write<W: io::Write>(&mut self, dst: &mut W) -> io::Result<bool> {
        let mut blocked = false;
        loop {
            let chunk = match &self.buf {
                Some(b) if self.start < self.fwd => &b[self.start..self.fwd],
                _ if self.at_boundary() && self.injecting() => &self.inject[self.injected..],
                _ => break,
            };
            let n = match dst.write(chunk) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    blocked = true;
                    break;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if self.start < self.fwd {
                self.start += n;
            } else {
                self.injected += n;
                if self.injected == self.inject.len() {
                    // Freed, not kept: injected frames are rare (a ping per period).
                    self.inject = Vec::new();
                    self.injected = 0;
                }
            }
        }
        self.tidy();
        Ok(blocked)
    }

    /// Gives the buffer back when everything read has been written; otherwise moves a leftover
    /// partial header to the front once the rest is written.
    fn tidy(&mut self) {
        if self.start == self.end {
            self.start = 0;
            self.fwd = 0;
            self.end = 0;
            if let Some(b) = self.buf.take() {
                give_buffer(b);
            }
        } else if self.start == self.fwd && self.start > 0 {
            if let Some(b) = &mut self.buf {
                b.copy_within(self.start..self.end, 0);
            }
            self.end -= self.start;
            self.fwd = 0;
            self.start = 0;
        }
    }

    /// Whether the relay should read the source now: not while an injected frame waits at a
    /// boundary (reading on would keep it waiting).
    pub fn wants_read(&self) -> bool {
        !(self.at_boundary() && self.injecting())
    }

    /// Reads what the source has (non-blocking) into the buffer, taking one from the pool if
    /// needed.
    pub fn read<R: io::Read>(&mut self, src: &mut R) -> io::Result<Read> {
        let buf = self.buf.get_or_insert_with(take_buffer);
        let room = buf.len() - self.end;
        if room == 0 {
            return Ok(Read::Full);
        }
        match src.read(&mut buf[self.end..]) {
            Ok(0) => Ok(Read::Eof),
            Ok(n) => {
                self.end += n;
                Ok(if n < room { Read::Drained } else { Read::Data })
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                self.tidy();
                Ok(Read::Pending)
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => Ok(Read::Data),
            Err(e) => Err(e),
        }
    }

    /// Whether bytes were read that are not approved yet.
    pub fn unapproved(&self) -> bool {
        self.fwd < self.end
    }

    /// Checks the frames read so far and approves them for writing. Stops at a boundary
    /// while an injected frame waits. Pongs answering the hub's pings are dropped here.
    pub fn approve(&mut self) -> Result<Found, Fault> {
        let mut found = Found::default();
        let Some(buf) = &mut self.buf else { return Ok(found) };
        let result = loop {
            if self.remaining > 0 {
                let take = ((self.end - self.fwd) as u64).min(self.remaining);
                if take == 0 {
                    break Ok(());
                }
                self.fwd += take as usize;
                self.remaining -= take;
                continue;
            }
            if self.injected < self.inject.len() {
                break Ok(());
            }
            let h = match frame::parse(&buf[self.fwd..self.end]) {
                Ok(Some(h)) => h,
                Ok(None) => break Ok(()),
                Err(e) => break Err(e.into()),
            };
            if h.mask.is_some() != self.masked {
                break Err(Fault::Protocol);
            }
            if h.op.is_control() {
                let total = h.size + h.len as usize;
                if self.end - self.fwd < total {
                    break Ok(()); // at most 139 bytes: wait for the whole frame
                }
                let mut payload = buf[self.fwd + h.size..self.fwd + total].to_vec();
                if let Some(m) = h.mask {
                    frame::apply_mask(&mut payload, m);
                }
                match h.op {
                    Op::Pong if payload == PING_PAYLOAD => {
                        found.pong = true;
                        buf.copy_within(self.fwd + total..self.end, self.fwd);
                        self.end -= total;
                        continue;
                    }
                    Op::Close => found.close = Some(frame::close_code(&payload)),
                    _ => {}
                }
                self.fwd += total;
                continue;
            }
            match (h.op, self.in_message) {
                (Op::Continue, true) => self.msg_len += h.len,
                (Op::Text | Op::Binary, false) => self.msg_len = h.len,
                _ => break Err(Fault::Protocol),
            }
            if self.msg_len > MAX_MESSAGE as u64 {
                break Err(Fault::TooBig);
            }
            self.in_message = !h.fin;
            self.fwd += h.size;
            self.remaining = h.len;
        };
        // What was read may all have been a pong to the hub's ping, dropped above: nothing is
        // left to write (so no write gives the buffer back) and the read that brought it was
        // the socket's last for now (so no empty read does either). Given back here, or every
        // idle relay would keep a buffer per direction after its first ping.
        self.tidy();
        result.map(|()| found)
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        if let Some(b) = self.buf.take() {
            give_buffer(b);
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A data frame as a client sends it (masked) or a bridge does (not).
    pub(in crate::relay) fn data(op: u8, fin: bool, payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
        let mut f = vec![if fin { 0x80 } else { 0 } | op];
        let m = if mask.is_some() { 0x80 } else { 0 };
        match payload.len() {
            n if n < 126 => f.push(m | n as u8),
            n if n < 65536 => {
                f.push(m | 126);
                f.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                f.push(m | 127);
                f.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        let body = f.len() + mask.map_or(0, |_| 4);
        if let Some(k) = mask {
            f.extend_from_slice(&k);
        }
        f.extend_from_slice(payload);
        if let Some(k) = mask {
            frame::apply_mask(&mut f[body..], k);
        }
        f
    }

    /// Feeds `bytes` through a pipe in chunks of `step`, collecting what it would write.
    fn relay(masked: bool, bytes: &[u8], step: usize) -> (Vec<u8>, Result<Found, Fault>) {
        let mut p = Pipe::new(masked, Vec::new());
        let mut out = Vec::new();
        let mut all = Found::default();
        for chunk in bytes.chunks(step) {
            let mut src: &[u8] = chunk;
            while !src.is_empty() {
                assert!(matches!(p.read(&mut src).unwrap(), Read::Data | Read::Drained));
                match p.approve() {
                    Ok(f) => {
                        all.pong |= f.pong;
                        all.close = all.close.or(f.close);
                    }
                    Err(e) => return (out, Err(e)),
                }
                p.write(&mut out).unwrap();
            }
        }
        (out, Ok(all))
    }

    #[test]
    fn frames_pass_byte_for_byte_whatever_the_chunking() {
        let k = Some([1, 2, 3, 4]);
        let mut stream = data(1, true, b"{\"id\":1,\"result\":{}}", k);
        stream.extend(data(2, false, &[7u8; 70_000], k));
        stream.extend(frame::control(Op::Ping, b"hi", k));
        stream.extend(data(0, true, &[8u8; 300], k));
        for step in [1, 2, 13, 4096, 1 << 20] {
            let (out, r) = relay(true, &stream, step);
            assert_eq!(r, Ok(Found::default()), "step {step}");
            assert!(out == stream, "step {step}: the bytes changed");
        }
    }

    #[test]
    fn pongs_to_the_hub_are_dropped_and_others_kept_and_closes_reported() {
        let mut stream = frame::control(Op::Pong, PING_PAYLOAD, None);
        let other = frame::control(Op::Pong, b"theirs", None);
        stream.extend(&other);
        let close = frame::control(Op::Close, &frame::close_payload(4001, "bye"), None);
        stream.extend(&close);
        let (out, found) = relay(false, &stream, 3);
        let mut want = other.clone();
        want.extend(&close);
        assert_eq!(out, want);
        assert_eq!(found, Ok(Found { pong: true, close: Some(Some(4001)) }));
    }

    #[test]
    fn violations_and_oversized_messages_are_faults() {
        let unmasked_from_client = data(1, true, b"x", None);
        assert_eq!(relay(true, &unmasked_from_client, 64).1, Err(Fault::Protocol));
        let masked_from_bridge = data(1, true, b"x", Some([1, 1, 1, 1]));
        assert_eq!(relay(false, &masked_from_bridge, 64).1, Err(Fault::Protocol));
        let stray_continuation = data(0, true, b"x", None);
        assert_eq!(relay(false, &stray_continuation, 64).1, Err(Fault::Protocol));
        let mut interleaved = data(1, false, b"a", None);
        interleaved.extend(data(1, true, b"b", None));
        assert_eq!(relay(false, &interleaved, 64).1, Err(Fault::Protocol));
        // 32 MiB in fragments is fine; one byte more is not, and is never forwarded.
        let mut header = vec![0x01, 0x7f];
        header.extend_from_slice(&((MAX_MESSAGE as u64) + 1).to_be_bytes());
        let (out, r) = relay(false, &header, 64);
        assert_eq!((out.len(), r), (0, Err(Fault::TooBig)));
    }

    #[test]
    fn a_pipe_that_read_only_the_answer_to_the_hubs_ping_holds_no_buffer() {
        for masked in [true, false] {
            let mut p = Pipe::new(masked, Vec::new());
            let mask = masked.then_some([1, 2, 3, 4]);
            let pong = frame::control(Op::Pong, PING_PAYLOAD, mask);
            let mut src: &[u8] = &pong;
            assert_eq!(p.read(&mut src).unwrap(), Read::Drained);
            assert!(p.approve().unwrap().pong, "the pong answers the hub's ping");
            assert!(!p.pending(), "nothing to write: the pong is not forwarded");
            assert!(p.buf.is_none(), "an idle pipe gives its 16 KiB buffer back (masked: {masked})");
        }
    }

    #[test]
    fn an_idle_pipe_holds_no_buffer_and_injections_wait_for_a_boundary() {
        let mut p = Pipe::new(false, Vec::new());
        let whole = data(1, true, &[b'x'; 100], None);
        let mut src: &[u8] = &whole[..50];
        p.read(&mut src).unwrap();
        p.approve().unwrap();
        p.queue(&frame::control(Op::Ping, PING_PAYLOAD, None));
        let mut out = Vec::new();
        p.write(&mut out).unwrap();
        assert_eq!(out.len(), 50, "the ping waits: the frame is not complete");
        let mut src: &[u8] = &whole[50..];
        p.read(&mut src).unwrap();
        p.approve().unwrap();
        p.write(&mut out).unwrap();
        assert_eq!(&out[..whole.len()], &whole[..]);
        assert_eq!(frame::parse(&out[whole.len()..]).unwrap().unwrap().op, Op::Ping);
        assert!(p.buf.is_none() && p.inject.capacity() == 0, "nothing held once idle");
    }
}
