//! The accept loop (mini-redis style): one task per connection, a semaphore capping how many
//! are open, `select!` between accepting and shutdown. Each connection is hyper http1 with
//! upgrades; its headers must arrive within 10 s (slow or partial requests are cut, and one
//! slow client never holds up another: each has its own task). On shutdown a connection
//! finishes its current request and closes; `zcode_hub::run` then has the relay thread close
//! every relay with a close frame.

use crate::Hub;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// Connections open at once, at most (relays are counted separately, once upgraded).
pub const MAX_CONNECTIONS: usize = 4096;
/// A request's headers must arrive within this long (also the idle keep-alive limit).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest request head (request line and headers) accepted.
const MAX_HEAD: usize = 64 * 1024;

/// Accepts connections until the hub's shutdown token fires.
pub async fn serve(listener: TcpListener, hub: Arc<Hub>) {
    let limit = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut next_conn: u64 = 0;
    loop {
        let permit = tokio::select! {
            () = hub.shutdown.cancelled() => return,
            p = limit.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return,
            },
        };
        let (stream, peer) = tokio::select! {
            () = hub.shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors, usually: give connections time to close.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        next_conn += 1;
        let hub2 = hub.clone();
        hub.tracker.spawn(async move {
            connection(stream, peer, hub2, next_conn).await;
            drop(permit);
        });
    }
}

async fn connection(stream: TcpStream, peer: SocketAddr, hub: Arc<Hub>, conn: u64) {
    let svc_hub = hub.clone();
    let svc = hyper::service::service_fn(move |req| crate::routes::handle(req, svc_hub.clone(), peer));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(HEADER_TIMEOUT).max_buf_size(MAX_HEAD);
    let served = builder.serve_connection(TokioIo::new(stream), svc).with_upgrades();
    tokio::pin!(served);
    let result = tokio::select! {
        r = served.as_mut() => r,
        () = hub.shutdown.cancelled() => {
            served.as_mut().graceful_shutdown();
            match tokio::time::timeout(Duration::from_secs(1), served.as_mut()).await {
                Ok(r) => r,
                Err(_) => Ok(()),
            }
        }
    };
    if let Err(e) = result {
        tracing::debug!(conn, %peer, "connection ended: {e}");
    }
}
