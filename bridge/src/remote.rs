//! One remote client's WebSocket, run by ONE task: it reads the client's frames into the
//! router and writes the client's outbox, polling both from the same place.
//!
//! Memory is the point (thousands of idle clients are the common case behind the hub): a
//! reader and a writer task cost two task allocations, a shared lock around the socket and a
//! timer each; here an idle client is one task parked on its socket and its outbox, with no
//! timer. The stall check ([`crate::stall`]) arms a timer only while a write is blocked, since
//! only then can the client be stalled.
//!
//! The outbox's messages are framed here, not by tungstenite, whose write buffer stays as big
//! as the largest batch it ever held (a replayed message of megabytes, kept for the client's
//! life): what piled up goes out in one write of up to [`WRITE_BATCH`] bytes and the buffer
//! is dropped once written. tungstenite still writes its own frames (pongs, the close frame):
//! ours start only once its are out, and it is not read (where it writes pongs) while one of
//! ours is half written. While a write is blocked no more is taken from the outbox, so its
//! byte limit keeps bounding a client that does not read.

use crate::router::{ClientId, Event, OutboxReader};
use crate::stall::Stall;
use futures_util::{Sink, SinkExt, Stream};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, frame::coding::CloseCode};
use tokio_tungstenite::tungstenite::{Error as WsError, Message, error::CapacityError};
use zcode_shared::jsonrpc::{ParseError, RawMessage};

/// The most bytes of queued messages gathered into one write to a remote client (tungstenite
/// writes its buffer out once it holds this much, and on every flush).
pub const WRITE_BATCH: usize = 16 * 1024;

/// What one client's task was given.
pub struct Remote<S> {
    /// The upgraded socket.
    pub ws: WebSocketStream<S>,
    /// Its write state (see [`crate::stall`]).
    pub stall: Arc<Stall>,
    /// The client's id.
    pub client: ClientId,
    /// Its outbox's reading end (also how the router drops it: [`OutboxReader::poll_killed`]).
    pub outbox: OutboxReader,
    /// Its write side, and how long its socket may take nothing: here in the box rather than
    /// in the task, whose allocation is rounded up to 128 bytes (with these in it, an idle
    /// client's task took 384 bytes; without, 256).
    w: Writer,
    limit: Duration,
    /// A handed-over client's pings ([`crate::handoff`]: the hub no longer pings it); none for
    /// the hub's own dials and local tools (the hub's relay pings its clients).
    ping: Option<Box<Pinger>>,
}

/// Pings a client every period; one that has not answered the last ping by the next is
/// silent (the hub's relay kept the same rule).
struct Pinger {
    period: Duration,
    timer: Pin<Box<Sleep>>,
    /// A ping went out and no pong has come back since.
    awaiting: bool,
}

impl<S> Remote<S> {
    /// A client to [`run`]; it is dropped once its socket has taken nothing for `write_stall`.
    pub fn new(
        ws: WebSocketStream<S>,
        stall: Arc<Stall>,
        client: ClientId,
        outbox: OutboxReader,
        write_stall: Duration,
    ) -> Box<Remote<S>> {
        let limit = write_stall.max(Duration::from_millis(10));
        Box::new(Remote { ws, stall, client, outbox, w: Writer::default(), limit, ping: None })
    }

    /// Pings the client every `period` and drops it when it leaves a ping unanswered that long.
    pub fn pinging(mut self: Box<Self>, period: Duration) -> Box<Remote<S>> {
        let period = period.max(Duration::from_millis(10));
        let timer = Box::pin(tokio::time::sleep(period));
        self.ping = Some(Box::new(Pinger { period, timer, awaiting: false }));
        self
    }
}

/// Why the loop stopped, or what it got.
enum Step {
    Read(Option<Result<Message, WsError>>),
    /// Killed or dropped by the router: a close frame saying the bridge is closing.
    Away,
    /// Its socket took nothing for a whole stall period.
    Stalled,
    /// A write failed: the socket is gone, no close frame.
    Broken,
    /// It left a ping unanswered for a whole period.
    Silent,
}

/// The write side's state.
#[derive(Default)]
struct Writer {
    /// Encoded frames not written yet, from `at` on; empty (no buffer) once written.
    out: Vec<u8>,
    at: usize,
    /// Armed only while a write is blocked: when the client counts as stalled.
    stall_timer: Option<Pin<Box<Sleep>>>,
}

/// Runs the client until it or the bridge ends it; the router is told `Closed` at the end.
pub async fn run<S>(mut r: Box<Remote<S>>, events: &mpsc::Sender<Event>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let code = loop {
        let Remote { ws, stall, client, outbox, w, limit, ping } = &mut *r;
        let (client, limit) = (*client, *limit);
        let step = std::future::poll_fn(|cx| {
            if outbox.poll_killed(cx).is_ready() {
                return Poll::Ready(Step::Away);
            }
            if let Some(p) = ping.as_deref_mut() {
                if p.poll_due(w, stall, cx) {
                    return Poll::Ready(Step::Silent);
                }
            }
            match w.poll_write(ws, outbox, cx) {
                Poll::Ready(step) => return Poll::Ready(step),
                Poll::Pending => {}
            }
            // Not while a frame of ours is half written: tungstenite would write a pong into it.
            if !w.mid_frame() {
                if let Poll::Ready(frame) = Pin::new(&mut *ws).poll_next(cx) {
                    return Poll::Ready(Step::Read(frame));
                }
            }
            // Last: reading may have blocked a write too (tungstenite answers pings there).
            w.poll_stalled(stall, limit, cx).map(|()| Step::Stalled)
        })
        .await;
        // Taken apart in a function of its own, the step wholly moved into it: a step held
        // across the await below (a tungstenite error is ~100 B) would be part of the task's
        // state, which an idle client carries for life.
        if let (Step::Read(Some(Ok(Message::Pong(_)))), Some(p)) = (&step, r.ping.as_deref_mut()) {
            p.awaiting = false;
        }
        let cut = matches!(step, Step::Away).then(|| r.outbox.cut_code()).flatten();
        if let Some(code) = cut {
            break Some(CloseCode::from(code));
        }
        let msg = match then(step, client, limit) {
            Then::Forward(msg) => msg,
            Then::Next => continue,
            Then::End(code) => break code,
        };
        let sent = match forward(events, msg, client) {
            Ok(sent) => sent,
            Err(waiting) => waiting.await,
        };
        if !sent {
            break Some(CloseCode::Away);
        }
    };
    // Boxed, for the same reason: it runs once, at the end.
    Box::pin(close(r, code, events)).await;
}

/// What a step means.
enum Then {
    /// A message for the router.
    Forward(Result<RawMessage, ParseError>),
    /// Nothing to do.
    Next,
    /// The client ends, with this close frame (none: the socket is gone).
    End(Option<CloseCode>),
}

fn then(step: Step, client: ClientId, limit: Duration) -> Then {
    match step {
        Step::Read(Some(Ok(Message::Text(t)))) => Then::Forward(RawMessage::parse(t.as_str())),
        // Binary frames are not ACP; pings are answered by the library.
        Step::Read(Some(Ok(
            Message::Binary(_) | Message::Ping(_) | Message::Pong(_) | Message::Frame(_),
        ))) => Then::Next,
        Step::Read(Some(Err(WsError::Capacity(CapacityError::MessageTooLong { size, .. })))) => {
            let _in = crate::router::trace::client(client).entered();
            tracing::warn!(size, "remote client sent a message over 32 MiB: closing it (1009)");
            Then::End(Some(CloseCode::Size))
        }
        Step::Read(Some(Err(WsError::Utf8(_)))) => {
            let _in = crate::router::trace::client(client).entered();
            tracing::warn!("remote client sent a text frame that is not UTF-8: closing it (1007)");
            Then::End(Some(CloseCode::Invalid))
        }
        Step::Read(Some(Ok(Message::Close(_)))) => Then::End(Some(CloseCode::Normal)),
        Step::Read(Some(Err(_)) | None) | Step::Away => Then::End(Some(CloseCode::Away)),
        Step::Stalled => {
            let _in = crate::router::trace::client(client).entered();
            tracing::warn!("remote client took nothing for {limit:?}: dropping it");
            Then::End(Some(CloseCode::Policy))
        }
        Step::Silent => {
            let _in = crate::router::trace::client(client).entered();
            tracing::info!("remote client left a ping unanswered: dropping it");
            Then::End(None)
        }
        Step::Broken => Then::End(None),
    }
}

/// Hands `event` to the router: `Ok` at once when its queue has room (the usual case) or it is
/// gone (`false`); else the send to wait for, boxed, so a waiting send's state (the event, a
/// semaphore waiter) is not part of every client's task.
#[allow(clippy::type_complexity)]
fn forward(
    events: &mpsc::Sender<Event>,
    msg: Result<RawMessage, ParseError>,
    client: ClientId,
) -> Result<bool, Pin<Box<impl Future<Output = bool> + '_>>> {
    let gate = &crate::bounds::ROUTER;
    let size = crate::bounds::Gate::message_size(&msg);
    let mut event = Event::Frame { client, msg };
    // Over the router's byte bound: wait (below) before counting it in; else counted in now.
    let over = gate.over();
    if !over {
        gate.add(size);
        match events.try_send(event) {
            Ok(()) => return Ok(true),
            Err(mpsc::error::TrySendError::Closed(_)) => {
                gate.sub(size);
                return Ok(false);
            }
            Err(mpsc::error::TrySendError::Full(back)) => event = back,
        }
    }
    Err(Box::pin(async move {
        if over {
            gate.below().await;
            gate.add(size);
        }
        let sent = events.send(event).await.is_ok();
        if !sent {
            gate.sub(size);
        }
        sent
    }))
}

/// The end of a client: the router is told `Closed`, then (unless the socket broke) what was
/// gathered is written and a close frame with `code` is sent, each within a short limit.
async fn close<S>(mut r: Box<Remote<S>>, code: Option<CloseCode>, events: &mpsc::Sender<Event>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let _ = events.send(Event::Closed { client: r.client }).await;
    if let Some(code) = code {
        let reason = match (r.outbox.cut_code(), code) {
            // A handed-over client cut by its hub (`crate::handoff`): the relay's reasons.
            (Some(1008), _) => "credential revoked",
            (Some(1012), _) => "service restart",
            (Some(_), _) => "hub shutting down",
            (None, CloseCode::Size) => "message too big",
            (None, CloseCode::Invalid) => "text frame not UTF-8",
            (None, CloseCode::Policy) => "not reading",
            (None, _) => "bridge closing",
        };
        let frame = CloseFrame { code, reason: reason.into() };
        let close = async {
            // What was queued before goes first, and a half-written frame must be finished.
            std::future::poll_fn(|cx| r.w.poll_drain(&mut r.ws, cx)).await?;
            r.ws.send(Message::Close(Some(frame))).await.map_err(|_| ())
        };
        let _ = tokio::time::timeout(Duration::from_millis(500), close).await;
        let _ = tokio::time::timeout(Duration::from_millis(200), SinkExt::close(&mut r.ws)).await;
    }
}

impl Pinger {
    /// At each period's end: `true` when the last ping is still unanswered (and the client's
    /// socket takes our bytes: one that takes none is the stall rule's, its ping may not have
    /// gone out), else a ping is queued for the writer.
    fn poll_due(&mut self, w: &mut Writer, stall: &Stall, cx: &mut Context<'_>) -> bool {
        while self.timer.as_mut().poll(cx).is_ready() {
            if self.awaiting && stall.blocked_since().is_none() {
                return true;
            }
            self.awaiting = true;
            // FIN, ping, no payload: a server's frames are not masked.
            w.out.extend_from_slice(&[0x89, 0x00]);
            let next = Instant::now() + self.period;
            self.timer.as_mut().reset(next);
        }
        false
    }
}

impl Writer {
    /// Moves the outbox to the socket until one of them blocks. `Ready` ends the client.
    fn poll_write<S>(
        &mut self,
        ws: &mut WebSocketStream<S>,
        outbox: &mut OutboxReader,
        cx: &mut Context<'_>,
    ) -> Poll<Step>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        loop {
            match self.poll_drain(ws, cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(())) => return Poll::Ready(Step::Broken),
                Poll::Pending => return Poll::Pending,
            }
            // Drained: gather what is queued now (one write per batch, not per message).
            let line = match outbox.poll_recv(cx) {
                Poll::Ready(Some(line)) => line,
                Poll::Ready(None) => return Poll::Ready(Step::Away),
                Poll::Pending => return Poll::Pending,
            };
            self.push(&line);
            while self.out.len() < WRITE_BATCH {
                let Some(line) = outbox.try_recv() else { break };
                self.push(&line);
            }
        }
    }

    /// Whether a frame of ours is partly written (nothing else may be written until it is).
    fn mid_frame(&self) -> bool {
        self.at > 0
    }

    /// Writes out what is gathered; `Ok` once nothing is left (and the buffer is given back:
    /// it is as big as the largest batch, a whole replayed message at times).
    fn poll_drain<S>(&mut self, ws: &mut WebSocketStream<S>, cx: &mut Context<'_>) -> Poll<Result<(), ()>>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        if self.out.is_empty() {
            return Poll::Ready(Ok(()));
        }
        if self.at == 0 {
            // tungstenite's own frames (pongs) first, whole: ours must not cut into one.
            match Pin::new(&mut *ws).poll_flush(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(_)) => return Poll::Ready(Err(())),
                Poll::Pending => return Poll::Pending,
            }
        }
        while self.at < self.out.len() {
            match Pin::new(ws.get_mut()).poll_write(cx, &self.out[self.at..]) {
                Poll::Ready(Ok(0) | Err(_)) => return Poll::Ready(Err(())),
                Poll::Ready(Ok(n)) => self.at += n,
                Poll::Pending => return Poll::Pending,
            }
        }
        (self.out, self.at) = (Vec::new(), 0);
        Poll::Ready(Ok(()))
    }

    /// Appends `line` as one unmasked text frame (RFC 6455 §5.2: a server does not mask).
    /// A line that is not UTF-8 cannot be a text frame, and is not sent.
    fn push(&mut self, line: &[u8]) {
        if std::str::from_utf8(line).is_err() {
            tracing::warn!("dropped a message to a remote client that is not UTF-8");
            return;
        }
        let len = line.len();
        self.out.push(0x81); // FIN, text
        if len < 126 {
            self.out.push(len as u8);
        } else if let Ok(short) = u16::try_from(len) {
            self.out.push(126);
            self.out.extend_from_slice(&short.to_be_bytes());
        } else {
            self.out.push(127);
            self.out.extend_from_slice(&(len as u64).to_be_bytes());
        }
        self.out.extend_from_slice(line);
    }

    /// `Ready` once writes have been blocked, without a byte taken, for `limit`. The timer
    /// exists only while they are blocked.
    fn poll_stalled(&mut self, stall: &Stall, limit: Duration, cx: &mut Context<'_>) -> Poll<()> {
        let Some(since) = stall.blocked_since() else {
            self.stall_timer = None;
            return Poll::Pending;
        };
        let deadline = Instant::from_std(since) + limit;
        match &mut self.stall_timer {
            Some(t) if t.deadline() == deadline => {}
            Some(t) => t.as_mut().reset(deadline),
            None => self.stall_timer = Some(Box::pin(tokio::time::sleep_until(deadline))),
        }
        match &mut self.stall_timer {
            Some(t) => t.as_mut().poll(cx),
            None => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::router::Outbox;
    use crate::stall::Watched;
    use bytes::Bytes;
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::protocol::Role;

    fn line(len: usize) -> Bytes {
        Bytes::from((0..len).map(|i| b'a' + (i % 26) as u8).collect::<Vec<u8>>())
    }

    async fn pair()
    -> (WebSocketStream<Watched<tokio::io::DuplexStream>>, WebSocketStream<tokio::io::DuplexStream>) {
        let (ours, theirs) = tokio::io::duplex(64 * 1024);
        let server = WebSocketStream::from_raw_socket(
            Watched::new(ours, Arc::new(Stall::default())),
            Role::Server,
            None,
        )
        .await;
        (server, WebSocketStream::from_raw_socket(theirs, Role::Client, None).await)
    }

    #[tokio::test]
    async fn every_frame_length_arrives_whole_in_order_with_pongs_between_and_a_close_ends_it() {
        let (ws, mut client) = pair().await;
        let (out, outbox) = Outbox::new(None);
        let (events, mut got) = mpsc::channel(8);
        let remote = Remote::new(ws, Arc::new(Stall::default()), 7, outbox, Duration::from_secs(60));
        let task = tokio::spawn(async move { run(remote, &events).await });
        // Every length encoding (7-bit, 16-bit, 64-bit) at its edges, and a batch past WRITE_BATCH.
        let sizes = [0, 1, 125, 126, 127, 65_535, 65_536, 1 << 20, 3, 3, 3];
        for (i, n) in sizes.iter().enumerate() {
            client.send(Message::Ping(format!("p{i}").into())).await.unwrap();
            assert!(out.send(line(*n)));
        }
        let mut texts = Vec::new();
        let mut pongs = 0;
        while texts.len() < sizes.len() || pongs < sizes.len() {
            match client.next().await.unwrap().unwrap() {
                Message::Text(t) => texts.push(Bytes::from(t)),
                Message::Pong(_) => pongs += 1,
                m => panic!("unexpected {m:?}"),
            }
        }
        let want: Vec<Bytes> = sizes.iter().map(|n| line(*n)).collect();
        assert!(texts == want, "the messages, whole and in order");
        client.send(Message::text("{\"hello\":1}")).await.unwrap();
        assert!(matches!(got.recv().await, Some(Event::Frame { client: 7, .. })));
        client.send(Message::Close(None)).await.unwrap();
        assert!(matches!(got.recv().await, Some(Event::Closed { client: 7 })));
        task.await.unwrap();
    }

    #[tokio::test]
    async fn a_frame_waits_while_the_routers_channel_holds_more_than_the_limit_in_bytes() {
        let gate = &crate::bounds::ROUTER;
        let (events, mut got) = mpsc::channel(8);
        let msg = RawMessage::parse(r#"{"jsonrpc":"2.0","method":"m","params":{"x":"0123456789"}}"#);
        let size = crate::bounds::Gate::message_size(&msg);
        assert!(size > 10, "{size}");
        // Messages of other readers wait, over the limit (other tests of this binary share the
        // gate: theirs wait a moment too).
        let held = crate::bounds::max_message() + 1;
        gate.add(held);
        let Err(mut waiting) = forward(&events, msg, 3) else {
            panic!("sent while the router was over its bound")
        };
        let polled = std::future::poll_fn(|cx| Poll::Ready(waiting.as_mut().poll(cx))).await;
        assert!(polled.is_pending(), "the frame went on over the bound");
        assert!(got.try_recv().is_err(), "nothing reached the router");
        // The router takes them: the frame goes on, counted in until the router takes it.
        gate.sub(held);
        assert!(waiting.await, "sent");
        let Some(Event::Frame { client: 3, msg }) = got.recv().await else { panic!("the frame") };
        gate.message_taken(&msg);
    }

    #[tokio::test]
    async fn a_killed_outbox_ends_the_client_at_once_even_while_its_writes_are_blocked() {
        let (ws, mut client) = pair().await;
        let (out, outbox) = Outbox::new(None);
        let (events, mut got) = mpsc::channel(8);
        let remote = Remote::new(ws, Arc::new(Stall::default()), 9, outbox, Duration::from_secs(60));
        let task = tokio::spawn(async move { run(remote, &events).await });
        assert!(out.send(line(10)));
        assert!(matches!(client.next().await.unwrap().unwrap(), Message::Text(_)));
        // 4 MiB the client does not read: the write blocks (the pipe holds 64 KiB).
        assert!(out.send(line(4 << 20)));
        out.kill();
        assert!(matches!(got.recv().await, Some(Event::Closed { client: 9 })), "killed, outbox still open");
        task.await.unwrap();
        drop(out);
    }

    #[tokio::test]
    async fn the_write_buffer_is_given_back_once_a_big_message_is_written() {
        let (mut ws, mut client) = pair().await;
        let (out, mut outbox) = Outbox::new(None);
        let reading = tokio::spawn(async move { client.next().await.unwrap().unwrap().len() });
        assert!(out.send(line(4 << 20)));
        let mut w = Writer::default();
        // Written once the outbox is empty again (the client reads meanwhile).
        std::future::poll_fn(|cx| match w.poll_write(&mut ws, &mut outbox, cx) {
            Poll::Ready(_) => Poll::Ready(()),
            Poll::Pending if w.out.is_empty() => Poll::Ready(()),
            Poll::Pending => Poll::Pending,
        })
        .await;
        assert_eq!(reading.await.unwrap(), 4 << 20);
        assert_eq!(w.out.capacity(), 0, "no buffer kept after a 4 MiB message");
    }
}
