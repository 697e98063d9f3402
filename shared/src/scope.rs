//! What a connection may do: everything ([`Scope::Full`]), or only watch ([`Scope::Watch`]:
//! list, load, read files, see quota and usage, get notifications). The hub decides it (a
//! paired device's scope) and tells the bridge with [`HEADER`] when it dials; the bridge,
//! which parses ACP, enforces it. What a watch connection is refused is answered with
//! [`WATCH_ONLY`] (HTTP 403, or a JSON-RPC error with code [`WATCH_ONLY_CODE`]).

use hyper::header::{HeaderMap, HeaderValue};

/// The header the hub's dial of a bridge carries (`watch` or `full`; absent: `full`, the
/// machine token's own scope). A bridge heeds it only on a request that showed the token.
pub const HEADER: &str = "x-zcode-scope";

/// The header the hub's dial of a bridge carries naming whose connection it is: a paired
/// device's id, or `machine` for the machine's token. A bridge heeds it only past the token,
/// and only to say who did what in the audit trail (`prompt`, `permission.answer`).
pub const DEVICE_HEADER: &str = "x-zcode-device";

/// The device [`DEVICE_HEADER`] names, when it is one an id can be (1 to 64 of `[A-Za-z0-9_-]`);
/// a connection without one (a local tool straight to the bridge) is the machine token's.
pub fn device_from_headers(headers: &HeaderMap) -> Option<String> {
    let v = headers.get(DEVICE_HEADER)?.to_str().ok()?.trim();
    let ok =
        (1..=64).contains(&v.len()) && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    ok.then(|| v.to_owned())
}

/// Sets [`DEVICE_HEADER`] to `device`, replacing whatever a client sent (an id that is not
/// a valid header value is left out: the bridge then records `machine`).
pub fn set_device_header(headers: &mut HeaderMap, device: &str) {
    headers.remove(DEVICE_HEADER);
    if let Ok(v) = HeaderValue::from_str(device) {
        headers.insert(DEVICE_HEADER, v);
    }
}

/// The JSON-RPC error code of a request a watch connection may not make.
pub const WATCH_ONLY_CODE: i64 = -32003;

/// What a watch connection is told when it tries more than watching.
pub const WATCH_ONLY: &str = "this device can only watch: it may list and load sessions, read \
                              files and see usage, but not prompt, answer, cancel or change anything";

/// A connection's scope.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scope {
    /// Everything the token allows.
    #[default]
    Full,
    /// Reads and notifications only.
    Watch,
}

impl Scope {
    /// `full` or `watch` (exactly, lower case).
    pub fn parse(s: &str) -> Option<Scope> {
        match s {
            "full" => Some(Scope::Full),
            "watch" => Some(Scope::Watch),
            _ => None,
        }
    }

    /// Its name, as [`Scope::parse`] reads it.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Full => "full",
            Scope::Watch => "watch",
        }
    }

    /// Whether an HTTP request with `method` is within this scope: a watcher's are reads only
    /// (GET, HEAD); every route's writes use another method.
    pub fn allows_method(self, method: &str) -> bool {
        self == Scope::Full || matches!(method, "GET" | "HEAD")
    }

    /// The scope `headers` name ([`HEADER`]): none is `Full`; several are the narrowest
    /// (a `watch` never widens because another value was added); an unknown value is an error
    /// (a message for a 400).
    pub fn from_headers(headers: &HeaderMap) -> Result<Scope, String> {
        let mut scope = Scope::Full;
        for v in headers.get_all(HEADER) {
            let parsed = v.to_str().ok().map(str::trim).and_then(Scope::parse);
            match parsed {
                Some(Scope::Watch) => scope = Scope::Watch,
                Some(Scope::Full) => {}
                None => return Err(format!("`{HEADER}` must be `full` or `watch`")),
            }
        }
        Ok(scope)
    }

    /// Sets [`HEADER`] in `headers` to this scope, replacing whatever a client sent.
    pub fn set_header(self, headers: &mut HeaderMap) {
        headers.insert(HEADER, HeaderValue::from_static(self.as_str()));
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_header_is_an_id_or_nothing() {
        let mut h = HeaderMap::new();
        assert_eq!(device_from_headers(&h), None);
        set_device_header(&mut h, "dev_01-AB");
        assert_eq!(device_from_headers(&h).as_deref(), Some("dev_01-AB"));
        for bad in ["", "a b", "x/../y", &"x".repeat(65)] {
            h.insert(DEVICE_HEADER, HeaderValue::from_str(bad).unwrap());
            assert_eq!(device_from_headers(&h), None, "{bad:?}");
        }
    }

    #[test]
    fn names_round_trip_and_unknown_ones_are_refused() {
        for s in [Scope::Full, Scope::Watch] {
            assert_eq!(Scope::parse(s.as_str()), Some(s));
        }
        assert_eq!(Scope::parse("Watch"), None);
        assert_eq!(Scope::parse(""), None);
    }

    #[test]
    fn a_watcher_may_only_read_over_http() {
        for m in ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH"] {
            assert!(Scope::Full.allows_method(m), "{m}");
            assert_eq!(Scope::Watch.allows_method(m), m == "GET" || m == "HEAD", "{m}");
        }
    }

    #[test]
    fn headers_absent_are_full_and_any_watch_among_several_wins() {
        let mut h = HeaderMap::new();
        assert_eq!(Scope::from_headers(&h), Ok(Scope::Full));
        h.append(HEADER, "full".parse().unwrap());
        h.append(HEADER, "watch".parse().unwrap());
        h.append(HEADER, "full".parse().unwrap());
        assert_eq!(Scope::from_headers(&h), Ok(Scope::Watch));
        h.append(HEADER, "admin".parse().unwrap());
        assert!(Scope::from_headers(&h).is_err());
        // The hub's own value replaces every one a client sent.
        Scope::Full.set_header(&mut h);
        assert_eq!(Scope::from_headers(&h), Ok(Scope::Full));
        assert_eq!(h.get_all(HEADER).iter().count(), 1);
    }
}
