//! One outbound request to a vendor's API: https (rustls, ring, the Mozilla roots from
//! `webpki-roots`, HTTP/1.1), or plain http to a loopback test origin. Redirects are not
//! followed (the caller decides what one means), the answer's body is capped, and the whole
//! exchange is bounded by the caller's timeout. Errors say what failed, never with a header
//! or a URL that could carry a credential.

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Uri};
use hyper_util::rt::TokioIo;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::rustls;

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
    let tcp = TcpStream::connect((bare.as_str(), port)).await.map_err(|_| Failure::Connect)?;
    let _ = tcp.set_nodelay(true);
    if !https {
        return talk(tcp, req).await;
    }
    let name = rustls::pki_types::ServerName::try_from(bare).map_err(|_| Failure::Url)?;
    let tls =
        tokio_rustls::TlsConnector::from(tls()).connect(name, tcp).await.map_err(|_| Failure::Connect)?;
    talk(tls, req).await
}

/// Whether plain http may go to `host`: loopback only (the test origins).
fn is_loopback(host: &str) -> bool {
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// One request and its answer over `io`, the connection driven in this task.
async fn talk<T>(io: T, req: hyper::Request<Full<Bytes>>) -> Result<Answer, Failure>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(io)).await.map_err(|_| Failure::Http)?;
    let exchange = async move {
        let resp = sender.send_request(req).await.map_err(|_| Failure::Http)?;
        let status = resp.status().as_u16();
        let location = resp.headers().get(header::LOCATION).and_then(|l| l.to_str().ok()).map(str::to_owned);
        let body = match Limited::new(resp.into_body(), BODY_CAP).collect().await {
            Ok(c) => c.to_bytes(),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => return Err(Failure::TooLarge),
            Err(_) => return Err(Failure::Http),
        };
        Ok(Answer { status, location, body })
    };
    tokio::pin!(exchange);
    tokio::select! {
        biased;
        r = &mut exchange => r,
        // The connection ended first: the answer (or the failure) is already in the channel.
        _ = conn => exchange.await,
    }
}
