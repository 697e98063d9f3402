//! A protocol client following one session through the hub's relay, as a phone does: it
//! notices a dead line (a `$/ping` unanswered), reconnects at once and then every 100 ms, and
//! reloads the session either by number (`afterSeq`/`epoch`) or with a plain tail replay of 50
//! (today's reconnect). It keeps what a transcript would show (each message's chunks) and
//! every number it received, for the counts at the end, and says when it caught up with a
//! target the controller sets.

use serde_json::{Value, json};
use std::collections::HashMap;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tungstenite::client::IntoClientRequest;
use tungstenite::{Message, WebSocket};
use zcode_tests::TEST_TOKEN;

/// Ping when the line was quiet this long.
const QUIET: Duration = Duration::from_millis(250);
/// A ping unanswered (nothing at all received) this long: the line is dead.
const PING_TIMEOUT: Duration = Duration::from_millis(1000);
/// Between reconnect attempts.
const RETRY: Duration = Duration::from_millis(100);
/// A connect, handshake, `initialize` or `session/load` step silent this long is given up.
const STEP_TIMEOUT: Duration = Duration::from_millis(1000);
/// `BENCH_SKEW=N` resumes from N past what the client holds: a check that the counts do see
/// what a wrong resume loses (default 0).
fn skew() -> u64 {
    std::env::var("BENCH_SKEW").ok().and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// The tail a plain reload asks for (the web client's `TAIL`).
const TAIL: u64 = 50;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// `session/load` with `afterSeq` and `epoch`.
    Resume,
    /// `session/load` with a tail of 50, no numbers.
    Tail,
}

/// What a transcript holds for one message: a replayed (merged) text, then chunks.
#[derive(Default, Debug)]
pub struct Shown {
    pub merged: Option<String>,
    pub chunks: Vec<String>,
}

/// A catch-up the controller waits for: the client has every message up to `seq`.
struct Target {
    seq: u64,
    since: Instant,
    kind: &'static str,
}

/// What the client knows, shared with the controller.
#[derive(Default)]
pub struct State {
    /// The highest number it holds (received, or covered by a load's replay).
    pub have: u64,
    target: Option<Target>,
    /// (event kind, line back → caught up).
    pub caught: Vec<(&'static str, Duration)>,
    /// Every number received, in order (live and resumed; a tail replay has none).
    pub seqs: Vec<u64>,
    /// Per message id, what the transcript shows.
    pub shown: HashMap<String, Shown>,
    pub reconnects: u64,
    /// Reloads answered `resumed: false`, by reason.
    pub fell_back: HashMap<String, u64>,
    /// Bytes of each reload's replay (its lines and its answer).
    pub replay_bytes: Vec<usize>,
    /// Connection attempts the line refused, answered 502, or left silent.
    pub refused: u64,
    pub bad_gateway: u64,
    pub silent: u64,
    /// The number its first load reported: what it follows starts after it.
    pub first: Option<u64>,
}

impl State {
    fn advance(&mut self, seq: u64) {
        self.have = self.have.max(seq);
        if let Some(t) = self.target.take_if(|t| self.have >= t.seq) {
            self.caught.push((t.kind, t.since.elapsed()));
        }
    }
}

/// A running client: its state and its stop switch.
pub struct Client {
    pub state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Client {
    /// Starts following `sid` of instance `bid` through 127.0.0.1:`port`.
    pub fn start(style: Style, port: u16, bid: &str, sid: &str, cwd: &str) -> Client {
        let state = Arc::new(Mutex::new(State::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let run = Run {
            style,
            port,
            path: format!("/acp?instance={bid}"),
            sid: sid.to_owned(),
            cwd: cwd.to_owned(),
            state: state.clone(),
            stop: stop.clone(),
            epoch: None,
            next_id: 1,
        };
        let thread = std::thread::spawn(move || run.run());
        Client { state, stop, thread: Some(thread) }
    }

    /// Waits for the client to hold every message up to `seq`, timed from `since`.
    pub fn expect(&self, seq: u64, since: Instant, kind: &'static str) {
        let mut s = self.state.lock().expect("state");
        s.target = Some(Target { seq, since, kind });
        s.advance(0);
    }

    /// Whether the last target was reached.
    pub fn caught_up(&self) -> bool {
        self.state.lock().expect("state").target.is_none()
    }

    /// Drops a target never reached; returns whether there was one.
    pub fn give_up(&self) -> bool {
        self.state.lock().expect("state").target.take().is_some()
    }

    pub fn have(&self) -> u64 {
        self.state.lock().expect("state").have
    }

    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

type Ws = WebSocket<TcpStream>;

struct Run {
    style: Style,
    port: u16,
    path: String,
    sid: String,
    cwd: String,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    epoch: Option<String>,
    next_id: u64,
}

/// Why a connection ended.
enum Ended {
    Stop,
    Lost,
}

impl Run {
    fn run(mut self) {
        let mut first = true;
        while !self.stop.load(Ordering::SeqCst) {
            let Some(mut ws) = self.connect() else {
                std::thread::sleep(RETRY);
                continue;
            };
            if !first {
                self.state.lock().expect("state").reconnects += 1;
            }
            let attached = self.attach(&mut ws, first);
            if attached {
                first = false;
                if let Ended::Stop = self.follow(&mut ws) {
                    let _ = ws.close(None);
                    return;
                }
            }
            drop(ws);
            std::thread::sleep(RETRY);
        }
    }

    fn connect(&mut self) -> Option<Ws> {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.port));
        let Ok(tcp) = TcpStream::connect_timeout(&addr, STEP_TIMEOUT) else {
            self.state.lock().expect("state").refused += 1;
            return None;
        };
        let _ = tcp.set_nodelay(true);
        let _ = tcp.set_read_timeout(Some(STEP_TIMEOUT));
        let _ = tcp.set_write_timeout(Some(STEP_TIMEOUT));
        let mut req = format!("ws://127.0.0.1:{}{}", self.port, self.path).into_client_request().ok()?;
        req.headers_mut().insert("authorization", format!("Bearer {TEST_TOKEN}").parse().ok()?);
        match tungstenite::client::client(req, tcp) {
            Ok((ws, _)) => Some(ws),
            Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(resp))) => {
                if resp.status().as_u16() == 502 {
                    self.state.lock().expect("state").bad_gateway += 1;
                }
                None
            }
            // A read timeout mid-handshake comes back as an interrupted handshake.
            Err(tungstenite::HandshakeError::Interrupted(_)) => {
                self.state.lock().expect("state").silent += 1;
                None
            }
            Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Io(e)))
                if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) =>
            {
                self.state.lock().expect("state").silent += 1;
                None
            }
            Err(_) => {
                self.state.lock().expect("state").refused += 1;
                None
            }
        }
    }

    fn request(&mut self, ws: &mut Ws, method: &str, params: Value) -> Option<u64> {
        self.next_id += 1;
        let msg = json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params});
        ws.send(Message::text(msg.to_string())).ok()?;
        Some(self.next_id)
    }

    /// Reads until the answer to `id`; `seen` gets every other message. `None`: the line died
    /// or stayed silent for [`STEP_TIMEOUT`].
    fn answer(&self, ws: &mut Ws, id: u64, seen: &mut Vec<(Value, usize)>) -> Option<Value> {
        loop {
            let text = match ws.read() {
                Ok(Message::Text(t)) => t,
                Ok(Message::Close(_)) | Err(_) => return None,
                Ok(_) => continue,
            };
            let v: Value = serde_json::from_str(&text).ok()?;
            if v["id"] == id && v.get("method").is_none() {
                return Some(v);
            }
            seen.push((v, text.len()));
        }
    }

    /// `initialize`, then the load: by number when it has one (and is a resuming client),
    /// else a tail (none on the first attach: it follows from then on).
    fn attach(&mut self, ws: &mut Ws, first: bool) -> bool {
        let Some(id) =
            self.request(ws, "initialize", json!({"protocolVersion": 1, "clientCapabilities": {}}))
        else {
            return false;
        };
        if self.answer(ws, id, &mut Vec::new()).is_none() {
            return false;
        }
        let have = self.state.lock().expect("state").have;
        let zcode = match (&self.epoch, self.style, first) {
            (_, _, true) => json!({"limit": 0}),
            (Some(e), Style::Resume, false) => json!({"afterSeq": have + skew(), "epoch": e}),
            _ => json!({"limit": TAIL}),
        };
        let params =
            json!({"sessionId": self.sid, "cwd": self.cwd, "mcpServers": [], "_meta": {"zcode": zcode}});
        let Some(id) = self.request(ws, "session/load", params) else { return false };
        let mut replay = Vec::new();
        let Some(answer) = self.answer(ws, id, &mut replay) else { return false };
        let meta = &answer["result"]["replayMeta"];
        let Some(last) = meta["lastSeq"].as_u64() else {
            eprintln!("bench-continuity: a load failed: {answer}");
            return false;
        };
        self.epoch = meta["epoch"].as_str().map(str::to_owned);
        let bytes: usize = replay.iter().map(|(_, n)| n).sum::<usize>() + answer.to_string().len();
        let mut s = self.state.lock().expect("state");
        if first {
            s.first = Some(last);
        } else {
            s.replay_bytes.push(bytes);
        }
        if meta["resumed"] == false && self.style == Style::Resume && !first {
            let why = meta["reason"].as_str().unwrap_or("none").to_owned();
            *s.fell_back.entry(why).or_default() += 1;
        }
        for (m, _) in &replay {
            take(&mut s, m);
        }
        // The replay covers everything up to `last`.
        s.advance(last);
        true
    }

    /// Follows the live stream until the line dies (or the client is stopped).
    fn follow(&mut self, ws: &mut Ws) -> Ended {
        let _ = ws.get_mut().set_read_timeout(Some(Duration::from_millis(20)));
        let mut heard = Instant::now();
        let mut ping: Option<Instant> = None;
        loop {
            if self.stop.load(Ordering::SeqCst) {
                return Ended::Stop;
            }
            match ws.read() {
                Ok(Message::Text(t)) => {
                    heard = Instant::now();
                    ping = None;
                    if let Ok(v) = serde_json::from_str::<Value>(&t) {
                        take(&mut self.state.lock().expect("state"), &v);
                    }
                }
                Ok(Message::Close(_)) => return Ended::Lost,
                Ok(_) => heard = Instant::now(),
                Err(tungstenite::Error::Io(e))
                    if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                Err(_) => return Ended::Lost,
            }
            match ping {
                Some(at) if at.elapsed() > PING_TIMEOUT => return Ended::Lost,
                None if heard.elapsed() > QUIET => {
                    if self.request(ws, "$/ping", json!({})).is_none() {
                        return Ended::Lost;
                    }
                    ping = Some(Instant::now());
                }
                _ => {}
            }
        }
    }
}

/// Takes one message into the transcript: a numbered one is counted and its chunk appended; an
/// unnumbered one (a tail replay's merged message) replaces what the message showed.
fn take(s: &mut State, m: &Value) {
    let seq = m["params"]["_meta"]["zcode"]["seq"].as_u64();
    let u = &m["params"]["update"];
    let kind = u["sessionUpdate"].as_str().unwrap_or("");
    if matches!(kind, "agent_message_chunk" | "agent_thought_chunk") {
        let id = u["messageId"].as_str().unwrap_or("").to_owned();
        let text = u["content"]["text"].as_str().unwrap_or("").to_owned();
        let shown = s.shown.entry(id).or_default();
        match seq {
            Some(_) => shown.chunks.push(text),
            None => *shown = Shown { merged: Some(text), chunks: Vec::new() },
        }
    }
    if let Some(n) = seq {
        s.seqs.push(n);
        s.advance(n);
    }
}
