//! Sockets from a chosen loopback address (`127.0.0.2`, …), so one test machine can play
//! several clients the hub tells apart by address.

use nix::sys::socket::{AddressFamily, SockFlag, SockType, SockaddrIn, bind, connect, socket};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};

/// A TCP connection from `from` (any port) to 127.0.0.1:`port`.
pub fn connect_from(from: Ipv4Addr, port: u16) -> std::io::Result<TcpStream> {
    let fd = socket(AddressFamily::Inet, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)?;
    bind(std::os::fd::AsRawFd::as_raw_fd(&fd), &SockaddrIn::from(SocketAddrV4::new(from, 0)))?;
    connect(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &SockaddrIn::from(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)),
    )?;
    Ok(TcpStream::from(fd))
}
