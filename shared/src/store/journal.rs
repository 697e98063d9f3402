//! Journal queries: sessions' history as messages (seq-ordered, grouped into turns), their
//! counters, and their latest state updates.

use super::{Store, StoreError, Writer};
use rusqlite::{OptionalExtension, params};

/// A session's identity in the tasks index, as a bridge knows it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SessionMeta {
    /// The ACP session id.
    pub session_id: String,
    /// The project (realpath of the workspace).
    pub workspace: String,
    /// The session's working directory.
    pub cwd: String,
    /// `editor` or `serve`.
    pub origin: String,
    /// The agent running it (`AgentSpec::name`), when the bridge knows one.
    pub agent: Option<String>,
}

/// A session's journal counters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionCounters {
    /// Bumped whenever history is truncated or rewritten: older cursors expire.
    pub epoch: i64,
    /// The seq of the oldest message kept.
    pub first_seq: i64,
    /// The seq the next message gets (so `next_seq - first_seq` messages are kept).
    pub next_seq: i64,
    /// User prompts (turn starts) kept.
    pub turns: i64,
    /// The session's title, if one is set.
    pub title: Option<String>,
}

/// One stored message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageRow {
    /// Position in the session's history.
    pub seq: i64,
    /// Stable id.
    pub msg_id: String,
    /// The turn it belongs to (0 before the first prompt).
    pub turn: i64,
    /// `user`, `agent`, `thought`, `tool`, `plan` or `other`.
    pub kind: String,
    /// The merged `update` object, JSON.
    pub body: String,
}

/// A message to append; its seq and turn are assigned by the store.
#[derive(Clone, Debug)]
pub struct NewMessage {
    /// Stable id.
    pub msg_id: String,
    /// Kind (a `user` message starts a turn).
    pub kind: String,
    /// The `update` object, JSON.
    pub body: String,
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<MessageRow> {
    Ok(MessageRow { seq: r.get(0)?, msg_id: r.get(1)?, turn: r.get(2)?, kind: r.get(3)?, body: r.get(4)? })
}

impl Writer<'_> {
    /// Creates the session's row if it does not exist.
    pub fn ensure_session(&self, session: &str, now: u64) -> Result<(), StoreError> {
        self.tx
            .prepare_cached(
                "INSERT OR IGNORE INTO sessions (session_id, created_at, updated_at) VALUES (?1, ?2, ?2)",
            )?
            .execute(params![session, now as i64])?;
        Ok(())
    }

    /// Records where a session lives (workspace, cwd, origin) and which agent runs it (an
    /// unknown agent keeps the recorded one). `revive`: this use is real use from an editor or
    /// CLI, so the session (and a fully deleted project) is no longer deleted (a hide, not a
    /// ban); any other use leaves a tombstone as it is.
    pub fn set_meta(&self, meta: &SessionMeta, revive: bool, now: u64) -> Result<(), StoreError> {
        self.ensure_session(&meta.session_id, now)?;
        if revive {
            self.revive_project_if_fully_deleted(&meta.workspace)?;
        }
        self.tx
            .prepare_cached(
                "UPDATE sessions SET workspace = ?2, cwd = ?3, origin = ?4, updated_at = max(updated_at, ?5),
                 deleted = deleted AND NOT ?6, agent = coalesce(?7, agent) WHERE session_id = ?1",
            )?
            .execute(params![
                meta.session_id,
                meta.workspace,
                meta.cwd,
                meta.origin,
                now as i64,
                revive,
                meta.agent.as_deref().map(crate::text::title)
            ])?;
        Ok(())
    }

    /// Sets the title; an automatic title never replaces one set by a rename.
    pub fn set_title(
        &self,
        session: &str,
        title: &str,
        overridden: bool,
        now: u64,
    ) -> Result<(), StoreError> {
        self.ensure_session(session, now)?;
        let sql = if overridden {
            "UPDATE sessions SET title = ?2, title_overridden = 1 WHERE session_id = ?1"
        } else {
            "UPDATE sessions SET title = ?2 WHERE session_id = ?1 AND title_overridden = 0"
        };
        // Whoever calls, no control sequence is stored: titles end up in terminals and tab names.
        let title = crate::text::title(title);
        self.tx.prepare_cached(sql)?.execute(params![session, title])?;
        Ok(())
    }

    /// Tombstones (or revives) a session, creating its row if it predates the index.
    pub fn set_deleted(&self, session: &str, deleted: bool, now: u64) -> Result<(), StoreError> {
        self.ensure_session(session, now)?;
        self.tx
            .prepare_cached("UPDATE sessions SET deleted = ?2 WHERE session_id = ?1")?
            .execute(params![session, deleted as i64])?;
        Ok(())
    }

    /// Appends a message; returns its seq.
    pub fn append(&self, session: &str, msg: &NewMessage, now: u64) -> Result<i64, StoreError> {
        self.append_all(session, std::slice::from_ref(msg), now)
    }

    /// Appends messages to one session, in order; returns the seq of the first (the n-th gets
    /// `first + n`). The session's counters are read and written once for the run, not once per
    /// message: a fast stream of new messages is mostly this.
    pub fn append_all(&self, session: &str, msgs: &[NewMessage], now: u64) -> Result<i64, StoreError> {
        self.ensure_session(session, now)?;
        let (first, mut turns): (i64, i64) = self
            .tx
            .prepare_cached("SELECT next_seq, turns FROM sessions WHERE session_id = ?1")?
            .query_row(params![session], |r| Ok((r.get(0)?, r.get(1)?)))?;
        if msgs.is_empty() {
            return Ok(first);
        }
        // Messages before the first prompt belong to turn 0; a user message opens turn `turns`.
        let mut turn: i64 = self
            .tx
            .prepare_cached(
                "SELECT coalesce(max(turn), 0) FROM messages WHERE session_id = ?1 AND seq = ?2 - 1",
            )?
            .query_row(params![session, first], |r| r.get(0))?;
        let mut insert = self.tx.prepare_cached(
            "INSERT INTO messages (session_id, seq, msg_id, turn, kind, body) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?;
        let mut seq = first;
        for msg in msgs {
            if msg.kind == "user" {
                turns += 1;
                turn += 1;
            }
            insert.execute(params![session, seq, msg.msg_id, turn, msg.kind, msg.body])?;
            seq += 1;
        }
        self.tx
            .prepare_cached(
                "UPDATE sessions SET next_seq = ?2, turns = ?3, updated_at = max(updated_at, ?4) WHERE session_id = ?1",
            )?
            .execute(params![session, seq, turns, now as i64])?;
        Ok(first)
    }

    /// Replaces a message's merged body (a chunk appended, a tool call updated).
    pub fn update_body(&self, session: &str, seq: i64, body: &str) -> Result<(), StoreError> {
        self.tx
            .prepare_cached("UPDATE messages SET body = ?3 WHERE session_id = ?1 AND seq = ?2")?
            .execute(params![session, seq, body])?;
        Ok(())
    }

    /// Keeps `body` as the session's latest state update of `kind`.
    pub fn put_state(&self, session: &str, kind: &str, body: &str, now: u64) -> Result<(), StoreError> {
        self.ensure_session(session, now)?;
        self.tx
            .prepare_cached(
                "INSERT OR REPLACE INTO session_state (session_id, kind, body) VALUES (?1, ?2, ?3)",
            )?
            .execute(params![session, kind, body])?;
        Ok(())
    }

    /// Drops every message older than `seq` and bumps the epoch (older cursors expire).
    pub fn truncate_before(&self, session: &str, seq: i64) -> Result<(), StoreError> {
        self.tx
            .prepare_cached("DELETE FROM messages WHERE session_id = ?1 AND seq < ?2")?
            .execute(params![session, seq])?;
        // Records of turns no message is left of go with them.
        self.tx
            .prepare_cached(
                "DELETE FROM turns WHERE session_id = ?1
                 AND turn < (SELECT coalesce(min(turn), 0) FROM messages WHERE session_id = ?1)",
            )?
            .execute(params![session])?;
        self.tx
            .prepare_cached(
                "UPDATE sessions SET first_seq = max(first_seq, ?2), epoch = epoch + 1,
                 turns = (SELECT count(*) FROM messages WHERE session_id = ?1 AND kind = 'user')
                 WHERE session_id = ?1",
            )?
            .execute(params![session, seq])?;
        Ok(())
    }
}

impl Store {
    /// A session's counters and title; `None` if the journal never saw it.
    pub fn counters(&self, session: &str) -> Result<Option<SessionCounters>, StoreError> {
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT epoch, first_seq, next_seq, turns, title FROM sessions WHERE session_id = ?1",
            )?
            .query_row(params![session], |r| {
                Ok(SessionCounters {
                    epoch: r.get(0)?,
                    first_seq: r.get(1)?,
                    next_seq: r.get(2)?,
                    turns: r.get(3)?,
                    title: r.get(4)?,
                })
            })
            .optional()?)
    }

    /// Up to `limit` messages with seq < `end`, oldest first (the newest `limit` of them).
    pub fn messages_before(
        &self,
        session: &str,
        end: i64,
        limit: i64,
    ) -> Result<Vec<MessageRow>, StoreError> {
        let mut rows: Vec<MessageRow> = self
            .conn()
            .prepare_cached(
                "SELECT seq, msg_id, turn, kind, body FROM messages
                 WHERE session_id = ?1 AND seq < ?2 ORDER BY seq DESC LIMIT ?3",
            )?
            .query_map(params![session, end, limit], row)?
            .collect::<Result<_, _>>()?;
        rows.reverse();
        Ok(rows)
    }

    /// The messages with `from <= seq < to`, oldest first.
    pub fn messages_between(&self, session: &str, from: i64, to: i64) -> Result<Vec<MessageRow>, StoreError> {
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT seq, msg_id, turn, kind, body FROM messages
                 WHERE session_id = ?1 AND seq >= ?2 AND seq < ?3 ORDER BY seq",
            )?
            .query_map(params![session, from, to], row)?
            .collect::<Result<_, _>>()?)
    }

    /// The seq of the first message of `turn`.
    pub fn turn_start(&self, session: &str, turn: i64) -> Result<Option<i64>, StoreError> {
        Ok(self
            .conn()
            .prepare_cached("SELECT min(seq) FROM messages WHERE session_id = ?1 AND turn = ?2")?
            .query_row(params![session, turn], |r| r.get(0))?)
    }

    /// The seq of the first user message at or after `seq` (a turn boundary).
    pub fn next_turn_start(&self, session: &str, seq: i64) -> Result<Option<i64>, StoreError> {
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT min(seq) FROM messages WHERE session_id = ?1 AND seq >= ?2 AND kind = 'user'",
            )?
            .query_row(params![session, seq], |r| r.get(0))?)
    }

    /// A message by its stable id.
    pub fn message_by_id(&self, session: &str, msg_id: &str) -> Result<Option<MessageRow>, StoreError> {
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT seq, msg_id, turn, kind, body FROM messages WHERE session_id = ?1 AND msg_id = ?2
                 ORDER BY seq DESC LIMIT 1",
            )?
            .query_row(params![session, msg_id], row)
            .optional()?)
    }

    /// Whether a session is tombstoned; `None` if the index never saw it.
    pub fn is_deleted(&self, session: &str) -> Result<Option<bool>, StoreError> {
        Ok(self
            .conn()
            .prepare_cached("SELECT deleted FROM sessions WHERE session_id = ?1")?
            .query_row(params![session], |r| r.get::<_, i64>(0))
            .optional()?
            .map(|d| d != 0))
    }

    /// The session's latest state updates: (kind, body).
    pub fn states(&self, session: &str) -> Result<Vec<(String, String)>, StoreError> {
        Ok(self
            .conn()
            .prepare_cached("SELECT kind, body FROM session_state WHERE session_id = ?1 ORDER BY kind")?
            .query_map(params![session], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?)
    }
}
