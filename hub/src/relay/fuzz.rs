//! Property tests of the relay's parsers: the frame header parser and a [`Pipe`] fed arbitrary
//! bytes, arbitrary valid frame streams, arbitrary chunking, a writer that blocks at random and
//! the hub's own frames injected at random. No panic, no livelock (each run is bounded in
//! steps), no byte invented, reordered or lost. 256 cases per property unless `PROPTEST_CASES`
//! says otherwise (`scripts/fuzz` runs many more).

use super::MAX_MESSAGE;
use super::frame::{self, Header, Malformed, Op};
use super::pipe::{Fault, Found, PING_PAYLOAD, Pipe, Read};
use proptest::prelude::*;
use std::io::{self, ErrorKind};

/// `cases` per property, unless `PROPTEST_CASES` is set.
fn config(cases: u32) -> ProptestConfig {
    let mut c = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = cases;
    }
    c
}

/// A source handing out its bytes in the given chunk sizes (cycled), then end of file.
struct Chunked<'a> {
    data: &'a [u8],
    sizes: &'a [usize],
    next: usize,
}

impl io::Read for Chunked<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let size = self.sizes[self.next % self.sizes.len()];
        self.next += 1;
        if size == 0 && !self.data.is_empty() {
            return Err(ErrorKind::WouldBlock.into());
        }
        let n = size.min(buf.len()).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

/// A destination taking at most the given number of bytes per write (cycled); 0 blocks.
struct Throttled<'a> {
    out: Vec<u8>,
    caps: &'a [usize],
    next: usize,
}

impl io::Write for Throttled<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let cap = self.caps[self.next % self.caps.len()];
        self.next += 1;
        if cap == 0 {
            return Err(ErrorKind::WouldBlock.into());
        }
        let n = cap.min(buf.len());
        self.out.extend_from_slice(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The frame the hub injects in these tests.
fn injected() -> Vec<u8> {
    frame::control(Op::Ping, b"hub-inject", None)
}

/// Runs a pipe the way the relay loop does (read when it wants to, approve, write) until the
/// source is at EOF and nothing is left to write, a fault, or a step bound that only a
/// livelock reaches. `inject_every`: queue [`injected`] every that many steps (0: never).
fn drive(
    masked: bool,
    early: &[u8],
    input: &[u8],
    sizes: &[usize],
    caps: &[usize],
    inject_every: usize,
) -> (Vec<u8>, Found, Result<(), Fault>, usize) {
    let mut pipe = Pipe::new(masked, early.to_vec());
    let mut src = Chunked { data: input, sizes, next: 0 };
    let mut dst = Throttled { out: Vec::new(), caps, next: 0 };
    let mut found = Found::default();
    let mut queued = 0;
    let bound = (early.len() + input.len() + 64) * (sizes.len() + 1) * (caps.len() + 1) * 4;
    let mut eof = false;
    for step in 0..bound {
        // Like the hub's pings: a few, and never a second while one waits.
        if inject_every > 0 && step % inject_every == 0 && !eof && !pipe.injecting() && queued < 16 {
            pipe.queue(&injected());
            queued += 1;
        }
        if pipe.wants_read() && !eof {
            eof = matches!(pipe.read(&mut src).expect("reads from memory"), Read::Eof);
        }
        match pipe.approve() {
            Ok(f) => {
                found.pong |= f.pong;
                found.close = f.close.or(found.close);
            }
            Err(fault) => return (dst.out, found, Err(fault), queued),
        }
        pipe.write(&mut dst).expect("writes to memory");
        // Done: nothing more will come, and what can be written was (a trailing partial
        // frame of arbitrary input stays unapproved).
        if eof && !pipe.pending() {
            return (dst.out, found, Ok(()), queued);
        }
    }
    panic!("no progress after {bound} steps: the pipe livelocked");
}

/// Splits a well-formed frame stream into its frames.
fn frames(mut b: &[u8]) -> Vec<(Header, &[u8])> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let h = frame::parse(b).expect("valid framing").expect("a whole header");
        let total = h.size + h.len as usize;
        out.push((h, &b[..total]));
        b = &b[total..];
    }
    out
}

/// A data frame (`op` 0, 1 or 2), masked when `mask` is given: the pipe tests' builder.
use super::pipe::tests::data;

/// A control frame the peer may send mid-stream.
#[derive(Clone, Debug)]
enum Ctl {
    Ping(Vec<u8>),
    Pong(Vec<u8>),
    /// A pong answering the hub's ping: dropped by the pipe.
    HubPong,
}

/// One data message: its fragments, and a control frame sent after its first fragment.
#[derive(Clone, Debug)]
struct Message {
    text: bool,
    fragments: Vec<Vec<u8>>,
    ctl: Option<Ctl>,
}

fn payload() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        8 => proptest::collection::vec(any::<u8>(), 0..200),
        1 => proptest::collection::vec(any::<u8>(), 126..70_000),
    ]
}

fn control_payload() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..=125).prop_filter("not the hub's", |p| p != PING_PAYLOAD)
}

fn ctl() -> impl Strategy<Value = Ctl> {
    prop_oneof![
        control_payload().prop_map(Ctl::Ping),
        control_payload().prop_map(Ctl::Pong),
        Just(Ctl::HubPong),
    ]
}

fn message() -> impl Strategy<Value = Message> {
    (any::<bool>(), proptest::collection::vec(payload(), 1..4), proptest::option::of(ctl()))
        .prop_map(|(text, fragments, ctl)| Message { text, fragments, ctl })
}

/// The stream a peer sends, and what the pipe must pass on (hub pongs removed).
fn encode(msgs: &[Message], close: Option<u16>, mask: Option<[u8; 4]>) -> (Vec<u8>, Vec<u8>) {
    let (mut sent, mut passed) = (Vec::new(), Vec::new());
    for m in msgs {
        let last = m.fragments.len() - 1;
        for (i, f) in m.fragments.iter().enumerate() {
            let op = if i > 0 {
                0
            } else if m.text {
                1
            } else {
                2
            };
            let d = data(op, i == last, f, mask);
            sent.extend_from_slice(&d);
            passed.extend_from_slice(&d);
            if i == 0 {
                let c = match &m.ctl {
                    Some(Ctl::Ping(p)) => frame::control(Op::Ping, p, mask),
                    Some(Ctl::Pong(p)) => frame::control(Op::Pong, p, mask),
                    Some(Ctl::HubPong) => {
                        sent.extend_from_slice(&frame::control(Op::Pong, PING_PAYLOAD, mask));
                        continue;
                    }
                    None => continue,
                };
                sent.extend_from_slice(&c);
                passed.extend_from_slice(&c);
            }
        }
    }
    if let Some(code) = close {
        let c = frame::control(Op::Close, &frame::close_payload(code, "bye"), mask);
        sent.extend_from_slice(&c);
        passed.extend_from_slice(&c);
    }
    (sent, passed)
}

/// Chunk sizes for reads (0: would block), and write capacities (0: would block), never all 0.
fn sizes() -> impl Strategy<Value = Vec<usize>> {
    proptest::collection::vec(prop_oneof![1 => Just(0usize), 4 => 1usize..64, 2 => 1usize..40_000], 1..6)
        .prop_filter("some progress", |s| s.iter().any(|&n| n > 0))
}

proptest! {
    #![proptest_config(config(256))]

    /// Any bytes: a fault, not-enough-yet, or a header that fits in them and needs all of them.
    #[test]
    fn any_header_bytes_parse_without_panic(b in proptest::collection::vec(any::<u8>(), 0..20)) {
        match frame::parse(&b) {
            Ok(Some(h)) => {
                prop_assert!([2, 4, 6, 8, 10, 14].contains(&h.size) && h.size <= b.len(), "{h:?}");
                prop_assert!(h.len >> 63 == 0);
                prop_assert!(!h.op.is_control() || (h.fin && h.len <= 125));
                prop_assert_eq!(frame::parse(&b[..h.size]), Ok(Some(h)));
                for cut in 0..h.size {
                    prop_assert_eq!(frame::parse(&b[..cut]), Ok(None));
                }
            }
            Ok(None) => prop_assert!(b.len() < 14),
            Err(Malformed::Opcode(op)) => prop_assert!(![0, 1, 2, 8, 9, 10].contains(&op)),
            Err(_) => {}
        }
    }

    /// Control frames built by the hub parse back to their payload, masked or not.
    #[test]
    fn control_frames_round_trip(
        op in prop_oneof![Just(Op::Ping), Just(Op::Pong), Just(Op::Close)],
        payload in proptest::collection::vec(any::<u8>(), 0..300),
        mask in proptest::option::of(any::<[u8; 4]>()),
        code in any::<u16>(),
    ) {
        let f = frame::control(op, &payload, mask);
        let h = frame::parse(&f).unwrap().unwrap();
        prop_assert_eq!((h.op, h.fin, h.mask, h.size + h.len as usize), (op, true, mask, f.len()));
        let mut body = f[h.size..].to_vec();
        if let Some(m) = mask {
            frame::apply_mask(&mut body, m);
        }
        prop_assert_eq!(&body[..], &payload[..payload.len().min(125)]);
        let close = frame::close_payload(code, &String::from_utf8_lossy(&payload));
        prop_assert!(close.len() <= 125);
        prop_assert_eq!(frame::close_code(&close), Some(code));
    }

    /// Arbitrary bytes through a pipe, however chunked and throttled: no panic, no livelock,
    /// and what comes out is a prefix of what went in (nothing invented or reordered).
    #[test]
    fn arbitrary_bytes_through_a_pipe_come_out_as_a_prefix(
        masked in any::<bool>(),
        early in prop_oneof![
            4 => proptest::collection::vec(any::<u8>(), 0..64),
            1 => proptest::collection::vec(any::<u8>(), 16_000..20_000),
        ],
        input in proptest::collection::vec(any::<u8>(), 0..4096),
        sizes in sizes(),
        caps in sizes(),
    ) {
        let (out, _, _, _) = drive(masked, &early, &input, &sizes, &caps, 0);
        let all = [early, input].concat();
        prop_assert!(out.len() <= all.len() && out[..] == all[..out.len()]);
    }
}

proptest! {
    #![proptest_config(config(64))]

    /// Valid frame streams, fragmented, with control frames between fragments, however
    /// chunked and throttled, with the hub's own frames injected: every frame passes byte for
    /// byte and in order, pongs to the hub are dropped, injected frames land only between
    /// frames, and the close code is reported.
    #[test]
    fn valid_streams_pass_byte_for_byte(
        masked in any::<bool>(),
        key in any::<[u8; 4]>(),
        msgs in proptest::collection::vec(message(), 0..6),
        close in proptest::option::of(1000u16..5000),
        split in 0usize..200,
        sizes in sizes(),
        caps in sizes(),
        inject_every in prop_oneof![Just(0usize), 1usize..50],
    ) {
        let (sent, passed) = encode(&msgs, close, masked.then_some(key));
        // Some of the stream may already have been read during the handshake.
        let split = split.min(sent.len());
        let (out, found, result, queued) =
            drive(masked, &sent[..split], &sent[split..], &sizes, &caps, inject_every);
        prop_assert_eq!(result, Ok(()));
        let inj = injected();
        let mut relayed = Vec::new();
        let mut seen = 0;
        for (_, bytes) in frames(&out) {
            if bytes == inj.as_slice() {
                seen += 1;
            } else {
                relayed.extend_from_slice(bytes);
            }
        }
        prop_assert_eq!(seen, queued, "every injected frame went out, whole");
        prop_assert!(relayed == passed, "the relayed frames differ from those sent");
        prop_assert_eq!(found.close, close.map(Some));
        let pongs = msgs.iter().any(|m| matches!(m.ctl, Some(Ctl::HubPong)));
        prop_assert_eq!(found.pong, pongs);
    }

    /// A message whose fragments add up to more than the cap is a fault, and the frame that
    /// passes it is not relayed.
    #[test]
    fn oversized_messages_are_refused(
        masked in any::<bool>(),
        first in 0usize..70_000,
        sizes in sizes(),
        caps in sizes(),
    ) {
        let mask = masked.then_some([1, 2, 3, 4]);
        let head = data(2, false, &vec![7u8; first], mask);
        // A continuation claiming one byte more than the cap leaves room for.
        let mut next = data(0, true, &[], mask);
        next[1] = (next[1] & 0x80) | 127;
        next.splice(2..2, ((MAX_MESSAGE - first + 1) as u64).to_be_bytes());
        let stream = [head.clone(), next].concat();
        let (out, _, result, _) = drive(masked, &[], &stream, &sizes, &caps, 0);
        prop_assert_eq!(result, Err(Fault::TooBig));
        prop_assert!(out.len() <= head.len() && out[..] == head[..out.len()]);
    }
}
