//! The hub's side of the hand-over ([`zcode_shared::handoff`]): a relayed client whose
//! upgrade the front door answers itself (`routes::acp::direct`) is passed, socket and all, to
//! its bridge, which answers the upgrade and serves it; the hub relays it only when that
//! fails (a bridge too old to take hand-overs, one whose queue is full). And the cuts: a
//! revoked or rotated credential's handed-over clients, and all of them when the hub stops
//! (1001) or restarts (1012), the way the relay closes its own.

use std::io;
use std::os::fd::BorrowedFd;
use std::path::PathBuf;
use std::time::Duration;
use zcode_shared::handoff::{Cut, Message, Sender, Which, socket_path};

/// The hub's hand-over state.
pub struct Handoff {
    /// `None`: hand-overs are off (the test suite's `ZCODE_ACP_TEST_NO_HANDOFF`), and every
    /// client is relayed.
    sender: Option<Sender>,
    run_dir: PathBuf,
    /// The relays' ping period, which the bridges keep for handed-over clients.
    ping: Duration,
    /// This hub process's number in its hand-overs: its shutdown cuts its own, not its
    /// successor's.
    id: u64,
}

impl Handoff {
    /// Hand-overs to the bridges whose sockets are in `run_dir`, pinging every `ping`.
    pub fn new(run_dir: PathBuf, ping: Duration) -> Handoff {
        let off = zcode_shared::env::test_knob(&zcode_shared::env::ProcessEnv, "ZCODE_ACP_TEST_NO_HANDOFF")
            .is_some_and(|v| v == "1");
        let sender = (!off).then(Sender::new);
        let mut id = [0u8; 8];
        let _ = getrandom::fill(&mut id);
        Handoff { sender, run_dir, ping, id: u64::from_le_bytes(id) }
    }

    /// This hub's number in its hand-overs.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The ping period handed-over clients get.
    pub fn ping(&self) -> Duration {
        self.ping
    }

    /// Passes `client` (the socket, its request head read off) with `msg` (a
    /// [`Message::Client`]) to the bridge on loopback `port`. `Err`: the bridge did not take it, and the socket is still only ours.
    pub fn give(&self, port: u16, client: BorrowedFd<'_>, msg: &Message) -> io::Result<()> {
        let Some(sender) = &self.sender else { return Err(io::Error::other("hand-overs are off")) };
        sender.send(&socket_path(&self.run_dir, port), msg, Some(client))
    }

    /// Tells every bridge of this home (every hand-over socket in the run directory, whether
    /// or not its bridge is registered now) to close the handed-over clients `which` names.
    pub fn cut(&self, which: Which, code: u16, reason: &str) {
        let Some(sender) = &self.sender else { return };
        let Ok(entries) = std::fs::read_dir(&self.run_dir) else { return };
        let msg = Message::Cut(Cut { which, code, reason: reason.to_owned() });
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if !(name.starts_with("handoff-") && name.ends_with(".sock")) {
                continue;
            }
            // A full queue is waited out (a cut must not be lost; the bridge reads its queue
            // all the time), up to half a second; a bridge that is gone left its socket:
            // nobody to tell.
            let mut tries = 0;
            loop {
                match sender.send(&entry.path(), &msg, None) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock && tries < 100 => {
                        tries += 1;
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(e) => break tracing::debug!(socket = %name, "cannot tell a bridge to cut: {e}"),
                    Ok(()) => break,
                }
            }
        }
    }
}
