//! Reading a replay slice out of the store: a whole history, a turn-aligned tail, or a page
//! before a cursor, with the contract's `replayMeta`. Every read is O(slice), never O(history):
//! counters come from the session row, rows from the (session, seq) index.

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use zcode_shared::store::{MessageRef, SessionCounters, Store, StoreError, TurnRecord};

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

/// Reads a slice of `session`'s history. The rows stream out of SQLite straight into their
/// lines, so the slice is held once, as the lines it sends (a phone attaching with `limit: 1`
/// to a session whose last turn has 10 000 messages gets that whole turn, as the contract
/// says; the rows used to be copied whole first, then again into lines).
pub fn read(store: &Store, session: &str, mode: &ReadMode) -> Result<Slice, ReadError> {
    let counters = store.counters(session)?;
    let c = counters.clone().unwrap_or(SessionCounters {
        epoch: 0,
        first_seq: 1,
        next_seq: 1,
        turns: 0,
        title: None,
    });
    // The seqs [from, end) to replay.
    let (from, end, is_load) = match mode {
        ReadMode::Load { limit: None } => (c.first_seq, c.next_seq, true),
        ReadMode::Load { limit: Some(0) } => (c.next_seq, c.next_seq, true),
        ReadMode::Load { limit: Some(n) } => {
            let from = match store.oldest_of_last(session, c.next_seq, *n as i64)? {
                // Aligned back to the start of the oldest message's turn (turn 0: the history's).
                Some((seq, turn)) if turn > 0 => store.turn_start(session, turn)?.map_or(seq, |s| s.min(seq)),
                Some((seq, _)) => c.first_seq.min(seq),
                None => c.next_seq,
            };
            (from, c.next_seq, true)
        }
        ReadMode::Earlier { cursor, limit } => {
            let before = decode(cursor, session, &c).ok_or(ReadError::CursorExpired)?;
            let from = store.oldest_of_last(session, before, *limit as i64)?.map_or(before, |(seq, _)| seq);
            (from, before, false)
        }
    };
    let newest = store.newest_before(session, end)?;
    let sid = Value::from(session).to_string();
    let mut out = Lines::new(&sid, end.saturating_sub(from));
    if from < end {
        if let (Some(first), Some((last, _))) = (store.turn_after(session, from - 1)?, &newest) {
            out.records = store.turns_between(session, first, *last)?;
        }
        store.each_message_between(session, from, end, |m| out.message(&m))?;
    }
    // The last message's turn is finished here only if no later message of it exists.
    if let Some((seq, turn)) = out.last {
        if store.turn_after(session, seq)? != Some(turn) {
            out.turn_ended(turn);
        }
    }
    let start = out.first_seq.unwrap_or(end);
    let last_id = match (is_load, out.last) {
        (true, _) | (false, Some(_)) => newest.map(|(_, id)| id),
        (false, None) => None,
    };
    let Lines { mut lines, remote_only, messages, user_messages, .. } = out;
    if is_load {
        for (_, body) in store.states(session)? {
            lines.push(update_line(&sid, &body));
        }
    }
    let meta = json!({
        "cursor": encode(session, c.epoch, start),
        "hasMore": start > c.first_seq,
        "replayedMessages": messages,
        "replayedTurns": user_messages,
        "totalMessages": c.next_seq - c.first_seq,
        "totalTurns": c.turns,
        "lastMessageId": last_id,
    });
    Ok(Slice { lines, remote_only, meta, title: c.title })
}

/// A slice's lines as its rows stream in: each message's `session/update`, and each finished
/// turn's record right after the turn's last message.
struct Lines<'a> {
    sid: &'a str,
    /// The records of the slice's turns, in turn order; `next` walks them.
    records: Vec<TurnRecord>,
    next: usize,
    lines: Vec<bytes::Bytes>,
    /// Where the message lines are copied: a few blocks shared by the lines they hold, not
    /// an allocation per line (10 000 small ones, freed in send order, scattered the
    /// allocator's free space among longer-lived allocations; a block goes once its last line
    /// is sent).
    block: bytes::BytesMut,
    remote_only: Vec<usize>,
    first_seq: Option<i64>,
    /// (seq, turn) of the newest message so far.
    last: Option<(i64, i64)>,
    messages: u64,
    user_messages: u64,
}

impl<'a> Lines<'a> {
    fn new(sid: &'a str, rows: i64) -> Lines<'a> {
        // Sized once for the rows (seqs are dense): growing by doubling would copy the
        // vector, and leave the smaller copies behind in the allocator, along the way.
        let rows = usize::try_from(rows).unwrap_or(0).min(1 << 20);
        Lines {
            sid,
            records: vec![],
            next: 0,
            lines: Vec::with_capacity(rows + 8),
            block: bytes::BytesMut::new(),
            remote_only: vec![],
            first_seq: None,
            last: None,
            messages: 0,
            user_messages: 0,
        }
    }

    fn message(&mut self, m: &MessageRef<'_>) {
        if let Some((_, turn)) = self.last.filter(|(_, t)| *t != m.turn) {
            self.turn_ended(turn);
        }
        self.first_seq.get_or_insert(m.seq);
        self.last = Some((m.seq, m.turn));
        self.messages += 1;
        self.user_messages += u64::from(m.kind == "user");
        let line = update_line_text(self.sid, m.body);
        if self.block.capacity() - self.block.len() < line.len() {
            self.block = bytes::BytesMut::with_capacity(BLOCK.max(line.len()));
        }
        self.block.extend_from_slice(line.as_bytes());
        self.lines.push(self.block.split().freeze());
    }

    /// `turn`'s last message was the latest line: its record (if any) follows it.
    fn turn_ended(&mut self, turn: i64) {
        while self.records.get(self.next).is_some_and(|r| r.turn < turn) {
            self.next += 1;
        }
        if let Some(rec) = self.records.get(self.next).filter(|r| r.turn == turn) {
            self.remote_only.push(self.lines.len());
            self.lines.push(super::turn_end::line(rec, Some(rec.turn)));
        }
    }
}

/// The size of a block of replayed lines: under glibc's mmap threshold (128 KiB), so blocks
/// come from the heap and go back to it as a run.
const BLOCK: usize = 64 * 1024;

fn update_line(sid: &str, body: &str) -> bytes::Bytes {
    bytes::Bytes::from(update_line_text(sid, body))
}

fn update_line_text(sid: &str, body: &str) -> String {
    let params = format!(r#"{{"sessionId":{sid},"update":{body}}}"#);
    zcode_shared::jsonrpc::notification_line("session/update", &params)
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
    fn a_long_turn_is_replayed_whole_for_a_tail_of_one_from_a_few_shared_blocks() {
        let (_d, s) = scripted(3, 2000);
        let tail = read(&s, "s", &ReadMode::Load { limit: Some(1) }).unwrap();
        let got = names(&tail);
        assert_eq!(got.len(), 2000, "the whole last turn, aligned back to its start");
        assert_eq!((got[0].as_str(), got[1999].as_str()), ("u2", "a2.1999"));
        assert_eq!(tail.meta["replayedMessages"], 2000);
        assert_eq!(tail.meta["replayedTurns"], 1);
        // The message lines are slices of a few blocks, back to back, not 2000 allocations.
        let messages = &tail.lines[..2000];
        let bytes: usize = messages.iter().map(|l| l.len()).sum();
        let blocks = 1 + messages
            .windows(2)
            .filter(|w| w[0].as_ptr().wrapping_add(w[0].len()) != w[1].as_ptr())
            .count();
        assert!(blocks <= bytes / BLOCK + 1, "{blocks} blocks for {bytes} bytes");
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
