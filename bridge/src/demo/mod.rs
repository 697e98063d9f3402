//! The built-in demo agent: a deterministic, scripted ACP v1 agent on stdio.
//!
//! It is the embedded default upstream when no agent is configured, and the fixture of every
//! test. No model is involved: a prompt streams a scripted reply, and keywords in the prompt
//! script the rest (see [`KEYWORDS_HELP`]). Sessions persist under the data directory so
//! `session/load` replays history after a restart.

mod store;
mod turn;

use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use store::{Store, StoredSession};
use tokio::io::{AsyncBufReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use zcode_shared::jsonrpc::{self, Id, RawKind, RawMessage, RpcError};

/// The keywords a prompt may contain, for `zcode-acp demo-agent --help`.
pub const KEYWORDS_HELP: &str = "\
Every prompt streams a thought, a plan, a tool call with its updates, several message chunks and a
usage update. Words in the prompt (alone, or with a leading `/`) script the rest of the turn:

  permission    ask `session/request_permission` (allow / reject); the reply says what was
                chosen; a `cancelled` outcome ends the turn with stopReason `cancelled`
  execute       the same for an `execute` tool call whose `rawInput.command` is a cargo command
                (nothing is run)
  together      ask the `permission` and the `execute` requests at once (two waiting together)
  permission:PATH  the same for a `read` tool call naming PATH (in `rawInput` as given, in
                `locations` resolved against the session cwd); nothing is read
  read:PATH     read PATH through the client (`fs/read_text_file`), relative to the session cwd
  write:PATH    write a line to PATH through the client (`fs/write_text_file`)
  long          a long turn (hundreds of chunks) that stops with stopReason `cancelled` on
                `session/cancel`
  hold          after the rest of the turn (`long` included), wait for `session/cancel`: the turn
                never ends on its own and stops with stopReason `cancelled`
  fail          the turn fails with a JSON-RPC error (-32603)
  elicit        ask `elicitation/create` (a form with one `name` field); the reply says what came back
                (only when the client advertised `elicitation.form`; otherwise it says it cannot ask)
  terminal      run `echo` through the client's terminal (`terminal/create`, `wait_for_exit`,
                `output`, `release`) and report its output
  markdown      reply with a table and a code block, after a tool call whose title has `code`
                and whose output has terminal colours

With --images the agent takes `image` blocks in prompts and its reply says what arrived (how many,
their types and decoded sizes); without it, a prompt with an image is refused (-32602).

Sessions are kept under <data dir>/demo-agent/, so `session/load` replays them after a restart.

For testing pass-through, the extension method `_demo/echo` answers {\"params\": \"<its params exactly
as received, as a string>\"} and, when the params name a sessionId, first sends that session a
`session/update` of a kind no ACP version defines, with `_meta` and number spellings a re-encoder
would change.";

/// How the demo agent runs.
#[derive(Clone, Debug)]
pub struct DemoOptions {
    /// Delay between streamed chunks.
    pub delay: Duration,
    /// Where its sessions are kept (`<data dir>/demo-agent`).
    pub data_dir: PathBuf,
    /// Offer `session/resume` (no replay) instead of `session/load`, like agents that cannot
    /// replay history.
    pub resume_only: bool,
    /// Take images in prompts (`promptCapabilities.image`); a turn says what arrived.
    pub images: bool,
}

/// Runs the agent on this process's stdin and stdout until stdin closes.
pub async fn run_stdio(opts: DemoOptions) -> std::io::Result<()> {
    run(opts, tokio::io::stdin(), tokio::io::stdout()).await
}

/// Runs the agent over any line-delimited byte streams until `input` closes.
pub async fn run<R, W>(opts: DemoOptions, input: R, output: W) -> std::io::Result<()>
where
    R: tokio::io::AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (tx, rx) = mpsc::channel::<String>(1024);
    let writer = tokio::spawn(write_lines(rx, output));
    let agent = Arc::new(Agent {
        store: Store::new(&opts.data_dir),
        opts,
        out: tx,
        next_id: AtomicU64::new(1),
        state: Mutex::new(State::default()),
    });
    let mut lines = BufReader::new(input).lines();
    while let Some(line) = lines.next_line().await? {
        if line.trim().is_empty() {
            continue;
        }
        agent.clone().handle_line(&line).await;
    }
    drop(agent);
    // Let queued output drain; turns still running end with the process.
    let _ = tokio::time::timeout(Duration::from_millis(200), writer).await;
    Ok(())
}

async fn write_lines<W: AsyncWrite + Unpin>(mut rx: mpsc::Receiver<String>, mut out: W) {
    while let Some(mut line) = rx.recv().await {
        line.push('\n');
        if out.write_all(line.as_bytes()).await.is_err() || out.flush().await.is_err() {
            return;
        }
    }
}

/// A live session: what is kept in memory beside the file.
struct Live {
    stored: StoredSession,
    mode: String,
    turns: u64,
    /// Serialises prompts of one session.
    turn_lock: Arc<tokio::sync::Mutex<()>>,
    /// Cancels the prompts received so far (replaced on every session/cancel).
    cancel: CancellationToken,
}

#[derive(Default)]
struct State {
    sessions: HashMap<String, Live>,
    /// Our requests to the client, waiting for their answers.
    pending: HashMap<Id, oneshot::Sender<Result<Value, RpcError>>>,
    /// The client advertised `elicitation.form` in `initialize` (ACP: ask only then).
    elicit_form: bool,
}

/// The agent: shared by the stdin loop and the turn tasks. The mutex is never held across
/// an `.await`.
pub(crate) struct Agent {
    opts: DemoOptions,
    store: Store,
    out: mpsc::Sender<String>,
    next_id: AtomicU64,
    state: Mutex<State>,
}

impl Agent {
    async fn send(&self, msg: Value) {
        self.send_line(msg.to_string()).await;
    }

    async fn send_line(&self, line: String) {
        // The writer only stops when stdout is gone; nothing left to tell anyone then.
        let _ = self.out.send(line).await;
    }

    /// `_demo/echo`: the params as received, byte for byte, and an update of an unknown kind.
    async fn echo(&self, raw: &RawMessage) {
        let Some(id) = raw.id.clone() else { return };
        if let Some(sid) = raw.session_id() {
            let sid = Value::from(sid);
            let params = format!(
                r#"{{"sessionId":{sid},"update":{{"sessionUpdate":"zz_future_kind","_meta":{{"zcode-test":[1.50,2e3]}},"value":123456789012345678901234567890}}}}"#
            );
            self.send_line(jsonrpc::notification_line("session/update", &params)).await;
        }
        let params = raw.params.as_deref().map_or("", |p| p.get());
        self.send(jsonrpc::response(&id, json!({"params": params}))).await;
    }

    /// Whether the client said it renders elicitation forms.
    pub(crate) fn takes_images(&self) -> bool {
        self.opts.images
    }

    pub(crate) fn can_elicit_form(&self) -> bool {
        self.state().elicit_form
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn handle_line(self: Arc<Self>, line: &str) {
        let msg = match RawMessage::parse(line) {
            Ok(m) => m,
            Err(e) => {
                // As the bridge does: a message whose envelope cannot be read has no id to
                // answer under.
                let err = RpcError::new(e.code(), e.to_string());
                return self.send(jsonrpc::error_response(None, &err)).await;
            }
        };
        match (msg.kind(), msg.id.clone()) {
            (RawKind::Request, _) if msg.method() == "_demo/echo" => self.echo(&msg).await,
            (RawKind::Request, Some(id)) => {
                let params = msg.params_value();
                let method = msg.method().to_owned();
                if method == "session/prompt" {
                    // The prompt is bound to the session's cancel token as it arrives, so a
                    // session/cancel sent after it cancels it even before its turn begins.
                    let cancel = params["sessionId"].as_str().and_then(|s| self.cancel_token(s));
                    // Turns run beside the input loop so cancels and answers get through.
                    tokio::spawn(async move {
                        let reply = turn::prompt(&self, &params, cancel.unwrap_or_default()).await;
                        self.reply(&id, reply).await;
                    });
                } else {
                    let reply = self.call(&method, &params).await;
                    // A new session's commands follow its answer: the client only knows the
                    // session id once it has the answer.
                    let follow = match (&reply, method.as_str()) {
                        (Ok(r), "session/new") => r["sessionId"].as_str().map(available_commands),
                        _ => None,
                    };
                    self.reply(&id, reply).await;
                    if let Some(f) = follow {
                        self.send(f).await;
                    }
                }
            }
            (RawKind::Notification, _) => {
                let params = msg.params.as_ref().map(|_| msg.params_value());
                self.notify(msg.method(), params.as_ref());
            }
            (RawKind::Response, Some(id)) => {
                let waiter = self.state().pending.remove(&id);
                if let Some(w) = waiter {
                    let error =
                        msg.error.as_deref().and_then(|e| serde_json::from_str::<Value>(e.get()).ok());
                    let answer = match error.and_then(|e| RpcError::from_response(&json!({"error": e}))) {
                        Some(e) => Err(e),
                        None => Ok(msg.result_as::<Value>().unwrap_or(Value::Null)),
                    };
                    let _ = w.send(answer);
                }
            }
            (RawKind::Request | RawKind::Response, None) => {}
        }
    }

    async fn reply(&self, id: &Id, reply: Result<Value, RpcError>) {
        let msg = match reply {
            Ok(result) => jsonrpc::response(id, result),
            Err(e) => jsonrpc::error_response(Some(id), &e),
        };
        self.send(msg).await;
    }

    fn notify(&self, method: &str, params: Option<&Value>) {
        if method == "session/cancel" {
            let id = params.and_then(|p| p.get("sessionId")).and_then(Value::as_str).unwrap_or_default();
            if let Some(live) = self.state().sessions.get_mut(id) {
                // Cancels every prompt received so far; later prompts get a fresh token.
                live.cancel.cancel();
                live.cancel = CancellationToken::new();
            }
        }
        // Every other notification (including `$/cancel_request`) needs nothing from us.
    }

    /// Sends a request to the client and waits for its answer.
    pub(crate) async fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let id = Id::from(self.next_id.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        self.state().pending.insert(id.clone(), tx);
        self.send(jsonrpc::request(&id, method, params)).await;
        rx.await.unwrap_or_else(|_| Err(RpcError::internal("the client went away")))
    }

    /// Streams a `session/update` and records it for replay.
    pub(crate) async fn update(&self, session_id: &str, update: Value) {
        self.record(session_id, &update);
        self.send(session_update(session_id, update)).await;
    }

    /// Records an update for replay without sending it (the user's own prompt).
    pub(crate) fn record(&self, session_id: &str, update: &Value) {
        let mut st = self.state();
        if let Some(live) = st.sessions.get_mut(session_id) {
            live.stored.history.push(update.clone());
        }
        drop(st);
        if let Err(e) = self.store.append(session_id, &json!({"update": update})) {
            tracing::warn!(session = session_id, error = %e, "demo agent cannot persist history");
        }
    }

    async fn call(&self, method: &str, params: &Value) -> Result<Value, RpcError> {
        match method {
            "initialize" => {
                let form = params["clientCapabilities"]["elicitation"].get("form");
                self.state().elicit_form = form.is_some_and(|f| !f.is_null());
                initialize(params, &self.opts)
            }
            "authenticate" => Ok(json!({})),
            "session/new" => self.new_session(params).await,
            "session/load" if !self.opts.resume_only => self.load_session(params, true).await,
            "session/resume" if self.opts.resume_only => self.load_session(params, false).await,
            "session/list" => self.list_sessions(params),
            "session/set_mode" => self.set_mode(params).await,
            _ => Err(RpcError::method_not_found(method)),
        }
    }

    async fn new_session(&self, params: &Value) -> Result<Value, RpcError> {
        let cwd = jsonrpc::required_str(params, "cwd")?;
        check_mcp_servers(params)?;
        let stored = StoredSession {
            id: store::new_id(),
            cwd: cwd.to_owned(),
            title: None,
            updated_at: zcode_shared::time::now_ms(),
            history: vec![],
        };
        self.store
            .create(&stored)
            .map_err(|e| RpcError::internal(format!("cannot store the session: {e}")))?;
        let id = stored.id.clone();
        self.state().sessions.insert(id.clone(), Live::new(stored));
        Ok(json!({"sessionId": id, "modes": modes("default")}))
    }

    /// `session/load` (`replay`: the history is sent first) or `session/resume` (no replay).
    async fn load_session(&self, params: &Value, replay: bool) -> Result<Value, RpcError> {
        let id = jsonrpc::required_str(params, "sessionId")?.to_owned();
        jsonrpc::required_str(params, "cwd")?;
        // Required by `session/load`, optional for `session/resume` (ACP v1).
        if replay || !params["mcpServers"].is_null() {
            check_mcp_servers(params)?;
        }
        let known = self.state().sessions.get(&id).map(|l| (l.stored.history.clone(), l.mode.clone()));
        let (history, mode) = match known {
            Some(k) => k,
            None => {
                let stored = self
                    .store
                    .load(&id)
                    .map_err(|e| RpcError::internal(format!("cannot read session {id}: {e}")))?
                    .ok_or_else(|| {
                        RpcError::new(jsonrpc::RESOURCE_NOT_FOUND, format!("session not found: {id}"))
                    })?;
                let history = stored.history.clone();
                self.state().sessions.insert(id.clone(), Live::new(stored));
                (history, "default".to_owned())
            }
        };
        // ACP: the agent replays the whole history as updates BEFORE it answers.
        for update in history.into_iter().filter(|_| replay) {
            self.send(session_update(&id, update)).await;
        }
        self.send(available_commands(&id)).await;
        Ok(json!({"modes": modes(&mode)}))
    }

    fn list_sessions(&self, params: &Value) -> Result<Value, RpcError> {
        let cwd = params.get("cwd").and_then(Value::as_str);
        let mut all =
            self.store.all().map_err(|e| RpcError::internal(format!("cannot list sessions: {e}")))?;
        all.retain(|s| cwd.is_none_or(|c| c == s.cwd));
        all.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then_with(|| a.id.cmp(&b.id)));
        let sessions: Vec<Value> = all
            .iter()
            .map(|s| {
                json!({"sessionId": s.id, "cwd": s.cwd, "title": s.title,
                       "updatedAt": zcode_shared::time::iso8601(s.updated_at)})
            })
            .collect();
        Ok(json!({"sessions": sessions, "nextCursor": null}))
    }

    async fn set_mode(&self, params: &Value) -> Result<Value, RpcError> {
        let id = jsonrpc::required_str(params, "sessionId")?;
        let mode = jsonrpc::required_str(params, "modeId")?;
        if !MODES.iter().any(|(m, _)| *m == mode) {
            return Err(RpcError::invalid_params(format!(
                "unknown mode `{mode}`: the demo has default and plan"
            )));
        }
        match self.state().sessions.get_mut(id) {
            Some(live) => live.mode = mode.to_owned(),
            None => return Err(session_not_found(id)),
        }
        self.update(id, json!({"sessionUpdate": "current_mode_update", "currentModeId": mode})).await;
        Ok(json!({}))
    }

    /// Looks a session up for a prompt: its turn lock and its cwd.
    pub(crate) fn begin_turn(&self, id: &str) -> Result<(Arc<tokio::sync::Mutex<()>>, String), RpcError> {
        let st = self.state();
        let live = st.sessions.get(id).ok_or_else(|| session_not_found(id))?;
        Ok((live.turn_lock.clone(), live.stored.cwd.clone()))
    }

    /// The session's current cancel token (what a prompt arriving now is cancelled by).
    fn cancel_token(&self, id: &str) -> Option<CancellationToken> {
        self.state().sessions.get(id).map(|l| l.cancel.clone())
    }

    /// Marks a turn as running (under the session's turn lock); returns its number.
    pub(crate) fn start_turn(&self, id: &str, text: &str) -> u64 {
        let now = zcode_shared::time::now_ms();
        let mut st = self.state();
        let Some(live) = st.sessions.get_mut(id) else { return 0 };
        live.turns += 1;
        live.stored.updated_at = now;
        let mut rec = json!({"updatedAt": now});
        if live.stored.title.is_none() {
            let title = turn::title_of(text);
            if !title.is_empty() {
                live.stored.title = Some(title.clone());
                rec["title"] = title.into();
            }
        }
        let n = live.turns;
        drop(st);
        let _ = self.store.append(id, &rec);
        n
    }

    /// The delay between streamed chunks.
    pub(crate) fn delay(&self) -> Duration {
        self.opts.delay
    }
}

impl Live {
    fn new(stored: StoredSession) -> Live {
        let turns =
            stored.history.iter().filter(|u| u["sessionUpdate"] == "user_message_chunk").count() as u64;
        Live {
            stored,
            mode: "default".into(),
            turns,
            turn_lock: Arc::default(),
            cancel: CancellationToken::new(),
        }
    }
}

const MODES: [(&str, &str); 2] = [("default", "Default"), ("plan", "Plan")];

fn modes(current: &str) -> Value {
    let available: Vec<Value> = MODES.iter().map(|(id, name)| json!({"id": id, "name": name})).collect();
    json!({"currentModeId": current, "availableModes": available})
}

fn available_commands(session_id: &str) -> Value {
    let cmds = [
        ("permission", "ask for a permission"),
        ("long", "a long turn to cancel"),
        ("fail", "fail the turn with an error"),
    ];
    let list: Vec<Value> = cmds.iter().map(|(n, d)| json!({"name": n, "description": d})).collect();
    session_update(
        session_id,
        json!({"sessionUpdate": "available_commands_update", "availableCommands": list}),
    )
}

fn session_update(session_id: &str, update: Value) -> Value {
    jsonrpc::notification("session/update", json!({"sessionId": session_id, "update": update}))
}

pub(crate) fn session_not_found(id: &str) -> RpcError {
    RpcError::new(jsonrpc::RESOURCE_NOT_FOUND, format!("session not found: {id}"))
}

fn check_mcp_servers(params: &Value) -> Result<(), RpcError> {
    match jsonrpc::required(params, "mcpServers")? {
        Value::Array(_) => Ok(()),
        _ => Err(RpcError::invalid_params("`mcpServers` must be an array")),
    }
}

fn initialize(params: &Value, opts: &DemoOptions) -> Result<Value, RpcError> {
    let resume_only = opts.resume_only;
    match jsonrpc::required(params, "protocolVersion")? {
        Value::Number(_) => {}
        _ => return Err(RpcError::invalid_params("`protocolVersion` must be a number")),
    }
    Ok(json!({
        "protocolVersion": 1,
        "agentCapabilities": {
            "loadSession": !resume_only,
            "promptCapabilities": {"image": opts.images, "audio": false, "embeddedContext": true},
            "mcpCapabilities": {"http": false, "sse": false},
            "sessionCapabilities": if resume_only { json!({"list": {}, "resume": {}}) } else { json!({"list": {}}) },
        },
        "authMethods": [],
        "agentInfo": {
            "name": "zcode-acp-demo",
            "title": "zcode-acp demo agent (scripted, no model)",
            "version": zcode_shared::VERSION,
        },
    }))
}
