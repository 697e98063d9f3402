//! The remote token: `ZCODE_ACP_REMOTE_TOKEN`, else `remote.token` in `config.json`, else a
//! token file generated on first need (32 random bytes, URL-safe base64, mode 0600).
//!
//! Possession of the token is full control of every agent session on the machine, so it is
//! compared by SHA-256 digest in constant time and never logged.

use crate::config::{Config, ConfigError, RawConfig, TokenOrigin, write_private_atomic};
use base64::Engine;
use sha2::{Digest, Sha256};
use std::io;
use std::path::PathBuf;

/// Random bytes in a generated token.
pub const TOKEN_BYTES: usize = 32;

/// Where the token in force comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenSource {
    /// The `ZCODE_ACP_REMOTE_TOKEN` environment variable.
    Env,
    /// `remote.token` in this config file.
    ConfigFile(PathBuf),
    /// This generated token file.
    TokenFile(PathBuf),
}

impl std::fmt::Display for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenSource::Env => f.write_str("the ZCODE_ACP_REMOTE_TOKEN environment variable"),
            TokenSource::ConfigFile(p) => write!(f, "remote.token in {}", p.display()),
            TokenSource::TokenFile(p) => write!(f, "{}", p.display()),
        }
    }
}

/// Why the token could not be read, made or replaced.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The token file could not be read or written.
    #[error("token file {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The config file could not be updated.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The environment sets the token, so rotating a file would change nothing.
    #[error("the token is set by ZCODE_ACP_REMOTE_TOKEN; to rotate it, change that variable where it is set")]
    SetByEnv,
    /// The operating system's random source failed.
    #[error("cannot get random bytes for a token: {0}")]
    Random(String),
}

/// A fresh token: [`TOKEN_BYTES`] random bytes, URL-safe base64 without padding.
pub fn generate() -> Result<String, TokenError> {
    let mut bytes = [0u8; TOKEN_BYTES];
    getrandom::fill(&mut bytes).map_err(|e| TokenError::Random(e.to_string()))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

/// The token in force and where it comes from; generates the token file on first need.
pub fn resolve(cfg: &Config) -> Result<(String, TokenSource), TokenError> {
    if let Some((token, origin)) = &cfg.remote.token {
        return Ok((token.clone(), configured_source(cfg, *origin)));
    }
    let path = cfg.paths.token_file.clone();
    let io_err = |source| TokenError::Io { path: path.clone(), source };
    match std::fs::read_to_string(&path) {
        Ok(t) if !t.trim().is_empty() => return Ok((t.trim().to_owned(), TokenSource::TokenFile(path))),
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(e)),
    }
    let token = generate()?;
    create_token_file(&path, &token).map_err(io_err)?;
    // Another process may have won the race to create it: the file is the truth.
    let t = std::fs::read_to_string(&path).map_err(io_err)?;
    Ok((t.trim().to_owned(), TokenSource::TokenFile(path)))
}

/// Replaces the token where it is kept (config file or token file) and returns the new one.
pub fn rotate(cfg: &Config) -> Result<(String, TokenSource), TokenError> {
    let token = generate()?;
    match &cfg.remote.token {
        Some((_, TokenOrigin::Env)) => Err(TokenError::SetByEnv),
        Some((_, TokenOrigin::File)) => {
            RawConfig::update(&cfg.paths.config_file, |raw| raw.set("remote.token", token.clone().into()))?;
            Ok((token, TokenSource::ConfigFile(cfg.paths.config_file.clone())))
        }
        None => {
            let path = cfg.paths.token_file.clone();
            ensure_parent(&path)
                .and_then(|()| write_private_atomic(&path, format!("{token}\n").as_bytes()))
                .map_err(|source| TokenError::Io { path: path.clone(), source })?;
            Ok((token, TokenSource::TokenFile(path)))
        }
    }
}

fn configured_source(cfg: &Config, origin: TokenOrigin) -> TokenSource {
    match origin {
        TokenOrigin::Env => TokenSource::Env,
        TokenOrigin::File => TokenSource::ConfigFile(cfg.paths.config_file.clone()),
    }
}

fn ensure_parent(path: &std::path::Path) -> io::Result<()> {
    match path.parent() {
        Some(dir) => crate::paths::Paths::ensure_private_dir(dir),
        None => Ok(()),
    }
}

/// Creates the token file without ever replacing one that appeared meanwhile: the content goes
/// to a private temp file that is then hard-linked into place (which fails if the name exists).
fn create_token_file(path: &std::path::Path, token: &str) -> io::Result<()> {
    ensure_parent(path)?;
    let tmp = path.with_file_name(format!(".token.{}.new", std::process::id()));
    write_private_atomic(&tmp, format!("{token}\n").as_bytes())?;
    let linked = match std::fs::hard_link(&tmp, path) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            // An empty file from a crash: replace it. A real token: keep it.
            if std::fs::read_to_string(path)?.trim().is_empty() {
                std::fs::rename(&tmp, path)
            } else {
                Ok(())
            }
        }
        other => other,
    };
    let _ = std::fs::remove_file(&tmp);
    linked
}

/// The SHA-256 digest of a token, what the hub keeps and compares.
pub fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Whether `candidate` is the token whose digest is `expected`, in constant time.
pub fn verify(expected: &[u8; 32], candidate: &str) -> bool {
    let got = digest(candidate);
    expected.iter().zip(got.iter()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

/// The token an `Authorization` header value presents: `Bearer <token>` with the scheme in any
/// case (RFC 9110 §11.1), whitespace around either trimmed; `None` for another scheme. The one
/// parse both servers use (then [`Live::verify_fresh`], a constant-time compare).
pub fn bearer(authorization: &str) -> Option<&str> {
    let v = authorization.trim();
    let (scheme, token) = (v.get(..7)?, v.get(7..)?);
    scheme.eq_ignore_ascii_case("bearer ").then(|| token.trim())
}

/// The token in force for a long-running process (the hub, a bridge): re-read from where it
/// is kept when that file changes, so `zcode-acp token --rotate` takes effect in running
/// processes: the old token stops working and the new one works, without a restart. A token
/// set by the environment never changes.
pub struct Live {
    source: TokenSource,
    state: std::sync::RwLock<LiveState>,
}

struct LiveState {
    token: String,
    digest: [u8; 32],
    /// How many times the token changed since this process read it first.
    generation: u64,
    /// The source file as last read (none for the environment, or when it cannot be read).
    stamp: Option<Stamp>,
}

/// Enough of a file's metadata to see that it changed (a rotation replaces the file).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    ino: u64,
    len: u64,
    modified: Option<std::time::SystemTime>,
}

fn stamp(path: &std::path::Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some(Stamp { ino: m.ino(), len: m.len(), modified: m.modified().ok() })
}

impl Live {
    /// The token in force now (see [`resolve`]), watched from here on.
    pub fn resolve(cfg: &Config) -> Result<Live, TokenError> {
        let (token, source) = resolve(cfg)?;
        Ok(Live::new(token, source))
    }

    fn new(token: String, source: TokenSource) -> Live {
        let stamp = Live::path(&source).and_then(stamp);
        let digest = digest(&token);
        Live { source, state: std::sync::RwLock::new(LiveState { token, digest, generation: 0, stamp }) }
    }

    fn path(source: &TokenSource) -> Option<&std::path::Path> {
        match source {
            TokenSource::Env => None,
            TokenSource::ConfigFile(p) | TokenSource::TokenFile(p) => Some(p),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, LiveState> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The token (to present to a bridge or the hub).
    pub fn token(&self) -> String {
        self.read().token.clone()
    }

    /// Where it comes from.
    pub fn source(&self) -> &TokenSource {
        &self.source
    }

    /// Whether `candidate` is the token as last read, in constant time.
    pub fn verify(&self, candidate: &str) -> bool {
        verify(&self.read().digest, candidate)
    }

    /// Like [`Live::verify`], but a refused candidate gets one [`Live::refresh`] first: a
    /// caller that already has the rotated token is not refused while this process catches up.
    pub fn verify_fresh(&self, candidate: &str) -> bool {
        self.verify_generation(candidate).is_some()
    }

    /// Like [`Live::verify_fresh`], telling which generation of the token `candidate` is (the
    /// number of rotations this process saw before it; see [`Live::generation`]).
    pub fn verify_generation(&self, candidate: &str) -> Option<u64> {
        let checked = || {
            let s = self.read();
            verify(&s.digest, candidate).then_some(s.generation)
        };
        // The read lock is let go before `refresh` takes the write lock.
        if let Some(generation) = checked() {
            return Some(generation);
        }
        self.refresh();
        checked()
    }

    /// How many times the token changed since this process first read it.
    pub fn generation(&self) -> u64 {
        self.read().generation
    }

    /// Re-reads the token if its file changed since the last read; whether the token changed.
    /// A file that vanished or holds no token leaves the token as it was.
    pub fn refresh(&self) -> bool {
        let Some(path) = Live::path(&self.source) else { return false };
        let now = stamp(path);
        if now.is_none() || now == self.read().stamp {
            return false;
        }
        let fresh = match &self.source {
            TokenSource::TokenFile(_) => std::fs::read_to_string(path).ok().map(|t| t.trim().to_owned()),
            TokenSource::ConfigFile(_) => RawConfig::read(path)
                .ok()
                .and_then(|raw| raw.get("remote.token").and_then(|v| v.as_str()).map(str::to_owned)),
            TokenSource::Env => None,
        };
        let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
        state.stamp = now;
        match fresh {
            Some(t) if !t.is_empty() && t != state.token => {
                state.digest = digest(&t);
                state.token = t;
                state.generation += 1;
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_bearer_scheme_is_matched_in_any_case() {
        for v in ["Bearer abc", "bearer abc", "BEARER abc", "  bEaReR   abc  "] {
            assert_eq!(bearer(v), Some("abc"), "{v:?}");
        }
        for v in ["Basic abc", "Bearerabc", "Bearer", "", "Token abc"] {
            assert_eq!(bearer(v), None, "{v:?}");
        }
    }

    fn cfg(dir: &std::path::Path, extra: &[(&str, &str)]) -> Config {
        let mut env = HashMap::from([("ZCODE_ACP_HOME".to_owned(), dir.display().to_string())]);
        for (k, v) in extra {
            env.insert((*k).to_owned(), (*v).to_owned());
        }
        Config::load_from(&env).unwrap()
    }

    #[test]
    fn generated_tokens_are_long_url_safe_and_distinct() {
        let a = generate().unwrap();
        let b = generate().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), 43, "32 bytes of base64 without padding");
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'), "{a}");
    }

    #[test]
    fn token_file_is_generated_once_private_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let c = cfg(dir.path(), &[]);
        let (t1, src) = resolve(&c).unwrap();
        assert_eq!(src, TokenSource::TokenFile(dir.path().join("token")));
        let mode = std::fs::metadata(dir.path().join("token")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let (t2, _) = resolve(&c).unwrap();
        assert_eq!(t1, t2);
        let (t3, _) = rotate(&c).unwrap();
        assert_ne!(t3, t1);
        assert_eq!(resolve(&c).unwrap().0, t3);
        let mode = std::fs::metadata(dir.path().join("token")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn env_beats_config_beats_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "from-file\n").unwrap();
        assert_eq!(resolve(&cfg(dir.path(), &[])).unwrap().0, "from-file");
        std::fs::write(dir.path().join("config.json"), r#"{"remote":{"token":"from-config"}}"#).unwrap();
        assert_eq!(resolve(&cfg(dir.path(), &[])).unwrap().0, "from-config");
        let c = cfg(dir.path(), &[("ZCODE_ACP_REMOTE_TOKEN", "from-env")]);
        assert_eq!(resolve(&c).unwrap(), ("from-env".to_owned(), TokenSource::Env));
        assert!(matches!(rotate(&c), Err(TokenError::SetByEnv)));
    }

    #[test]
    fn rotating_a_config_token_rewrites_only_that_key() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), r#"{"remote":{"token":"old","x":1},"y":2}"#).unwrap();
        let (new, src) = rotate(&cfg(dir.path(), &[])).unwrap();
        assert_eq!(src, TokenSource::ConfigFile(dir.path().join("config.json")));
        let back: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join("config.json")).unwrap()).unwrap();
        assert_eq!(back["remote"]["token"], new.as_str());
        assert_eq!(back["remote"]["x"], 1);
        assert_eq!(back["y"], 2);
    }

    #[test]
    fn verify_compares_digests() {
        let d = digest("secret");
        assert!(verify(&d, "secret"));
        assert!(!verify(&d, "secret2"));
        assert!(!verify(&d, ""));
    }

    #[test]
    fn a_live_token_follows_rotations_of_its_file_or_config_and_never_of_the_environment() {
        let dir = tempfile::tempdir().unwrap();
        let c = cfg(dir.path(), &[]);
        let live = Live::resolve(&c).unwrap();
        let first = live.token();
        assert!(live.verify(&first) && !live.refresh(), "nothing changed yet");
        let (second, _) = rotate(&c).unwrap();
        assert!(live.verify(&first) && !live.verify(&second), "not re-read before a refresh");
        assert_eq!(live.verify_generation(&second), Some(1), "a caller with the new token is let in at once");
        assert!(!live.verify(&first), "the old token no longer works");
        assert_eq!(live.token(), second);
        std::fs::remove_file(dir.path().join("token")).unwrap();
        assert!(!live.refresh() && live.verify(&second), "a vanished file keeps the token");

        std::fs::write(dir.path().join("config.json"), r#"{"remote":{"token":"config-one"}}"#).unwrap();
        let c = cfg(dir.path(), &[]);
        let live = Live::resolve(&c).unwrap();
        assert_eq!(live.token(), "config-one");
        let (rotated, _) = rotate(&c).unwrap();
        assert!(live.refresh() && live.verify(&rotated) && !live.verify("config-one"));

        let c = cfg(dir.path(), &[("ZCODE_ACP_REMOTE_TOKEN", "from-env")]);
        let live = Live::resolve(&c).unwrap();
        std::fs::write(dir.path().join("config.json"), r#"{"remote":{"token":"other"}}"#).unwrap();
        assert!(!live.refresh() && !live.verify_fresh("other") && live.verify("from-env"));
    }
}
