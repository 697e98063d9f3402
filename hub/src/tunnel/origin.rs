//! `up --tunnel`'s origin: the loopback port the tunnel tool forwards to. `up` holds it itself,
//! so it lives exactly as long as the tunnel (which dies with `up`), and relays each connection
//! to the hub's port only once the kernel has said that the process at the other end is this
//! user's (`zcode_shared::peer::verify_addrs`, one `sock_diag` query); it serves only this
//! user's connections (the tunnel tool's).
//!
//! Why not the hub's own port: a hub killed by SIGKILL (or a crash) lets that port go while the
//! tunnel runs, and whoever binds it next would be sent the phones' requests and credentials.
//! Why not a Unix socket of the hub's: a Cloudflare quick tunnel takes its origin only from
//! `--url`, an `http://host:port` (`--unix-socket` is ignored once `--url` is set).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use zcode_shared::config::Config;

/// How long a dial to the hub may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// The tunnel's origin while it runs: stops accepting (and lets its port go) when dropped.
pub struct Origin {
    /// The loopback address the tunnel tool is pointed at.
    pub addr: SocketAddr,
    stop: CancellationToken,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Origin {
    /// Binds 127.0.0.1 on a port the OS picks and starts forwarding to the hub of `cfg` (its
    /// port read at each connection: a restarted hub of an OS-picked port may have another).
    pub fn start(cfg: &Config) -> anyhow::Result<Origin> {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let stop = CancellationToken::new();
        let hub = Hub { cfg: cfg.clone(), warned: Arc::new(AtomicBool::new(false)) };
        let stopped = stop.clone();
        let thread = std::thread::Builder::new().name("tunnel-origin".into()).spawn(move || {
            rt.block_on(async move {
                match TcpListener::from_std(listener) {
                    Ok(l) => serve(l, hub, stopped).await,
                    Err(e) => eprintln!("zcode-acp up: the tunnel's origin cannot listen: {e}"),
                }
            });
        })?;
        Ok(Origin { addr, stop, thread: Some(thread) })
    }

    /// The URL the tunnel tool is given.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Where connections go, and whether a refusal was already said.
#[derive(Clone)]
struct Hub {
    cfg: Config,
    warned: Arc<AtomicBool>,
}

async fn serve(listener: TcpListener, hub: Hub, stop: CancellationToken) {
    let tasks = tokio_util::task::TaskTracker::new();
    loop {
        let client = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((s, _)) => s,
                Err(_) => {
                    // Out of descriptors, usually: give some time to close.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let (hub, stop) = (hub.clone(), stop.clone());
        tasks.spawn(async move {
            tokio::select! {
                () = forward(client, &hub) => {}
                () = stop.cancelled() => {}
            }
        });
    }
    drop(listener);
    tasks.close();
    tasks.wait().await;
}

/// Relays `client` to the hub, or closes it unanswered when no hub of this user holds the
/// port (the tunnel answers its request with an error). Another user's connection is closed at
/// once: at the hub it would count as this user's (the pre-auth pool's per-user share).
async fn forward(mut client: TcpStream, hub: &Hub) {
    if zcode_shared::peer::verify_addrs(client.local_addr(), client.peer_addr()).is_err() {
        return;
    }
    let Some(port) = hub.cfg.hub_port_now() else { return };
    let host = hub.cfg.remote.hub_host.as_str();
    let mut upstream = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect((host, port))).await {
        Ok(Ok(s)) => s,
        _ => return,
    };
    // Checked before a byte goes out: the request may carry a phone's credential.
    if let Err(e) = zcode_shared::peer::verify_addrs(upstream.local_addr(), upstream.peer_addr()) {
        if !hub.warned.swap(true, Ordering::Relaxed) {
            eprintln!("zcode-acp up: the tunnel's requests are not forwarded to {host}:{port}: {e}");
        }
        return;
    }
    hub.warned.store(false, Ordering::Relaxed);
    let _ = (client.set_nodelay(true), upstream.set_nodelay(true));
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}
