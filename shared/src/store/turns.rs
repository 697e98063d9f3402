//! Turn records: how each finished turn ended (stop reason, when, who prompted), one row per
//! (session, journal turn). Written by the journal thread when a `session/prompt` is answered
//! (or fails, or the agent dies under it); read back into replays in order and, across every
//! session of the machine, for a board of recent turns.

use super::{Store, StoreError, Writer};
use rusqlite::params;

/// How one turn ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnRecord {
    /// The ACP session id.
    pub session_id: String,
    /// The journal's turn number (the turn of the session's newest message when it ended;
    /// 0 when the session had no message yet).
    pub turn: i64,
    /// The ACP `stopReason` (`end_turn`, `cancelled`, `max_tokens`, …), or `error` when the
    /// prompt failed (the agent answered an error, or died under it).
    pub stop_reason: String,
    /// The error's message when `stop_reason` is `error`.
    pub error: Option<String>,
    /// When the bridge sent the prompt to the agent, epoch ms.
    pub started_at: i64,
    /// When the answer (or the failure) came, epoch ms.
    pub ended_at: i64,
    /// Who prompted: `editor`, `remote:<client id in that bridge>` (later: `hook:<name>`).
    pub prompted_by: String,
}

/// A finished turn with its session's project and title, for a board across the machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecentTurn {
    /// The record.
    pub record: TurnRecord,
    /// The session's project (realpath of its workspace; empty if never recorded).
    pub workspace: String,
    /// The session's title, if any.
    pub title: Option<String>,
    /// The text of the turn's first prompt (`None`: it was trimmed away or has no text), at
    /// most [`PROMPT_CHARS`] characters.
    pub prompt: Option<String>,
}

/// How much of a turn's first prompt a [`RecentTurn`] carries: enough for a row on a board.
pub const PROMPT_CHARS: usize = 300;

/// The text of a stored `user` message body (a merged `user_message_chunk` update).
fn prompt_text(body: Option<String>) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(&body?).ok()?;
    let text = match &v["content"] {
        serde_json::Value::Array(blocks) => {
            blocks.iter().filter_map(|b| b["text"].as_str()).collect::<Vec<_>>().join(" ")
        }
        c => c["text"].as_str()?.to_owned(),
    };
    let text = text.trim();
    (!text.is_empty()).then(|| text.chars().take(PROMPT_CHARS).collect())
}

const COLUMNS: &str = "t.session_id, t.turn, t.stop_reason, t.error, t.started_at, t.ended_at, t.prompted_by";

fn record(r: &rusqlite::Row<'_>) -> rusqlite::Result<TurnRecord> {
    Ok(TurnRecord {
        session_id: r.get(0)?,
        turn: r.get(1)?,
        stop_reason: r.get(2)?,
        error: r.get(3)?,
        started_at: r.get(4)?,
        ended_at: r.get(5)?,
        prompted_by: r.get(6)?,
    })
}

impl Writer<'_> {
    /// Keeps `rec` as the record of the session's current turn: the turn of its newest
    /// message, read in this transaction (so after every message written before it);
    /// `rec.turn` is ignored. A second record for the same turn replaces the first.
    pub fn put_turn(&self, rec: &TurnRecord, now: u64) -> Result<(), StoreError> {
        self.ensure_session(&rec.session_id, now)?;
        self.tx
            .prepare_cached(
                "INSERT OR REPLACE INTO turns (session_id, turn, stop_reason, error, started_at, ended_at, prompted_by)
                 VALUES (?1, coalesce((SELECT turn FROM messages WHERE session_id = ?1 ORDER BY seq DESC LIMIT 1), 0),
                         ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute(params![
                rec.session_id,
                rec.stop_reason,
                rec.error,
                rec.started_at,
                rec.ended_at,
                rec.prompted_by
            ])?;
        Ok(())
    }
}

impl Store {
    /// The records of `session`'s turns `from..=to`, in turn order.
    pub fn turns_between(&self, session: &str, from: i64, to: i64) -> Result<Vec<TurnRecord>, StoreError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM turns t WHERE t.session_id = ?1 AND t.turn >= ?2 AND t.turn <= ?3 ORDER BY t.turn"
        );
        Ok(self
            .conn()
            .prepare_cached(&sql)?
            .query_map(params![session, from, to], record)?
            .collect::<Result<_, _>>()?)
    }

    /// The turn of the message right after `seq` in `session` (`None`: `seq` is the newest).
    pub fn turn_after(&self, session: &str, seq: i64) -> Result<Option<i64>, StoreError> {
        use rusqlite::OptionalExtension;
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT turn FROM messages WHERE session_id = ?1 AND seq > ?2 ORDER BY seq LIMIT 1",
            )?
            .query_row(params![session, seq], |r| r.get(0))
            .optional()?)
    }

    /// The `limit` most recently finished turns of every session on this machine, newest
    /// first (deleted sessions left out), with each session's project and title and the
    /// turn's first prompt.
    pub fn recent_turns(&self, limit: u32) -> Result<Vec<RecentTurn>, StoreError> {
        let sql = format!(
            "SELECT {COLUMNS}, s.workspace, s.title,
               (SELECT m.body FROM messages m WHERE m.session_id = t.session_id AND m.turn = t.turn
                AND m.kind = 'user' ORDER BY m.seq LIMIT 1)
             FROM turns t JOIN sessions s ON s.session_id = t.session_id
             WHERE s.deleted = 0 ORDER BY t.ended_at DESC, t.session_id, t.turn DESC LIMIT ?1"
        );
        Ok(self
            .conn()
            .prepare_cached(&sql)?
            .query_map(params![limit], |r| {
                Ok(RecentTurn {
                    record: record(r)?,
                    workspace: r.get(7)?,
                    title: r.get(8)?,
                    prompt: prompt_text(r.get(9)?),
                })
            })?
            .collect::<Result<_, _>>()?)
    }
}
