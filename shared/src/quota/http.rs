//! One outbound request to a vendor's API: https (the one client, [`crate::http_client`]),
//! or plain http to a loopback test origin. Redirects are not followed (the caller decides what one means), the answer's body is capped, and the whole
//! exchange is bounded by the caller's timeout. Errors say what failed, never with a header
//! or a URL that could carry a credential.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Uri};
use std::time::Duration;

/// The most bytes of an answer's body we read.
pub const BODY_CAP: usize = 2 * 1024 * 1024;

/// A request to send.
pub struct Call<'a> {
    /// GET or POST.
    pub method: Method,
    /// The full URL.
    pub url: &'a str,
    /// Headers; every value is marked sensitive (they carry credentials).
    pub headers: Vec<(header::HeaderName, String)>,
    /// A JSON body for POST.
    pub body: Option<&'static str>,
}

/// A vendor's answer.
#[derive(Debug)]
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// `Location`, for redirects.
    pub location: Option<String>,
    /// The body (at most [`BODY_CAP`] bytes).
    pub body: Bytes,
}

/// Why no answer came back. None of these carries a credential.
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The URL is not one we send to.
    #[error("bad URL")]
    Url,
    /// No answer within the timeout.
    #[error("timed out")]
    Timeout,
    /// TCP or TLS failed.
    #[error("cannot connect")]
    Connect,
    /// HTTP failed (a malformed answer, a closed connection).
    #[error("HTTP failed")]
    Http,
    /// The body was larger than [`BODY_CAP`].
    #[error("answer too large")]
    TooLarge,
}

/// Sends `call` and reads its answer, all within `timeout`.
pub async fn send(call: Call<'_>, timeout: Duration) -> Result<Answer, Failure> {
    match tokio::time::timeout(timeout, exchange(call)).await {
        Ok(r) => r,
        Err(_) => Err(Failure::Timeout),
    }
}

async fn exchange(call: Call<'_>) -> Result<Answer, Failure> {
    let uri: Uri = call.url.parse().map_err(|_| Failure::Url)?;
    let host = uri.host().ok_or(Failure::Url)?;
    let bare = host.trim_start_matches('[').trim_end_matches(']').to_owned();
    let https = match uri.scheme_str() {
        Some("https") => true,
        Some("http") if is_loopback(&bare) => false,
        _ => return Err(Failure::Url),
    };
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let body = Full::new(Bytes::from_static(call.body.unwrap_or("").as_bytes()));
    let mut req = hyper::Request::new(body);
    *req.method_mut() = call.method;
    *req.uri_mut() = uri.path_and_query().map_or("/", |p| p.as_str()).parse().map_err(|_| Failure::Url)?;
    let h = req.headers_mut();
    let authority = uri.authority().map_or(host, |a| a.as_str());
    h.insert(header::HOST, HeaderValue::from_str(authority).map_err(|_| Failure::Url)?);
    h.insert(header::USER_AGENT, HeaderValue::from_static(concat!("zcode-acp/", env!("CARGO_PKG_VERSION"))));
    if call.body.is_some() {
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    }
    for (name, value) in call.headers {
        // A credential with a newline or a control character is refused, not sent.
        let mut v = HeaderValue::from_str(&value).map_err(|_| Failure::Url)?;
        v.set_sensitive(true);
        h.insert(name, v);
    }
    let reply = crate::http_client::one(&bare, port, https, req, BODY_CAP).await.map_err(|e| match e {
        crate::http_client::Failure::ServerName => Failure::Url,
        crate::http_client::Failure::Connect(_) => Failure::Connect,
        crate::http_client::Failure::Http(_) => Failure::Http,
    })?;
    let location = reply.headers.get(header::LOCATION).and_then(|l| l.to_str().ok()).map(str::to_owned);
    let body = reply.body.map_err(|e| match e {
        crate::http_client::BodyError::TooLarge => Failure::TooLarge,
        crate::http_client::BodyError::Failed => Failure::Http,
    })?;
    Ok(Answer { status: reply.status.as_u16(), location, body })
}

/// Whether plain http may go to `host`: loopback only (the test origins).
fn is_loopback(host: &str) -> bool {
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}
