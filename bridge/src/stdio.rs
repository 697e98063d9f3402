//! The editor's connection: JSON-RPC lines on this process's stdin and stdout. A line over
//! [`crate::bounds::max_message`] is refused unread: the editor gets a `-32600` error (id
//! null) and the lines after it are read as usual.

use crate::bounds::{Line, LineReader};
use crate::router::{EDITOR, Event, Outbox, OutboxReader};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;
use tracing::Instrument;
use zcode_shared::jsonrpc::{ParseError, RawMessage};

/// Connects the editor: registers it with the router, then reads stdin (EOF closes the
/// editor, which ends the bridge) and writes its outbox to stdout.
pub async fn connect_editor(events: mpsc::Sender<Event>, tracker: &TaskTracker) {
    let (outbox, reader) = Outbox::editor();
    let _ = events
        .send(Event::Connected {
            client: EDITOR,
            kind: crate::router::ClientKind::Editor,
            scope: zcode_shared::scope::Scope::Full,
            device: None,
            outbox,
        })
        .await;
    let span = crate::router::trace::client(EDITOR);
    match stdout_pipe() {
        Some(pipe) => tracker.spawn(write_stdout(pipe, reader).instrument(span.clone())),
        None => tracker.spawn(write_stdout(tokio::io::stdout(), reader).instrument(span.clone())),
    };
    let reading = async move {
        let limit = crate::bounds::max_message();
        let mut lines = LineReader::new(tokio::io::stdin(), limit);
        loop {
            let msg = match lines.next().await {
                Ok(Some(Line::Text(line))) if line.trim().is_empty() => continue,
                Ok(Some(Line::Text(line))) => RawMessage::parse(&line),
                Ok(Some(Line::TooLong { size, head })) => Err(refused(size, &head, limit)),
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!("reading the editor's stdin failed: {e}");
                    break;
                }
            };
            crate::bounds::ROUTER.admit(&msg).await;
            if let Err(unsent) = events.send(Event::Frame { client: EDITOR, msg }).await {
                if let Event::Frame { msg, .. } = unsent.0 {
                    crate::bounds::ROUTER.message_taken(&msg);
                }
                return;
            }
        }
        tracing::info!("the editor closed stdin: shutting down");
        let _ = events.send(Event::Closed { client: EDITOR }).await;
    };
    tracker.spawn(reading.instrument(span));
}

/// The error a line of `size` bytes over `limit` gets (id null: its id, if the start of the
/// line gave one, is named in the message), logged.
fn refused(size: usize, head: &[u8], limit: usize) -> ParseError {
    let id = crate::bounds::head_id(head).id.map(|id| format!(", id {id}")).unwrap_or_default();
    let (size, limit) = (crate::bounds::size_text(size), crate::bounds::size_text(limit));
    tracing::warn!("the editor sent a message of {size}{id}, over the {limit} limit: refused unread");
    ParseError::TooLarge(format!("zcode-acp: a message of over {limit} was refused ({size}{id})"))
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
