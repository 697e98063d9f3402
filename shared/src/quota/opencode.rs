//! OpenCode Go: the workspace dashboard `GET https://opencode.ai/workspace/<id>/go` with the
//! `auth` cookie. The page's hydration data carries `rollingUsage`, `weeklyUsage` and
//! `monthlyUsage` objects `{usagePercent, resetInSec, …}` (JavaScript, keys unquoted); each
//! becomes a window with `resetsAt` resolved to epoch ms. A redirect away from the workspace is
//! the login page: `auth_error`.

use super::http::{self, Call};
use super::{Fetch, Kind, Provider, QuotaConfig, num, percent};
use hyper::Method;
use hyper::header::{ACCEPT, COOKIE};
use serde_json::{Value, json};

/// The OpenCode Go provider.
pub struct Opencode {
    cfg: Option<(String, super::Secret)>,
    origin: String,
    timeout: std::time::Duration,
}

impl Opencode {
    /// From the configuration (not configured without a workspace id or cookie).
    pub fn new(cfg: &QuotaConfig) -> Opencode {
        Opencode {
            cfg: cfg.opencode.as_ref().map(|o| (o.workspace_id.clone(), o.auth_cookie.clone())),
            origin: cfg
                .test_origins
                .opencode
                .as_deref()
                .unwrap_or("https://opencode.ai")
                .trim_end_matches('/')
                .into(),
            timeout: cfg.timeout,
        }
    }
}

/// `^wrk_[A-Za-z0-9]+$`.
pub fn valid_workspace(id: &str) -> bool {
    id.strip_prefix("wrk_").is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_alphanumeric()))
}

/// An iron-sealed session cookie, and nothing that could break the header.
pub fn valid_cookie(c: &str) -> bool {
    c.starts_with("Fe26.2**") && c.bytes().all(|b| b.is_ascii_graphic() && b != b';')
}

impl Provider for Opencode {
    fn name(&self) -> &str {
        "opencode"
    }

    fn fetch(&self) -> Fetch<'_> {
        Box::pin(async move {
            let Some((id, cookie)) = &self.cfg else { return Kind::NotConfigured.section() };
            if !valid_workspace(id) || !valid_cookie(cookie.expose()) {
                tracing::warn!(
                    "quota: OpenCode Go credentials are malformed (the workspace id must look like wrk_…, \
                     the auth cookie like Fe26.2**…)"
                );
                return Kind::AuthError.section();
            }
            let url = format!("{}/workspace/{id}/go", self.origin);
            let call = Call {
                method: Method::GET,
                url: &url,
                headers: vec![(COOKIE, format!("auth={}", cookie.expose())), (ACCEPT, "text/html".into())],
                body: None,
            };
            match http::send(call, self.timeout).await {
                Ok(a) => section(a.status, a.location.as_deref(), &a.body, id, crate::time::now_ms()),
                Err(e) => {
                    tracing::info!("quota: OpenCode Go {e}");
                    Kind::Unavailable.section()
                }
            }
        })
    }
}

/// The section for the dashboard's answer, read at `now` (epoch ms).
pub fn section(status: u16, location: Option<&str>, body: &[u8], id: &str, now: u64) -> Value {
    if (300..400).contains(&status) {
        let own = location.is_some_and(|l| {
            let path = l.split_once("://").map_or(l, |(_, rest)| rest.find('/').map_or("", |i| &rest[i..]));
            path.starts_with(&format!("/workspace/{id}"))
        });
        return if own { Kind::Unavailable } else { Kind::AuthError }.section();
    }
    match status {
        401 | 403 => return Kind::AuthError.section(),
        200..=299 => {}
        _ => return Kind::Unavailable.section(),
    }
    let page = String::from_utf8_lossy(body);
    let windows: Vec<Value> = [
        ("rollingUsage", "rolling", "5h"),
        ("weeklyUsage", "weekly", "Week"),
        ("monthlyUsage", "monthly", "Month"),
    ]
    .into_iter()
    .filter_map(|(field, key, label)| {
        let obj = object_after(&page, field)?;
        let pct = num(&json!(field_value(obj, "usagePercent")?))?;
        let mut w = json!({"key": key, "label": label, "usagePercent": percent(pct)});
        if let Some(secs) =
            field_value(obj, "resetInSec").and_then(|s| s.parse::<f64>().ok()).filter(|s| *s >= 0.0)
        {
            w["resetsAt"] = json!(now + (secs * 1000.0) as u64);
        }
        Some(w)
    })
    .collect();
    if windows.is_empty() {
        return Kind::Unavailable.section();
    }
    json!({"kind": "success", "windows": windows})
}

/// The `{…}` text following `field:` (optionally `"field":`, optionally through a `$R[n]=`
/// hydration reference), without nested objects.
fn object_after<'a>(page: &'a str, field: &str) -> Option<&'a str> {
    let mut from = 0;
    while let Some(at) = page[from..].find(field) {
        let start = from + at + field.len();
        from = start;
        let rest = page[start..].trim_start_matches('"').trim_start();
        let Some(rest) = rest.strip_prefix(':') else { continue };
        let mut rest = rest.trim_start();
        if let Some(r) = rest.strip_prefix("$R[") {
            let Some(end) = r.find("]=") else { continue };
            rest = &r[end + 2..];
        }
        let Some(body) = rest.strip_prefix('{') else { continue };
        let Some(end) = body.find('}') else { continue };
        return Some(&body[..end]);
    }
    None
}

/// A number field's text in an object body `a:1,b:"x"` (keys quoted or not).
fn field_value<'a>(obj: &'a str, name: &str) -> Option<&'a str> {
    obj.split(',').find_map(|pair| {
        let (k, v) = pair.split_once(':')?;
        (k.trim().trim_matches('"') == name).then(|| v.trim().trim_matches('"'))
    })
}
