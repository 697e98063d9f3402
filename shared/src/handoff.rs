//! The hand-over of a client's WebSocket from the hub to its bridge: instead of relaying the
//! client's bytes to a second connection it dials, the hub checks the upgrade (the credential,
//! the instance) and passes the client's socket itself to the bridge (`SCM_RIGHTS`), which
//! answers the upgrade and serves the client as one of its own. After that the hub carries
//! none of the connection's bytes.
//!
//! The way between them is a `SOCK_SEQPACKET` socket the bridge listens on in the run
//! directory ([`socket_path`]: 0700, so only this user can reach it; the hub also sends the
//! machine's token, which the bridge checks); the hub keeps one connection to each bridge. One
//! packet is one [`Message`]: a client's socket with what the bridge needs to serve it, or a
//! [`Cut`] closing the handed-over clients of a credential that was revoked or rotated, or all
//! of them (the hub's shutdown and restart), in the order they were sent. A packet is taken
//! whole or not at all: a hand-over the connection cannot take now fails (`WouldBlock`) with
//! the socket still the hub's. A connected socket, not datagrams to a bound one: those queue
//! at most `net.unix.max_dgram_qlen` (10 on many systems) and a burst of opens overflowed it
//! (a burst of 1000 opens, 200 in flight, took 1.51× the direct time so, 1.18× with 512).

use serde::{Deserialize, Serialize};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

/// The largest packet (a hand-over is a few hundred bytes).
pub const MAX_PACKET: usize = 8 * 1024;

/// Where the bridge on loopback `port` takes hand-overs.
pub fn socket_path(run_dir: &Path, port: u16) -> PathBuf {
    run_dir.join(format!("handoff-{port}.sock"))
}

/// Which credential a handed-over client opened its connection with (the hub's
/// `auth::Credential`, as a cut names it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Cred {
    /// The machine's token after this many rotations.
    Machine(u64),
    /// A paired device's own credential (its id).
    Device(String),
}

/// Which handed-over clients a [`Cut`] closes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Which {
    /// Those of this device.
    Device(String),
    /// Those opened with the machine's token before this many rotations.
    MachineBelow(u64),
    /// Every one this hub handed over (it shuts down or restarts; its successor's are not its).
    Hub(u64),
}

impl Which {
    /// Whether a client opened with `cred`, handed over by hub `hub`, is cut.
    pub fn takes(&self, cred: &Cred, hub: u64) -> bool {
        match (self, cred) {
            (Which::Hub(h), _) => *h == hub,
            (Which::Device(d), Cred::Device(c)) => d == c,
            (Which::MachineBelow(n), Cred::Machine(g)) => g < n,
            _ => false,
        }
    }
}

/// Closes handed-over clients: `which`, with a close frame of `code` and `reason`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cut {
    /// Whose.
    pub which: Which,
    /// The close code (1008 revoked, 1001 the hub shuts down, 1012 it restarts).
    pub code: u16,
    /// The close frame's reason.
    pub reason: String,
}

/// A client's socket, handed over (the socket itself travels beside it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Client {
    /// The machine's token: the bridge serves only its hub's hand-overs.
    pub token: String,
    /// What the client may do (`full` or `watch`).
    pub scope: String,
    /// Whose it is for the audit trail (a device id, or `machine`).
    pub device: String,
    /// The credential it presented (what a [`Cut`] names).
    pub cred: Cred,
    /// The hub process that handed it over (a random number of its own).
    pub hub: u64,
    /// The 101 to write to the client before anything else (the hub has read the request;
    /// the answer carries its `Sec-WebSocket-Accept` and subprotocol).
    pub answer: String,
    /// The bridge refuses a client beyond this many handed-over clients of its own, with
    /// `busy` (the hub's 503, as it would have written it).
    pub cap: usize,
    /// That refusal.
    pub busy: String,
    /// The ping period: a client that leaves a ping unanswered this long is dropped.
    pub ping_ms: u64,
}

/// One packet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Message {
    /// A client (its socket in the packet's `SCM_RIGHTS`).
    Client(Box<Client>),
    /// Close handed-over clients.
    Cut(Cut),
}

/// The hub's sending end: a connection to each bridge it handed to, made when first needed.
#[derive(Default)]
pub struct Sender {
    conns: std::sync::Mutex<std::collections::HashMap<PathBuf, OwnedFd>>,
}

impl Sender {
    /// No connections yet.
    pub fn new() -> Sender {
        Sender::default()
    }

    /// Sends `msg` to the bridge at `path`, with `fd` (a client's socket) when given. An error
    /// means the bridge took nothing (the socket is still only ours): no bridge there, or
    /// its connection is full now (`WouldBlock`).
    pub fn send(&self, path: &Path, msg: &Message, fd: Option<BorrowedFd<'_>>) -> io::Result<()> {
        let bytes = serde_json::to_vec(msg).map_err(io::Error::other)?;
        let mut conns = self.conns.lock().unwrap_or_else(|p| p.into_inner());
        // A connection the bridge closed (it restarted on this port) is made again, once.
        for fresh in [false, true] {
            if fresh || !conns.contains_key(path) {
                conns.insert(path.to_owned(), connect(path)?);
            }
            let Some(conn) = conns.get(path) else { break };
            match send_packet(conn, &bytes, fd) {
                Err(e) if !fresh && is_gone(&e) => {
                    conns.remove(path);
                }
                Err(e) => {
                    if is_gone(&e) {
                        conns.remove(path);
                    }
                    return Err(e);
                }
                Ok(()) => return Ok(()),
            }
        }
        Err(io::Error::other("the bridge's hand-over connection keeps closing"))
    }
}

fn is_gone(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error().map(rustix::io::Errno::from_raw_os_error),
        Some(rustix::io::Errno::PIPE | rustix::io::Errno::CONNRESET | rustix::io::Errno::NOTCONN)
    )
}

fn connect(path: &Path) -> io::Result<OwnedFd> {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let flags = SocketFlags::NONBLOCK | SocketFlags::CLOEXEC;
    let conn = rustix::net::socket_with(AddressFamily::UNIX, SocketType::SEQPACKET, flags, None)?;
    rustix::net::connect(&conn, &SocketAddrUnix::new(path)?)?;
    Ok(conn)
}

fn send_packet(conn: &OwnedFd, bytes: &[u8], fd: Option<BorrowedFd<'_>>) -> io::Result<()> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let fds: Vec<BorrowedFd<'_>> = fd.into_iter().collect();
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(io::Error::other("no room for the socket in the packet"));
    }
    let iov = [io::IoSlice::new(bytes)];
    let sent = rustix::net::sendmsg(conn, &iov, &mut control, SendFlags::DONTWAIT | SendFlags::NOSIGNAL)?;
    if sent != bytes.len() {
        return Err(io::Error::other("the hand-over packet went out cut short"));
    }
    Ok(())
}

/// Binds and listens on the bridge's socket at `path` (a file left there by a bridge that
/// died is replaced), non-blocking, 0600.
pub fn bind(path: &Path) -> io::Result<OwnedFd> {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let flags = SocketFlags::NONBLOCK | SocketFlags::CLOEXEC;
    let listener = rustix::net::socket_with(AddressFamily::UNIX, SocketType::SEQPACKET, flags, None)?;
    rustix::net::bind(&listener, &SocketAddrUnix::new(path)?)?;
    // Like every file of the home (the run directory is 0700 already).
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    rustix::net::listen(&listener, 64)?;
    Ok(listener)
}

/// Takes one packet off connection `conn`: its message and the socket that came with it. A
/// packet that does not parse is `InvalidData` (any socket that came with it is closed); the
/// hub's end closed, `UnexpectedEof`.
pub fn recv(conn: impl AsFd) -> io::Result<(Message, Option<OwnedFd>)> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    let mut buf = vec![0u8; MAX_PACKET];
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut iov = [io::IoSliceMut::new(&mut buf)];
    let flags = RecvFlags::DONTWAIT | RecvFlags::CMSG_CLOEXEC | RecvFlags::TRUNC;
    let got = rustix::net::recvmsg(conn, &mut iov, &mut control, flags)?;
    let mut fd = None;
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = m {
            // One socket per packet; any more are closed here.
            for f in fds {
                fd.get_or_insert(f);
            }
        }
    }
    if got.bytes == 0 && fd.is_none() {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the hub closed its connection"));
    }
    if got.bytes > buf.len() {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "a hand-over packet too long"));
    }
    let msg = serde_json::from_slice(&buf[..got.bytes])
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    Ok((msg, fd))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// A hub's connection on `listener` (the bridge takes them with tokio's `accept`).
    fn accept(listener: impl AsFd) -> io::Result<OwnedFd> {
        use rustix::net::SocketFlags;
        Ok(rustix::net::accept_with(listener, SocketFlags::NONBLOCK | SocketFlags::CLOEXEC)?)
    }

    #[test]
    fn a_socket_and_its_message_arrive_together_and_a_cut_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = socket_path(dir.path(), 4242);
        let listener = bind(&path).unwrap();
        let hub = Sender::new();
        let (mut ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let client = Message::Client(Box::new(Client {
            token: "t".into(),
            scope: "watch".into(),
            device: "phone".into(),
            cred: Cred::Device("phone".into()),
            hub: 1,
            answer: "HTTP/1.1 101 Switching Protocols\r\n\r\n".into(),
            cap: 7,
            busy: "HTTP/1.1 503 Service Unavailable\r\n\r\n".into(),
            ping_ms: 30_000,
        }));
        hub.send(&path, &client, Some(theirs.as_fd())).unwrap();
        drop(theirs);
        let cut = Message::Cut(Cut { which: Which::MachineBelow(3), code: 1008, reason: "r".into() });
        hub.send(&path, &cut, None).unwrap();
        let bridge = accept(&listener).unwrap();
        let (got, fd) = recv(&bridge).unwrap();
        assert_eq!(got, client);
        // The socket that arrived is the other end of ours.
        let mut passed = std::os::unix::net::UnixStream::from(fd.expect("a socket came with it"));
        passed.write_all(b"hi").unwrap();
        let mut two = [0u8; 2];
        ours.read_exact(&mut two).unwrap();
        assert_eq!(&two, b"hi");
        let (got, fd) = recv(&bridge).unwrap();
        assert!(got == cut && fd.is_none(), "{got:?}");
        assert_eq!(recv(&bridge).unwrap_err().kind(), io::ErrorKind::WouldBlock);
        // No bridge there: the hand-over fails, the socket still ours.
        let gone = socket_path(dir.path(), 1);
        assert!(hub.send(&gone, &client, Some(ours.as_fd())).is_err());
        // A bridge that restarted on the same port: the hub connects again.
        drop((bridge, listener));
        let listener = bind(&path).unwrap();
        hub.send(&path, &cut, None).unwrap();
        let again = accept(&listener).unwrap();
        let (got, fd) = recv(&again).unwrap();
        assert!(got == cut && fd.is_none(), "{got:?}");
        // The hub's end closed: the bridge's reader ends.
        drop(hub);
        assert_eq!(recv(&again).unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn a_cut_takes_exactly_its_credentials() {
        let d = Cred::Device("a".into());
        assert!(Which::Device("a".into()).takes(&d, 1));
        assert!(!Which::Device("b".into()).takes(&d, 1));
        assert!(!Which::MachineBelow(5).takes(&d, 1));
        assert!(Which::MachineBelow(5).takes(&Cred::Machine(4), 1));
        assert!(!Which::MachineBelow(5).takes(&Cred::Machine(5), 1));
        assert!(Which::Hub(1).takes(&Cred::Machine(9), 1) && Which::Hub(1).takes(&d, 1));
        assert!(!Which::Hub(1).takes(&d, 2), "another hub's (an upgrade's successor's) stay");
    }
}
