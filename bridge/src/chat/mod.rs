//! `zcode-acp chat`: a terminal ACP client on a bridge of its own (origin `serve`, cwd pinned to
//! the project). What a remote create opens in a terminal window: the owner types here while a
//! phone watches (and answers) through the hub, and the other way round.
//!
//! Line-oriented, so it works in any terminal (and under tmux send-keys): type a prompt and
//! Enter; a permission question is answered with its number (whoever answers first wins);
//! Ctrl-C cancels the running turn, or quits when none runs; Ctrl-D quits. Another device's
//! prompt shows as `› other device: …`, and its turn's end (`_zcode/turn_end`, which the chat
//! asks its bridge for) brings the prompt marker back. A `--resume` the bridge cannot load
//! starts a fresh session instead (the window is never left without one).

mod render;

use crate::bounds::{Line, LineReader};
use render::Renderer;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::Stdio;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use zcode_shared::jsonrpc::{self, Id, RawMessage, RpcError};
use zcode_shared::text::strip_controls as inert;

/// How to run the chat.
#[derive(Clone, Debug)]
pub struct ChatOptions {
    /// The project directory (the bridge's pinned cwd).
    pub cwd: PathBuf,
    /// A session to resume (its history tail is shown first).
    pub resume: Option<String>,
    /// The `zcode-acp` executable, to start the bridge.
    pub exe: PathBuf,
    /// A named agent from config.json (`bridge --agent NAME`), if given.
    pub agent_name: Option<String>,
    /// The agent command (after `--`), if given.
    pub agent: Vec<String>,
    /// Where the bridge's log goes.
    pub log: Option<PathBuf>,
}

/// What a request of ours was for.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Purpose {
    Initialize,
    Session,
    Prompt,
}

struct Chat {
    out: std::io::Stdout,
    render: Renderer,
    to_bridge: tokio::process::ChildStdin,
    next_id: u64,
    pending: HashMap<u64, Purpose>,
    session: Option<String>,
    running: usize,
    /// A question waiting for the user's answer: (request id, option ids or empty for a form).
    question: Option<(Id, Vec<String>)>,
    /// Prompts typed before the session was ready, sent once it is.
    early: Vec<String>,
    /// The prompt marker is the last thing on screen (what comes next replaces it).
    at_prompt: bool,
    /// Stdout is a terminal (the marker can be erased in place).
    tty: bool,
    opts: ChatOptions,
}

/// Runs the chat until the user quits or the bridge goes away; returns the exit code.
pub async fn run(opts: ChatOptions) -> std::io::Result<i32> {
    let mut cmd = std::process::Command::new(&opts.exe);
    cmd.arg("bridge");
    if let Some(name) = &opts.agent_name {
        cmd.arg("--agent").arg(name);
    } else if !opts.agent.is_empty() {
        cmd.arg("--").args(&opts.agent);
    }
    let stderr = match &opts.log {
        Some(p) => Stdio::from(zcode_shared::paths::append_private(p)?),
        None => Stdio::null(),
    };
    // Its own process group: Ctrl-C in this terminal is the chat's to handle, not the bridge's.
    cmd.current_dir(&opts.cwd)
        .env("ZCODE_ACP_REMOTE_ORIGIN", "serve")
        .env("ZCODE_ACP_REMOTE_PIN_CWD", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr);
    let spawned = zcode_shared::procgroup::Group::spawn(&mut cmd)?;
    let bridge = spawned.group;
    let (Some(to_bridge), Some(from_bridge)) = (spawned.stdin, spawned.stdout) else {
        return Err(std::io::Error::other("the bridge's stdio was not captured"));
    };
    let (to_bridge, from_bridge) = (
        tokio::process::ChildStdin::from_std(to_bridge)?,
        tokio::process::ChildStdout::from_std(from_bridge)?,
    );
    let (msg_tx, mut msgs) = mpsc::channel::<RawMessage>(256);
    tokio::spawn(async move {
        // Bounded like the bridge's own reads: a line over the message limit is skipped unread.
        let mut lines = LineReader::new(from_bridge, crate::bounds::max_message());
        while let Ok(Some(line)) = lines.next().await {
            let Line::Text(line) = line else {
                tracing::warn!("the bridge sent a message over the size limit: skipped");
                continue;
            };
            if let Ok(m) = RawMessage::parse(&line) {
                if msg_tx.send(m).await.is_err() {
                    break;
                }
            }
        }
    });
    let (line_tx, mut lines) = mpsc::channel::<String>(16);
    tokio::spawn(async move {
        // Read lossily (a line that is not UTF-8 does not end the chat) and bounded (a line
        // over the message limit, piped in, is refused, said on stderr).
        let limit = crate::bounds::max_message();
        let mut stdin = LineReader::new(tokio::io::stdin(), limit);
        while let Ok(Some(line)) = stdin.next().await {
            let line = match line {
                Line::Text(line) => line.trim_end_matches(['\n', '\r']).to_owned(),
                Line::TooLong { size, .. } => {
                    let (size, limit) = (crate::bounds::size_text(size), crate::bounds::size_text(limit));
                    eprintln!("zcode-acp chat: a line of {size} is over the {limit} limit: not sent");
                    continue;
                }
            };
            if line_tx.send(line).await.is_err() {
                break;
            }
        }
    });
    let tty = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let mut chat = Chat {
        out: std::io::stdout(),
        render: Renderer::new(tty),
        to_bridge,
        next_id: 0,
        pending: HashMap::new(),
        session: None,
        running: 0,
        question: None,
        early: Vec::new(),
        at_prompt: false,
        tty,
        opts,
    };
    chat.say(&format!("zcode-acp chat in {} — starting the agent…\n", chat.opts.cwd.display()));
    // `turnEnd`: the bridge tells us when another device's turn ends, as it tells remotes.
    let init = json!({"protocolVersion": 1, "clientCapabilities": {"_meta": {"zcode": {"turnEnd": true}}},
        "clientInfo": {"name": "zcode-acp-chat", "version": zcode_shared::VERSION}});
    chat.request("initialize", init, Purpose::Initialize).await;
    // One listener for the chat's whole life: `ctrl_c()` made anew at each turn of the loop
    // saw only a Ctrl-C that came while it waited, and one pressed while a message was being
    // handled (a streaming turn keeps the loop busy) was lost (seen under load: the window
    // kept ticking after Ctrl-C).
    let mut interrupts = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let code = loop {
        tokio::select! {
            m = msgs.recv() => match m {
                Some(m) => chat.on_message(m).await,
                None => {
                    chat.say("\nthe bridge exited\n");
                    break 1;
                }
            },
            l = lines.recv() => match l {
                Some(l) => chat.on_line(l).await,
                None => break 0,
            },
            _ = interrupts.recv() => {
                if chat.running > 0 {
                    if let Some(sid) = chat.session.clone() {
                        chat.send(jsonrpc::notification("session/cancel", json!({"sessionId": sid}))).await;
                        chat.say("\n(cancelling…)\n");
                    }
                } else {
                    break 0;
                }
            }
        }
    };
    // Closing its stdin ends the bridge (and the agent with it).
    drop(chat);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(3), bridge.exited()).await;
    Ok(code)
}

impl Chat {
    fn say(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        self.at_prompt = false;
        let _ = self.out.write_all(text.as_bytes());
        let _ = self.out.flush();
    }

    /// What starts a line of output of its own: the marker erased when it is the last thing
    /// shown (on a pipe, a new line), else the end of whatever line is open.
    fn fresh_line(&mut self) -> &'static str {
        match (self.at_prompt, self.tty) {
            (true, true) => "\r\x1b[2K",
            (true, false) => "\n",
            (false, _) => self.render.break_line(),
        }
    }

    async fn send(&mut self, msg: Value) {
        let mut line = msg.to_string();
        line.push('\n');
        let _ = self.to_bridge.write_all(line.as_bytes()).await;
        let _ = self.to_bridge.flush().await;
    }

    async fn request(&mut self, method: &str, params: Value, purpose: Purpose) {
        self.next_id += 1;
        self.pending.insert(self.next_id, purpose);
        self.send(jsonrpc::request(&Id::from(self.next_id), method, params)).await;
    }

    fn prompt_marker(&mut self) {
        let b = self.render.break_line();
        self.say(&format!("{b}› "));
        self.at_prompt = true;
    }

    /// A turn ended: how, in words (nothing for a plain end), and the prompt marker again.
    fn turn_over(&mut self, reason: &str, error: Option<&str>) {
        let b = self.render.break_line();
        if let Some(words) = stop_words(reason, error) {
            self.say(&format!("{b}({words})\n"));
        } else {
            self.say(b);
        }
        self.prompt_marker();
    }

    async fn on_line(&mut self, line: String) {
        // The terminal's echo of the line ended it: the marker is no longer last.
        self.at_prompt = false;
        if let Some((id, options)) = self.question.take() {
            return self.answer(id, options, line.trim()).await;
        }
        let text = line.trim_end().to_owned();
        let Some(sid) = self.session.clone() else {
            self.early.push(text);
            return;
        };
        if text.trim().is_empty() {
            return self.prompt_marker();
        }
        self.running += 1;
        self.request(
            "session/prompt",
            json!({"sessionId": sid, "prompt": [{"type": "text", "text": text}]}),
            Purpose::Prompt,
        )
        .await;
    }

    async fn answer(&mut self, id: Id, options: Vec<String>, input: &str) {
        let result = if options.is_empty() {
            // A form question: one text answer, empty declines.
            if input.is_empty() {
                json!({"action": "decline"})
            } else {
                json!({"action": "accept", "content": {"answer": input}})
            }
        } else {
            match input.parse::<usize>().ok().and_then(|n| options.get(n.wrapping_sub(1))) {
                Some(opt) => json!({"outcome": {"outcome": "selected", "optionId": opt}}),
                None => {
                    self.say(&format!("answer with a number from 1 to {}: ", options.len()));
                    self.question = Some((id, options));
                    return;
                }
            }
        };
        self.send(jsonrpc::response(&id, result)).await;
    }

    async fn on_message(&mut self, m: RawMessage) {
        if m.method.is_some() {
            return self.on_request_or_notification(m.method(), m.id.clone(), &m.params_value()).await;
        }
        let key = match &m.id {
            Some(Id::Number(n)) => n.parse::<u64>().ok(),
            _ => None,
        };
        let Some(purpose) = key.and_then(|id| self.pending.remove(&id)) else { return };
        let result = m.result_as::<Value>().unwrap_or(Value::Null);
        let error = m.error.as_deref().map(|e| serde_json::from_str::<Value>(e.get()).unwrap_or(Value::Null));
        if let Some(err) = error {
            let msg = inert(err["message"].as_str().unwrap_or("error"));
            let b = self.fresh_line();
            let resuming = purpose == Purpose::Session && self.session.is_none();
            match (purpose, self.opts.resume.take_if(|_| resuming)) {
                // A resume the bridge cannot load (an unknown or foreign id): the window gets a
                // fresh session, as the contract says, not an error and nothing to type into.
                (Purpose::Session, Some(sid)) => {
                    self.say(&format!(
                        "{b}could not resume session {}: {msg} — starting a fresh session\n",
                        inert(&sid)
                    ));
                    let cwd = self.opts.cwd.display().to_string();
                    self.request("session/new", json!({"cwd": cwd, "mcpServers": []}), Purpose::Session)
                        .await;
                }
                (Purpose::Prompt, _) => {
                    self.say(&format!("{b}error: {msg}\n"));
                    self.running = self.running.saturating_sub(1);
                    self.prompt_marker();
                }
                (Purpose::Initialize | Purpose::Session, _) => self.say(&format!("{b}error: {msg}\n")),
            }
            return;
        }
        match purpose {
            Purpose::Initialize => {
                let cwd = self.opts.cwd.display().to_string();
                match self.opts.resume.clone() {
                    Some(sid) => {
                        let params = json!({"sessionId": sid, "cwd": cwd, "mcpServers": [], "_meta": {"zcode": {"limit": 50}}});
                        self.request("session/load", params, Purpose::Session).await;
                    }
                    None => {
                        self.request("session/new", json!({"cwd": cwd, "mcpServers": []}), Purpose::Session)
                            .await
                    }
                }
            }
            Purpose::Session => {
                let sid =
                    result["sessionId"].as_str().map(str::to_owned).or_else(|| self.opts.resume.clone());
                self.session = sid.clone();
                // From here on a user message is another device's prompt, not history.
                self.render.live = true;
                let b = self.render.break_line();
                self.say(&format!(
                    "{b}session {} — type a prompt and press Enter; Ctrl-C cancels a turn, Ctrl-D quits\n",
                    inert(&sid.unwrap_or_default())
                ));
                self.prompt_marker();
                for line in std::mem::take(&mut self.early) {
                    Box::pin(self.on_line(line)).await;
                }
            }
            Purpose::Prompt => {
                self.running = self.running.saturating_sub(1);
                self.turn_over(result["stopReason"].as_str().unwrap_or("end_turn"), None);
            }
        }
    }

    async fn on_request_or_notification(&mut self, method: &str, id: Option<Id>, params: &Value) {
        match method {
            "session/update" => {
                let u = &params["update"];
                if u["sessionUpdate"] == "session_info_update" {
                    if let Some(t) = u["title"].as_str() {
                        // Our own sequence, around a title with none left in it.
                        let clean = zcode_shared::text::title(t);
                        // Not `say`: a title changes nothing on screen, the marker stays last.
                        let _ = write!(self.out, "\x1b]0;{clean}\x07");
                        let _ = self.out.flush();
                    }
                }
                let text = self.render.update(u);
                if !text.is_empty() && self.at_prompt {
                    let b = self.fresh_line();
                    self.say(b);
                }
                self.say(&text);
            }
            // Another device's turn ended (ours end with our prompt's answer).
            crate::journal::turn_end::METHOD if params["promptedBy"] != "editor" => {
                if params["sessionId"].as_str() == self.session.as_deref() {
                    self.turn_over(
                        params["stopReason"].as_str().unwrap_or("end_turn"),
                        params["error"].as_str(),
                    );
                }
            }
            crate::journal::turn_end::METHOD => {}
            "session/request_permission" => {
                let (q, ids) = render::permission_question(params);
                let b = self.fresh_line();
                self.say(&format!("{b}{q}"));
                self.question = id.map(|id| (id, ids));
            }
            "elicitation/create" => {
                let msg = inert(params["message"].as_str().unwrap_or("the agent asks a question"));
                let b = self.fresh_line();
                self.say(&format!("{b}❓ {msg}\nyour answer (empty declines): "));
                self.question = id.map(|id| (id, vec![]));
            }
            "$/cancel_request" => {
                let target = Id::from_value(&params["requestId"]);
                if self.question.as_ref().is_some_and(|(id, _)| Some(id) == target.as_ref()) {
                    self.question = None;
                    self.say("\n(answered on another device)\n");
                }
            }
            _ => {
                // Anything else the bridge asks (none expected): say we cannot.
                if let Some(id) = id {
                    let err =
                        RpcError::new(jsonrpc::METHOD_NOT_FOUND, format!("the chat cannot answer {method}"));
                    self.send(jsonrpc::error_response(Some(&id), &err)).await;
                }
            }
        }
    }
}

/// A turn's stop reason in words; `None` for a plain end.
fn stop_words(reason: &str, error: Option<&str>) -> Option<String> {
    Some(match reason {
        "end_turn" => return None,
        "cancelled" => "cancelled".into(),
        "max_tokens" => "stopped: the reply reached the agent's token limit".into(),
        "max_turn_requests" => "stopped: the turn reached the agent's limit of requests".into(),
        "refusal" => "the agent refused to go on".into(),
        "error" => match error {
            Some(e) => format!("failed: {}", inert(e)),
            None => "failed".into(),
        },
        other => format!("stopped: {}", inert(other)),
    })
}
