//! The WebSocket relay: ONE task per relayed connection, owning both sockets (client and
//! bridge) and one [`pipe::Pipe`] per direction.
//!
//! Frames are relayed byte for byte: the hub parses headers only (boundaries, the framing
//! rules, the 32 MiB message cap) and streams payloads through a 16 KiB buffer that is pooled
//! and released whenever a direction is drained. So every frame keeps its opcode (trap 1 of the
//! original: text forwarded as binary vanished in every ACP client), nothing is re-encoded, and
//! an idle relay holds two sockets and a few hundred bytes of state (`scripts/bench-relay`).
//! A slow reader is met with backpressure: its partner is not read while its 16 KiB is
//! unwritten (per-leg queued writes are bounded by that, far under the 8 MiB cap).
//!
//! Pings and closing: every `ping` period the hub pings both legs (its pongs are not
//! forwarded); a leg that has not answered the previous ping is closed, and its partner gets a
//! close frame. Pings and closes between client and bridge pass through, so a close handshake
//! is the endpoints' own (the client sees the bridge's close code). A leg that vanishes gets
//! its partner closed at once: 1011 to a client whose bridge went away, 1001 to a bridge
//! whose client did; 1009 for a message over the cap, 1002 for broken framing, 1001 on
//! shutdown. Close frames are injected only at a frame boundary (otherwise the TCP connection
//! is just closed), and each close is bounded by 500 ms.

mod frame;
mod pipe;

use frame::Op;
use pipe::{Fault, Pipe, Read};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// The largest message either leg may send: 32 MiB.
pub const MAX_MESSAGE: usize = 32 * 1024 * 1024;
/// How long the closing of a relay may take (close frames out, the peer's answer in).
const CLOSE_GRACE: Duration = Duration::from_millis(500);

/// Which leg.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The remote client (through the tunnel).
    Client,
    /// The bridge's loopback endpoint.
    Bridge,
}

/// Why a relay ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// That side sent a close frame (with this code), passed on to the other.
    Closed(Side, Option<u16>),
    /// That side's connection ended or failed without a close frame.
    Gone(Side),
    /// That side sent a message over [`MAX_MESSAGE`].
    TooBig(Side),
    /// That side broke the framing rules.
    Protocol(Side),
    /// That side did not answer a ping within one period.
    Silent(Side),
    /// The hub is shutting down.
    Shutdown,
}

struct Leg<S> {
    io: S,
    /// A ping is out and no pong has come back since.
    awaiting_pong: bool,
    /// It sent a close frame (it sends nothing after that).
    closed: bool,
}

/// Everything an open relay holds.
struct Relay<C, B> {
    c: Leg<C>,
    b: Leg<B>,
    /// Client → bridge; its frames arrive masked.
    up: Pipe,
    /// Bridge → client.
    down: Pipe,
    tick: tokio::time::Interval,
    /// The first close frame seen, and the deadline for the other side's answer.
    closing: Option<(Side, Option<u16>, Pin<Box<tokio::time::Sleep>>)>,
}

/// Relays between `client` and `bridge` (each with the bytes already read from it during the
/// handshake) until one ends, `shutdown` fires or a leg goes silent; then closes both.
pub async fn run<C, B>(
    client: (C, Vec<u8>),
    bridge: (B, Vec<u8>),
    ping: Duration,
    shutdown: CancellationToken,
) -> End
where
    C: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + ping, ping);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut r = Relay {
        c: Leg { io: client.0, awaiting_pong: false, closed: false },
        b: Leg { io: bridge.0, awaiting_pong: false, closed: false },
        up: Pipe::new(true, client.1),
        down: Pipe::new(false, bridge.1),
        tick,
        closing: None,
    };
    let cancelled = shutdown.cancelled();
    tokio::pin!(cancelled);
    let end = std::future::poll_fn(|cx| {
        if cancelled.as_mut().poll(cx).is_ready() {
            return Poll::Ready(End::Shutdown);
        }
        r.poll(cx)
    })
    .await;
    // Boxed: the closing's timer and state exist only while a relay ends.
    Box::pin(r.finish(end)).await;
    end
}

impl<C, B> Relay<C, B>
where
    C: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    /// Moves bytes both ways as far as they go; ready when the relay is over.
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<End> {
        match pump(&mut self.up, &mut self.c, &mut self.b, Side::Client, cx) {
            Ok(close) => self.note(Side::Client, close),
            Err(end) => return Poll::Ready(end),
        }
        match pump(&mut self.down, &mut self.b, &mut self.c, Side::Bridge, cx) {
            Ok(close) => self.note(Side::Bridge, close),
            Err(end) => return Poll::Ready(end),
        }
        if let Some((side, code, _)) = &self.closing {
            if self.c.closed && self.b.closed && !self.up.pending() && !self.down.pending() {
                return Poll::Ready(End::Closed(*side, *code));
            }
        }
        if let Some((side, code, deadline)) = &mut self.closing {
            if deadline.as_mut().poll(cx).is_ready() {
                return Poll::Ready(End::Closed(*side, *code));
            }
        }
        if self.tick.poll_tick(cx).is_ready() {
            if self.c.awaiting_pong {
                return Poll::Ready(End::Silent(Side::Client));
            }
            if self.b.awaiting_pong {
                return Poll::Ready(End::Silent(Side::Bridge));
            }
            self.ping();
            cx.waker().wake_by_ref(); // write the pings on the next poll
        }
        Poll::Pending
    }

    /// Records the first close frame [`pump`] saw, and starts waiting for the answer to it.
    fn note(&mut self, side: Side, close: Option<Option<u16>>) {
        if let (Some(code), None) = (close, &self.closing) {
            self.closing = Some((side, code, Box::pin(tokio::time::sleep(CLOSE_GRACE))));
        }
    }

    fn ping(&mut self) {
        // Not stacked: a ping still waiting from last time means the next tick finds it silent.
        if !self.down.injecting() {
            self.down.queue(&frame::control(Op::Ping, pipe::PING_PAYLOAD, None));
        }
        if !self.up.injecting() {
            self.up.queue(&frame::control(Op::Ping, pipe::PING_PAYLOAD, Some(frame::mask_key())));
        }
        self.c.awaiting_pong = true;
        self.b.awaiting_pong = true;
    }

    /// Sends each remaining leg its close frame (when its stream is at a frame boundary and its
    /// partner's close was not already passed on to it), writes what is still queued, and shuts
    /// the connections down, within [`CLOSE_GRACE`].
    async fn finish(mut self, end: End) {
        let (to_client, to_bridge) = closes(end);
        if let Some((code, reason)) = to_client.filter(|_| self.down.at_boundary() && !self.b.closed) {
            self.down.queue(&frame::control(Op::Close, &frame::close_payload(code, reason), None));
        }
        if let Some((code, reason)) = to_bridge.filter(|_| self.up.at_boundary() && !self.c.closed) {
            let payload = frame::close_payload(code, reason);
            self.up.queue(&frame::control(Op::Close, &payload, Some(frame::mask_key())));
        }
        let (drop_c, drop_b) = dropped(end);
        let flush = std::future::poll_fn(|cx| {
            let c_busy = !drop_c && self.down.pending() && self.down.write(cx, &mut self.c.io).is_ok();
            let b_busy = !drop_b && self.up.pending() && self.up.write(cx, &mut self.b.io).is_ok();
            let c_left = c_busy && self.down.pending();
            let b_left = b_busy && self.up.pending();
            if c_left || b_left { Poll::Pending } else { Poll::Ready(()) }
        });
        let _ = tokio::time::timeout(CLOSE_GRACE, flush).await;
        let shut = async {
            if !drop_c {
                let _ = self.c.io.shutdown().await;
            }
            if !drop_b {
                let _ = self.b.io.shutdown().await;
            }
        };
        let _ = tokio::time::timeout(CLOSE_GRACE, shut).await;
    }
}

/// Moves one direction as far as it goes now: writes what is approved, reads, approves,
/// and repeats until the source has nothing more (its waker is registered) or the destination
/// takes nothing more (backpressure: the source is not read while 16 KiB wait). Returns the
/// code of a close frame that passed, if one did.
fn pump<R, W>(
    pipe: &mut Pipe,
    src: &mut Leg<R>,
    dst: &mut Leg<W>,
    from: Side,
    cx: &mut Context<'_>,
) -> Result<Option<Option<u16>>, End>
where
    R: AsyncRead + AsyncWrite + Unpin,
    W: AsyncRead + AsyncWrite + Unpin,
{
    let to = other(from);
    let mut close = None;
    loop {
        pipe.write(cx, &mut dst.io).map_err(|_| End::Gone(to))?;
        if src.closed || !pipe.wants_read() {
            return Ok(close);
        }
        let read = match pipe.read(cx, &mut src.io) {
            Ok(Read::Eof) | Err(_) => return Err(End::Gone(from)),
            Ok(r) => r,
        };
        // Also after a pending read: bytes that came with the handshake wait here.
        if pipe.unapproved() {
            let found = pipe.approve().map_err(|f| match f {
                Fault::TooBig => End::TooBig(from),
                Fault::Protocol => End::Protocol(from),
            })?;
            if found.pong {
                src.awaiting_pong = false;
            }
            if let Some(code) = found.close {
                src.closed = true;
                close = Some(code);
            }
        }
        if read != Read::Data {
            pipe.write(cx, &mut dst.io).map_err(|_| End::Gone(to))?;
            return Ok(close);
        }
    }
}

fn other(side: Side) -> Side {
    match side {
        Side::Client => Side::Bridge,
        Side::Bridge => Side::Client,
    }
}

type Close = Option<(u16, &'static str)>;

/// The close frame each leg gets when the relay ends: (to the client, to the bridge).
fn closes(end: End) -> (Close, Close) {
    let away = Some((1001, "client went away"));
    match end {
        End::Closed(..) => (None, None),
        End::Gone(Side::Client) | End::Silent(Side::Client) => (None, away),
        End::Gone(Side::Bridge) => (Some((1011, "bridge went away")), None),
        End::Silent(Side::Bridge) => (Some((1011, "bridge stopped answering pings")), None),
        End::TooBig(Side::Client) => (Some((1009, "message too big")), away),
        End::TooBig(Side::Bridge) => {
            (Some((1011, "bridge sent a message too big")), Some((1009, "message too big")))
        }
        End::Protocol(Side::Client) => (Some((1002, "protocol error")), away),
        End::Protocol(Side::Bridge) => {
            (Some((1011, "bridge broke the protocol")), Some((1002, "protocol error")))
        }
        End::Shutdown => (Some((1001, "hub shutting down")), Some((1001, "hub shutting down"))),
    }
}

/// Legs that get nothing more (gone, or not answering): (client, bridge).
fn dropped(end: End) -> (bool, bool) {
    match end {
        End::Gone(Side::Client) | End::Silent(Side::Client) => (true, false),
        End::Gone(Side::Bridge) | End::Silent(Side::Bridge) => (false, true),
        _ => (false, false),
    }
}

#[cfg(test)]
mod tests;
