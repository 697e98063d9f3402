//! `GET /api/version`: what the running hub is ([`crate::version::Build`]) and, on request,
//! what the upgrade check ([`crate::upgrade`]) would say of the binary on disk.

use crate::Hub;
use crate::http::{Resp, json};
use hyper::StatusCode;
use std::sync::Arc;

/// `GET /api/version[?disk=1]`: `{ok, version, fingerprint, startedAt, hostId, hostName}`
/// (`hostName`: the machine's name, or null; a web client paired with several machines names
/// each by it, and tells them apart by `hostId`); with
/// `disk=1` also what the upgrade check would say, without acting on it: `diskVersion`,
/// `updateAvailable` (a `POST /api/upgrade` would restart) and its `reason`.
pub async fn get(req: &hyper::Request<hyper::body::Incoming>, hub: &Arc<Hub>) -> Resp {
    let b = &hub.life.build;
    let mut body = serde_json::json!({
        "ok": true,
        "version": b.version,
        "fingerprint": b.fingerprint().await,
        "startedAt": b.started_at,
        "hostId": b.host_id,
        "hostName": host_name(),
    });
    if crate::http::query_param(req.uri(), "disk").as_deref() == Some("1") {
        let v = crate::upgrade::check(b, &hub.life.upgrade).await;
        body["diskVersion"] = v.disk_version.into();
        body["updateAvailable"] = v.restart.into();
        body["reason"] = v.reason.into();
    }
    json(StatusCode::OK, &body)
}

/// The machine's host name (Linux: the kernel's), or None where it cannot be read.
fn host_name() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .ok()?;
    let name = name.trim();
    (!name.is_empty()).then(|| name.chars().take(64).collect())
}
