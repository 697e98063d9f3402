//! The hub as a daemon: one per home, and the files that say where it is.
//!
//! - `run/hub.pid` holds the running hub's pid and is `flock`ed for its whole life: a second
//!   hub (two bridges racing to start one) sees the lock and steps aside once the holder
//!   answers (until then it waits: the holder may be about to find its port taken and exit).
//!   The kernel drops the lock when the process dies, even by SIGKILL. The file is emptied on
//!   exit, never removed: removing it would let two hubs lock two different files.
//! - `run/hub.port` holds the port when the OS picked it (`hubPort` 0), for bridges and tests.
//! - `run/tunnel` names the tunnel a running `zcode-acp up --tunnel` started (and that `up`).
//! - [`housekeeping`]: the TTL sweep, the idle exit, and an exit when the port file vanishes
//!   (its home was deleted, or another hub took over: this one could never be found again).
//!   The idle rule: no exit while a bridge is registered, a relay is open, a tunnel runs (its
//!   `up` is alive), or a device is paired (a phone reaches this port, perhaps through a tunnel
//!   we did not start): a tunnel must never forward to a port the hub has let go.

use crate::Hub;
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::Arc;
use std::time::{Duration, Instant};
use zcode_shared::paths::Paths;

/// The outcome of [`lock`].
pub enum Lock {
    /// This process is the home's hub while the lock lives.
    Held(PidLock),
    /// Another hub holds it (its pid, when readable).
    Running(Option<u32>),
}

/// The held `run/hub.pid` lock.
pub struct PidLock {
    file: Flock<File>,
}

impl Drop for PidLock {
    fn drop(&mut self) {
        // Emptied while still locked: a stale pid must not name an unrelated process later.
        let _ = self.file.set_len(0);
    }
}

/// Takes the home's hub lock, or reports the hub that holds it.
pub fn lock(paths: &Paths) -> io::Result<Lock> {
    Paths::ensure_private_dir(&paths.run_dir)?;
    let path = paths.run_dir.join("hub.pid");
    let file =
        OpenOptions::new().read(true).write(true).create(true).truncate(false).mode(0o600).open(&path)?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(file) => {
            file.set_len(0)?;
            (&*file).write_all(format!("{}\n", std::process::id()).as_bytes())?;
            Ok(Lock::Held(PidLock { file }))
        }
        Err((mut file, Errno::EWOULDBLOCK)) => {
            let mut s = String::new();
            let _ = file.read_to_string(&mut s);
            Ok(Lock::Running(s.trim().parse().ok()))
        }
        Err((_, e)) => Err(io::Error::from(e)),
    }
}

/// [`lock`], retried for up to `within` while another hub holds it: what a successor does
/// while the hub it replaces exits (the kernel drops its lock with the process).
pub fn lock_within(paths: &Paths, within: Duration) -> io::Result<Lock> {
    let deadline = Instant::now() + within;
    loop {
        let l = lock(paths)?;
        if matches!(l, Lock::Held(_)) || Instant::now() >= deadline {
            return Ok(l);
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// [`lock`] for a hub starting on its own, which must not step aside for a hub that will
/// never serve: while another process holds the lock and no hub answers on the configured
/// port (`port()`, read again each time: an OS-picked one appears in the port file), waits up
/// to `within` for one of the two. Two starters racing (a bridge's `hub --background` and a
/// person's `zcode-acp hub`) must not both exit because the first to lock then found its port
/// taken. Returns the lock and whether a hub answered.
pub async fn lock_to_start(
    paths: &Paths,
    host: &str,
    port: impl Fn() -> Option<u16>,
    within: Duration,
) -> io::Result<(Lock, bool)> {
    let deadline = Instant::now() + within;
    let mut told = false;
    loop {
        let l = lock(paths)?;
        let Lock::Running(pid) = l else { return Ok((l, false)) };
        if let Some(p) = port() {
            if hub_answers(host, p).await {
                return Ok((l, true));
            }
        }
        if Instant::now() >= deadline {
            return Ok((l, false));
        }
        if !told {
            told = true;
            let pid = pid.map_or_else(String::new, |p| format!(" (pid {p})"));
            eprintln!(
                "zcode-acp hub: another hub{pid} holds the lock but does not answer yet: waiting up to {} s",
                within.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The port file a hub on an OS-picked port writes.
#[derive(Clone, Debug)]
pub struct PortFile {
    paths: Paths,
    port: u16,
}

impl PortFile {
    /// Writes `port` to `paths.hub_port_file()` (atomically, mode 0600).
    pub fn write(paths: &Paths, port: u16) -> io::Result<PortFile> {
        Paths::ensure_private_dir(&paths.run_dir)?;
        zcode_shared::config::write_private_atomic(&paths.hub_port_file(), format!("{port}\n").as_bytes())?;
        Ok(PortFile { paths: paths.clone(), port })
    }

    /// Whether the file still names this hub's port.
    pub fn still_ours(&self) -> bool {
        self.paths.read_hub_port() == Some(self.port)
    }

    /// Removes the file if it still names this hub.
    pub fn remove(&self) {
        if self.still_ours() {
            let _ = std::fs::remove_file(self.paths.hub_port_file());
        }
    }
}

/// Who holds a port another process listens on, as far as a connection to it tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// A process of this user.
    Ours,
    /// Another user's, or one whose owner cannot be told (the error says which).
    NotOurs(zcode_shared::peer::PeerError),
    /// Nothing accepted a connection within 1 s.
    Nobody,
}

/// Connects to `host:port` (loopback for an unspecified host) and says whose socket answered.
pub async fn holder(host: &str, port: u16) -> Holder {
    match connect_verified(host, port).await {
        Ok(Some(_)) => Holder::Ours,
        Ok(None) => Holder::Nobody,
        Err(e) => Holder::NotOurs(e),
    }
}

/// A connection to `host:port` within 1 s, once its other end is known to be this user's;
/// `Ok(None)` when nothing accepted it.
pub async fn connect_verified(
    host: &str,
    port: u16,
) -> Result<Option<tokio::net::TcpStream>, zcode_shared::peer::PeerError> {
    let host = if host == "0.0.0.0" || host == "::" { "127.0.0.1" } else { host };
    let dial = tokio::net::TcpStream::connect((host, port));
    let Ok(Ok(s)) = tokio::time::timeout(Duration::from_secs(1), dial).await else { return Ok(None) };
    crate::upstream::verify(&s)?;
    Ok(Some(s))
}

/// Whether a zcode-acp hub of this user answers `GET /api/health` on `host:port` (within
/// 1 s): tells "a hub is already running" from "another program holds the port". Nothing is
/// sent to another user's socket.
pub async fn hub_answers(host: &str, port: u16) -> bool {
    let ask = async {
        let s = connect_verified(host, port).await.ok().flatten()?;
        let reply =
            zcode_shared::http_client::exchange(s, hub_request("/api/health", None)?, 4096).await.ok()?;
        Some(reply.status == hyper::StatusCode::OK && reply.body.ok()?.as_ref() == b"ok")
    };
    tokio::time::timeout(Duration::from_secs(1), ask).await.ok().flatten().unwrap_or(false)
}

/// A `GET path` for the hub (`Host: hub`, the token when given), or `None` when `path` or the
/// token cannot be sent.
fn hub_request(
    path: &str,
    token: Option<&str>,
) -> Option<hyper::Request<http_body_util::Empty<bytes::Bytes>>> {
    let mut req = hyper::Request::get(path).header(hyper::header::HOST, "hub");
    if let Some(token) = token {
        let mut bearer = hyper::header::HeaderValue::from_str(&format!("Bearer {token}")).ok()?;
        bearer.set_sensitive(true);
        req = req.header(hyper::header::AUTHORIZATION, bearer);
    }
    req.body(http_body_util::Empty::new()).ok()
}

/// `GET path` on the hub of this user at `host:port`, with `token` (sent only once the socket
/// is known to be this user's): the JSON body of a 200, else one line saying why not. What
/// `zcode-acp stop` and `status` ask the hub (its bridges, its version).
pub async fn hub_get_json(
    host: &str,
    port: u16,
    path: &str,
    token: &str,
) -> Result<serde_json::Value, String> {
    let ask = async {
        let s = match connect_verified(host, port).await {
            Ok(Some(s)) => s,
            Ok(None) => return Err(format!("nothing answers on {host}:{port}")),
            Err(e) => return Err(e.to_string()),
        };
        let req =
            hub_request(path, Some(token)).ok_or("the path or the token cannot be sent in a request")?;
        let reply = zcode_shared::http_client::exchange(s, req, 16 << 20).await.map_err(|e| e.to_string())?;
        let body = reply.body.map_err(|e| format!("the hub's answer could not be read whole ({e:?})"))?;
        let body = String::from_utf8_lossy(&body);
        match reply.status.as_u16() {
            200 => serde_json::from_str(&body).map_err(|e| format!("the hub's answer is not JSON: {e}")),
            401 => Err("the hub refused this token (is ZCODE_ACP_REMOTE_TOKEN the hub's?)".into()),
            status => Err(format!("the hub answered {status}: {}", body.trim())),
        }
    };
    tokio::time::timeout(Duration::from_secs(5), ask)
        .await
        .unwrap_or_else(|_| Err("no answer within 5 s".into()))
}

/// `run/tunnel`'s name (written by `up --tunnel`: `<up's pid> <tool's pid> <url>`).
pub const TUNNEL_FILE: &str = "tunnel";

/// Whether `run/tunnel` names an `up` of this user that still runs (its tunnel forwards here).
fn tunnel_runs(paths: &Paths) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(text) = std::fs::read_to_string(paths.run_dir.join(TUNNEL_FILE)) else { return false };
    let Some(up) = text.split_whitespace().next().and_then(|p| p.parse::<u32>().ok()) else { return false };
    std::fs::metadata(format!("/proc/{up}")).is_ok_and(|m| m.uid() == nix::unistd::getuid().as_raw())
}

/// Runs until shutdown: drops expired instances every `min(TTL/2, 5 s)`, and stops the hub
/// when it has had no instances, relays, tunnel or paired device for `hub_idle` (never when
/// `hub_idle` is 0, as `zcode-acp service run` sets it), or when its port file is gone.
pub async fn housekeeping(hub: Arc<Hub>, port_file: Option<PortFile>) {
    let t = &hub.cfg.timings;
    let sweep = (t.instance_ttl / 2).min(Duration::from_secs(5));
    // `hub_idle` 0: never idle-exits (the service's hub).
    let never_idle = t.hub_idle.is_zero();
    let idle_step = if never_idle { sweep } else { (t.hub_idle / 10).min(Duration::from_secs(1)) };
    let period = sweep.min(idle_step).max(Duration::from_millis(10));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut idle_since = Some(Instant::now());
    loop {
        tokio::select! {
            () = hub.life.shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        if hub.auth.token.refresh() {
            tracing::info!(source = %hub.auth.token.source(), "the token was rotated: the old one no longer works");
        }
        crate::devices::after_rotation(&hub);
        let now = Instant::now();
        let (expired, live) = {
            let mut r = hub.bridges.registry();
            (r.prune(now), r.live_count(now))
        };
        for id in expired {
            tracing::info!(instance = %id, "instance expired: no heartbeat");
        }
        let unused =
            !never_idle && live == 0 && hub.bridges.relay_count() == 0 && !tunnel_runs(&hub.cfg.paths);
        if unused && !hub.devices.any_paired(&hub.store).await {
            let since = *idle_since.get_or_insert(now);
            if now.saturating_duration_since(since) >= t.hub_idle {
                tracing::info!(idle = ?t.hub_idle, "no instances, relays, tunnel or paired device: exiting");
                hub.life.shutdown.cancel();
                return;
            }
        } else {
            idle_since = None;
        }
        if port_file.as_ref().is_some_and(|f| !f.still_ours()) {
            tracing::warn!("the hub's port file was removed or replaced: exiting");
            hub.life.shutdown.cancel();
            return;
        }
    }
}

/// Raises the soft open-file limit to the hard one (shared with the bridge's server).
pub use zcode_shared::rlimit::raise_open_file_limit;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_lock_per_home_and_the_port_file_is_ours_until_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths::under(dir.path());
        let held = lock(&paths).unwrap();
        assert!(matches!(held, Lock::Held(_)));
        // flock locks belong to the open file description: a second open sees it held.
        match lock(&paths).unwrap() {
            Lock::Running(pid) => assert_eq!(pid, Some(std::process::id())),
            Lock::Held(_) => panic!("two hubs hold the lock"),
        }
        drop(held);
        assert!(matches!(lock(&paths).unwrap(), Lock::Held(_)));

        let f = PortFile::write(&paths, 4242).unwrap();
        assert!(f.still_ours());
        PortFile::write(&paths, 4343).unwrap();
        assert!(!f.still_ours());
        f.remove();
        assert!(paths.hub_port_file().exists(), "another hub's port file is left alone");
    }
}
