//! The store: opening, migrations, foreign and corrupt files, appends, reads, truncation, and
//! several writers at once.

use super::*;

fn msg(kind: &str, id: &str) -> NewMessage {
    NewMessage { msg_id: id.into(), kind: kind.into(), body: format!("{{\"id\":\"{id}\"}}") }
}

#[test]
fn opens_migrates_and_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open_in(dir.path()).unwrap();
    let v: i64 = s.conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
    assert_eq!(v, MIGRATIONS.len() as i64);
    let mode: String = s.conn.query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
    assert_eq!(mode, "wal");
    drop(s);
    Store::open_in(dir.path()).unwrap();
}

#[test]
fn a_current_store_opens_and_reads_while_another_connection_holds_the_write_lock() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::open_in(dir.path()).unwrap();
    s.write(|w| w.delete_project("/nowhere")).unwrap();
    let writer = rusqlite::Connection::open(dir.path().join(FILE_NAME)).unwrap();
    writer.execute_batch("BEGIN IMMEDIATE").unwrap();
    // Opening takes no write lock when there is nothing to migrate; reading never does.
    let again = Store::open_in(dir.path()).expect("an open of a current store behind a writer");
    assert!(again.read(|st| st.projects()).unwrap().is_empty());
    writer.execute_batch("ROLLBACK").unwrap();
}

/// A hub and a bridge starting together on a fresh home open the new file at once: the one
/// that did not migrate read the id before the other's commit and the tables after it, and
/// refused the file as another program's (the bridge then ran without a journal).
#[test]
fn processes_opening_a_new_store_at_once_all_open_it() {
    for round in 0..40 {
        let dir = tempfile::tempdir().unwrap();
        let opened: Vec<Result<(), String>> = std::thread::scope(|s| {
            let opens: Vec<_> = (0..4)
                .map(|_| s.spawn(|| Store::open_in(dir.path()).map(drop).map_err(|e| e.to_string())))
                .collect();
            opens.into_iter().map(|o| o.join().unwrap()).collect()
        });
        for o in opened {
            assert_eq!(o, Ok(()), "round {round}");
        }
    }
}

#[test]
fn foreign_and_corrupt_files_are_refused_by_name_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let foreign = dir.path().join("foreign.db");
    let c = rusqlite::Connection::open(&foreign).unwrap();
    c.execute_batch("CREATE TABLE notes (x TEXT); INSERT INTO notes VALUES ('mine');").unwrap();
    drop(c);
    let err = Store::open(&foreign).err().unwrap().to_string();
    assert!(err.contains("foreign.db") && err.contains("another program"), "{err}");
    let c = rusqlite::Connection::open(&foreign).unwrap();
    let x: String = c.query_row("SELECT x FROM notes", [], |r| r.get(0)).unwrap();
    assert_eq!(x, "mine");

    let corrupt = dir.path().join("corrupt.db");
    std::fs::write(&corrupt, b"this is not a database at all, just text that goes on and on".repeat(100))
        .unwrap();
    let err = Store::open(&corrupt).err().unwrap().to_string();
    assert!(err.contains("corrupt.db") && err.contains("not a SQLite database"), "{err}");
}

/// What a store holds for session "s": (seq, msg_id, turn, kind) per message, and its counters.
fn history(s: &Store) -> (Vec<(i64, String, i64, String)>, SessionCounters) {
    let c = s.counters("s").unwrap().unwrap();
    let rows = s.messages_between("s", c.first_seq, c.next_seq).unwrap();
    (rows.into_iter().map(|m| (m.seq, m.msg_id, m.turn, m.kind)).collect(), c)
}

#[test]
fn a_run_appended_at_once_numbers_seqs_and_turns_like_one_by_one_appends() {
    let kinds = ["other", "user", "agent", "agent", "tool", "user", "user", "agent", "thought"];
    let msgs: Vec<NewMessage> = kinds.iter().enumerate().map(|(i, k)| msg(k, &format!("m{i}"))).collect();
    let one = tempfile::tempdir().unwrap();
    let mut one_by_one = Store::open_in(one.path()).unwrap();
    for m in &msgs {
        one_by_one.write(|w| w.append("s", m, 1)).unwrap();
    }
    let run = tempfile::tempdir().unwrap();
    let mut runs = Store::open_in(run.path()).unwrap();
    // Runs of 1, 3 and 5, each continuing where the last ended (its seq and its turn).
    let firsts =
        runs.write(|w| Ok([w.append_all("s", &msgs[..1], 1)?, w.append_all("s", &msgs[1..4], 1)?])).unwrap();
    let last = runs.write(|w| w.append_all("s", &msgs[4..], 1)).unwrap();
    assert_eq!((firsts, last), ([1, 2], 5));
    assert_eq!(runs.write(|w| w.append_all("s", &[], 1)).unwrap(), 10, "an empty run appends nothing");
    assert_eq!(history(&runs), history(&one_by_one));
    let (rows, c) = history(&runs);
    assert_eq!((c.next_seq, c.turns), (10, 3));
    let turns: Vec<i64> = rows.iter().map(|r| r.2).collect();
    assert_eq!(turns, [0, 1, 1, 1, 1, 2, 3, 3, 3]);
}

#[test]
fn appends_number_messages_and_turns() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::open_in(dir.path()).unwrap();
    s.write(|w| {
        w.append("s", &msg("other", "m0"), 1)?;
        for t in 0..4 {
            w.append("s", &msg("user", &format!("u{t}")), 1)?;
            w.append("s", &msg("agent", &format!("a{t}")), 1)?;
        }
        w.put_state("s", "usage_update", "{}", 1)?;
        Ok(())
    })
    .unwrap();
    let c = s.counters("s").unwrap().unwrap();
    assert_eq!((c.first_seq, c.next_seq, c.turns, c.epoch), (1, 10, 4, 0));
    let tail = s.messages_before("s", c.next_seq, 3).unwrap();
    let ids: Vec<_> = tail.iter().map(|m| (m.msg_id.as_str(), m.turn)).collect();
    assert_eq!(ids, [("a2", 3), ("u3", 4), ("a3", 4)]);
    assert_eq!(s.turn_start("s", 3).unwrap(), Some(6));
    assert_eq!(s.messages_between("s", 1, 3).unwrap().len(), 2);
    assert_eq!(s.message_by_id("s", "u1").unwrap().unwrap().seq, 4);
    assert_eq!(s.states("s").unwrap(), vec![("usage_update".to_owned(), "{}".to_owned())]);
    assert!(s.counters("nope").unwrap().is_none());

    s.write(|w| w.truncate_before("s", 6)).unwrap();
    let c = s.counters("s").unwrap().unwrap();
    assert_eq!((c.first_seq, c.next_seq, c.turns, c.epoch), (6, 10, 2, 1));
}

#[test]
fn a_rename_beats_the_automatic_title() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::open_in(dir.path()).unwrap();
    s.write(|w| w.set_title("s", "auto", false, 1)).unwrap();
    s.write(|w| w.set_title("s", "renamed", true, 1)).unwrap();
    s.write(|w| w.set_title("s", "auto again", false, 1)).unwrap();
    assert_eq!(s.counters("s").unwrap().unwrap().title.as_deref(), Some("renamed"));
}

#[test]
fn several_writers_at_once_never_see_database_is_locked() {
    let dir = tempfile::tempdir().unwrap();
    Store::open_in(dir.path()).unwrap();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let path = dir.path().to_owned();
            std::thread::spawn(move || {
                let mut s = Store::open_in(&path).unwrap();
                for batch in 0..50 {
                    s.write(|w| {
                        for i in 0..10 {
                            w.append(&format!("s{t}"), &msg("agent", &format!("{batch}-{i}")), 1)?;
                            // One session shared by every writer, too.
                            w.append("shared", &msg("agent", &format!("{t}-{batch}-{i}")), 1)?;
                        }
                        Ok(())
                    })
                    .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let s = Store::open_in(dir.path()).unwrap();
    for t in 0..4 {
        assert_eq!(s.counters(&format!("s{t}")).unwrap().unwrap().next_seq, 501);
    }
    let shared = s.counters("shared").unwrap().unwrap();
    assert_eq!(shared.next_seq, 2001);
    assert_eq!(s.messages_between("shared", 1, 2001).unwrap().len(), 2000);
}

#[test]
fn a_stored_title_holds_no_control_sequence() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::open_in(dir.path()).unwrap();
    s.write(|w| w.set_title("s", "a\x1b]0;evil\x07 b\x1b[2J\u{9b}1m\nc\x07", true, 1)).unwrap();
    assert_eq!(s.counters("s").unwrap().unwrap().title.as_deref(), Some("a b c"));
}

#[test]
fn a_capped_page_cache_is_the_connections_and_still_reads_what_it_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::open_in(dir.path()).unwrap();
    let cache = |s: &Store| -> i64 { s.conn.query_row("PRAGMA cache_size", [], |r| r.get(0)).unwrap() };
    assert_eq!(cache(&s), -2000, "SQLite's default, 2 MiB");
    s.cap_cache(256).unwrap();
    assert_eq!(cache(&s), -256);
    // More than the cap written and read back whole.
    s.write(|w| {
        for i in 0..2000 {
            w.append("s", &msg("agent", &format!("m{i}")), 1)?;
        }
        Ok(())
    })
    .unwrap();
    let n: i64 = s.conn.query_row("SELECT count(*) FROM messages", [], |r| r.get(0)).unwrap();
    assert_eq!(n, 2000);
}
