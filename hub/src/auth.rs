//! Who may use the hub: the machine's token, presented as `Authorization: Bearer` (preferred,
//! and it wins when both are present) or `?token=`, compared by SHA-256 digest in constant time.
//!
//! Failed authentications are rate-limited per client address with a token bucket. The check
//! runs on the token FIRST, so a caller with the right token is never refused, however many
//! bad attempts its address made. Behind a tunnel every peer is loopback, so the tunnel's
//! client-address header (`CF-Connecting-IP`, else the last `X-Forwarded-For` hop) is used,
//! but only when the peer is loopback: anyone else could forge it.

use crate::Hub;
use crate::http::{Resp, text};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{StatusCode, Uri};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// Failed attempts an address may make at once.
const BURST: f64 = 10.0;
/// Failed attempts an address earns back per second (one every 2 s).
const REFILL_PER_SEC: f64 = 0.5;
/// Addresses tracked at most; full buckets are forgotten first.
const MAX_TRACKED: usize = 10_000;

/// The token the request presents: the Bearer header's, else the `token` query parameter's.
pub fn presented<'a>(headers: &'a HeaderMap, uri: &'a Uri) -> Option<std::borrow::Cow<'a, str>> {
    if let Some(v) = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) {
        let v = v.trim();
        if let (Some(scheme), Some(token)) = (v.get(..7), v.get(7..)) {
            if scheme.eq_ignore_ascii_case("bearer ") {
                return Some(std::borrow::Cow::Borrowed(token.trim()));
            }
        }
    }
    crate::http::query_param(uri, "token")
}

/// Whether `candidate` is the machine's token.
pub fn valid(hub: &Hub, candidate: Option<&str>) -> bool {
    candidate.is_some_and(|t| hub.token.verify_fresh(t))
}

/// The address a failure is charged to: the tunnel's client-address header when the peer is
/// loopback (the tunnel), else the peer itself.
pub fn client_addr(headers: &HeaderMap, peer: SocketAddr) -> IpAddr {
    if peer.ip().is_loopback() {
        let header_ip = |name: &str, last: bool| {
            let v = headers.get(name)?.to_str().ok()?;
            let hop = if last { v.rsplit(',').next()? } else { v };
            hop.trim().parse::<IpAddr>().ok()
        };
        if let Some(ip) = header_ip("cf-connecting-ip", false).or_else(|| header_ip("x-forwarded-for", true))
        {
            return ip;
        }
    }
    peer.ip()
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

/// Checks `candidate`: `Ok` for the right token; otherwise the failure is charged to `addr`
/// (see [`client_addr`]): [`Refusal::Unauthorized`], or [`Refusal::Limited`] once the address
/// is over its limit.
pub fn check(hub: &Hub, candidate: Option<&str>, addr: IpAddr) -> Result<(), Refusal> {
    if valid(hub, candidate) {
        return Ok(());
    }
    let verdict = hub.limiter().fail(addr, Instant::now());
    verdict.map_err(|wait| {
        tracing::debug!(%addr, "too many failed authentications");
        Refusal::Limited((wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1))
    })?;
    Err(Refusal::Unauthorized)
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
    fn the_tunnel_header_counts_only_from_loopback() {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", "6.6.6.6, 1.2.3.4".parse().unwrap());
        let lo: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let far: SocketAddr = "9.9.9.9:5000".parse().unwrap();
        assert_eq!(client_addr(&h, lo), "1.2.3.4".parse::<IpAddr>().unwrap(), "the last hop is the tunnel's");
        assert_eq!(client_addr(&h, far), far.ip());
        h.insert("cf-connecting-ip", "5.5.5.5".parse().unwrap());
        assert_eq!(client_addr(&h, lo), "5.5.5.5".parse::<IpAddr>().unwrap());
        h.insert("cf-connecting-ip", "garbage".parse().unwrap());
        assert_eq!(client_addr(&h, lo), "1.2.3.4".parse::<IpAddr>().unwrap());
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
