//! Close, rename and delete, as the router sees them: close retires a session from discovery
//! (409 while a turn runs; real use brings it back; on a serve bridge, closing the last one
//! ends the bridge), rename pins a title everywhere, delete tombstones it in the tasks index.

use super::Router;
use serde_json::{Value, json};
use tokio::sync::oneshot;

/// How long a serve bridge lingers after its last session was closed (a delete may follow).
const CLOSE_EXIT_GRACE: std::time::Duration = std::time::Duration::from_millis(1000);

/// A lifecycle request.
#[derive(Debug)]
pub enum Lifecycle {
    /// Retire from discovery.
    Close,
    /// Set the title (normalized like the automatic one).
    Rename(String),
    /// Soft-delete (tombstone).
    Delete,
}

/// The answer: a JSON body, or (status, message).
pub type LifecycleReply = oneshot::Sender<Result<Value, (u16, String)>>;

impl Router {
    pub(super) fn on_lifecycle(&mut self, sid: &str, op: Lifecycle, reply: LifecycleReply) {
        let answer = match op {
            Lifecycle::Close => self.close(sid),
            Lifecycle::Rename(title) => self.rename(sid, &title),
            Lifecycle::Delete => return self.delete(sid, reply),
        };
        let _ = reply.send(answer);
    }

    fn close(&mut self, sid: &str) -> Result<Value, (u16, String)> {
        let Some(s) = self.sessions.get_mut(sid) else {
            return Err((404, format!("unknown session: {sid}")));
        };
        if s.busy() {
            return Err((409, "a turn is running — cancel it first".into()));
        }
        s.closed = true;
        // A serve bridge exists for remote use only: closing its last conversation ends it.
        if self.sessions.origin == "serve"
            && !self.sessions.values().any(|s| !s.closed && (s.listed() || s.turns == 0 && s.fresh))
        {
            tracing::info!("the last session of this serve bridge was closed: exiting");
            self.life.stop_after(CLOSE_EXIT_GRACE);
        }
        Ok(json!({"ok": true}))
    }

    fn rename(&mut self, sid: &str, title: &str) -> Result<Value, (u16, String)> {
        // Control sequences out (a title reaches terminals: tab names, `chat`), flattened to
        // one line (every run of whitespace, newlines too, becomes one space), trimmed, 80
        // characters.
        let title = zcode_shared::text::title(title);
        if title.is_empty() {
            return Err((400, "title required".into()));
        }
        if !self.sessions.contains_key(sid) {
            return Err((404, format!("unknown session: {sid}")));
        }
        self.set_title(sid, title.clone(), true);
        Ok(json!({"ok": true, "title": title}))
    }

    fn delete(&mut self, sid: &str, reply: LifecycleReply) {
        if self.sessions.get(sid).is_some_and(|s| !s.closed) {
            let _ = reply.send(Err((409, "the session is live on this bridge — close it first".into())));
            return;
        }
        self.sessions.remove(sid);
        self.journal.delete(
            sid,
            Box::new(move |r| {
                let _ = reply.send(match r {
                    Ok(()) => Ok(json!({"ok": true, "deleted": true})),
                    Err(e) => Err((503, format!("tasks index unavailable: {e}"))),
                });
            }),
        );
    }
}
