//! Web Push: the user's devices hear when a session waits for them (a permission or an
//! elicitation) and, where they asked for it, when a turn ends, even with the web client
//! closed. Real Web Push: RFC 8030 delivery, RFC 8291 `aes128gcm` encryption, RFC 8292 VAPID.
//!
//! - [`vapid`]: the hub's key pair (`<data>/push/vapid.json`) and the token it signs.
//! - [`ece`]: the payload encryption.
//! - [`subs`]: one subscription per device (`<data>/push/subscriptions.json`).
//! - [`send`]: one POST to a push service (https with rustls).
//! - [`payload`]: what a push says.
//!
//! The hub learns statuses from heartbeats: [`transitions`] diffs an instance's old and new
//! session statuses: a session that becomes `waiting` is a wait (the hub reads the request
//! from the bridge's `/attention` before it is queued, for the notification's details and its
//! Allow and Deny), one that stops waiting withdraws it (a push under the same tag that closes
//! the notification), and `running` (or `waiting`) to `idle` is a turn's end. A wait answered
//! before its push went out is never sent (nor is its withdrawal), and the pushes about one
//! session go out in order. A device may mute a session ([`Push::mute`]): it then hears
//! nothing of it. Nothing here ever holds up a request or a turn: the queue is
//! bounded (a full one drops the event with a warning), one task expands events into pushes,
//! at most [`PARALLEL_SENDS`] run at once and each gives up after [`SEND_TIMEOUT`]. Keys and
//! subscriptions are read from disk on first use, by that task or a `/api/push` route, and every
//! file read or write runs on the blocking pool ([`Shared::blocking`]), never on an async worker.

pub mod ece;
pub mod payload;
pub mod send;
pub mod subs;
pub mod vapid;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Kind {
    /// It waits for the user (a permission or an elicitation): every device, `Urgency: high`.
    #[default]
    Waiting,
    /// A turn ended: devices that asked (`notifyTurnEnd`), `Urgency: normal`; the others get
    /// the wait's withdrawal when the session was waiting.
    TurnEnded,
    /// The wait was answered (the turn goes on): its notification is closed, `Urgency: high`.
    Withdrawn,
}

/// One notification to send.
#[derive(Clone, Debug, Default)]
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
    /// The bridge's loopback port (where a wait's request is read).
    pub port: u16,
    /// A wait's request, as the bridge's `/attention` lists it (`None`: not known).
    pub request: Option<Value>,
    /// How many sessions wait for an answer, machine-wide (the app badge).
    pub pending: usize,
    /// A wait: whether its push went out. A withdrawal or turn end: the wait's (none: the
    /// session was not waiting).
    sent: Option<Arc<AtomicBool>>,
    /// A wait's number ([`Push::on_heartbeat`]): it goes out only while it is the session's latest.
    wait: u64,
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
                (Some("waiting"), _) => Kind::Withdrawn,
                _ => return None,
            };
            Some(Event::about(kind, instance, workspace, s))
        })
        .collect()
}

/// The sessions of a heartbeat that were waiting already and now wait on more requests than
/// before (an agent asking two things at once): pushed again, under the same tag, so the
/// notification and the app badge count them all.
pub fn asked_again(
    instance: &str,
    workspace: &str,
    before: &HashMap<String, Option<&'static str>>,
    before_pending: &HashMap<String, u32>,
    after: &[SessionRow],
) -> Vec<Event> {
    after
        .iter()
        .filter(|s| {
            s.status == Some("waiting")
                && before.get(&s.session_id).copied().flatten() == Some("waiting")
                && s.pending > before_pending.get(&s.session_id).copied().unwrap_or(0).max(1)
        })
        .map(|s| Event::about(Kind::Waiting, instance, workspace, s))
        .collect()
}

impl Event {
    /// A `kind` event about session row `s` of `instance`.
    fn about(kind: Kind, instance: &str, workspace: &str, s: &SessionRow) -> Event {
        Event {
            kind,
            instance: instance.to_owned(),
            session: s.session_id.clone(),
            title: s.title.clone(),
            workspace: workspace.to_owned(),
            ..Event::default()
        }
    }

    /// RFC 8030 `Topic`: a newer message about the same session replaces an undelivered one.
    fn topic(&self) -> String {
        let digest = Sha256::digest(self.session.as_bytes());
        B64.encode(digest)[..32].to_owned()
    }

    /// Whether `sub` hears of this event.
    fn reaches(&self, sub: &subs::Subscription) -> bool {
        if sub.muted.contains(&self.session) {
            return false;
        }
        match self.kind {
            Kind::Waiting => true,
            Kind::TurnEnded => sub.notify_turn_end || self.withdraws(),
            Kind::Withdrawn => self.withdraws(),
        }
    }

    /// Whether this ends a wait whose push went out.
    fn withdraws(&self) -> bool {
        self.kind != Kind::Waiting && self.sent.as_ref().is_some_and(|s| s.load(Ordering::SeqCst))
    }

    /// What `sub` is sent: a turn's end, or the wait's withdrawal to a device that did not ask
    /// for turn ends.
    fn for_sub(&self, sub: &subs::Subscription) -> (Kind, Value) {
        let kind = match self.kind {
            Kind::TurnEnded if !sub.notify_turn_end => Kind::Withdrawn,
            k => k,
        };
        let e = Event { kind, ..self.clone() };
        (kind, e.payload())
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
    /// Each waiting session's latest wait: its number and whether its push went out.
    waits: Mutex<HashMap<String, (u64, Arc<AtomicBool>)>>,
    next_wait: AtomicU64,
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
        let (waits, next_wait) = (Mutex::new(HashMap::new()), AtomicU64::new(1));
        Push { shared: Arc::new(Shared { dir, subject, state, waits, next_wait }), queue: OnceLock::new() }
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

    /// Mutes (or unmutes) session `session` for the device of `endpoint`: its muted sessions,
    /// or `None` when no such subscription is stored.
    pub async fn mute(
        &self,
        endpoint: &str,
        session: &str,
        muted: bool,
    ) -> std::io::Result<Option<Vec<String>>> {
        let (endpoint, session) = (endpoint.to_owned(), session.to_owned());
        self.shared.blocking(move |sh| sh.with_subs(|s| s.mute(&endpoint, &session, muted))).await?
    }

    /// The sessions the device of `endpoint` muted (`None`: no such subscription).
    pub async fn muted(&self, endpoint: &str) -> std::io::Result<Option<Vec<String>>> {
        let endpoint = endpoint.to_owned();
        let find = move |sh: &Shared| {
            sh.with_subs(|s| s.all().iter().find(|x| x.endpoint == endpoint).map(|x| x.muted.clone()))
        };
        self.shared.blocking(find).await
    }

    /// Notes what a heartbeat's events mean for the waits (a wait is numbered and becomes its
    /// session's latest; the end of a wait takes the wait's `sent` flag) and hands them back, to
    /// be queued with [`Push::enqueue`] (a wait once its request is read). Never waits.
    pub fn note(&self, mut events: Vec<Event>) -> Vec<Event> {
        let mut waits = self.shared.waits.lock().unwrap_or_else(|p| p.into_inner());
        for e in &mut events {
            if e.kind == Kind::Waiting {
                let n = self.shared.next_wait.fetch_add(1, Ordering::SeqCst);
                let sent = Arc::new(AtomicBool::new(false));
                waits.insert(e.session.clone(), (n, sent.clone()));
                (e.wait, e.sent) = (n, Some(sent));
            } else {
                e.sent = waits.remove(&e.session).map(|(_, sent)| sent);
            }
        }
        events
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

/// The sender task: each event becomes one push per interested device, sent by a task of its
/// own that first waits for the one before it about the same session (so a withdrawal never
/// overtakes its wait).
async fn sender(shared: Arc<Shared>, mut rx: mpsc::Receiver<Event>) {
    let slots = Arc::new(Semaphore::new(PARALLEL_SENDS));
    let mut chains: HashMap<String, tokio::task::JoinHandle<()>> = HashMap::new();
    while let Some(event) = rx.recv().await {
        chains.retain(|_, h| !h.is_finished());
        let before = chains.remove(&event.session);
        let session = event.session.clone();
        let task = tokio::spawn(send_event(shared.clone(), slots.clone(), event, before));
        chains.insert(session, task);
    }
}

/// Sends `event` to every device it reaches, once `before` (the session's previous event) is
/// done; a wait no longer its session's latest (answered meanwhile) is dropped.
async fn send_event(
    shared: Arc<Shared>,
    slots: Arc<Semaphore>,
    event: Event,
    before: Option<tokio::task::JoinHandle<()>>,
) {
    if let Some(b) = before {
        let _ = b.await;
    }
    if event.kind == Kind::Waiting {
        // A test holds a wait here to answer it before it goes out.
        let _ = shared.blocking(|_| crate::hold::point("push-send")).await;
        let waits = shared.waits.lock().unwrap_or_else(|p| p.into_inner());
        match (waits.get(&event.session), &event.sent) {
            (Some((n, _)), Some(sent)) if *n == event.wait => sent.store(true, Ordering::SeqCst),
            _ => {
                tracing::debug!(session = %event.session, "a wait answered before its push went out: not sent");
                return;
            }
        }
    }
    let ev = event.clone();
    let targets = shared
        .blocking(move |sh| sh.with_subs(|s| s.all().iter().filter(|s| ev.reaches(s)).cloned().collect()));
    let targets: Vec<subs::Subscription> = targets.await.unwrap_or_default();
    if targets.is_empty() {
        return;
    }
    let keys = match shared.blocking(Shared::keys).await {
        Ok(Ok(k)) => k,
        Ok(Err(e)) => return tracing::error!("cannot send a push notification: {e}"),
        Err(e) => return tracing::error!("cannot send a push notification: {e}"),
    };
    let topic = event.topic();
    let mut sends = Vec::with_capacity(targets.len());
    for sub in targets {
        let Ok(permit) = slots.clone().acquire_owned().await else { return };
        let (kind, payload) = event.for_sub(&sub);
        let (shared, keys, topic) = (shared.clone(), keys.clone(), topic.clone());
        sends.push(tokio::spawn(async move {
            deliver(&shared, &keys, &sub, kind, payload.to_string().as_bytes(), &topic).await;
            drop(permit);
        }));
    }
    futures_util::future::join_all(sends).await;
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
            Kind::Waiting | Kind::Withdrawn => "high",
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
        let pending = u32::from(status == Some("waiting"));
        SessionRow { session_id: id.into(), title: Some("Fix login".into()), status, updated_at: 1, pending }
    }

    #[test]
    fn a_waiting_session_asking_more_is_pushed_again_and_fewer_or_as_many_is_not() {
        let before: HashMap<String, Option<&'static str>> = [
            ("a".to_owned(), Some("waiting")),
            ("b".to_owned(), Some("waiting")),
            ("c".to_owned(), Some("running")),
        ]
        .into();
        let counts: HashMap<String, u32> =
            [("a".to_owned(), 1), ("b".to_owned(), 2), ("c".to_owned(), 0)].into();
        let with = |id: &str, n: u32| SessionRow { pending: n, ..row(id, Some("waiting")) };
        let after = [with("a", 2), with("b", 2), with("c", 3)];
        let again: Vec<_> =
            asked_again("7", "/w", &before, &counts, &after).into_iter().map(|e| e.session).collect();
        // c was not waiting before: `transitions` pushes it as a new wait.
        assert_eq!(again, ["a"]);
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
            ("g".to_owned(), Some("waiting")),
        ]
        .into();
        let after = [
            row("a", Some("waiting")),
            row("b", Some("waiting")),
            row("c", Some("idle")),
            row("d", Some("idle")),
            row("e", Some("idle")),
            row("f", Some("idle")),
            row("g", Some("running")),
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
                (Kind::Withdrawn, "g".into()),
                (Kind::Waiting, "new".into()),
            ]
        );
    }
}
