//! The bridge's own `fs/*` and `terminal/*` service for agents no editor can serve.
//!
//! When the upstream agent asks its client to read or write a file or run a command and no
//! editor is attached to answer, the router hands the request to [`LocalService::handle`]. Every
//! path is confined to the session's directories (its `cwd` and `additionalDirectories`): the
//! agent's requests may be driven by a remote person, so a path is trusted only after it has
//! been canonicalized and found inside a canonical root.
//!
//! - `fs`: `fs/read_text_file` (whole file, or a window of lines) and `fs/write_text_file`.
//! - `terminal`: processes in their own process groups, output captured into a bounded buffer.

mod fs;
#[cfg(test)]
mod fuzz;
mod terminal;

use crate::files::resolve::Root;
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use serde_json::Value;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use zcode_shared::jsonrpc::{self, RESOURCE_NOT_FOUND, RpcError};

/// Serves the client-side requests of ACP agents on this machine, confined to session roots.
pub struct LocalService {
    terminals: terminal::Terminals,
}

impl LocalService {
    /// A service with no terminals.
    pub fn new() -> Arc<LocalService> {
        Arc::new(LocalService { terminals: terminal::Terminals::default() })
    }

    /// Serves one agent request; `roots` are the session's directories (absolute; you canonicalize them).
    /// Errors are JSON-RPC errors with a message a person can read.
    pub async fn handle(&self, method: &str, params: Value, roots: Vec<PathBuf>) -> Result<Value, RpcError> {
        // Roots are resolved per request: a directory renamed or replaced by a symlink since the
        // session started must not keep its old meaning.
        let roots = Roots::resolve(&roots).await;
        match method {
            "fs/read_text_file" => fs::read_text_file(&params, &roots).await,
            "fs/write_text_file" => fs::write_text_file(&params, &roots).await,
            "terminal/create" => self.terminals.create(&params, &roots).await,
            "terminal/output" => self.terminals.output(&params),
            "terminal/wait_for_exit" => self.terminals.wait_for_exit(&params).await,
            "terminal/kill" => self.terminals.kill(&params),
            "terminal/release" => self.terminals.release(&params),
            other => Err(RpcError::method_not_found(other)),
        }
    }

    /// Kills every terminal process (bridge shutdown or agent restart).
    pub fn kill_all(&self) {
        self.terminals.kill_all();
    }
}

/// The session's directories, each opened as a [`Root`]: every path is resolved beneath one
/// of them by the kernel (`openat2` with `RESOLVE_BENEATH`), exactly as the files API does, so
/// a directory swapped for a symlink between a check and an open cannot lead outside. Roots
/// that do not resolve, and `/`, are dropped, so an empty set refuses everything.
#[derive(Clone)]
pub(crate) struct Roots(Arc<[(PathBuf, Root)]>);

impl Roots {
    /// Opens the absolute roots in `raw` that exist and are not `/`.
    pub(crate) async fn resolve(raw: &[PathBuf]) -> Roots {
        let raw = raw.to_vec();
        let open = tokio::task::spawn_blocking(move || {
            let mut roots = Vec::new();
            for given in raw.into_iter().filter(|r| r.is_absolute()) {
                match Root::open(&given) {
                    Ok(root) => roots.push((given, root)),
                    // `/` as a root would confine nothing; a session rooted there gets no service.
                    Err(e) => tracing::debug!(root = %given.display(), reason = ?e, "session root refused"),
                }
            }
            roots
        });
        Roots(open.await.unwrap_or_default().into())
    }

    /// The first root: the session's `cwd` when it resolved.
    pub(crate) fn first(&self) -> Option<&Root> {
        self.0.first().map(|(_, root)| root)
    }

    /// The root `path` (absolute) lies in, as the agent spelled it or canonically, and the path
    /// relative to it. Nothing is looked up: a path outside every root is refused as it is.
    fn locate(&self, path: &Path) -> Result<(&Root, PathBuf), RpcError> {
        let bytes = path.as_os_str().as_bytes();
        self.0
            .iter()
            .find_map(|(given, root)| root.relative(bytes, given).ok().map(|rel| (root, rel)))
            .ok_or_else(|| outside(path))
    }

    /// Opens `path` beneath the root that holds it (on the blocking pool), never following a
    /// symlink or `..` out of that root; `mode` is for a file `O_CREAT` makes. `shown` errors:
    /// an escape is refused like any outside path, a missing file is not found.
    pub(crate) async fn open(&self, path: &Path, flags: OFlag, mode: Mode) -> Result<OwnedFd, RpcError> {
        let (roots, owned) = (self.clone(), path.to_owned());
        let open = tokio::task::spawn_blocking(move || {
            let (root, rel) = roots.locate(&owned)?;
            root.open_raw(&rel, flags, mode).map_err(|e| open_error(e, &owned, flags))
        });
        open.await.map_err(|e| RpcError::internal(format!("opening {}: {e}", path.display())))?
    }
}

/// The error for a failed beneath-the-root open of `path`.
fn open_error(e: Errno, path: &Path, flags: OFlag) -> RpcError {
    match e {
        // RESOLVE_BENEATH: the path (through `..` or a symlink) leads outside the root.
        Errno::EXDEV => outside(path),
        Errno::ELOOP if flags.contains(OFlag::O_NOFOLLOW) => {
            RpcError::invalid_params(format!("refusing to follow a symbolic link: {}", path.display()))
        }
        Errno::ELOOP => RpcError::invalid_params(format!(
            "cannot follow the symbolic links in {} (a loop, or a /proc magic link)",
            path.display()
        )),
        Errno::ENOTDIR if flags.contains(OFlag::O_DIRECTORY) => {
            RpcError::invalid_params(format!("not a directory: {}", path.display()))
        }
        Errno::ENOENT | Errno::ENOTDIR => not_found(path),
        Errno::EISDIR => RpcError::invalid_params(format!("not a regular file: {}", path.display())),
        Errno::ENOSYS => RpcError::internal("this kernel has no openat2: the bridge serves no files"),
        other => io_error("cannot open", path, &io::Error::from(other)),
    }
}

/// Reads the absolute path in `params[field]`, refusing relative paths, `..` and NUL bytes
/// before anything touches the file system.
pub(crate) fn absolute_path(params: &Value, field: &str) -> Result<PathBuf, RpcError> {
    let raw = jsonrpc::required_str(params, field)?;
    let path = PathBuf::from(raw);
    if !path.is_absolute() {
        return Err(RpcError::invalid_params(format!("`{field}` must be an absolute path: {raw}")));
    }
    if raw.contains('\0') || path.components().any(|c| c == Component::ParentDir) {
        return Err(outside(&path));
    }
    Ok(path)
}

/// Reads an optional non-negative integer field; `null` counts as absent.
pub(crate) fn optional_u64(params: &Value, field: &str) -> Result<Option<u64>, RpcError> {
    match params.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| RpcError::invalid_params(format!("`{field}` must be a non-negative integer"))),
    }
}

/// `-32602`: the path is not one the session may touch.
pub(crate) fn outside(path: &Path) -> RpcError {
    RpcError::invalid_params(format!(
        "path is outside the session's directories: {}",
        path.display().to_string().replace('\0', "\\0")
    ))
}

/// `-32002`: the file does not exist.
pub(crate) fn not_found(path: &Path) -> RpcError {
    RpcError::new(RESOURCE_NOT_FOUND, format!("file not found: {}", path.display()))
}

/// `-32603` for an unexpected I/O failure, saying what was being done to which path.
pub(crate) fn io_error(doing: &str, path: &Path, err: &io::Error) -> RpcError {
    RpcError::internal(format!("{doing} {}: {err}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn roots_drop_slash_and_missing_directories() {
        let dir = tempfile::tempdir().unwrap();
        let roots = Roots::resolve(&[PathBuf::from("/"), dir.path().join("missing"), "rel".into()]).await;
        assert!(roots.0.is_empty());
        let roots = Roots::resolve(&[dir.path().to_path_buf()]).await;
        assert_eq!(roots.first().map(|r| r.path.clone()), Some(dir.path().canonicalize().unwrap()));
    }

    #[test]
    fn handle_future_is_send() {
        // The router spawns `handle` futures on the multi-threaded runtime.
        fn assert_send<T: Send>(_: &T) {}
        let svc = LocalService::new();
        assert_send(&svc.handle("terminal/wait_for_exit", Value::Null, vec![]));
    }

    #[tokio::test]
    async fn unknown_method_is_32601() {
        let svc = LocalService::new();
        let err = svc.handle("fs/delete", json!({}), vec![]).await.unwrap_err();
        assert_eq!(err.code, jsonrpc::METHOD_NOT_FOUND);
    }

    #[test]
    fn path_syntax_is_checked_first() {
        let err = absolute_path(&json!({}), "path").unwrap_err();
        assert!(err.message.contains("`path`"), "{}", err.message);
        let err = absolute_path(&json!({"path": "/a/\u{0}b"}), "path").unwrap_err();
        assert_eq!(err.code, jsonrpc::INVALID_PARAMS);
        assert!(absolute_path(&json!({"path": "/a/./b"}), "path").is_ok());
    }
}
