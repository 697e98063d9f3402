//! One scripted turn of the demo agent (`session/prompt`): what it streams, and the keywords
//! that ask for permissions, client file access, a long cancellable turn, a turn held until
//! cancelled, or a failure.

use super::{Agent, session_not_found};
use serde_json::{Value, json};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use zcode_shared::jsonrpc::{self, RpcError};

/// Chunks in a `long` turn.
const LONG_CHUNKS: usize = 600;
/// The shortest pause between chunks of a `long` turn, so it stays long at delay 0.
const LONG_MIN_DELAY: Duration = Duration::from_millis(20);

/// A `long` turn's chunk count and the shortest pause between its chunks: 600 and 20 ms, or
/// what the test knobs `ZCODE_ACP_TEST_LONG_CHUNKS` and `ZCODE_ACP_TEST_LONG_MS` say (a test
/// that needs a turn running, not a turn of 12 s, makes it shorter).
fn long_shape(env: &dyn zcode_shared::env::Env) -> (usize, Duration) {
    let knob = |name| zcode_shared::env::test_knob(env, name).and_then(|v| v.parse::<u64>().ok());
    let chunks = knob("ZCODE_ACP_TEST_LONG_CHUNKS").map_or(LONG_CHUNKS, |n| n as usize);
    let delay = knob("ZCODE_ACP_TEST_LONG_MS").map_or(LONG_MIN_DELAY, Duration::from_millis);
    (chunks, delay)
}

/// Why a turn stopped early.
enum Stop {
    Cancelled,
    Failed(RpcError),
}

/// What the prompt's keywords ask for.
#[derive(Debug, Default, PartialEq)]
struct Script {
    permission: bool,
    /// `execute`: ask permission to run a command.
    execute: bool,
    /// `together`: `permission` and `execute` asked at once (two requests waiting together).
    together: bool,
    long: bool,
    hold: bool,
    fail: bool,
    elicit: bool,
    terminal: bool,
    markdown: bool,
    reads: Vec<String>,
    writes: Vec<String>,
    /// `permission:PATH`: paths to ask permission to read.
    read_permissions: Vec<String>,
}

fn script_of(text: &str) -> Script {
    let mut s = Script::default();
    for raw in text.split_whitespace() {
        let word = raw.strip_prefix('/').unwrap_or(raw);
        if let Some(p) = word.strip_prefix("read:").filter(|p| !p.is_empty()) {
            s.reads.push(p.to_owned());
            continue;
        }
        if let Some(p) = word.strip_prefix("permission:").filter(|p| !p.is_empty()) {
            s.read_permissions.push(p.to_owned());
            continue;
        }
        if let Some(p) = word.strip_prefix("write:").filter(|p| !p.is_empty()) {
            s.writes.push(p.to_owned());
            continue;
        }
        match word.trim_end_matches(['.', ',', ';', '!', '?']).to_ascii_lowercase().as_str() {
            "permission" => s.permission = true,
            "execute" => s.execute = true,
            "together" => s.together = true,
            "long" => s.long = true,
            "hold" => s.hold = true,
            "fail" => s.fail = true,
            "elicit" => s.elicit = true,
            "terminal" => s.terminal = true,
            "markdown" => s.markdown = true,
            _ => {}
        }
    }
    s
}

/// A session title from a prompt: first non-empty line, whitespace flattened, 80 chars.
pub(crate) fn title_of(text: &str) -> String {
    let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    line.split_whitespace().collect::<Vec<_>>().join(" ").chars().take(80).collect()
}

/// Runs `session/prompt`: the answer is `{stopReason, usage}` or a JSON-RPC error.
pub(crate) async fn prompt(
    agent: &Agent,
    params: &Value,
    cancel: CancellationToken,
) -> Result<Value, RpcError> {
    let sid = jsonrpc::required_str(params, "sessionId")?;
    let blocks = jsonrpc::required(params, "prompt")?
        .as_array()
        .ok_or_else(|| RpcError::invalid_params("`prompt` must be an array of content blocks"))?;
    let text: Vec<&str> =
        blocks.iter().filter(|b| b["type"] == "text").filter_map(|b| b["text"].as_str()).collect();
    let text = text.join("\n");
    let images = images_of(blocks, agent.takes_images())?;
    let (lock, cwd) = agent.begin_turn(sid)?;
    let _one_turn_at_a_time = lock.lock().await;
    let n = agent.start_turn(sid, &text);
    if n == 0 {
        return Err(session_not_found(sid));
    }
    agent.record(
        sid,
        &json!({"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": text}}),
    );
    let turn = Turn { agent, sid, n, cwd, cancel, images };
    let outcome = turn.run(&text).await;
    match outcome {
        Ok(()) => Ok(json!({"stopReason": "end_turn", "usage": turn_usage(&text)})),
        Err(Stop::Cancelled) => Ok(json!({"stopReason": "cancelled", "usage": turn_usage(&text)})),
        Err(Stop::Failed(e)) => Err(e),
    }
}

struct Turn<'a> {
    agent: &'a Agent,
    sid: &'a str,
    n: u64,
    cwd: String,
    cancel: CancellationToken,
    /// What the prompt's image blocks were: `(mimeType, decoded bytes)`.
    images: Vec<(String, usize)>,
}

/// The prompt's image blocks as `(mimeType, decoded bytes)`; refused when the agent does not
/// take images (it said so in `initialize`) or a block is not a base64 image.
fn images_of(blocks: &[Value], takes: bool) -> Result<Vec<(String, usize)>, RpcError> {
    let mut out = Vec::new();
    for b in blocks.iter().filter(|b| b["type"] == "image") {
        if !takes {
            return Err(RpcError::invalid_params(
                "this agent does not take images (promptCapabilities.image is false)",
            ));
        }
        let (Some(mime), Some(data)) = (b["mimeType"].as_str(), b["data"].as_str()) else {
            return Err(RpcError::invalid_params("an image block needs `mimeType` and base64 `data`"));
        };
        let valid = data.len() % 4 == 0
            && data.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'='));
        if !mime.starts_with("image/") || !valid {
            return Err(RpcError::invalid_params(
                "an image block needs an image/* `mimeType` and base64 `data`",
            ));
        }
        let pad = data.bytes().rev().take_while(|c| *c == b'=').count();
        out.push((mime.to_owned(), data.len() / 4 * 3 - pad));
    }
    Ok(out)
}

/// The markdown the `markdown` keyword replies with: a table and a code block.
const MARKDOWN_REPLY: &str = "| Crate | Role |\n| --- | :-: |\n| `shared` | config, store |\n| `hub` | the public entry |\n\n\
```rust\nfn main() {\n    let n = 42; // the answer\n    println!(\"{n}\");\n}\n```\n";

impl Turn<'_> {
    async fn run(&self, text: &str) -> Result<(), Stop> {
        let script = script_of(text);
        self.update(
            json!({"sessionUpdate": "agent_thought_chunk", "messageId": format!("thought_{}", self.n),
            "content": {"type": "text", "text": format!("The user asked: {}", title_of(text))}}),
        )
        .await?;
        if script.fail {
            self.say("Failing this turn, as the `fail` keyword asks.").await?;
            return Err(Stop::Failed(RpcError::internal(
                "the demo agent failed this turn on purpose (keyword `fail`)",
            )));
        }
        self.update(plan(&["Read the prompt", "Answer"], 1)).await?;
        let call = format!("call_{}_think", self.n);
        self.update(json!({"sessionUpdate": "tool_call", "toolCallId": call, "title": "Count the words",
            "kind": "think", "status": "pending"}))
            .await?;
        self.update(
            json!({"sessionUpdate": "tool_call_update", "toolCallId": call, "status": "in_progress"}),
        )
        .await?;
        let words = text.split_whitespace().count();
        self.update(json!({"sessionUpdate": "tool_call_update", "toolCallId": call, "status": "completed",
            "content": [text_content(&format!("{words} words"))]}))
            .await?;
        if script.together {
            // Both asked before either is answered, as an agent with parallel tool calls does.
            let (a, b) = tokio::join!(self.permission(), self.execute_permission());
            a?;
            b?;
        } else {
            if script.permission {
                self.permission().await?;
            }
            if script.execute {
                self.execute_permission().await?;
            }
        }
        for (i, path) in script.read_permissions.iter().enumerate() {
            self.read_permission(i, path).await?;
        }
        if script.elicit {
            self.elicit().await?;
        }
        if script.terminal {
            self.terminal().await?;
        }
        for path in &script.reads {
            self.read(path).await?;
        }
        for path in &script.writes {
            self.write(path).await?;
        }
        if script.long {
            self.long().await?;
        }
        if script.markdown {
            self.markdown().await?;
        }
        if !self.images.is_empty() {
            let list: Vec<String> = self.images.iter().map(|(m, n)| format!("{m} {n} bytes")).collect();
            self.say(&format!("Received {} image(s): {}. ", self.images.len(), list.join(", "))).await?;
        }
        if script.hold {
            // A turn a test can rely on to be running, however slow the machine: only
            // `session/cancel` ends it.
            self.cancel.cancelled().await;
            return Err(Stop::Cancelled);
        }
        self.say(&format!(
            "This is the zcode-acp demo agent, a script with no model behind it. You said: \"{}\".",
            title_of(text)
        ))
        .await?;
        self.update(plan(&["Read the prompt", "Answer"], 2)).await?;
        // The session's cost so far (cumulative, like a real agent's): a fixed price a turn.
        let cost = TURN_COST_USD * self.n as f64;
        self.update(json!({"sessionUpdate": "usage_update", "used": 1000 * self.n + text.len() as u64,
            "size": 200_000, "cost": {"amount": cost, "currency": "USD"}}))
            .await
    }

    /// The `markdown` keyword: a tool call titled with `code` whose output has terminal
    /// colours, then a reply with a table and a code block.
    async fn markdown(&self) -> Result<(), Stop> {
        let call = format!("call_{}_test", self.n);
        self.update(json!({"sessionUpdate": "tool_call", "toolCallId": call, "title": "Run `cargo test`",
            "kind": "execute", "status": "in_progress"}))
            .await?;
        let out = "\u{1b}[1m\u{1b}[32mtest result: ok\u{1b}[0m. 3 passed; \u{1b}[31m0 failed\u{1b}[0m\u{1b}]0;title\u{7}\n";
        self.update(tool_update(&call, "completed", out)).await?;
        self.say(MARKDOWN_REPLY).await
    }

    /// Waits the configured delay, or stops if the turn is cancelled.
    async fn pause(&self, delay: Duration) -> Result<(), Stop> {
        if self.cancel.is_cancelled() {
            return Err(Stop::Cancelled);
        }
        tokio::select! {
            () = tokio::time::sleep(delay) => Ok(()),
            () = self.cancel.cancelled() => Err(Stop::Cancelled),
        }
    }

    async fn update(&self, update: Value) -> Result<(), Stop> {
        self.pause(self.agent.delay()).await?;
        self.agent.update(self.sid, update).await;
        Ok(())
    }

    /// Streams `text` as agent message chunks of a few words each, under one messageId.
    async fn say(&self, text: &str) -> Result<(), Stop> {
        let words: Vec<&str> = text.split_inclusive(' ').collect();
        for chunk in words.chunks(4) {
            self.update(
                json!({"sessionUpdate": "agent_message_chunk", "messageId": format!("msg_{}", self.n),
                "content": {"type": "text", "text": chunk.concat()}}),
            )
            .await?;
        }
        Ok(())
    }

    /// Sends a request to the client; a cancel of the turn stops waiting for it.
    async fn ask(&self, method: &str, params: Value) -> Result<Result<Value, RpcError>, Stop> {
        tokio::select! {
            r = self.agent.request(method, params) => Ok(r),
            () = self.cancel.cancelled() => Err(Stop::Cancelled),
        }
    }

    async fn permission(&self) -> Result<(), Stop> {
        let call = format!("call_{}_permission", self.n);
        let path = self.resolve("demo.txt");
        let (old, new) = ("hello\nworld", "hello\nbrave new world");
        let tool = json!({"toolCallId": call, "title": "Touch demo.txt (needs your permission)",
            "kind": "edit", "status": "pending", "locations": [{"path": path, "line": 2}],
            "rawInput": {"file_path": path, "old_string": "world", "new_string": "brave new world"},
            "content": [{"type": "diff", "path": path, "oldText": old, "newText": new}]});
        self.ask_permission(&call, tool).await
    }

    /// An `execute` tool call asking to run a command (nothing is run).
    async fn execute_permission(&self) -> Result<(), Stop> {
        let call = format!("call_{}_execute", self.n);
        let command = "cargo test --workspace -- --nocapture";
        let tool = json!({"toolCallId": call, "title": format!("Run `{command}`"),
            "kind": "execute", "status": "pending", "locations": [{"path": self.cwd}],
            "rawInput": {"command": command, "cwd": self.cwd, "timeout_ms": 120000}});
        self.ask_permission(&call, tool).await
    }

    /// A `read` tool call naming `path` (as given in `rawInput`, resolved in `locations`) that
    /// asks permission: what a hook deciding on reads sees from a real agent.
    async fn read_permission(&self, i: usize, path: &str) -> Result<(), Stop> {
        let call = format!("call_{}_permission_{i}", self.n);
        let tool = json!({"toolCallId": call, "title": format!("Read {path} (needs your permission)"),
            "kind": "read", "status": "pending", "locations": [{"path": self.resolve(path)}],
            "rawInput": {"path": path}});
        self.ask_permission(&call, tool).await
    }

    /// Announces `tool`, asks `session/request_permission` for it and says what was chosen.
    async fn ask_permission(&self, call: &str, tool: Value) -> Result<(), Stop> {
        let mut announce = tool.clone();
        announce["sessionUpdate"] = "tool_call".into();
        self.update(announce).await?;
        let options = json!([
            {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
            {"optionId": "allow_always", "name": "Always allow", "kind": "allow_always"},
            {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
        ]);
        let answer = self
            .ask(
                "session/request_permission",
                json!({"sessionId": self.sid, "toolCall": tool, "options": options}),
            )
            .await?;
        let outcome = match answer {
            Ok(v) => v,
            Err(e) => {
                self.finish_tool(call, "failed", &format!("permission request failed: {}", e.message))
                    .await?;
                return self.say(&format!("The permission request failed: {}. ", e.message)).await;
            }
        };
        match (outcome["outcome"]["outcome"].as_str(), outcome["outcome"]["optionId"].as_str()) {
            (Some("selected"), Some(opt @ ("allow" | "allow_always"))) => {
                self.finish_tool(call, "completed", &format!("allowed ({opt})")).await?;
                self.say(&format!("Permission granted ({opt}). ")).await
            }
            (Some("selected"), Some(opt)) => {
                self.finish_tool(call, "failed", &format!("rejected ({opt})")).await?;
                self.say(&format!("Permission denied ({opt}). ")).await
            }
            (Some("cancelled"), _) => {
                self.agent.update(self.sid, tool_update(call, "failed", "cancelled")).await;
                Err(Stop::Cancelled)
            }
            _ => {
                self.finish_tool(call, "failed", "unreadable permission outcome").await?;
                self.say("The permission answer was not understood; treating it as a rejection. ").await
            }
        }
    }

    async fn elicit(&self) -> Result<(), Stop> {
        if !self.agent.can_elicit_form() {
            return self
                .say("This client cannot answer questions (no `elicitation.form` capability). ")
                .await;
        }
        let params = json!({"sessionId": self.sid, "mode": "form", "message": "What is your name?",
            "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}});
        match self.ask("elicitation/create", params).await? {
            Ok(v) => match v["action"].as_str() {
                Some("accept") => self.say(&format!("You answered {}. ", v["content"])).await,
                Some(other) => self.say(&format!("The question was answered with `{other}`. ")).await,
                None => self.say("The answer to the question was not understood. ").await,
            },
            Err(e) => self.say(&format!("The question failed: {}. ", e.message)).await,
        }
    }

    async fn terminal(&self) -> Result<(), Stop> {
        let created = self
            .ask(
                "terminal/create",
                json!({"sessionId": self.sid, "command": "echo", "args": ["zcode terminal says hi"]}),
            )
            .await?;
        let tid = match created {
            Ok(v) => v["terminalId"].as_str().unwrap_or_default().to_owned(),
            Err(e) => return self.say(&format!("Could not start a terminal: {}. ", e.message)).await,
        };
        let ids = json!({"sessionId": self.sid, "terminalId": tid});
        let exit = self.ask("terminal/wait_for_exit", ids.clone()).await?;
        let output = self.ask("terminal/output", ids.clone()).await?;
        let _ = self.ask("terminal/release", ids).await?;
        match (exit, output) {
            (Ok(exit), Ok(out)) => {
                let text = out["output"].as_str().unwrap_or_default().trim().to_owned();
                self.say(&format!("The terminal printed \"{text}\" and exited with {}. ", exit["exitCode"]))
                    .await
            }
            (Err(e), _) | (_, Err(e)) => self.say(&format!("The terminal failed: {}. ", e.message)).await,
        }
    }

    async fn finish_tool(&self, call: &str, status: &str, text: &str) -> Result<(), Stop> {
        self.update(tool_update(call, status, text)).await
    }

    fn resolve(&self, path: &str) -> String {
        if path.starts_with('/') {
            path.to_owned()
        } else {
            format!("{}/{path}", self.cwd.trim_end_matches('/'))
        }
    }

    async fn read(&self, path: &str) -> Result<(), Stop> {
        let abs = self.resolve(path);
        let call = format!("call_{}_read_{}", self.n, path.len());
        self.update(
            json!({"sessionUpdate": "tool_call", "toolCallId": call, "title": format!("Read {path}"),
            "kind": "read", "status": "in_progress", "locations": [{"path": abs}]}),
        )
        .await?;
        match self.ask("fs/read_text_file", json!({"sessionId": self.sid, "path": abs})).await? {
            Ok(v) => {
                let content = v["content"].as_str().unwrap_or_default();
                let first = content.lines().next().unwrap_or("");
                let lines = content.lines().count();
                self.finish_tool(&call, "completed", &format!("{lines} lines")).await?;
                self.say(&format!("{path} has {lines} lines; the first is \"{first}\". ")).await
            }
            Err(e) => {
                self.finish_tool(&call, "failed", &e.message).await?;
                self.say(&format!("Could not read {path}: {}. ", e.message)).await
            }
        }
    }

    async fn write(&self, path: &str) -> Result<(), Stop> {
        let abs = self.resolve(path);
        let content = format!("written by the zcode-acp demo agent, turn {}\n", self.n);
        let call = format!("call_{}_write_{}", self.n, path.len());
        self.update(
            json!({"sessionUpdate": "tool_call", "toolCallId": call, "title": format!("Write {path}"),
            "kind": "edit", "status": "in_progress", "locations": [{"path": abs}],
            "content": [{"type": "diff", "path": abs, "oldText": null, "newText": content}]}),
        )
        .await?;
        let params = json!({"sessionId": self.sid, "path": abs, "content": content});
        match self.ask("fs/write_text_file", params).await? {
            Ok(_) => {
                self.finish_tool(&call, "completed", "written").await?;
                self.say(&format!("Wrote {path}. ")).await
            }
            Err(e) => {
                self.finish_tool(&call, "failed", &e.message).await?;
                self.say(&format!("Could not write {path}: {}. ", e.message)).await
            }
        }
    }

    async fn long(&self) -> Result<(), Stop> {
        let (chunks, min_delay) = long_shape(&zcode_shared::env::ProcessEnv);
        let delay = self.agent.delay().max(min_delay);
        for i in 1..=chunks {
            self.pause(delay).await?;
            self.agent
                .update(
                    self.sid,
                    json!({"sessionUpdate": "agent_message_chunk",
                    "messageId": format!("msg_{}_long", self.n),
                    "content": {"type": "text", "text": format!("tick {i} ")}}),
                )
                .await;
        }
        Ok(())
    }
}

/// What a demo turn "costs", in US dollars.
const TURN_COST_USD: f64 = 0.0025;

/// A turn's token counts (ACP's unstable `usage` of a prompt answer), made up from the prompt's
/// length so the usage screens show something in a demo.
fn turn_usage(text: &str) -> Value {
    let (input, thought, output) = (800 + text.len() as u64, 20, 40 + text.len() as u64 / 4);
    json!({"inputTokens": input, "outputTokens": output, "thoughtTokens": thought,
        "totalTokens": input + output + thought})
}

fn text_content(text: &str) -> Value {
    json!({"type": "content", "content": {"type": "text", "text": text}})
}

fn tool_update(call: &str, status: &str, text: &str) -> Value {
    json!({"sessionUpdate": "tool_call_update", "toolCallId": call, "status": status,
        "content": [text_content(text)]})
}

/// A two-step plan with the first `done` entries completed and the next one in progress.
fn plan(steps: &[&str], done: usize) -> Value {
    let entries: Vec<Value> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let status = match i.cmp(&done) {
                std::cmp::Ordering::Less => "completed",
                std::cmp::Ordering::Equal => "in_progress",
                std::cmp::Ordering::Greater => "pending",
            };
            json!({"content": s, "priority": "medium", "status": status})
        })
        .collect();
    json!({"sessionUpdate": "plan", "entries": entries})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keywords_are_whole_words_with_optional_slash() {
        let s = script_of("please ask /permission, then read:a.txt write:/tmp/b and go long! permission:c");
        assert!(s.permission && s.long && !s.fail && !s.hold);
        assert!(script_of("long, then hold.").hold);
        assert_eq!(s.reads, vec!["a.txt"]);
        assert_eq!(s.read_permissions, vec!["c"]);
        assert_eq!(s.writes, vec!["/tmp/b"]);
        assert_eq!(script_of("permissions are fine; failure too"), Script::default());
        assert!(script_of("/fail").fail);
    }

    #[test]
    fn image_blocks_are_counted_when_taken_and_refused_otherwise() {
        let blocks = [
            json!({"type": "text", "text": "hi"}),
            json!({"type": "image", "mimeType": "image/png", "data": "AAECAw=="}),
        ];
        assert_eq!(images_of(&blocks, true).unwrap(), vec![("image/png".to_owned(), 4)]);
        let refused = images_of(&blocks, false).unwrap_err();
        assert!(refused.message.contains("does not take images"), "{}", refused.message);
        let bad = [json!({"type": "image", "mimeType": "text/html", "data": "AAEC"})];
        assert!(images_of(&bad, true).is_err());
        let not_base64 = [json!({"type": "image", "mimeType": "image/png", "data": "<svg>"})];
        assert!(images_of(&not_base64, true).is_err());
    }

    #[test]
    fn a_long_turn_is_600_chunks_20_ms_apart_unless_the_test_knobs_say_otherwise() {
        let mut env = std::collections::HashMap::new();
        assert_eq!(long_shape(&env), (600, Duration::from_millis(20)));
        env.insert("ZCODE_ACP_TEST_LONG_CHUNKS".to_owned(), "300".to_owned());
        env.insert("ZCODE_ACP_TEST_LONG_MS".to_owned(), "10".to_owned());
        assert_eq!(long_shape(&env), (300, Duration::from_millis(10)));
    }

    #[test]
    fn titles_take_the_first_non_empty_line_flattened_to_80_chars() {
        assert_eq!(title_of("\n\n  Fix   the\tlogin bug  \nmore"), "Fix the login bug");
        assert_eq!(title_of(&"é".repeat(100)).chars().count(), 80);
        assert_eq!(title_of("   \n  "), "");
    }
}
