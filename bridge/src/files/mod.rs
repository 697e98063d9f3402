//! Session files, read-only: `GET /fs/list` (one directory level) and `GET|HEAD /fs/file`
//! (whole file, byte window, or line window), confined to the session's root. Served by the
//! bridge's loopback server, relayed by the hub.
//!
//! Every lookup goes through [`resolve::Root`] (openat2 beneath the root), and bodies are
//! streamed from a blocking reader through a small bounded channel, so memory stays O(window)
//! whatever the file's size.

#[cfg(test)]
pub(crate) mod fuzz;
mod mime;
pub(crate) mod resolve;

use crate::http::query::Query;
use crate::http::{Body, Resp, full, text};
use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};
use nix::fcntl::OFlag;
use resolve::{Refusal, Root};
use serde_json::json;
use std::io::{BufRead, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use tokio::sync::mpsc;

/// Entries listed per directory before `truncated`.
const LIST_CAP: usize = 2000;
/// Line window default and cap.
const LINE_LIMIT_DEFAULT: u64 = 200;
const LINE_LIMIT_MAX: u64 = 5000;
/// Bytes per streamed chunk.
const CHUNK: usize = 64 * 1024;

fn refused(r: Refusal) -> Resp {
    match r {
        Refusal::Bad(m) => text(StatusCode::BAD_REQUEST, m),
        Refusal::Forbidden(m) => text(StatusCode::FORBIDDEN, m),
        Refusal::NotFound(m) => text(StatusCode::NOT_FOUND, m),
    }
}

/// Reads the query, checking `sessionId`: `Ok((query, session id))` or a 400.
pub fn session_query(raw: Option<&str>) -> Result<(Query, String), Box<Resp>> {
    let bad = |m: String| Box::new(text(StatusCode::BAD_REQUEST, m));
    let q = Query::parse(raw).map_err(bad)?;
    let sid = match q.str("sessionId") {
        Ok(Some(s)) if valid_session_id(s) => s.to_owned(),
        Ok(Some(_)) => return Err(bad("invalid sessionId — session id expected".into())),
        Ok(None) => return Err(bad("sessionId required".into())),
        Err(m) => return Err(bad(m)),
    };
    Ok((q, sid))
}

/// Session ids accepted in paths and queries: `^[A-Za-z0-9_.:-]+$`.
pub fn valid_session_id(s: &str) -> bool {
    !s.is_empty() && s.len() <= 256 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.:-".contains(&b))
}

fn open_request(q: &Query, cwd: &Path) -> Result<(Root, std::path::PathBuf), Refusal> {
    let root = Root::open(cwd)?;
    let rel = root.relative(q.bytes("path").unwrap_or(b""), cwd)?;
    Ok((root, rel))
}

/// `GET /fs/list?sessionId=&path=`.
pub async fn list(q: Query, cwd: std::path::PathBuf) -> Resp {
    let work = tokio::task::spawn_blocking(move || -> Result<serde_json::Value, Refusal> {
        let (root, rel) = open_request(&q, &cwd)?;
        let fd = root.open_beneath(&rel, OFlag::O_RDONLY | OFlag::O_DIRECTORY)?;
        let stat_fd = fd.try_clone().map_err(|e| Refusal::NotFound(e.to_string()))?;
        let mut dir = nix::dir::Dir::from_fd(fd).map_err(|e| Refusal::NotFound(e.to_string()))?;
        let mut entries = Vec::new();
        let mut truncated = false;
        for entry in dir.iter().flatten() {
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            if entries.len() == LIST_CAP {
                truncated = true;
                break;
            }
            let Ok(st) = nix::sys::stat::fstatat(
                &stat_fd,
                entry.file_name(),
                nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
            ) else {
                continue;
            };
            let kind = match st.st_mode & libc_mode::S_IFMT {
                libc_mode::S_IFDIR => "dir",
                libc_mode::S_IFLNK => "symlink",
                _ => "file",
            };
            let size = if kind == "symlink" { 0 } else { st.st_size.max(0) };
            let mtime = st.st_mtime * 1000 + st.st_mtime_nsec / 1_000_000;
            entries.push((
                kind == "dir",
                name.to_vec(),
                json!({
                    "name": String::from_utf8_lossy(name), "kind": kind, "size": size, "mtime": mtime,
                }),
            ));
        }
        // Directories first, then byte order of the names.
        entries.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        let root_shown = root.path.join(&rel);
        Ok(json!({
            "root": root.path.display().to_string(),
            "path": root_shown.display().to_string(),
            "entries": entries.into_iter().map(|e| e.2).collect::<Vec<_>>(),
            "truncated": truncated,
        }))
    })
    .await;
    match work {
        Ok(Ok(v)) => json_response(&v),
        Ok(Err(r)) => refused(r),
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("listing failed: {e}")),
    }
}

/// The `S_IF*` mode bits (as `nix` reports `st_mode`).
mod libc_mode {
    pub const S_IFMT: u32 = 0o170000;
    pub const S_IFDIR: u32 = 0o040000;
    pub const S_IFLNK: u32 = 0o120000;
}

fn json_response(v: &serde_json::Value) -> Resp {
    let mut r = Response::new(full(v.to_string()));
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// The windows a file request may ask for.
enum Window {
    Whole,
    Bytes { offset: u64, length: Option<u64> },
    Lines { line: u64, limit: u64 },
}

fn window(q: &Query) -> Result<Window, String> {
    let (offset, length) = (q.u64("offset")?, q.u64("length")?);
    let (line, limit) = (q.u64("line")?, q.u64("limit")?);
    let bytes = offset.is_some() || length.is_some();
    let lines = line.is_some() || limit.is_some();
    match (bytes, lines) {
        (true, true) => Err("byte and line windows are mutually exclusive".into()),
        (true, false) => Ok(Window::Bytes { offset: offset.unwrap_or(0), length }),
        (false, true) => {
            // The contract caps a line window: a larger one is served capped, not refused.
            let limit = limit.unwrap_or(LINE_LIMIT_DEFAULT).min(LINE_LIMIT_MAX);
            let line = line.unwrap_or(1);
            if line == 0 {
                return Err("`line` counts from 1".into());
            }
            Ok(Window::Lines { line, limit })
        }
        (false, false) => Ok(Window::Whole),
    }
}

/// `GET|HEAD /fs/file?sessionId=&path=[&offset=&length=|&line=&limit=][&dl=1]`.
pub async fn file(q: Query, cwd: std::path::PathBuf, head: bool) -> Resp {
    let win = match window(&q) {
        Ok(w) => w,
        Err(m) => return text(StatusCode::BAD_REQUEST, m),
    };
    let download = q.flag("dl");
    let opened =
        tokio::task::spawn_blocking(move || -> Result<(std::fs::File, std::path::PathBuf), Refusal> {
            let (root, rel) = open_request(&q, &cwd)?;
            let fd = root.open_beneath(&rel, OFlag::O_RDONLY | OFlag::O_NONBLOCK)?;
            let f = std::fs::File::from(fd);
            let meta = f.metadata().map_err(|e| Refusal::NotFound(e.to_string()))?;
            if meta.is_dir() {
                return Err(Refusal::Bad("the path is a directory: use fs/list".into()));
            }
            if !meta.is_file() {
                return Err(Refusal::Forbidden("only regular files are served".into()));
            }
            Ok((f, rel))
        })
        .await;
    let (f, rel) = match opened {
        Ok(Ok(x)) => x,
        Ok(Err(r)) => return refused(r),
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, format!("open failed: {e}")),
    };
    let size = f.metadata().map(|m| m.size()).unwrap_or(0);
    let name = rel.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut resp = match win {
        Window::Whole => {
            let mut r = Response::new(if head { full(Bytes::new()) } else { stream_bytes(f, 0, size) });
            r.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from(size));
            r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(mime::of(&name)));
            r
        }
        Window::Bytes { offset, length } => {
            if offset >= size && !(offset == 0 && size == 0) {
                let mut r = text(
                    StatusCode::RANGE_NOT_SATISFIABLE,
                    format!("offset {offset} is beyond the end ({size} bytes)"),
                );
                if let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}")) {
                    r.headers_mut().insert(header::CONTENT_RANGE, v);
                }
                return r;
            }
            let len = length.unwrap_or(size - offset).min(size - offset);
            let mut r = Response::new(if head { full(Bytes::new()) } else { stream_bytes(f, offset, len) });
            *r.status_mut() = StatusCode::PARTIAL_CONTENT;
            let last = (offset + len).saturating_sub(1);
            if let Ok(v) = HeaderValue::from_str(&format!("bytes {offset}-{last}/{size}")) {
                r.headers_mut().insert(header::CONTENT_RANGE, v);
            }
            r.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from(len));
            r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(mime::of(&name)));
            r
        }
        Window::Lines { line, limit } => {
            let mut r = Response::new(if head { full(Bytes::new()) } else { stream_lines(f, line, limit) });
            r.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
            r.headers_mut().insert("x-zcode-first-line", HeaderValue::from(line));
            r
        }
    };
    let disposition = content_disposition(&name, download);
    if let Ok(v) = HeaderValue::from_str(&disposition) {
        resp.headers_mut().insert(header::CONTENT_DISPOSITION, v);
    }
    let h = resp.headers_mut();
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    // A project's HTML or SVG opened inline must not run script in the hub's origin (where
    // the web client keeps the token): sandboxed, and never sniffed into something else.
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static("sandbox"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    resp
}

/// `attachment` (download) or `inline`, with an ASCII fallback name and the RFC 5987 one.
fn content_disposition(name: &str, download: bool) -> String {
    let kind = if download { "attachment" } else { "inline" };
    let ascii: String = name
        .chars()
        .map(|c| if c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ' { c } else { '_' })
        .collect();
    let encoded: String = name
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"!#$&+-.^_`|~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    format!("{kind}; filename=\"{ascii}\"; filename*=UTF-8''{encoded}")
}

/// Streams `len` bytes from `offset` (a blocking reader feeding a channel of 4 chunks).
fn stream_bytes(mut f: std::fs::File, offset: u64, len: u64) -> Body {
    let (tx, rx) = mpsc::channel::<std::io::Result<Bytes>>(4);
    tokio::task::spawn_blocking(move || {
        if let Err(e) = f.seek(SeekFrom::Start(offset)) {
            let _ = tx.blocking_send(Err(e));
            return;
        }
        let mut left = len;
        let mut buf = vec![0u8; CHUNK];
        while left > 0 {
            let want = CHUNK.min(usize::try_from(left).unwrap_or(CHUNK));
            match f.read(&mut buf[..want]) {
                Ok(0) => break,
                Ok(n) => {
                    left -= n as u64;
                    if tx.blocking_send(Ok(Bytes::copy_from_slice(&buf[..n]))).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    let _ = tx.blocking_send(Err(e));
                    return;
                }
            }
        }
    });
    channel_body(rx)
}

/// Streams lines `line .. line + limit` (1-based). Lines are skipped and sent chunk by chunk,
/// never collected, so even a gigabyte-long line costs one chunk of memory.
fn stream_lines(f: std::fs::File, line: u64, limit: u64) -> Body {
    let (tx, rx) = mpsc::channel::<std::io::Result<Bytes>>(4);
    tokio::task::spawn_blocking(move || {
        let mut r = std::io::BufReader::with_capacity(CHUNK, f);
        let mut current = 1u64;
        let end = line.saturating_add(limit);
        while current < end {
            let buf = match r.fill_buf() {
                Ok([]) => return,
                Ok(b) => b,
                Err(e) => {
                    let _ = tx.blocking_send(Err(e));
                    return;
                }
            };
            let (take, ends_line) = match buf.iter().position(|b| *b == b'\n') {
                Some(i) => (i + 1, true),
                None => (buf.len(), false),
            };
            if current >= line && tx.blocking_send(Ok(Bytes::copy_from_slice(&buf[..take]))).is_err() {
                return;
            }
            r.consume(take);
            if ends_line {
                current += 1;
            }
        }
    });
    channel_body(rx)
}

fn channel_body(rx: mpsc::Receiver<std::io::Result<Bytes>>) -> Body {
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item.map(Frame::data), rx))
    });
    StreamBody::new(stream).boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_validated() {
        let w = |q: &str| window(&Query::parse(Some(q)).unwrap());
        assert!(matches!(w(""), Ok(Window::Whole)));
        assert!(matches!(w("offset=5"), Ok(Window::Bytes { offset: 5, length: None })));
        assert!(matches!(w("line=3"), Ok(Window::Lines { line: 3, limit: 200 })));
        assert!(w("offset=1&line=1").is_err());
        // The contract caps a line window at 5000 lines: past it, clamped; not a number, refused.
        assert!(matches!(w("limit=5001"), Ok(Window::Lines { line: 1, limit: 5000 })));
        assert!(w("limit=many").is_err());
        assert!(w("line=0").is_err());
        assert!(w("offset=abc").is_err());
        assert!(w("length=-5").is_err());
    }

    #[test]
    fn dispositions_carry_both_names() {
        assert_eq!(
            content_disposition("a b.txt", true),
            "attachment; filename=\"a b.txt\"; filename*=UTF-8''a%20b.txt"
        );
        assert_eq!(
            content_disposition("é\".md", false),
            "inline; filename=\"__.md\"; filename*=UTF-8''%C3%A9%22.md"
        );
    }

    #[test]
    fn session_ids_follow_the_pattern() {
        assert!(valid_session_id("sess_9f2.a:b-c"));
        assert!(!valid_session_id("a/b") && !valid_session_id("") && !valid_session_id("a b"));
    }
}
