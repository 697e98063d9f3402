//! `fs/read_text_file` and `fs/write_text_file`, confined to the session's directories.
//!
//! Both open beneath the root holding the path ([`Roots::open`]: `openat2` with
//! `RESOLVE_BENEATH`), so no `..`, symlink, or directory swapped for a symlink mid-request leads
//! outside. A read follows symlinks that stay inside; a write also refuses a symlink at the
//! final name (`O_NOFOLLOW`), and needs the parent directory to exist (a missing one is
//! `-32002`, not created). Both open with `O_NONBLOCK` and insist on a regular file, so a FIFO
//! or device never hangs or floods us.

use super::{Roots, absolute_path, io_error, optional_u64};
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use serde_json::{Value, json};
use std::path::Path;
use tokio::fs::File;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use zcode_shared::jsonrpc::{self, RpcError};

/// The most a read returns (whole file or window): the content travels in one JSON message.
pub(crate) const MAX_READ_BYTES: u64 = 64 * 1024 * 1024;

/// Serves `fs/read_text_file` {path, line?, limit?} → {content}.
pub(crate) async fn read_text_file(params: &Value, roots: &Roots) -> Result<Value, RpcError> {
    let path = absolute_path(params, "path")?;
    let line = optional_u64(params, "line")?;
    let limit = optional_u64(params, "limit")?;
    if line == Some(0) {
        return Err(RpcError::invalid_params("`line` is 1-based; the first line is 1"));
    }
    let file = open_regular(roots, &path, OFlag::O_RDONLY).await?;
    let bytes = if line.is_none() && limit.is_none() {
        read_whole(file, &path).await?
    } else {
        read_window(file, &path, line.unwrap_or(1), limit).await?
    };
    // Lossy: an agent is better served by text with U+FFFD at a stray byte than by a refusal.
    Ok(json!({"content": String::from_utf8_lossy(&bytes)}))
}

/// Serves `fs/write_text_file` {path, content} → null. Creates the file if missing; the parent
/// directory must exist.
pub(crate) async fn write_text_file(params: &Value, roots: &Roots) -> Result<Value, RpcError> {
    let path = absolute_path(params, "path")?;
    let content = jsonrpc::required_str(params, "content")?;
    // Not truncating at open: the file is checked to be a regular one before it is emptied.
    let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_NOFOLLOW;
    let mut file = open_regular(roots, &path, flags).await?;
    let write = async {
        file.set_len(0).await?;
        file.write_all(content.as_bytes()).await?;
        // tokio's File writes in the background; flush to see the outcome before answering.
        file.flush().await
    };
    write.await.map_err(|e| io_error("cannot write", &path, &e))?;
    Ok(Value::Null)
}

/// Opens `path` beneath its root with `flags`, without blocking, and checks it is a regular
/// file.
async fn open_regular(roots: &Roots, path: &Path, flags: OFlag) -> Result<File, RpcError> {
    let fd = roots.open(path, flags | OFlag::O_NONBLOCK, Mode::from_bits_truncate(0o666)).await?;
    let file = File::from_std(std::fs::File::from(fd));
    let meta = file.metadata().await.map_err(|e| io_error("cannot stat", path, &e))?;
    if !meta.is_file() {
        return Err(RpcError::invalid_params(format!("not a regular file: {}", path.display())));
    }
    Ok(file)
}

/// The whole file, refused above [`MAX_READ_BYTES`].
async fn read_whole(file: File, path: &Path) -> Result<Vec<u8>, RpcError> {
    // Refuse a file known to be too large before reading any of it.
    if file.metadata().await.is_ok_and(|m| m.len() > MAX_READ_BYTES) {
        return Err(too_large(path));
    }
    let mut bytes = Vec::new();
    // `take` too: the file may grow between the stat and the read.
    let read = file.take(MAX_READ_BYTES + 1).read_to_end(&mut bytes).await;
    read.map_err(|e| io_error("cannot read", path, &e))?;
    if bytes.len() as u64 > MAX_READ_BYTES {
        return Err(too_large(path));
    }
    Ok(bytes)
}

/// Lines `line..line+limit` (1-based; to the end without a limit), with their line endings.
async fn read_window(file: File, path: &Path, line: u64, limit: Option<u64>) -> Result<Vec<u8>, RpcError> {
    let mut reader = BufReader::with_capacity(64 * 1024, file);
    let mut out = Vec::new();
    let copy = async {
        // Skipped lines are scanned in the reader's buffer, never collected.
        scan_lines(&mut reader, Some(line - 1), None).await?;
        scan_lines(&mut reader, limit, Some(&mut out)).await
    };
    copy.await.map_err(|e| io_error("cannot read", path, &e))?;
    if out.len() as u64 > MAX_READ_BYTES {
        return Err(too_large(path));
    }
    Ok(out)
}

/// Moves past `count` lines (to EOF when `None`), appending them to `out` when given; stops
/// early once `out` passes [`MAX_READ_BYTES`]. Returns how many whole or final lines it passed.
async fn scan_lines<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    count: Option<u64>,
    mut out: Option<&mut Vec<u8>>,
) -> std::io::Result<u64> {
    let mut passed = 0;
    let mut in_line = false;
    while count.is_none_or(|c| passed < c) {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            // A last line without a newline still counts as a line.
            return Ok(passed + u64::from(in_line));
        }
        let (used, ended) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        if let Some(out) = out.as_deref_mut() {
            out.extend_from_slice(&buf[..used]);
            if out.len() as u64 > MAX_READ_BYTES {
                reader.consume(used);
                return Ok(passed);
            }
        }
        reader.consume(used);
        in_line = !ended;
        passed += u64::from(ended);
    }
    Ok(passed)
}

/// `-32603`: the content would not fit in one reply.
fn too_large(path: &Path) -> RpcError {
    RpcError::internal(format!(
        "{} is too large to read at once (the limit is {} MiB); ask for a window with `line` and `limit`",
        path.display(),
        MAX_READ_BYTES / (1024 * 1024)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use zcode_shared::jsonrpc::{INVALID_PARAMS, RESOURCE_NOT_FOUND};

    /// A temp dir holding `proj/` (the root) with `proj/a.txt`, plus `proj2/` and `outside.txt`.
    struct Fixture {
        _dir: tempfile::TempDir,
        base: PathBuf,
        root: PathBuf,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let root = base.join("proj");
        std::fs::create_dir(&root).unwrap();
        std::fs::create_dir(base.join("proj2")).unwrap();
        std::fs::write(root.join("a.txt"), "one\ntwo\nthree\nfour").unwrap();
        std::fs::write(base.join("proj2/file"), "sibling").unwrap();
        std::fs::write(base.join("outside.txt"), "secret").unwrap();
        Fixture { _dir: dir, base, root }
    }

    async fn read(roots: &[PathBuf], params: Value) -> Result<String, RpcError> {
        let roots = Roots::resolve(roots).await;
        let v = read_text_file(&params, &roots).await?;
        Ok(v["content"].as_str().unwrap().to_owned())
    }

    async fn write(roots: &[PathBuf], path: &Path, content: &str) -> Result<Value, RpcError> {
        let roots = Roots::resolve(roots).await;
        write_text_file(&json!({"sessionId": "s", "path": path, "content": content}), &roots).await
    }

    fn refused(r: Result<impl std::fmt::Debug, RpcError>) {
        let err = r.unwrap_err();
        assert_eq!(err.code, INVALID_PARAMS, "{err}");
    }

    #[tokio::test]
    async fn reads_whole_file_and_line_windows() {
        let f = fixture();
        let roots = [f.root.clone()];
        let path = f.root.join("a.txt");
        assert_eq!(read(&roots, json!({"path": path})).await.unwrap(), "one\ntwo\nthree\nfour");
        let window = json!({"path": path, "line": 2, "limit": 2});
        assert_eq!(read(&roots, window).await.unwrap(), "two\nthree\n");
        assert_eq!(read(&roots, json!({"path": path, "line": 4})).await.unwrap(), "four");
        assert_eq!(read(&roots, json!({"path": path, "line": 9})).await.unwrap(), "");
        assert_eq!(read(&roots, json!({"path": path, "limit": 1})).await.unwrap(), "one\n");
        assert_eq!(read(&roots, json!({"path": path, "limit": 0})).await.unwrap(), "");
        refused(read(&roots, json!({"path": path, "line": 0})).await);
    }

    #[tokio::test]
    async fn missing_file_is_32002_but_only_inside() {
        let f = fixture();
        let roots = [f.root.clone()];
        let err = read(&roots, json!({"path": f.root.join("nope.txt")})).await.unwrap_err();
        assert_eq!(err.code, RESOURCE_NOT_FOUND);
        assert!(err.message.contains("file not found"), "{}", err.message);
        // Outside the roots, a missing file looks like any other refused path.
        refused(read(&roots, json!({"path": f.base.join("nope.txt")})).await);
    }

    #[tokio::test]
    async fn refuses_relative_dotdot_and_outside_paths() {
        let f = fixture();
        let roots = [f.root.clone()];
        refused(read(&roots, json!({"path": "proj/a.txt"})).await);
        refused(read(&roots, json!({"path": f.root.join("../outside.txt")})).await);
        refused(read(&roots, json!({"path": f.base.join("outside.txt")})).await);
        refused(read(&roots, json!({"path": "/etc/passwd"})).await);
        let err = read(&roots, json!({"sessionId": "s"})).await.unwrap_err();
        assert!(err.message.contains("`path`"), "{}", err.message);
    }

    #[tokio::test]
    async fn refuses_symlink_pointing_outside() {
        let f = fixture();
        std::os::unix::fs::symlink(f.base.join("outside.txt"), f.root.join("link")).unwrap();
        std::os::unix::fs::symlink(&f.base, f.root.join("dirlink")).unwrap();
        let roots = [f.root.clone()];
        refused(read(&roots, json!({"path": f.root.join("link")})).await);
        refused(read(&roots, json!({"path": f.root.join("dirlink/outside.txt")})).await);
    }

    #[tokio::test]
    async fn sibling_with_root_as_prefix_is_outside() {
        let f = fixture();
        refused(read(std::slice::from_ref(&f.root), json!({"path": f.base.join("proj2/file")})).await);
    }

    #[tokio::test]
    async fn root_slash_refuses_everything() {
        let f = fixture();
        refused(read(&["/".into()], json!({"path": f.root.join("a.txt")})).await);
        refused(write(&["/".into()], &f.root.join("new.txt"), "x").await);
        assert!(!f.root.join("new.txt").exists());
    }

    #[tokio::test]
    async fn second_root_is_served() {
        let f = fixture();
        let roots = [f.root.clone(), f.base.join("proj2")];
        assert_eq!(read(&roots, json!({"path": f.base.join("proj2/file")})).await.unwrap(), "sibling");
    }

    #[tokio::test]
    async fn write_creates_and_replaces_inside() {
        let f = fixture();
        let roots = [f.root.clone()];
        let path = f.root.join("new.txt");
        assert_eq!(write(&roots, &path, "hello").await.unwrap(), Value::Null);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "hello");
        write(&roots, &f.root.join("a.txt"), "short").await.unwrap();
        assert_eq!(std::fs::read_to_string(f.root.join("a.txt")).unwrap(), "short");
        let err = write(&roots, &f.root.join("nodir/x.txt"), "x").await.unwrap_err();
        assert_eq!(err.code, RESOURCE_NOT_FOUND);
    }

    #[tokio::test]
    async fn write_outside_creates_nothing() {
        let f = fixture();
        let roots = [f.root.clone()];
        refused(write(&roots, &f.base.join("evil.txt"), "x").await);
        refused(write(&roots, &f.base.join("proj2/evil.txt"), "x").await);
        refused(write(&roots, &f.root.join("../evil.txt"), "x").await);
        assert!(!f.base.join("evil.txt").exists());
        assert!(!f.base.join("proj2/evil.txt").exists());
    }

    #[tokio::test]
    async fn write_through_symlink_at_final_name_is_refused() {
        let f = fixture();
        let outside = f.base.join("outside.txt");
        std::os::unix::fs::symlink(&outside, f.root.join("link")).unwrap();
        std::os::unix::fs::symlink(f.base.join("created-through-link"), f.root.join("dangling")).unwrap();
        let roots = [f.root.clone()];
        refused(write(&roots, &f.root.join("link"), "pwned").await);
        refused(write(&roots, &f.root.join("dangling"), "pwned").await);
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "secret");
        assert!(!f.base.join("created-through-link").exists());
    }

    #[tokio::test]
    async fn directories_are_not_files() {
        let f = fixture();
        std::fs::create_dir(f.root.join("sub")).unwrap();
        let roots = [f.root.clone()];
        refused(read(&roots, json!({"path": f.root.join("sub")})).await);
        assert!(write(&roots, &f.root.join("sub"), "x").await.is_err());
    }

    #[tokio::test]
    async fn scan_lines_stops_at_the_cap_without_a_newline() {
        // One endless line: the window read must stop collecting at the cap, not at EOF.
        let mut reader = tokio::io::repeat(b'x').take(MAX_READ_BYTES + 10);
        let mut reader = BufReader::new(&mut reader);
        let mut out = Vec::new();
        let passed = scan_lines(&mut reader, Some(1), Some(&mut out)).await.unwrap();
        assert_eq!(passed, 0);
        assert!(out.len() as u64 > MAX_READ_BYTES && (out.len() as u64) < MAX_READ_BYTES + 64 * 1024);
    }
}
