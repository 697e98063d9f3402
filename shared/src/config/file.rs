//! The raw `config.json`: reading it with errors that name the file and the key, and writing it
//! back without losing keys we do not know, under the settings writers' cross-process lock.

use serde_json::{Map, Value};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// What is wrong with the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file exists but could not be read.
    #[error("cannot read config file {}: {source}", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The file is not valid JSON, or not a JSON object.
    #[error("config file {} is not valid: {reason}", path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// What the parser said, with line and column.
        reason: String,
    },
    /// A key in the file has the wrong type or value.
    #[error("config file {}: `{key}` {reason}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The dotted key, e.g. `remote.hubPort`.
        key: String,
        /// What was expected and what was found.
        reason: String,
    },
    /// An environment variable has a value we cannot use.
    #[error("environment variable {var}: {reason}")]
    Env {
        /// The variable.
        var: String,
        /// What is wrong.
        reason: String,
    },
    /// The file could not be written.
    #[error("cannot write config file {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// No home directory to put the files in.
    #[error(transparent)]
    Paths(#[from] crate::paths::PathsError),
}

/// The parsed contents of `config.json`: a JSON object, every key kept, known or not.
#[derive(Clone, Debug, Default)]
pub struct RawConfig {
    path: PathBuf,
    root: Map<String, Value>,
}

impl RawConfig {
    /// Reads `path`; a missing file is an empty config, anything else unreadable is an error.
    pub fn read(path: &Path) -> Result<RawConfig, ConfigError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(RawConfig { path: path.to_owned(), root: Map::new() });
            }
            Err(source) => return Err(ConfigError::Unreadable { path: path.to_owned(), source }),
        };
        RawConfig::parse(path, &text)
    }

    /// Parses `text` as the contents of `path` (an empty text is an empty config).
    pub fn parse(path: &Path, text: &str) -> Result<RawConfig, ConfigError> {
        if text.trim().is_empty() {
            return Ok(RawConfig { path: path.to_owned(), root: Map::new() });
        }
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(root)) => Ok(RawConfig { path: path.to_owned(), root }),
            Ok(other) => Err(ConfigError::Syntax {
                path: path.to_owned(),
                reason: format!("expected a JSON object at the top, found {}", type_name(&other)),
            }),
            Err(e) => Err(ConfigError::Syntax { path: path.to_owned(), reason: e.to_string() }),
        }
    }

    /// The file this config came from (and is written back to).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The value at a dotted key (`remote.hubPort`), if present and not null.
    pub fn get(&self, key: &str) -> Option<&Value> {
        let mut parts = key.split('.');
        let mut cur = self.root.get(parts.next()?)?;
        for part in parts {
            cur = cur.as_object()?.get(part)?;
        }
        (!cur.is_null()).then_some(cur)
    }

    /// The top-level object, for sections keyed by user-chosen names (`agents`).
    pub fn root(&self) -> &Map<String, Value> {
        &self.root
    }

    /// An error about `key` in this file.
    pub fn invalid(&self, key: &str, reason: impl Into<String>) -> ConfigError {
        ConfigError::Invalid { path: self.path.clone(), key: key.to_owned(), reason: reason.into() }
    }

    /// A string at `key`, or an error naming it.
    pub fn str(&self, key: &str) -> Result<Option<String>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(v) => Err(self.invalid(key, format!("must be a string, found {}", type_name(v)))),
        }
    }

    /// A boolean at `key`, or an error naming it.
    pub fn bool(&self, key: &str) -> Result<Option<bool>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.invalid(key, format!("must be true or false, found {}", type_name(v)))),
        }
    }

    /// A port number at `key`, or an error naming it.
    pub fn port(&self, key: &str) -> Result<Option<u16>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|n| u16::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| self.invalid(key, format!("must be a port number 0-65535, found {v}"))),
        }
    }

    /// A non-negative integer at `key`, or an error naming it.
    pub fn u64(&self, key: &str) -> Result<Option<u64>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| self.invalid(key, format!("must be a non-negative integer, found {v}"))),
        }
    }

    /// An array of strings at `key`, or an error naming it.
    pub fn strings(&self, key: &str) -> Result<Option<Vec<String>>, ConfigError> {
        let Some(v) = self.get(key) else { return Ok(None) };
        strings_of(v).map(Some).ok_or_else(|| self.invalid(key, "must be an array of strings"))
    }

    /// Sets a dotted key, creating intermediate objects; every other key is kept.
    pub fn set(&mut self, key: &str, value: Value) -> Result<(), ConfigError> {
        let parts: Vec<&str> = key.split('.').collect();
        let (last, parents) = parts.split_last().expect("split yields at least one part");
        let mut cur = &mut self.root;
        for (i, part) in parents.iter().enumerate() {
            let entry = cur.entry(part.to_string()).or_insert_with(|| Value::Object(Map::new()));
            if entry.is_null() {
                *entry = Value::Object(Map::new());
            }
            cur = match entry {
                Value::Object(m) => m,
                other => {
                    let at = parts[..=i].join(".");
                    let found = type_name(other);
                    return Err(self_invalid(&self.path, &at, found));
                }
            };
        }
        cur.insert(last.to_string(), value);
        Ok(())
    }

    /// Reads `path`, lets `edit` change it and writes it back, all under the cross-process lock
    /// every settings write takes (`paths::FileLock`), so a token rotation racing a
    /// settings write (another process) loses neither: each reads what the other wrote.
    pub fn update(
        path: &Path,
        edit: impl FnOnce(&mut RawConfig) -> Result<(), ConfigError>,
    ) -> Result<(), ConfigError> {
        let dir = path.parent().unwrap_or(Path::new("."));
        let err = |source| ConfigError::Write { path: path.to_owned(), source };
        crate::paths::Paths::ensure_private_dir(dir).map_err(err)?;
        let _lock = crate::paths::FileLock::take(path).map_err(|e| err(io::Error::other(e.to_string())))?;
        let mut raw = RawConfig::read(path)?;
        edit(&mut raw)?;
        raw.write()
    }

    /// Writes the file atomically (temp file + rename), private to this user (it may hold the
    /// token). The parent directory is created if needed. Only under the lock: [`Self::update`].
    fn write(&self) -> Result<(), ConfigError> {
        let err = |source| ConfigError::Write { path: self.path.clone(), source };
        let dir = self.path.parent().unwrap_or(Path::new("."));
        crate::paths::Paths::ensure_private_dir(dir).map_err(err)?;
        let mut text = serde_json::to_string_pretty(&Value::Object(self.root.clone()))
            .expect("a JSON map always serializes");
        text.push('\n');
        write_private_atomic(&self.path, text.as_bytes()).map_err(err)
    }
}

fn self_invalid(path: &Path, key: &str, found: &str) -> ConfigError {
    ConfigError::Invalid {
        path: path.to_owned(),
        key: key.to_owned(),
        reason: format!("must be an object, found {found}"),
    }
}

/// Reads an array of strings.
pub(crate) fn strings_of(v: &Value) -> Option<Vec<String>> {
    v.as_array()?.iter().map(|s| s.as_str().map(str::to_owned)).collect()
}

/// A short name for a JSON value's type, for error messages.
pub(crate) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Writes `bytes` to `path` atomically with mode 0600: a reader sees the old file or the new one.
pub fn write_private_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut f =
            std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
