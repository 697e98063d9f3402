//! The one way a settings file is changed: a cross-process lock (`flock` on `<file>.lock`)
//! around read, edit, validate, back up (`<file>.bak-<ISO>`, 5 kept, 0600), temp file + rename.
//! Bridges and the hub may write at once: the lock serializes them, so the last write wins and
//! none is lost; a reader without the lock sees the old file or the new one, never half of one.

use crate::config::write_private_atomic;
use crate::paths::{FileLock, LockError, sibling};
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Backups kept per file.
pub const BACKUPS_KEPT: usize = 5;

/// Why a change was not written: the HTTP status and the message for the person.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// 400 bad input, 404 unknown, 409 conflict, 500 broken file or I/O, 503 busy.
    pub status: u16,
    /// What went wrong, naming the field or the file.
    pub error: String,
}

impl Refusal {
    /// A refusal with `status`.
    pub fn new(status: u16, error: impl Into<String>) -> Refusal {
        Refusal { status, error: error.into() }
    }
    /// 400.
    pub fn bad(error: impl Into<String>) -> Refusal {
        Refusal::new(400, error)
    }
    /// 404.
    pub fn missing(error: impl Into<String>) -> Refusal {
        Refusal::new(404, error)
    }
    /// 500 for an I/O failure on `path`.
    pub fn io(path: &Path, e: &io::Error) -> Refusal {
        Refusal::new(500, format!("{}: {e}", path.display()))
    }
}

/// What an edit decided.
pub enum Edit {
    /// Write this text.
    Write(String),
    /// Remove the file (a deleted subagent).
    Remove,
}

/// Takes the lock of `path` ([`FileLock::take`]): a busy lock is a 503, a lock file that
/// cannot be opened a 500.
pub fn lock(path: &Path) -> Result<FileLock, Refusal> {
    FileLock::take(path).map_err(|e| {
        let status = if matches!(e, LockError::Busy { .. }) { 503 } else { 500 };
        Refusal::new(status, e.to_string())
    })
}

/// Changes `path` under its lock: `edit` gets the current text (`None`: no file) and decides.
/// A backup of the current file is taken before it is replaced or removed.
pub fn update<T>(
    path: &Path,
    edit: impl FnOnce(Option<&str>) -> Result<(Edit, T), Refusal>,
) -> Result<T, Refusal> {
    if let Some(dir) = path.parent() {
        crate::paths::Paths::ensure_private_dir(dir).map_err(|e| Refusal::io(dir, &e))?;
    }
    let _lock = lock(path)?;
    let current = match std::fs::read(path) {
        Ok(b) => Some(
            String::from_utf8(b)
                .map_err(|_| Refusal::new(500, format!("{} is not UTF-8: left untouched", path.display())))?,
        ),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(Refusal::io(path, &e)),
    };
    let (edit, out) = edit(current.as_deref())?;
    if let Some(old) = &current {
        backup(path, old.as_bytes())?;
    }
    match edit {
        Edit::Write(text) => {
            write_private_atomic(path, text.as_bytes()).map_err(|e| Refusal::io(path, &e))?
        }
        Edit::Remove => match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(Refusal::io(path, &e)),
        },
    }
    Ok(out)
}

/// Writes `<path>.bak-<ISO>` (0600) and keeps the newest [`BACKUPS_KEPT`].
fn backup(path: &Path, bytes: &[u8]) -> Result<(), Refusal> {
    let stamp = crate::time::iso8601(crate::time::now_ms());
    let mut target = sibling(path, &format!(".bak-{stamp}"));
    // Two writes within a millisecond: the second backup gets a counter, never overwrites.
    let mut n = 1;
    while target.exists() {
        target = sibling(path, &format!(".bak-{stamp}-{n}"));
        n += 1;
    }
    write_private_atomic(&target, bytes).map_err(|e| Refusal::io(&target, &e))?;
    let _ = std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600));
    let mut all = backups_of(path);
    while all.len() > BACKUPS_KEPT {
        let oldest = all.remove(0);
        let _ = std::fs::remove_file(&oldest);
    }
    Ok(())
}

/// The backups of `path`, oldest first (their ISO stamps sort as time).
pub fn backups_of(path: &Path) -> Vec<PathBuf> {
    let Some(dir) = path.parent() else { return Vec::new() };
    let prefix = format!("{}.bak-", path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default());
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut out: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.path())
        .collect();
    out.sort_by_key(|p| stamp_key(p));
    out
}

/// Sorts `…bak-<ISO>` before `…bak-<ISO>-1` before `…bak-<ISO>-2`.
fn stamp_key(p: &Path) -> (String, u32) {
    let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let stamp = name.rsplit_once(".bak-").map_or("", |(_, s)| s).to_owned();
    match stamp.split_once("Z-") {
        Some((t, n)) => (format!("{t}Z"), n.parse().unwrap_or(0)),
        None => (stamp, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backups_rotate_keep_five_private() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("config.json");
        for i in 0..8 {
            update(&f, |_| Ok((Edit::Write(format!("{{\"n\":{i}}}")), ()))).unwrap();
        }
        let b = backups_of(&f);
        assert_eq!(b.len(), BACKUPS_KEPT);
        // The newest backup holds the text before the last write; the oldest kept is write 2's.
        assert_eq!(std::fs::read_to_string(b.last().unwrap()).unwrap(), "{\"n\":6}");
        assert_eq!(std::fs::read_to_string(&b[0]).unwrap(), "{\"n\":2}");
        for p in &b {
            assert_eq!(std::fs::metadata(p).unwrap().permissions().mode() & 0o777, 0o600);
        }
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "{\"n\":7}");
    }

    #[test]
    fn a_refused_edit_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("config.json");
        std::fs::write(&f, "{broken").unwrap();
        let r = update(&f, |cur| -> Result<(Edit, ()), Refusal> {
            assert_eq!(cur, Some("{broken"));
            Err(Refusal::new(500, "corrupt"))
        });
        assert_eq!(r.unwrap_err().status, 500);
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "{broken");
        assert!(backups_of(&f).is_empty());
    }
}
