//! Paired devices: one-time pairing codes, each device's own credential (kept as its SHA-256
//! in the store, compared in constant time), what a request's credential is ([`authenticate`]),
//! and revocation and rotation closing every live connection made with the credential
//! ([`holds`]). The machine's token stays valid beside them, for local tools and scripts. A
//! device may instead hold a key and get short-lived access tokens for signed challenges
//! ([`keys`]): the web client's way, so that no credential of it lies in the browser's storage.
//!
//! **Pairing codes** are 10 symbols of Crockford's base32 (50 bits, shown `XXXXX-XXXXX`),
//! used once, within [`CODE_LIFE`], at most [`MAX_CODES`] waiting at once. A wrong code is
//! charged to the caller's address like a wrong token (10 at once, then one per 2 s: at most
//! 160 tries per address in 5 minutes), and the address is checked BEFORE the code is, so an
//! address over its limit learns nothing. On top of that the whole hub takes at most
//! [`WRONG_CODES_BURST`] wrong codes at once and [`WRONG_CODES_PER_SEC`] a second after (≤ 700
//! in 5 minutes, however many addresses guess). So within a code's life, all guessers
//! together hit one of at most 16 live codes with probability ≤ 700 × 16 / 2^50 ≈ 1 in 10^11.

pub mod audit;
pub mod holds;
pub mod keys;

use crate::Hub;
use crate::auth::{Credential, Principal, Refusal, Scope};
use base64::Engine;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use zcode_shared::handoff::Which;
use zcode_shared::store::devices::DeviceRow;

/// How long a pairing code works.
pub const CODE_LIFE: Duration = Duration::from_secs(5 * 60);
/// Pairing codes waiting at once, at most.
pub const MAX_CODES: usize = 16;
/// Paired devices at most.
pub const MAX_DEVICES: usize = 64;
/// Wrong pairing codes the hub takes at once (from all addresses together).
const WRONG_CODES_BURST: f64 = 100.0;
/// Wrong pairing codes the hub earns back per second.
const WRONG_CODES_PER_SEC: f64 = 2.0;
/// Symbols of a code (Crockford's base32: no I, L, O, U).
const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
/// Length of a code, in symbols (5 bits each).
const CODE_LEN: usize = 10;
/// A device's last sighting is written to the store at most this often.
const SEEN_EVERY_MS: i64 = 60_000;

/// The paired devices, the waiting codes and the live connections by credential.
#[derive(Default)]
pub struct Devices {
    loaded: tokio::sync::OnceCell<()>,
    state: Mutex<State>,
    /// Live connections by credential.
    pub holds: holds::Holds,
    /// The machine token's generation whose older connections were cut.
    cut_generation: AtomicU64,
}

#[derive(Default)]
struct State {
    devices: Vec<Device>,
    codes: Vec<Code>,
    wrong: Option<(f64, Instant)>,
    challenges: Vec<keys::Challenge>,
    access: Vec<keys::Access>,
}

struct Device {
    row: DeviceRow,
    scope: Scope,
    /// Last seen as written to the store.
    stored_seen: i64,
}

struct Code {
    digest: [u8; 32],
    name: Option<String>,
    scope: Scope,
    expires: Instant,
}

/// A waiting pairing code.
pub struct NewCode {
    /// The code as a person types it (`XXXXX-XXXXX`).
    pub code: String,
    /// When it stops working, epoch ms.
    pub expires_at: u64,
}

/// A device paired with a code.
pub struct Paired {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its credential (shown once, never kept); none for a device that registered a key.
    pub token: Option<String>,
}

/// Why a pairing failed.
#[derive(Debug, PartialEq, Eq)]
pub enum PairError {
    /// Over a rate limit (429, retry after this many seconds).
    Limited(u64),
    /// Wrong, used or expired (401).
    BadCode,
    /// Too many devices or codes (409, the message says which).
    Full(&'static str),
    /// The store failed (503).
    Store(String),
}

fn random_bytes<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    // The OS's random source failing is not survivable for a credential: no weak fallback.
    getrandom::fill(&mut b).expect("the OS random source");
    b
}

/// A code typed by a person, as compared: upper case, separators dropped, look-alikes mapped.
fn normalize(code: &str) -> String {
    code.chars()
        .filter(|c| !matches!(c, '-' | ' '))
        .map(|c| match c.to_ascii_uppercase() {
            'O' => '0',
            'I' | 'L' => '1',
            c => c,
        })
        .collect()
}

/// How long a code works: [`CODE_LIFE`], or in a debug build `ZCODE_ACP_TEST_PAIRING_CODE_MS`
/// (the expiry test's).
fn code_life() -> Duration {
    static LIFE: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *LIFE.get_or_init(|| {
        let knob =
            zcode_shared::env::test_knob(&zcode_shared::env::ProcessEnv, "ZCODE_ACP_TEST_PAIRING_CODE_MS");
        knob.and_then(|v| v.trim().parse().ok()).map_or(CODE_LIFE, Duration::from_millis)
    })
}

fn digest(s: &str) -> [u8; 32] {
    zcode_shared::token::digest(s)
}

fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Devices {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads the paired devices from the store, once (again after a failure).
    async fn load(&self, store: &crate::catalog::Catalog) -> Result<(), String> {
        let rows = self
            .loaded
            .get_or_try_init(|| async {
                let rows = store.run(|st| st.read(|s| s.devices())).await?.map_err(|e| e.to_string())?;
                let mut state = self.state();
                state.devices = rows
                    .into_iter()
                    .map(|row| Device {
                        scope: Scope::parse(&row.scope).unwrap_or(Scope::Watch),
                        stored_seen: row.last_seen_at.unwrap_or(0),
                        row,
                    })
                    .collect();
                Ok::<(), String>(())
            })
            .await;
        rows.map(|_| ())
    }

    /// The device whose credential (or live access token, see [`keys`]) is `candidate`
    /// (constant time over every device), noting that it was seen; with whether its sighting
    /// should be written to the store.
    fn verify(&self, candidate: &str, now_ms: i64) -> Option<(Principal, bool)> {
        let d = digest(candidate);
        let mut state = self.state();
        let mut found = None;
        for (i, dev) in state.devices.iter().enumerate() {
            // A device with a key has no stored credential (its hash is of bytes nobody holds).
            if same(&dev.row.token_sha256, &d) && dev.row.public_key.is_none() {
                found = Some(i);
            }
        }
        if found.is_none() {
            let State { devices, access, .. } = &mut *state;
            found = keys::access_of(devices, access, &d);
        }
        let dev = &mut state.devices[found?];
        dev.row.last_seen_at = Some(now_ms);
        let write = now_ms - dev.stored_seen >= SEEN_EVERY_MS;
        if write {
            dev.stored_seen = now_ms;
        }
        let who = Principal {
            credential: Credential::Device(dev.row.id.clone()),
            scope: dev.scope,
            name: dev.row.name.clone(),
        };
        Some((who, write))
    }

    /// Whether `cred` still works (the device is paired; the machine token not rotated since).
    fn valid(&self, hub: &Hub, cred: &Credential) -> bool {
        match cred {
            Credential::Machine(g) => *g == hub.auth.token.generation(),
            Credential::Device(id) => self.state().devices.iter().any(|d| d.row.id == *id),
        }
    }

    /// A new pairing code for a device of `scope` (named `name` unless the device names itself).
    pub fn new_code(&self, name: Option<String>, scope: Scope) -> Result<NewCode, PairError> {
        let now = Instant::now();
        let mut state = self.state();
        state.codes.retain(|c| c.expires > now);
        if state.codes.len() >= MAX_CODES {
            return Err(PairError::Full(
                "16 pairing codes are waiting already: use one or let it expire (5 min)",
            ));
        }
        let raw: [u8; CODE_LEN] = random_bytes();
        let code: String = raw.iter().map(|b| ALPHABET[usize::from(b & 31)] as char).collect();
        state.codes.push(Code { digest: digest(&code), name, scope, expires: now + code_life() });
        let expires_at = zcode_shared::time::now_ms() + code_life().as_millis() as u64;
        Ok(NewCode { code: format!("{}-{}", &code[..5], &code[5..]), expires_at })
    }

    /// Takes `code` (once): its name and scope. Checked only when `addr` and the hub are under
    /// their limits; a wrong code is charged to both.
    fn take_code(&self, hub: &Hub, code: &str, addr: IpAddr) -> Result<(Option<String>, Scope), PairError> {
        let limited = |r: Refusal| match r {
            Refusal::Limited(s) => PairError::Limited(s),
            Refusal::Unauthorized => PairError::BadCode,
        };
        hub.auth.may_try(addr).map_err(limited)?;
        let now = Instant::now();
        let mut state = self.state();
        let (tokens, at) = state.wrong.unwrap_or((WRONG_CODES_BURST, now));
        let tokens =
            (tokens + now.duration_since(at).as_secs_f64() * WRONG_CODES_PER_SEC).min(WRONG_CODES_BURST);
        if tokens < 1.0 {
            state.wrong = Some((tokens, now));
            return Err(PairError::Limited(((1.0 - tokens) / WRONG_CODES_PER_SEC).ceil().max(1.0) as u64));
        }
        state.codes.retain(|c| c.expires > now);
        let d = digest(&normalize(code));
        let mut found = None;
        for (i, c) in state.codes.iter().enumerate() {
            if same(&c.digest, &d) {
                found = Some(i);
            }
        }
        match found {
            Some(i) => {
                state.wrong = Some((tokens, now));
                let c = state.codes.swap_remove(i);
                Ok((c.name, c.scope))
            }
            None => {
                state.wrong = Some((tokens - 1.0, now));
                drop(state);
                Err(limited(hub.auth.fail(addr)))
            }
        }
    }

    /// The devices as `GET /api/devices` lists them (`current`: the one asking).
    pub async fn list(&self, hub: &Hub, asking: &Principal) -> Result<serde_json::Value, String> {
        self.load(&hub.store).await?;
        let state = self.state();
        let list: Vec<_> = state
            .devices
            .iter()
            .map(|d| {
                serde_json::json!({
                    "id": d.row.id,
                    "name": d.row.name,
                    "scope": d.scope.as_str(),
                    "createdAt": d.row.created_at,
                    "lastSeenAt": d.row.last_seen_at,
                    "current": asking.credential == Credential::Device(d.row.id.clone()),
                })
            })
            .collect();
        Ok(serde_json::json!({ "devices": list }))
    }

    /// The name of device `id`, if paired.
    pub fn name_of(&self, id: &str) -> Option<String> {
        self.state().devices.iter().find(|d| d.row.id == id).map(|d| d.row.name.clone())
    }

    /// Whether any device is paired (and not revoked): the hub then does not exit idle, so
    /// that the port a phone (and a tunnel of the user's own) reaches is never let go. Read from
    /// the store the first time (a hub that restarted has devices no request has shown yet);
    /// a store that cannot be read counts as paired (the port is kept rather than let go).
    pub async fn any_paired(&self, store: &crate::catalog::Catalog) -> bool {
        self.load(store).await.is_err() || !self.state().devices.is_empty()
    }
}

/// Who presents `candidate`: the machine's token (its generation), else a paired device;
/// otherwise the failure is charged to `addr` like any wrong token.
pub async fn authenticate(hub: &Hub, candidate: Option<&str>, addr: IpAddr) -> Result<Principal, Refusal> {
    if let Some(c) = candidate {
        if let Some(generation) = hub.auth.token.verify_generation(c) {
            after_rotation(hub);
            let name = "machine token".to_owned();
            return Ok(Principal { credential: Credential::Machine(generation), scope: Scope::Full, name });
        }
        if let Err(e) = hub.devices.load(&hub.store).await {
            tracing::warn!("paired devices unavailable: {e}");
        }
        let now = zcode_shared::time::now_ms() as i64;
        if let Some((who, write)) = hub.devices.verify(c, now) {
            if write {
                let id = who.device_id().to_owned();
                let store = &hub.store;
                let _ = store.run(move |st| st.write(|w| w.device_seen(&id, now))).await;
            }
            return Ok(who);
        }
    }
    Err(hub.auth.fail(addr))
}

/// Notes that connection `conn` made a request as `who`, and closes it at once if `who`'s
/// credential was cut meanwhile (see [`holds`]).
pub fn hold(hub: &Hub, conn: u64, who: &Principal) {
    hub.devices.holds.hold(conn, &who.credential);
    recheck(hub, &who.credential);
}

/// Cuts `cred` again when it no longer works: for a connection or relay registered just after
/// a revocation's cut.
pub fn recheck(hub: &Hub, cred: &Credential) {
    if !hub.devices.valid(hub, cred) {
        match cred {
            Credential::Device(id) => cut(hub, Which::Device(id.clone())),
            // Rotated past it: every older one goes.
            Credential::Machine(_) => cut(hub, Which::MachineBelow(hub.auth.token.generation())),
        }
    }
}

/// Closes every connection and relay of the credentials `which` names, and tells the bridges
/// to close the clients handed to them with them (1008).
fn cut(hub: &Hub, which: Which) {
    // The hub's own connections and relays are all this hub's (any hub number does).
    let takes = |c: &Credential| which.takes(&handed_cred(c), 0);
    let relays = hub.devices.holds.cut(takes);
    if !relays.is_empty() {
        hub.bridges.relay.end(relays);
    }
    hub.bridges.handoff.cut(which, 1008, "credential revoked");
}

/// `cred` as a hand-over names it.
pub fn handed_cred(cred: &Credential) -> zcode_shared::handoff::Cred {
    match cred {
        Credential::Machine(g) => zcode_shared::handoff::Cred::Machine(*g),
        Credential::Device(id) => zcode_shared::handoff::Cred::Device(id.clone()),
    }
}

/// After the machine's token was rotated (noticed by a request or housekeeping): closes every
/// connection made with an older one.
pub fn after_rotation(hub: &Hub) {
    let now = hub.auth.token.generation();
    if hub.devices.cut_generation.fetch_max(now, Ordering::AcqRel) < now {
        cut(hub, Which::MachineBelow(now));
    }
}

/// Pairs a device with `code`, named `name` (else the code's name, else `device`): with
/// `public_key` (checked by [`keys::parse_public_key`]) a device that signs challenges and gets
/// no credential, else one given its own credential.
pub async fn pair(
    hub: &Hub,
    code: &str,
    name: Option<String>,
    public_key: Option<Vec<u8>>,
    addr: IpAddr,
) -> Result<Paired, PairError> {
    hub.devices.load(&hub.store).await.map_err(PairError::Store)?;
    if hub.devices.state().devices.len() >= MAX_DEVICES {
        return Err(PairError::Full("64 devices are paired already: revoke one first"));
    }
    let (code_name, scope) = hub.devices.take_code(hub, code, addr)?;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let id = b64.encode(random_bytes::<9>());
    let token = b64.encode(random_bytes::<32>());
    let name = name.or(code_name).unwrap_or_else(|| "device".to_owned());
    let row = DeviceRow {
        id: id.clone(),
        name: name.clone(),
        scope: scope.as_str().to_owned(),
        // A device with a key is given no credential: its hash is of a token nobody sees.
        token_sha256: digest(&token),
        created_at: zcode_shared::time::now_ms() as i64,
        last_seen_at: None,
        public_key: public_key.clone(),
    };
    let stored = row.clone();
    hub.store
        .run(move |st| st.write(|w| w.device_add(&stored)))
        .await
        .and_then(|r| r.map_err(|e| e.to_string()))
        .map_err(PairError::Store)?;
    hub.devices.state().devices.push(Device { row, scope, stored_seen: 0 });
    Ok(Paired { id, name, token: public_key.is_none().then_some(token) })
}

/// Revokes device `id`: its credential stops working, every connection and relay it holds is
/// closed, its push subscriptions removed. `Ok(None)`: no such device.
pub async fn revoke(hub: &Hub, id: &str) -> Result<Option<String>, String> {
    hub.devices.load(&hub.store).await?;
    // The store first: a revocation the store did not take must not come back at the next start.
    let owned = id.to_owned();
    let endpoints =
        hub.store.run(move |st| st.write(|w| w.device_remove(&owned))).await?.map_err(|e| e.to_string())?;
    let name = {
        let mut state = hub.devices.state();
        let i = state.devices.iter().position(|d| d.row.id == id);
        i.map(|i| state.devices.remove(i).row.name)
    };
    let Some(endpoints) = endpoints else { return Ok(None) };
    hub.devices.drop_access(id);
    cut(hub, Which::Device(id.to_owned()));
    for endpoint in endpoints {
        if let Err(e) = hub.account.push.unsubscribe(&endpoint).await {
            tracing::warn!("cannot remove a revoked device's push subscription: {e}");
        }
    }
    Ok(Some(name.unwrap_or_default()))
}

/// Renames device `id`; `Ok(false)`: no such device.
pub async fn rename(hub: &Hub, id: &str, name: &str) -> Result<bool, String> {
    hub.devices.load(&hub.store).await?;
    let (i, n) = (id.to_owned(), name.to_owned());
    let found =
        hub.store.run(move |st| st.write(|w| w.device_rename(&i, &n))).await?.map_err(|e| e.to_string())?;
    if let Some(d) = hub.devices.state().devices.iter_mut().find(|d| d.row.id == id) {
        d.row.name = name.to_owned();
    }
    Ok(found)
}

/// Records that device `who` registered push `endpoint` (a revocation removes it).
pub async fn push_registered(hub: &Hub, who: &Principal, endpoint: String) {
    let Credential::Device(id) = who.credential.clone() else { return };
    let stored = hub.store.run(move |st| st.write(|w| w.device_push(&id, &endpoint))).await;
    if let Err(e) = stored.and_then(|r| r.map_err(|e| e.to_string())) {
        tracing::warn!("cannot note a device's push subscription: {e}");
    }
}

/// A device name as given: trimmed, 1 to 64 characters, no control characters; the error is
/// the 400's text.
pub fn check_name(name: &str) -> Result<String, &'static str> {
    let t = name.trim();
    if t.is_empty() || t.chars().count() > 64 {
        return Err("name must be 1 to 64 characters");
    }
    if t.chars().any(char::is_control) {
        return Err("name must not contain control characters");
    }
    Ok(t.to_owned())
}

/// Whether a `watch` device may make this request: reading (`GET`, `HEAD`) and its own push
/// subscription and mutes, nothing that changes anything.
pub fn watch_may(method: &hyper::Method, path: &str) -> bool {
    use hyper::Method;
    matches!(*method, Method::GET | Method::HEAD)
        || (path == "/api/push/subscriptions" && matches!(*method, Method::POST | Method::DELETE))
        || (path == "/api/pair/key" && *method == Method::POST)
        || (path == "/api/push/mute" && *method == Method::POST)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_read_the_way_people_type_them() {
        assert_eq!(normalize("abcde-fgh0o"), "ABCDEFGH00");
        assert_eq!(normalize(" 1il ZZ"), "111ZZ");
    }

    #[test]
    fn a_code_works_once_and_codes_are_capped() {
        let d = Devices::default();
        let c = d.new_code(Some("phone".into()), Scope::Watch).unwrap();
        assert_eq!(c.code.len(), CODE_LEN + 1);
        assert!(c.code.chars().all(|ch| ch == '-' || ALPHABET.contains(&(ch as u8))), "{}", c.code);
        for _ in 1..MAX_CODES {
            d.new_code(None, Scope::Full).unwrap();
        }
        assert!(matches!(d.new_code(None, Scope::Full), Err(PairError::Full(_))));
    }

    #[test]
    fn a_watch_device_may_only_read() {
        use hyper::Method;
        assert!(watch_may(&Method::GET, "/api/instances"));
        assert!(watch_may(&Method::POST, "/api/push/subscriptions"));
        assert!(!watch_may(&Method::POST, "/api/instances"));
        assert!(!watch_may(&Method::PUT, "/api/settings/mcp/x"));
        assert!(!watch_may(&Method::DELETE, "/api/devices/x"));
    }
}
