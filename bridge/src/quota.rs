//! Where the bridge's ACP `account/usage_stats` gets its payload: the hub's `GET /api/quota`
//! (so every client of the machine shares the hub's caches), or, when no hub of this user
//! answers (or one too old to know the route), the same providers run in this process
//! (`zcode_shared::quota`, with their own caches). The token goes only to a port that
//! `zcode_shared::peer` says this user holds.

use bytes::Bytes;
use http_body_util::Empty;
use hyper::header::{self, HeaderValue};
use hyper::{Request, StatusCode};
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use zcode_shared::config::Config;
use zcode_shared::jsonrpc::{self, RpcError};
use zcode_shared::quota::Quota;

/// The most bytes of the hub's answer read.
const ANSWER_CAP: usize = 4 * 1024 * 1024;

/// How long connecting to the hub may take before the bridge asks the vendors itself.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The bridge's quota source.
pub struct QuotaSource {
    cfg: Config,
    token: Arc<zcode_shared::token::Live>,
    local: Mutex<Option<Arc<Quota>>>,
}

impl std::fmt::Debug for QuotaSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("QuotaSource")
    }
}

/// What the hub said.
enum FromHub {
    Payload(Value),
    /// The hub ran the query and it failed (its 502).
    Failed,
    /// No hub of ours answered the route: ask the vendors here.
    NoHub,
}

impl QuotaSource {
    /// A source for the bridge configured by `cfg`, presenting `token` to the hub.
    pub fn new(cfg: &Config, token: Arc<zcode_shared::token::Live>) -> Arc<QuotaSource> {
        Arc::new(QuotaSource { cfg: cfg.clone(), token, local: Mutex::new(None) })
    }

    /// The payload, or the JSON-RPC error for a query that could not run.
    pub async fn payload(&self) -> Result<Value, RpcError> {
        let failed = || RpcError::new(jsonrpc::INTERNAL_ERROR, "quota query failed; retry later");
        match self.ask_hub().await {
            FromHub::Payload(v) => Ok(v),
            FromHub::Failed => Err(failed()),
            FromHub::NoHub => {
                let q = self
                    .local
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert_with(|| Quota::new(&self.cfg.quota))
                    .clone();
                q.payload().await.map_err(|_| failed())
            }
        }
    }

    async fn ask_hub(&self) -> FromHub {
        let Some((host, port)) = crate::hub::hub_addr(&self.cfg) else { return FromHub::NoHub };
        let connect = tokio::net::TcpStream::connect((host.as_str(), port));
        let Ok(Ok(tcp)) = tokio::time::timeout(CONNECT_TIMEOUT, connect).await else { return FromHub::NoHub };
        if let Err(e) = crate::hub::verify(&tcp) {
            e.warn_once("not asking the hub for quota");
            return FromHub::NoHub;
        }
        let ask = async {
            let mut req = Request::get("/api/quota").body(Empty::<Bytes>::new()).ok()?;
            let h = req.headers_mut();
            h.insert(header::HOST, HeaderValue::from_str(&format!("{host}:{port}")).ok()?);
            let mut bearer = HeaderValue::from_str(&format!("Bearer {}", self.token.token())).ok()?;
            bearer.set_sensitive(true);
            h.insert(header::AUTHORIZATION, bearer);
            let reply = zcode_shared::http_client::exchange(tcp, req, ANSWER_CAP).await.ok()?;
            Some((reply.status, reply.body.ok()?))
        };
        // The hub bounds its own query; past that (and a margin) it is as good as gone.
        let budget = self.cfg.quota.budget() + Duration::from_secs(2);
        match tokio::time::timeout(budget, ask).await {
            Ok(Some((StatusCode::OK, body))) => match serde_json::from_slice::<Value>(&body) {
                Ok(v) if v.is_object() => FromHub::Payload(v),
                _ => FromHub::Failed,
            },
            Ok(Some((StatusCode::BAD_GATEWAY, _))) => FromHub::Failed,
            Ok(Some((status, _))) => {
                tracing::info!(
                    status = status.as_u16(),
                    "the hub did not answer /api/quota: asking the vendors here"
                );
                FromHub::NoHub
            }
            Ok(None) => FromHub::NoHub,
            Err(_) => FromHub::Failed,
        }
    }
}
