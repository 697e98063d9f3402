//! `terminal/*`: commands the agent runs through the bridge, one process group each.
//!
//! A command runs directly (no shell) in its own process group with stdin closed; stdout and
//! stderr are pumped into one bounded buffer that drops from the front at a UTF-8 boundary.
//! A waiter task records the exit status in a `watch` channel once the output has drained, so
//! `terminal/wait_for_exit` wakes with the output complete. Killing signals the whole group,
//! so children the command started in the background die with it.

use super::{Roots, absolute_path, optional_u64};
use nix::fcntl::OFlag;
use nix::sys::signal::Signal;
use nix::sys::stat::Mode;
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::watch;
use zcode_shared::jsonrpc::{self, RESOURCE_NOT_FOUND, RpcError};
use zcode_shared::procgroup::Group;

/// The most output kept per terminal, whatever `outputByteLimit` asks: the bridge's memory is
/// not the agent's to spend.
pub(crate) const MAX_OUTPUT_BYTES: usize = 16 * 1024 * 1024;
/// How many terminals may exist (running or not) before `terminal/create` is refused.
pub(crate) const MAX_TERMINALS: usize = 128;
/// How long the exit status waits for the output pipes to close after the command exits; a
/// background child holding them open must not keep `wait_for_exit` hanging.
const DRAIN_GRACE: Duration = Duration::from_millis(500);
/// Never handed to a command: a terminal may be driven from the remote side.
const SCRUBBED_ENV: &[&str] = &["ZCODE_ACP_REMOTE_TOKEN"];

/// The terminals of one bridge, by id (`term_<n>`).
#[derive(Default)]
pub(crate) struct Terminals {
    next_id: AtomicU64,
    live: Mutex<HashMap<String, Arc<Terminal>>>,
}

/// One command: its process group, its output and, once known, its exit.
struct Terminal {
    /// Dropped (released, or the bridge stops): killed, all of it.
    group: Group,
    output: Arc<Mutex<Output>>,
    exit: watch::Receiver<Option<Exit>>,
}

/// How a command ended, as ACP spells it: an exit code or a signal name.
#[derive(Clone, Debug, PartialEq)]
struct Exit {
    code: Option<i32>,
    signal: Option<String>,
}

/// The captured output of stdout and stderr together.
#[derive(Debug)]
struct Output {
    bytes: VecDeque<u8>,
    limit: usize,
    truncated: bool,
}

impl Terminals {
    /// Serves `terminal/create` {command, args?, env?, cwd?, outputByteLimit?} → {terminalId}.
    pub(crate) async fn create(&self, params: &Value, roots: &Roots) -> Result<Value, RpcError> {
        let command = jsonrpc::required_str(params, "command")?;
        if command.is_empty() || command.contains('\0') {
            return Err(RpcError::invalid_params("`command` must be a non-empty program name or path"));
        }
        let args = string_array(params, "args")?;
        let env = env_pairs(params)?;
        let (cwd_fd, cwd) = working_dir(params, roots).await?;
        let limit = optional_u64(params, "outputByteLimit")?
            .map_or(MAX_OUTPUT_BYTES, |l| usize::try_from(l).unwrap_or(usize::MAX).min(MAX_OUTPUT_BYTES));
        if lock(&self.live).len() >= MAX_TERMINALS {
            return Err(RpcError::internal(format!(
                "too many terminals (at most {MAX_TERMINALS}); release some with terminal/release"
            )));
        }
        let mut cmd = std::process::Command::new(command);
        for name in SCRUBBED_ENV {
            cmd.env_remove(name);
        }
        cmd.args(&args)
            .envs(env)
            // The directory opened beneath the root, through the child's copy of its fd: what
            // the command runs in is what was checked, whatever is renamed in between.
            .current_dir(format!("/proc/self/fd/{}", cwd_fd.as_raw_fd()))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // Its own group, so a kill reaches what it spawns.
        let terminal = Terminal::spawn(cmd, command, limit)?;
        drop(cwd_fd);
        let id = format!("term_{}", self.next_id.fetch_add(1, Ordering::Relaxed) + 1);
        tracing::debug!(terminal = %id, command, cwd = %cwd.display(), "terminal started");
        lock(&self.live).insert(id.clone(), Arc::new(terminal));
        Ok(json!({"terminalId": id}))
    }

    /// Serves `terminal/output` → {output, truncated, exitStatus?}.
    pub(crate) fn output(&self, params: &Value) -> Result<Value, RpcError> {
        let terminal = self.get(params)?;
        // Exit first: it is recorded after the output drained, so output read after it is whole.
        let exit = terminal.exit.borrow().clone();
        let (output, truncated) = {
            let mut out = lock(&terminal.output);
            (String::from_utf8_lossy(out.bytes.make_contiguous()).into_owned(), out.truncated)
        };
        let mut reply = json!({"output": output, "truncated": truncated});
        if let Some(exit) = exit {
            reply["exitStatus"] = exit.to_json();
        }
        Ok(reply)
    }

    /// Serves `terminal/wait_for_exit` → {exitCode, signal}, once the command has exited.
    pub(crate) async fn wait_for_exit(&self, params: &Value) -> Result<Value, RpcError> {
        let terminal = self.get(params)?;
        let mut rx = terminal.exit.clone();
        let exit = rx.wait_for(Option::is_some).await.map(|e| e.clone());
        match exit {
            Ok(Some(exit)) => Ok(exit.to_json()),
            _ => Err(RpcError::internal("the terminal's waiter stopped before the command exited")),
        }
    }

    /// Serves `terminal/kill` → null: kills the group, keeps the terminal and its output.
    pub(crate) fn kill(&self, params: &Value) -> Result<Value, RpcError> {
        self.get(params)?.kill();
        Ok(Value::Null)
    }

    /// Serves `terminal/release` → null: kills the group if running and forgets the terminal.
    pub(crate) fn release(&self, params: &Value) -> Result<Value, RpcError> {
        let id = jsonrpc::required_str(params, "terminalId")?;
        let terminal = lock(&self.live).remove(id).ok_or_else(|| unknown(id))?;
        terminal.kill();
        Ok(Value::Null)
    }

    /// Kills and forgets every terminal: their ids mean nothing to a restarted agent.
    pub(crate) fn kill_all(&self) {
        let all: Vec<_> = lock(&self.live).drain().map(|(_, t)| t).collect();
        for terminal in all {
            terminal.kill();
        }
    }

    fn get(&self, params: &Value) -> Result<Arc<Terminal>, RpcError> {
        let id = jsonrpc::required_str(params, "terminalId")?;
        lock(&self.live).get(id).cloned().ok_or_else(|| unknown(id))
    }
}

impl Drop for Terminals {
    fn drop(&mut self) {
        self.kill_all();
    }
}

impl Terminal {
    /// Starts `cmd` with its output pumps and its waiter.
    fn spawn(mut cmd: std::process::Command, shown: &str, limit: usize) -> Result<Terminal, RpcError> {
        let spawned = Group::spawn(&mut cmd).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                RpcError::new(RESOURCE_NOT_FOUND, format!("command not found: {shown}"))
            }
            _ => RpcError::internal(format!("cannot run `{shown}`: {e}")),
        })?;
        let group = spawned.group;
        let pipes = spawned.stdout.zip(spawned.stderr).and_then(|(o, e)| {
            Some((
                tokio::process::ChildStdout::from_std(o).ok()?,
                tokio::process::ChildStderr::from_std(e).ok()?,
            ))
        });
        let Some((stdout, stderr)) = pipes else {
            return Err(RpcError::internal(format!("`{shown}` started without its pipes")));
        };
        let output = Arc::new(Mutex::new(Output::new(limit)));
        let pumps = [tokio::spawn(pump(stdout, output.clone())), tokio::spawn(pump(stderr, output.clone()))];
        let (tx, rx) = watch::channel(None);
        let exited = group.exit_future();
        tokio::spawn(async move {
            let status = exited.await;
            let _ = tokio::time::timeout(DRAIN_GRACE, futures_join(pumps)).await;
            let _ = tx.send(Some(Exit::from_status(status)));
        });
        Ok(Terminal { group, output, exit: rx })
    }

    /// SIGKILLs the process group (nothing, once its leader was reaped).
    fn kill(&self) {
        self.group.signal(Signal::SIGKILL);
    }
}

impl Exit {
    fn from_status(status: ExitStatus) -> Exit {
        let signal = status.signal().map(|n| match Signal::try_from(n) {
            Ok(sig) => sig.as_str().to_owned(),
            Err(_) => format!("SIG{n}"),
        });
        Exit { code: status.code(), signal }
    }

    fn to_json(&self) -> Value {
        json!({"exitCode": self.code, "signal": self.signal})
    }
}

impl Output {
    fn new(limit: usize) -> Output {
        Output { bytes: VecDeque::new(), limit, truncated: false }
    }

    /// Appends, then drops from the front past the limit, up to the next UTF-8 char boundary.
    fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend(chunk);
        if self.bytes.len() > self.limit {
            let mut cut = self.bytes.len() - self.limit;
            while self.bytes.get(cut).is_some_and(|b| b & 0xC0 == 0x80) {
                cut += 1;
            }
            self.bytes.drain(..cut);
            self.truncated = true;
        }
    }
}

/// Copies one pipe into the shared output until EOF (or a read error, which ends it too).
async fn pump<R: AsyncRead + Unpin>(mut pipe: R, output: Arc<Mutex<Output>>) {
    let mut buf = vec![0u8; 8 * 1024];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => lock(&output).push(&buf[..n]),
        }
    }
}

/// Waits for every task; a panicked pump counts as finished.
async fn futures_join(tasks: [tokio::task::JoinHandle<()>; 2]) {
    for task in tasks {
        let _ = task.await;
    }
}

/// The working directory, opened beneath its root (`O_PATH`): `cwd` if given, else the
/// session's first root. Returns it with the path to show.
async fn working_dir(params: &Value, roots: &Roots) -> Result<(OwnedFd, PathBuf), RpcError> {
    let shown = match params.get("cwd") {
        None | Some(Value::Null) => roots.first().map(|root| root.path.clone()).ok_or_else(|| {
            RpcError::invalid_params("the session has no directory the bridge may run commands in")
        })?,
        Some(_) => absolute_path(params, "cwd")?,
    };
    let fd = roots.open(&shown, OFlag::O_PATH | OFlag::O_DIRECTORY, Mode::empty()).await?;
    if !Path::new("/proc/self/fd").is_dir() {
        return Err(RpcError::internal("/proc is not mounted: the bridge cannot run commands"));
    }
    Ok((fd, shown))
}

/// `args`: an optional array of strings.
fn string_array(params: &Value, field: &str) -> Result<Vec<String>, RpcError> {
    let bad = || RpcError::invalid_params(format!("`{field}` must be an array of strings"));
    match params.get(field) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => {
            items.iter().map(|v| v.as_str().map(str::to_owned).ok_or_else(bad)).collect()
        }
        Some(_) => Err(bad()),
    }
}

/// `env`: an optional array of {name, value}; names must be usable as environment names.
fn env_pairs(params: &Value) -> Result<Vec<(String, String)>, RpcError> {
    let Some(items) = params.get("env").filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let items = items.as_array().ok_or_else(|| RpcError::invalid_params("`env` must be an array"))?;
    items
        .iter()
        .map(|item| {
            let name = jsonrpc::required_str(item, "name")?;
            let value = jsonrpc::required_str(item, "value")?;
            if name.is_empty() || name.contains(['=', '\0']) || value.contains('\0') {
                return Err(RpcError::invalid_params(format!(
                    "`env` entry `{name}` is not a valid variable"
                )));
            }
            Ok((name.to_owned(), value.to_owned()))
        })
        .collect()
}

fn unknown(id: &str) -> RpcError {
    RpcError::new(RESOURCE_NOT_FOUND, format!("unknown terminal: {id}"))
}

/// Locks, ignoring poison: the guarded data stays consistent even if a holder panicked.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixture {
        _dir: tempfile::TempDir,
        root: PathBuf,
        terms: Terminals,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap().join("proj");
        std::fs::create_dir(&root).unwrap();
        Fixture { _dir: dir, root, terms: Terminals::default() }
    }

    impl Fixture {
        async fn create(&self, params: Value) -> Result<String, RpcError> {
            let roots = Roots::resolve(std::slice::from_ref(&self.root)).await;
            let v = self.terms.create(&params, &roots).await?;
            Ok(v["terminalId"].as_str().unwrap().to_owned())
        }

        async fn wait(&self, id: &str) -> Value {
            let params = json!({"terminalId": id});
            let wait = self.terms.wait_for_exit(&params);
            // A guard against a hang, not a timing assertion.
            tokio::time::timeout(Duration::from_secs(30), wait).await.unwrap().unwrap()
        }

        fn output(&self, id: &str) -> Result<Value, RpcError> {
            self.terms.output(&json!({"sessionId": "s", "terminalId": id}))
        }
    }

    fn sh(script: &str) -> Value {
        json!({"sessionId": "s", "command": "sh", "args": ["-c", script]})
    }

    #[tokio::test]
    async fn captures_stdout_stderr_and_exit_code() {
        let f = fixture();
        let id = f.create(sh("echo hi; echo err 1>&2; exit 3")).await.unwrap();
        assert!(id.starts_with("term_"));
        assert_eq!(f.wait(&id).await, json!({"exitCode": 3, "signal": null}));
        let out = f.output(&id).unwrap();
        let text = out["output"].as_str().unwrap();
        assert!(text.contains("hi") && text.contains("err"), "{text:?}");
        assert_eq!(out["truncated"], json!(false));
        assert_eq!(out["exitStatus"], json!({"exitCode": 3, "signal": null}));
    }

    #[tokio::test]
    async fn runs_in_the_root_with_the_given_env() {
        let f = fixture();
        let id = f
            .create(json!({"command": "sh", "args": ["-c", "pwd; echo $FOO"], "env": [{"name": "FOO", "value": "bar"}]}))
            .await
            .unwrap();
        f.wait(&id).await;
        let out = f.output(&id).unwrap();
        assert_eq!(out["output"], json!(format!("{}\nbar\n", f.root.display())));
    }

    #[tokio::test]
    async fn output_limit_drops_from_the_start() {
        let f = fixture();
        let mut params = sh("printf abcdefghij");
        params["outputByteLimit"] = json!(4);
        let id = f.create(params).await.unwrap();
        f.wait(&id).await;
        let out = f.output(&id).unwrap();
        assert_eq!(out["output"], json!("ghij"));
        assert_eq!(out["truncated"], json!(true));
    }

    #[test]
    fn truncation_lands_on_a_char_boundary() {
        let mut out = Output::new(4);
        out.push("aé€".as_bytes()); // 1 + 2 + 3 bytes: keeping 4 would split `é`
        assert_eq!(String::from_utf8(out.bytes.make_contiguous().to_vec()).unwrap(), "€");
        assert!(out.truncated);
        let mut out = Output::new(0);
        out.push(b"xyz");
        assert!(out.bytes.is_empty() && out.truncated);
    }

    #[tokio::test]
    async fn kill_reports_a_signal_and_keeps_the_output() {
        let f = fixture();
        let id = f.create(sh("echo started; sleep 30 & wait")).await.unwrap();
        assert_eq!(f.output(&id).unwrap().get("exitStatus"), None);
        assert_eq!(f.terms.kill(&json!({"terminalId": id})).unwrap(), Value::Null);
        let exit = f.wait(&id).await;
        assert_eq!(exit, json!({"exitCode": null, "signal": "SIGKILL"}));
        assert!(f.output(&id).unwrap()["exitStatus"]["signal"].is_string());
    }

    #[tokio::test]
    async fn release_forgets_the_terminal() {
        let f = fixture();
        let id = f.create(json!({"command": "sleep", "args": ["30"]})).await.unwrap();
        let terminal = f.terms.get(&json!({"terminalId": id})).unwrap();
        assert_eq!(f.terms.release(&json!({"terminalId": id})).unwrap(), Value::Null);
        assert_eq!(f.output(&id).unwrap_err().code, RESOURCE_NOT_FOUND);
        assert_eq!(f.terms.kill(&json!({"terminalId": id})).unwrap_err().code, RESOURCE_NOT_FOUND);
        let mut rx = terminal.exit.clone();
        let exit = rx.wait_for(Option::is_some).await.unwrap().clone().unwrap();
        assert_eq!(exit.signal.as_deref(), Some("SIGKILL"));
    }

    #[tokio::test]
    async fn refuses_cwd_outside_and_bad_params() {
        let f = fixture();
        let outside = f.root.parent().unwrap().to_path_buf();
        let err = f.create(json!({"command": "true", "cwd": outside})).await.unwrap_err();
        assert_eq!(err.code, jsonrpc::INVALID_PARAMS);
        let err = f.create(json!({"command": "true", "cwd": f.root.join("..")})).await.unwrap_err();
        assert_eq!(err.code, jsonrpc::INVALID_PARAMS);
        let err = f.create(json!({"args": []})).await.unwrap_err();
        assert!(err.message.contains("`command`"), "{}", err.message);
        let err = f.create(json!({"command": "true", "args": [1]})).await.unwrap_err();
        assert_eq!(err.code, jsonrpc::INVALID_PARAMS);
        let err = f.create(json!({"command": "true", "env": [{"name": "A=B", "value": ""}]})).await;
        assert_eq!(err.unwrap_err().code, jsonrpc::INVALID_PARAMS);
        let err = f.create(json!({"command": "/no/such/program"})).await.unwrap_err();
        assert_eq!(err.code, RESOURCE_NOT_FOUND);
        assert_eq!(f.output("term_999").unwrap_err().code, RESOURCE_NOT_FOUND);
    }

    #[tokio::test]
    async fn a_cwd_swapped_for_an_outside_symlink_never_runs_a_command_outside() {
        let f = fixture();
        let outside = f.root.parent().unwrap().join("outside");
        std::fs::create_dir_all(f.root.join("d")).unwrap();
        std::fs::write(f.root.join("d/f"), "inside").unwrap();
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("f"), "OUTSIDE").unwrap();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let swapper = {
            let (d, stop) = (f.root.join("d"), stop.clone());
            std::thread::spawn(move || {
                let mut swaps = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    std::fs::rename(&d, d.with_extension("real")).unwrap();
                    std::os::unix::fs::symlink(&outside, &d).unwrap();
                    std::fs::remove_file(&d).unwrap();
                    std::fs::rename(d.with_extension("real"), &d).unwrap();
                    swaps += 1;
                    // A moment in place, so that some commands get to run inside.
                    std::thread::sleep(Duration::from_micros(100));
                }
                swaps
            })
        };
        let (mut ran, mut leaked) = (0, 0);
        for _ in 0..1500 {
            let params = json!({"command": "cat", "args": ["f"], "cwd": f.root.join("d")});
            let Ok(id) = f.create(params).await else { continue };
            f.wait(&id).await;
            let out = f.output(&id).unwrap()["output"].as_str().unwrap().to_owned();
            f.terms.release(&json!({"terminalId": id})).unwrap();
            leaked += usize::from(out.contains("OUTSIDE"));
            ran += usize::from(out == "inside");
        }
        stop.store(true, Ordering::Relaxed);
        let swaps = swapper.join().unwrap();
        assert_eq!(leaked, 0, "{leaked} commands ran outside the root ({ran} inside)");
        assert!(swaps > 1000, "only {swaps} swaps: the race was not exercised");
        assert!(ran > 0, "no command ever ran inside");
    }

    #[tokio::test]
    async fn no_roots_means_no_terminals() {
        let terms = Terminals::default();
        let roots = Roots::resolve(&["/".into()]).await;
        let err = terms.create(&json!({"command": "true"}), &roots).await.unwrap_err();
        assert_eq!(err.code, jsonrpc::INVALID_PARAMS);
        let err = terms.create(&json!({"command": "true", "cwd": "/tmp"}), &roots).await.unwrap_err();
        assert_eq!(err.code, jsonrpc::INVALID_PARAMS);
    }

    #[tokio::test]
    async fn kill_all_kills_running_terminals() {
        let f = fixture();
        let a = f.create(json!({"command": "sleep", "args": ["30"]})).await.unwrap();
        let b = f.create(sh("sleep 30")).await.unwrap();
        let held: Vec<_> =
            [&a, &b].iter().map(|id| f.terms.get(&json!({"terminalId": id})).unwrap()).collect();
        f.terms.kill_all();
        assert_eq!(f.output(&a).unwrap_err().code, RESOURCE_NOT_FOUND);
        for terminal in held {
            let mut rx = terminal.exit.clone();
            let exit = rx.wait_for(Option::is_some).await.unwrap().clone().unwrap();
            assert_eq!(exit.signal.as_deref(), Some("SIGKILL"));
        }
    }
}
