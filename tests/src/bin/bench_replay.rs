//! `scripts/bench-replay`: how long a client waits for `session/load` with a tail of 50 from
//! sessions of 1k, 10k and 100k journaled messages, and how much memory the bridge holds.
//!
//! Cold: the session is not live in the bridge (the agent loads it, the journal serves the
//! tail). Warm: the session is live (served from the journal only). Times are measured on the
//! client, from sending the request to receiving the answer, over loopback.

use serde_json::json;
use std::time::{Duration, Instant};
use zcode_shared::store::{NewMessage, Store};
use zcode_tests::{Bridge, Home, demo_agent, initialize, new_session, prompt};

fn main() {
    let sizes: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let sizes = if sizes.is_empty() { vec![1_000, 10_000, 100_000] } else { sizes };
    println!("| messages | cold load, limit 50 | warm load p50 | warm load p99 | bridge RSS after |");
    println!("| ---: | ---: | ---: | ---: | ---: |");
    for n in sizes {
        bench(n);
    }
}

fn bench(n: usize) {
    let home = Home::new();
    let sid = {
        let mut b = Bridge::start(&home, &demo_agent(0));
        initialize(&mut b.editor, json!({}));
        let sid = new_session(&mut b.editor, home.path());
        b.editor.call("session/prompt", prompt(&sid, "seed"));
        assert!(b.editor.close_then_exited());
        sid
    };
    fill(&home, &sid, n);

    let b = Bridge::start(&home, &demo_agent(0));
    let load =
        json!({"sessionId": sid, "cwd": home.path(), "mcpServers": [], "_meta": {"zcode": {"limit": 50}}});
    let mut first = b.remote();
    initialize(&mut first, json!({}));
    let t = Instant::now();
    let (r, _) = first.call("session/load", load.clone());
    let cold = t.elapsed();
    assert_eq!(r["result"]["replayMeta"]["totalMessages"].as_u64(), Some(n as u64 + 5), "{r}");

    // Warm loads from a plain blocking client (no polling thread between us and the socket).
    let mut warm = Vec::new();
    let mut ws = blocking_client(b.port);
    call(&mut ws, 1, "initialize", json!({"protocolVersion": 1, "clientCapabilities": {}}));
    for i in 0..50 {
        let t = Instant::now();
        let (r, seen) = call(&mut ws, 10 + i, "session/load", load.clone());
        warm.push(t.elapsed());
        assert!(r["result"]["replayMeta"]["replayedMessages"].as_u64().unwrap_or(0) >= 50, "{r}");
        assert!(seen >= 50);
    }
    warm.sort();
    let rss = zcode_tests::rss_kib(b.editor.pid());
    println!(
        "| {n} | {} | {} | {} | {} MiB |",
        ms(cold),
        ms(warm[warm.len() / 2]),
        ms(warm[warm.len() * 99 / 100]),
        rss / 1024
    );
}

type Ws = tungstenite::WebSocket<std::net::TcpStream>;

fn blocking_client(port: u16) -> Ws {
    use tungstenite::client::IntoClientRequest;
    let mut req = format!("ws://127.0.0.1:{port}/acp").into_client_request().expect("request");
    req.headers_mut()
        .insert("authorization", format!("Bearer {}", zcode_tests::TEST_TOKEN).parse().expect("header"));
    let stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    tungstenite::client::client(req, stream).expect("handshake").0
}

/// Sends a request and reads until its answer: (answer, messages before it).
fn call(ws: &mut Ws, id: u64, method: &str, params: serde_json::Value) -> (serde_json::Value, usize) {
    let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    ws.send(tungstenite::Message::text(msg.to_string())).expect("send");
    let mut seen = 0;
    loop {
        let frame = ws.read().expect("read");
        let Ok(text) = frame.to_text() else { continue };
        let v: serde_json::Value = serde_json::from_str(text).expect("JSON");
        if v["id"] == id && v.get("method").is_none() {
            return (v, seen);
        }
        seen += 1;
    }
}

/// Appends `n` messages (turns of user, agent, tool, agent) straight into the journal.
fn fill(home: &Home, sid: &str, n: usize) {
    let mut store = Store::open_in(&home.path().join("data")).expect("journal");
    let text = "lorem ipsum dolor sit amet ".repeat(6);
    store
        .write(|w| {
            for i in 0..n {
                let (kind, body) = match i % 4 {
                    0 => ("user", json!({"sessionUpdate": "user_message_chunk", "messageId": format!("u{i}"), "content": {"type": "text", "text": format!("question {i}")}})),
                    2 => ("tool", json!({"sessionUpdate": "tool_call", "toolCallId": format!("t{i}"), "title": "Read file", "status": "completed"})),
                    _ => ("agent", json!({"sessionUpdate": "agent_message_chunk", "messageId": format!("a{i}"), "content": {"type": "text", "text": text}})),
                };
                w.append(sid, &NewMessage { msg_id: format!("m{i}"), kind: kind.into(), body: body.to_string() }, 1)?;
            }
            Ok(())
        })
        .expect("fill the journal");
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}
