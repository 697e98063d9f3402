//! The hub's one connection to the machine's store, and the project catalog built on it.
//!
//! The store is opened (and migrated) once, at hub start, on a thread of its own that then runs
//! every query the routes need, one after another: no SQLite call and no `busy_timeout` wait
//! ever runs on an async worker. Reads are read transactions ([`Store::read`]), which in WAL
//! mode never wait for the bridges' journal writes; the hub's one write (project delete) takes
//! the write lock like any writer. If the store cannot be opened (a corrupt or foreign file),
//! the routes answer 503 with the reason and the next query tries again. The thread runs SQL
//! only: the catalog's file-system checks ([`shown`], [`creatable`], a path's realpath) run on
//! the blocking pool (`structure::the_hub_store_thread_runs_sql_only`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, mpsc};
use tokio::sync::oneshot;
use zcode_shared::config::Config;
use zcode_shared::store::{Store, StoreError};

type Job = Box<dyn FnOnce(&mut Store) + Send>;

/// The handle on the store thread (see the module docs).
pub struct Catalog {
    jobs: mpsc::Sender<(Job, oneshot::Sender<String>)>,
}

impl Catalog {
    /// Starts the store thread, which opens the store in `data_dir` right away.
    pub fn start(data_dir: PathBuf) -> std::io::Result<Catalog> {
        let (tx, rx) = mpsc::channel::<(Job, oneshot::Sender<String>)>();
        std::thread::Builder::new().name("hub-store".into()).spawn(move || {
            let open = || {
                Store::open_in(&data_dir).map_err(|e| {
                    tracing::warn!("{e}");
                    e.to_string()
                })
            };
            let mut store = open();
            for (job, failed) in rx {
                if store.is_err() {
                    store = open();
                }
                match &mut store {
                    // A panicking query answers its caller with an error (its sender is
                    // dropped); the thread, and the store, stay for the next one.
                    Ok(st) => {
                        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(st))).is_err() {
                            tracing::error!("a store query panicked");
                        }
                    }
                    Err(e) => {
                        let _ = failed.send(e.clone());
                    }
                }
            }
        })?;
        Ok(Catalog { jobs: tx })
    }

    /// Runs `f` on the store thread and waits (asynchronously) for its result; `Err` says why
    /// the store is unavailable.
    pub async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Store) -> T + Send + 'static,
    ) -> Result<T, String> {
        let (out_tx, out_rx) = oneshot::channel();
        let (fail_tx, fail_rx) = oneshot::channel();
        let job: Job = Box::new(move |st| {
            let _ = out_tx.send(f(st));
        });
        self.jobs.send((job, fail_tx)).map_err(|_| "the store thread is gone".to_owned())?;
        match out_rx.await {
            Ok(v) => Ok(v),
            Err(_) => {
                Err(fail_rx.await.unwrap_or_else(|_| "a store query failed (see the hub's log)".to_owned()))
            }
        }
    }
}

/// Whether `p` lies under one of the configured project roots (or is one).
fn under_root(cfg: &Config, p: &Path) -> bool {
    cfg.remote.project_roots.iter().filter_map(|r| std::fs::canonicalize(r).ok()).any(|r| p.starts_with(&r))
}

/// Trees a project list never shows: system temp dirs and our own files (unless a configured
/// root says otherwise).
fn hidden(cfg: &Config, p: &Path) -> bool {
    if under_root(cfg, p) {
        return false;
    }
    let temp = [
        std::env::temp_dir(),
        PathBuf::from("/tmp"),
        PathBuf::from("/var/tmp"),
        PathBuf::from("/private/var/folders"),
    ];
    let ours = [&cfg.paths.data_dir, &cfg.paths.log_dir, &cfg.paths.run_dir];
    temp.iter().any(|t| p.starts_with(t))
        || ours.iter().any(|o| p.starts_with(o))
        || cfg.paths.config_file.parent().is_some_and(|c| p.starts_with(c))
}

/// A known project: (workspace, sessions, last active in epoch ms).
pub type Project = (String, i64, i64);

/// Every workspace that ran a session, newest first, as the store has it: SQL only, for the
/// store thread ([`shown`] and [`creatable`] then look at the file system, off it).
pub fn project_rows(st: &mut Store) -> Result<Vec<Project>, StoreError> {
    Ok(st.read(|st| st.projects())?.into_iter().map(|r| (r.workspace, r.sessions, r.last_active)).collect())
}

/// The known projects, newest first: [`project_rows`] read on the store thread, then filtered
/// ([`shown`]) on the blocking pool. `Err` says why the store is unavailable.
pub async fn known_projects(store: &Catalog, cfg: Arc<Config>) -> Result<Vec<Project>, String> {
    let rows = store.run(project_rows).await?.map_err(|e| e.to_string())?;
    tokio::task::spawn_blocking(move || shown(rows, &cfg)).await.map_err(|e| e.to_string())
}

/// Of `rows`, the projects a list shows: directories that exist and are not hidden. Looks at
/// the file system: for the blocking pool, never the store thread (SQL only).
pub fn shown(rows: Vec<Project>, cfg: &Config) -> Vec<Project> {
    rows.into_iter()
        .filter(|(w, _, _)| {
            let p = Path::new(w);
            p.is_dir() && !hidden(cfg, p)
        })
        .collect()
}

/// Whether a new session may start in `p` (a realpath): under a root, or a known project (one
/// of `rows` that [`shown`] keeps). Looks at the file system: for the blocking pool.
pub fn creatable(rows: &[Project], cfg: &Config, p: &Path) -> bool {
    if under_root(cfg, p) {
        return true;
    }
    let s = p.display().to_string();
    rows.iter().any(|(w, _, _)| *w == s) && p.is_dir() && !hidden(cfg, p)
}
