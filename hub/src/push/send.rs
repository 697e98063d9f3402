//! RFC 8030 delivery: one `POST` of an encrypted message to a subscription's endpoint, with
//! `TTL`, `Urgency`, `Topic`, `Content-Encoding: aes128gcm` and the VAPID `Authorization`.
//! Push services are https (the one client, `zcode_shared::http_client`); plain http is only
//! ever used for a loopback endpoint ([`super::subs::check_endpoint`]).

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{self, HeaderValue};
use hyper::{Request, StatusCode, Uri};
use zcode_shared::http_client::Failure;

/// What one push carries besides its body.
pub struct Headers<'a> {
    /// `Authorization: vapid t=…, k=…`.
    pub authorization: &'a str,
    /// Seconds the push service may hold the message for an offline device.
    pub ttl: u32,
    /// `very-low` | `low` | `normal` | `high`.
    pub urgency: &'static str,
    /// Replaces an undelivered message of the same topic (≤ 32 base64url characters).
    pub topic: Option<&'a str>,
}

/// Why a push was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The endpoint is not a URL we send to.
    #[error("bad endpoint: {0}")]
    Endpoint(&'static str),
    /// TCP or TLS failed.
    #[error("cannot reach the push service: {0}")]
    Connect(std::io::Error),
    /// HTTP failed.
    #[error("HTTP to the push service failed: {0}")]
    Http(#[from] hyper::Error),
}

/// The push service's answer: its status and the start of its body (for the log).
pub struct Answer {
    /// The status code.
    pub status: StatusCode,
    /// At most 512 bytes of its body, lossily decoded.
    pub text: String,
}

/// POSTs `body` to `endpoint` (the caller bounds the time this takes).
pub async fn post(endpoint: &Uri, h: &Headers<'_>, body: Vec<u8>) -> Result<Answer, SendError> {
    let host = endpoint.host().ok_or(SendError::Endpoint("no host"))?;
    let bare = host.trim_start_matches('[').trim_end_matches(']').to_owned();
    let https = endpoint.scheme_str() == Some("https");
    let port = endpoint.port_u16().unwrap_or(if https { 443 } else { 80 });
    let mut req = Request::new(Full::new(Bytes::from(body)));
    *req.method_mut() = hyper::Method::POST;
    *req.uri_mut() = endpoint
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .parse()
        .map_err(|_| SendError::Endpoint("bad path"))?;
    let hd = req.headers_mut();
    let authority = endpoint.authority().map_or(host, |a| a.as_str());
    hd.insert(header::HOST, HeaderValue::from_str(authority).map_err(|_| SendError::Endpoint("bad host"))?);
    let mut auth = HeaderValue::from_str(h.authorization).map_err(|_| SendError::Endpoint("bad token"))?;
    auth.set_sensitive(true);
    hd.insert(header::AUTHORIZATION, auth);
    hd.insert("ttl", HeaderValue::from(h.ttl));
    hd.insert("urgency", HeaderValue::from_static(h.urgency));
    if let Some(t) = h.topic.and_then(|t| HeaderValue::from_str(t).ok()) {
        hd.insert("topic", t);
    }
    hd.insert(header::CONTENT_ENCODING, HeaderValue::from_static("aes128gcm"));
    hd.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));

    let reply = zcode_shared::http_client::one(&bare, port, https, req, 512).await.map_err(|e| match e {
        Failure::ServerName => SendError::Endpoint("the host is not a valid TLS server name"),
        Failure::Connect(e) => SendError::Connect(e),
        Failure::Http(e) => SendError::Http(e),
    })?;
    let text = reply.body.map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();
    Ok(Answer { status: reply.status, text })
}
