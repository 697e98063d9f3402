//! `GET /api/instances[?probe=1]`: the registered bridges, as the contract's array. With
//! `probe=1` every bridge's port is TCP-probed first (all at once, 2 s each): one failure
//! marks an instance unhealthy (it stays listed), failures spanning the probe grace prune it.

use crate::Hub;
use crate::http::{Resp, json, query_param};
use crate::upstream;
use hyper::body::Incoming;
use hyper::{Request, StatusCode};
use std::sync::Arc;
use std::time::Instant;

/// Answers the listing, probing first when asked.
pub async fn list(req: &Request<Incoming>, hub: &Arc<Hub>) -> Resp {
    let probe = matches!(query_param(req.uri(), "probe").as_deref(), Some("1" | "true"));
    json(StatusCode::OK, &listing(hub, probe).await)
}

/// The listing, after a probe of every bridge when `probe` (also part of `GET /api/home`).
pub async fn listing(hub: &Hub, probe: bool) -> serde_json::Value {
    if probe {
        probe_all(hub).await;
    }
    hub.bridges.registry().listing(Instant::now())
}

async fn probe_all(hub: &Hub) {
    let targets = hub.bridges.registry().probe_targets(Instant::now());
    let probes = targets.into_iter().map(|(id, port)| async move {
        let reachable = upstream::probe(port).await;
        (id, port, reachable)
    });
    let results = futures_util::future::join_all(probes).await;
    let now = Instant::now();
    let mut registry = hub.bridges.registry();
    for (id, port, reachable) in results {
        if !reachable {
            tracing::debug!(instance = %id, port, "probe failed");
        }
        if registry.probed(&id, port, reachable, now) {
            tracing::info!(instance = %id, port, "instance pruned: unreachable for the probe grace");
        }
    }
}
