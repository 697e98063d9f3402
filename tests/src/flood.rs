//! Another local user's connection flood (issue 32, point 9): silent connections from uid
//! 65534 (`setpriv` and the system's `/usr/bin/python3`, which that user can read) to
//! loopback ports, each reopened as soon as it is closed. Used by `security_peer` and by
//! `scripts/bench-preauth`.

use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The uid the flood runs as.
pub use crate::squat::NOBODY;

/// Holds `argv[1]` silent connections to each port of `argv[2:]` on 127.0.0.1, reopening any
/// that the other end closes (or answers: a silent client reads nothing it wants), and prints
/// `made N` (connections opened so far) about five times a second. A sweep over the sockets
/// is followed by a 1 ms pause.
const FLOOD: &str = r#"
import resource, socket, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
count, ports = int(sys.argv[1]), [int(p) for p in sys.argv[2:]]
slots = [None] * (count * len(ports))
made, last = 0, 0.0
def opened(i):
    s = socket.socket()
    s.setblocking(False)
    try:
        s.connect(("127.0.0.1", ports[i % len(ports)]))
    except BlockingIOError:
        pass
    except OSError:
        s.close()
        return None
    return s
print("started", flush=True)
while True:
    for i, s in enumerate(slots):
        if s is not None:
            try:
                s.recv(512)
            except BlockingIOError:
                continue
            except OSError:
                pass
            s.close()
        slots[i] = opened(i)
        made += 1
    now = time.monotonic()
    if now - last > 0.2:
        print("made", made, flush=True)
        last = now
    time.sleep(0.001)
"#;

/// A running flood; stopped when dropped.
pub struct Flood {
    child: Child,
    made: Arc<AtomicU64>,
    started: Instant,
}

impl Flood {
    /// Starts `per_port` silent connections to each of `ports` as uid 65534; panics when
    /// privileges cannot be dropped. Returns once the process runs as that user.
    pub fn start(per_port: usize, ports: &[u16]) -> Flood {
        let mut args = vec![per_port.to_string()];
        args.extend(ports.iter().map(u16::to_string));
        let (child, lines) = crate::squat::as_nobody(FLOOD, &args, "the flood");
        let made = Arc::new(AtomicU64::new(0));
        let counter = made.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                if let Some(n) = line.strip_prefix("made ").and_then(|n| n.parse().ok()) {
                    counter.store(n, Ordering::Relaxed);
                }
            }
        });
        Flood { child, made, started: Instant::now() }
    }

    /// Connections opened so far.
    pub fn made(&self) -> u64 {
        self.made.load(Ordering::Relaxed)
    }

    /// Waits (up to `within`) until `n` connections were opened; false if they were not.
    pub fn wait_made(&self, n: u64, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while self.made() < n {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    }

    /// Connections opened per second since it started.
    pub fn rate(&self) -> f64 {
        self.made() as f64 / self.started.elapsed().as_secs_f64()
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
