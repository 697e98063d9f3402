//! Plan quota: the payload of the hub's `GET /api/quota`, of ACP `account/usage_stats` and of
//! `zcode-acp quota`. One [`Provider`] per vendor (one file each: [`glm`], [`opencode`],
//! [`ollama`], and [`command`] for anything else); each answers one section `{kind, …}` and a
//! failure is that section's `kind`, never an error. [`Quota`] runs them with the caches: the
//! whole payload ~30 s with one query in flight (concurrent callers share it), each provider
//! ~10 s, failures included. The hub and the bridge (when no hub runs) use this same code.

pub mod command;
pub mod glm;
pub mod http;
pub mod ollama;
pub mod opencode;

pub use crate::config::quota::{
    BUILT_IN, CommandSpec, GlmConfig, OllamaConfig, OpencodeConfig, QuotaConfig, Secret, TestOrigins,
};

use serde_json::{Map, Value, json};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How long the whole payload is reused.
pub const PAYLOAD_TTL: Duration = Duration::from_secs(30);
/// How long one provider's section (success or failure) is reused.
pub const SECTION_TTL: Duration = Duration::from_secs(10);

/// What a section says about its provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The numbers are there.
    Success,
    /// No credentials are configured (the CLI omits the section).
    NotConfigured,
    /// The credentials were refused or are malformed.
    AuthError,
    /// The vendor asks us to slow down.
    RateLimited,
    /// Anything else: unreachable, timed out, an answer we cannot read.
    Unavailable,
}

impl Kind {
    /// The contract's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Success => "success",
            Kind::NotConfigured => "not_configured",
            Kind::AuthError => "auth_error",
            Kind::RateLimited => "rate_limited",
            Kind::Unavailable => "unavailable",
        }
    }

    /// Parses the contract's spelling.
    pub fn parse(s: &str) -> Option<Kind> {
        [Kind::Success, Kind::NotConfigured, Kind::AuthError, Kind::RateLimited, Kind::Unavailable]
            .into_iter()
            .find(|k| k.as_str() == s)
    }

    /// A section that is only this kind: `{"kind": "…"}`.
    pub fn section(self) -> Value {
        json!({"kind": self.as_str()})
    }
}

/// A section being fetched.
pub type Fetch<'a> = Pin<Box<dyn Future<Output = Value> + Send + 'a>>;

/// One vendor: a name (its key in the payload) and a fetch that always answers a section.
pub trait Provider: Send + Sync {
    /// The section's key in the payload.
    fn name(&self) -> &str;
    /// The section, `{kind, …}`; failures are kinds, never errors.
    fn fetch(&self) -> Fetch<'_>;
}

/// The whole query could not run (the route's 502, the ACP error).
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
#[error("quota query failed")]
pub struct QueryFailed;

/// A value computed at most once at a time, reused for a while.
struct Flight {
    ttl: Duration,
    state: Arc<Mutex<FlightState>>,
}

#[derive(Default)]
struct FlightState {
    value: Option<(Instant, Value)>,
    running: Option<watch::Receiver<Option<Result<Value, QueryFailed>>>>,
}

impl Flight {
    fn new(ttl: Duration) -> Flight {
        Flight { ttl, state: Arc::default() }
    }

    /// The cached value if fresh, else the one being computed, else `make`'s, run on a task of
    /// its own so a caller that goes away does not cancel it for the others.
    async fn get<F>(&self, make: impl FnOnce() -> F) -> Result<Value, QueryFailed>
    where
        F: Future<Output = Result<Value, QueryFailed>> + Send + 'static,
    {
        let mut rx = {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((at, v)) = &st.value {
                if at.elapsed() < self.ttl {
                    return Ok(v.clone());
                }
            }
            match &st.running {
                Some(rx) => rx.clone(),
                None => {
                    let (tx, rx) = watch::channel(None);
                    st.running = Some(rx.clone());
                    let state = self.state.clone();
                    let fut = make();
                    tokio::spawn(async move {
                        let r = fut.await;
                        let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
                        if let Ok(v) = &r {
                            st.value = Some((Instant::now(), v.clone()));
                        }
                        st.running = None;
                        drop(st);
                        let _ = tx.send(Some(r));
                    });
                    rx
                }
            }
        };
        let r = match rx.wait_for(Option::is_some).await {
            Ok(r) => r.clone().unwrap_or(Err(QueryFailed)),
            Err(_) => Err(QueryFailed),
        };
        if r.is_err() {
            // A task that died (panicked) leaves its channel closed: let the next caller retry.
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            if st.running.as_ref().is_some_and(|c| c.same_channel(&rx) && c.has_changed().is_err()) {
                st.running = None;
            }
        }
        r
    }
}

/// The providers of one configuration, with their caches.
pub struct Quota {
    cfg: QuotaConfig,
    providers: Vec<(Arc<dyn Provider>, Flight)>,
    payload: Flight,
}

impl Quota {
    /// The providers `cfg` configures (the three built-ins always, configured or not, then the
    /// commands), with the contract's cache times.
    pub fn new(cfg: &QuotaConfig) -> Arc<Quota> {
        Quota::with_ttls(cfg, PAYLOAD_TTL, SECTION_TTL)
    }

    /// [`Quota::new`] with other cache times (unit tests).
    pub fn with_ttls(cfg: &QuotaConfig, payload: Duration, section: Duration) -> Arc<Quota> {
        let mut providers: Vec<Arc<dyn Provider>> = vec![
            Arc::new(glm::Glm::new(cfg)),
            Arc::new(opencode::Opencode::new(cfg)),
            Arc::new(ollama::Ollama::new(cfg)),
        ];
        for spec in &cfg.commands {
            providers.push(Arc::new(command::CommandProvider::new(spec.clone())));
        }
        Arc::new(Quota {
            cfg: cfg.clone(),
            providers: providers.into_iter().map(|p| (p, Flight::new(section))).collect(),
            payload: Flight::new(payload),
        })
    }

    /// The configuration these providers were built from (a changed one needs a new `Quota`).
    pub fn config(&self) -> &QuotaConfig {
        &self.cfg
    }

    /// The section names, in payload order.
    pub fn names(&self) -> Vec<String> {
        self.providers.iter().map(|(p, _)| p.name().to_owned()).collect()
    }

    /// The whole payload: every provider's section, cached [`PAYLOAD_TTL`], one query at a time.
    pub async fn payload(self: &Arc<Self>) -> Result<Value, QueryFailed> {
        let me = self.clone();
        self.payload.get(move || async move { me.query(None).await }).await
    }

    /// Only the sections in `only` (all when empty), through the providers' caches only.
    pub async fn sections(self: &Arc<Self>, only: &[String]) -> Result<Value, QueryFailed> {
        self.query(Some(only)).await
    }

    async fn query(self: &Arc<Self>, only: Option<&[String]>) -> Result<Value, QueryFailed> {
        let picked: Vec<usize> = (0..self.providers.len())
            .filter(|&i| {
                only.is_none_or(|o| o.is_empty() || o.iter().any(|n| n == self.providers[i].0.name()))
            })
            .collect();
        let tasks: Vec<_> = picked
            .iter()
            .map(|&i| {
                let me = self.clone();
                tokio::spawn(async move { me.section(i).await })
            })
            .collect();
        let budget = self.cfg.budget();
        let all = async {
            let mut out = Map::new();
            for (task, &i) in tasks.into_iter().zip(&picked) {
                let section = task.await.map_err(|_| QueryFailed)??;
                out.insert(self.providers[i].0.name().to_owned(), section);
            }
            Ok::<_, QueryFailed>(Value::Object(out))
        };
        tokio::time::timeout(budget, all).await.unwrap_or(Err(QueryFailed))
    }

    async fn section(self: &Arc<Self>, i: usize) -> Result<Value, QueryFailed> {
        let (provider, flight) = &self.providers[i];
        let p = provider.clone();
        flight.get(move || async move { Ok(p.fetch().await) }).await
    }
}

/// A percentage as the payload spells it: one decimal at most, a whole number without one.
pub fn percent(p: f64) -> Value {
    let p = (p.clamp(0.0, 100.0) * 10.0).round() / 10.0;
    if p.fract() == 0.0 { json!(p as i64) } else { json!(p) }
}

/// A number from a JSON number or a numeric string.
pub(crate) fn num(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
    .filter(|f: &f64| f.is_finite())
}

#[cfg(test)]
mod tests;
