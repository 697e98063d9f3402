//! Reading a replay slice out of the store: a whole history, a turn-aligned tail, or a page
//! before a cursor, with the contract's `replayMeta`. Every read is O(slice), never O(history):
//! counters come from the session row, rows from the (session, seq) index.

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use zcode_shared::store::{MessageRow, SessionCounters, Store, StoreError};

/// The largest tail or page.
pub const MAX_LIMIT: u64 = 500;

/// What to read.
#[derive(Clone, Debug, PartialEq)]
pub enum ReadMode {
    /// `session/load`: everything (`None`) or the last n messages aligned to a turn start.
    Load {
        /// The tail limit, already clamped.
        limit: Option<u64>,
    },
    /// `session/load_earlier`: the page strictly before `cursor`.
    Earlier {
        /// The cursor from an earlier `replayMeta`.
        cursor: String,
        /// The page size, already clamped.
        limit: u64,
    },
}

/// A replay slice, ready to send.
#[derive(Clone, Debug, Default)]
pub struct Slice {
    /// `session/update` lines: the messages, oldest first, each finished turn's
    /// `_zcode/turn_end` after its last message, then (for a load) the latest state.
    pub lines: Vec<bytes::Bytes>,
    /// Indexes into `lines` of the turn-end records, which only remote clients get.
    pub remote_only: Vec<usize>,
    /// The `replayMeta` object.
    pub meta: Value,
    /// The session's title in the journal, if any.
    pub title: Option<String>,
}

/// Why a read failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The cursor does not point into this session's current history.
    #[error("cursor expired")]
    CursorExpired,
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Reads a slice of `session`'s history.
pub fn read(store: &Store, session: &str, mode: &ReadMode) -> Result<Slice, ReadError> {
    let counters = store.counters(session)?;
    let c = counters.clone().unwrap_or(SessionCounters {
        epoch: 0,
        first_seq: 1,
        next_seq: 1,
        turns: 0,
        title: None,
    });
    let (rows, end, is_load) = match mode {
        ReadMode::Load { limit: None } => {
            (store.messages_between(session, c.first_seq, c.next_seq)?, c.next_seq, true)
        }
        ReadMode::Load { limit: Some(0) } => (vec![], c.next_seq, true),
        ReadMode::Load { limit: Some(n) } => {
            let mut rows = store.messages_before(session, c.next_seq, *n as i64)?;
            if let Some(first) = rows.first() {
                let start =
                    if first.turn > 0 { store.turn_start(session, first.turn)? } else { Some(c.first_seq) };
                if let Some(start) = start.filter(|s| *s < first.seq) {
                    let mut head = store.messages_between(session, start, first.seq)?;
                    head.append(&mut rows);
                    rows = head;
                }
            }
            (rows, c.next_seq, true)
        }
        ReadMode::Earlier { cursor, limit } => {
            let before = decode(cursor, session, &c).ok_or(ReadError::CursorExpired)?;
            (store.messages_before(session, before, *limit as i64)?, before, false)
        }
    };
    let start = rows.first().map_or(end, |r| r.seq);
    let last_id = if is_load {
        store.messages_before(session, c.next_seq, 1)?.pop().map(|r| r.msg_id)
    } else {
        rows.last().map(|r| r.msg_id.clone())
    };
    let sid = Value::from(session).to_string();
    let (mut lines, remote_only) = with_turn_ends(store, session, &sid, &rows)?;
    if is_load {
        for (_, body) in store.states(session)? {
            lines.push(update_line(&sid, &body));
        }
    }
    let meta = json!({
        "cursor": encode(session, c.epoch, start),
        "hasMore": start > c.first_seq,
        "replayedMessages": rows.len(),
        "replayedTurns": rows.iter().filter(|r: &&MessageRow| r.kind == "user").count(),
        "totalMessages": c.next_seq - c.first_seq,
        "totalTurns": c.turns,
        "lastMessageId": last_id,
    });
    Ok(Slice { lines, remote_only, meta, title: c.title })
}

/// The messages' lines, each finished turn's record right after its last message (the last
/// row's turn is finished here only if no later message of it exists beyond the slice).
fn with_turn_ends(
    store: &Store,
    session: &str,
    sid: &str,
    rows: &[MessageRow],
) -> Result<(Vec<bytes::Bytes>, Vec<usize>), ReadError> {
    let (Some(first), Some(last)) = (rows.first(), rows.last()) else { return Ok((vec![], vec![])) };
    let records = store.turns_between(session, first.turn, last.turn)?;
    let mut lines = Vec::with_capacity(rows.len() + records.len());
    let mut remote_only = vec![];
    for (i, r) in rows.iter().enumerate() {
        lines.push(update_line(sid, &r.body));
        let Some(rec) = records.iter().find(|t| t.turn == r.turn) else { continue };
        let ends_here = match rows.get(i + 1) {
            Some(next) => next.turn != r.turn,
            None => store.turn_after(session, r.seq)? != Some(r.turn),
        };
        if ends_here {
            remote_only.push(lines.len());
            lines.push(super::turn_end::line(rec, Some(rec.turn)));
        }
    }
    Ok((lines, remote_only))
}

fn update_line(sid: &str, body: &str) -> bytes::Bytes {
    let params = format!(r#"{{"sessionId":{sid},"update":{body}}}"#);
    bytes::Bytes::from(zcode_shared::jsonrpc::notification_line("session/update", &params))
}

/// A short tag of the session id, so a cursor of another session is recognised as foreign.
fn tag(session: &str) -> String {
    Sha256::digest(session.as_bytes()).iter().take(4).map(|b| format!("{b:02x}")).collect()
}

/// A cursor: the seq a page ends before, in the epoch of the history it points into.
pub fn encode(session: &str, epoch: i64, seq: i64) -> String {
    format!("z1.{epoch}.{seq}.{}", tag(session))
}

/// The seq a cursor points at, if it is valid for this session's current history.
fn decode(cursor: &str, session: &str, c: &SessionCounters) -> Option<i64> {
    let mut parts = cursor.split('.');
    if parts.next()? != "z1" {
        return None;
    }
    let epoch: i64 = parts.next()?.parse().ok()?;
    let seq: i64 = parts.next()?.parse().ok()?;
    let t = parts.next()?;
    if parts.next().is_some()
        || t != tag(session)
        || epoch != c.epoch
        || seq < c.first_seq
        || seq > c.next_seq
    {
        return None;
    }
    Some(seq)
}

#[cfg(test)]
mod tests {
    use super::*;
    use zcode_shared::store::NewMessage;

    /// 8 messages in 4 turns: (user, agent) × 4.
    fn scripted(turns: usize, per_turn: usize) -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open_in(dir.path()).unwrap();
        s.write(|w| {
            for t in 0..turns {
                w.append(
                    "s",
                    &NewMessage {
                        msg_id: format!("u{t}"),
                        kind: "user".into(),
                        body: format!(r#"{{"n":"u{t}"}}"#),
                    },
                    1,
                )?;
                for i in 1..per_turn {
                    let m = NewMessage {
                        msg_id: format!("a{t}.{i}"),
                        kind: "agent".into(),
                        body: format!(r#"{{"n":"a{t}.{i}"}}"#),
                    };
                    w.append("s", &m, 1)?;
                }
            }
            w.put_state("s", "usage_update", r#"{"sessionUpdate":"usage_update"}"#, 1)?;
            Ok(())
        })
        .unwrap();
        (dir, s)
    }

    fn names(slice: &Slice) -> Vec<String> {
        slice
            .lines
            .iter()
            .map(|l| serde_json::from_slice::<Value>(l).unwrap())
            .filter_map(|v| v["params"]["update"]["n"].as_str().map(str::to_owned))
            .collect()
    }

    #[test]
    fn the_contract_arithmetic_on_eight_messages_in_four_turns() {
        let (_d, s) = scripted(4, 2);
        let tail = read(&s, "s", &ReadMode::Load { limit: Some(2) }).unwrap();
        assert_eq!(names(&tail), ["u3", "a3.1"]);
        assert_eq!(tail.lines.len(), 3, "the latest state follows the messages");
        let m = &tail.meta;
        assert_eq!(
            (m["hasMore"].clone(), m["replayedMessages"].clone(), m["replayedTurns"].clone()),
            (json!(true), json!(2), json!(1))
        );
        assert_eq!((m["totalMessages"].clone(), m["totalTurns"].clone()), (json!(8), json!(4)));
        assert_eq!(m["lastMessageId"], "a3.1");

        // A limit that cuts into a turn is aligned back to the turn's start.
        let tail = read(&s, "s", &ReadMode::Load { limit: Some(3) }).unwrap();
        assert_eq!(names(&tail), ["u2", "a2.1", "u3", "a3.1"]);

        // Metadata only.
        let meta = read(&s, "s", &ReadMode::Load { limit: Some(0) }).unwrap();
        assert_eq!(names(&meta), Vec::<String>::new());
        assert_eq!(meta.meta["replayedMessages"], 0);
        assert_eq!(meta.meta["hasMore"], true);
        assert_eq!(meta.meta["lastMessageId"], "a3.1");

        // Pages back to the start concatenate to the full history, no gaps, no repeats.
        let full = read(&s, "s", &ReadMode::Load { limit: None }).unwrap();
        let mut pages: Vec<String> = names(&tail);
        let mut cursor = tail.meta["cursor"].as_str().unwrap().to_owned();
        loop {
            let page = read(&s, "s", &ReadMode::Earlier { cursor: cursor.clone(), limit: 3 }).unwrap();
            let mut p = names(&page);
            p.append(&mut pages);
            pages = p;
            if page.meta["hasMore"] == false {
                break;
            }
            cursor = page.meta["cursor"].as_str().unwrap().to_owned();
        }
        assert_eq!(pages, names(&full));
        assert_eq!(pages.len(), 8);
    }

    #[test]
    fn cursors_survive_appends_and_expire_on_truncation_or_elsewhere() {
        let (_d, mut s) = scripted(4, 2);
        let tail = read(&s, "s", &ReadMode::Load { limit: Some(2) }).unwrap();
        let cursor = tail.meta["cursor"].as_str().unwrap().to_owned();
        s.write(|w| {
            w.append("s", &NewMessage { msg_id: "u4".into(), kind: "user".into(), body: "{}".into() }, 2)
                .map(|_| ())
        })
        .unwrap();
        let page = read(&s, "s", &ReadMode::Earlier { cursor: cursor.clone(), limit: 2 }).unwrap();
        assert_eq!(names(&page), ["u2", "a2.1"], "appending did not move the page");
        assert!(matches!(
            read(&s, "other", &ReadMode::Earlier { cursor: cursor.clone(), limit: 2 }),
            Err(ReadError::CursorExpired)
        ));
        for garbage in ["", "z1", "z1.0.x.abc", "nonsense", "z1.0.5.00000000"] {
            assert!(
                matches!(
                    read(&s, "s", &ReadMode::Earlier { cursor: garbage.into(), limit: 2 }),
                    Err(ReadError::CursorExpired)
                ),
                "{garbage}"
            );
        }
        s.write(|w| w.truncate_before("s", 3)).unwrap();
        let err = read(&s, "s", &ReadMode::Earlier { cursor, limit: 2 }).unwrap_err();
        assert_eq!(err.to_string(), "cursor expired");
    }

    #[test]
    fn an_unknown_session_is_an_empty_history() {
        let (_d, s) = scripted(1, 1);
        let r = read(&s, "nobody", &ReadMode::Load { limit: Some(10) }).unwrap();
        assert!(r.lines.is_empty());
        assert_eq!(r.meta["totalMessages"], 0);
        assert_eq!(r.meta["hasMore"], false);
        assert_eq!(r.meta["lastMessageId"], Value::Null);
    }
}
