//! One remote client's WebSocket, run by ONE task: it reads the client's frames into the
//! router and writes the client's outbox, polling both from the same place.
//!
//! Memory is the point (thousands of idle clients are the common case behind the hub): a
//! reader and a writer task cost two task allocations, a shared lock around the socket and a
//! timer each; here an idle client is one task parked on its socket and its outbox, with no
//! timer. The stall check ([`crate::stall`]) arms a timer only while a write is blocked, since
//! only then can the client be stalled.
//!
//! Writes are batched as before: what piled up in the outbox goes out in one write of up to
//! [`WRITE_BATCH`] bytes. While a write is blocked no more is taken from the outbox, so its
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
use tokio_tungstenite::tungstenite::{Error as WsError, Message, Utf8Bytes, error::CapacityError};
use tokio_util::sync::CancellationToken;
use zcode_shared::jsonrpc::RawMessage;

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
    /// Its outbox's reading end.
    pub outbox: OutboxReader,
    /// Cancelled to drop it (slow reader, shutdown).
    pub kill: CancellationToken,
    /// Dropped once its socket has taken nothing for this long.
    pub write_stall: Duration,
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
}

/// The write side's state.
struct Writer {
    /// Messages given to tungstenite and not flushed yet.
    unflushed: bool,
    /// Their bytes (at [`WRITE_BATCH`], or once the outbox is empty, they are flushed).
    batched: usize,
    /// Armed only while a write is blocked: when the client counts as stalled.
    stall_timer: Option<Pin<Box<Sleep>>>,
}

/// Runs the client until it or the bridge ends it; the router is told `Closed` at the end.
pub async fn run<S>(mut r: Remote<S>, events: &mpsc::Sender<Event>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let client = r.client;
    let limit = r.write_stall.max(Duration::from_millis(10));
    let mut w = Writer { unflushed: false, batched: 0, stall_timer: None };
    let cancelled = r.kill.clone().cancelled_owned();
    tokio::pin!(cancelled);
    let code = loop {
        let step = std::future::poll_fn(|cx| {
            if cancelled.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Step::Away);
            }
            match w.poll_write(&mut r.ws, &mut r.outbox, cx) {
                Poll::Ready(step) => return Poll::Ready(step),
                Poll::Pending => {}
            }
            if let Poll::Ready(frame) = Pin::new(&mut r.ws).poll_next(cx) {
                return Poll::Ready(Step::Read(frame));
            }
            // Last: reading may have blocked a write too (tungstenite answers pings there).
            w.poll_stalled(&r.stall, limit, cx).map(|()| Step::Stalled)
        })
        .await;
        match step {
            Step::Read(Some(Ok(Message::Text(t)))) => {
                let msg = RawMessage::parse(t.as_str());
                if events.send(Event::Frame { client, msg }).await.is_err() {
                    break Some(CloseCode::Away);
                }
            }
            // Binary frames are not ACP; pings are answered by the library.
            Step::Read(Some(Ok(
                Message::Binary(_) | Message::Ping(_) | Message::Pong(_) | Message::Frame(_),
            ))) => {}
            Step::Read(Some(Err(WsError::Capacity(CapacityError::MessageTooLong { size, .. })))) => {
                tracing::warn!(client, size, "remote client sent a message over 32 MiB: closing it (1009)");
                break Some(CloseCode::Size);
            }
            Step::Read(Some(Err(WsError::Utf8(_)))) => {
                tracing::warn!(
                    client,
                    "remote client sent a text frame that is not UTF-8: closing it (1007)"
                );
                break Some(CloseCode::Invalid);
            }
            Step::Read(Some(Ok(Message::Close(_)))) => break Some(CloseCode::Normal),
            Step::Read(Some(Err(_)) | None) => break Some(CloseCode::Away),
            Step::Away => break Some(CloseCode::Away),
            Step::Stalled => {
                tracing::warn!(client, "remote client took nothing for {limit:?}: dropping it");
                break Some(CloseCode::Policy);
            }
            Step::Broken => break None,
        }
    };
    r.kill.cancel();
    let _ = events.send(Event::Closed { client }).await;
    if let Some(code) = code {
        let reason = match code {
            CloseCode::Size => "message too big",
            CloseCode::Invalid => "text frame not UTF-8",
            CloseCode::Policy => "not reading",
            _ => "bridge closing",
        };
        let frame = CloseFrame { code, reason: reason.into() };
        let _ =
            tokio::time::timeout(Duration::from_millis(500), r.ws.send(Message::Close(Some(frame)))).await;
        let _ = tokio::time::timeout(Duration::from_millis(200), SinkExt::close(&mut r.ws)).await;
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
            if self.unflushed && self.batched >= WRITE_BATCH {
                match Pin::new(&mut *ws).poll_flush(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Err(_)) => return Poll::Ready(Step::Broken),
                    Poll::Ready(Ok(())) => (self.unflushed, self.batched) = (false, 0),
                }
            }
            // Nothing is taken while tungstenite cannot take it: the outbox's limit applies.
            match Pin::new(&mut *ws).poll_ready(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(_)) => return Poll::Ready(Step::Broken),
                Poll::Ready(Ok(())) => {}
            }
            match outbox.poll_recv(cx) {
                Poll::Ready(Some(line)) => {
                    self.batched += line.len();
                    if let Ok(text) = Utf8Bytes::try_from(line) {
                        if Pin::new(&mut *ws).start_send(Message::Text(text)).is_err() {
                            return Poll::Ready(Step::Broken);
                        }
                        self.unflushed = true;
                    }
                }
                Poll::Ready(None) => return Poll::Ready(Step::Away),
                // The outbox is empty: what was gathered goes out now.
                Poll::Pending if self.unflushed => self.batched = WRITE_BATCH,
                Poll::Pending => return Poll::Pending,
            }
        }
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
