//! Connections from the hub to a bridge's loopback server (127.0.0.1 only): the TCP probe,
//! the WebSocket dial, and one-shot HTTP requests. Every request carries the machine's token
//! (the bridge refuses anything else); the handshakes are done here (the requests' with hyper,
//! the WebSocket dial's by hand: one write, then the answer's head read), so no library ever
//! sees (or logs) the `Authorization` header. After the WebSocket handshake the
//! relay owns the bare socket. [`connect`], the one way in, checks that the port is held by
//! this user before any byte is written (`zcode_shared::peer`): a dead bridge's port taken
//! by another user gets no token and counts as unreachable.

use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Request, Response, StatusCode};
use std::net::Ipv4Addr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_tungstenite::tungstenite::handshake::{client::generate_key, derive_accept_key};
use zcode_shared::peer::PeerError;
use zcode_shared::scope::Scope;

/// How long a TCP connect to a bridge may take (also the probe's timeout).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a bridge may take to accept a WebSocket.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a bridge could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    /// Nothing listens there (or the connect failed).
    #[error("cannot connect to the bridge: {0}")]
    Connect(std::io::Error),
    /// What listens there is not a process of this user (or that cannot be told).
    #[error("not dialling the bridge: {0}")]
    Unverified(#[from] PeerError),
    /// It did not answer in time.
    #[error("the bridge did not answer in time")]
    Timeout,
    /// HTTP with it failed.
    #[error("HTTP to the bridge failed: {0}")]
    Http(#[from] hyper::Error),
    /// The WebSocket handshake's write or read failed.
    #[error("the WebSocket handshake with the bridge failed: {0}")]
    Handshake(std::io::Error),
    /// It answered the WebSocket upgrade with this status.
    #[error("the bridge refused the WebSocket with {0}")]
    Refused(StatusCode),
    /// Its 101 answer did not prove it understood the key.
    #[error("the bridge's WebSocket handshake was invalid")]
    BadHandshake,
}

/// The receive buffer asked of the kernel for a relayed WebSocket's bridge leg (it doubles
/// it), set before the connect so the window the hub offers is sized to it from the start.
/// The relay reads that leg only as fast as the client drains, and the kernel reopens a
/// closed receive window only once a good part of its buffer is free (receiver-side silly
/// window avoidance): with the loopback's autotuned buffer (past 1 MiB after a replay's first
/// burst) the hub held ~0.5 MB of the bridge's output unread, and a phone reading at 50 KiB/s
/// let the bridge write nothing for 6–9 s at a time while it read steadily (past the
/// bridge's stall rule for a slower phone). 128 KiB reopens the window every ~64 KiB drained.
const BRIDGE_RECEIVE_BUFFER: u32 = 64 * 1024;

/// The MSS the hub announces on that leg (loopback's is ~64 KiB). A sender does not use a
/// window smaller than one segment until its zero-window probe timer fires, and that timer
/// backs off to seconds; with 16 KiB segments every window the hub reopens is usable at once.
const BRIDGE_SEGMENT: u32 = 16 * 1024;

/// A TCP connection to the bridge on `port`, within [`CONNECT_TIMEOUT`], once its other end
/// is known to belong to this user.
pub async fn connect(port: u16) -> Result<TcpStream, DialError> {
    let dial = async { TcpSocket::new_v4()?.connect((Ipv4Addr::LOCALHOST, port).into()).await };
    let s = match tokio::time::timeout(CONNECT_TIMEOUT, dial).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(DialError::Connect(e)),
        Err(_) => return Err(DialError::Timeout),
    };
    if let Err(e) = verify(&s) {
        e.warn_once("not dialling a registered bridge");
        return Err(e.into());
    }
    let _ = s.set_nodelay(true);
    Ok(s)
}

/// A relay's leg to the bridge on `port`, [`BRIDGE_RECEIVE_BUFFER`] and [`BRIDGE_SEGMENT`]
/// set before the connect, with `request` written once its other end is known to be this
/// user's. A loopback connect has done its handshake by the time `connect` returns, so the
/// request goes out at once; tokio's wait for the connection only when it has not (a bridge
/// whose listen queue is full).
async fn relay_leg(port: u16, request: &[u8]) -> Result<TcpStream, DialError> {
    use nix::sys::socket::{self as ns, sockopt};
    let io = |e: nix::errno::Errno| DialError::Connect(e.into());
    let flags = ns::SockFlag::SOCK_NONBLOCK | ns::SockFlag::SOCK_CLOEXEC;
    let fd = ns::socket(ns::AddressFamily::Inet, ns::SockType::Stream, flags, None).map_err(io)?;
    // Best effort: a kernel that refuses either still relays, with the old pauses.
    if let Err(e) = ns::setsockopt(&fd, sockopt::RcvBuf, &(BRIDGE_RECEIVE_BUFFER as usize)) {
        tracing::debug!(port, "the bridge leg's receive buffer was not set: {e}");
    }
    if let Err(e) = ns::setsockopt(&fd, sockopt::TcpMaxSeg, &BRIDGE_SEGMENT) {
        tracing::debug!(port, "the bridge leg's MSS was not set: {e}");
    }
    let _ = ns::setsockopt(&fd, sockopt::TcpNoDelay, &true);
    let to = ns::SockaddrIn::from(std::net::SocketAddrV4::new(Ipv4Addr::LOCALHOST, port));
    match ns::connect(std::os::fd::AsRawFd::as_raw_fd(&fd), &to) {
        Ok(()) | Err(nix::errno::Errno::EINPROGRESS) => {}
        Err(e) => return Err(io(e)),
    }
    let std = std::net::TcpStream::from(fd);
    let refused = |e: PeerError| {
        e.warn_once("not dialling a registered bridge");
        DialError::from(e)
    };
    let (mut s, sent) = if let Ok(peer) = std.peer_addr() {
        zcode_shared::peer::verify_addrs(std.local_addr(), Ok(peer)).map_err(refused)?;
        // Straight out before tokio sees the socket (a fresh connection's buffer takes it all).
        let sent = match std::io::Write::write(&mut &std, request) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
            Err(e) => return Err(DialError::Handshake(e)),
        };
        (TcpStream::from_std(std).map_err(DialError::Connect)?, sent)
    } else {
        let s = TcpStream::from_std(std).map_err(DialError::Connect)?;
        s.writable().await.map_err(DialError::Connect)?;
        if let Some(e) = s.take_error().map_err(DialError::Connect)? {
            return Err(DialError::Connect(e));
        }
        verify(&s).map_err(refused)?;
        (s, 0)
    };
    s.write_all(&request[sent..]).await.map_err(DialError::Handshake)?;
    Ok(s)
}

/// Whether the other end of `s` belongs to this user (`zcode_shared::peer::verify`: one
/// kernel query for that socket, cheap enough for the async task).
pub fn verify(s: &TcpStream) -> Result<(), PeerError> {
    zcode_shared::peer::verify_addrs(s.local_addr(), s.peer_addr())
}

/// Whether a TCP connect to `port` succeeds within [`CONNECT_TIMEOUT`] and reaches a process
/// of this user.
pub async fn probe(port: u16) -> bool {
    connect(port).await.is_ok()
}

/// Sets the headers every request to a bridge carries: `Host` and the token.
pub fn authorize(headers: &mut HeaderMap, port: u16, token: &str) {
    if let Ok(host) = HeaderValue::from_str(&format!("127.0.0.1:{port}")) {
        headers.insert(header::HOST, host);
    }
    if let Ok(mut auth) = HeaderValue::from_str(&format!("Bearer {token}")) {
        auth.set_sensitive(true);
        headers.insert(header::AUTHORIZATION, auth);
    }
}

/// Sets the headers every request to a bridge carries: `Host`, the token, and the scope and
/// device (`zcode_shared::scope::DEVICE_HEADER`: its id, or `machine`) of the client it is
/// made for, replacing any the client sent.
pub fn authorize_scoped(headers: &mut HeaderMap, port: u16, token: &str, scope: Scope, device: &str) {
    authorize(headers, port, token);
    scope.set_header(headers);
    zcode_shared::scope::set_device_header(headers, device);
}

/// Opens the bridge's `/acp` WebSocket for a client of `scope` (the bridge enforces it): the
/// socket, and any bytes the bridge sent right after its 101 (they belong to the relay).
pub async fn dial_ws(
    port: u16,
    token: &str,
    scope: Scope,
    device: &str,
) -> Result<(TcpStream, Vec<u8>), DialError> {
    tokio::time::timeout(HANDSHAKE_TIMEOUT, dial_ws_inner(port, token, scope, device))
        .await
        .map_err(|_| DialError::Timeout)?
}

async fn dial_ws_inner(
    port: u16,
    token: &str,
    scope: Scope,
    device: &str,
) -> Result<(TcpStream, Vec<u8>), DialError> {
    let key = generate_key();
    let mut h = HeaderMap::new();
    authorize_scoped(&mut h, port, token, scope, device);
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(header::SEC_WEBSOCKET_VERSION, HeaderValue::from_static("13"));
    h.insert(header::SEC_WEBSOCKET_KEY, HeaderValue::from_str(&key).map_err(|_| DialError::BadHandshake)?);
    let mut tcp = tokio::time::timeout(
        CONNECT_TIMEOUT,
        relay_leg(port, &crate::http::head_bytes("GET /acp HTTP/1.1", &h)),
    )
    .await
    .map_err(|_| DialError::Timeout)??;
    // The answer's head, read as it comes (one read, nearly always); what follows it is the
    // relay's.
    let mut got = Vec::with_capacity(512);
    loop {
        if got.len() >= MAX_ANSWER_HEAD {
            return Err(DialError::BadHandshake);
        }
        if tcp.read_buf(&mut got).await.map_err(DialError::Handshake)? == 0 {
            let eof = std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
            return Err(DialError::Handshake(eof));
        }
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut answer = httparse::Response::new(&mut headers);
        let Ok(parsed) = answer.parse(&got) else { return Err(DialError::BadHandshake) };
        let httparse::Status::Complete(head_len) = parsed else { continue };
        let status = answer.code.and_then(|c| StatusCode::from_u16(c).ok()).ok_or(DialError::BadHandshake)?;
        if status != StatusCode::SWITCHING_PROTOCOLS {
            return Err(DialError::Refused(status));
        }
        let accept = derive_accept_key(key.as_bytes());
        let proved = answer
            .headers
            .iter()
            .any(|h| h.name.eq_ignore_ascii_case("sec-websocket-accept") && h.value == accept.as_bytes());
        if !proved {
            return Err(DialError::BadHandshake);
        }
        got.drain(..head_len);
        got.shrink_to_fit();
        return Ok((tcp, got));
    }
}

/// The longest head of the bridge's answer to the upgrade read before the dial gives up.
const MAX_ANSWER_HEAD: usize = 16 * 1024;

/// Sends one HTTP request to the bridge on `port` over a fresh connection and returns its
/// answer, whose body streams from the bridge. The caller sets the headers ([`authorize`]).
pub async fn request<B>(port: u16, req: Request<B>) -> Result<Response<Incoming>, DialError>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let tcp = connect(port).await?;
    let (mut sender, conn) = zcode_shared::http_client::handshake(tcp).await?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(port, "relayed HTTP connection ended: {e}");
        }
    });
    Ok(sender.send_request(req).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Accepts one connection and reads its request head: the socket, the head and the
    /// `Sec-WebSocket-Accept` answer to its key.
    async fn accept_head(listener: tokio::net::TcpListener) -> (tokio::net::TcpStream, String, String) {
        let (mut s, _) = listener.accept().await.expect("accept");
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            s.read_exact(&mut byte).await.expect("read the head");
            head.push(byte[0]);
        }
        let head = String::from_utf8(head).expect("UTF-8 head");
        let key = head.lines().find_map(|l| l.strip_prefix("sec-websocket-key: ")).expect("a key");
        let accept = derive_accept_key(key.trim().as_bytes());
        (s, head, accept)
    }

    /// A stand-in bridge: accepts one WebSocket upgrade and returns the request head it got.
    async fn one_upgrade(listener: tokio::net::TcpListener) -> String {
        let (mut s, head, accept) = accept_head(listener).await;
        let answer = format!(
            "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\
             sec-websocket-accept: {accept}\r\n\r\n"
        );
        s.write_all(answer.as_bytes()).await.expect("answer");
        head
    }

    /// A stand-in bridge that reads one request head and answers with `pieces` (each a
    /// separate write, 10 ms apart), `{accept}` replaced by the right accept key; then closes.
    async fn answer_in_pieces(listener: tokio::net::TcpListener, pieces: Vec<&'static [u8]>) {
        let (mut s, _, accept) = accept_head(listener).await;
        for piece in pieces {
            let mut piece = piece.to_vec();
            if let Some(at) = piece.windows(8).position(|w| w == b"{accept}") {
                piece.splice(at..at + 8, accept.bytes());
            }
            s.write_all(&piece).await.expect("answer");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn dial_answered(pieces: Vec<&'static [u8]>) -> Result<(TcpStream, Vec<u8>), DialError> {
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let bridge = tokio::spawn(answer_in_pieces(listener, pieces));
        let dialled = dial_ws(port, "tok", Scope::Full, "machine").await;
        bridge.await.expect("the stand-in");
        dialled
    }

    #[tokio::test]
    async fn the_dials_answer_is_read_whole_and_judged() {
        // A head in pieces, the bridge's first frame right behind it: the frame is the relay's.
        let split = vec![
            &b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n"[..],
            b"connection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n\x81\x02hi",
        ];
        let (_, early) = dial_answered(split).await.expect("dialled");
        assert_eq!(early, b"\x81\x02hi");
        let refused = dial_answered(vec![b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n"]).await;
        assert!(matches!(refused, Err(DialError::Refused(StatusCode::FORBIDDEN))), "{refused:?}");
        let wrong = b"HTTP/1.1 101 Switching Protocols\r\nsec-websocket-accept: x{accept}\r\n\r\n";
        let unproved = dial_answered(vec![wrong]).await;
        assert!(matches!(unproved, Err(DialError::BadHandshake)), "{unproved:?}");
        let cut = dial_answered(vec![b"HTTP/1.1 101 Switching"]).await;
        assert!(matches!(cut, Err(DialError::Handshake(_))), "{cut:?}");
        let garbage = dial_answered(vec![b"SSH-2.0-OpenSSH\r\n\r\n"]).await;
        assert!(matches!(garbage, Err(DialError::BadHandshake)), "{garbage:?}");
    }

    #[tokio::test]
    async fn a_dial_to_a_bridge_whose_listen_queue_is_full_waits_for_its_connection() {
        use nix::sys::socket as ns;
        let fd = ns::socket(ns::AddressFamily::Inet, ns::SockType::Stream, ns::SockFlag::SOCK_CLOEXEC, None)
            .expect("socket");
        ns::bind(std::os::fd::AsRawFd::as_raw_fd(&fd), &ns::SockaddrIn::new(127, 0, 0, 1, 0)).expect("bind");
        // Room for one connection waiting to be accepted, which the filler takes.
        ns::listen(&fd, ns::Backlog::new(0).expect("backlog")).expect("listen");
        let std_listener = std::net::TcpListener::from(fd);
        std_listener.set_nonblocking(true).expect("non-blocking");
        let listener = tokio::net::TcpListener::from_std(std_listener).expect("listener");
        let port = listener.local_addr().expect("addr").port();
        let filler = std::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port)).expect("filler");
        // Its SYN dropped, the dial's connect is still under way when `connect` returns.
        let dial = tokio::spawn(dial_ws(port, "tok", Scope::Full, "machine"));
        tokio::time::sleep(Duration::from_millis(50)).await;
        let (first, _) = listener.accept().await.expect("the filler");
        drop((first, filler));
        let head = one_upgrade(listener).await;
        assert!(head.starts_with("GET /acp HTTP/1.1\r\n"), "{head}");
        dial.await.expect("the dial's task").expect("dialled once the queue had room");
    }

    #[tokio::test]
    async fn the_dial_tells_the_bridge_the_clients_scope() {
        for scope in [Scope::Watch, Scope::Full] {
            let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.expect("bind");
            let port = listener.local_addr().expect("addr").port();
            let bridge = tokio::spawn(one_upgrade(listener));
            dial_ws(port, "tok", scope, "dev1").await.expect("dialled");
            let head = bridge.await.expect("the stand-in");
            let sent: Vec<&str> = head.lines().filter(|l| l.starts_with("x-zcode-scope:")).collect();
            assert_eq!(sent, [format!("x-zcode-scope: {scope}")], "{head}");
            assert!(head.lines().any(|l| l == "x-zcode-device: dev1"), "{head}");
        }
    }

    #[test]
    fn a_relayed_request_carries_the_hubs_scope_and_device_never_the_clients() {
        let mut h = HeaderMap::new();
        h.append("x-zcode-scope", HeaderValue::from_static("full"));
        h.append("x-zcode-scope", HeaderValue::from_static("full"));
        h.append("x-zcode-device", HeaderValue::from_static("someone-else"));
        authorize_scoped(&mut h, 9, "tok", Scope::Watch, "dev1");
        assert_eq!(
            h.get_all("x-zcode-device").iter().collect::<Vec<_>>(),
            [HeaderValue::from_static("dev1")]
        );
        let values: Vec<&HeaderValue> = h.get_all("x-zcode-scope").iter().collect();
        assert_eq!(values, [HeaderValue::from_static("watch")]);
    }
}
