//! A TCP proxy between one client and the hub that does to the line what a phone's network
//! does: cut it (open connections dropped, new ones refused), stall it (open connections stay
//! open and carry nothing, ever again; new ones are accepted and never answered while the stall
//! lasts), or answer a tunnel's 502 page (open connections dropped, new ones answered 502).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the line does to a new connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Up,
    Cut,
    Stall,
    Bad502,
}

struct Pair {
    client: TcpStream,
    upstream: TcpStream,
    stalled: AtomicBool,
}

struct Inner {
    target: u16,
    mode: Mutex<Mode>,
    pairs: Mutex<Vec<Arc<Pair>>>,
}

/// A proxy listening on 127.0.0.1 (a port the OS picked) in front of 127.0.0.1:`target`.
pub struct Proxy {
    /// Its port.
    pub port: u16,
    inner: Arc<Inner>,
}

const PAGE: &str = "<!doctype html><html><body><h1>Error 502</h1><p>Bad gateway</p></body></html>";

impl Proxy {
    pub fn start(target: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("addr").port();
        let inner = Arc::new(Inner { target, mode: Mutex::new(Mode::Up), pairs: Mutex::new(Vec::new()) });
        let i = inner.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let mode = *i.mode.lock().expect("mode");
                match mode {
                    Mode::Up => i.forward(conn),
                    // Dropped at once: the client sees its connection reset or closed.
                    Mode::Cut => drop(conn),
                    Mode::Stall => swallow(conn),
                    Mode::Bad502 => {
                        std::thread::spawn(move || answer_502(conn));
                    }
                }
            }
        });
        Proxy { port, inner }
    }

    /// Sets what the line does from now on: a cut or a 502 drops every open connection, a
    /// stall freezes them (for good: they never carry anything again), `Up` lets new ones pass.
    pub fn set(&self, mode: Mode) {
        *self.inner.mode.lock().expect("mode") = mode;
        let mut pairs = self.inner.pairs.lock().expect("pairs");
        match mode {
            Mode::Up => {}
            Mode::Cut | Mode::Bad502 => {
                for p in pairs.drain(..) {
                    let _ = p.client.shutdown(Shutdown::Both);
                    let _ = p.upstream.shutdown(Shutdown::Both);
                }
            }
            Mode::Stall => {
                for p in pairs.iter() {
                    p.stalled.store(true, Ordering::SeqCst);
                }
            }
        }
    }
}

impl Inner {
    fn forward(self: &Arc<Self>, client: TcpStream) {
        let Ok(upstream) = TcpStream::connect(("127.0.0.1", self.target)) else { return };
        let _ = client.set_nodelay(true);
        let _ = upstream.set_nodelay(true);
        let (Ok(c2), Ok(u2)) = (client.try_clone(), upstream.try_clone()) else { return };
        let pair = Arc::new(Pair { client, upstream, stalled: AtomicBool::new(false) });
        self.pairs.lock().expect("pairs").push(pair.clone());
        let (a, b) = (pair.clone(), pair.clone());
        let (i1, i2) = (self.clone(), self.clone());
        std::thread::spawn(move || pump(&i1, &a, c2, &a.upstream));
        std::thread::spawn(move || pump(&i2, &b, u2, &b.client));
    }

    fn forget(&self, pair: &Arc<Pair>) {
        self.pairs.lock().expect("pairs").retain(|p| !Arc::ptr_eq(p, pair));
    }
}

/// Copies `from` to `to` until either end closes; a stalled pair's bytes are swallowed.
fn pump(inner: &Inner, pair: &Arc<Pair>, mut from: TcpStream, mut to: &TcpStream) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if pair.stalled.load(Ordering::SeqCst) {
            continue;
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    // A stalled pair stays open until the client gives up on it (its read ends then).
    let _ = pair.client.shutdown(Shutdown::Both);
    let _ = pair.upstream.shutdown(Shutdown::Both);
    inner.forget(pair);
}

/// Accepts and never answers: reads and drops until the client goes.
fn swallow(mut conn: TcpStream) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while matches!(conn.read(&mut buf), Ok(n) if n > 0) {}
    });
}

/// Reads the request's head and answers a tunnel's 502 page.
fn answer_502(mut conn: TcpStream) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let _ = write!(
        conn,
        "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{PAGE}",
        PAGE.len()
    );
}
