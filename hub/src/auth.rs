//! Who may use the hub: the machine's token, presented as `Authorization: Bearer` (preferred,
//! and it wins when several are present), as a WebSocket subprotocol
//! (`Sec-WebSocket-Protocol: zcode-acp, zcode-acp.token.<base64url of the token>`: a browser
//! cannot set headers on a WebSocket, and a URL lands in access logs), or as `?token=`,
//! compared by SHA-256 digest in constant time.
//!
//! A paired device's own credential is accepted the same three ways (see [`crate::devices`]);
//! an authenticated request is a [`Principal`]: which credential, and its [`Scope`].
//!
//! Failed authentications are rate-limited per client address with a token bucket. The check
//! runs on the token FIRST, so a caller with the right token is never refused, however many
//! bad attempts its address made. The client's address is the peer's, unless the operator
//! named the tunnel's client-address header (`remote.clientAddressHeader`): then that header's
//! last entry counts, and only when the peer is loopback (the tunnel), since anyone else
//! could forge it. Unconfigured, no header is believed: a forged `CF-Connecting-IP` per request
//! would otherwise buy a fresh bucket per guess. IPv6 addresses count per /64 (one host
//! usually holds a whole /64).

use crate::http::{Resp, text};
use base64::Engine;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{StatusCode, Uri};
use std::borrow::Cow;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failed attempts an address may make at once.
const BURST: f64 = 10.0;
/// Failed attempts an address earns back per second (one every 2 s).
const REFILL_PER_SEC: f64 = 0.5;
/// Addresses tracked at most; full buckets are forgotten first.
const MAX_TRACKED: usize = 10_000;

/// The subprotocol the hub answers a WebSocket with (never the one carrying the token).
pub const SUBPROTOCOL: &str = "zcode-acp";

/// The prefix of the subprotocol value that carries the token: the rest is the token in
/// unpadded base64url, so the value is a valid RFC 6455 subprotocol token whatever the token's
/// characters are.
pub const SUBPROTOCOL_TOKEN_PREFIX: &str = "zcode-acp.token.";

/// The token the request presents: the Bearer header's, else the subprotocol's, else the
/// `token` query parameter's.
pub fn presented<'a>(headers: &'a HeaderMap, uri: &'a Uri) -> Option<Cow<'a, str>> {
    let authorization = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    if let Some(token) = authorization.and_then(zcode_shared::token::bearer) {
        return Some(Cow::Borrowed(token));
    }
    if let Some(encoded) = subprotocols(headers).find_map(|p| p.strip_prefix(SUBPROTOCOL_TOKEN_PREFIX)) {
        // Undecodable still counts as a presented (wrong) token: it is charged like one.
        let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(encoded.trim_end_matches('='))
            .ok()
            .and_then(|b| String::from_utf8(b).ok());
        return Some(Cow::Owned(decoded.unwrap_or_default()));
    }
    crate::http::query_param(uri, "token")
}

/// The subprotocols a WebSocket client offers, in order.
pub fn subprotocols(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|p| !p.is_empty())
}

/// Removes the token-carrying subprotocol from `headers` (the other offered ones stay), so
/// nothing the hub forwards or logs carries it.
pub fn strip_subprotocol_token(headers: &mut HeaderMap) {
    if !subprotocols(headers).any(|p| p.starts_with(SUBPROTOCOL_TOKEN_PREFIX)) {
        return;
    }
    let kept: Vec<String> = subprotocols(headers)
        .filter(|p| !p.starts_with(SUBPROTOCOL_TOKEN_PREFIX))
        .map(str::to_owned)
        .collect();
    headers.remove(header::SEC_WEBSOCKET_PROTOCOL);
    if let Ok(v) = HeaderValue::from_str(&kept.join(", ")) {
        if !kept.is_empty() {
            headers.insert(header::SEC_WEBSOCKET_PROTOCOL, v);
        }
    }
}

/// The hub's auth state: the machine's token (what callers' tokens are compared against, by
/// digest, and what the hub presents to bridges; re-read when rotated; never logged) and the
/// failed-authentication buckets per client address.
pub struct Auth {
    /// The machine's token.
    pub token: zcode_shared::token::Live,
    limiter: Mutex<Limiter>,
}

impl Auth {
    /// Auth over `token`, no failures counted yet.
    pub fn new(token: zcode_shared::token::Live) -> Auth {
        Auth { token, limiter: Mutex::new(Limiter::default()) }
    }

    /// Whether `candidate` is the machine's token.
    pub fn valid(&self, candidate: Option<&str>) -> bool {
        candidate.is_some_and(|t| self.token.verify_fresh(t))
    }

    /// Checks `candidate`: `Ok` for the right token; otherwise the failure is charged to `addr`
    /// (see [`client_addr`]): [`Refusal::Unauthorized`], or [`Refusal::Limited`] once the
    /// address is over its limit.
    pub fn check(&self, candidate: Option<&str>, addr: IpAddr) -> Result<(), Refusal> {
        if self.valid(candidate) {
            return Ok(());
        }
        Err(self.fail(addr))
    }

    /// Charges one failed attempt to `addr`: [`Refusal::Unauthorized`], or
    /// [`Refusal::Limited`] once the address is over its limit.
    pub fn fail(&self, addr: IpAddr) -> Refusal {
        let verdict = self.limiter.lock().unwrap_or_else(|p| p.into_inner()).fail(addr, Instant::now());
        match verdict {
            Ok(()) => Refusal::Unauthorized,
            Err(wait) => {
                tracing::debug!(%addr, "too many failed authentications");
                Refusal::Limited(whole_secs(wait))
            }
        }
    }

    /// Whether `addr` may try once more without being charged: `Err` with the 429 when it is
    /// over its limit. For secrets small enough to guess (pairing codes), which are checked
    /// only after this says yes.
    pub fn may_try(&self, addr: IpAddr) -> Result<(), Refusal> {
        let verdict = self.limiter.lock().unwrap_or_else(|p| p.into_inner()).peek(addr, Instant::now());
        verdict.map_err(|wait| Refusal::Limited(whole_secs(wait)))
    }
}

fn whole_secs(wait: Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
}

/// What a credential may do: everything, or only watch (list, load, read, be notified); the
/// bridge enforces it on ACP, told by the hub's dial.
pub use zcode_shared::scope::Scope;

/// Which credential a request presented: what a revocation or rotation cuts.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Credential {
    /// The machine's token, as it was after this many rotations (see
    /// [`zcode_shared::token::Live::generation`]).
    Machine(u64),
    /// A paired device's own credential (its id).
    Device(String),
}

/// Who an authenticated request is: its credential, that credential's scope, and a name for
/// the audit trail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// The credential presented.
    pub credential: Credential,
    /// What it may do.
    pub scope: Scope,
    /// The device's name (`machine token` for the machine's).
    pub name: String,
}

impl Principal {
    /// What this request may do.
    pub fn scope(&self) -> Scope {
        self.scope
    }

    /// The device's id, or `machine` for the machine's token.
    pub fn device_id(&self) -> &str {
        match &self.credential {
            Credential::Machine(_) => "machine",
            Credential::Device(id) => id,
        }
    }
}

/// The address a failure is charged to: the last entry of the configured client-address
/// `header` (lower-case) when there is one and the peer is loopback (the tunnel), else the peer
/// itself; see [`addr_key`] for IPv6.
pub fn client_addr(headers: &HeaderMap, peer: SocketAddr, header: Option<&str>) -> IpAddr {
    let forwarded = match header {
        Some(name) if peer.ip().is_loopback() => {
            headers.get_all(name).iter().next_back().and_then(forwarded_ip)
        }
        _ => None,
    };
    addr_key(forwarded.unwrap_or(peer.ip()))
}

/// The client's address in one forwarded header value: its last comma-separated entry (the
/// hop the tunnel added; earlier ones are the client's to forge), a bare address, an
/// `address:port`, or an RFC 7239 `for=` element.
fn forwarded_ip(v: &HeaderValue) -> Option<IpAddr> {
    let last = v.to_str().ok()?.rsplit(',').next()?.trim();
    let last = last
        .split(';')
        .find_map(|p| p.trim().get(..4).filter(|k| k.eq_ignore_ascii_case("for=")).map(|_| &p.trim()[4..]))
        .unwrap_or(last)
        .trim_matches('"');
    if let Ok(ip) = last.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(sa) = last.parse::<SocketAddr>() {
        return Some(sa.ip());
    }
    last.strip_prefix('[')?.split(']').next()?.parse().ok()
}

/// The key an address is counted under: IPv4 as is (also when IPv4-mapped), IPv6 by its /64.
pub fn addr_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
        },
    }
}

/// Why a caller was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No token, or the wrong one: 401.
    Unauthorized,
    /// Too many failures from this address: 429, retry after this many seconds.
    Limited(u64),
}

impl Refusal {
    /// The answer to send.
    pub fn response(self) -> Resp {
        match self {
            Refusal::Unauthorized => text(StatusCode::UNAUTHORIZED, "unauthorized"),
            Refusal::Limited(secs) => {
                let mut r = text(StatusCode::TOO_MANY_REQUESTS, "too many failed authentications");
                r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
                r
            }
        }
    }
}

/// Failed-authentication buckets per client address.
#[derive(Default)]
pub struct Limiter {
    buckets: HashMap<IpAddr, Bucket>,
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn refill(&mut self, now: Instant) {
        let earned = now.saturating_duration_since(self.at).as_secs_f64() * REFILL_PER_SEC;
        self.tokens = (self.tokens + earned).min(BURST);
        self.at = now;
    }
}

impl Limiter {
    /// Whether `addr` has an attempt left, without charging it: `Err(wait)` when it has none.
    pub fn peek(&mut self, addr: IpAddr, now: Instant) -> Result<(), Duration> {
        let Some(b) = self.buckets.get_mut(&addr) else { return Ok(()) };
        b.refill(now);
        match b.tokens >= 1.0 {
            true => Ok(()),
            false => Err(Duration::from_secs_f64((1.0 - b.tokens) / REFILL_PER_SEC)),
        }
    }

    /// Charges one failed attempt to `addr`: `Err(wait)` when it has none left.
    pub fn fail(&mut self, addr: IpAddr, now: Instant) -> Result<(), Duration> {
        if self.buckets.len() >= MAX_TRACKED && !self.buckets.contains_key(&addr) {
            self.buckets.retain(|_, b| {
                b.refill(now);
                b.tokens < BURST
            });
            if self.buckets.len() >= MAX_TRACKED {
                // Still full of addresses under attack: forget them all rather than grow.
                self.buckets.clear();
            }
        }
        let b = self.buckets.entry(addr).or_insert(Bucket { tokens: BURST, at: now });
        b.refill(now);
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - b.tokens) / REFILL_PER_SEC))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_allowed_then_refused_then_earned_back() {
        let mut l = Limiter::default();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let t0 = Instant::now();
        for _ in 0..10 {
            assert!(l.fail(a, t0).is_ok());
        }
        let wait = l.fail(a, t0).unwrap_err();
        assert!(wait > Duration::from_secs(1) && wait <= Duration::from_secs(2), "{wait:?}");
        assert!(l.fail(b, t0).is_ok(), "another address is not affected");
        assert!(l.fail(a, t0 + Duration::from_secs(2)).is_ok(), "one attempt earned back after 2 s");
        assert!(l.fail(a, t0 + Duration::from_secs(2)).is_err());
    }

    #[test]
    fn a_forwarded_address_counts_only_when_configured_and_only_from_loopback() {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", "6.6.6.6, 1.2.3.4".parse().unwrap());
        h.insert("cf-connecting-ip", "5.5.5.5".parse().unwrap());
        let lo: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let far: SocketAddr = "9.9.9.9:5000".parse().unwrap();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(client_addr(&h, lo, None), lo.ip(), "unconfigured: no header is believed");
        let xff = Some("x-forwarded-for");
        assert_eq!(client_addr(&h, lo, xff), ip("1.2.3.4"), "the last hop is the tunnel's");
        assert_eq!(client_addr(&h, far, xff), far.ip(), "not from a non-loopback peer");
        assert_eq!(client_addr(&h, lo, Some("cf-connecting-ip")), ip("5.5.5.5"));
        // Absent or unparsable: the peer counts.
        assert_eq!(client_addr(&h, lo, Some("x-real-ip")), lo.ip());
        h.insert("cf-connecting-ip", "garbage".parse().unwrap());
        assert_eq!(client_addr(&h, lo, Some("cf-connecting-ip")), lo.ip());
        // Several header lines: the last line's last entry.
        h.append("x-forwarded-for", "7.7.7.7".parse().unwrap());
        assert_eq!(client_addr(&h, lo, xff), ip("7.7.7.7"));
        for (value, want) in [
            ("1.2.3.4:8080", "1.2.3.4"),
            ("[2001:db8::1]:443", "2001:db8::"),
            ("for=192.0.2.60;proto=http;by=203.0.113.43", "192.0.2.60"),
            ("for=\"[2001:db8:cafe::17]:4711\"", "2001:db8:cafe::"),
            ("::ffff:10.0.0.1", "10.0.0.1"),
        ] {
            let mut h = HeaderMap::new();
            h.insert("forwarded", value.parse().unwrap());
            assert_eq!(client_addr(&h, lo, Some("forwarded")), ip(want), "{value}");
        }
    }

    #[test]
    fn ipv6_addresses_count_per_64() {
        let a = addr_key("2001:db8:1:2:aaaa::1".parse().unwrap());
        let b = addr_key("2001:db8:1:2:bbbb::9".parse().unwrap());
        let c = addr_key("2001:db8:1:3::1".parse().unwrap());
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(addr_key("10.1.2.3".parse().unwrap()), "10.1.2.3".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn the_token_can_ride_a_subprotocol_and_is_stripped_from_it() {
        let uri: Uri = "/acp?instance=1&token=q".parse().unwrap();
        let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode("s3 cret,/=");
        let mut h = HeaderMap::new();
        let offer = format!("zcode-acp, {SUBPROTOCOL_TOKEN_PREFIX}{encoded}");
        h.insert(header::SEC_WEBSOCKET_PROTOCOL, offer.parse().unwrap());
        assert_eq!(presented(&h, &uri).as_deref(), Some("s3 cret,/="), "the subprotocol wins over the query");
        h.insert(header::AUTHORIZATION, "Bearer b".parse().unwrap());
        assert_eq!(presented(&h, &uri).as_deref(), Some("b"), "the header wins over both");
        h.remove(header::AUTHORIZATION);
        strip_subprotocol_token(&mut h);
        assert_eq!(h.get(header::SEC_WEBSOCKET_PROTOCOL).unwrap(), "zcode-acp");
        assert_eq!(presented(&h, &uri).as_deref(), Some("q"));
        // Padded is accepted too; garbage is a presented (wrong) token, not an absent one.
        let padded = base64::engine::general_purpose::URL_SAFE.encode("ab");
        h.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            format!("{SUBPROTOCOL_TOKEN_PREFIX}{padded}").parse().unwrap(),
        );
        assert_eq!(presented(&h, &uri).as_deref(), Some("ab"));
        h.insert(header::SEC_WEBSOCKET_PROTOCOL, format!("{SUBPROTOCOL_TOKEN_PREFIX}!!").parse().unwrap());
        assert_eq!(presented(&h, &uri).as_deref(), Some(""));
        strip_subprotocol_token(&mut h);
        assert!(h.get(header::SEC_WEBSOCKET_PROTOCOL).is_none(), "nothing left to offer");
    }

    #[test]
    fn bearer_wins_over_the_query() {
        let uri: Uri = "/x?token=q".parse().unwrap();
        let mut h = HeaderMap::new();
        assert_eq!(presented(&h, &uri).as_deref(), Some("q"));
        h.insert(header::AUTHORIZATION, "Bearer  b ".parse().unwrap());
        assert_eq!(presented(&h, &uri).as_deref(), Some("b"));
        h.insert(header::AUTHORIZATION, "Basic xyz".parse().unwrap());
        assert_eq!(presented(&h, &uri).as_deref(), Some("q"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_bytes("Béarer x".as_bytes()).unwrap());
        assert_eq!(presented(&h, &uri).as_deref(), Some("q"), "no panic on a multibyte scheme");
    }

    #[test]
    fn the_table_stays_bounded() {
        let mut l = Limiter::default();
        let t0 = Instant::now();
        for i in 0..(MAX_TRACKED as u32 + 5) {
            let _ = l.fail(IpAddr::from(i.to_be_bytes()), t0);
        }
        assert!(l.buckets.len() <= MAX_TRACKED);
    }
}
