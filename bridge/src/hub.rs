//! Where this machine's hub listens, and whether a connection there reaches a process of this
//! user: what registration ([`crate::register`]) and the quota source ([`crate::quota`]) check
//! before either sends the token.

use std::net::IpAddr;
use zcode_shared::config::Config;

/// Where the hub listens: the configured host (loopback when it listens everywhere) and
/// the configured port, or the port file's when that is 0.
pub(crate) fn hub_addr(cfg: &Config) -> Option<(String, u16)> {
    let r = &cfg.remote;
    let host = match r.hub_host.parse::<IpAddr>() {
        Ok(ip) if !ip.is_unspecified() => ip.to_string(),
        Ok(_) => "127.0.0.1".to_owned(),
        Err(_) => r.hub_host.clone(),
    };
    Some((host, cfg.hub_port_now()?))
}

/// Whether the other end of `tcp` (the hub's port) belongs to this user.
pub(crate) fn verify(tcp: &tokio::net::TcpStream) -> Result<(), zcode_shared::peer::PeerError> {
    zcode_shared::peer::verify_addrs(tcp.local_addr(), tcp.peer_addr())
}
