//! The configuration a long-running process (the hub) keeps current: parsed once, parsed again
//! when `config.json` changes. The file's directory is watched with `notify` (an editor or
//! `write_private_atomic` replaces the file by a rename, so the file itself cannot be the
//! watch). An edit that does not parse keeps the last good configuration and is logged, and
//! so does an empty file (a write in progress); the environment still wins over the file, as
//! at start.

use super::{Config, ConfigError, RawConfig};
use crate::env::Env;
use crate::paths::Paths;
use std::path::Path;
use std::sync::{Arc, RwLock};

/// A configuration kept current with its file (see the module docs).
pub struct Live {
    state: Arc<Shared>,
    /// Dropping it stops the watch.
    _watcher: Option<notify::RecommendedWatcher>,
}

struct Shared {
    current: RwLock<Arc<Config>>,
    paths: Paths,
    env: Box<dyn Env + Send + Sync>,
}

impl Shared {
    fn reload(&self) -> Result<(), ConfigError> {
        let file = &self.paths.config_file;
        // An empty file is a write in progress (editors truncate, then write): the write's own
        // event follows. A deleted file does reset the configuration to its defaults.
        if std::fs::metadata(file).is_ok_and(|m| m.len() == 0) {
            return Ok(());
        }
        let raw = RawConfig::read(&self.paths.config_file)?;
        let cfg = Config::from_parts(self.paths.clone(), &raw, self.env.as_ref())?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(cfg);
        Ok(())
    }
}

impl Live {
    /// Keeps `cfg` current: re-resolved from its file and `env` whenever the file changes.
    /// When the watch cannot be set up, `cfg` stays as it is (logged).
    pub fn watch(cfg: Config, env: Box<dyn Env + Send + Sync>) -> Live {
        let file = cfg.paths.config_file.clone();
        let state = Arc::new(Shared { paths: cfg.paths.clone(), current: RwLock::new(Arc::new(cfg)), env });
        let watcher = match watch_dir(&file, state.clone()) {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!(
                    file = %file.display(),
                    "cannot watch the config file ({e}): changes take effect on the next start"
                );
                None
            }
        };
        Live { state, _watcher: watcher }
    }

    /// The configuration as it is now.
    pub fn get(&self) -> Arc<Config> {
        self.state.current.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Reads the file again now; on an error the last good configuration stays.
    pub fn reload(&self) -> Result<(), ConfigError> {
        self.state.reload()
    }
}

/// Watches the directory holding `file` and reloads `state` on every change to `file`.
fn watch_dir(file: &Path, state: Arc<Shared>) -> notify::Result<notify::RecommendedWatcher> {
    use notify::{EventKind, RecursiveMode, Watcher};
    let dir = file.parent().map(Path::to_owned).unwrap_or_else(|| "/".into());
    // The directory must exist to be watched; it is ours (the token file lives there too).
    let _ = Paths::ensure_private_dir(&dir);
    let name = file.file_name().map(ToOwned::to_owned);
    let shown = file.display().to_string();
    let mut watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
        let Ok(ev) = ev else { return };
        if matches!(ev.kind, EventKind::Access(_))
            || !ev.paths.iter().any(|p| p.file_name() == name.as_deref())
        {
            return;
        }
        match state.reload() {
            Ok(()) => tracing::info!(file = %shown, "configuration reloaded"),
            Err(e) => tracing::warn!("{e}; keeping the last good configuration"),
        }
    })?;
    watcher.watch(&dir, RecursiveMode::NonRecursive)?;
    Ok(watcher)
}
