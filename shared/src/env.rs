//! Where settings come from: the [`Env`] trait, so precedence is tested with a `HashMap`
//! instead of the process environment. Both [`crate::paths`] and [`crate::config`] read
//! through it (the paths do not depend on the config).

use std::collections::HashMap;

/// A source of environment variables.
pub trait Env {
    /// The value of `key`, if set.
    fn get(&self, key: &str) -> Option<String>;
}

/// The real process environment.
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn get(&self, key: &str) -> Option<String> {
        std::env::var(key).ok()
    }
}

impl Env for HashMap<String, String> {
    fn get(&self, key: &str) -> Option<String> {
        HashMap::get(self, key).cloned()
    }
}
