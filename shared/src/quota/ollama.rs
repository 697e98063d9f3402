//! Ollama Cloud: `GET https://ollama.com/api/usage?range=30d` (spend: `totals.usage_usd`,
//! request and token counts) and `POST https://ollama.com/api/me {}` (`Plan`, the billing
//! period), both with the API key as a bearer token. The `monthly` window is the 30-day spend
//! divided by the plan's credit (pro 60, max 300, team 1000 USD; absent for another plan);
//! `/api/me` is best effort: without it there is no window, the spend is still reported.

use super::http::{self, Answer, Call};
use super::{Fetch, Kind, Provider, QuotaConfig, num, percent};
use hyper::Method;
use hyper::header::{ACCEPT, AUTHORIZATION};
use serde_json::{Map, Value, json};

/// The Ollama Cloud provider.
pub struct Ollama {
    key: Option<super::Secret>,
    origin: String,
    timeout: std::time::Duration,
}

impl Ollama {
    /// From the configuration (not configured without a key).
    pub fn new(cfg: &QuotaConfig) -> Ollama {
        Ollama {
            key: cfg.ollama.as_ref().map(|o| o.api_key.clone()),
            origin: cfg
                .test_origins
                .ollama
                .as_deref()
                .unwrap_or("https://ollama.com")
                .trim_end_matches('/')
                .into(),
            timeout: cfg.timeout,
        }
    }
}

/// The plan's monthly credit in USD, when the plan is one we know.
pub fn credit(plan: &str) -> Option<f64> {
    match plan {
        "pro" => Some(60.0),
        "max" => Some(300.0),
        "team" => Some(1000.0),
        _ => None,
    }
}

impl Provider for Ollama {
    fn name(&self) -> &str {
        "ollama"
    }

    fn fetch(&self) -> Fetch<'_> {
        Box::pin(async move {
            let Some(key) = &self.key else { return Kind::NotConfigured.section() };
            let bearer = format!("Bearer {}", key.expose());
            let usage_url = format!("{}/api/usage?range=30d", self.origin);
            let me_url = format!("{}/api/me", self.origin);
            let usage = http::send(
                Call {
                    method: Method::GET,
                    url: &usage_url,
                    headers: vec![(AUTHORIZATION, bearer.clone()), (ACCEPT, "application/json".into())],
                    body: None,
                },
                self.timeout,
            );
            let me = http::send(
                Call {
                    method: Method::POST,
                    url: &me_url,
                    headers: vec![(AUTHORIZATION, bearer.clone()), (ACCEPT, "application/json".into())],
                    body: Some("{}"),
                },
                self.timeout,
            );
            let (usage, me) = tokio::join!(usage, me);
            let usage = match usage {
                Ok(a) => a,
                Err(e) => {
                    tracing::info!("quota: Ollama Cloud {e}");
                    return Kind::Unavailable.section();
                }
            };
            let me = me.ok().filter(|a| a.status == 200).and_then(|a| serde_json::from_slice(&a.body).ok());
            section(&usage, me.as_ref(), crate::time::now_ms())
        })
    }
}

/// The section for `/api/usage`'s answer and `/api/me`'s JSON (if it came), at `now`.
pub fn section(usage: &Answer, me: Option<&Value>, now: u64) -> Value {
    match usage.status {
        401 | 403 => return Kind::AuthError.section(),
        200 => {}
        _ => return Kind::Unavailable.section(),
    }
    let Some(body) = serde_json::from_slice::<Value>(&usage.body).ok().filter(Value::is_object) else {
        return Kind::Unavailable.section();
    };
    let totals = &body["totals"];
    let Some(spent) = num(&totals["usage_usd"]) else { return Kind::Unavailable.section() };
    let plan = me.and_then(|m| m["Plan"].as_str().or(m["plan"].as_str())).map(|p| p.trim().to_lowercase());
    let credit = plan.as_deref().and_then(credit);
    let mut u = Map::new();
    if let Some(p) = &plan {
        u.insert("plan".into(), json!(p));
    }
    u.insert("usageUsd".into(), json!(spent));
    if let Some(c) = credit {
        u.insert("creditUsd".into(), json!(c as u64));
    }
    for (from, to) in [
        ("request_count", "requestCount"),
        ("input_tokens", "inputTokens"),
        ("cached_input_tokens", "cachedInputTokens"),
        ("output_tokens", "outputTokens"),
    ] {
        u.insert(to.into(), json!(num(&totals[from]).unwrap_or(0.0).max(0.0) as u64));
    }
    u.insert("window".into(), json!("30d"));
    let mut windows = Vec::new();
    if let Some(c) = credit {
        let mut w = json!({"key": "monthly", "label": "Month", "usagePercent": percent(spent / c * 100.0)});
        if let Some(at) = me.and_then(|m| resets_at(m, now)) {
            w["resetsAt"] = json!(at);
        }
        windows.push(w);
    }
    json!({"kind": "success", "windows": windows, "usage": u})
}

/// When the billing period ends: `SubscriptionPeriodEnd` if it lies ahead, else the next
/// monthly anniversary of the subscription's start.
fn resets_at(me: &Value, now: u64) -> Option<u64> {
    let instant = |v: &Value| -> Option<u64> {
        match v {
            Value::String(s) => crate::time::parse_rfc3339(s),
            // Seconds or milliseconds since the epoch.
            Value::Number(_) => num(v).map(|n| if n < 1e11 { n * 1000.0 } else { n } as u64),
            // Go's sql.NullTime: {Time, Valid}.
            Value::Object(o) if o.get("Valid") != Some(&Value::Bool(false)) => {
                o.get("Time").and_then(|t| t.as_str()).and_then(crate::time::parse_rfc3339)
            }
            _ => None,
        }
    };
    if let Some(end) = instant(&me["SubscriptionPeriodEnd"]).filter(|e| *e > now) {
        return Some(end);
    }
    let start = ["SubscriptionPeriodStart", "SubscriptionStart", "SubscriptionStartedAt"]
        .iter()
        .find_map(|k| instant(&me[*k]))?;
    Some(crate::time::next_monthly(start, now))
}
