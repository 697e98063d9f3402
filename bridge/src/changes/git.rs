//! Running the `git` program for the changes routes: a fixed argument list (paths only after
//! `--`, read as literal pathspecs), no `GIT_*` variable of the bridge's environment, no system
//! config, no pager, colour, external diff, textconv or fsmonitor; in a process group of its
//! own, killed past a timeout; its output read up to a bound (the rest cut, and said so).

use std::ffi::OsStr;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use zcode_shared::procgroup::Group;

/// How long one git command may run.
pub const TIMEOUT: Duration = Duration::from_secs(15);

/// Options before the subcommand, on every run. `--literal-pathspecs`: a name such as `*` or
/// `:(top)x` is that file, never a pattern; `core.quotepath=off` with `-z`: names come as bytes.
const GLOBAL: [&str; 9] = [
    "--no-pager",
    "--literal-pathspecs",
    "--no-optional-locks",
    "-c",
    "core.quotepath=off",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "color.ui=false",
];

/// What a git run printed.
#[derive(Debug)]
pub struct Output {
    /// Its standard output, at most the bound asked for.
    pub stdout: Vec<u8>,
    /// More than the bound was printed: `stdout` is cut and the command was killed.
    pub cut: bool,
    /// Its exit code (`None` when it was killed or died of a signal).
    pub code: Option<i32>,
    /// The start of its standard error.
    pub stderr: String,
}

/// Why git gave no output.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// The program is not installed.
    #[error("the `git` program is not available on this machine")]
    Missing,
    /// It could not be started or read.
    #[error("git could not run: {0}")]
    Io(#[from] std::io::Error),
    /// It ran past [`TIMEOUT`].
    #[error("git did not answer within {} s", TIMEOUT.as_secs())]
    Timeout,
}

/// Runs `git GLOBAL… args…` in `dir`, keeping at most `bound` bytes of its output.
pub async fn run<A: AsRef<OsStr>>(dir: &Path, args: &[A], bound: usize) -> Result<Output, GitError> {
    let mut cmd = std::process::Command::new("git");
    cmd.args(GLOBAL).args(args).current_dir(dir);
    for (name, _) in std::env::vars_os() {
        if name.as_encoded_bytes().starts_with(b"GIT_") {
            cmd.env_remove(name);
        }
    }
    cmd.env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        // Git's own words ("Binary files … differ") are read in English.
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let spawned = match Group::spawn(&mut cmd) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(GitError::Missing),
        Err(e) => return Err(e.into()),
    };
    // Dropped on every way out: whatever is left of the group is killed and reaped.
    let group = spawned.group;
    let (Some(stdout), Some(stderr)) = (spawned.stdout, spawned.stderr) else {
        return Err(std::io::Error::other("no pipes").into());
    };
    let mut stdout = tokio::process::ChildStdout::from_std(stdout)?;
    let mut stderr = tokio::process::ChildStderr::from_std(stderr)?;
    let out = async {
        let mut buf = Vec::new();
        let read = (&mut stdout).take(bound as u64 + 1).read_to_end(&mut buf).await;
        if buf.len() > bound {
            // Enough: git is stopped rather than left blocked on a full pipe.
            group.signal(nix::sys::signal::Signal::SIGKILL);
        }
        read.map(|_| buf)
    };
    let err = async {
        let mut buf = Vec::new();
        // Past its start, stderr is drained (not kept) so that git never blocks on it.
        let _ = (&mut stderr).take(2048).read_to_end(&mut buf).await;
        let _ = tokio::io::copy(&mut stderr, &mut tokio::io::sink()).await;
        buf
    };
    let Ok((out, err)) = tokio::time::timeout(TIMEOUT, async { tokio::join!(out, err) }).await else {
        return Err(GitError::Timeout);
    };
    let mut stdout = out?;
    let cut = stdout.len() > bound;
    stdout.truncate(bound);
    let code = if cut {
        None
    } else {
        match tokio::time::timeout(TIMEOUT, group.exited()).await {
            Ok(status) => status.code(),
            Err(_) => return Err(GitError::Timeout),
        }
    };
    Ok(Output { stdout, cut, code, stderr: String::from_utf8_lossy(&err).trim().to_owned() })
}
