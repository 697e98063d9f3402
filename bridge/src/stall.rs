//! Bounded writes for a remote client's WebSocket. tungstenite answers every ping itself, on
//! the reading side, by appending a pong to its write buffer, which only the socket drains: a
//! client that sends pings and never reads would grow that buffer without bound (~140 MB per
//! million pings). [`Watched`] sits between tungstenite and the socket and applies TCP's own
//! rule: while a write is blocked, nothing is read. The client's frames then wait in the
//! kernel's buffers (bounded, and not ours), the pongs we owe stay at a few KiB, and a client
//! whose socket takes nothing for a whole stall period is dropped ([`Stall::stalled_for`]).
//!
//! It also keeps an idle connection small: tungstenite reads in chunks of its read buffer,
//! which it allocates (and fills) per connection, so the server gives it a small one
//! ([`READ_CHUNK`]) and [`Watched`] reads the socket through a per-thread scratch buffer
//! instead, keeping only what tungstenite has not taken yet (none, once a message is read):
//! a large message still arrives in 64 KiB system calls, and an idle client holds no buffer.

use std::cell::RefCell;
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

    /// Since when a write has been waiting for the socket (`None`: writes go through).
    pub fn blocked_since(&self) -> Option<Instant> {
        self.lock().blocked_since
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The read buffer tungstenite is given: small, since [`Watched`] reads ahead for it.
pub const READ_CHUNK: usize = 128;

/// The most read from the socket in one system call.
const SCRATCH: usize = 64 * 1024;

thread_local! {
    /// Where a socket read lands before tungstenite takes what it asked for: one per thread,
    /// not one per connection.
    static SCRATCH_BUF: RefCell<Box<[u8]>> = RefCell::new(vec![0; SCRATCH].into_boxed_slice());
}

/// A socket that is not read while a write to it is blocked. See the module docs.
pub struct Watched<S> {
    io: S,
    stall: Arc<Stall>,
    /// Bytes read from the socket that the reader has not taken yet, from `at` on.
    ahead: Vec<u8>,
    at: usize,
}

impl<S> Watched<S> {
    /// Wraps `io`; `stall` is shared with whoever checks for stalled clients.
    pub fn new(io: S, stall: Arc<Stall>) -> Watched<S> {
        Watched { io, stall, ahead: Vec::new(), at: 0 }
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
        if this.at < this.ahead.len() {
            let n = buf.remaining().min(this.ahead.len() - this.at);
            buf.put_slice(&this.ahead[this.at..this.at + n]);
            this.at += n;
            if this.at == this.ahead.len() {
                // Drained: an idle connection keeps no buffer.
                (this.ahead, this.at) = (Vec::new(), 0);
            }
            return Poll::Ready(Ok(()));
        }
        if buf.remaining() >= SCRATCH {
            return Pin::new(&mut this.io).poll_read(cx, buf);
        }
        SCRATCH_BUF.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            let mut into = ReadBuf::new(&mut scratch[..]);
            let r = Pin::new(&mut this.io).poll_read(cx, &mut into);
            if let Poll::Ready(Ok(())) = r {
                let got = into.filled();
                let n = buf.remaining().min(got.len());
                buf.put_slice(&got[..n]);
                this.ahead.extend_from_slice(&got[n..]);
            }
            r
        })
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
    async fn small_reads_get_every_byte_in_order_and_keep_nothing_once_drained() {
        let (ours, mut theirs) = tokio::io::duplex(1 << 20);
        let mut w = Watched::new(ours, Arc::new(Stall::default()));
        let sent: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        theirs.write_all(&sent).await.unwrap();
        drop(theirs);
        let mut got = Vec::new();
        let mut chunk = [0u8; READ_CHUNK];
        loop {
            let n = w.read(&mut chunk).await.unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&chunk[..n]);
        }
        assert!(got == sent, "every byte, in order");
        assert_eq!(w.ahead.capacity(), 0, "nothing kept once drained");
    }

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
