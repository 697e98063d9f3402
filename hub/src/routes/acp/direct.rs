//! The relay's front door without hyper: a connection whose first bytes are a whole
//! `GET /acp` WebSocket upgrade head (how nearly every relay opens) is answered here, the way
//! [`crate::routes::handle`] and [`super::upgrade`] would answer it, but without hyper's
//! connection, request, response and upgrade hand-off (and the task that waits for it): the
//! head is only peeked, and anything else (another route, a head not whole within the first
//! [`PEEK`] bytes, a head with a body, HTTP/1.0, a name or value hyper would refuse) goes to
//! hyper with nothing read.
//!
//! The same checks in the same order: the credential (wrong ones rate-limited), the pool of
//! authenticated connections, then [`super::dial`] (400, 404, 503, 502). A refusal is
//! written with the CORS headers every API answer carries, and the connection closed after it
//! (a client opens a new one for its next try). A 101 is written on the bare socket, the head
//! read off it first, and whatever the client sent after the head is left for the relay.

use crate::Hub;
use crate::auth;
use crate::http::{self, Resp};
use http_body_util::BodyExt;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{StatusCode, Uri};
use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use zcode_shared::slots::Slot;

/// How much of a connection's first bytes is looked at (a browser's upgrade head is ~0.5 KiB;
/// a longer one is hyper's).
pub const PEEK: usize = 4096;

/// How long an open under way at shutdown may take to be answered (hyper's connections get
/// as long: `crate::server`).
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// A `GET /acp` upgrade head: its length and what the routes read of it.
pub struct Head {
    len: usize,
    uri: Uri,
    headers: HeaderMap,
}

/// The upgrade head at the start of `stream`, if that is what has arrived (see the module
/// docs); `None` leaves the connection to hyper, nothing read.
pub async fn peek(stream: &TcpStream) -> Option<Head> {
    let mut buf = vec![0u8; PEEK];
    let n = stream.peek(&mut buf).await.ok()?;
    parse(&buf[..n])
}

fn parse(bytes: &[u8]) -> Option<Head> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    let httparse::Status::Complete(len) = req.parse(bytes).ok()? else { return None };
    let path = req.path?;
    let is_acp = path == "/acp" || path.starts_with("/acp?");
    if req.method != Some("GET") || req.version != Some(1) || !is_acp {
        return None;
    }
    let mut map = HeaderMap::with_capacity(req.headers.len());
    for h in req.headers.iter() {
        let name = HeaderName::from_bytes(h.name.as_bytes()).ok()?;
        // A body (or a framing hyper would judge) is hyper's.
        if name == header::CONTENT_LENGTH || name == header::TRANSFER_ENCODING {
            return None;
        }
        map.append(name, HeaderValue::from_bytes(h.value).ok()?);
    }
    if !map.contains_key(header::UPGRADE) {
        return None;
    }
    Some(Head { len, uri: path.parse().ok()?, headers: map })
}

/// Answers the upgrade `head` peeked at the start of `stream` (accepted from `peer`, in the
/// pre-auth pool as `slot`): a refusal, or the client's socket handed to its bridge, or the
/// 101 and the relay.
pub async fn serve(mut stream: TcpStream, head: Head, peer: SocketAddr, hub: Arc<Hub>, slot: Arc<Slot>) {
    let Head { len, uri, headers } = head;
    // Answered here whatever comes: the head (only peeked so far, all in) is read off now, so
    // that what the client sends after it is its bridge's.
    if let Err(e) = stream.read_exact(&mut vec![0u8; len]).await {
        return tracing::debug!("the upgrade head could not be read again: {e}");
    }
    // In a block of its own: the future borrows the socket, which is moved on below.
    let opened = {
        let opened = async {
            let addr = auth::client_addr(&headers, peer, hub.cfg.remote.client_address_header.as_deref());
            let token = auth::presented(&headers, &uri);
            let who =
                crate::devices::authenticate(&hub, token.as_deref(), addr).await.map_err(|r| r.response())?;
            crate::routes::admit(&slot).map_err(|full| *full)?;
            let way = super::open(&headers, &uri, &hub, &who, std::os::fd::AsFd::as_fd(&stream)).await?;
            Ok::<_, Resp>((who, way))
        };
        tokio::pin!(opened);
        tokio::select! {
            biased;
            r = &mut opened => r,
            () = slot.evicted.cancelled() => return,
            // Like hyper's graceful shutdown: an open on its way is answered (a restart's relays
            // then close with 1012, and the client reconnects to the successor), never dropped.
            () = hub.life.shutdown.cancelled() => match tokio::time::timeout(SHUTDOWN_GRACE, opened).await {
                Ok(r) => r,
                Err(_) => return,
            },
        }
    };
    let status = opened.as_ref().map_or_else(|r| r.status(), |_| StatusCode::SWITCHING_PROTOCOLS);
    if tracing::enabled!(tracing::Level::DEBUG) {
        let uri = http::redacted(&uri);
        tracing::debug!(method = "GET", %uri, status = status.as_u16(), "request");
    }
    let (who, dialed) = match opened {
        Ok((who, super::Way::Dialed(dialed))) => (who, dialed),
        Ok((who, super::Way::Handed)) => {
            // Ours no more (the bridge holds the socket). Revoked while it was handed over: the
            // bridge is told to cut it, after the hand-over it has (one queue, in order).
            drop(stream);
            return crate::devices::recheck(&hub, &who.credential);
        }
        Err(refused) => return refuse(stream, refused).await,
    };
    let Ok(client) = stream.into_std() else { return };
    let answer = super::switching_head(&dialed);
    // A fresh connection's send buffer takes it whole (it is a few hundred bytes, and nothing
    // else was written to it); one that does not is not relayed (its client retries).
    match (&client).write(&answer) {
        Ok(n) if n == answer.len() => {}
        Ok(_) => return tracing::debug!("the client's 101 did not go out whole: not relayed"),
        Err(e) => return tracing::debug!("the client's 101 could not be written: {e}"),
    }
    super::start(&hub, client, Vec::new(), dialed, slot.id, peer, who.credential);
}

/// The 503 a bridge writes for the hub when it serves as many handed-over clients as it may
/// (as [`refuse`] would write the hub's own).
pub fn busy() -> &'static str {
    static BUSY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BUSY.get_or_init(|| {
        const BODY: &str = "too many connections";
        let (parts, _) = http::text(StatusCode::SERVICE_UNAVAILABLE, BODY).into_parts();
        String::from_utf8_lossy(&written(parts, BODY.as_bytes())).into_owned()
    })
}

/// Writes `resp` (with the CORS headers; the head was read off), then closes the connection.
async fn refuse(mut stream: TcpStream, resp: Resp) {
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let _ = stream.write_all(&written(parts, &body)).await;
    let _ = stream.shutdown().await;
}

/// A refusal as written on the wire: its head with the CORS headers, its length and
/// `Connection: close`, then `body`.
fn written(mut parts: hyper::http::response::Parts, body: &[u8]) -> Vec<u8> {
    http::cors(&mut parts.headers);
    parts.headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    parts.headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    let status = parts.status;
    let first = format!("HTTP/1.1 {} {}", status.as_u16(), status.canonical_reason().unwrap_or(""));
    let mut out = http::head_bytes(&first, &parts.headers);
    out.extend_from_slice(body);
    out
}

#[cfg(test)]
mod tests {
    use super::parse;

    const UPGRADE: &str = "upgrade: websocket\r\nconnection: Upgrade\r\n";

    #[test]
    fn only_a_whole_get_acp_upgrade_head_is_taken() {
        let head = format!("GET /acp?instance=a HTTP/1.1\r\nhost: x\r\n{UPGRADE}\r\n");
        let taken = parse(head.as_bytes()).expect("taken");
        assert_eq!(taken.len, head.len());
        assert_eq!(taken.uri.query(), Some("instance=a"));
        assert_eq!(taken.headers.get("upgrade").unwrap(), "websocket");
        // What follows the head is not part of it.
        let mut more = head.clone().into_bytes();
        more.extend_from_slice(&[0x81, 0x80]);
        assert_eq!(parse(&more).expect("taken").len, head.len());
        for hyper_s in [
            format!("GET /acp?instance=a HTTP/1.1\r\nhost: x\r\n{UPGRADE}"),
            format!("GET /acpx HTTP/1.1\r\n{UPGRADE}\r\n"),
            format!("GET /api/instances HTTP/1.1\r\n{UPGRADE}\r\n"),
            format!("POST /acp HTTP/1.1\r\n{UPGRADE}\r\n"),
            format!("GET /acp HTTP/1.0\r\n{UPGRADE}\r\n"),
            "GET /acp HTTP/1.1\r\nhost: x\r\n\r\n".to_owned(),
            format!("GET /acp HTTP/1.1\r\ncontent-length: 3\r\n{UPGRADE}\r\nabc"),
            format!("GET /acp HTTP/1.1\r\ntransfer-encoding: chunked\r\n{UPGRADE}\r\n"),
            format!("GET /acp HTTP/1.1\r\nx-bad: a\x01b\r\n{UPGRADE}\r\n"),
            format!("GET http://x/acp HTTP/1.1\r\n{UPGRADE}\r\n"),
            "garbage\r\n\r\n".to_owned(),
        ] {
            assert!(parse(hyper_s.as_bytes()).is_none(), "{hyper_s:?} is hyper's");
        }
    }
}
