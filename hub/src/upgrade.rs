//! Hub self-upgrade (`POST /api/upgrade`, and a registration from a newer bridge): the hub
//! compares the binary at its path on disk with itself and, when the disk one is newer,
//! answers, waits ~500 ms, starts its successor from the disk binary and exits.
//!
//! The signals, in this order ([`decide`]): a disk binary that is missing or does not answer
//! `--version` (5 s) is never restarted onto; an OLDER disk version never triggers anything; a
//! different content fingerprint (`"fingerprint"`), a newer version (`"version"`), an mtime
//! after the hub's start (`"mtime"`); else `"up-to-date"`. A successor starts after the disk
//! binary's mtime, from that very binary: every signal is false for it, so there is no loop.
//!
//! How the successor starts: the exiting hub spawns `<disk binary> hub --detached --successor
//! <port> --listener-on-stdin` with its listening socket as the successor's stdin (its own
//! session, output appended to `logs/hub.log`, the test version knob removed), then shuts down.
//! The socket is never closed between the two hubs, so the port is never free for another user
//! to bind: connections that arrive meanwhile wait in its listen queue. The successor checks
//! that stdin is a listening TCP socket on the expected address, waits for the home's lock
//! (released when the old process exits) and serves on it. A hub that cannot start its
//! successor stays (it never lets the port go for a restart).
use crate::Hub;
use crate::http::{Resp, json};
use crate::version::{Build, FileKey, file_key, fingerprint};
use hyper::StatusCode;
use std::cmp::Ordering;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::time::{Duration, Instant, SystemTime};

/// How long the answer has to reach the client before the hub goes.
const EXIT_DELAY: Duration = Duration::from_millis(500);
/// How long `<disk binary> --version` may take.
const VERSION_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a registration waits for the check it set off (the bridge gives up after 3 s).
const ANSWER_WITHIN: Duration = Duration::from_secs(2);
/// At most one registration-triggered check this often.
const REGISTRATION_COOLDOWN: Duration = Duration::from_secs(60);

/// The hub's upgrade state.
#[derive(Default)]
pub struct State {
    restarting: AtomicBool,
    last_registration_check: Mutex<Option<Instant>>,
    /// The last disk fingerprint computed, by the file's identity: checks of an unchanged
    /// file do not hash tens of MiB again.
    hashed: Arc<Mutex<Option<(FileKey, String)>>>,
}

impl State {
    /// Whether the hub is on its way out to be replaced.
    pub fn restarting(&self) -> bool {
        self.restarting.load(AtomicOrdering::SeqCst)
    }
}

/// What the binary on disk looks like.
#[derive(Debug, Clone, PartialEq)]
pub struct Disk {
    /// Its fingerprint (`None`: missing or unreadable).
    pub fingerprint: Option<String>,
    /// Its modification time.
    pub mtime: Option<SystemTime>,
    /// What `--version` printed (`None`: it did not answer).
    pub version: Option<String>,
}

/// The outcome of one check.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// Whether the hub restarts onto the disk binary.
    pub restart: bool,
    /// Why (`up-to-date`, `fingerprint`, `version`, `mtime`, `older-on-disk`, `no-binary`,
    /// `unrunnable`, `restarting`).
    pub reason: &'static str,
    /// The disk binary's version, when it told.
    pub disk_version: Option<String>,
}

/// The rule (pure): see the module docs.
pub fn decide(
    running_version: &str,
    running_fp: &str,
    started: SystemTime,
    disk: &Disk,
) -> (bool, &'static str) {
    let Some(fp) = &disk.fingerprint else { return (false, "no-binary") };
    let Some(version) = &disk.version else { return (false, "unrunnable") };
    let order = zcode_shared::compare_versions(version, running_version);
    if order == Some(Ordering::Less) {
        return (false, "older-on-disk");
    }
    if fp != running_fp {
        return (true, "fingerprint");
    }
    if order == Some(Ordering::Greater) {
        return (true, "version");
    }
    if disk.mtime.is_some_and(|m| m > started) {
        return (true, "mtime");
    }
    (false, "up-to-date")
}

/// Reads the disk binary at `exe` (blocking: hashing, a child process). The running binary's
/// own file (same identity as at start) is known without hashing; otherwise the last hash of
/// the same identity is reused.
fn probe(exe: &Path, running: (Option<FileKey>, &str), cache: &Mutex<Option<(FileKey, String)>>) -> Disk {
    let meta = std::fs::metadata(exe).ok().filter(std::fs::Metadata::is_file);
    let key = meta.as_ref().map(file_key);
    let fingerprint = match key {
        None => None,
        Some(k) if Some(k) == running.0 => Some(running.1.to_owned()),
        Some(k) => {
            let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
            match cache.as_ref().filter(|(ck, _)| *ck == k) {
                Some((_, fp)) => Some(fp.clone()),
                None => {
                    let fp = fingerprint(exe).ok();
                    *cache = fp.clone().map(|fp| (k, fp));
                    fp
                }
            }
        }
    };
    Disk { fingerprint, mtime: meta.and_then(|m| m.modified().ok()), version: disk_version(exe) }
}

/// `<exe> --version`'s version (its first line's last word), within [`VERSION_TIMEOUT`].
fn disk_version(exe: &Path) -> Option<String> {
    use std::io::Read;
    let mut child = std::process::Command::new(exe)
        .arg("--version")
        .env_remove(zcode_shared::TEST_VERSION_VAR)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    let deadline = Instant::now() + VERSION_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                tracing::warn!(exe = %exe.display(), "the binary on disk did not answer --version");
                return None;
            }
        }
    };
    let mut out = String::new();
    child.stdout.take()?.take(4096).read_to_string(&mut out).ok()?;
    let word = out.lines().next()?.split_whitespace().last()?.to_owned();
    (status.success() && zcode_shared::compare_versions(&word, "0").is_some()).then_some(word)
}

/// Compares the disk binary with the running one.
pub async fn check(build: &Build, state: &State) -> Verdict {
    let Some(exe) = build.exe.clone() else {
        return Verdict { restart: false, reason: "no-binary", disk_version: None };
    };
    let running_fp = build.fingerprint().await;
    let (key, fp, cache) = (build.exe_key, running_fp.clone(), state.hashed.clone());
    let disk = tokio::task::spawn_blocking(move || probe(&exe, (key, &fp), &cache)).await.unwrap_or(Disk {
        fingerprint: None,
        mtime: None,
        version: None,
    });
    let (restart, reason) = decide(build.version, &running_fp, build.started, &disk);
    Verdict { restart, reason, disk_version: disk.version }
}

/// Starts the restart unless one is under way: in [`EXIT_DELAY`], the successor is spawned
/// and the hub shut down (relays closed with 1012). Returns `false` when one already was.
fn begin_restart(hub: &Arc<Hub>, reason: &'static str) -> bool {
    if hub.life.upgrade.restarting.swap(true, AtomicOrdering::SeqCst) {
        return false;
    }
    tracing::info!(reason, "a newer hub binary is on disk: restarting onto it");
    let hub = hub.clone();
    tokio::spawn(async move {
        tokio::time::sleep(EXIT_DELAY).await;
        let started = hub.life.build.exe.clone().is_some_and(|exe| spawn_successor(&hub, &exe));
        match started {
            true => hub.life.shutdown.cancel(),
            false => hub.life.upgrade.restarting.store(false, AtomicOrdering::SeqCst),
        }
    });
    true
}

/// Starts `<exe> hub --detached --successor <port> --listener-on-stdin` with the listening
/// socket as its stdin and its output appended to `logs/hub.log`; whether it started.
fn spawn_successor(hub: &Hub, exe: &PathBuf) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    let log_dir = &hub.cfg.paths.log_dir;
    let log = zcode_shared::paths::Paths::ensure_private_dir(log_dir).and_then(|()| {
        std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(log_dir.join("hub.log"))
    });
    let (out, err) = match log.and_then(|f| Ok((f.try_clone()?, f))) {
        Ok((a, b)) => (std::process::Stdio::from(a), std::process::Stdio::from(b)),
        Err(_) => (std::process::Stdio::null(), std::process::Stdio::null()),
    };
    // A close-on-exec duplicate, made the child's stdin only in the child: no other process
    // this hub starts meanwhile can inherit it.
    let Some(listener) = hub.life.listener.get().and_then(|l| l.try_clone().ok()) else {
        tracing::warn!("no listening socket to hand over: not restarting");
        return false;
    };
    let port = hub.life.port().to_string();
    // Not waited for: this process exits in a moment and the successor is reparented.
    #[allow(clippy::zombie_processes)]
    let started = std::process::Command::new(exe)
        .args(["hub", "--detached", "--successor", &port, "--listener-on-stdin"])
        .env_remove(zcode_shared::TEST_VERSION_VAR)
        .stdin(std::process::Stdio::from(listener))
        .stdout(out)
        .stderr(err)
        .spawn();
    match started {
        Ok(child) => {
            tracing::info!(pid = child.id(), exe = %exe.display(), "successor hub started");
            true
        }
        Err(e) => {
            tracing::warn!(exe = %exe.display(), "cannot start the successor hub: staying: {e}");
            false
        }
    }
}

/// `POST /api/upgrade`: `{ok, restarting, reason, runningVersion, diskVersion}`.
pub async fn post(hub: &Arc<Hub>) -> Resp {
    let v = if hub.life.upgrade.restarting() {
        Verdict { restart: true, reason: "restarting", disk_version: None }
    } else {
        let v = check(&hub.life.build, &hub.life.upgrade).await;
        if v.restart {
            begin_restart(hub, v.reason);
        }
        v
    };
    tracing::info!(restarting = v.restart, reason = v.reason, "upgrade check");
    json(
        StatusCode::OK,
        &serde_json::json!({
            "ok": true,
            "restarting": v.restart,
            "reason": v.reason,
            "runningVersion": hub.life.build.version,
            "diskVersion": v.disk_version,
        }),
    )
}

/// Whether a registration from a bridge at `bridge` sets off a disk check at `now`: only a
/// strictly newer bridge, and at most once per [`REGISTRATION_COOLDOWN`] (`last`, updated when
/// it does), so a fleet of new bridges re-registering does not hash and run the disk binary
/// again and again. The clock is a parameter so the cooldown can be tested without waiting.
fn registration_checks(
    hub_version: &str,
    bridge: Option<&str>,
    last: &mut Option<Instant>,
    now: Instant,
) -> bool {
    let newer = bridge
        .and_then(|v| zcode_shared::compare_versions(v, hub_version))
        .is_some_and(|o| o == Ordering::Greater);
    if !newer || last.is_some_and(|t| now.saturating_duration_since(t) < REGISTRATION_COOLDOWN) {
        return false;
    }
    *last = Some(now);
    true
}

/// A bridge registered with `version`: when it is strictly newer than the hub (and no such
/// check ran in the last 60 s), the hub checks its disk binary and restarts onto it when that
/// is newer. Whether the hub is restarting (what the registration answers as `restarting`).
pub async fn on_registration(hub: &Arc<Hub>, version: Option<&str>) -> bool {
    if hub.life.upgrade.restarting() {
        return true;
    }
    {
        let mut last = hub.life.upgrade.last_registration_check.lock().unwrap_or_else(|p| p.into_inner());
        if !registration_checks(hub.life.build.version, version, &mut last, Instant::now()) {
            return false;
        }
    }
    // The check runs on its own task: a bridge that gives up on its registration (3 s) must
    // not cancel it. The answer says `restarting` when the check is done in time.
    let (hub2, bridge) = (hub.clone(), version.unwrap_or_default().to_owned());
    let task = tokio::spawn(async move {
        let v = check(&hub2.life.build, &hub2.life.upgrade).await;
        tracing::info!(%bridge, hub = hub2.life.build.version, reason = v.reason, "a newer bridge registered");
        v.restart && (begin_restart(&hub2, v.reason) || hub2.life.upgrade.restarting())
    });
    match tokio::time::timeout(ANSWER_WITHIN, task).await {
        Ok(Ok(restarting)) => restarting,
        _ => hub.life.upgrade.restarting(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk(fp: &str, version: &str, mtime: SystemTime) -> Disk {
        Disk { fingerprint: Some(fp.into()), mtime: Some(mtime), version: Some(version.into()) }
    }

    #[test]
    fn the_disk_binary_wins_only_when_newer() {
        let start = SystemTime::now();
        let before = start - Duration::from_secs(60);
        let after = start + Duration::from_secs(1);
        assert_eq!(decide("0.2.0", "a", start, &disk("a", "0.2.0", before)), (false, "up-to-date"));
        assert_eq!(decide("0.2.0", "a", start, &disk("b", "0.2.0", before)), (true, "fingerprint"));
        assert_eq!(decide("0.2.0", "a", start, &disk("a", "0.3.0", before)), (true, "version"));
        assert_eq!(decide("0.2.0", "a", start, &disk("a", "0.2.0", after)), (true, "mtime"));
        assert_eq!(decide("0.2.0", "a", start, &disk("b", "0.1.9", after)), (false, "older-on-disk"));
        let broken = Disk { version: None, ..disk("b", "", after) };
        assert_eq!(decide("0.2.0", "a", start, &broken), (false, "unrunnable"));
        let gone = Disk { fingerprint: None, mtime: None, version: None };
        assert_eq!(decide("0.2.0", "a", start, &gone), (false, "no-binary"));
    }

    #[test]
    fn a_newer_bridge_sets_off_a_check_at_most_once_a_minute() {
        let t0 = Instant::now();
        let mut last = None;
        // Same or older bridges never check, and do not start the cooldown either.
        for v in [Some("0.2.0"), Some("0.1.9"), None, Some("not-a-version")] {
            assert!(!registration_checks("0.2.0", v, &mut last, t0), "{v:?}");
        }
        assert_eq!(last, None);
        // The first newer registration checks.
        assert!(registration_checks("0.2.0", Some("0.3.0"), &mut last, t0));
        assert_eq!(last, Some(t0));
        // Another within 60 s does not (so it cannot restart the hub, whatever the disk holds).
        let soon = t0 + REGISTRATION_COOLDOWN - Duration::from_millis(1);
        assert!(!registration_checks("0.2.0", Some("0.3.0"), &mut last, t0 + Duration::from_secs(1)));
        assert!(!registration_checks("0.2.0", Some("0.4.0"), &mut last, soon));
        assert_eq!(last, Some(t0), "a skipped registration does not extend the cooldown");
        // After 60 s it checks again, and that starts a new cooldown.
        let later = t0 + REGISTRATION_COOLDOWN;
        assert!(registration_checks("0.2.0", Some("0.3.0"), &mut last, later));
        assert_eq!(last, Some(later));
        assert!(!registration_checks("0.2.0", Some("0.3.0"), &mut last, later + Duration::from_secs(59)));
        // A same-or-older bridge never checks, even with the cooldown long over.
        let much_later = later + REGISTRATION_COOLDOWN * 10;
        assert!(!registration_checks("0.2.0", Some("0.2.0"), &mut last, much_later));
        assert!(!registration_checks("0.2.0", Some("0.1.0"), &mut last, much_later));
    }
}
