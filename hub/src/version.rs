//! What the running hub is: its version, the content fingerprint of its binary, when it
//! started, and the machine's persistent `hostId` (`GET /api/version`, in
//! [`crate::routes::version`]). The upgrade check ([`crate::upgrade`]) compares the binary on
//! disk against this.
//!
//! The fingerprint is the SHA-256 of `/proc/self/exe`, which names the running inode even after
//! the file at the binary's path was replaced; it is computed once, on a thread of its own at
//! start (a debug binary is tens of MiB), and awaited by whoever needs it first.

use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::SystemTime;
use tokio::sync::watch;

/// The running hub's identity, fixed at start.
pub struct Build {
    /// The version it reports ([`zcode_shared::version`]).
    pub version: &'static str,
    /// The binary's path as it was at start: where a rebuild lands, and what a restart runs.
    pub exe: Option<PathBuf>,
    /// When the hub started (wall clock), for the mtime signal.
    pub started: SystemTime,
    /// The same instant, epoch ms.
    pub started_at: u64,
    /// The machine's persistent random id (`<data>/host-id`).
    pub host_id: String,
    /// The identity of the running binary's file at start (an unchanged file is not hashed).
    pub exe_key: Option<FileKey>,
    fingerprint: watch::Receiver<Option<String>>,
}

impl Build {
    /// The running process's build; starts fingerprinting its binary in the background.
    pub fn current(data_dir: &Path) -> Build {
        let (tx, rx) = watch::channel(None);
        let spawned = std::thread::Builder::new().name("hub-fingerprint".into()).spawn(move || {
            let fp = fingerprint(Path::new("/proc/self/exe")).unwrap_or_else(|e| {
                tracing::warn!("cannot fingerprint the running binary: {e}");
                "unknown".to_owned()
            });
            let _ = tx.send(Some(fp));
        });
        if let Err(e) = spawned {
            tracing::warn!("cannot fingerprint the running binary: {e}");
        }
        let exe = std::env::current_exe().ok().filter(|p| !p.to_string_lossy().ends_with(" (deleted)"));
        // The file the process runs, not the path: equal keys mean the path still holds it.
        let exe_key = std::fs::metadata("/proc/self/exe").ok().map(|m| file_key(&m));
        Build {
            exe_key,
            version: zcode_shared::version(),
            exe,
            started: SystemTime::now(),
            started_at: zcode_shared::time::now_ms(),
            host_id: host_id(data_dir),
            fingerprint: rx,
        }
    }

    /// The running binary's fingerprint (`sha256:<hex>`), once computed.
    pub async fn fingerprint(&self) -> String {
        let mut rx = self.fingerprint.clone();
        match rx.wait_for(Option::is_some).await {
            Ok(v) => v.clone().unwrap_or_default(),
            Err(_) => "unknown".to_owned(),
        }
    }
}

/// What identifies a file's content without reading it: device, inode, size, mtime.
pub type FileKey = (u64, u64, u64, Option<SystemTime>);

/// `meta`'s [`FileKey`].
pub fn file_key(meta: &std::fs::Metadata) -> FileKey {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino(), meta.len(), meta.modified().ok())
}

/// `sha256:<hex>` of a file's content.
pub fn fingerprint(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    let digest = hasher.finalize();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("sha256:{hex}"))
}

/// The machine's id: `<data>/host-id` (32 hex digits, 0600), made on first use. A home that
/// cannot hold it gets a per-process id (logged): a client then sees "another machine" after a
/// restart, which is the safe mistake.
fn host_id(data_dir: &Path) -> String {
    static FALLBACK: OnceLock<String> = OnceLock::new();
    let path = data_dir.join("host-id");
    let valid = |s: &str| s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit());
    if let Ok(s) = std::fs::read_to_string(&path) {
        if valid(s.trim()) {
            return s.trim().to_owned();
        }
    }
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        bytes = zcode_shared::time::now_ms().to_le_bytes().repeat(2).try_into().unwrap_or([7; 16]);
    }
    let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let written = zcode_shared::paths::Paths::ensure_private_dir(data_dir)
        .and_then(|()| zcode_shared::config::write_private_atomic(&path, format!("{id}\n").as_bytes()));
    match written {
        Ok(()) => id,
        Err(e) => {
            tracing::warn!(path = %path.display(), "cannot keep the host id: {e}");
            FALLBACK.get_or_init(|| id).clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_id_is_made_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let a = host_id(dir.path());
        assert_eq!(a.len(), 32);
        assert_eq!(host_id(dir.path()), a, "read back, not made again");
        std::fs::write(dir.path().join("host-id"), "garbage").unwrap();
        assert_ne!(host_id(dir.path()), a, "a broken file is replaced");
    }

    #[test]
    fn a_fingerprint_is_the_content_hash() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, b"one").unwrap();
        std::fs::write(&b, b"one").unwrap();
        assert_eq!(fingerprint(&a).unwrap(), fingerprint(&b).unwrap());
        std::fs::write(&b, b"two").unwrap();
        assert_ne!(fingerprint(&a).unwrap(), fingerprint(&b).unwrap());
        assert!(fingerprint(&a).unwrap().starts_with("sha256:"));
    }
}
