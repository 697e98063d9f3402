//! The two child processes `bench-bridge` runs besides the bridge, as modes of its own binary:
//! the reference (a bare tokio-tungstenite echo server) and a scripted agent that streams
//! timestamped `session/update`s at a set rate.

use serde_json::{Value, json};
use std::io::{BufRead, Write};
use std::time::{Duration, Instant};
use zcode_shared::jsonrpc::{self, Id, RpcError};

/// A bare tokio-tungstenite echo server on 127.0.0.1 (an OS-picked port, printed on stdout):
/// the floor a WebSocket round trip can cost in this runtime. It runs on the bridge's runtime
/// (multi-threaded, one worker per CPU) with the bridge's socket buffers, so the difference is
/// what the bridge does with a message.
pub fn echo_server() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.expect("bind");
        println!("{}", listener.local_addr().expect("address").port());
        let _ = std::io::stdout().flush();
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let config = WebSocketConfig::default().read_buffer_size(8 * 1024).write_buffer_size(0);
                let Ok(mut ws) = tokio_tungstenite::accept_async_with_config(stream, Some(config)).await
                else {
                    return;
                };
                while let Some(Ok(msg)) = ws.next().await {
                    if (msg.is_text() || msg.is_binary()) && ws.send(msg).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
}

/// The scripted agent, on stdio. `initialize`, `session/new`, `session/load` and `_demo/echo`
/// are answered at once; a prompt whose text is `stream PHASE COUNT RATE` streams COUNT
/// `agent_message_chunk`s (each its own message, so each is one journaled row) at RATE per
/// second, each carrying `bench:PHASE:SEQ:NANOS` (NANOS: the wall clock just before the line
/// is written), then ends the turn.
pub fn agent() {
    let stdin = std::io::stdin();
    let mut sessions = 0u64;
    for line in stdin.lock().lines() {
        let Ok(line) = line else { return };
        let Ok(msg) = serde_json::from_str::<Value>(&line) else { continue };
        let Some(id) = Id::from_value(&msg["id"]) else { continue };
        let params = &msg["params"];
        let result = match msg["method"].as_str().unwrap_or_default() {
            "initialize" => {
                json!({"protocolVersion": 1, "agentCapabilities": {"loadSession": true}, "authMethods": []})
            }
            "session/new" => {
                sessions += 1;
                json!({"sessionId": format!("bench-{}-{sessions}", std::process::id())})
            }
            "session/load" => json!({}),
            "_demo/echo" => json!({"params": params.to_string()}),
            "session/prompt" => {
                let sid = params["sessionId"].as_str().unwrap_or_default().to_owned();
                let text = params["prompt"][0]["text"].as_str().unwrap_or_default().to_owned();
                // The turn streams on its own thread: the agent keeps reading meanwhile.
                std::thread::spawn(move || {
                    stream(&sid, &text);
                    write_line(&jsonrpc::response(&id, json!({"stopReason": "end_turn"})).to_string());
                });
                continue;
            }
            m => {
                let e = RpcError::method_not_found(m);
                write_line(&jsonrpc::error_response(Some(&id), &e).to_string());
                continue;
            }
        };
        write_line(&jsonrpc::response(&id, result).to_string());
    }
}

fn write_line(line: &str) {
    let mut out = std::io::stdout().lock();
    // Stdout is line-buffered: the newline makes this one write(2).
    let _ = out.write_all(line.as_bytes()).and_then(|()| out.write_all(b"\n")).and_then(|()| out.flush());
}

/// Streams `stream PHASE COUNT RATE` (see [`agent`]), paced against the clock so a late
/// wake-up is caught up on rather than slowing the rate.
fn stream(sid: &str, text: &str) {
    let words: Vec<u64> = text.split_whitespace().skip(1).filter_map(|w| w.parse().ok()).collect();
    let [phase, count, rate] = words[..] else { return };
    let start = Instant::now();
    for seq in 0..count {
        let due = start + Duration::from_secs_f64(seq as f64 / rate.max(1) as f64);
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        // Written by hand (no serializer between the clock and the write): the stamp is as
        // late as it can be.
        let nanos = crate::wall_nanos();
        let line = format!(
            r#"{{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"{sid}","update":{{"sessionUpdate":"agent_message_chunk","messageId":"b{phase}-{seq}","content":{{"type":"text","text":"bench:{phase}:{seq}:{nanos}"}}}}}}}}"#
        );
        write_line(&line);
    }
}
