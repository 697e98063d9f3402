//! The one outgoing HTTP client: HTTP/1.1 with hyper over a fresh connection per request,
//! https with rustls (the ring provider, TLS 1.2/1.3, the Mozilla roots from `webpki-roots`,
//! ALPN `http/1.1`). Push delivery and the vendors' quota APIs use [`one`]; the local hops
//! (bridge → hub, hub → bridge), whose peer is checked on the open socket first, use
//! [`exchange`] or, to stream, [`handshake`] (the hub's WebSocket dial of a bridge writes its
//! one request by hand: `hub::upstream`). Timeouts are the callers': each bounds the whole
//! call with its own.

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::client::conn::http1;
use hyper::header::HeaderMap;
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use std::sync::{Arc, OnceLock};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::rustls;

/// Why no answer came back.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// The host is not a name or address TLS can check.
    #[error("the host is not a valid TLS server name")]
    ServerName,
    /// TCP or TLS failed.
    #[error("cannot connect: {0}")]
    Connect(std::io::Error),
    /// HTTP failed (a malformed answer, a closed connection).
    #[error("HTTP failed: {0}")]
    Http(#[from] hyper::Error),
}

/// Why an answer's body was not read whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyError {
    /// It was longer than the cap.
    TooLarge,
    /// The connection failed while it was read.
    Failed,
}

/// An answer: its head, and its body up to the caller's cap.
#[derive(Debug)]
pub struct Reply {
    /// The status code.
    pub status: StatusCode,
    /// The headers.
    pub headers: HeaderMap,
    /// The body, or why it could not be read within the cap.
    pub body: Result<Bytes, BodyError>,
}

/// The TLS client settings, built once: TLS 1.2/1.3, the web's public roots, `http/1.1`.
pub fn tls() -> Arc<rustls::ClientConfig> {
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

/// Sends `req` to `host`:`port` over a new connection (TLS when `https`; `host` bare, without
/// brackets) and reads its answer, at most `cap` bytes of body. Whether plain http may go to
/// that host is the caller's to decide.
pub async fn one<B>(host: &str, port: u16, https: bool, req: Request<B>, cap: usize) -> Result<Reply, Failure>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let tcp = TcpStream::connect((host, port)).await.map_err(Failure::Connect)?;
    let _ = tcp.set_nodelay(true);
    if !https {
        return Ok(exchange(tcp, req, cap).await?);
    }
    let name = rustls::pki_types::ServerName::try_from(host.to_owned()).map_err(|_| Failure::ServerName)?;
    let tls = tokio_rustls::TlsConnector::from(tls()).connect(name, tcp).await.map_err(Failure::Connect)?;
    Ok(exchange(tls, req, cap).await?)
}

/// One request and its answer over `io`, the connection driven in this task (nothing is left
/// running when the caller gives up); at most `cap` bytes of body are read.
pub async fn exchange<T, B>(io: T, req: Request<B>, cap: usize) -> Result<Reply, hyper::Error>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (mut sender, conn) = handshake(io).await?;
    let talk = async move {
        let resp = sender.send_request(req).await?;
        let (head, body) = resp.into_parts();
        let body = match Limited::new(body, cap).collect().await {
            Ok(c) => Ok(c.to_bytes()),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(BodyError::TooLarge),
            Err(_) => Err(BodyError::Failed),
        };
        Ok(Reply { status: head.status, headers: head.headers, body })
    };
    tokio::pin!(talk);
    tokio::select! {
        biased;
        r = &mut talk => r,
        // The connection ended first: the answer (or the failure) is already in the channel.
        _ = conn => talk.await,
    }
}

/// The HTTP/1.1 client handshake over `io`: the sender, and the connection the caller drives
/// (in its task, or spawned).
pub async fn handshake<T, B>(
    io: T,
) -> hyper::Result<(http1::SendRequest<B>, http1::Connection<TokioIo<T>, B>)>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    http1::handshake(TokioIo::new(io)).await
}
