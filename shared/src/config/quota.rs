//! `quota` in `config.json`, and the environment variables over it. Secrets are kept in
//! [`Secret`], whose `Debug` prints nothing of them (the config is logged at debug).

use super::{ConfigError, Env, RawConfig};
use serde_json::Value;
use std::time::Duration;

/// The three built-in sections, in the contract's order.
pub const BUILT_IN: [&str; 3] = ["glm", "opencode", "ollama"];

/// Default time one outbound call may take.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(8);

/// A credential: compared, cloned and used, never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a credential.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value, for the one header it goes into.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

/// GLM (Z.AI / BigModel coding plans).
#[derive(Clone, Debug, PartialEq)]
pub struct GlmConfig {
    /// `quota.glm.apiKey` / `ZCODE_ACP_GLM_API_KEY`.
    pub api_key: Secret,
    /// `quota.glm.baseUrl` / `ZCODE_ACP_GLM_BASE_URL`: the agent's API base URL; it only picks
    /// the host (api.z.ai when it names it, else open.bigmodel.cn).
    pub base_url: Option<String>,
}

/// OpenCode Go (the workspace dashboard).
#[derive(Clone, Debug, PartialEq)]
pub struct OpencodeConfig {
    /// `quota.opencode.workspaceId` / `OPENCODE_GO_WORKSPACE_ID` (`wrk_…`).
    pub workspace_id: String,
    /// `quota.opencode.authCookie` / `OPENCODE_GO_AUTH_COOKIE` (the `auth` cookie, `Fe26.2**…`).
    pub auth_cookie: Secret,
}

/// Ollama Cloud.
#[derive(Clone, Debug, PartialEq)]
pub struct OllamaConfig {
    /// `quota.ollama.apiKey` (or `quota.ollamaApiKey`) / `OLLAMA_API_KEY`.
    pub api_key: Secret,
}

/// A user-configured command that prints one section's JSON.
#[derive(Clone, Debug, PartialEq)]
pub struct CommandSpec {
    /// The section's name (`quota.commands.<name>`).
    pub name: String,
    /// The program.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// How long it may run (`timeoutMs`, default the call timeout).
    pub timeout: Duration,
}

/// Everything the quota providers need.
#[derive(Clone, Debug, PartialEq)]
pub struct QuotaConfig {
    /// GLM, if a key is set.
    pub glm: Option<GlmConfig>,
    /// OpenCode Go, if a workspace id or cookie is set.
    pub opencode: Option<OpencodeConfig>,
    /// Ollama Cloud, if a key is set.
    pub ollama: Option<OllamaConfig>,
    /// Command providers, by name order.
    pub commands: Vec<CommandSpec>,
    /// One outbound call's limit (`quota.timeoutMs` / `ZCODE_ACP_QUOTA_TIMEOUT_MS`, 8 s).
    pub timeout: Duration,
    /// FOR TESTS ONLY: origins replacing the vendors' (`ZCODE_ACP_QUOTA_TEST_GLM_URL`,
    /// `…_OPENCODE_URL`, `…_OLLAMA_URL`); plain http is accepted for loopback addresses only.
    pub test_origins: TestOrigins,
}

/// Vendor origins replaced for tests (see [`QuotaConfig::test_origins`]).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct TestOrigins {
    /// Replaces `https://api.z.ai` / `https://open.bigmodel.cn`.
    pub glm: Option<String>,
    /// Replaces `https://opencode.ai`.
    pub opencode: Option<String>,
    /// Replaces `https://ollama.com`.
    pub ollama: Option<String>,
}

impl Default for QuotaConfig {
    fn default() -> QuotaConfig {
        QuotaConfig {
            glm: None,
            opencode: None,
            ollama: None,
            commands: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
            test_origins: TestOrigins::default(),
        }
    }
}

impl QuotaConfig {
    /// Reads `quota` from the file and the environment (environment first).
    pub fn from_parts(raw: &RawConfig, env: &dyn Env) -> Result<QuotaConfig, ConfigError> {
        let var = |k: &str| env.get(k).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        let test_var =
            |k: &str| crate::env::test_knob(env, k).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        let text = |k: &str| -> Result<Option<String>, ConfigError> {
            Ok(raw.str(k)?.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty()))
        };
        let glm =
            match var("ZCODE_ACP_GLM_API_KEY").map_or_else(|| text("quota.glm.apiKey"), |v| Ok(Some(v)))? {
                Some(key) => Some(GlmConfig {
                    api_key: Secret(key),
                    base_url: var("ZCODE_ACP_GLM_BASE_URL")
                        .map_or_else(|| text("quota.glm.baseUrl"), |v| Ok(Some(v)))?,
                }),
                None => None,
            };
        let id = var("OPENCODE_GO_WORKSPACE_ID")
            .map_or_else(|| text("quota.opencode.workspaceId"), |v| Ok(Some(v)))?;
        let cookie = var("OPENCODE_GO_AUTH_COOKIE")
            .map_or_else(|| text("quota.opencode.authCookie"), |v| Ok(Some(v)))?;
        // Half a credential is a configuration to report (auth_error), not an absent one.
        let opencode = match (id, cookie) {
            (None, None) => None,
            (id, cookie) => Some(OpencodeConfig {
                workspace_id: id.unwrap_or_default(),
                auth_cookie: Secret(cookie.unwrap_or_default()),
            }),
        };
        let ollama_key = match var("OLLAMA_API_KEY") {
            Some(v) => Some(v),
            None => text("quota.ollama.apiKey")?.or(text("quota.ollamaApiKey")?),
        };
        let timeout = match var("ZCODE_ACP_QUOTA_TIMEOUT_MS") {
            Some(v) => Duration::from_millis(v.parse::<u64>().ok().filter(|n| *n > 0).ok_or_else(|| {
                ConfigError::Env {
                    var: "ZCODE_ACP_QUOTA_TIMEOUT_MS".into(),
                    reason: format!("expected a positive number of milliseconds, got {v:?}"),
                }
            })?),
            None => match raw.u64("quota.timeoutMs")? {
                Some(0) => return Err(raw.invalid("quota.timeoutMs", "must be at least 1")),
                Some(ms) => Duration::from_millis(ms),
                None => DEFAULT_TIMEOUT,
            },
        };
        Ok(QuotaConfig {
            glm,
            opencode,
            ollama: ollama_key.map(|k| OllamaConfig { api_key: Secret(k) }),
            commands: commands(raw, timeout)?,
            timeout,
            test_origins: TestOrigins {
                glm: test_var("ZCODE_ACP_QUOTA_TEST_GLM_URL"),
                opencode: test_var("ZCODE_ACP_QUOTA_TEST_OPENCODE_URL"),
                ollama: test_var("ZCODE_ACP_QUOTA_TEST_OLLAMA_URL"),
            },
        })
    }

    /// The longest the whole query may take: two calls in a row, or the slowest command, and
    /// a margin. Past it the query failed (the providers bound themselves well before).
    pub fn budget(&self) -> Duration {
        let slowest = self.commands.iter().map(|c| c.timeout).max().unwrap_or_default();
        (self.timeout * 2).max(slowest) + Duration::from_secs(2)
    }
}

/// `quota.commands`: `{name: {command, args?, timeoutMs?}}`.
fn commands(raw: &RawConfig, timeout: Duration) -> Result<Vec<CommandSpec>, ConfigError> {
    let Some(section) = raw.get("quota.commands") else { return Ok(Vec::new()) };
    let Some(section) = section.as_object() else {
        return Err(raw.invalid("quota.commands", "must be an object of named commands"));
    };
    let mut out = Vec::new();
    for (name, v) in section {
        let key = format!("quota.commands.{name}");
        let good_name = !name.is_empty()
            && name.len() <= 32
            && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        if !good_name || BUILT_IN.contains(&name.as_str()) {
            return Err(raw.invalid(
                &key,
                "the name must be 1-32 of a-z, 0-9, - and _, and not glm, opencode or ollama",
            ));
        }
        let command = match v.get("command") {
            Some(Value::String(c)) if !c.trim().is_empty() => c.clone(),
            _ => return Err(raw.invalid(&format!("{key}.command"), "must be a non-empty string")),
        };
        let args: Vec<String> = raw.strings(&format!("{key}.args"))?.unwrap_or_default();
        let timeout = match raw.u64(&format!("{key}.timeoutMs"))? {
            Some(0) => return Err(raw.invalid(&format!("{key}.timeoutMs"), "must be at least 1")),
            Some(ms) => Duration::from_millis(ms),
            None => timeout,
        };
        out.push(CommandSpec { name: name.clone(), command, args, timeout });
    }
    Ok(out)
}
