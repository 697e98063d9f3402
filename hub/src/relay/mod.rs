//! The WebSocket relay: ONE thread (`zcode-relay`) runs every relayed connection in its own
//! edge-triggered epoll loop (mio), the way nginx runs its upstreams; the HTTP side of the hub
//! (tokio, hyper) only hands the two sockets of a new relay over to it. A relay is two sockets
//! and one [`pipe::Pipe`] per direction; a readiness event reads, checks and writes with plain
//! `recv`/`send` calls, without waking a task, so a relayed message costs the relay two system
//! calls and well under a microsecond of its own work (`scripts/bench-relay`; the tokio-task
//! relay this replaced spent twice nginx's user time per message). The loop also keeps relays
//! apart from the API: no handler can delay a relayed frame.
//!
//! Frames are relayed byte for byte: the hub parses headers only (boundaries, the framing
//! rules, the 32 MiB message cap) and streams payloads through a 16 KiB buffer that is pooled
//! and released whenever a direction is drained. So every frame keeps its opcode (trap 1 of the
//! original: text forwarded as binary vanished in every ACP client), nothing is re-encoded, and
//! an idle relay holds two sockets and a few hundred bytes of state. A slow reader is met with
//! backpressure: its partner is not read while its 16 KiB is unwritten (per-leg queued writes
//! are bounded by that, far under the 8 MiB cap).
//!
//! Pings and closing: every `ping` period the hub pings both legs of every relay (its pongs
//! are not forwarded); a leg that has not answered the previous ping is closed, and its partner
//! gets a close frame. Pings and closes between client and bridge pass through, so a close
//! handshake is the endpoints' own (the client sees the bridge's close code). A leg that
//! vanishes gets its partner closed at once: 1011 to a client whose bridge went away, 1001 to a
//! bridge whose client did; 1009 for a message over the cap, 1002 for broken framing, 1001 on
//! shutdown. Close frames are injected only at a frame boundary (otherwise the TCP connection
//! is just closed), and each close is bounded by 500 ms.

mod event_loop;
mod frame;
#[cfg(test)]
mod fuzz;
mod pipe;

use std::io;
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

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
    /// The hub is restarting onto a new binary (1012 "service restart").
    Restart,
    /// The client's credential was revoked or rotated (1008 to the client).
    Revoked,
    /// The relay thread failed (its `poll` erred, or it panicked) and started over.
    Failed,
}

/// Called once when a relay has ended and both its sockets are closed (on the hub's tokio
/// runtime, never on the relay thread).
pub type OnEnd = Box<dyn FnOnce(End) + Send>;

/// A relay to start: both sockets (non-blocking, connected, the WebSocket handshakes done),
/// each with the bytes already read from it during its handshake.
pub struct Open {
    /// The hub's number for it (what [`Relays::end`] names).
    pub id: u64,
    /// The remote client's connection.
    pub client: TcpStream,
    /// Bytes the client sent after its upgrade request, already read.
    pub client_early: Vec<u8>,
    /// The connection to the bridge.
    pub bridge: TcpStream,
    /// Bytes the bridge sent after its 101, already read.
    pub bridge_early: Vec<u8>,
    /// Told how the relay ended (always called, also when it could not start).
    pub on_end: OnEnd,
    /// Whose it is: the span the relay thread logs its own lines of this relay in.
    pub whose: Whose,
}

/// Makes a relay's span when one of its lines is logged (kept as a maker, not a span: a span
/// held for an idle relay's life would cost the subscriber a few hundred bytes).
pub type Whose = std::sync::Arc<dyn Fn() -> tracing::Span + Send + Sync>;

/// The send buffer asked of the kernel for a relayed client's socket (it doubles it): 256 KiB
/// marks it writable again every ~128 KiB taken, and is far above what a phone's link (or the
/// loopback to a tunnel) needs for full speed.
const CLIENT_SEND_BUFFER: usize = 128 * 1024;

/// The relay thread's handle. Dropping it shuts every relay down.
pub struct Relays {
    /// The commands' channel and the socket that wakes the loop for them.
    to_loop: Mutex<(UnixStream, mpsc::Sender<event_loop::Command>)>,
    /// Set when a byte is on the control socket that the loop has not yet taken the
    /// commands of (it clears it before it takes them): a command sent meanwhile needs no
    /// byte of its own (a burst of opens would otherwise cost a write and a read each).
    rung: Arc<AtomicBool>,
    /// The clients' sockets come from a listener given their options ([`Relays::prepare`]).
    client_ready: AtomicBool,
    /// [`unacked_limit`] of the relays' ping.
    unacked: u32,
}

/// How long a relayed leg's written bytes may stay unacknowledged, or its window shut, before
/// TCP ends the connection (`TCP_USER_TIMEOUT`, ms): two ping periods, at least 10 s. A leg
/// that takes none of our bytes is never judged by its pongs (its ping may not even go out).
pub fn unacked_limit(ping: Duration) -> u32 {
    u32::try_from(ping.max(Duration::from_secs(5)).as_millis() * 2).unwrap_or(u32::MAX)
}

/// Relays that have ended, with what to call for each. The relay thread fills it and rings
/// (one byte on a socket pair); a task on the hub's runtime empties it and makes the calls, so
/// that no callback (a lock, a task to wake) ever runs on the relay thread.
type Ended = Arc<Mutex<Vec<(OnEnd, End)>>>;

impl Relays {
    /// Starts the relay thread and the task that reports relays' ends (on the current tokio
    /// runtime); relays ping both legs every `ping`.
    pub fn start(ping: Duration) -> io::Result<Relays> {
        let (ours, theirs) = UnixStream::pair()?;
        ours.set_nonblocking(true)?;
        theirs.set_nonblocking(true)?;
        let (bell_in, bell_out) = UnixStream::pair()?;
        bell_in.set_nonblocking(true)?;
        bell_out.set_nonblocking(true)?;
        let (tx, rx) = mpsc::channel();
        let ended: Ended = Arc::default();
        let (ready_tx, ready_rx) = mpsc::sync_channel(1);
        let bell = event_loop::Bell { ended: ended.clone(), socket: bell_out };
        let rung = Arc::new(AtomicBool::new(false));
        let control = event_loop::Control { socket: theirs, rung: rung.clone() };
        std::thread::Builder::new().name("zcode-relay".into()).spawn(move || match event_loop::Loop::new(
            control, rx, bell, ping,
        ) {
            Ok(mut lp) => {
                let _ = ready_tx.send(Ok(()));
                supervise(&mut lp);
            }
            Err(e) => {
                let _ = ready_tx.send(Err(e));
            }
        })?;
        ready_rx.recv().map_err(|_| io::Error::other("the relay thread ended at its start"))??;
        tokio::spawn(report_ends(tokio::net::UnixStream::from_std(bell_in)?, ended));
        Ok(Relays {
            to_loop: Mutex::new((ours, tx)),
            rung,
            client_ready: AtomicBool::new(false),
            unacked: unacked_limit(ping),
        })
    }

    /// Gives `listener` the socket options a relayed client's connection needs, which Linux
    /// copies to every connection it accepts (no Nagle, [`CLIENT_SEND_BUFFER`], the
    /// [`unacked_limit`]): set once, not per relay, and every later [`Relays::open`] trusts its
    /// clients' sockets to carry them. Whether they were set (never elsewhere than on Linux,
    /// where each relay sets its own).
    pub fn prepare(&self, listener: &impl std::os::fd::AsFd) -> bool {
        #[cfg(target_os = "linux")]
        {
            use nix::sys::socket::{setsockopt, sockopt};
            let set = setsockopt(listener, sockopt::TcpNoDelay, &true)
                .and_then(|()| setsockopt(listener, sockopt::SndBuf, &CLIENT_SEND_BUFFER))
                .and_then(|()| setsockopt(listener, sockopt::TcpUserTimeout, &self.unacked));
            if let Err(e) = set {
                tracing::debug!("each relay sets its client's socket options: {e}");
            }
            self.client_ready.store(set.is_ok(), Ordering::Relaxed);
            set.is_ok()
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = listener;
            false
        }
    }

    /// Starts relaying between `open`'s client and bridge.
    pub fn open(&self, open: Open) {
        // A bounded send buffer to the client, like the bridge's own (`bridge::server`): the
        // kernel marks a socket writable again only once half of what is queued has drained,
        // and with the loopback's autotuned 4 MiB a client reading at 50 KiB/s left the relay
        // unwritable ~40 s at a time; the relay then read nothing from the bridge, whose
        // writes stood still that long, and the bridge dropped the relay as a client that
        // takes nothing (its 30 s stall rule) while the phone read steadily. Set on the
        // listener already where it could be ([`Relays::prepare`]).
        if !self.client_ready.load(Ordering::Relaxed) {
            use nix::sys::socket::{setsockopt, sockopt};
            let _ = setsockopt(&open.client, sockopt::SndBuf, &CLIENT_SEND_BUFFER);
            let _ = setsockopt(&open.client, sockopt::TcpUserTimeout, &self.unacked);
        }
        if let Err(event_loop::Command::Open(open)) = self.tell(event_loop::Command::Open(open)) {
            // The relay thread is gone (it only ends after a shutdown): closed at once, as
            // the loop closes relays opened while it shuts down.
            refuse(open);
        }
    }

    /// Sends `cmd` to the relay thread and wakes it; gives it back if the thread is gone.
    fn tell(&self, cmd: event_loop::Command) -> Result<(), event_loop::Command> {
        let to_loop = self.to_loop.lock().unwrap_or_else(|p| p.into_inner());
        to_loop.1.send(cmd).map_err(|mpsc::SendError(cmd)| cmd)?;
        // Rung already (and not yet taken): the loop takes this command with the others. A
        // full socket has rings waiting already: the loop wakes anyway.
        if !self.rung.swap(true, Ordering::SeqCst) {
            let _ = std::io::Write::write(&mut &to_loop.0, &[1]);
        }
        Ok(())
    }

    /// Closes the relays numbered `ids` (their credential was revoked): 1008 to the client,
    /// 1001 to the bridge.
    pub fn end(&self, ids: Vec<u64>) {
        let _ = self.tell(event_loop::Command::End(ids, End::Revoked));
    }

    /// Closes every relay with 1001 (each bounded by 500 ms); relays opened afterwards are
    /// closed at once. The thread ends when the last one has.
    pub fn shutdown(&self) {
        let _ = self.tell(event_loop::Command::Shutdown(End::Shutdown));
    }

    /// Like [`Relays::shutdown`], with 1012 "service restart": the hub is being replaced by a
    /// new binary and clients should reconnect.
    pub fn restart(&self) {
        let _ = self.tell(event_loop::Command::Shutdown(End::Restart));
    }
}

/// Failures of the relay thread tolerated within [`FAILURE_WINDOW`] before the hub gives up.
const MAX_FAILURES: usize = 5;
const FAILURE_WINDOW: Duration = Duration::from_secs(60);
/// The hub's exit status when its relay thread cannot go on (EX_SOFTWARE).
const EXIT_RELAY_FAILED: i32 = 70;

/// Runs the relay loop on this thread until it ends normally. When it fails (`poll` errs) or
/// panics, the failure is logged, its relays are closed with 1011 and it runs again. More than
/// [`MAX_FAILURES`] failures within [`FAILURE_WINDOW`], or a loop that cannot start over, and
/// the hub exits with status 70 (the next bridge heartbeat starts a new hub): a hub whose relay
/// thread is gone would answer HTTP and refuse every WebSocket forever.
fn supervise(lp: &mut event_loop::Loop) {
    let mut failures: Vec<std::time::Instant> = Vec::new();
    loop {
        let why = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| lp.run())) {
            Ok(Ok(())) => return,
            Ok(Err(e)) => format!("its poll failed: {e}"),
            Err(panic) => {
                let msg = panic.downcast_ref::<&str>().map(|s| s.to_string());
                let msg = msg.or_else(|| panic.downcast_ref::<String>().cloned());
                format!("it panicked: {}", msg.as_deref().unwrap_or("(no message)"))
            }
        };
        let now = std::time::Instant::now();
        failures.retain(|t| now.duration_since(*t) < FAILURE_WINDOW);
        failures.push(now);
        if failures.len() > MAX_FAILURES {
            tracing::error!(
                "the relay thread failed ({why}), {} times within {FAILURE_WINDOW:?}: the hub exits",
                failures.len()
            );
            std::process::exit(EXIT_RELAY_FAILED);
        }
        tracing::error!(
            "the relay thread failed ({why}): its relays are closed with 1011 and it starts again"
        );
        if let Err(e) = lp.fail() {
            tracing::error!("the relay thread cannot start again ({e}): the hub exits");
            std::process::exit(EXIT_RELAY_FAILED);
        }
    }
}

/// Makes the calls for relays that ended, each time the relay thread rings; until it ends.
async fn report_ends(mut bell: tokio::net::UnixStream, ended: Ended) {
    use tokio::io::AsyncReadExt;
    let mut rings = [0u8; 64];
    loop {
        let over = matches!(bell.read(&mut rings).await, Ok(0) | Err(_));
        let calls = std::mem::take(&mut *ended.lock().unwrap_or_else(|p| p.into_inner()));
        for (on_end, end) in calls {
            on_end(end);
        }
        if over {
            return;
        }
    }
}

/// Closes a relay that cannot run with 1001 on both legs (best effort: one small write to
/// sockets that have sent nothing yet) and reports it as shut down.
fn refuse(o: Open) {
    use std::io::Write;
    let reason = frame::close_payload(1001, "hub shutting down");
    let _ = (&o.client).write(&frame::control(frame::Op::Close, &reason, None));
    let _ = (&o.bridge).write(&frame::control(frame::Op::Close, &reason, Some(frame::mask_key())));
    for s in [&o.client, &o.bridge] {
        let _ = s.shutdown(std::net::Shutdown::Write);
    }
    drop((o.client, o.bridge));
    (o.on_end)(End::Shutdown);
}

impl Drop for Relays {
    fn drop(&mut self) {
        self.shutdown();
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
        End::Restart => (Some((1012, "service restart")), Some((1012, "service restart"))),
        End::Revoked => (Some((1008, "credential revoked")), Some((1001, "client went away"))),
        End::Failed => (Some((1011, "hub relay failed")), Some((1011, "hub relay failed"))),
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
