//! Resolving a requested path beneath a session's root, race-free: the root is opened once and
//! every lookup is an `openat2(RESOLVE_BENEATH)` relative to it, so no `..`, absolute symlink
//! or symlink swapped in mid-request can lead outside. The files API and the agent's own
//! `fs/*` and `terminal/*` service (`crate::local`) both confine through [`Root`].

use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat2};
use nix::sys::stat::Mode;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

/// Why a path is not served.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// 400: malformed.
    Bad(String),
    /// 403: outside the root, or the root is not acceptable.
    Forbidden(String),
    /// 404: nothing there.
    NotFound(String),
}

/// A session root, opened.
pub struct Root {
    /// Its canonical path.
    pub path: PathBuf,
    fd: OwnedFd,
}

impl Root {
    /// Opens a session's root; `/` is never accepted.
    pub fn open(cwd: &Path) -> Result<Root, Refusal> {
        let path = std::fs::canonicalize(cwd)
            .map_err(|e| Refusal::NotFound(format!("session root {}: {e}", cwd.display())))?;
        if path == Path::new("/") {
            return Err(Refusal::Forbidden("the filesystem root is never served".into()));
        }
        let fd =
            nix::fcntl::open(&path, OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())
                .map_err(|e| Refusal::NotFound(format!("session root {}: {e}", path.display())))?;
        // The path was checked, the fd is what counts: a directory above the root swapped for
        // a symlink to `/` in between must not make `/` a root.
        let id = |st: nix::sys::stat::FileStat| (st.st_dev, st.st_ino);
        let (opened, slash) = (nix::sys::stat::fstat(&fd).map(id), nix::sys::stat::stat("/").map(id));
        if matches!((opened, slash), (Ok(a), Ok(b)) if a == b) {
            return Err(Refusal::Forbidden("the filesystem root is never served".into()));
        }
        Ok(Root { path, fd })
    }

    /// The path relative to the root that `requested` names: relative paths as they are,
    /// absolute ones only when inside the root. `..`, NUL and escapes are refused.
    pub fn relative(&self, requested: &[u8], cwd: &Path) -> Result<PathBuf, Refusal> {
        if requested.contains(&0) {
            return Err(Refusal::Forbidden("a NUL byte in the path".into()));
        }
        let requested =
            std::str::from_utf8(requested).map_err(|_| Refusal::Bad("`path` is not UTF-8".into()))?;
        let p = Path::new(requested);
        let rel = if p.is_absolute() {
            p.strip_prefix(&self.path)
                .or_else(|_| p.strip_prefix(cwd))
                .map_err(|_| Refusal::Forbidden("the path is outside the session's root".into()))?
                .to_path_buf()
        } else {
            p.to_path_buf()
        };
        let mut clean = PathBuf::new();
        for c in rel.components() {
            match c {
                Component::Normal(n) => clean.push(n),
                Component::CurDir => {}
                Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                    return Err(Refusal::Forbidden("`..` is not allowed in the path".into()));
                }
            }
        }
        Ok(clean)
    }

    /// Opens `rel` beneath the root with `flags`; `mode` is for a file `O_CREAT` makes. The
    /// error is the kernel's: `EXDEV` when the path would lead outside the root.
    pub fn open_raw(&self, rel: &Path, flags: OFlag, mode: Mode) -> nix::Result<OwnedFd> {
        let target = if rel.as_os_str().is_empty() { Path::new(".") } else { rel };
        // openat2 refuses (EINVAL) a mode without O_CREAT.
        let mode = if flags.contains(OFlag::O_CREAT) { mode } else { Mode::empty() };
        // With O_PATH, openat2 refuses (EINVAL) any flag but O_DIRECTORY, O_NOFOLLOW, O_CLOEXEC.
        let tty = if flags.contains(OFlag::O_PATH) { OFlag::empty() } else { OFlag::O_NOCTTY };
        let how = OpenHow::new()
            .flags(flags | OFlag::O_CLOEXEC | tty)
            .mode(mode)
            .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
        openat2(&self.fd, target, how)
    }

    /// Opens `rel` beneath the root with `flags`.
    pub fn open_beneath(&self, rel: &Path, flags: OFlag) -> Result<OwnedFd, Refusal> {
        self.open_raw(rel, flags, Mode::empty()).map_err(|e| match e {
            Errno::EXDEV | Errno::ELOOP => {
                Refusal::Forbidden("the path leads outside the session's root".into())
            }
            Errno::ENOENT | Errno::ENOTDIR => Refusal::NotFound(format!("not found: {}", rel.display())),
            Errno::EACCES | Errno::EPERM => {
                Refusal::Forbidden(format!("permission denied: {}", rel.display()))
            }
            Errno::ENOSYS => Refusal::Forbidden("this kernel has no openat2: file access is disabled".into()),
            other => Refusal::NotFound(format!("{}: {other}", rel.display())),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_are_refused_and_insides_resolve() {
        let base = tempfile::tempdir().unwrap();
        let root_dir = base.path().join("proj");
        std::fs::create_dir_all(root_dir.join("sub")).unwrap();
        std::fs::write(root_dir.join("sub/a.txt"), "a").unwrap();
        std::fs::create_dir_all(base.path().join("proj2")).unwrap();
        std::fs::write(base.path().join("proj2/secret"), "s").unwrap();
        std::os::unix::fs::symlink("/etc", root_dir.join("link")).unwrap();
        std::os::unix::fs::symlink("sub", root_dir.join("inner")).unwrap();
        let root = Root::open(&root_dir).unwrap();
        let rel = |p: &str| root.relative(p.as_bytes(), &root_dir);
        assert_eq!(rel("sub/a.txt").unwrap(), PathBuf::from("sub/a.txt"));
        assert_eq!(rel(&format!("{}/sub/a.txt", root.path.display())).unwrap(), PathBuf::from("sub/a.txt"));
        assert!(matches!(rel("../x"), Err(Refusal::Forbidden(_))));
        assert!(matches!(rel("sub/../../x"), Err(Refusal::Forbidden(_))));
        assert!(matches!(rel("/etc/passwd"), Err(Refusal::Forbidden(_))));
        assert!(matches!(rel("a\0b"), Err(Refusal::Forbidden(_))));
        let sibling = format!("{}/secret", base.path().join("proj2").display());
        assert!(matches!(rel(&sibling), Err(Refusal::Forbidden(_))), "a sibling sharing the prefix");
        assert!(root.open_beneath(Path::new("sub/a.txt"), OFlag::O_RDONLY).is_ok());
        assert!(
            root.open_beneath(Path::new("inner/a.txt"), OFlag::O_RDONLY).is_ok(),
            "symlinks inside are fine"
        );
        assert!(matches!(
            root.open_beneath(Path::new("link/passwd"), OFlag::O_RDONLY),
            Err(Refusal::Forbidden(_))
        ));
        assert!(matches!(root.open_beneath(Path::new("nope"), OFlag::O_RDONLY), Err(Refusal::NotFound(_))));
        assert!(matches!(Root::open(Path::new("/")), Err(Refusal::Forbidden(_))));
    }
}
