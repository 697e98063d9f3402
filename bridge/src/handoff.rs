//! Clients the hub hands over ([`zcode_shared::handoff`]): the hub checked the client's
//! upgrade (its credential, this instance) and passes the client's socket itself, with the
//! 101 to answer it and whose it is; the bridge serves it from then on like a client of its
//! own loopback server, and pings it (the hub no longer sees its bytes). The hub can cut them:
//! a revoked device's (1008), the old machine token's after a rotation (1008), or all of them
//! when it shuts down (1001) or restarts onto a new binary (1012), as its relay did.
//!
//! The socket listens in the run directory (0700: only this user reaches it), each hub's
//! connection is read by a task of its own, and a hand-over must carry the machine's token.

use crate::router::Killer;
use crate::server::Ctx;
use std::collections::HashMap;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::io::Interest;
use tokio::net::{UnixListener, UnixStream};
use zcode_shared::handoff::{self, Client, Cred, Cut, Message, Which};
use zcode_shared::scope::Scope;

/// The handed-over clients, by a number of their own (see the module docs).
#[derive(Default)]
struct Handed {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    next: u64,
    clients: HashMap<u64, Entry>,
}

struct Entry {
    cred: Cred,
    /// The hub that handed it over.
    hub: u64,
    /// Set once the client has joined the router (its outbox exists).
    killer: Option<Killer>,
    /// Cut before its killer was set: it is killed with this code as soon as it is.
    cut: Option<u16>,
}

impl Handed {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a client opened with `cred` unless `cap` are served already.
    fn add(&self, cred: Cred, hub: u64, cap: usize) -> Option<u64> {
        let mut inner = self.lock();
        if inner.clients.len() >= cap {
            return None;
        }
        inner.next += 1;
        let id = inner.next;
        inner.clients.insert(id, Entry { cred, hub, killer: None, cut: None });
        Some(id)
    }

    /// Client `id` has joined the router: `killer` ends it (at once if it was cut meanwhile).
    fn joined(&self, id: u64, killer: Killer) {
        let mut inner = self.lock();
        let Some(e) = inner.clients.get_mut(&id) else { return };
        if let Some(code) = e.cut {
            killer.kill_with(code);
        }
        e.killer = Some(killer);
    }

    fn remove(&self, id: u64) {
        self.lock().clients.remove(&id);
    }

    /// Ends the clients `cut` names, with its code; how many.
    fn cut(&self, cut: &Cut) -> usize {
        let mut n = 0;
        for e in self.lock().clients.values_mut().filter(|e| cut.which.takes(&e.cred, e.hub)) {
            match &e.killer {
                Some(k) => k.kill_with(cut.code),
                None => e.cut = Some(cut.code),
            }
            n += 1;
        }
        n
    }
}

/// Binds this bridge's hand-over socket (for loopback `port`) in `run_dir` and serves it until
/// shutdown; the socket's path, to remove at exit. `None` when it cannot be bound (the hub then
/// relays this bridge's clients, as it does an older bridge's).
pub fn start(run_dir: &Path, port: u16, ctx: Arc<Ctx>) -> Option<PathBuf> {
    let path = handoff::socket_path(run_dir, port);
    // tokio's Unix types carry the `SOCK_SEQPACKET` descriptors only for their readiness (and
    // `accept`): every packet is read by `handoff::recv` (`AsyncFd` would want `unsafe`).
    let listener = handoff::bind(&path)
        .and_then(|fd| UnixListener::from_std(std::os::unix::net::UnixListener::from(fd)));
    match listener {
        Ok(listener) => {
            ctx.tracker.spawn(serve(listener, ctx.clone(), Arc::default()));
            Some(path)
        }
        Err(e) => {
            tracing::warn!("cannot take clients from the hub at {}: {e} (it relays them)", path.display());
            None
        }
    }
}

/// Accepts the hub's connections (one per hub; a restarted hub makes a new one).
async fn serve(listener: UnixListener, ctx: Arc<Ctx>, handed: Arc<Handed>) {
    loop {
        let accepted = tokio::select! {
            () = ctx.shutdown.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((conn, _)) => {
                ctx.tracker.spawn(read(conn, ctx.clone(), handed.clone()));
            }
            Err(e) => {
                tracing::warn!("cannot accept a hub's hand-over connection: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Reads one hub connection's packets until it closes; then the clients that hub handed over
/// are closed (1001): a hub that is gone (killed, crashed) cannot cut them any more, and a
/// connection must not outlive the hub that checked its credential, as a relay does not.
async fn read(conn: UnixStream, ctx: Arc<Ctx>, handed: Arc<Handed>) {
    let mut hubs = Vec::new();
    // Shutting down: the router closes every client itself.
    if !read_until_closed(&conn, &ctx, &handed, &mut hubs).await {
        return;
    }
    for hub in hubs {
        let cut = Cut { which: Which::Hub(hub), code: 1001, reason: "hub shutting down".into() };
        let n = handed.cut(&cut);
        if n > 0 {
            tracing::info!(clients = n, "the hub that handed these clients over is gone: closing them");
        }
    }
}

/// `false`: the bridge is shutting down.
async fn read_until_closed(
    conn: &UnixStream,
    ctx: &Arc<Ctx>,
    handed: &Arc<Handed>,
    hubs: &mut Vec<u64>,
) -> bool {
    loop {
        tokio::select! {
            () = ctx.shutdown.cancelled() => return false,
            ready = conn.readable() => if let Err(e) = ready {
                tracing::warn!("a hand-over connection failed: {e}");
                return true;
            },
        }
        loop {
            match conn.try_io(Interest::READABLE, || handoff::recv(conn)) {
                Ok((Message::Client(client), Some(fd))) => {
                    if !hubs.contains(&client.hub) {
                        hubs.push(client.hub);
                    }
                    take(ctx, handed, *client, fd);
                }
                Ok((Message::Client(_), None)) => tracing::debug!("a hand-over came without its socket"),
                Ok((Message::Cut(cut), _)) => {
                    let n = handed.cut(&cut);
                    if n > 0 {
                        tracing::info!(clients = n, code = cut.code, "the hub cut handed-over clients");
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                    tracing::debug!("a hand-over that cannot be read: {e}");
                }
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return true,
                Err(e) => {
                    tracing::warn!("a hand-over connection cannot be read: {e}");
                    return true;
                }
            }
        }
    }
}

/// Answers and serves one handed-over client.
fn take(ctx: &Arc<Ctx>, handed: &Arc<Handed>, c: Client, fd: OwnedFd) {
    let stream = std::net::TcpStream::from(fd);
    if !ctx.token.verify_fresh(&c.token) {
        return tracing::debug!("a hand-over without this machine's token: closed");
    }
    let Some(scope) = Scope::parse(&c.scope) else {
        return tracing::debug!("a hand-over with an unknown scope: closed");
    };
    let _ = stream.set_nonblocking(true);
    let Some(id) = handed.add(c.cred, c.hub, c.cap) else {
        // The hub wrote nothing yet: the client gets a status, as the hub's own refusals.
        let _ = (&stream).write(c.busy.as_bytes());
        let _ = stream.shutdown(std::net::Shutdown::Write);
        return tracing::debug!(cap = c.cap, "a handed-over client refused: too many");
    };
    // A fresh connection's send buffer takes the 101 whole (nothing else was written to it).
    match (&stream).write(c.answer.as_bytes()) {
        Ok(n) if n == c.answer.len() => {}
        _ => {
            handed.remove(id);
            return tracing::debug!("a handed-over client's 101 did not go out whole: closed");
        }
    }
    let stream = match tokio::net::TcpStream::from_std(stream) {
        Ok(s) => s,
        Err(e) => {
            handed.remove(id);
            return tracing::warn!("cannot serve a handed-over client: {e}");
        }
    };
    let ping = Duration::from_millis(c.ping_ms);
    let device = Some(c.device.into_boxed_str());
    let (task_ctx, handed) = (ctx.clone(), handed.clone());
    ctx.tracker.spawn(async move {
        let ctx = task_ctx;
        let mut killer = None;
        let remote = Box::pin(crate::server::join(stream, &ctx, scope, device, Some(&mut killer))).await;
        if let Some(k) = killer {
            handed.joined(id, k);
        }
        if let Some(remote) = remote {
            let client = remote.client;
            crate::remote::run(remote.pinging(ping), &ctx.events).await;
            crate::router::trace::client(client).in_scope(|| tracing::debug!("handed-over client closed"));
        }
        handed.remove(id);
    });
}
