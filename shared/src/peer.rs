//! Who holds the other end of a local TCP connection: the uid owning the peer's socket, read
//! from `/proc/net/tcp` and `/proc/net/tcp6` (Linux). The hub and the bridges send the token
//! (and act on answers) only after [`verify`] says the peer runs as their own user: another
//! user who binds the hub's port, or a dead bridge's, gets a connection and not one byte.
//! Anything that cannot be established (no `/proc`, no matching row) fails closed.

use std::collections::HashSet;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
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
    nix::unistd::geteuid().as_raw()
}

/// Checks that the socket at `peer`, the other end of our connected socket at `local`, belongs
/// to this process's user.
pub fn verify(local: SocketAddr, peer: SocketAddr) -> Result<(), PeerError> {
    let unknown = |reason: String| PeerError::Unknown { port: peer.port(), reason };
    // A listener's new connection may still be a request socket for a moment: look twice.
    let mut found = owner(local, peer).map_err(|e| unknown(format!("cannot read /proc/net/tcp: {e}")))?;
    if found.is_none() {
        std::thread::yield_now();
        found = owner(local, peer).map_err(|e| unknown(format!("cannot read /proc/net/tcp: {e}")))?;
    }
    match found {
        Some(uid) if uid == own_uid() => Ok(()),
        Some(uid) => Err(PeerError::Foreign { port: peer.port(), uid }),
        None => Err(unknown("no socket on this machine holds the other end".into())),
    }
}

/// The uid owning the socket whose local address is `peer` and whose remote address is
/// `local` (our end), from the kernel's TCP tables; `None` when no such socket is listed.
/// An error when `/proc/net/tcp` cannot be read.
pub fn owner(local: SocketAddr, peer: SocketAddr) -> io::Result<Option<u32>> {
    if let Some(uid) = find("/proc/net/tcp", local, peer)? {
        return Ok(Some(uid));
    }
    // A dual-stack listener's connections are IPv6 sockets with IPv4-mapped addresses.
    match find("/proc/net/tcp6", local, peer) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        r => r,
    }
}

fn find(table: &str, local: SocketAddr, peer: SocketAddr) -> io::Result<Option<u32>> {
    let text = std::fs::read_to_string(table)?;
    // Rows are matched on the ports' text first: the tables hold every socket of the machine.
    let (peer_port, local_port) = (format!(":{:04X}", peer.port()), format!(":{:04X}", local.port()));
    for line in text.lines().skip(1) {
        let mut cols = line.split_whitespace().skip(1);
        let (Some(l), Some(r)) = (cols.next(), cols.next()) else { continue };
        if !l.ends_with(&peer_port) || !r.ends_with(&local_port) {
            continue;
        }
        let Some(row) = parse_row(line) else { continue };
        // A TIME_WAIT leftover of an earlier connection is nobody's (uid 0): not our peer.
        if row.state != TIME_WAIT && same(row.local, peer) && same(row.remote, local) {
            return Ok(Some(row.uid));
        }
    }
    Ok(None)
}

/// The `st` value of a TIME_WAIT socket.
const TIME_WAIT: u8 = 0x06;

/// One socket of `/proc/net/tcp{,6}`: the columns this module reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    /// `local_address`.
    pub local: SocketAddr,
    /// `rem_address`.
    pub remote: SocketAddr,
    /// `st` (TCP state: 0x01 established, 0x0A listen…).
    pub state: u8,
    /// `uid`: the owner of the socket (for an accepted one, its listener's).
    pub uid: u32,
}

/// Parses one data line of `/proc/net/tcp` or `/proc/net/tcp6`; `None` for anything else.
pub fn parse_row(line: &str) -> Option<Row> {
    let mut cols = line.split_whitespace();
    let _slot = cols.next()?;
    let local = parse_addr(cols.next()?)?;
    let remote = parse_addr(cols.next()?)?;
    let state = u8::from_str_radix(cols.next()?, 16).ok()?;
    // tx_queue:rx_queue, tr:tm->when, retrnsmt, then uid.
    let uid = cols.nth(3)?.parse().ok()?;
    Some(Row { local, remote, state, uid })
}

/// `0100007F:1F90` → 127.0.0.1:8080. The kernel prints each 32-bit word of the address as
/// the hex of its in-memory (network-order) bytes read as a native integer, and the port in
/// host order.
fn parse_addr(s: &str) -> Option<SocketAddr> {
    let (ip, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |h: &str| u32::from_str_radix(h, 16).ok().map(u32::to_ne_bytes);
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(ip)?)),
        32 => {
            let mut bytes = [0u8; 16];
            for (i, chunk) in bytes.chunks_exact_mut(4).enumerate() {
                chunk.copy_from_slice(&word(ip.get(i * 8..i * 8 + 8)?)?);
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// The same address and port (an IPv4-mapped address equal to its IPv4 one; the tables carry
/// no IPv6 flow or scope).
fn same(row: SocketAddr, ours: SocketAddr) -> bool {
    let (row, ours) = (unmap(row), unmap(ours));
    row.ip() == ours.ip() && row.port() == ours.port()
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
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

    // Rows as a little-endian kernel prints them (x86_64, aarch64).
    #[cfg(target_endian = "little")]
    #[test]
    fn ipv4_and_ipv6_rows_parse_with_the_kernels_byte_order() {
        let v4 = "   3: 0100007F:1F90 0200007F:D431 01 00000000:00000000 00:00000000 00000000 65534        0 123456 1 0000000000000000 20 4 30 10 -1";
        let row = parse_row(v4).unwrap();
        assert_eq!(row.local, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(row.remote, "127.0.0.2:54321".parse().unwrap());
        assert_eq!((row.state, row.uid), (0x01, 65534));

        let v6 = "   0: 00000000000000000000000001000000:20B9 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 99 1 0000000000000000 100 0 0 10 0";
        let row = parse_row(v6).unwrap();
        assert_eq!(row.local, "[::1]:8377".parse().unwrap());
        assert_eq!(row.remote, "[::]:0".parse().unwrap());
        assert_eq!((row.state, row.uid), (0x0A, 1000));

        // An IPv4-mapped address (a dual-stack socket's IPv4 connection), and fe80::1.
        let mapped = "  1: 0000000000000000FFFF00000100007F:1F90 000080FE000000000000000001000000:0050 01 0:0 0:0 0 0 0 1";
        let row = parse_row(mapped).unwrap();
        assert_eq!(unmap(row.local), "127.0.0.1:8080".parse().unwrap());
        assert_eq!(row.remote, "[fe80::1]:80".parse().unwrap());
    }

    #[test]
    fn headers_and_garbage_are_not_rows() {
        for line in [
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode",
            "",
            "0: 0100007F:1F90",
            "0: 0100007F 0200007F:D431 01 0:0 0:0 0 0",
            "0: 0100007F:1F90 0200007F:D431 01 0:0 0:0 0 -1",
            "0: 0100007F:1F90 0200007F:D431 01 0:0 0:0 0",
            "0: 01007F:1F90 0200007F:D431 01 0:0 0:0 0 0",
            "0: 0100007F:1F9000 0200007F:D431 01 0:0 0:0 0 0",
            "0: 0000000000000000FFFF00000100007Ã:1F90 0200007F:D431 01 0:0 0:0 0 0",
        ] {
            assert_eq!(parse_row(line), None, "{line:?}");
        }
    }

    #[test]
    fn a_connection_to_our_own_listener_is_ours_both_ways() {
        for host in ["127.0.0.1", "::1"] {
            let Ok(listener) = std::net::TcpListener::bind((host, 0)) else { continue };
            let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (local, peer) = (client.local_addr().unwrap(), client.peer_addr().unwrap());
            // Not accepted yet: the row is the listener's queued connection, owned as it is.
            assert_eq!(owner(local, peer).unwrap(), Some(own_uid()), "{host}");
            assert_eq!(verify(local, peer), Ok(()));
            let (server, _) = listener.accept().unwrap();
            assert_eq!(
                owner(server.local_addr().unwrap(), server.peer_addr().unwrap()).unwrap(),
                Some(own_uid())
            );
        }
    }

    #[test]
    fn no_such_connection_fails_closed() {
        let nobody: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let err = verify("127.0.0.1:2".parse().unwrap(), nobody).unwrap_err();
        assert!(matches!(err, PeerError::Unknown { port: 1, .. }), "{err}");
    }
}
