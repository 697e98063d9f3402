//! Where everything lives on disk.
//!
//! `ZCODE_ACP_HOME`, when set, holds every path (config, data, token, logs, port files), so
//! tests and several installs never collide. Otherwise the XDG directories (via `directories`).
//! Everything under it is made private where it is made ([`Paths::ensure_private_dir`],
//! [`append_private`], [`make_private_by_path`]), not by a process umask: a bridge's agent must create
//! the user's project files with the user's own.

use crate::env::Env;
use nix::fcntl::{Flock, FlockArg};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The environment variable that roots every path.
pub const HOME_VAR: &str = "ZCODE_ACP_HOME";

/// How long a writer waits for another's [`FileLock`] before giving up.
const LOCK_WAIT: Duration = Duration::from_secs(8);

/// The resolved locations of the machine's zcode-acp files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Paths {
    /// `config.json`.
    pub config_file: PathBuf,
    /// The generated token file (used when neither env nor config set a token).
    pub token_file: PathBuf,
    /// Durable data: the SQLite store, the demo agent's sessions.
    pub data_dir: PathBuf,
    /// Log files.
    pub log_dir: PathBuf,
    /// Port and pid files (the hub's bound port, spawn locks).
    pub run_dir: PathBuf,
}

/// Why no paths could be worked out.
#[derive(Debug, thiserror::Error)]
pub enum PathsError {
    /// Neither `ZCODE_ACP_HOME` nor a home directory is known.
    #[error("cannot find a home directory: set ZCODE_ACP_HOME to a directory zcode-acp may use")]
    NoHome,
    /// `ZCODE_ACP_HOME` is set but not absolute.
    #[error("ZCODE_ACP_HOME must be an absolute path, got {0:?}")]
    RelativeHome(String),
}

impl Paths {
    /// Every path under one root (what `ZCODE_ACP_HOME` selects).
    pub fn under(root: &Path) -> Paths {
        Paths {
            config_file: root.join("config.json"),
            token_file: root.join("token"),
            data_dir: root.join("data"),
            log_dir: root.join("logs"),
            run_dir: root.join("run"),
        }
    }

    /// Resolves the paths from the environment: `ZCODE_ACP_HOME`, else the XDG directories.
    pub fn resolve(env: &dyn Env) -> Result<Paths, PathsError> {
        if let Some(home) = env.get(HOME_VAR).filter(|h| !h.is_empty()) {
            let root = PathBuf::from(&home);
            if !root.is_absolute() {
                return Err(PathsError::RelativeHome(home));
            }
            return Ok(Paths::under(&root));
        }
        let dirs = directories::ProjectDirs::from("", "", "zcode-acp").ok_or(PathsError::NoHome)?;
        let data_dir = dirs.data_dir().to_path_buf();
        let log_dir = dirs.state_dir().map_or_else(|| data_dir.join("logs"), |s| s.join("logs"));
        Ok(Paths {
            config_file: dirs.config_dir().join("config.json"),
            token_file: dirs.config_dir().join("token"),
            run_dir: data_dir.join("run"),
            data_dir,
            log_dir,
        })
    }

    /// The file a hub started with port 0 writes its bound port to.
    pub fn hub_port_file(&self) -> PathBuf {
        self.run_dir.join("hub.port")
    }

    /// The port a hub started with port 0 wrote to [`Paths::hub_port_file`], if it is there
    /// and names a port: the one place that file is parsed.
    pub fn read_hub_port(&self) -> Option<u16> {
        std::fs::read_to_string(self.hub_port_file()).ok()?.trim().parse().ok().filter(|p| *p != 0)
    }

    /// Creates `dir` (and parents) private to this user.
    pub fn ensure_private_dir(dir: &Path) -> io::Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
    }
}

/// Opens `path` to append to (a log file): created 0600, or made 0600 if an older version
/// left it readable by others.
pub fn append_private(path: &Path) -> io::Result<std::fs::File> {
    let f = std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(path)?;
    make_private(&f)?;
    Ok(f)
}

/// Takes the group's and others' permissions off `path` if it exists, by its name: no
/// descriptor of it is opened. For SQLite's files: its locks are POSIX record locks, which a
/// process loses on every descriptor of a file when it closes any one of them, so opening and
/// closing the store's file beside a connection of the same process (the bridge's journal and
/// usage threads each hold one) dropped that connection's write lock mid-transaction, and
/// another process's commit was then overwritten in the WAL.
pub fn make_private_by_path(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = match std::fs::metadata(path) {
        Ok(m) => m.permissions().mode(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if mode & 0o077 != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o700))?;
    }
    Ok(())
}

/// Takes the group's and others' permissions off an open file.
fn make_private(f: &std::fs::File) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = f.metadata()?.permissions().mode();
    if mode & 0o077 != 0 {
        f.set_permissions(std::fs::Permissions::from_mode(mode & 0o700))?;
    }
    Ok(())
}

/// `<path><suffix>` beside `path`.
pub fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!("{name}{suffix}"))
}

/// An exclusive cross-process lock (`flock`) on `<file>.lock`, held for the life of the value:
/// what every writer of a settings file or `config.json`, and the store's creation, take.
pub struct FileLock {
    _flock: Flock<std::fs::File>,
}

/// Why a [`FileLock`] was not taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// The lock file could not be opened (or made).
    #[error("{}: {source}", path.display())]
    Open {
        /// The lock file.
        path: PathBuf,
        /// Why it could not be opened.
        source: io::Error,
    },
    /// Another writer held the lock all along the wait (or `flock` failed).
    #[error("{} is locked by another writer: {errno}", path.display())]
    Busy {
        /// The file whose lock it is.
        path: PathBuf,
        /// What `flock` said last.
        errno: nix::errno::Errno,
    },
}

impl FileLock {
    /// Takes the lock of `path` (waiting up to 8 s for another writer).
    pub fn take(path: &Path) -> Result<FileLock, LockError> {
        let lock_path = sibling(path, ".lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&lock_path)
            .map_err(|source| LockError::Open { path: lock_path, source })?;
        let deadline = Instant::now() + LOCK_WAIT;
        let mut file = file;
        let mut pause = Duration::from_millis(5);
        loop {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(flock) => return Ok(FileLock { _flock: flock }),
                Err((f, nix::errno::Errno::EWOULDBLOCK | nix::errno::Errno::EINTR))
                    if Instant::now() < deadline =>
                {
                    file = f;
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(100));
                }
                Err((_, errno)) => return Err(LockError::Busy { path: path.to_owned(), errno }),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn home_var_roots_every_path() {
        let env = HashMap::from([(HOME_VAR.to_owned(), "/tmp/zh".to_owned())]);
        let p = Paths::resolve(&env).unwrap();
        for path in [&p.config_file, &p.token_file, &p.data_dir, &p.log_dir, &p.run_dir] {
            assert!(path.starts_with("/tmp/zh"), "{path:?}");
        }
        assert!(p.hub_port_file().starts_with("/tmp/zh"));
    }

    #[test]
    fn private_files_are_made_0600_whether_new_or_left_open_by_an_older_version() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let (log, db) = (dir.path().join("a.log"), dir.path().join("db"));
        append_private(&log).unwrap();
        make_private_by_path(&db).unwrap();
        assert!(!db.exists(), "a missing file is not made");
        assert_eq!(mode(&log), 0o600);
        std::fs::write(&db, b"kept").unwrap();
        for p in [&log, &db] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        append_private(&log).unwrap();
        make_private_by_path(&db).unwrap();
        assert_eq!((mode(&log), mode(&db)), (0o600, 0o600));
        assert_eq!(std::fs::read(&db).unwrap(), b"kept", "an existing file is never truncated");
    }

    #[test]
    fn relative_home_is_refused() {
        let env = HashMap::from([(HOME_VAR.to_owned(), "rel/dir".to_owned())]);
        assert!(matches!(Paths::resolve(&env), Err(PathsError::RelativeHome(_))));
    }
}
