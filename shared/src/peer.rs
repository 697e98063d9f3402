//! Who holds the other end of a local TCP connection: the uid owning the peer's socket, asked
//! of the kernel for that one socket by its address pair (`sock_diag`, the netlink query `ss`
//! makes; Linux). The hub and the bridges send the token (and act on answers) only after
//! [`verify`] says the peer runs as their own user: another user who binds the hub's port, or
//! a dead bridge's, gets a connection and not one byte; the bridge closes another user's
//! connection at once. The query costs the same however many sockets the machine holds (a
//! scan of `/proc/net/tcp` grew with them: docs/PERFORMANCE.md). Anything that cannot be
//! established (no answer, no such socket) fails closed.

use std::collections::HashSet;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;

/// Why a peer is not trusted with the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerError {
    /// The peer's socket belongs to another user.
    #[error("port {port} is held by another user (uid {uid})")]
    Foreign {
        /// The peer's port.
        port: u16,
        /// The uid owning the peer's socket.
        uid: u32,
    },
    /// The owner could not be established (fail closed).
    #[error("cannot tell which user holds port {port}: {reason}")]
    Unknown {
        /// The peer's port.
        port: u16,
        /// What went wrong.
        reason: String,
    },
}

impl PeerError {
    /// Logs this refusal as a warning (`{what}: {self}`, e.g. "not registering with the hub:
    /// port 8377 is held by another user (uid 65534)") the first time it is seen: a heartbeat
    /// or a probe repeats it every few seconds.
    pub fn warn_once(&self, what: &str) {
        static SEEN: Mutex<Option<HashSet<String>>> = Mutex::new(None);
        let key = format!("{what}: {self}");
        let first = match SEEN.lock() {
            Ok(mut seen) => {
                let seen = seen.get_or_insert_with(HashSet::new);
                // Bounded: a port scan of refusals must not grow the set for ever.
                if seen.len() >= 1024 {
                    seen.clear();
                }
                seen.insert(key)
            }
            Err(_) => true,
        };
        if first {
            tracing::warn!("{what}: {self}");
        }
    }
}

/// This process's effective uid (what its sockets are owned by).
pub fn own_uid() -> u32 {
    // Asked once: it is checked on every dial and loopback accept.
    static UID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *UID.get_or_init(|| nix::unistd::geteuid().as_raw())
}

/// Checks that the socket at `peer`, the other end of our connected socket at `local`, belongs
/// to this process's user. A few system calls, no blocking I/O: fine on an async task.
pub fn verify(local: SocketAddr, peer: SocketAddr) -> Result<(), PeerError> {
    let unknown = |reason: String| PeerError::Unknown { port: peer.port(), reason };
    match owner(local, peer).map_err(|e| unknown(format!("the kernel did not say: {e}")))? {
        Some(uid) if uid == own_uid() => Ok(()),
        Some(uid) => Err(PeerError::Foreign { port: peer.port(), uid }),
        None => Err(unknown("no socket on this machine holds the other end".into())),
    }
}

/// [`verify`] for a connected socket's two addresses as `local_addr()` and `peer_addr()`
/// give them (an error there fails closed).
pub fn verify_addrs(local: io::Result<SocketAddr>, peer: io::Result<SocketAddr>) -> Result<(), PeerError> {
    let port = peer.as_ref().map_or(0, SocketAddr::port);
    let unknown = |e: io::Error| PeerError::Unknown { port, reason: e.to_string() };
    verify(local.map_err(unknown)?, peer.map_err(unknown)?)
}

/// The uid owning the socket whose local address is `peer` and whose remote address is
/// `local` (our end); `None` when the kernel holds no such socket. A connection a listener
/// has not finished setting up (a request socket, which carries no owner) is its listener's,
/// as an accepted one is. An error when the kernel cannot be asked.
pub fn owner(local: SocketAddr, peer: SocketAddr) -> io::Result<Option<u32>> {
    let (local, peer) = (unmap(local), unmap(peer));
    if local.is_ipv4() != peer.is_ipv4() {
        return Ok(None);
    }
    match diag::lookup(peer, Some(local))? {
        Some(found) if found.state == TIME_WAIT => Ok(None),
        Some(found) if found.state == NEW_SYN_RECV || found.state == SYN_RECV => {
            // The lookup without a remote address finds the listener the kernel would use.
            Ok(diag::lookup(peer, None)?.filter(|l| l.state == LISTEN).map(|l| l.uid))
        }
        Some(found) => Ok(Some(found.uid)),
        None => Ok(None),
    }
}

/// TCP states (`include/net/tcp_states.h`) the lookup may answer with.
const SYN_RECV: u8 = 3;
/// A TIME_WAIT leftover of an earlier connection is nobody's (uid 0): not our peer.
const TIME_WAIT: u8 = 6;
const LISTEN: u8 = 10;
const NEW_SYN_RECV: u8 = 12;

/// What the kernel says of one socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Found {
    state: u8,
    uid: u32,
}

/// The `sock_diag` query for one TCP socket (netlink(7), sock_diag(7)): a request carrying the
/// socket's addresses, answered synchronously with its `inet_diag_msg` or an error. Built and
/// read as bytes, so no `unsafe` is needed.
#[cfg(target_os = "linux")]
mod diag {
    use super::Found;
    use nix::sys::socket::{
        AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, recv, sendto, socket,
    };
    use std::cell::RefCell;
    use std::io;
    use std::net::{IpAddr, SocketAddr};
    use std::os::fd::{AsRawFd, OwnedFd};

    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    const NLMSG_ERROR: u16 = 2;
    const NLM_F_REQUEST: u16 = 1;
    const IPPROTO_TCP: u8 = 6;
    /// `nlmsghdr` (16 bytes) then `inet_diag_req_v2` (56).
    const REQUEST_LEN: usize = 16 + 56;
    /// Where `idiag_state` and `idiag_uid` sit in an answer (`nlmsghdr`, then `inet_diag_msg`).
    const STATE_AT: usize = 16 + 1;
    const UID_AT: usize = 16 + 64;

    thread_local! {
        /// This thread's netlink socket, kept between queries (a `socket` and a `close` per
        /// query were two of an open's system calls), with the last sequence number used.
        static SOCKET: RefCell<Option<(OwnedFd, u32)>> = const { RefCell::new(None) };
    }

    /// The socket whose local address is `at` and whose remote one is `remote`, or (`None`)
    /// the listener that takes connections to `at`.
    pub(super) fn lookup(at: SocketAddr, remote: Option<SocketAddr>) -> io::Result<Option<Found>> {
        SOCKET.with(|kept| {
            let mut kept = kept.borrow_mut();
            let (fd, seq) = match kept.take() {
                Some((fd, seq)) => (fd, seq.wrapping_add(1)),
                None => (
                    socket(
                        AddressFamily::Netlink,
                        SockType::Datagram,
                        SockFlag::SOCK_CLOEXEC,
                        SockProtocol::NetlinkSockDiag,
                    )?,
                    1,
                ),
            };
            // Kept only after a query that went as expected: after anything else the next one
            // starts on a fresh socket, with nothing left queued on it.
            let found = ask(&fd, seq, at, remote)?;
            *kept = Some((fd, seq));
            Ok(found)
        })
    }

    fn ask(fd: &OwnedFd, seq: u32, at: SocketAddr, remote: Option<SocketAddr>) -> io::Result<Option<Found>> {
        sendto(fd.as_raw_fd(), &request(seq, at, remote), &NetlinkAddr::new(0, 0), MsgFlags::empty())?;
        // The kernel answers while handling the send: the answer is already queued.
        let mut answer = [0u8; 512];
        let n = recv(fd.as_raw_fd(), &mut answer, MsgFlags::MSG_DONTWAIT)?;
        let answer = answer.get(..n).unwrap_or_default();
        // Only the answer to this query is believed (never one left over from another).
        let answered = answer.get(8..12).and_then(|b| b.try_into().ok()).map(u32::from_ne_bytes);
        if answered != Some(seq) {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "sock_diag: an answer to another query"));
        }
        parse(answer)
    }

    /// For the tests: sends a query for the listener at `at` on this thread's kept socket
    /// without reading its answer; false when the thread keeps none.
    #[cfg(test)]
    pub(super) fn leave_an_answer_queued(at: SocketAddr) -> bool {
        SOCKET.with(|kept| match kept.borrow().as_ref() {
            Some((fd, seq)) => {
                let query = request(seq.wrapping_add(1000), at, None);
                sendto(fd.as_raw_fd(), &query, &NetlinkAddr::new(0, 0), MsgFlags::empty()).is_ok()
            }
            None => false,
        })
    }

    fn request(seq: u32, at: SocketAddr, remote: Option<SocketAddr>) -> [u8; REQUEST_LEN] {
        let mut r = [0u8; REQUEST_LEN];
        r[0..4].copy_from_slice(&(REQUEST_LEN as u32).to_ne_bytes());
        r[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        r[6..8].copy_from_slice(&NLM_F_REQUEST.to_ne_bytes());
        r[8..12].copy_from_slice(&seq.to_ne_bytes());
        let family = if at.is_ipv4() { nix::libc::AF_INET } else { nix::libc::AF_INET6 };
        r[16] = u8::try_from(family).unwrap_or_default();
        r[17] = IPPROTO_TCP;
        r[20..24].copy_from_slice(&u32::MAX.to_ne_bytes()); // every state
        // inet_diag_sockid: sport, dport (network order), src[16], dst[16], if, cookie[2].
        let id = 24;
        r[id..id + 2].copy_from_slice(&at.port().to_be_bytes());
        r[id + 2..id + 4].copy_from_slice(&remote.map_or(0, |a| a.port()).to_be_bytes());
        put_ip(&mut r[id + 4..id + 20], at.ip());
        if let Some(remote) = remote {
            put_ip(&mut r[id + 20..id + 36], remote.ip());
        }
        // No cookie (INET_DIAG_NOCOOKIE twice): the addresses alone pick the socket.
        r[id + 40..id + 48].fill(0xFF);
        r
    }

    fn put_ip(out: &mut [u8], ip: IpAddr) {
        match ip {
            IpAddr::V4(v4) => out[..4].copy_from_slice(&v4.octets()),
            IpAddr::V6(v6) => out.copy_from_slice(&v6.octets()),
        }
    }

    /// The answer: the socket found, `None` for "no such socket" (ENOENT), an error otherwise.
    pub(super) fn parse(answer: &[u8]) -> io::Result<Option<Found>> {
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, format!("sock_diag: {what}"));
        let u32_at =
            |at: usize| answer.get(at..at + 4).and_then(|b| b.try_into().ok()).map(u32::from_ne_bytes);
        let kind = answer.get(4..6).and_then(|b| b.try_into().ok()).map(u16::from_ne_bytes);
        match kind {
            Some(SOCK_DIAG_BY_FAMILY) => {
                let (Some(&state), Some(uid)) = (answer.get(STATE_AT), u32_at(UID_AT)) else {
                    return Err(bad("a short answer"));
                };
                Ok(Some(Found { state, uid }))
            }
            Some(NLMSG_ERROR) => match u32_at(16).map(|e| (e as i32).unsigned_abs()) {
                Some(e) if e == nix::errno::Errno::ENOENT as u32 => Ok(None),
                Some(e) => Err(io::Error::from_raw_os_error(e as i32)),
                None => Err(bad("a short error")),
            },
            _ => Err(bad("an unexpected answer")),
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod diag {
    use super::Found;
    use std::io;
    use std::net::SocketAddr;

    pub(super) fn lookup(_at: SocketAddr, _remote: Option<SocketAddr>) -> io::Result<Option<Found>> {
        Err(io::Error::new(io::ErrorKind::Unsupported, "only Linux says who owns a socket"))
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is (a dual-stack socket's IPv4
/// connection: the kernel finds it by its IPv4 addresses).
fn unmap(a: SocketAddr) -> SocketAddr {
    match a.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), a.port()),
            None => a,
        },
        IpAddr::V4(_) => a,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_to_our_own_listener_is_ours_both_ways() {
        for host in ["127.0.0.1", "::1"] {
            let Ok(listener) = std::net::TcpListener::bind((host, 0)) else { continue };
            let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (local, peer) = (client.local_addr().unwrap(), client.peer_addr().unwrap());
            // Not accepted yet: the peer is the listener's queued connection, owned as it is.
            assert_eq!(owner(local, peer).unwrap(), Some(own_uid()), "{host}");
            assert_eq!(verify(local, peer), Ok(()));
            let (server, _) = listener.accept().unwrap();
            let (local, peer) = (server.local_addr().unwrap(), server.peer_addr().unwrap());
            assert_eq!(owner(local, peer).unwrap(), Some(own_uid()), "{host}: the client's socket");
            assert_eq!(verify_addrs(server.local_addr(), server.peer_addr()), Ok(()));
        }
    }

    #[test]
    fn a_listener_is_found_by_its_address_alone() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let found = diag::lookup(listener.local_addr().unwrap(), None).unwrap();
        assert_eq!(found, Some(Found { state: LISTEN, uid: own_uid() }));
    }

    #[test]
    fn a_dual_stack_listeners_ipv4_connection_is_found_by_its_ipv4_addresses() {
        let Ok(listener) = std::net::TcpListener::bind("[::]:0") else { return };
        let port = listener.local_addr().unwrap().port();
        let client = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (server, _) = listener.accept().unwrap();
        // The accepted socket is IPv6 with IPv4-mapped addresses.
        assert!(server.local_addr().unwrap().is_ipv6());
        assert_eq!(verify(server.local_addr().unwrap(), server.peer_addr().unwrap()), Ok(()));
        assert_eq!(verify(client.local_addr().unwrap(), client.peer_addr().unwrap()), Ok(()));
    }

    #[test]
    fn no_such_connection_fails_closed() {
        let nobody: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let err = verify("127.0.0.1:2".parse().unwrap(), nobody).unwrap_err();
        assert!(matches!(err, PeerError::Unknown { port: 1, .. }), "{err}");
        // A closed connection: its other end is gone (or only a TIME_WAIT leftover).
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (local, peer) = (client.local_addr().unwrap(), client.peer_addr().unwrap());
        let (server, _) = listener.accept().unwrap();
        drop((server, listener));
        drop(client);
        assert!(matches!(verify(local, peer), Err(PeerError::Unknown { .. })));
        let err = verify_addrs(Err(io::Error::other("gone")), Ok(peer)).unwrap_err();
        assert!(matches!(err, PeerError::Unknown { .. }), "{err}");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_kept_netlink_socket_believes_only_the_answer_to_its_own_query() {
        let ours = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let (ours, other) = (ours.local_addr().unwrap(), other.local_addr().unwrap());
        // Queries in a row share the thread's socket.
        for _ in 0..3 {
            assert_eq!(diag::lookup(ours, None).unwrap().map(|f| f.state), Some(LISTEN));
        }
        // An answer left queued on it (a query whose answer was never read) is not taken for
        // the next query's: that one fails closed, and the one after runs on a fresh socket.
        assert!(diag::leave_an_answer_queued(other), "the thread keeps its socket");
        assert!(diag::lookup(ours, None).is_err());
        assert_eq!(diag::lookup(ours, None).unwrap().map(|f| f.state), Some(LISTEN));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn kernel_answers_parse_and_anything_else_fails_closed() {
        let mut found = vec![0u8; 16 + 72];
        found[4..6].copy_from_slice(&20u16.to_ne_bytes());
        found[16 + 1] = 1;
        found[16 + 64..16 + 68].copy_from_slice(&65534u32.to_ne_bytes());
        assert_eq!(diag::parse(&found).unwrap(), Some(Found { state: 1, uid: 65534 }));
        assert!(diag::parse(&found[..60]).is_err(), "a short answer");
        let mut error = vec![0u8; 36];
        error[4..6].copy_from_slice(&2u16.to_ne_bytes());
        error[16..20].copy_from_slice(&(-2i32).to_ne_bytes());
        assert_eq!(diag::parse(&error).unwrap(), None, "ENOENT: no such socket");
        error[16..20].copy_from_slice(&(-13i32).to_ne_bytes());
        assert!(diag::parse(&error).is_err(), "EACCES");
        assert!(diag::parse(&[]).is_err());
        assert!(diag::parse(&[0u8; 40]).is_err(), "another message type");
    }
}
