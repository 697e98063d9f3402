//! The providers against real local HTTP servers speaking each vendor's shapes, the kind
//! rules, and the caches (upstream requests counted).

use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A vendor on 127.0.0.1: answers every request with `reply` (status line + headers + body
/// after `delay`), counting requests and keeping the last request head.
struct Vendor {
    origin: String,
    hits: Arc<AtomicUsize>,
    last: Arc<Mutex<String>>,
}

#[derive(Clone)]
struct Reply {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: String,
    delay: Duration,
}

fn reply(status: u16, body: impl Into<String>) -> Reply {
    Reply { status, headers: vec![], body: body.into(), delay: Duration::ZERO }
}

async fn vendor(route: impl Fn(&str) -> Reply + Send + Sync + 'static) -> Vendor {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let origin = format!("http://{}", listener.local_addr().expect("addr"));
    let hits = Arc::new(AtomicUsize::new(0));
    let last = Arc::new(Mutex::new(String::new()));
    let route = Arc::new(route);
    let (h, l) = (hits.clone(), last.clone());
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let (h, l, route) = (h.clone(), l.clone(), route.clone());
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match sock.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                h.fetch_add(1, Ordering::SeqCst);
                let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
                *l.lock().unwrap_or_else(|p| p.into_inner()) = head;
                let r = route(&path);
                tokio::time::sleep(r.delay).await;
                let mut out = format!(
                    "HTTP/1.1 {} X\r\ncontent-length: {}\r\nconnection: close\r\n",
                    r.status,
                    r.body.len()
                );
                for (k, v) in &r.headers {
                    out.push_str(&format!("{k}: {v}\r\n"));
                }
                out.push_str("\r\n");
                out.push_str(&r.body);
                let _ = sock.write_all(out.as_bytes()).await;
            });
        }
    });
    Vendor { origin, hits, last }
}

fn glm_cfg(origin: &str) -> QuotaConfig {
    QuotaConfig {
        glm: Some(GlmConfig { api_key: Secret::new("glm-key-123"), base_url: None }),
        test_origins: TestOrigins { glm: Some(origin.into()), ..Default::default() },
        ..QuotaConfig::default()
    }
}

const GLM_OK: &str = r#"{"code":200,"msg":"操作成功","success":true,"data":{"level":"pro","limits":[
 {"type":"TOKENS_LIMIT","unit":3,"number":5,"usage":800000000,"currentValue":280000000,"remaining":520000000,"percentage":35,"nextResetTime":1723812000000},
 {"type":"TOKENS_LIMIT","unit":6,"number":7,"percentage":12,"nextResetTime":1724071200000},
 {"type":"TIME_LIMIT","unit":5,"number":1,"usage":30,"currentValue":3,"remaining":27,"percentage":10,"nextResetTime":1723812000000,
  "usageDetails":[{"modelCode":"search-prime","usage":2},{"modelCode":"web-reader","usage":1}]}]}}"#;

async fn glm_section(status: u16, body: &str) -> Value {
    let v = vendor({
        let body = body.to_owned();
        move |_| reply(status, body.clone())
    })
    .await;
    glm::Glm::new(&glm_cfg(&v.origin)).fetch().await
}

#[tokio::test]
async fn glm_success_maps_windows_percentages_counts_and_detail() {
    let v = vendor(|_| reply(200, GLM_OK)).await;
    let s = glm::Glm::new(&glm_cfg(&v.origin)).fetch().await;
    assert_eq!(
        s,
        json!({"kind": "success", "level": "pro", "items": [
            {"key": "token_5h", "label": "5h", "usedPercent": 35, "usedCount": 280000000u64,
             "totalCount": 800000000u64, "nextResetTime": 1723812000000u64},
            {"key": "token_week", "label": "Week", "usedPercent": 12, "nextResetTime": 1724071200000u64},
            {"key": "mcp", "label": "MCP", "usedPercent": 10, "usedCount": 3, "totalCount": 30,
             "nextResetTime": 1723812000000u64,
             "detail": [{"modelCode": "search-prime", "usage": 2}, {"modelCode": "web-reader", "usage": 1}]}]})
    );
    let head = v.last.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert!(head.starts_with(&format!("GET {} ", glm::PATH)), "{head}");
    assert!(head.to_lowercase().contains("authorization: bearer glm-key-123"), "{head}");
}

#[test]
fn glm_percent_rules_prefer_remaining_then_current_then_percentage() {
    let one = |limit: Value| {
        glm::section(200, json!({"success": true, "data": {"limits": [limit]}}).to_string().as_bytes())
    };
    // remaining + currentValue is the total; the share left decides.
    let s = one(
        json!({"type": "TOKENS_LIMIT", "number": 5, "remaining": 75, "currentValue": 25, "usage": 999, "percentage": 1}),
    );
    assert_eq!(s["items"][0]["usedPercent"], 25);
    assert_eq!(s["items"][0]["totalCount"], 100);
    // No remaining: currentValue over usage.
    let s = one(json!({"type": "TOKENS_LIMIT", "number": 5, "currentValue": 1, "usage": 3}));
    assert_eq!(s["items"][0]["usedPercent"], 33.3);
    // Neither: the API's percentage, clamped.
    let s = one(json!({"type": "TOKENS_LIMIT", "number": 24, "percentage": 140}));
    assert_eq!(s["items"][0], json!({"key": "token_24", "label": "Tokens 24", "usedPercent": 100}));
    assert!(s.get("level").is_none());
    // MCP_LIMIT is "mcp" too; an unknown type or a limit without numbers is no item.
    let s = glm::section(200, json!({"success": true, "data": {"limits": [
        {"type": "MCP_LIMIT", "percentage": 4}, {"type": "OTHER", "percentage": 1}, {"type": "TOKENS_LIMIT", "number": 5}]}})
        .to_string().as_bytes());
    assert_eq!(s["items"], json!([{"key": "mcp", "label": "MCP", "usedPercent": 4}]));
}

#[tokio::test]
async fn glm_kinds_for_every_failure() {
    let auth = Kind::AuthError.section();
    let rate = Kind::RateLimited.section();
    let down = Kind::Unavailable.section();
    assert_eq!(glm_section(401, r#"{"code":401,"msg":"token expired","success":false}"#).await, auth);
    assert_eq!(glm_section(403, "forbidden").await, auth);
    assert_eq!(
        glm_section(200, r#"{"code":1001,"msg":"Header中未收到Authorization参数","success":false}"#).await,
        auth
    );
    assert_eq!(glm_section(200, r#"{"code":500,"msg":"Invalid API key","success":false}"#).await, auth);
    assert_eq!(glm_section(429, "slow down").await, rate);
    assert_eq!(glm_section(200, r#"{"code":1302,"msg":"x","success":false}"#).await, rate);
    assert_eq!(glm_section(500, "<html>Rate limit exceeded</html>").await, rate);
    assert_eq!(glm_section(200, r#"{"code":500,"msg":"请求过于频繁","success":false}"#).await, rate);
    assert_eq!(glm_section(200, "<html>gateway</html>").await, down, "non-JSON");
    assert_eq!(glm_section(200, "[1,2]").await, down, "not an object");
    assert_eq!(glm_section(200, r#"{"code":500,"msg":"internal","success":false}"#).await, down);
    assert_eq!(
        glm_section(200, r#"{"code":200,"success":true,"data":{"limits":[]}}"#).await,
        down,
        "empty items"
    );
    assert_eq!(glm_section(502, "").await, down);
    let v = vendor(|_| Reply { headers: vec![("location", "https://z.ai/login".into())], ..reply(302, "") })
        .await;
    assert_eq!(glm::Glm::new(&glm_cfg(&v.origin)).fetch().await, down, "a redirect is not followed");
}

#[tokio::test]
async fn a_slow_vendor_times_out_as_unavailable_and_no_secret_reaches_the_error() {
    let v = vendor(|_| Reply { delay: Duration::from_secs(5), ..reply(200, GLM_OK) }).await;
    let mut cfg = glm_cfg(&v.origin);
    cfg.timeout = Duration::from_millis(200);
    assert_eq!(glm::Glm::new(&cfg).fetch().await, Kind::Unavailable.section());
    let call = http::Call {
        method: hyper::Method::GET,
        url: &format!("{}/x", v.origin),
        headers: vec![(hyper::header::AUTHORIZATION, "Bearer glm-key-123".into())],
        body: None,
    };
    let e = http::send(call, Duration::from_millis(100)).await.expect_err("timeout");
    assert_eq!(e, http::Failure::Timeout);
    assert!(!format!("{e} {e:?}").contains("glm-key"));
    assert!(!format!("{cfg:?}").contains("glm-key"), "Debug of the config hides the key");
}

#[tokio::test]
async fn every_vendor_that_does_not_answer_in_time_is_unavailable() {
    let v = vendor(|_| Reply { delay: Duration::from_secs(5), ..reply(200, "{}") }).await;
    let o = Some(v.origin.clone());
    let cfg = QuotaConfig {
        timeout: Duration::from_millis(200),
        test_origins: TestOrigins { glm: o.clone(), opencode: o.clone(), ollama: o },
        ..opencode_cfg(&v.origin, ID, COOKIE)
    };
    let cfg = QuotaConfig { glm: glm_cfg("").glm, ollama: ollama_cfg("").ollama, ..cfg };
    let p = Quota::new(&cfg).payload().await.expect("the query ran");
    for name in BUILT_IN {
        assert_eq!(p[name], Kind::Unavailable.section(), "{name}: {p}");
    }
}

#[tokio::test]
async fn plain_http_goes_to_loopback_only_and_bodies_are_capped() {
    fn call(url: &str) -> http::Call<'_> {
        http::Call { method: hyper::Method::GET, url, headers: vec![], body: None }
    }
    let e = http::send(call("http://example.com/x"), Duration::from_secs(1)).await.expect_err("refused");
    assert_eq!(e, http::Failure::Url);
    let big = "x".repeat(http::BODY_CAP + 10);
    let v = vendor(move |_| reply(200, big.clone())).await;
    let e = http::send(call(&format!("{}/big", v.origin)), Duration::from_secs(5)).await.expect_err("capped");
    assert_eq!(e, http::Failure::TooLarge);
}

#[test]
fn glm_host_follows_the_base_url() {
    assert_eq!(glm::host_for(Some("https://api.z.ai/api/anthropic")), "https://api.z.ai");
    assert_eq!(glm::host_for(Some("https://open.bigmodel.cn/api/anthropic")), "https://open.bigmodel.cn");
    assert_eq!(glm::host_for(None), "https://open.bigmodel.cn");
}

const ID: &str = "wrk_01ABCdef";
const COOKIE: &str = "Fe26.2**abc*def";

fn opencode_cfg(origin: &str, id: &str, cookie: &str) -> QuotaConfig {
    QuotaConfig {
        opencode: Some(OpencodeConfig { workspace_id: id.into(), auth_cookie: Secret::new(cookie) }),
        test_origins: TestOrigins { opencode: Some(origin.into()), ..Default::default() },
        ..QuotaConfig::default()
    }
}

const GO_PAGE: &str = r#"<html><script>_$HY.r["lite.subscription.get[\"wrk_01ABCdef\"]"]=$R[17];$R[24]($R[18],$R[27]={mine:!0,useBalance:!1,rollingUsage:$R[28]={status:"ok",resetInSec:3600,usagePercent:5},weeklyUsage:$R[29]={status:"ok",resetInSec:86400,usagePercent:25.5}});</script></html>"#;

#[tokio::test]
async fn opencode_scrapes_the_dashboard_and_resolves_resets() {
    let v = vendor(|_| reply(200, GO_PAGE)).await;
    let before = crate::time::now_ms();
    let s = opencode::Opencode::new(&opencode_cfg(&v.origin, ID, COOKIE)).fetch().await;
    let after = crate::time::now_ms();
    assert_eq!(s["kind"], "success");
    let w = s["windows"].as_array().expect("windows");
    assert_eq!(w.len(), 2, "{s}");
    assert_eq!(
        (w[0]["key"].as_str(), w[0]["label"].as_str(), &w[0]["usagePercent"]),
        (Some("rolling"), Some("5h"), &json!(5))
    );
    assert_eq!(
        (w[1]["key"].as_str(), w[1]["label"].as_str(), &w[1]["usagePercent"]),
        (Some("weekly"), Some("Week"), &json!(25.5))
    );
    let at = w[0]["resetsAt"].as_u64().expect("resetsAt");
    assert!(at >= before + 3_600_000 && at <= after + 3_600_000);
    let head = v.last.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert!(head.starts_with(&format!("GET /workspace/{ID}/go ")), "{head}");
    assert!(head.contains(&format!("auth={COOKIE}")), "{head}");
    // Quoted keys and a monthly window read the same.
    let page = r#"{"monthlyUsage":{"usagePercent":"7","resetInSec":10}}"#;
    let s = opencode::section(200, None, page.as_bytes(), ID, 1000);
    assert_eq!(
        s,
        json!({"kind": "success", "windows": [{"key": "monthly", "label": "Month", "usagePercent": 7, "resetsAt": 11000}]})
    );
}

#[tokio::test]
async fn opencode_kinds() {
    let auth = Kind::AuthError.section();
    let down = Kind::Unavailable.section();
    let at =
        |status: u16, loc: Option<&str>, body: &str| opencode::section(status, loc, body.as_bytes(), ID, 0);
    assert_eq!(at(302, Some("/auth/authorize?continue=/workspace"), ""), auth, "redirect away: the login");
    assert_eq!(at(302, Some("https://opencode.ai/"), ""), auth);
    assert_eq!(at(302, Some(&format!("/workspace/{ID}/go?x")), ""), down);
    assert_eq!(at(401, None, ""), auth);
    assert_eq!(at(403, None, ""), auth);
    assert_eq!(at(429, None, "Too Many Requests"), down, "no rate_limited kind for OpenCode");
    assert_eq!(at(200, None, "<html>no usage here</html>"), down);
    assert_eq!(at(500, None, ""), down);
    // Malformed credentials are refused before any request.
    let v = vendor(|_| reply(200, GO_PAGE)).await;
    for (id, cookie) in
        [("01ABC", COOKIE), ("wrk_a-b", COOKIE), (ID, "plain"), (ID, "Fe26.2**a\r\nX: y"), ("", COOKIE)]
    {
        assert_eq!(
            opencode::Opencode::new(&opencode_cfg(&v.origin, id, cookie)).fetch().await,
            auth,
            "{id} {cookie}"
        );
    }
    assert_eq!(v.hits.load(Ordering::SeqCst), 0);
    let v = vendor(|_| Reply { headers: vec![("location", "/auth".into())], ..reply(307, "") }).await;
    assert_eq!(opencode::Opencode::new(&opencode_cfg(&v.origin, ID, COOKIE)).fetch().await, auth);
}

fn ollama_cfg(origin: &str) -> QuotaConfig {
    QuotaConfig {
        ollama: Some(OllamaConfig { api_key: Secret::new("oll-key") }),
        test_origins: TestOrigins { ollama: Some(origin.into()), ..Default::default() },
        ..QuotaConfig::default()
    }
}

const OLLAMA_USAGE: &str = r#"{"range":"30d","totals":{"usage_usd":1.5747,"request_count":246,"input_tokens":14294081,"cached_input_tokens":12922504,"output_tokens":940919},"models":[]}"#;

#[tokio::test]
async fn ollama_derives_the_monthly_window_and_reports_spend() {
    let v = vendor(|path| match path {
        "/api/usage?range=30d" => reply(200, OLLAMA_USAGE),
        "/api/me" => {
            reply(200, r#"{"Name":"me","Plan":"pro","SubscriptionPeriodEnd":"2099-10-16T09:38:00.308Z"}"#)
        }
        _ => reply(404, ""),
    })
    .await;
    let s = ollama::Ollama::new(&ollama_cfg(&v.origin)).fetch().await;
    assert_eq!(
        s,
        json!({"kind": "success",
            "windows": [{"key": "monthly", "label": "Month", "usagePercent": 2.6, "resetsAt": crate::time::parse_rfc3339("2099-10-16T09:38:00.308Z")}],
            "usage": {"plan": "pro", "usageUsd": 1.5747, "creditUsd": 60, "requestCount": 246, "inputTokens": 14294081,
                "cachedInputTokens": 12922504, "outputTokens": 940919, "window": "30d"}})
    );
    assert_eq!(v.hits.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn ollama_without_a_known_plan_has_spend_and_no_window_and_kinds() {
    let v = vendor(|path| match path {
        "/api/usage?range=30d" => reply(200, OLLAMA_USAGE),
        _ => reply(500, "down"),
    })
    .await;
    let s = ollama::Ollama::new(&ollama_cfg(&v.origin)).fetch().await;
    assert_eq!(s["kind"], "success");
    assert_eq!(s["windows"], json!([]));
    assert!(s["usage"].get("creditUsd").is_none() && s["usage"].get("plan").is_none(), "{s}");
    let usage = |status: u16, body: &str| http::Answer {
        status,
        location: None,
        body: bytes::Bytes::from(body.to_owned()),
    };
    assert_eq!(ollama::section(&usage(401, ""), None, 0), Kind::AuthError.section());
    assert_eq!(ollama::section(&usage(403, ""), None, 0), Kind::AuthError.section());
    assert_eq!(ollama::section(&usage(429, "rate limit"), None, 0), Kind::Unavailable.section());
    assert_eq!(ollama::section(&usage(302, ""), None, 0), Kind::Unavailable.section());
    assert_eq!(ollama::section(&usage(200, "<html>"), None, 0), Kind::Unavailable.section());
    assert_eq!(ollama::section(&usage(200, "{}"), None, 0), Kind::Unavailable.section());
    // The billing period's end passed: the next anniversary of the subscription's start.
    let me = json!({"Plan": "max", "SubscriptionPeriodEnd": "2026-01-01T00:00:00Z", "SubscriptionPeriodStart": "2025-12-15T08:00:00Z"});
    let now = crate::time::parse_rfc3339("2026-02-20T00:00:00Z").unwrap_or_default();
    let s = ollama::section(&usage(200, OLLAMA_USAGE), Some(&me), now);
    assert_eq!(s["windows"][0]["usagePercent"], 0.5);
    assert_eq!(
        s["windows"][0]["resetsAt"].as_u64().map(crate::time::iso8601).as_deref(),
        Some("2026-03-15T08:00:00.000Z")
    );
}

#[tokio::test]
async fn unconfigured_providers_answer_not_configured_without_a_request() {
    let q = Quota::new(&QuotaConfig::default());
    let p = q.payload().await.expect("payload");
    assert_eq!(
        p,
        json!({"glm": {"kind": "not_configured"}, "opencode": {"kind": "not_configured"}, "ollama": {"kind": "not_configured"}})
    );
}

#[tokio::test]
async fn concurrent_callers_share_one_query_and_the_payload_is_cached() {
    let v = vendor(|_| Reply { delay: Duration::from_millis(300), ..reply(200, GLM_OK) }).await;
    let q = Quota::new(&glm_cfg(&v.origin));
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move { q.payload().await })
        })
        .collect();
    let mut answers = vec![];
    for c in calls {
        answers.push(c.await.expect("task").expect("payload"));
    }
    assert!(answers.windows(2).all(|w| w[0] == w[1]));
    assert_eq!(answers[0]["glm"]["kind"], "success");
    assert_eq!(v.hits.load(Ordering::SeqCst), 1, "eight callers, one upstream request");
    q.payload().await.expect("cached");
    assert_eq!(v.hits.load(Ordering::SeqCst), 1, "the payload is reused");
}

#[tokio::test]
async fn a_provider_caches_its_failure_and_expires() {
    let v = vendor(|_| reply(500, "boom")).await;
    let q = Quota::with_ttls(&glm_cfg(&v.origin), Duration::ZERO, Duration::from_millis(400));
    assert_eq!(q.payload().await.expect("payload")["glm"]["kind"], "unavailable");
    assert_eq!(q.payload().await.expect("payload")["glm"]["kind"], "unavailable");
    assert_eq!(v.hits.load(Ordering::SeqCst), 1, "the failure is cached too");
    tokio::time::sleep(Duration::from_millis(500)).await;
    q.sections(&["glm".into()]).await.expect("sections");
    assert_eq!(v.hits.load(Ordering::SeqCst), 2, "and expires");
}

fn sh(name: &str, script: &str, timeout: Duration) -> CommandSpec {
    CommandSpec {
        name: name.into(),
        command: "/bin/sh".into(),
        args: vec!["-c".into(), script.into()],
        timeout,
    }
}

#[tokio::test]
async fn command_provider_good_garbage_and_timeout() {
    let t = Duration::from_secs(5);
    // A sleep no other process on the machine runs (suites may run side by side): 30 s and
    // this process's id as a fraction.
    let slow = format!("sleep 30.{}", std::process::id());
    let good = r#"printf '{"kind":"success","windows":[{"key":"daily","label":"Day","usagePercent":40}]}'"#;
    let cfg = QuotaConfig {
        commands: vec![
            sh("good", good, t),
            sh("garbage", "echo not json; echo more", t),
            sh("noitems", r#"echo '{"kind":"success"}'"#, t),
            sh("authfail", r#"echo '{"kind":"auth_error","secret":"x"}'; exit 3"#, t),
            sh("slow", &format!("{slow} & {slow}; echo '{{}}'"), Duration::from_millis(300)),
            sh("flood", "yes '{\"kind\":\"success\",\"items\":[]}'", t),
        ],
        ..QuotaConfig::default()
    };
    let q = Quota::new(&cfg);
    let p = q.payload().await.expect("payload");
    assert_eq!(
        p["good"],
        json!({"kind": "success", "windows": [{"key": "daily", "label": "Day", "usagePercent": 40}]})
    );
    assert_eq!(p["garbage"], json!({"kind": "unavailable", "error": "its output is not one JSON object"}));
    assert_eq!(
        p["noitems"],
        json!({"kind": "unavailable", "error": "a success needs an `items` or `windows` array"})
    );
    assert_eq!(p["authfail"], Kind::AuthError.section());
    assert_eq!(p["slow"], Kind::Unavailable.section());
    assert_eq!(p["flood"], Kind::Unavailable.section());
    let names: Vec<String> = p.as_object().map(|o| o.keys().cloned().collect()).unwrap_or_default();
    assert_eq!(names.len(), 9, "{names:?}");
    // The slow command's group goes (its background sleep too): killed, it is gone once the
    // kernel has run each process's exit, which a loaded machine may take a while to do.
    let alive = || {
        let out = std::process::Command::new("pgrep").args(["-f", &slow]).output().expect("pgrep");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let pids = alive();
        if pids.is_empty() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the command's process group was not killed: {pids}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Issue 29 point 11: an RFC 3339 reset time was silently dropped by the card (it read numbers
/// only); now it becomes the contract's epoch ms, and a reset time of another type is an error
/// that says the expected one.
#[test]
fn command_reset_times_in_rfc3339_become_epoch_ms_and_other_types_say_what_is_expected() {
    let out = br#"{"kind":"success","windows":[
        {"key":"rolling","label":"5h","usagePercent":5,"resetsAt":"2026-12-03T10:00:00Z"},
        {"key":"weekly","label":"Week","usagePercent":25,"resetsAt":"2026-12-07T09:30:00.250+02:00"},
        {"key":"monthly","label":"Month","usagePercent":2,"resetsAt":1723812000000},
        {"key":"none","label":"None","usagePercent":1}],
        "items":[{"key":"x","usedPercent":1,"nextResetTime":"2026-12-03T10:00:00Z"}]}"#;
    let s = command::section(out);
    assert_eq!(s["kind"], "success", "{s}");
    let at = |i: usize| s["windows"][i]["resetsAt"].clone();
    assert_eq!(at(0), json!(1_796_292_000_000u64));
    assert_eq!(at(1), json!(1_796_628_600_250u64));
    assert_eq!(at(2), json!(1_723_812_000_000u64));
    assert_eq!(at(3), Value::Null);
    assert_eq!(s["items"][0]["nextResetTime"], json!(1_796_292_000_000u64));
    for (bad, got) in [
        (r#""next tuesday""#, r#""next tuesday""#),
        ("-5", "-5"),
        ("1.5", "1.5"),
        ("true", "true"),
        (r#""2026-12-03T10:00:00+02:00garbage""#, r#""2026-12-03T10:00:00+02:00garbage""#),
    ] {
        let out = format!(
            r#"{{"kind":"success","windows":[{{"key":"weekly","usagePercent":5,"resetsAt":{bad}}}]}}"#
        );
        let s = command::section(out.as_bytes());
        assert_eq!(s["kind"], "unavailable", "{bad}: {s}");
        assert_eq!(
            s["error"].as_str().unwrap_or_default(),
            format!(
                "window \"weekly\": `resetsAt` must be epoch milliseconds (a whole number) or an RFC 3339 \
                 time such as \"2026-12-03T10:00:00Z\"; got {got}"
            ),
        );
    }
}

#[test]
fn config_reads_file_and_environment() {
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("config.json");
    std::fs::write(
        &file,
        r#"{"quota": {"glm": {"apiKey": "file-key", "baseUrl": "https://api.z.ai/api/anthropic"},
        "ollamaApiKey": "oll", "timeoutMs": 1500,
        "commands": {"minimax": {"command": "/bin/minimax-quota", "args": ["--json"]}}}}"#,
    )
    .expect("write");
    let raw = crate::config::RawConfig::read(&file).expect("read");
    let env: std::collections::HashMap<String, String> = [
        ("ZCODE_ACP_GLM_API_KEY", "env-key"),
        ("OPENCODE_GO_WORKSPACE_ID", "wrk_1"),
        ("OPENCODE_GO_AUTH_COOKIE", "Fe26.2**x"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let q = QuotaConfig::from_parts(&raw, &env).expect("config");
    let glm = q.glm.clone().expect("glm");
    assert_eq!(
        (glm.api_key.expose(), glm.base_url.as_deref()),
        ("env-key", Some("https://api.z.ai/api/anthropic"))
    );
    assert_eq!(q.opencode.as_ref().map(|o| o.workspace_id.as_str()), Some("wrk_1"));
    assert_eq!(q.ollama.as_ref().map(|o| o.api_key.expose()), Some("oll"));
    assert_eq!(q.timeout, Duration::from_millis(1500));
    assert_eq!(
        q.commands,
        vec![CommandSpec {
            name: "minimax".into(),
            command: "/bin/minimax-quota".into(),
            args: vec!["--json".into()],
            timeout: Duration::from_millis(1500)
        }]
    );
    std::fs::write(&file, r#"{"quota": {"commands": {"glm": {"command": "x"}}}}"#).expect("write");
    let raw = crate::config::RawConfig::read(&file).expect("read");
    let e = QuotaConfig::from_parts(&raw, &std::collections::HashMap::new()).expect_err("a built-in name");
    assert!(e.to_string().contains("quota.commands.glm"), "{e}");
}
