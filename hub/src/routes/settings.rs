//! `/api/settings/*`: the hub's own settings mount, the same routes and semantics as a
//! bridge's `/settings/*` ([`zcode_shared::settings::api`]); the hub has no agent, so
//! `pending-restart` answers 409 (pointing at the per-instance spelling) and
//! `POST /api/backend/restart` 501. `/api/instances/{id}/settings/*` is the relay's. The
//! `usage` section of `all` is read from the hub's store ([`super::usage::report`]). The
//! providers the agents reported (models, provider writes) are asked of every live bridge
//! (`GET /settings/models` on its loopback server, all at once within 3 s): the agents are
//! theirs, and a bridge that does not answer in time adds nothing.

use crate::Hub;
use crate::http::{Resp, json};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::{Request, StatusCode};
use std::sync::Arc;
use std::time::{Duration, Instant};
use zcode_shared::settings::{Host, MAX_BODY, Mount, ReportedAgent, Settings, api, is_all};
use zcode_shared::store::usage::UsageRange;

/// How long a settings body may take to arrive.
const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the live bridges have to say what their agents reported.
const REPORT_BUDGET: Duration = Duration::from_secs(3);

/// `* /api/settings/{rest}`.
pub async fn route(req: Request<Incoming>, hub: &Arc<Hub>, rest: &str) -> Resp {
    let method = req.method().as_str().to_owned();
    let query = req.uri().query().map(str::to_owned);
    let rest = rest.to_owned();
    let body = match read_body(req).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    let settings = Settings::new(hub.cfg.paths.clone(), &zcode_shared::env::ProcessEnv);
    let mut host = Host::new(Mount::Hub);
    if is_all(&method, &rest) {
        host.usage = Some(super::usage::report(hub, UsageRange::Week).await);
    }
    if is_all(&method, &rest) || ["models", "providers"].contains(&rest.split('/').next().unwrap_or("")) {
        host.live_agents = reported_by_bridges(hub).await;
    }
    let reply = tokio::task::spawn_blocking(move || {
        api::handle(&settings, &host, &method, &rest, query.as_deref(), &body)
    })
    .await;
    match reply {
        Ok(r) => json(StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), &r.body),
        Err(_) => refuse(StatusCode::INTERNAL_SERVER_ERROR, "the settings write failed"),
    }
}

/// The agents the live bridges reported: each bridge's `/settings/models` providers marked
/// `reported`, one per agent key, oldest bridge first. A bridge's answer already carries
/// `config.json`'s names; the hub applies the same file again, so nothing changes twice.
async fn reported_by_bridges(hub: &Arc<Hub>) -> Vec<ReportedAgent> {
    let regs = hub.bridges.registry().registrations(Instant::now());
    let deadline = tokio::time::Instant::now() + REPORT_BUDGET;
    let asks = regs.iter().map(|reg| crate::attention::fetch(hub, reg.port, "/settings/models", deadline));
    let answers = futures_util::future::join_all(asks).await;
    let mut out: Vec<ReportedAgent> = Vec::new();
    for answer in answers.iter().filter_map(|a| a.as_ref().ok()) {
        let providers = answer["providers"].as_array().into_iter().flatten();
        for p in providers.filter(|p| p["reported"] == true) {
            let Some(key) = p["id"].as_str().filter(|k| !out.iter().any(|r| r.key == *k)) else { continue };
            let models = p["models"].as_array().into_iter().flatten().filter(|m| m["source"] == "agent");
            out.push(ReportedAgent {
                key: key.to_owned(),
                name: p["name"].as_str().unwrap_or(key).to_owned(),
                models: models
                    .filter_map(|m| {
                        let id = m["id"].as_str()?;
                        Some((id.to_owned(), m["name"].as_str().unwrap_or(id).to_owned()))
                    })
                    .collect(),
                current: p["currentModel"].as_str().map(str::to_owned),
                transports: Vec::new(),
            });
        }
    }
    out
}

/// `POST /api/backend/restart`: the hub runs no agent; the restart is per instance.
pub fn hub_restart() -> Resp {
    refuse(
        StatusCode::NOT_IMPLEMENTED,
        "the hub runs no agent: POST /api/instances/{id}/backend/restart restarts that bridge's",
    )
}

fn refuse(status: StatusCode, error: &str) -> Resp {
    json(status, &serde_json::json!({"ok": false, "error": error}))
}

/// The body, at most 256 KiB (413 announced or actual), within 10 s (408).
async fn read_body(req: Request<Incoming>) -> Result<Vec<u8>, Resp> {
    let too_big = || refuse(StatusCode::PAYLOAD_TOO_LARGE, "body too large (256 KiB at most)");
    if crate::http::content_length(req.headers()).is_some_and(|n| n > MAX_BODY as u64) {
        return Err(too_big());
    }
    let body = Limited::new(req.into_body(), MAX_BODY);
    match tokio::time::timeout(BODY_TIMEOUT, body.collect()).await {
        Err(_) => Err(refuse(StatusCode::REQUEST_TIMEOUT, "body too slow")),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(too_big()),
        Ok(Err(_)) => Err(refuse(StatusCode::BAD_REQUEST, "body could not be read")),
        Ok(Ok(c)) => Ok(c.to_bytes().to_vec()),
    }
}
