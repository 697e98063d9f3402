//! HTTP plumbing shared by the routes: the response body type, short `text/plain` answers,
//! CORS, bounded JSON request bodies, query parameters, and URIs with the token redacted for
//! logs.

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

/// Adds the CORS headers every response carries (the token is the boundary, not the origin).
pub fn cors(headers: &mut HeaderMap) {
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST, PUT, DELETE, OPTIONS"),
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
    content_length(headers).is_some_and(|n| n > MAX_BODY as u64)
}

/// Why a request body was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyError {
    /// Over [`MAX_BODY`] (announced or actual): 413.
    TooLarge,
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
            BodyError::TooSlow => text(StatusCode::REQUEST_TIMEOUT, "body too slow"),
            BodyError::Unreadable => text(StatusCode::BAD_REQUEST, "body could not be read"),
            BodyError::Invalid => text(StatusCode::BAD_REQUEST, "invalid JSON"),
        }
    }
}

/// Reads a JSON body of at most [`MAX_BODY`], refusing one that announces more before
/// reading a byte of it.
pub async fn read_json(req: Request<Incoming>) -> Result<Value, BodyError> {
    if too_large(req.headers()) {
        return Err(BodyError::TooLarge);
    }
    let body = Limited::new(req.into_body(), MAX_BODY);
    let bytes = match tokio::time::timeout(BODY_TIMEOUT, body.collect()).await {
        Err(_) => return Err(BodyError::TooSlow),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => return Err(BodyError::TooLarge),
        Ok(Err(_)) => return Err(BodyError::Unreadable),
        Ok(Ok(c)) => c.to_bytes(),
    };
    serde_json::from_slice(&bytes).map_err(|_| BodyError::Invalid)
}

/// The first value of query parameter `name`, percent-decoded (`+` is kept as is: tokens are
/// URL-safe base64, and a `+` that was meant as a space would not be a token anyway).
pub fn query_param<'a>(uri: &'a Uri, name: &str) -> Option<Cow<'a, str>> {
    uri.query()?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == name).then(|| percent_decode(v))
    })
}

/// The query without the `token` parameter (what a relay forwards to a bridge).
pub fn query_without_token(uri: &Uri) -> Option<String> {
    let q: Vec<&str> = uri.query()?.split('&').filter(|p| !is_token_pair(p) && !p.is_empty()).collect();
    (!q.is_empty()).then(|| q.join("&"))
}

fn is_token_pair(pair: &str) -> bool {
    pair.split_once('=').map_or(pair, |(k, _)| k).to_ascii_lowercase().ends_with("token")
}

/// The URI as it may be logged: every `…token=` value replaced by `REDACTED`.
pub fn redacted(uri: &Uri) -> String {
    let path = uri.path();
    let Some(q) = uri.query() else { return path.to_owned() };
    let q: Vec<Cow<'_, str>> = q
        .split('&')
        .map(|p| match p.split_once('=') {
            Some((k, _)) if is_token_pair(p) => Cow::Owned(format!("{k}=REDACTED")),
            _ => Cow::Borrowed(p),
        })
        .collect();
    format!("{path}?{}", q.join("&"))
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
    fn bad_percent_escapes_are_kept_literally() {
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
        assert_eq!(percent_decode("%41b"), "Ab");
    }
}
