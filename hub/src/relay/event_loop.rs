//! The relay thread: one mio `Poll` (edge-triggered epoll) over both sockets of every relay.
//!
//! Each socket carries a readiness flag per direction, set by its events and cleared only when
//! a read or write says it would block (or a read came back short: the socket is drained, and
//! its next bytes bring a new event). A relay is driven whenever one of its sockets has an
//! event: both directions run as far as they can, and a direction whose flags are down costs
//! nothing. Timers are few: one ping tick for all relays, and a deadline per relay only while
//! it is closing, kept in a heap.
//!
//! Liveness (judged at each tick): a leg's ping counts from the moment it has been written, and
//! any bytes read from the leg since then answer it as well as its pong. The answer may take
//! two periods plus the time to read, at [`SLOWEST_READER`], what we wrote to the leg ahead of
//! the ping since its last pong (a phone on a slow link reads a multi-MB replay before it
//! reaches the ping). A leg the hub is not reading from (backpressure: its bytes wait for its
//! partner) is never judged, and a ping that cannot be written (the leg takes nothing) is not
//! counted: such a leg is left to TCP, whose user timeout (set on both legs) ends a connection
//! whose written bytes stay unacknowledged, or whose window stays shut, for too long. Before a
//! leg is judged silent its socket is read once more: its answer may have come after the turn's
//! `poll` (the thread off its CPU between the two).

use super::frame::{self, Op};
use super::pipe::{self, Fault, Pipe, Read};
use super::{CLOSE_GRACE, End, OnEnd, Side, closes, dropped, other};
use mio::net::{TcpStream, UnixStream};
use mio::{Events, Interest, Poll, Token};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{self, ErrorKind};
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

/// The control socket's token; a relay in slot `s` has tokens `2s` (client) and `2s + 1`
/// (bridge).
const CONTROL: Token = Token(usize::MAX);
/// Reads per direction and drive before other relays get their turn.
const READ_BUDGET: usize = 16;
/// The slowest reader a ping's answer waits for, in bytes per second (see the module docs).
pub const SLOWEST_READER: u64 = 8 * 1024;
/// Ping periods a leg may stay quiet (no pong, no byte) after its ping went out: a bridge busy
/// streaming a replay answers no ping, and its output may pause for a period.
const SILENT_PERIODS: u32 = 2;

/// What the hub tells the relay thread (over the channel, each followed by a byte on the
/// control socket that wakes the loop).
pub enum Command {
    /// Start relaying.
    Open(super::Open),
    /// Close every relay (with this end: [`End::Shutdown`] or [`End::Restart`]), and end the
    /// thread when the last is closed.
    Shutdown(End),
    /// Close the relays with these numbers (with this end).
    End(Vec<u64>, End),
}

/// How the relay thread reports ended relays: the call goes on the list, and one byte on a
/// socket pair rings the hub's side, which makes the calls on its runtime (never on the relay
/// thread: a callback may take a lock or wake a task).
pub struct Bell {
    pub ended: super::Ended,
    pub socket: std::os::unix::net::UnixStream,
}

impl Bell {
    fn ring(&self, on_end: OnEnd, end: End) {
        let mut list = self.ended.lock().unwrap_or_else(|p| p.into_inner());
        let first = list.is_empty();
        list.push((on_end, end));
        drop(list);
        if first {
            // When the socket is full, unread rings are waiting already: nothing is lost.
            let _ = io::Write::write(&mut &self.socket, &[1]);
        }
    }
}

struct Leg {
    io: TcpStream,
    /// A read may return bytes (or the end).
    readable: bool,
    /// A write may be taken.
    writable: bool,
    /// The peer closed its side or the connection failed: reads go on until one says so.
    hup: bool,
    /// Bytes it has taken from us (written to it), in all.
    out: u64,
    /// Our ping to it.
    ping: Ping,
    /// What it is known to have read (`out` up to the last ping it answered).
    acked: u64,
    /// Bytes were read from it since the last tick.
    heard: bool,
    /// Since the last tick, the hub stopped reading it with its bytes waiting for its partner.
    held: bool,
    /// It sent a close frame (it sends nothing after that).
    closed: bool,
    /// Gets nothing more (gone, or not answering), once the relay is ending.
    dropped: bool,
}

impl Leg {
    fn new(io: TcpStream) -> Leg {
        Leg {
            io,
            readable: true,
            writable: true,
            hup: false,
            out: 0,
            ping: Ping::Idle,
            acked: 0,
            heard: false,
            held: false,
            closed: false,
            dropped: false,
        }
    }
}

/// Where a leg's ping is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ping {
    /// None is out (the last one was answered).
    Idle,
    /// Waiting in the pipe to the leg (for a frame boundary, or for the leg to take bytes);
    /// the frame's length.
    Queued(usize),
    /// Written at `at` (or bytes came from the leg since then, at the tick `at`), with `ahead`
    /// bytes of ours written to the leg before it since its last answered ping, and `through`
    /// (`out` once it was written).
    Written { at: Instant, ahead: u64, through: u64 },
}

/// A destination that counts what it takes.
struct Counted<'a> {
    io: &'a mut TcpStream,
    n: &'a mut u64,
}

impl io::Write for Counted<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = io::Write::write(self.io, buf)?;
        *self.n += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Writes `pipe`'s approved bytes (and injected frames) to `dst`; whether it would block. Notes
/// when a queued ping has gone out.
fn write_to(pipe: &mut Pipe, dst: &mut Leg) -> io::Result<bool> {
    let blocked = pipe.write(&mut Counted { io: &mut dst.io, n: &mut dst.out })?;
    if let Ping::Queued(len) = dst.ping {
        if !pipe.injecting() {
            let ahead = (dst.out - len as u64).saturating_sub(dst.acked);
            dst.ping = Ping::Written { at: Instant::now(), ahead, through: dst.out };
        }
    }
    Ok(blocked)
}

/// Everything an open relay holds.
struct Relay {
    /// The hub's number for it.
    id: u64,
    c: Leg,
    b: Leg,
    /// Client → bridge; its frames arrive masked.
    up: Pipe,
    /// Bridge → client.
    down: Pipe,
    /// The first close frame seen (the relay waits for the other side's answer).
    closing: Option<(Side, Option<u16>)>,
    /// Why it ended, once it has (its last writes are going out).
    ending: Option<End>,
    /// When the closing or ending gives up waiting (its entry in the timer heap).
    deadline: Option<Instant>,
    on_end: Option<OnEnd>,
    /// Whose it is, for its lines.
    whose: super::Whose,
}

/// How the hub wakes the loop for its commands: a byte on `socket`, written only when `rung`
/// was clear (see [`super::Relays`]); the loop clears it before it takes the commands.
pub struct Control {
    pub socket: std::os::unix::net::UnixStream,
    pub rung: Arc<AtomicBool>,
}

/// The relay thread's state.
pub struct Loop {
    poll: Poll,
    /// Rings when a command is on the channel (its end at the hub closes: shut down).
    control: UnixStream,
    /// Cleared before the commands are taken (see [`Control`]).
    rung: Arc<AtomicBool>,
    /// The hub's commands.
    commands: mpsc::Receiver<Command>,
    /// Where ended relays are reported.
    bell: Bell,
    slots: Vec<Option<Relay>>,
    /// Free slots, reused before the vector grows (every empty slot is here).
    free: Vec<usize>,
    /// Closing deadlines: (when, slot). An entry whose relay has another deadline is stale.
    timers: BinaryHeap<Reverse<(Instant, usize)>>,
    /// Relays to drive again without waiting for an event (they used up their read budget).
    again: Vec<usize>,
    ping: Duration,
    next_ping: Instant,
    stopping: bool,
    /// How relays end once stopping (shutdown, or a restart onto a new binary).
    stop_end: End,
    /// The test-only fault still to come (see [`TestFault`]).
    fault: Option<TestFault>,
    /// The next `poll` fails (the `poll` test fault).
    poll_fault: bool,
}

/// A fault the relay thread injects once, when its first relay opens, for the tests of its
/// supervision: `ZCODE_ACP_TEST_RELAY_FAULT=panic` (the thread panics) or `=poll` (its next
/// `poll` fails). Test-only: honoured in debug builds only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TestFault {
    Panic,
    Poll,
}

impl TestFault {
    fn from_env() -> Option<TestFault> {
        let env = zcode_shared::env::ProcessEnv;
        match zcode_shared::env::test_knob(&env, "ZCODE_ACP_TEST_RELAY_FAULT").as_deref() {
            Some("panic") => Some(TestFault::Panic),
            Some("poll") => Some(TestFault::Poll),
            _ => None,
        }
    }
}

impl Loop {
    /// The loop (not yet running), told of new relays on `commands`, woken by `control`
    /// (non-blocking).
    pub fn new(
        control: Control,
        commands: mpsc::Receiver<Command>,
        bell: Bell,
        ping: Duration,
    ) -> io::Result<Loop> {
        let poll = Poll::new()?;
        let Control { socket: control, rung } = control;
        let mut control = UnixStream::from_std(control);
        poll.registry().register(&mut control, CONTROL, Interest::READABLE)?;
        let ping = ping.max(Duration::from_millis(1));
        Ok(Loop {
            poll,
            control,
            rung,
            commands,
            bell,
            slots: Vec::new(),
            free: Vec::new(),
            timers: BinaryHeap::new(),
            again: Vec::new(),
            ping,
            next_ping: Instant::now() + ping,
            stopping: false,
            stop_end: End::Shutdown,
            fault: TestFault::from_env(),
            poll_fault: false,
        })
    }

    /// Runs until a shutdown (or the hub's handle is gone) and the last relay has closed, or
    /// until `poll` fails (then its relays are still open: see [`Loop::fail`]).
    pub fn run(&mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(1024);
        // One clock reading per turn (after the wait): the timeout computed from the previous
        // turn's reading is late by that turn's work, microseconds.
        let mut now = Instant::now();
        loop {
            let timeout = match self.again.is_empty() {
                true => self.next_deadline().saturating_duration_since(now),
                false => Duration::ZERO,
            };
            let polled = match std::mem::take(&mut self.poll_fault) {
                true => Err(io::Error::other("test fault (ZCODE_ACP_TEST_RELAY_FAULT=poll)")),
                false => self.poll.poll(&mut events, Some(timeout)),
            };
            if let Err(e) = polled {
                if e.kind() != ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            let mut woken = false;
            for ev in events.iter() {
                if ev.token() == CONTROL {
                    woken = true;
                    continue;
                }
                let (slot, side) = (ev.token().0 / 2, ev.token().0 % 2);
                let Some(Some(r)) = self.slots.get_mut(slot) else { continue };
                let leg = if side == 0 { &mut r.c } else { &mut r.b };
                let failed = ev.is_error() || ev.is_read_closed();
                leg.readable |= ev.is_readable() || failed;
                leg.hup |= failed;
                leg.writable |= ev.is_writable() || ev.is_write_closed() || ev.is_error();
                self.drive(slot);
            }
            for slot in std::mem::take(&mut self.again) {
                self.drive(slot);
            }
            if woken {
                self.commands();
            }
            now = Instant::now();
            if now >= self.next_deadline() {
                self.expire(now);
            }
            if self.stopping && self.slots.len() == self.free.len() {
                return Ok(());
            }
        }
    }

    /// After the loop failed (or panicked): ends every relay with 1011 (best effort: a close
    /// frame where a stream is at a frame boundary, one write), reports each, and starts over
    /// with a new `Poll` watching the control socket (the relays queued there are taken
    /// next). Errs when even that fails.
    pub fn fail(&mut self) -> io::Result<()> {
        for slot in 0..self.slots.len() {
            let Some(Some(r)) = self.slots.get_mut(slot) else { continue };
            if r.ending.is_none() {
                r.begin_end(End::Failed);
            }
            r.c.writable = true;
            r.b.writable = true;
            let _ = r.flush();
            self.remove(slot);
        }
        self.timers.clear();
        self.again.clear();
        let _ = self.poll.registry().deregister(&mut self.control);
        self.poll = Poll::new()?;
        self.poll.registry().register(&mut self.control, CONTROL, Interest::READABLE)?;
        // Whatever woke the old `Poll` may not wake the new one (edge-triggered).
        self.commands();
        Ok(())
    }

    fn next_deadline(&self) -> Instant {
        let timer = self.timers.peek().map(|Reverse((t, _))| *t);
        timer.map_or(self.next_ping, |t| t.min(self.next_ping))
    }

    /// Takes what the hub sent: new relays, the shutdown.
    fn commands(&mut self) {
        let mut rings = [0u8; 64];
        let gone = loop {
            match io::Read::read(&mut self.control, &mut rings) {
                Ok(0) => break true,
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => break false,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::error!("the relay thread's control socket failed: {e}");
                    break true;
                }
            }
        };
        // Before the channel is read: a command sent after this rings again.
        self.rung.store(false, Ordering::SeqCst);
        loop {
            match self.commands.try_recv() {
                Ok(Command::Open(o)) => self.open(o),
                Ok(Command::Shutdown(end)) => self.stop(end),
                Ok(Command::End(ids, end)) => {
                    // Rare (a revocation): a scan of the slots costs microseconds.
                    for slot in 0..self.slots.len() {
                        if self.slots[slot].as_ref().is_some_and(|r| ids.contains(&r.id)) {
                            self.end(slot, end);
                        }
                    }
                }
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => return self.stop(End::Shutdown),
            }
        }
        if gone {
            self.stop(End::Shutdown);
        }
    }

    /// Ends every relay with `end` (1001, or 1012 for a restart); relays opened from now on
    /// are ended at once.
    fn stop(&mut self, end: End) {
        if !self.stopping {
            self.stopping = true;
            self.stop_end = end;
            for slot in 0..self.slots.len() {
                self.end(slot, end);
            }
        }
    }

    /// Starts relaying between `o`'s client and bridge.
    fn open(&mut self, o: super::Open) {
        let super::Open { id, client, client_early, bridge, bridge_early, on_end, whose } = o;
        let slot = self.free.pop().unwrap_or_else(|| {
            self.slots.push(None);
            self.slots.len() - 1
        });
        // TCP ends the bridge leg when what it was sent stays unacknowledged, or its window
        // shut, this long (`super::unacked_limit`; the client's is set by `Relays::open` or
        // inherited from its listener).
        let unacked = super::unacked_limit(self.ping);
        let _ = nix::sys::socket::setsockopt(&bridge, nix::sys::socket::sockopt::TcpUserTimeout, &unacked);
        let mut c = TcpStream::from_std(client);
        let mut b = TcpStream::from_std(bridge);
        let both = Interest::READABLE | Interest::WRITABLE;
        let registry = self.poll.registry();
        let registered = registry
            .register(&mut c, Token(2 * slot), both)
            .and_then(|()| registry.register(&mut b, Token(2 * slot + 1), both));
        if let Err(e) = registered {
            whose().in_scope(|| tracing::warn!("cannot watch a relay's sockets: {e}"));
            self.free.push(slot);
            self.bell.ring(on_end, End::Gone(Side::Bridge));
            return;
        }
        self.slots[slot] = Some(Relay {
            id,
            c: Leg::new(c),
            b: Leg::new(b),
            up: Pipe::new(true, client_early),
            down: Pipe::new(false, bridge_early),
            closing: None,
            ending: None,
            deadline: None,
            on_end: Some(on_end),
            whose,
        });
        if self.stopping {
            self.end(slot, self.stop_end);
        } else {
            self.drive(slot);
        }
        match self.fault.take() {
            Some(TestFault::Panic) => panic!("test fault (ZCODE_ACP_TEST_RELAY_FAULT=panic)"),
            Some(TestFault::Poll) => self.poll_fault = true,
            None => {}
        }
    }

    /// Moves what can move in relay `slot` after an event (or a timer, or a command).
    fn drive(&mut self, slot: usize) {
        let Some(Some(r)) = self.slots.get_mut(slot) else { return };
        if r.ending.is_none() {
            match r.step() {
                Ok((started_closing, more)) => {
                    if more {
                        self.again.push(slot);
                    }
                    if started_closing {
                        let at = Instant::now() + CLOSE_GRACE;
                        r.deadline = Some(at);
                        self.timers.push(Reverse((at, slot)));
                    }
                    return;
                }
                Err(end) => return self.end(slot, end),
            }
        }
        if r.flush() {
            self.remove(slot);
        }
    }

    /// Ends relay `slot` (if it is not ending already): close frames queued, last writes out.
    fn end(&mut self, slot: usize, end: End) {
        let Some(Some(r)) = self.slots.get_mut(slot) else { return };
        if r.ending.is_some() {
            return;
        }
        r.begin_end(end);
        if r.flush() {
            return self.remove(slot);
        }
        let at = Instant::now() + CLOSE_GRACE;
        r.deadline = Some(at);
        self.timers.push(Reverse((at, slot)));
    }

    /// Closes relay `slot`'s sockets (a FIN after the last write) and frees the slot.
    fn remove(&mut self, slot: usize) {
        let Some(mut r) = self.slots.get_mut(slot).and_then(Option::take) else { return };
        for leg in [&r.c, &r.b] {
            if !leg.dropped {
                let _ = leg.io.shutdown(Shutdown::Write);
            }
        }
        let end = r.ending.unwrap_or(End::Shutdown);
        let on_end = r.on_end.take();
        drop(r); // the sockets close (and leave the epoll set) here
        self.free.push(slot);
        if let Some(f) = on_end {
            self.bell.ring(f, end);
        }
    }

    /// Handles the ping tick and closing deadlines that are due at `now`.
    fn expire(&mut self, now: Instant) {
        if now >= self.next_ping {
            self.next_ping = now + self.ping;
            for slot in 0..self.slots.len() {
                self.tick(slot, now);
            }
        }
        while let Some(Reverse((at, slot))) = self.timers.peek().copied() {
            if at > now {
                break;
            }
            self.timers.pop();
            let Some(Some(r)) = self.slots.get_mut(slot) else { continue };
            if r.deadline != Some(at) {
                continue; // stale: the slot moved on (or was reused)
            }
            r.deadline = None;
            match (r.ending, r.closing) {
                (Some(_), _) => self.remove(slot),
                (None, Some((side, code))) => self.end(slot, End::Closed(side, code)),
                (None, None) => {}
            }
        }
    }

    /// The ping period for relay `slot`: a leg that has not answered its ping in time is
    /// silent (see the module docs); a leg with no ping out gets one.
    fn tick(&mut self, slot: usize, now: Instant) {
        let ping = self.ping;
        let Some(Some(r)) = self.slots.get_mut(slot) else { return };
        if r.ending.is_some() {
            return;
        }
        // Bytes that came after this turn's `poll` (the thread may have been off its CPU
        // between the two) are read before a leg is judged: the answer may be among them.
        if overdue(&r.c, now, ping) || overdue(&r.b, now, ping) {
            (r.c.readable, r.b.readable) = (true, true);
            self.drive(slot);
        }
        let Some(r) = self.slots.get_mut(slot).and_then(Option::as_mut).filter(|r| r.ending.is_none()) else {
            return;
        };
        if silent(&mut r.c, &r.up, now, ping, &r.whose) {
            return self.end(slot, End::Silent(Side::Client));
        }
        if silent(&mut r.b, &r.down, now, ping, &r.whose) {
            return self.end(slot, End::Silent(Side::Bridge));
        }
        r.ping();
        self.drive(slot);
        // A ping written right away counts from this tick (the next one is a period later).
        if let Some(Some(r)) = self.slots.get_mut(slot) {
            for leg in [&mut r.c, &mut r.b] {
                if let Ping::Written { at, .. } = &mut leg.ping {
                    *at = (*at).min(now);
                }
            }
        }
    }
}

impl Relay {
    /// Moves bytes both ways as far as they go: whether a close frame started the closing
    /// handshake, and whether a direction stopped on its read budget (drive it again soon);
    /// `Err` when the relay is over.
    fn step(&mut self) -> Result<(bool, bool), End> {
        let (up, more_up) = pump(&mut self.up, &mut self.c, &mut self.b, Side::Client)?;
        let mut started = self.note(Side::Client, up);
        let (down, more_down) = pump(&mut self.down, &mut self.b, &mut self.c, Side::Bridge)?;
        started |= self.note(Side::Bridge, down);
        if let Some((side, code)) = self.closing {
            if self.c.closed && self.b.closed && !self.up.pending() && !self.down.pending() {
                return Err(End::Closed(side, code));
            }
        }
        Ok((started, more_up || more_down))
    }

    /// Records the first close frame [`pump`] saw; true when it is the first.
    fn note(&mut self, side: Side, close: Option<Option<u16>>) -> bool {
        match (close, self.closing) {
            (Some(code), None) => {
                self.closing = Some((side, code));
                true
            }
            _ => false,
        }
    }

    /// Queues a ping to each leg that has none out (not stacked: one at a time per leg).
    fn ping(&mut self) {
        if self.c.ping == Ping::Idle {
            let f = frame::control(Op::Ping, pipe::PING_PAYLOAD, None);
            self.down.queue(&f);
            self.c.ping = Ping::Queued(f.len());
        }
        if self.b.ping == Ping::Idle {
            let f = frame::control(Op::Ping, pipe::PING_PAYLOAD, Some(frame::mask_key()));
            self.up.queue(&f);
            self.b.ping = Ping::Queued(f.len());
        }
    }

    /// Queues each remaining leg its close frame (when its stream is at a frame boundary and its
    /// partner's close was not already passed on to it).
    fn begin_end(&mut self, end: End) {
        let (to_client, to_bridge) = closes(end);
        if let Some((code, reason)) = to_client.filter(|_| self.down.at_boundary() && !self.b.closed) {
            self.down.queue(&frame::control(Op::Close, &frame::close_payload(code, reason), None));
        }
        if let Some((code, reason)) = to_bridge.filter(|_| self.up.at_boundary() && !self.c.closed) {
            let payload = frame::close_payload(code, reason);
            self.up.queue(&frame::control(Op::Close, &payload, Some(frame::mask_key())));
        }
        (self.c.dropped, self.b.dropped) = dropped(end);
        self.ending = Some(end);
    }

    /// Writes what an ending relay still owes its legs; true when nothing is left.
    fn flush(&mut self) -> bool {
        let c_left = flush_leg(&mut self.down, &mut self.c);
        let b_left = flush_leg(&mut self.up, &mut self.b);
        !c_left && !b_left
    }
}

impl Drop for Loop {
    /// Only when the thread ends with relays open (the hub is exiting after failures): they
    /// are closed without their close frames, and still reported.
    fn drop(&mut self) {
        for r in self.slots.iter_mut().filter_map(Option::take) {
            let mut r = r;
            if let Some(f) = r.on_end.take() {
                self.bell.ring(f, r.ending.unwrap_or(End::Failed));
            }
        }
    }
}

/// Whether `leg` (read through `from`, its bytes' pipe) has let its ping go unanswered too
/// long at `now` (said in `whose`'s span). Bytes read from it since the last tick restart the wait.
fn silent(leg: &mut Leg, from: &Pipe, now: Instant, period: Duration, whose: &super::Whose) -> bool {
    let heard = std::mem::take(&mut leg.heard);
    // Not read by the hub during the period (its bytes wait for its partner): its answer may
    // be among them, and its wait starts again.
    let held = std::mem::take(&mut leg.held) || from.pending();
    let Ping::Written { at, ahead, .. } = &mut leg.ping else { return false };
    if heard || held {
        *at = now;
        return false;
    }
    let (at, ahead) = (*at, *ahead);
    let late = overdue(leg, now, period);
    if late {
        whose().in_scope(|| {
            tracing::debug!(waited = ?now.duration_since(at), ahead, "a relayed leg left a ping unanswered");
        });
    }
    late
}

/// Whether `leg`'s ping, written at `at`, has gone unanswered past its time at `now` (two
/// periods, and the time to read at [`SLOWEST_READER`] what went to it ahead of the ping).
fn overdue(leg: &Leg, now: Instant, period: Duration) -> bool {
    let Ping::Written { at, ahead, .. } = leg.ping else { return false };
    let reading = Duration::from_millis(ahead.saturating_mul(1000) / SLOWEST_READER);
    now >= at + SILENT_PERIODS * period + reading
}

/// Writes `pipe`'s rest to `dst` if it takes it; whether something is still owed to it.
fn flush_leg(pipe: &mut Pipe, dst: &mut Leg) -> bool {
    if dst.dropped || !pipe.pending() {
        return false;
    }
    if dst.writable {
        match write_to(pipe, dst) {
            Ok(blocked) => dst.writable = !blocked,
            Err(_) => {
                dst.dropped = true;
                return false;
            }
        }
    }
    pipe.pending()
}

/// Moves one direction as far as it goes now: writes what is approved, reads, approves, and
/// repeats until the source has nothing more, the destination takes nothing more
/// (backpressure: the source is not read while 16 KiB wait), or the read budget is spent.
/// Returns the code of a close frame that passed, if one did, and whether the budget ran out.
fn pump(
    pipe: &mut Pipe,
    src: &mut Leg,
    dst: &mut Leg,
    from: Side,
) -> Result<(Option<Option<u16>>, bool), End> {
    let to = other(from);
    let mut close = None;
    let mut budget = READ_BUDGET;
    loop {
        write(pipe, dst, to)?;
        src.held |= pipe.pending();
        if src.closed || !src.readable || !pipe.wants_read() {
            // Bytes that came with the handshake wait for approval here.
            if pipe.unapproved() {
                approve(pipe, src, from, &mut close)?;
                write(pipe, dst, to)?;
            }
            return Ok((close, false));
        }
        if budget == 0 {
            return Ok((close, true));
        }
        budget -= 1;
        let read = match pipe.read(&mut src.io) {
            Ok(Read::Eof) | Err(_) => return Err(End::Gone(from)),
            Ok(r) => r,
        };
        match read {
            Read::Pending => src.readable = false,
            Read::Drained if !src.hup => {
                src.readable = false;
                src.heard = true;
            }
            Read::Data | Read::Drained => src.heard = true,
            _ => {}
        }
        if pipe.unapproved() {
            approve(pipe, src, from, &mut close)?;
        }
        if read == Read::Full {
            write(pipe, dst, to)?;
            return Ok((close, false));
        }
    }
}

fn write(pipe: &mut Pipe, dst: &mut Leg, to: Side) -> Result<(), End> {
    if dst.writable && pipe.pending() {
        let blocked = write_to(pipe, dst).map_err(|_| End::Gone(to))?;
        dst.writable = !blocked;
    }
    Ok(())
}

fn approve(pipe: &mut Pipe, src: &mut Leg, from: Side, close: &mut Option<Option<u16>>) -> Result<(), End> {
    let found = pipe.approve().map_err(|f| match f {
        Fault::TooBig => End::TooBig(from),
        Fault::Protocol => End::Protocol(from),
    })?;
    if let (true, Ping::Written { through, .. }) = (found.pong, src.ping) {
        src.acked = through;
        src.ping = Ping::Idle;
    }
    if let Some(code) = found.close {
        src.closed = true;
        *close = Some(code);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read as _, Write as _};
    use std::os::unix::net::UnixStream as StdUnix;

    /// A connected pair: the peer's end (blocking) and the hub's (non-blocking).
    fn pair() -> (std::net::TcpStream, std::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (hub_end, _) = listener.accept().unwrap();
        hub_end.set_nonblocking(true).unwrap();
        peer.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        (peer, hub_end)
    }

    /// The opcode of the next frame a peer reads (a control frame: short, whole).
    fn next_opcode(peer: &mut std::net::TcpStream) -> u8 {
        let mut head = [0u8; 2];
        peer.read_exact(&mut head).unwrap();
        let masked = head[1] & 0x80 != 0;
        let mut rest = vec![0u8; usize::from(head[1] & 0x7f) + if masked { 4 } else { 0 }];
        peer.read_exact(&mut rest).unwrap();
        head[0] & 0x0f
    }

    #[test]
    fn a_pong_that_came_after_the_poll_answers_the_ping_before_the_leg_is_judged() {
        let (control, _control_peer) = StdUnix::pair().unwrap();
        control.set_nonblocking(true).unwrap();
        let (bell, _bell_peer) = StdUnix::pair().unwrap();
        bell.set_nonblocking(true).unwrap();
        let (_commands, rx) = mpsc::channel();
        let ping = Duration::from_millis(100);
        let bell = Bell { ended: Default::default(), socket: bell };
        let control = Control { socket: control, rung: Default::default() };
        let mut lp = Loop::new(control, rx, bell, ping).unwrap();
        let (mut client, hub_c) = pair();
        let (mut bridge, hub_b) = pair();
        let on_end = Box::new(|_| {});
        lp.open(super::super::Open {
            id: 0,
            client: hub_c,
            client_early: vec![],
            bridge: hub_b,
            bridge_early: vec![],
            on_end,
            whose: std::sync::Arc::new(tracing::Span::none),
        });
        // A tick: each leg gets its ping, written at once.
        let first = lp.next_ping;
        lp.expire(first);
        assert_eq!(next_opcode(&mut client), 0x9, "the client's ping");
        assert_eq!(next_opcode(&mut bridge), 0x9, "the bridge's ping");
        // Both answer, but the loop does not poll again before its next tick (as when the thread
        // lost its CPU between a poll and the clock reading that follows it).
        client.write_all(&frame::control(Op::Pong, pipe::PING_PAYLOAD, Some(frame::mask_key()))).unwrap();
        bridge.write_all(&frame::control(Op::Pong, pipe::PING_PAYLOAD, None)).unwrap();
        let r = lp.slots[0].as_ref().unwrap();
        for (leg, name) in [(&r.c, "client"), (&r.b, "bridge")] {
            let deadline = Instant::now() + Duration::from_secs(10);
            while leg.io.peek(&mut [0u8; 1]).is_err() {
                assert!(Instant::now() < deadline, "the {name}'s pong never reached the hub's socket");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        // Judged long past the legs' time: their pongs are read first, and they answered.
        lp.expire(first + 10 * ping);
        let r = lp.slots[0].as_ref().expect("the relay was ended");
        assert_eq!(r.ending, None, "a leg whose pong waited in its socket was judged silent");
        assert!(r.c.acked > 0 && r.b.acked > 0, "both pongs were taken");
    }
}
