//! HTTP plumbing shared by the routes: the response body type, short `text/plain` answers,
//! CORS, bounded JSON request bodies (1 MiB once the token is known, 8 KiB before), query
//! parameters, and URIs with the token redacted for logs.

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Request, Response, StatusCode, Uri};
use serde_json::Value;
use std::borrow::Cow;
use std::time::Duration;

/// Every response's body: a buffered answer or a bridge's streamed one.
pub type Body = UnsyncBoxBody<Bytes, hyper::Error>;

/// A response of the hub.
pub type Resp = Response<Body>;

/// The largest request body the hub reads (or relays): 1 MiB.
pub const MAX_BODY: usize = 1024 * 1024;

/// How long a client may take to send a body it announced.
const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest body read before the caller is authenticated (a registration carrying its
/// token in the body): 8 KiB, about 40 advertised sessions. Larger ones must present the
/// token in the `Authorization` header, which is checked before a byte of body is read.
pub const MAX_PREAUTH_BODY: usize = 8 * 1024;

/// How long an unauthenticated client may take to send its (small) body.
const PREAUTH_BODY_TIMEOUT: Duration = Duration::from_secs(5);

/// A buffered body.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).map_err(|never| match never {}).boxed_unsync()
}

/// A short `text/plain` answer (the contract's error bodies: `unauthorized`, `not found`, …).
pub fn text(status: StatusCode, body: &'static str) -> Resp {
    let mut r = Response::new(full(body));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

/// A JSON answer.
pub fn json(status: StatusCode, value: &Value) -> Resp {
    let mut r = Response::new(full(value.to_string()));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// An empty answer.
pub fn empty(status: StatusCode) -> Resp {
    let mut r = Response::new(full(Bytes::new()));
    *r.status_mut() = status;
    r
}

/// An HTTP/1.1 head written by hand, for the few places that talk HTTP without hyper (the
/// bridge dial's request, the relay front door's answers): `first` (the request or status
/// line, without its line end), `headers` (whose values hold no line breaks: a `HeaderValue`
/// refuses them), then the blank line.
pub fn head_bytes(first: &str, headers: &HeaderMap) -> Vec<u8> {
    let mut out = Vec::with_capacity(first.len() + 64 * headers.len() + 4);
    out.extend_from_slice(first.as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// Adds the CORS headers every response carries (the token is the boundary, not the origin).
pub fn cors(headers: &mut HeaderMap) {
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST, PUT, PATCH, DELETE, OPTIONS"),
    );
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static("Authorization, Content-Type"),
    );
    headers.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, HeaderValue::from_static("X-Zcode-First-Line"));
}

/// The declared `Content-Length`, if any and valid.
pub fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers.get(header::CONTENT_LENGTH)?.to_str().ok()?.trim().parse().ok()
}

/// Whether the request announces a body over [`MAX_BODY`] (refused before reading it).
pub fn too_large(headers: &HeaderMap) -> bool {
    too_large_for(headers, MAX_BODY)
}

/// Why a request body was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyError {
    /// Over [`MAX_BODY`] (announced or actual): 413.
    TooLarge,
    /// Over [`MAX_PREAUTH_BODY`] without the token in the header (announced or actual): 413.
    TooLargeUnauthenticated,
    /// Not all there within 10 s: 408.
    TooSlow,
    /// The connection failed mid-body: 400.
    Unreadable,
    /// Not JSON, or nested deeper than serde_json's 128 levels: 400.
    Invalid,
}

impl BodyError {
    /// The answer to send.
    pub fn response(self) -> Resp {
        match self {
            BodyError::TooLarge => text(StatusCode::PAYLOAD_TOO_LARGE, "body too large"),
            BodyError::TooLargeUnauthenticated => text(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body too large: over 8 KiB, send the token in the Authorization header",
            ),
            BodyError::TooSlow => text(StatusCode::REQUEST_TIMEOUT, "body too slow"),
            BodyError::Unreadable => text(StatusCode::BAD_REQUEST, "body could not be read"),
            BodyError::Invalid => text(StatusCode::BAD_REQUEST, "invalid JSON"),
        }
    }
}

/// Reads a JSON body of at most [`MAX_BODY`], refusing one that announces more before
/// reading a byte of it.
pub async fn read_json(req: Request<Incoming>) -> Result<Value, BodyError> {
    read_json_within(req, MAX_BODY, BODY_TIMEOUT, BodyError::TooLarge).await
}

/// Reads the JSON body of a caller not yet authenticated: at most [`MAX_PREAUTH_BODY`] within
/// 5 s, and a body announced larger is refused before a byte of it is read.
pub async fn read_preauth_json(req: Request<Incoming>) -> Result<Value, BodyError> {
    read_json_within(req, MAX_PREAUTH_BODY, PREAUTH_BODY_TIMEOUT, BodyError::TooLargeUnauthenticated).await
}

async fn read_json_within(
    req: Request<Incoming>,
    limit: usize,
    timeout: Duration,
    too_large: BodyError,
) -> Result<Value, BodyError> {
    if too_large_for(req.headers(), MAX_BODY) {
        return Err(BodyError::TooLarge);
    }
    if too_large_for(req.headers(), limit) {
        return Err(too_large);
    }
    let body = Limited::new(req.into_body(), limit);
    let bytes = match tokio::time::timeout(timeout, body.collect()).await {
        Err(_) => return Err(BodyError::TooSlow),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => return Err(too_large),
        Ok(Err(_)) => return Err(BodyError::Unreadable),
        Ok(Ok(c)) => c.to_bytes(),
    };
    serde_json::from_slice(&bytes).map_err(|_| BodyError::Invalid)
}

fn too_large_for(headers: &HeaderMap, limit: usize) -> bool {
    content_length(headers).is_some_and(|n| n > limit as u64)
}

/// The first value of query parameter `name`, percent-decoded (`+` is kept as is: tokens are
/// URL-safe base64, and a `+` that was meant as a space would not be a token anyway).
pub fn query_param<'a>(uri: &'a Uri, name: &str) -> Option<Cow<'a, str>> {
    uri.query()?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == name).then(|| percent_decode(v))
    })
}

/// The query without any token parameter (what a relay forwards to a bridge): every `&`- or
/// `;`-separated parameter [`is_token_pair`] flags is dropped, the others keep their spelling.
pub fn query_without_token(uri: &Uri) -> Option<String> {
    let mut out = String::new();
    for (pair, sep) in params(uri.query()?) {
        if pair.is_empty() || is_token_pair(pair) {
            continue;
        }
        out.push_str(pair);
        out.push_str(sep);
    }
    let out = out.trim_end_matches(['&', ';']);
    (!out.is_empty()).then(|| out.to_owned())
}

/// A query's parameters with the separator after each (`&`, `;`, or "" for the last).
fn params(q: &str) -> impl Iterator<Item = (&str, &str)> {
    q.split_inclusive(['&', ';']).map(|p| match p.strip_suffix(['&', ';']) {
        Some(pair) => (pair, &p[pair.len()..]),
        None => (p, ""),
    })
}

/// Whether a query parameter carries a token, however it is spelled: its name, percent-decoded
/// until it no longer changes (`tok%65n`, `tok%2565n`), lower-cased and with everything but
/// letters and digits dropped (`access_token`, `Token`), contains `token`. A name whose decoding
/// holds an `=` (`tok%65n%3Dsecret`) is judged by the part before it.
pub fn is_token_pair(pair: &str) -> bool {
    let raw_name = pair.split_once('=').map_or(pair, |(k, _)| k);
    let name = fully_decoded(raw_name);
    let name = name.split_once('=').map_or(name.as_str(), |(k, _)| k);
    let squashed: String =
        name.chars().filter(char::is_ascii_alphanumeric).map(|c| c.to_ascii_lowercase()).collect();
    squashed.contains("token")
}

/// `s` percent-decoded again and again (at most 8 times) until it stops changing.
fn fully_decoded(s: &str) -> String {
    let mut cur = s.to_owned();
    for _ in 0..8 {
        let next = percent_decode(&cur).into_owned();
        if next == cur {
            break;
        }
        cur = next;
    }
    cur
}

/// The URI as it may be logged: the value of every token parameter ([`is_token_pair`], `&`-
/// or `;`-separated, in the query or a path segment's parameters: `/api/instances;token=…`)
/// replaced by `REDACTED`; a parameter whose very name would show the value (an encoded `=`
/// in it) is replaced whole.
pub fn redacted(uri: &Uri) -> String {
    let mut out = String::new();
    for (i, segment) in uri.path().split('/').enumerate() {
        if i > 0 {
            out.push('/');
        }
        for (j, part) in segment.split(';').enumerate() {
            if j > 0 {
                out.push(';');
            }
            // A path segment's name (`tokens` in `/api/tokens`) is no parameter.
            match part.contains('=') || fully_decoded(part).contains('=') {
                true => push_redacted(&mut out, part),
                false => out.push_str(part),
            }
        }
    }
    let Some(q) = uri.query() else { return out };
    out.push('?');
    for (pair, sep) in params(q) {
        push_redacted(&mut out, pair);
        out.push_str(sep);
    }
    out
}

/// Appends `pair` (`name=value`) to `out`, its value redacted if it carries a token.
fn push_redacted(out: &mut String, pair: &str) {
    match pair.split_once('=') {
        _ if !is_token_pair(pair) => out.push_str(pair),
        Some((k, _)) if !fully_decoded(k).contains('=') => {
            out.push_str(k);
            out.push_str("=REDACTED");
        }
        _ => out.push_str("REDACTED"),
    }
}

fn percent_decode(s: &str) -> Cow<'_, str> {
    if !s.contains('%') {
        return Cow::Borrowed(s);
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    Cow::Owned(String::from_utf8_lossy(&out).into_owned())
}

// Route helpers shared by the route modules (so they never import one another).

/// A `text/plain` answer with a message of our own.
pub fn say(status: StatusCode, msg: impl Into<String>) -> Resp {
    let mut r = Response::new(full(msg.into()));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

/// The 503 of a store that cannot be used (opened or queried), with the reason.
pub fn store_unavailable(reason: impl std::fmt::Display) -> Resp {
    say(StatusCode::SERVICE_UNAVAILABLE, format!("tasks index unavailable: {reason}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_params_are_found_and_decoded() {
        let uri: Uri = "/acp?instance=42&token=a%2Bb%3D&x".parse().unwrap();
        assert_eq!(query_param(&uri, "instance").as_deref(), Some("42"));
        assert_eq!(query_param(&uri, "token").as_deref(), Some("a+b="));
        assert_eq!(query_param(&uri, "x").as_deref(), Some(""));
        assert_eq!(query_param(&uri, "missing"), None);
        assert_eq!(query_without_token(&uri).as_deref(), Some("instance=42&x"));
        let only: Uri = "/s?token=t".parse().unwrap();
        assert_eq!(query_without_token(&only), None);
    }

    #[test]
    fn tokens_are_redacted_from_logged_uris() {
        let uri: Uri = "/api/instances?probe=1&token=s3cret&access_token=x".parse().unwrap();
        let r = redacted(&uri);
        assert!(!r.contains("s3cret") && !r.contains("=x"), "{r}");
        assert_eq!(r, "/api/instances?probe=1&token=REDACTED&access_token=REDACTED");
        assert_eq!(redacted(&"/api/health".parse().unwrap()), "/api/health");
    }

    #[test]
    fn tokens_in_path_parameters_are_redacted_too() {
        for (path, want) in [
            ("/api/instances;token=s3cret", "/api/instances;token=REDACTED"),
            ("/api/instances;token=s3cret?probe=1", "/api/instances;token=REDACTED?probe=1"),
            (
                "/api/instances/7/status;v=1;Access_Token=s3cret",
                "/api/instances/7/status;v=1;Access_Token=REDACTED",
            ),
            ("/api;token=s3cret/instances", "/api;token=REDACTED/instances"),
            ("/api/instances%3Btoken=s3cret", "/api/instances%3Btoken=REDACTED"),
            ("/api/tok%65n%3Ds3cret", "/api/REDACTED"),
            ("/api/instances;x=1", "/api/instances;x=1"),
            ("/api/tokens/list", "/api/tokens/list"),
        ] {
            let r = redacted(&path.parse().unwrap());
            assert_eq!(r, want, "{path}");
        }
    }

    #[test]
    fn every_spelling_of_a_token_parameter_is_redacted() {
        for (query, want) in [
            ("token=S", "token=REDACTED"),
            ("TOKEN=S", "TOKEN=REDACTED"),
            ("tok%65n=S", "tok%65n=REDACTED"),
            ("%74%6F%6B%65%6E=S", "%74%6F%6B%65%6E=REDACTED"),
            ("tok%2565n=S", "tok%2565n=REDACTED"),
            ("instance=1;token=S", "instance=1;token=REDACTED"),
            ("instance=1;tok%65n=S&probe=1", "instance=1;tok%65n=REDACTED&probe=1"),
            ("tok%65n%3DS", "REDACTED"),
            ("x=1&tok%65n%3DS&y=2", "x=1&REDACTED&y=2"),
            ("access_token=S", "access_token=REDACTED"),
            ("id_Token=S", "id_Token=REDACTED"),
            ("to-ken=S", "to-ken=REDACTED"),
            ("token=S&token=S", "token=REDACTED&token=REDACTED"),
            ("token=S=S", "token=REDACTED"),
            ("token", "REDACTED"),
            ("tokenS", "REDACTED"),
            ("instance=7&probe=1", "instance=7&probe=1"),
            ("a=S;;b=2&", "a=S;;b=2&"),
        ] {
            let uri: Uri = format!("/acp?{query}").parse().unwrap();
            let r = redacted(&uri);
            assert_eq!(r, format!("/acp?{want}"), "{query}");
            if want != query {
                assert!(!r.contains('S'), "{query} leaks: {r}");
            }
        }
    }

    #[test]
    fn the_forwarded_query_drops_every_spelling_of_a_token() {
        for (query, want) in [
            ("instance=1&token=S", Some("instance=1")),
            ("tok%65n=S&x=1", Some("x=1")),
            ("x=1;token=S;y=2", Some("x=1;y=2")),
            ("x=1&tok%65n%3DS", Some("x=1")),
            ("access_token=S", None),
            ("a=1&b=2", Some("a=1&b=2")),
        ] {
            let uri: Uri = format!("/s?{query}").parse().unwrap();
            assert_eq!(query_without_token(&uri).as_deref(), want, "{query}");
        }
    }

    #[test]
    fn bad_percent_escapes_are_kept_literally() {
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
        assert_eq!(percent_decode("%41b"), "Ab");
    }
}
