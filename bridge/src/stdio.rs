//! The editor's connection: JSON-RPC lines on this process's stdin and stdout.

use crate::router::{EDITOR, Event, Outbox, OutboxReader};
use tokio::io::{AsyncBufReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;
use tracing::Instrument;
use zcode_shared::jsonrpc::RawMessage;

/// Connects the editor: registers it with the router, then reads stdin (EOF closes the
/// editor, which ends the bridge) and writes its outbox to stdout.
pub async fn connect_editor(events: mpsc::Sender<Event>, tracker: &TaskTracker) {
    let (outbox, reader) = Outbox::new(None);
    let _ = events
        .send(Event::Connected { client: EDITOR, kind: crate::router::ClientKind::Editor, outbox })
        .await;
    let span = crate::router::trace::client(EDITOR);
    match stdout_pipe() {
        Some(pipe) => tracker.spawn(write_stdout(pipe, reader).instrument(span.clone())),
        None => tracker.spawn(write_stdout(tokio::io::stdout(), reader).instrument(span.clone())),
    };
    let reading = async move {
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        loop {
            match lines.next_line().await {
                Ok(Some(line)) if line.trim().is_empty() => continue,
                Ok(Some(line)) => {
                    let msg = RawMessage::parse(&line);
                    if events.send(Event::Frame { client: EDITOR, msg }).await.is_err() {
                        return;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!("reading the editor's stdin failed: {e}");
                    break;
                }
            }
        }
        tracing::info!("the editor closed stdin: shutting down");
        let _ = events.send(Event::Closed { client: EDITOR }).await;
    };
    tracker.spawn(reading.instrument(span));
}

/// The most bytes gathered into one write to stdout.
const STDOUT_BATCH: usize = 64 * 1024;

/// Stdout, when it is a pipe (an editor spawns the bridge with pipes), opened anew as a
/// non-blocking pipe the runtime polls: written from the worker, no thread between. tokio's
/// stdout runs every write on the blocking pool instead: two thread wake-ups per write (the
/// pool's thread, then the worker again), a third of the bridge's CPU while an agent streams
/// (`scripts/bench-bridge`). Opened through `/proc/self/fd/1`, so the non-blocking flag is
/// on a file description of this process's own: the one the editor handed over (shared with
/// whatever else it gave it to) stays as it was. `None` (a terminal, a file, a socket, no
/// `/proc`): tokio's stdout.
fn stdout_pipe() -> Option<tokio::net::unix::pipe::Sender> {
    tokio::net::unix::pipe::OpenOptions::new().open_sender("/proc/self/fd/1").ok()
}

/// Writes the editor's lines; the lines queued meanwhile (an agent streaming) go out
/// together: one write per batch, not three (line, newline, flush) per line.
async fn write_stdout(mut out: impl AsyncWrite + Unpin, mut reader: OutboxReader) {
    let mut buf = Vec::new();
    while let Some(line) = reader.recv().await {
        buf.extend_from_slice(&line);
        buf.push(b'\n');
        while buf.len() < STDOUT_BATCH {
            let Some(line) = reader.try_recv() else { break };
            buf.extend_from_slice(&line);
            buf.push(b'\n');
        }
        if out.write_all(&buf).await.is_err() || out.flush().await.is_err() {
            return;
        }
        buf.clear();
        // A burst's buffer is not kept for the rest of the session.
        buf.shrink_to(STDOUT_BATCH);
    }
}
