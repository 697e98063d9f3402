//! RFC 8030 delivery: one `POST` of an encrypted message to a subscription's endpoint, with
//! `TTL`, `Urgency`, `Topic`, `Content-Encoding: aes128gcm` and the VAPID `Authorization`.
//! Push services are https (rustls with the ring provider and the Mozilla root set from
//! `webpki-roots`, HTTP/1.1); plain http is only ever used for a loopback endpoint
//! ([`super::subs::check_endpoint`]).

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{self, HeaderValue};
use hyper::{Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use std::sync::{Arc, OnceLock};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::rustls;

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

/// The TLS client settings, built once: TLS 1.2/1.3, the web's public roots, `http/1.1`.
fn tls() -> Arc<rustls::ClientConfig> {
    static TLS: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    TLS.get_or_init(|| {
        let roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map(|b| b.with_root_certificates(roots).with_no_client_auth())
            .unwrap_or_else(|e| unreachable!("ring supports the default TLS versions: {e}"));
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(cfg)
    })
    .clone()
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

    let tcp = TcpStream::connect((bare.as_str(), port)).await.map_err(SendError::Connect)?;
    let _ = tcp.set_nodelay(true);
    if !https {
        return exchange(tcp, req).await;
    }
    let name = rustls::pki_types::ServerName::try_from(bare)
        .map_err(|_| SendError::Endpoint("the host is not a valid TLS server name"))?;
    let tls = tokio_rustls::TlsConnector::from(tls()).connect(name, tcp).await.map_err(SendError::Connect)?;
    exchange(tls, req).await
}

/// One request and its answer over `io`, driving the connection in this task (nothing is left
/// running when the caller gives up).
async fn exchange<T>(io: T, req: Request<Full<Bytes>>) -> Result<Answer, SendError>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    let talk = async move {
        let resp = sender.send_request(req).await?;
        let status = resp.status();
        let text = match Limited::new(resp.into_body(), 512).collect().await {
            Ok(c) => String::from_utf8_lossy(&c.to_bytes()).into_owned(),
            Err(_) => String::new(),
        };
        Ok::<_, hyper::Error>(Answer { status, text })
    };
    tokio::pin!(talk);
    tokio::select! {
        biased;
        r = &mut talk => Ok(r?),
        // The connection ended first: the answer (or the failure) is already in the channel.
        _ = conn => Ok(talk.await?),
    }
}
