//! Bounded writes for a remote client's WebSocket. tungstenite answers every ping itself, on
//! the reading side, by appending a pong to its write buffer, which only the socket drains: a
//! client that sends pings and never reads would grow that buffer without bound (~140 MB per
//! million pings). [`Watched`] sits between tungstenite and the socket and applies TCP's own
//! rule: while a write is blocked, nothing is read. The client's frames then wait in the
//! kernel's buffers (bounded, and not ours), the pongs we owe stay at a few KiB, and a client
//! whose socket takes nothing for a whole stall period is dropped ([`Stall::stalled_for`]).

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What the reader and the stall check know about a connection's writes.
#[derive(Debug, Default)]
pub struct Stall {
    inner: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Since when a write has been waiting for the socket (none: writes go through).
    blocked_since: Option<Instant>,
    /// The reader parked while writes are blocked.
    reader: Option<Waker>,
}

impl Stall {
    /// How long writes have been blocked without a byte taken (zero when they are not).
    pub fn stalled_for(&self) -> Duration {
        self.lock().blocked_since.map_or(Duration::ZERO, |t| t.elapsed())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A socket that is not read while a write to it is blocked. See the module docs.
pub struct Watched<S> {
    io: S,
    stall: Arc<Stall>,
}

impl<S> Watched<S> {
    /// Wraps `io`; `stall` is shared with whoever checks for stalled clients.
    pub fn new(io: S, stall: Arc<Stall>) -> Watched<S> {
        Watched { io, stall }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        {
            let mut st = this.stall.lock();
            if st.blocked_since.is_some() {
                // Woken when a write goes through (the writer's socket readiness wakes both
                // halves too; this covers a write retried by the writer task alone).
                st.reader = Some(cx.waker().clone());
                return Poll::Pending;
            }
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write(cx, buf);
        let mut st = this.stall.lock();
        match &r {
            Poll::Pending => {
                st.blocked_since.get_or_insert_with(Instant::now);
            }
            Poll::Ready(Ok(n)) if *n == 0 && !buf.is_empty() => {}
            Poll::Ready(_) => {
                // Progress (or an error, which ends the connection): reading may go on.
                st.blocked_since = None;
                if let Some(w) = st.reader.take() {
                    w.wake();
                }
            }
        }
        r
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_blocked_write_stops_reading_until_it_goes_through() {
        // Our end writes to a peer that does not read; the peer has sent us a byte.
        let (ours, mut theirs) = tokio::io::duplex(64);
        let stall = Arc::new(Stall::default());
        let mut w = Watched::new(ours, stall.clone());
        theirs.write_all(b"x").await.unwrap();
        let blocked = tokio::time::timeout(Duration::from_millis(50), w.write_all(&[0; 128])).await;
        assert!(blocked.is_err(), "the duplex takes 64 bytes only");
        assert!(stall.stalled_for() > Duration::ZERO);
        let mut one = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_millis(50), w.read(&mut one)).await;
        assert!(read.is_err(), "nothing is read while a write is blocked");

        // The peer reads: the write goes through, and so does the read.
        let mut sink = vec![0u8; 64];
        theirs.read_exact(&mut sink).await.unwrap();
        w.write_all(&[0; 8]).await.unwrap();
        assert_eq!(stall.stalled_for(), Duration::ZERO);
        assert_eq!(w.read(&mut one).await.unwrap(), 1);
    }
}
