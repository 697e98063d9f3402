//! GLM coding plans (Z.AI, BigModel): `GET <host>/api/monitor/usage/quota/limit` with the API
//! key as a bearer token. The envelope is `{success, code, msg, data: {level, limits: [{type,
//! number, usage, remaining, currentValue, percentage, nextResetTime, usageDetails}]}}`; each
//! limit becomes one item (`token_5h` "5h", `token_week` "Week", `token_<n>`, `mcp` "MCP").

use super::http::{self, Call};
use super::{Fetch, Kind, Provider, QuotaConfig, num, percent};
use hyper::Method;
use hyper::header::AUTHORIZATION;
use serde_json::{Map, Value, json};

/// The API's path on either host.
pub const PATH: &str = "/api/monitor/usage/quota/limit";

/// The GLM provider.
pub struct Glm {
    cfg: Option<(super::Secret, String)>,
    timeout: std::time::Duration,
}

impl Glm {
    /// From the configuration (not configured without a key).
    pub fn new(cfg: &QuotaConfig) -> Glm {
        let origin = |base: Option<&str>| match &cfg.test_origins.glm {
            Some(o) => o.trim_end_matches('/').to_owned(),
            None => host_for(base).to_owned(),
        };
        Glm {
            cfg: cfg.glm.as_ref().map(|g| (g.api_key.clone(), origin(g.base_url.as_deref()))),
            timeout: cfg.timeout,
        }
    }
}

/// The quota API's host for the agent's base URL: api.z.ai when it names it, else BigModel's.
pub fn host_for(base_url: Option<&str>) -> &'static str {
    match base_url {
        Some(b) if b.contains("api.z.ai") => "https://api.z.ai",
        _ => "https://open.bigmodel.cn",
    }
}

impl Provider for Glm {
    fn name(&self) -> &str {
        "glm"
    }

    fn fetch(&self) -> Fetch<'_> {
        Box::pin(async move {
            let Some((key, origin)) = &self.cfg else { return Kind::NotConfigured.section() };
            let url = format!("{origin}{PATH}");
            let call = Call {
                method: Method::GET,
                url: &url,
                headers: vec![(AUTHORIZATION, format!("Bearer {}", key.expose()))],
                body: None,
            };
            match http::send(call, self.timeout).await {
                Ok(a) => section(a.status, &a.body),
                Err(e) => {
                    tracing::info!("quota: GLM {e}");
                    Kind::Unavailable.section()
                }
            }
        })
    }
}

/// The section for the API's answer.
pub fn section(status: u16, body: &[u8]) -> Value {
    let parsed = serde_json::from_slice::<Value>(body).ok();
    let ok = parsed.as_ref().is_some_and(|v| v["success"] == true) && (200..300).contains(&status);
    if let (true, Some(v)) = (ok, &parsed) {
        return success(&v["data"]);
    }
    let text = String::from_utf8_lossy(body).to_lowercase();
    if status == 429 || rate_words(&text) {
        return Kind::RateLimited.section();
    }
    if status == 401 || status == 403 {
        return Kind::AuthError.section();
    }
    let Some(v) = parsed.filter(Value::is_object) else { return Kind::Unavailable.section() };
    let code = num(&v["code"]).map(|c| c as i64);
    let msg = [&v["msg"], &v["message"]].iter().filter_map(|m| m.as_str()).collect::<Vec<_>>().join(" ");
    if matches!(code, Some(1001 | 401)) || auth_words(&msg.to_lowercase()) {
        return Kind::AuthError.section();
    }
    if matches!(code, Some(1302 | 1303 | 1305 | 429)) {
        return Kind::RateLimited.section();
    }
    Kind::Unavailable.section()
}

/// Words of a rate-limit answer (English and Chinese).
fn rate_words(text: &str) -> bool {
    ["rate limit", "rate-limit", "ratelimit", "too many requests", "too frequent", "频繁", "限流"]
        .iter()
        .any(|w| text.contains(w))
}

/// Words of a refused credential.
fn auth_words(text: &str) -> bool {
    [
        "unauthorized",
        "unauthenticated",
        "authentication",
        "invalid api key",
        "api key",
        "apikey",
        "token expired",
        "invalid token",
        "forbidden",
        "令牌",
        "鉴权",
        "认证",
    ]
    .iter()
    .any(|w| text.contains(w))
}

/// `{kind: success, level?, items}`, or unavailable with no usable item.
fn success(data: &Value) -> Value {
    let mut items: Vec<Value> = Vec::new();
    for limit in data["limits"].as_array().into_iter().flatten() {
        if let Some(it) = item(limit) {
            if !items.iter().any(|i| i["key"] == it["key"]) {
                items.push(it);
            }
        }
    }
    if items.is_empty() {
        return Kind::Unavailable.section();
    }
    let mut out = Map::new();
    out.insert("kind".into(), json!("success"));
    if let Some(level) = data["level"].as_str().filter(|l| !l.is_empty()) {
        out.insert("level".into(), json!(level));
    }
    out.insert("items".into(), Value::Array(items));
    Value::Object(out)
}

/// One limit as an item, or `None` when it is not one we know or has no usable number.
fn item(l: &Value) -> Option<Value> {
    let (key, label) = match l["type"].as_str()? {
        "TOKENS_LIMIT" => match num(&l["number"]).map(|n| n as i64)? {
            5 => ("token_5h".to_owned(), "5h".to_owned()),
            7 => ("token_week".to_owned(), "Week".to_owned()),
            n => (format!("token_{n}"), format!("Tokens {n}")),
        },
        "MCP_LIMIT" | "TIME_LIMIT" => ("mcp".to_owned(), "MCP".to_owned()),
        _ => return None,
    };
    let (remaining, current) = (num(&l["remaining"]), num(&l["currentValue"]));
    let total = match (remaining, current) {
        (Some(r), Some(c)) => Some(r + c),
        _ => num(&l["usage"]),
    }
    .filter(|t| *t > 0.0);
    let used = match (remaining, current, total) {
        (Some(r), _, Some(t)) => 100.0 - r / t * 100.0,
        (None, Some(c), Some(t)) => c / t * 100.0,
        _ => num(&l["percentage"])?,
    };
    let mut it = Map::new();
    it.insert("key".into(), json!(key));
    it.insert("label".into(), json!(label));
    it.insert("usedPercent".into(), percent(used));
    if let (Some(c), Some(t)) = (current, total) {
        it.insert("usedCount".into(), json!(c.max(0.0) as u64));
        it.insert("totalCount".into(), json!(t as u64));
    }
    if let Some(at) = num(&l["nextResetTime"]).filter(|t| *t > 0.0) {
        it.insert("nextResetTime".into(), json!(at as u64));
    }
    let detail: Vec<Value> = l["usageDetails"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| {
            Some(json!({"modelCode": d["modelCode"].as_str()?, "usage": num(&d["usage"])? as u64}))
        })
        .collect();
    if !detail.is_empty() {
        it.insert("detail".into(), Value::Array(detail));
    }
    Some(Value::Object(it))
}
