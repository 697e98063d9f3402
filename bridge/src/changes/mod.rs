//! A session's uncommitted changes, read-only: `GET /changes` (branch, ahead/behind, the changed
//! files with their counts) and `GET /changes/diff?path=` (one file's hunks), for the part of
//! the git work tree beneath the session's root, with paths relative to that root. Served by
//! the bridge's loopback server, relayed by the hub.
//!
//! Confined like the files API ([`crate::files::resolve::Root`]): a requested path is checked
//! beneath the root before git hears of it, and untracked files are read through the root.
//! Git itself runs as a program ([`git`]): a fixed argument list, names only after `--`.

mod git;
pub(crate) mod parse;

use crate::files::resolve::{Refusal, Root};
use crate::http::query::Query;
use crate::http::{Resp, full, text};
use git::GitError;
use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};
use nix::fcntl::OFlag;
use parse::{Change, Hunk, Status};
use serde_json::{Value, json};
use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Files listed before `truncated`.
const FILES_CAP: usize = 3000;
/// Bytes of one file's diff read before it is cut (`truncated`).
const DIFF_CAP: usize = 1 << 20;
/// Bytes of a status or file list read from git.
const LIST_CAP: usize = 16 << 20;
/// Bytes of untracked files read, per request, to count their lines.
const COUNT_BUDGET: u64 = 256 << 20;
/// Bytes looked at for a NUL (git's own rule for "binary").
const SNIFF: usize = 8000;
/// Context lines around a change: default and cap.
const CONTEXT_DEFAULT: u64 = 3;
const CONTEXT_MAX: u64 = 1000;

/// Why a request gets no changes.
enum Failure {
    Refused(Refusal),
    Git(GitError),
    /// Git ran and failed: its words.
    Failed(String),
    Internal(String),
}

impl From<Refusal> for Failure {
    fn from(r: Refusal) -> Failure {
        Failure::Refused(r)
    }
}

impl From<GitError> for Failure {
    fn from(e: GitError) -> Failure {
        Failure::Git(e)
    }
}

fn answer(r: Result<Value, Failure>) -> Resp {
    match r {
        Ok(v) => {
            let mut r = Response::new(full(v.to_string()));
            r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            r
        }
        Err(Failure::Refused(Refusal::Bad(m))) => text(StatusCode::BAD_REQUEST, m),
        Err(Failure::Refused(Refusal::Forbidden(m))) => text(StatusCode::FORBIDDEN, m),
        Err(Failure::Refused(Refusal::NotFound(m))) => text(StatusCode::NOT_FOUND, m),
        Err(Failure::Git(e @ GitError::Timeout)) => text(StatusCode::GATEWAY_TIMEOUT, e.to_string()),
        Err(Failure::Git(e)) => text(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
        Err(Failure::Failed(m)) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("git failed: {m}")),
        Err(Failure::Internal(m)) => text(StatusCode::INTERNAL_SERVER_ERROR, m),
    }
}

/// Runs blocking filesystem work off the async workers.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Failure> + Send + 'static,
) -> Result<T, Failure> {
    tokio::task::spawn_blocking(f).await.map_err(|e| Failure::Internal(format!("worker failed: {e}")))?
}

/// A session root inside a git work tree.
struct Repo {
    /// The root, canonical: git runs here and paths are relative to it.
    root: PathBuf,
    /// The root relative to the work tree's top (`sub/dir/`, or empty).
    prefix: Vec<u8>,
}

impl Repo {
    /// The work tree `cwd` is in, or `None` outside any.
    async fn open(cwd: PathBuf) -> Result<Option<Repo>, Failure> {
        let root = blocking(move || Ok(Root::open(&cwd)?.path)).await?;
        let out =
            git::run(&root, &["rev-parse", "--is-inside-work-tree", "--show-prefix"], 64 * 1024).await?;
        // 128: not a repository (or one git will not read, e.g. owned by someone else).
        if out.code != Some(0) || !out.stdout.starts_with(b"true\n") {
            return Ok(None);
        }
        // The prefix is the rest, with one newline after it (a name may hold others).
        let mut prefix = out.stdout[5..].to_vec();
        if prefix.last() == Some(&b'\n') {
            prefix.pop();
        }
        Ok(Some(Repo { root, prefix }))
    }

    async fn git<A: AsRef<OsStr>>(&self, args: &[A], bound: usize) -> Result<git::Output, Failure> {
        let out = git::run(&self.root, args, bound).await?;
        match out.code {
            Some(0) => Ok(out),
            None if out.cut => Ok(out),
            _ => Err(Failure::Failed(out.stderr)),
        }
    }

    /// The branch and every change beneath the root (untracked files without counts), and the
    /// tree the work tree is compared with (`HEAD`, or the empty tree before the first commit).
    async fn collect(&self) -> Result<(Status, String, Vec<Change>, bool), Failure> {
        let st = self
            .git(
                &["status", "--porcelain=v2", "--branch", "-z", "--untracked-files=all", "--", "."],
                LIST_CAP,
            )
            .await?;
        let mut cut = st.cut;
        let status = parse::status(&st.stdout);
        let base = if status.oid.is_some() {
            "HEAD".to_owned()
        } else {
            let empty = self.git(&["hash-object", "-t", "tree", "--stdin"], 256).await?;
            String::from_utf8_lossy(&empty.stdout).trim().to_owned()
        };
        let diff = self
            .git(
                &[
                    "diff",
                    &base,
                    "-M",
                    "--raw",
                    "--numstat",
                    "-z",
                    "--no-ext-diff",
                    "--no-textconv",
                    "--relative",
                    "--",
                    ".",
                ],
                LIST_CAP,
            )
            .await?;
        cut |= diff.cut;
        let mut changes = parse::changes(&diff.stdout);
        for p in &status.untracked {
            if let Some(rel) = p.strip_prefix(self.prefix.as_slice()) {
                changes.push(Change {
                    path: rel.to_vec(),
                    old_path: None,
                    status: "untracked",
                    additions: 0,
                    deletions: 0,
                    binary: false,
                });
            }
        }
        changes.sort_by(|a, b| a.path.cmp(&b.path));
        if changes.len() > FILES_CAP {
            changes.truncate(FILES_CAP);
            cut = true;
        }
        Ok((status, base, changes, cut))
    }
}

/// `GET /changes?sessionId=`.
pub async fn summary(cwd: PathBuf) -> Resp {
    answer(summary_of(cwd).await)
}

async fn summary_of(cwd: PathBuf) -> Result<Value, Failure> {
    let Some(repo) = Repo::open(cwd).await? else {
        return Ok(json!({ "git": false }));
    };
    let (status, _, mut changes, mut cut) = repo.collect().await?;
    let root = repo.root.clone();
    let (changes, budget_cut) = blocking(move || {
        let root = Root::open(&root)?;
        let mut budget = COUNT_BUDGET;
        let mut out_of_budget = false;
        for c in changes.iter_mut().filter(|c| c.status == "untracked") {
            if budget == 0 {
                out_of_budget = true;
                continue;
            }
            (c.additions, c.binary) = count_lines(&root, Path::new(OsStr::from_bytes(&c.path)), &mut budget);
        }
        Ok((changes, out_of_budget))
    })
    .await?;
    cut |= budget_cut;
    let files: Vec<Value> = changes.iter().map(file_json).collect();
    Ok(json!({
        "git": true,
        "root": repo.root.display().to_string(),
        "branch": status.branch,
        "head": status.oid,
        "upstream": status.upstream,
        "ahead": status.ab.map(|a| a.0),
        "behind": status.ab.map(|a| a.1),
        "files": files,
        "truncated": cut,
    }))
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn file_json(c: &Change) -> Value {
    let mut v = json!({
        "path": lossy(&c.path), "status": c.status,
        "additions": c.additions, "deletions": c.deletions, "binary": c.binary,
    });
    if let Some(old) = &c.old_path {
        v["oldPath"] = lossy(old).into();
    }
    v
}

/// An untracked file's line count and whether it is binary, read through the root (a symlink
/// is one line: its target's name, as git would show it). `budget` bytes at most are read.
fn count_lines(root: &Root, rel: &Path, budget: &mut u64) -> (u64, bool) {
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK;
    let fd = match root.open_raw(rel, flags, nix::sys::stat::Mode::empty()) {
        Ok(fd) => fd,
        Err(nix::errno::Errno::ELOOP) => return (1, false),
        Err(_) => return (0, false),
    };
    let f = std::fs::File::from(fd);
    if !f.metadata().is_ok_and(|m| m.is_file()) {
        return (0, false);
    }
    let mut r = f.take(*budget);
    let mut buf = vec![0u8; 64 * 1024];
    let (mut lines, mut seen, mut last) = (0u64, 0usize, b'\n');
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if seen < SNIFF && buf[..n.min(SNIFF - seen)].contains(&0) {
            *budget = budget.saturating_sub(n as u64);
            return (0, true);
        }
        seen += n;
        *budget = budget.saturating_sub(n as u64);
        lines += buf[..n].iter().filter(|b| **b == b'\n').count() as u64;
        last = buf[n - 1];
    }
    if last != b'\n' {
        lines += 1;
    }
    (lines, false)
}

/// `GET /changes/diff?sessionId=&path=[&context=]`.
pub async fn diff(q: Query, cwd: PathBuf) -> Resp {
    answer(diff_of(q, cwd).await)
}

async fn diff_of(q: Query, cwd: PathBuf) -> Result<Value, Failure> {
    let context = q.u64("context").map_err(|m| Failure::Refused(Refusal::Bad(m)))?;
    let context = context.unwrap_or(CONTEXT_DEFAULT).min(CONTEXT_MAX);
    let requested = match q.bytes("path") {
        Some(p) if !p.is_empty() => p.to_vec(),
        _ => return Err(Refusal::Bad("`path` required: the changed file to show".into()).into()),
    };
    // Confined as the files API does it, before git hears of the path: `..`, outside absolute
    // paths and symlinks out are 403; a path that is gone (a deleted file) is fine.
    let check = cwd.clone();
    let rel = blocking(move || {
        let root = Root::open(&check)?;
        let rel = root.relative(&requested, &check)?;
        if rel.as_os_str().is_empty() {
            return Err(Refusal::Bad("`path` names the root: a file is expected".into()).into());
        }
        match root.open_beneath(&rel, OFlag::O_PATH) {
            Ok(fd) => {
                if nix::sys::stat::fstat(&fd).is_ok_and(|st| st.st_mode & 0o170000 == 0o040000) {
                    return Err(Refusal::Bad("the path is a directory: a file is expected".into()).into());
                }
                Ok(rel)
            }
            Err(Refusal::NotFound(_)) => Ok(rel),
            Err(r) => Err(r.into()),
        }
    })
    .await?;
    let Some(repo) = Repo::open(cwd).await? else {
        return Ok(json!({ "git": false }));
    };
    let (_, base, changes, _) = repo.collect().await?;
    let key = rel.as_os_str().as_bytes();
    let Some(change) = changes.into_iter().find(|c| c.path == key) else {
        return Err(Refusal::NotFound(format!("no uncommitted change to {}", rel.display())).into());
    };
    let mut v = file_json(&change);
    if let Some(o) = v.as_object_mut() {
        o.remove("additions");
        o.remove("deletions");
    }
    let (hunks, binary, cut) = if change.binary {
        (Vec::new(), true, false)
    } else if change.status == "untracked" {
        let root = repo.root.clone();
        blocking(move || untracked_hunk(&Root::open(&root)?, &rel)).await?
    } else {
        let ctx = format!("-U{context}");
        let mut args: Vec<&OsStr> =
            ["diff", &base, "-M", "--no-ext-diff", "--no-textconv", "--relative", &ctx, "--"]
                .into_iter()
                .map(OsStr::new)
                .collect();
        // A rename's old path too, so that git pairs the two (names as bytes, whatever they hold).
        args.extend(change.old_path.as_deref().map(OsStr::from_bytes));
        args.push(rel.as_os_str());
        let out = repo.git(&args, DIFF_CAP).await?;
        let (hunks, binary) = parse::hunks(&out.stdout, out.cut);
        (hunks, binary, out.cut)
    };
    v["binary"] = binary.into();
    v["truncated"] = cut.into();
    v["hunks"] = hunks.iter().map(hunk_json).collect::<Vec<_>>().into();
    Ok(v)
}

/// An untracked file as one hunk of added lines (git has no diff for it).
fn untracked_hunk(root: &Root, rel: &Path) -> Result<(Vec<Hunk>, bool, bool), Failure> {
    let fd = root.open_beneath(rel, OFlag::O_RDONLY | OFlag::O_NONBLOCK)?;
    let f = std::fs::File::from(fd);
    if !f.metadata().is_ok_and(|m| m.is_file()) {
        return Ok((Vec::new(), false, false));
    }
    let mut bytes = Vec::new();
    f.take(DIFF_CAP as u64 + 1).read_to_end(&mut bytes).map_err(|e| Failure::Internal(e.to_string()))?;
    if bytes[..bytes.len().min(SNIFF)].contains(&0) {
        return Ok((Vec::new(), true, false));
    }
    let cut = bytes.len() > DIFF_CAP;
    if cut {
        bytes.truncate(bytes.iter().rposition(|b| *b == b'\n').unwrap_or(0));
    }
    let text = String::from_utf8_lossy(&bytes);
    let body = text.strip_suffix('\n').unwrap_or(&text);
    if body.is_empty() && !cut {
        return Ok((Vec::new(), false, false));
    }
    let lines: Vec<parse::Line> = body
        .split('\n')
        .zip(1..)
        .map(|(t, n)| parse::Line { kind: '+', text: t.to_owned(), old_no: None, new_no: Some(n) })
        .collect();
    let n = lines.len() as u64;
    Ok((vec![Hunk { old_start: 0, old_lines: 0, new_start: 1, new_lines: n, lines }], false, cut))
}

fn hunk_json(h: &Hunk) -> Value {
    let lines: Vec<Value> = h
        .lines
        .iter()
        .map(|l| {
            let mut v = json!({ "kind": l.kind.to_string(), "text": l.text });
            if let Some(n) = l.old_no {
                v["oldNo"] = n.into();
            }
            if let Some(n) = l.new_no {
                v["newNo"] = n.into();
            }
            v
        })
        .collect();
    json!({
        "oldStart": h.old_start, "oldLines": h.old_lines,
        "newStart": h.new_start, "newLines": h.new_lines, "lines": lines,
    })
}
