//! The tasks index: projects (workspaces that ran a session) and their sessions, for the hub's
//! project APIs. Soft deletes are tombstones (`deleted = 1`); archived rows stay hidden.

use super::{Store, StoreError, Writer};
use rusqlite::{OptionalExtension, params};

/// A project: a workspace with visible sessions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProjectRow {
    /// The workspace (realpath).
    pub workspace: String,
    /// Visible sessions in it.
    pub sessions: i64,
    /// The newest session activity, epoch ms.
    pub last_active: i64,
}

/// One session of a project's history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionRow {
    /// The session id.
    pub session_id: String,
    /// Its title, if any.
    pub title: Option<String>,
    /// Its working directory.
    pub cwd: String,
    /// Last activity, epoch ms.
    pub updated_at: i64,
    /// The agent that ran it last, if recorded (config name, else command line).
    pub agent: Option<String>,
}

/// What the index says about one session a listing names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IndexView {
    /// Tombstoned or archived: listings leave it out.
    pub hidden: bool,
    /// The index's title (a rename, or the automatic one), if any.
    pub title: Option<String>,
}

impl Store {
    /// The index's view of each of `ids` it knows (unknown ids are absent).
    pub fn index_view(
        &self,
        ids: &[String],
    ) -> Result<std::collections::HashMap<String, IndexView>, StoreError> {
        let wanted = serde_json::Value::from(ids.to_vec()).to_string();
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT session_id, deleted OR archived, title FROM sessions
                 WHERE session_id IN (SELECT value FROM json_each(?1))",
            )?
            .query_map(params![wanted], |r| {
                Ok((r.get::<_, String>(0)?, IndexView { hidden: r.get::<_, i64>(1)? != 0, title: r.get(2)? }))
            })?
            .collect::<Result<_, _>>()?)
    }

    /// Every workspace with visible sessions, newest activity first.
    pub fn projects(&self) -> Result<Vec<ProjectRow>, StoreError> {
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT workspace, count(*), max(updated_at) FROM sessions
                 WHERE deleted = 0 AND archived = 0 AND workspace != ''
                 GROUP BY workspace ORDER BY max(updated_at) DESC",
            )?
            .query_map([], |r| {
                Ok(ProjectRow { workspace: r.get(0)?, sessions: r.get(1)?, last_active: r.get(2)? })
            })?
            .collect::<Result<_, _>>()?)
    }

    /// One page of a project's visible sessions, newest first, strictly after the composite
    /// cursor `(before, before_id)` when given, leaving out `exclude` (live elsewhere). Returns
    /// up to `limit + 1` rows: the extra one says there is a next page.
    pub fn project_sessions(
        &self,
        workspace: &str,
        before: Option<(i64, &str)>,
        limit: i64,
        exclude: &[String],
    ) -> Result<Vec<SessionRow>, StoreError> {
        let excluded = serde_json::Value::from(exclude.to_vec()).to_string();
        let (b, bid) = before.unwrap_or((i64::MAX, ""));
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT session_id, title, cwd, updated_at, agent FROM sessions
                 WHERE workspace = ?1 AND deleted = 0 AND archived = 0
                   AND (updated_at < ?2 OR (updated_at = ?2 AND session_id < ?3))
                   AND session_id NOT IN (SELECT value FROM json_each(?4))
                 ORDER BY updated_at DESC, session_id DESC LIMIT ?5",
            )?
            .query_map(params![workspace, b, bid, excluded, limit + 1], |r| {
                Ok(SessionRow {
                    session_id: r.get(0)?,
                    title: r.get(1)?,
                    cwd: r.get(2)?,
                    updated_at: r.get(3)?,
                    agent: r.get(4)?,
                })
            })?
            .collect::<Result<_, _>>()?)
    }

    /// The agent recorded for session `id` (see [`SessionRow::agent`]), if any.
    pub fn session_agent(&self, id: &str) -> Result<Option<String>, StoreError> {
        Ok(self
            .conn()
            .prepare_cached("SELECT agent FROM sessions WHERE session_id = ?1")?
            .query_row(params![id], |r| r.get(0))
            .optional()?
            .flatten())
    }

    /// Whether the workspace has ever run a session (deleted or not).
    pub fn workspace_known(&self, workspace: &str) -> Result<bool, StoreError> {
        Ok(self
            .conn()
            .prepare_cached("SELECT EXISTS (SELECT 1 FROM sessions WHERE workspace = ?1 AND deleted = 0 AND archived = 0)")?
            .query_row(params![workspace], |r| r.get(0))?)
    }
}

impl Writer<'_> {
    /// Tombstones every visible session of a workspace; returns how many.
    pub fn delete_project(&self, workspace: &str) -> Result<usize, StoreError> {
        Ok(self
            .tx
            .prepare_cached("UPDATE sessions SET deleted = 1 WHERE workspace = ?1 AND deleted = 0")?
            .execute(params![workspace])?)
    }

    /// A session used again in `workspace`: if the whole project was deleted, its
    /// conversations come back (archived ones never do).
    pub fn revive_project_if_fully_deleted(&self, workspace: &str) -> Result<(), StoreError> {
        self.tx
            .prepare_cached(
                "UPDATE sessions SET deleted = 0 WHERE workspace = ?1 AND archived = 0
                 AND NOT EXISTS (SELECT 1 FROM sessions WHERE workspace = ?1 AND deleted = 0)",
            )?
            .execute(params![workspace])?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::SessionMeta;
    use super::*;

    fn meta(s: &str, ws: &str) -> SessionMeta {
        SessionMeta {
            session_id: s.into(),
            workspace: ws.into(),
            cwd: ws.into(),
            origin: "editor".into(),
            agent: None,
        }
    }

    #[test]
    fn projects_pages_deletes_and_revival() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open_in(dir.path()).unwrap();
        s.write(|w| {
            for (i, id) in ["a", "b", "c", "d"].iter().enumerate() {
                w.set_meta(&meta(id, "/p1"), true, 100 + (i as u64 / 2))?; // a,b at 100; c,d at 101
            }
            w.set_meta(&meta("z", "/p2"), true, 50)
        })
        .unwrap();
        let p = s.projects().unwrap();
        assert_eq!(p[0], ProjectRow { workspace: "/p1".into(), sessions: 4, last_active: 101 });
        assert_eq!(p[1].workspace, "/p2");

        // Pages of 1 with ties on updated_at never skip or repeat.
        let mut seen = vec![];
        let mut cursor: Option<(i64, String)> = None;
        loop {
            let page =
                s.project_sessions("/p1", cursor.as_ref().map(|(t, id)| (*t, id.as_str())), 1, &[]).unwrap();
            seen.push(page[0].session_id.clone());
            if page.len() < 2 {
                break;
            }
            cursor = Some((page[0].updated_at, page[0].session_id.clone()));
        }
        assert_eq!(seen, ["d", "c", "b", "a"]);
        let page = s.project_sessions("/p1", None, 10, &["d".into()]).unwrap();
        assert_eq!(page.iter().map(|r| r.session_id.as_str()).collect::<Vec<_>>(), ["c", "b", "a"]);

        assert_eq!(s.write(|w| w.delete_project("/p1")).unwrap(), 4);
        assert_eq!(s.write(|w| w.delete_project("/p1")).unwrap(), 0, "idempotent");
        assert_eq!(s.projects().unwrap().len(), 1);
        assert!(!s.workspace_known("/p1").unwrap());
        // One session used again revives the fully deleted project.
        s.write(|w| {
            w.revive_project_if_fully_deleted("/p1")?;
            w.set_meta(&meta("a", "/p1"), true, 200)
        })
        .unwrap();
        assert_eq!(s.projects().unwrap()[0].sessions, 4);
        // An individually deleted session of a visible project stays deleted.
        s.write(|w| w.set_deleted("b", true, 300)).unwrap();
        s.write(|w| w.revive_project_if_fully_deleted("/p1")).unwrap();
        assert_eq!(s.projects().unwrap()[0].sessions, 3);
        // A use that is not an editor's or a CLI's (a phone's attach) keeps the tombstone.
        s.write(|w| w.set_meta(&meta("b", "/p1"), false, 400)).unwrap();
        assert_eq!(s.is_deleted("b").unwrap(), Some(true));
        s.write(|w| w.set_meta(&meta("b", "/p1"), true, 500)).unwrap();
        assert_eq!(s.is_deleted("b").unwrap(), Some(false));
    }

    #[test]
    fn the_agent_of_a_session_is_recorded_and_an_unknown_one_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open_in(dir.path()).unwrap();
        let alt = SessionMeta { agent: Some("alt\x1b[2J".into()), ..meta("a", "/p") };
        s.write(|w| w.set_meta(&alt, true, 1)).unwrap();
        assert_eq!(s.session_agent("a").unwrap().as_deref(), Some("alt"), "stored as one clean line");
        s.write(|w| w.set_meta(&meta("a", "/p"), true, 2)).unwrap();
        assert_eq!(s.project_sessions("/p", None, 10, &[]).unwrap()[0].agent.as_deref(), Some("alt"));
        assert_eq!(s.session_agent("nobody").unwrap(), None);
    }
}
