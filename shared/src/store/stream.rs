//! Streaming journal reads: a replay walks its rows straight out of SQLite, borrowing each
//! row's text, so a slice costs its output and nothing besides (a whole 10 000-message turn
//! used to be copied into owned rows first, then again into lines: twice its size at once).

use super::{Store, StoreError};
use rusqlite::params;

/// One stored message, borrowed from the statement for the duration of a callback.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessageRef<'a> {
    /// Position in the session's history.
    pub seq: i64,
    /// Stable id.
    pub msg_id: &'a str,
    /// The turn it belongs to (0 before the first prompt).
    pub turn: i64,
    /// `user`, `agent`, `thought`, `tool`, `plan` or `other`.
    pub kind: &'a str,
    /// The merged `update` object, JSON.
    pub body: &'a str,
}

impl Store {
    /// Calls `each` with the messages `from <= seq < to`, oldest first, without copying them;
    /// returns how many it visited.
    pub fn each_message_between(
        &self,
        session: &str,
        from: i64,
        to: i64,
        mut each: impl FnMut(MessageRef<'_>),
    ) -> Result<u64, StoreError> {
        let mut stmt = self.conn().prepare_cached(
            "SELECT seq, msg_id, turn, kind, body FROM messages
             WHERE session_id = ?1 AND seq >= ?2 AND seq < ?3 ORDER BY seq",
        )?;
        let mut rows = stmt.query(params![session, from, to])?;
        let mut visited = 0;
        while let Some(r) = rows.next()? {
            each(MessageRef {
                seq: r.get(0)?,
                msg_id: r.get_ref(1)?.as_str().map_err(rusqlite::Error::from)?,
                turn: r.get(2)?,
                kind: r.get_ref(3)?.as_str().map_err(rusqlite::Error::from)?,
                body: r.get_ref(4)?.as_str().map_err(rusqlite::Error::from)?,
            });
            visited += 1;
        }
        Ok(visited)
    }

    /// `(seq, turn)` of the oldest of the newest `n` messages with seq < `end` (`None`: none,
    /// or `n` is 0). Reads no message text into memory.
    pub fn oldest_of_last(&self, session: &str, end: i64, n: i64) -> Result<Option<(i64, i64)>, StoreError> {
        use rusqlite::OptionalExtension;
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT seq, turn FROM (SELECT seq, turn FROM messages
                   WHERE session_id = ?1 AND seq < ?2 ORDER BY seq DESC LIMIT ?3)
                 ORDER BY seq LIMIT 1",
            )?
            .query_row(params![session, end, n], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?)
    }

    /// `(turn, msg_id)` of the newest message with seq < `end`.
    pub fn newest_before(&self, session: &str, end: i64) -> Result<Option<(i64, String)>, StoreError> {
        use rusqlite::OptionalExtension;
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT turn, msg_id FROM messages WHERE session_id = ?1 AND seq < ?2 ORDER BY seq DESC LIMIT 1",
            )?
            .query_row(params![session, end], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?)
    }
}

#[cfg(test)]
mod tests {
    use super::super::NewMessage;
    use super::*;

    /// Turns of (user, agent, agent): seqs 1..=9 in turns 1..=3.
    fn three_turns() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open_in(dir.path()).unwrap();
        s.write(|w| {
            for t in 0..3 {
                for (kind, i) in [("user", 0), ("agent", 1), ("agent", 2)] {
                    let m = NewMessage {
                        msg_id: format!("m{t}.{i}"),
                        kind: kind.into(),
                        body: format!("[{t},{i}]"),
                    };
                    w.append("s", &m, 1)?;
                }
            }
            Ok(())
        })
        .unwrap();
        (dir, s)
    }

    #[test]
    fn a_streamed_range_is_the_rows_between_in_order_and_borrowed_whole() {
        let (_d, s) = three_turns();
        let mut seen = vec![];
        let n = s
            .each_message_between("s", 3, 7, |m| {
                seen.push((m.seq, m.turn, m.kind.to_owned(), m.msg_id.to_owned(), m.body.to_owned()))
            })
            .unwrap();
        assert_eq!(n, 4);
        let want: Vec<_> = s
            .messages_between("s", 3, 7)
            .unwrap()
            .into_iter()
            .map(|r| (r.seq, r.turn, r.kind, r.msg_id, r.body))
            .collect();
        assert_eq!(seen, want);
        assert_eq!(s.each_message_between("s", 7, 7, |_| panic!("an empty range")).unwrap(), 0);
        assert_eq!(s.each_message_between("other", 1, 100, |_| panic!("another session")).unwrap(), 0);
    }

    #[test]
    fn the_oldest_of_the_last_n_and_the_newest_before_a_seq() {
        let (_d, s) = three_turns();
        assert_eq!(s.oldest_of_last("s", 10, 1).unwrap(), Some((9, 3)));
        assert_eq!(s.oldest_of_last("s", 10, 4).unwrap(), Some((6, 2)));
        assert_eq!(s.oldest_of_last("s", 5, 2).unwrap(), Some((3, 1)));
        assert_eq!(s.oldest_of_last("s", 10, 500).unwrap(), Some((1, 1)), "fewer than n: the oldest");
        assert_eq!(s.oldest_of_last("s", 10, 0).unwrap(), None);
        assert_eq!(s.oldest_of_last("s", 1, 5).unwrap(), None);
        assert_eq!(s.newest_before("s", 10).unwrap(), Some((3, "m2.2".to_owned())));
        assert_eq!(s.newest_before("s", 4).unwrap(), Some((1, "m0.2".to_owned())));
        assert_eq!(s.newest_before("s", 1).unwrap(), None);
        assert_eq!(s.newest_before("other", 10).unwrap(), None);
    }
}
