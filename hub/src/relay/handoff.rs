//! Handing sockets to the relay thread, which has a file descriptor table of its own.
//!
//! Why: in a process whose threads share one descriptor table, every `recv` and `send` takes
//! and drops a reference on the socket's file (an atomic pair in `fdget`/`fput`); a thread with
//! a private table skips both. That is about 1 % of a relayed message's whole cost, which is
//! the margin between nginx (one thread) and a relay thread sharing the hub's table
//! (`scripts/bench-relay`). So the relay thread `unshare`s its table, closes the copies it
//! inherited, and receives each relay's two sockets over a Unix socket pair (`SCM_RIGHTS`),
//! the same way one process hands sockets to another. The hub's copies are closed after
//! sending; the relay thread's are the only ones left.
//!
//! Where the kernel refuses `unshare` the relay thread keeps the shared table, closes nothing,
//! and the handoff still works (the received descriptors are new numbers in the same table).
//!
//! The price is a rule: the relay thread touches no descriptor of the hub's, and the hub none
//! of the thread's. Relays' ends are therefore reported back through a second socket pair and
//! their callbacks run on the hub's runtime; the thread logs to stderr (descriptor 2, which
//! both tables keep).

use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};
use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

/// Gives the calling thread a descriptor table of its own, holding only 0–2 and `keep`.
/// Returns whether it did (false: the thread still shares the process's table).
///
/// From then on the thread must not use a descriptor the rest of the process opened (nor may
/// the rest of the process use one the thread opens): the same number means another file, or
/// none, on the other side. That includes waking a tokio task (its runtime's eventfd), so the
/// relay thread reports back over a socket pair of its own (see `Relays::start`).
pub fn private_table(keep: &[RawFd]) -> bool {
    if let Err(e) = nix::sched::unshare(nix::sched::CloneFlags::CLONE_FILES) {
        tracing::debug!("the relay thread shares the hub's descriptor table: {e}");
        return false;
    }
    // The copies inherited from the hub (its listener, its connections of the moment, log
    // files, ...) would keep those open after the hub closes them.
    let inherited: Vec<RawFd> = match std::fs::read_dir("/proc/thread-self/fd") {
        Ok(dir) => {
            dir.flatten().filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok())).collect()
        }
        Err(e) => {
            tracing::warn!("cannot list the relay thread's inherited descriptors: {e}");
            return true;
        }
    };
    for fd in inherited.into_iter().filter(|fd| *fd > 2 && !keep.contains(fd)) {
        // Closes this thread's copy only (the listing's own descriptor is already closed).
        let _ = nix::unistd::close(fd);
    }
    true
}

/// Sends `tag` with `fds` attached. The receiver gets copies; the caller still owns `fds`.
pub fn send(sock: &UnixStream, tag: u8, fds: &[RawFd]) -> io::Result<()> {
    let iov = [IoSlice::new(std::slice::from_ref(&tag))];
    let cmsgs: &[ControlMessage<'_>] = &[ControlMessage::ScmRights(fds)];
    let cmsgs = if fds.is_empty() { &[] } else { cmsgs };
    loop {
        match sendmsg::<()>(sock.as_raw_fd(), &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None) {
            Ok(1) => return Ok(()),
            Ok(_) => return Err(io::ErrorKind::WriteZero.into()),
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// What [`recv`] got.
pub enum Received {
    /// A tag and the descriptors that came with it (now owned here).
    Message(u8, Vec<OwnedFd>),
    /// Nothing more for now (the socket is non-blocking).
    Empty,
    /// The other end is closed.
    Closed,
}

/// Receives one tag and its descriptors from a non-blocking socket.
pub fn recv(sock: RawFd) -> io::Result<Received> {
    let mut tag = [0u8; 1];
    let mut space = nix::cmsg_space!([RawFd; 2]);
    let mut fds = Vec::new();
    {
        let mut iov = [IoSliceMut::new(&mut tag)];
        let flags = MsgFlags::MSG_CMSG_CLOEXEC | MsgFlags::MSG_DONTWAIT;
        let msg = match recvmsg::<()>(sock, &mut iov, Some(&mut space), flags) {
            Ok(m) => m,
            Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => return Ok(Received::Empty),
            Err(e) => return Err(e.into()),
        };
        if msg.bytes == 0 {
            return Ok(Received::Closed);
        }
        // A truncated message (the descriptor limit was hit) counts as one without them.
        if let Ok(cmsgs) = msg.cmsgs() {
            for c in cmsgs {
                if let ControlMessageOwned::ScmRights(raw) = c {
                    fds.extend(raw.into_iter().map(adopt));
                }
            }
        }
    }
    Ok(Received::Message(tag[0], fds))
}

/// Takes ownership of a descriptor the kernel has just installed for us.
#[allow(unsafe_code)]
fn adopt(fd: RawFd) -> OwnedFd {
    use std::os::fd::FromRawFd;
    // SAFETY: `fd` comes from an SCM_RIGHTS message this thread just received: the kernel
    // installed it in our table for this message, nothing else knows its number, and it is
    // adopted exactly once (here), so the `OwnedFd` is its only owner.
    unsafe { OwnedFd::from_raw_fd(fd) }
}
