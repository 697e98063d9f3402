//! `scripts/bench-peer`: what one peer check costs (issue 32, point 9), the simple option
//! beside the one in use: a scan of `/proc/net/tcp{,6}` for the peer's row (what
//! `zcode_shared::peer` did until 2026-12-03, kept here as the reference) and the `sock_diag`
//! query for the one socket (`zcode_shared::peer::owner`). Each is timed on a loopback
//! connection of this program, on a quiet machine and with 10 000 more sockets open (5000
//! loopback connections this program holds). Prints a Markdown table of µs per check
//! (median of the runs).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Instant;

const OTHER_CONNECTIONS: usize = 5000;

fn main() {
    let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind");
    let client = TcpStream::connect(listener.local_addr().expect("address")).expect("connect");
    let (server, _) = listener.accept().expect("accept");
    let (local, peer) = (client.local_addr().expect("local"), client.peer_addr().expect("peer"));
    let own = zcode_shared::peer::own_uid();
    let quiet = (per_check(|| scan(local, peer), own), per_check(|| diag(local, peer), own));
    eprintln!("bench-peer: opening {OTHER_CONNECTIONS} loopback connections …");
    let other = TcpListener::bind(("127.0.0.1", 0)).expect("bind");
    let addr = other.local_addr().expect("address");
    let mut held = Vec::with_capacity(2 * OTHER_CONNECTIONS);
    for _ in 0..OTHER_CONNECTIONS {
        held.push(TcpStream::connect(addr).expect("connect"));
        held.push(other.accept().expect("accept").0);
    }
    let rows = std::fs::read_to_string("/proc/net/tcp").map_or(0, |t| t.lines().count() - 1)
        + std::fs::read_to_string("/proc/net/tcp6").map_or(0, |t| t.lines().count().saturating_sub(1));
    let busy = (per_check(|| scan(local, peer), own), per_check(|| diag(local, peer), own));
    drop((held, server));
    println!("| one peer check (µs, median) | quiet machine | {rows} sockets listed | ratio |");
    println!("| --- | ---: | ---: | ---: |");
    for (name, q, b) in
        [("scan of /proc/net/tcp{,6}", quiet.0, busy.0), ("sock_diag query for the socket", quiet.1, busy.1)]
    {
        println!("| {name} | {q:.1} | {b:.1} | {:.2}× |", b / q);
    }
}

/// The median µs of one `check` over about a second (at least 20 runs); panics when the
/// check does not name `own` (a benchmark of a wrong answer is worthless).
fn per_check(check: impl Fn() -> Option<u32>, own: u32) -> f64 {
    let started = Instant::now();
    let mut times = Vec::new();
    while times.len() < 20 || started.elapsed().as_secs_f64() < 1.0 {
        let t = Instant::now();
        assert_eq!(check(), Some(own), "the check did not find this user's socket");
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn diag(local: SocketAddr, peer: SocketAddr) -> Option<u32> {
    zcode_shared::peer::owner(local, peer).expect("sock_diag")
}

/// The reference: the peer's row in `/proc/net/tcp`, then `/proc/net/tcp6`.
fn scan(local: SocketAddr, peer: SocketAddr) -> Option<u32> {
    find("/proc/net/tcp", local, peer).or_else(|| find("/proc/net/tcp6", local, peer))
}

fn find(table: &str, local: SocketAddr, peer: SocketAddr) -> Option<u32> {
    let text = std::fs::read_to_string(table).ok()?;
    let (peer_port, local_port) = (format!(":{:04X}", peer.port()), format!(":{:04X}", local.port()));
    for line in text.lines().skip(1) {
        let mut cols = line.split_whitespace().skip(1);
        let (Some(l), Some(r), Some(st)) = (cols.next(), cols.next(), cols.next()) else { continue };
        if !l.ends_with(&peer_port) || !r.ends_with(&local_port) || st == "06" {
            continue;
        }
        // The address columns of an IPv4 loopback row, as the kernel prints them.
        let ip = |a: SocketAddr| match a.ip() {
            std::net::IpAddr::V4(v4) => format!("{:08X}", u32::from_ne_bytes(v4.octets())),
            std::net::IpAddr::V6(_) => String::new(),
        };
        if l.starts_with(&ip(peer)) && r.starts_with(&ip(local)) {
            return cols.nth(3)?.parse().ok();
        }
    }
    None
}
