//! Web Push: the user's devices hear when a session waits for them (a permission or an
//! elicitation) and, where they asked for it, when a turn ends, even with the web client
//! closed. Real Web Push: RFC 8030 delivery, RFC 8291 `aes128gcm` encryption, RFC 8292 VAPID.
//!
//! - [`vapid`]: the hub's key pair (`<data>/push/vapid.json`) and the token it signs.
//! - [`ece`]: the payload encryption.
//! - [`subs`]: one subscription per device (`<data>/push/subscriptions.json`).
//! - [`send`]: one POST to a push service (https with rustls).
//!
//! The hub learns statuses from heartbeats: [`Push::on_heartbeat`] diffs an instance's old and
//! new session statuses and queues an event when one becomes `waiting`, or goes from `running`
//! (or `waiting`) to `idle`. Nothing here ever holds up a request or a turn: the queue is
//! bounded (a full one drops the event with a warning), one task expands events into pushes,
//! at most [`PARALLEL_SENDS`] run at once and each gives up after [`SEND_TIMEOUT`]. Keys and
//! subscriptions are read from disk on first use, by that task or a `/api/push` route, and every
//! file read or write runs on the blocking pool ([`Shared::blocking`]), never on an async worker.

pub mod ece;
pub mod send;
pub mod subs;
pub mod vapid;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;
use tokio::sync::{Semaphore, mpsc};
use zcode_shared::registration::SessionRow;

/// How long one push may take, connect to answer.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(8);
/// How many pushes are in flight at once.
pub const PARALLEL_SENDS: usize = 4;
/// How many events may wait for the sender task.
const QUEUE: usize = 256;
/// How long a push service keeps a message for a device that is offline: a permission that
/// waited longer than this is probably answered or moot.
pub const TTL_SECS: u32 = 600;

/// What happened to a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// It waits for the user (a permission or an elicitation): every device, `Urgency: high`.
    Waiting,
    /// A turn ended: devices that asked (`notifyTurnEnd`), `Urgency: normal`.
    TurnEnded,
}

/// One notification to send.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// What happened.
    pub kind: Kind,
    /// The instance (bridge) advertising the session.
    pub instance: String,
    /// The ACP session id.
    pub session: String,
    /// The session's title, if it has one.
    pub title: Option<String>,
    /// The instance's working directory.
    pub workspace: String,
}

/// The events a heartbeat implies: `before` are the instance's statuses by session id as last
/// heard (empty for a new instance), `after` its sessions now.
pub fn transitions(
    instance: &str,
    workspace: &str,
    before: &HashMap<String, Option<&'static str>>,
    after: &[SessionRow],
) -> Vec<Event> {
    after
        .iter()
        .filter_map(|s| {
            let was = before.get(&s.session_id).copied().flatten();
            let kind = match (was, s.status) {
                (Some("waiting"), Some("waiting")) => return None,
                (_, Some("waiting")) => Kind::Waiting,
                (Some("running" | "waiting"), Some("idle")) => Kind::TurnEnded,
                _ => return None,
            };
            Some(Event {
                kind,
                instance: instance.to_owned(),
                session: s.session_id.clone(),
                title: s.title.clone(),
                workspace: workspace.to_owned(),
            })
        })
        .collect()
}

/// `encodeURIComponent`: what the web client puts in its links.
fn uri_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z'
            | b'a'..=b'z'
            | b'0'..=b'9'
            | b'-'
            | b'_'
            | b'.'
            | b'!'
            | b'~'
            | b'*'
            | b'\''
            | b'('
            | b')' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// At most `max` characters of `s`, with an ellipsis when cut.
fn clip(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_owned(),
    }
}

impl Event {
    /// The JSON the service worker receives: `{title, body, url, tag, kind}`. `url` is the web
    /// client's session route; `tag` is per session, so a turn's end replaces its wait.
    pub fn payload(&self) -> Value {
        let session = clip(self.title.as_deref().filter(|t| !t.trim().is_empty()).unwrap_or("A session"), 80);
        let project = self.workspace.trim_end_matches('/').rsplit('/').next().filter(|p| !p.is_empty());
        let body = match (self.kind, project) {
            (Kind::Waiting, Some(p)) => format!("{session} needs your answer · {}", clip(p, 60)),
            (Kind::Waiting, None) => format!("{session} needs your answer"),
            (Kind::TurnEnded, Some(p)) => format!("{session} finished its turn · {}", clip(p, 60)),
            (Kind::TurnEnded, None) => format!("{session} finished its turn"),
        };
        let mut url = format!("/s/{}/{}", uri_component(&self.instance), uri_component(&self.session));
        if !self.workspace.is_empty() {
            url.push_str(&format!("?cwd={}", uri_component(&self.workspace)));
        }
        let (title, kind) = match self.kind {
            Kind::Waiting => ("Waiting for you", "waiting"),
            Kind::TurnEnded => ("Turn finished", "turnEnd"),
        };
        json!({"title": title, "body": body, "url": url, "tag": format!("session:{}", self.session), "kind": kind})
    }

    /// RFC 8030 `Topic`: a newer message about the same session replaces an undelivered one.
    fn topic(&self) -> String {
        let digest = Sha256::digest(self.session.as_bytes());
        B64.encode(digest)[..32].to_owned()
    }
}

/// What is read from disk on first use.
struct State {
    keys: Option<Arc<vapid::Keys>>,
    subs: Option<subs::Store>,
}

/// The hub's Web Push: keys, subscriptions, the sender task.
pub struct Push {
    shared: Arc<Shared>,
    queue: OnceLock<mpsc::Sender<Event>>,
}

struct Shared {
    dir: PathBuf,
    subject: String,
    state: Mutex<State>,
}

/// Why the keys could not be had (the 500's log line).
pub use vapid::KeyError;

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn keys(&self) -> Result<Arc<vapid::Keys>, KeyError> {
        let mut st = self.state();
        if let Some(k) = &st.keys {
            return Ok(k.clone());
        }
        let k = Arc::new(vapid::Keys::load_or_create(&self.dir.join("vapid.json"))?);
        st.keys = Some(k.clone());
        Ok(k)
    }

    /// Runs `f` on the subscriptions (read from disk on first use). Blocking (a read, an
    /// fsync), and under the state's `std` mutex: called only on the blocking pool, through
    /// [`Shared::blocking`].
    fn with_subs<R>(&self, f: impl FnOnce(&mut subs::Store) -> R) -> R {
        let mut st = self.state();
        let store = st.subs.get_or_insert_with(|| subs::Store::load(&self.dir.join("subscriptions.json")));
        f(store)
    }

    /// Runs `f` on the blocking pool, so no async worker waits for the disk or for the state's
    /// mutex while another thread writes. `Err` only when `f` panicked.
    async fn blocking<R: Send + 'static>(
        self: &Arc<Shared>,
        f: impl FnOnce(&Shared) -> R + Send + 'static,
    ) -> std::io::Result<R> {
        let shared = self.clone();
        tokio::task::spawn_blocking(move || f(&shared)).await.map_err(std::io::Error::other)
    }
}

impl Push {
    /// Web Push keeping its files in `dir`, naming `subject` (a `mailto:` or `https:` URL) as
    /// the contact push services see.
    pub fn new(dir: PathBuf, subject: String) -> Push {
        let state = Mutex::new(State { keys: None, subs: None });
        Push { shared: Arc::new(Shared { dir, subject, state }), queue: OnceLock::new() }
    }

    /// The VAPID public key (base64url, uncompressed point), made (and written) on first use.
    pub async fn public_key(&self) -> Result<String, String> {
        match self.shared.blocking(|sh| sh.keys().map(|k| k.public().to_owned())).await {
            Ok(k) => k.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Stores a device's subscription (written through, off the async workers); `true` when it
    /// is new.
    pub async fn subscribe(&self, sub: subs::Subscription) -> std::io::Result<bool> {
        self.shared.blocking(|sh| sh.with_subs(|s| s.put(sub))).await?
    }

    /// Forgets a device's subscription (off the async workers); whether there was one.
    pub async fn unsubscribe(&self, endpoint: &str) -> std::io::Result<bool> {
        let endpoint = endpoint.to_owned();
        self.shared.blocking(move |sh| sh.with_subs(|s| s.remove(&endpoint))).await?
    }

    /// Queues the notifications a heartbeat implies (see [`transitions`]); never waits.
    pub fn on_heartbeat(&self, events: Vec<Event>) {
        for e in events {
            self.enqueue(e);
        }
    }

    /// Queues one event for the sender task (started on first use); a full queue drops it.
    pub fn enqueue(&self, event: Event) {
        let queue = self.queue.get_or_init(|| {
            let (tx, rx) = mpsc::channel(QUEUE);
            tokio::spawn(sender(self.shared.clone(), rx));
            tx
        });
        if queue.try_send(event).is_err() {
            tracing::warn!("the push queue is full: a notification was dropped");
        }
    }
}

/// The sender task: each event becomes one push per interested device.
async fn sender(shared: Arc<Shared>, mut rx: mpsc::Receiver<Event>) {
    let slots = Arc::new(Semaphore::new(PARALLEL_SENDS));
    while let Some(event) = rx.recv().await {
        let kind = event.kind;
        let targets = shared.blocking(move |sh| {
            sh.with_subs(|s| {
                s.all().iter().filter(|s| kind == Kind::Waiting || s.notify_turn_end).cloned().collect()
            })
        });
        let targets: Vec<subs::Subscription> = targets.await.unwrap_or_default();
        if targets.is_empty() {
            continue;
        }
        let keys = match shared.blocking(Shared::keys).await {
            Ok(Ok(k)) => k,
            Ok(Err(e)) => {
                tracing::error!("cannot send a push notification: {e}");
                continue;
            }
            Err(e) => {
                tracing::error!("cannot send a push notification: {e}");
                continue;
            }
        };
        let payload = event.payload().to_string();
        let topic = event.topic();
        for sub in targets {
            let Ok(permit) = slots.clone().acquire_owned().await else { return };
            let (shared, keys, payload, topic) =
                (shared.clone(), keys.clone(), payload.clone(), topic.clone());
            let kind = event.kind;
            tokio::spawn(async move {
                deliver(&shared, &keys, &sub, kind, payload.as_bytes(), &topic).await;
                drop(permit);
            });
        }
    }
}

/// Sends one push and acts on the answer: a 404 or 410 forgets the subscription.
async fn deliver(
    shared: &Arc<Shared>,
    keys: &vapid::Keys,
    sub: &subs::Subscription,
    kind: Kind,
    payload: &[u8],
    topic: &str,
) {
    let origin = subs::origin_of(&sub.endpoint);
    let Ok(uri) = subs::check_endpoint(&sub.endpoint) else { return };
    let body = match ece::encrypt(payload, &sub.p256dh, &sub.auth) {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(endpoint = %origin, "push not sent: {e}");
            return;
        }
    };
    let now = zcode_shared::time::now_ms() / 1000;
    let authorization = keys.authorization(&origin, &shared.subject, now);
    let headers = send::Headers {
        authorization: &authorization,
        ttl: TTL_SECS,
        urgency: match kind {
            Kind::Waiting => "high",
            Kind::TurnEnded => "normal",
        },
        topic: Some(topic),
    };
    match tokio::time::timeout(SEND_TIMEOUT, send::post(&uri, &headers, body)).await {
        Err(_) => {
            tracing::warn!(endpoint = %origin, "the push service did not answer within {SEND_TIMEOUT:?}")
        }
        Ok(Err(e)) => tracing::warn!(endpoint = %origin, "push not delivered: {e}"),
        Ok(Ok(a)) if a.status.is_success() => {
            tracing::debug!(endpoint = %origin, status = a.status.as_u16(), "push delivered")
        }
        Ok(Ok(a)) if a.status == hyper::StatusCode::NOT_FOUND || a.status == hyper::StatusCode::GONE => {
            let endpoint = sub.endpoint.clone();
            match shared.blocking(move |sh| sh.with_subs(|s| s.remove(&endpoint))).await.and_then(|r| r) {
                Ok(_) => {
                    tracing::info!(endpoint = %origin, status = a.status.as_u16(), "push subscription expired: forgotten")
                }
                Err(e) => {
                    tracing::warn!(endpoint = %origin, "cannot forget an expired push subscription: {e}")
                }
            }
        }
        Ok(Ok(a)) => {
            tracing::warn!(endpoint = %origin, status = a.status.as_u16(), answer = %a.text.trim(), "the push service refused a push")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, status: Option<&'static str>) -> SessionRow {
        SessionRow { session_id: id.into(), title: Some("Fix login".into()), status, updated_at: 1 }
    }

    #[test]
    fn waits_and_turn_ends_are_found_by_diffing_heartbeats() {
        let before: HashMap<String, Option<&'static str>> = [
            ("a".to_owned(), Some("running")),
            ("b".to_owned(), Some("waiting")),
            ("c".to_owned(), Some("running")),
            ("d".to_owned(), Some("waiting")),
            ("e".to_owned(), Some("idle")),
            ("f".to_owned(), None),
        ]
        .into();
        let after = [
            row("a", Some("waiting")),
            row("b", Some("waiting")),
            row("c", Some("idle")),
            row("d", Some("idle")),
            row("e", Some("idle")),
            row("f", Some("idle")),
            row("new", Some("waiting")),
            row("new-idle", Some("idle")),
        ];
        let got: Vec<(Kind, String)> =
            transitions("1", "/w", &before, &after).into_iter().map(|e| (e.kind, e.session)).collect();
        assert_eq!(
            got,
            [
                (Kind::Waiting, "a".into()),
                (Kind::TurnEnded, "c".into()),
                (Kind::TurnEnded, "d".into()),
                (Kind::Waiting, "new".into()),
            ]
        );
    }

    #[test]
    fn the_payload_opens_the_session() {
        let e = Event {
            kind: Kind::Waiting,
            instance: "42".into(),
            session: "s:1".into(),
            title: None,
            workspace: "/home/me/my proj/".into(),
        };
        let p = e.payload();
        assert_eq!(p["url"], "/s/42/s%3A1?cwd=%2Fhome%2Fme%2Fmy%20proj%2F");
        assert_eq!(p["title"], "Waiting for you");
        assert_eq!(p["body"], "A session needs your answer · my proj");
        assert_eq!(p["tag"], "session:s:1");
        assert_eq!(e.topic().len(), 32);
        assert!(e.topic().bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        let long = Event { title: Some("x".repeat(500)), kind: Kind::TurnEnded, ..e };
        assert!(long.payload()["body"].as_str().unwrap().chars().count() < 150);
    }
}
