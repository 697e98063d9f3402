//! `* /api/instances/{id}/{rest}`: relayed to the bridge's loopback server as `/{rest}`, with
//! method, query (minus `token`), end-to-end headers, body and status kept, both bodies
//! streamed (a request body is never cut short when the client finishes sending it: trap 2 of
//! the original). The hub adds the machine's token and its client's scope
//! (`zcode_shared::scope`). A watcher's write 403, unknown instance 404, dead port 502.
//!
//! One exception: a session delete addressed to a bridge that has gone (it left in the last
//! [`crate::registry::DEPARTED_FOR`], or its port no longer answers) is done by the hub itself.
//! Closing a serve bridge's last session ends that bridge, so the delete a client sends after
//! its close (the contract's "close them first") would otherwise find nobody to answer it.

use crate::Hub;
use crate::http::{MAX_BODY, Resp, query_without_token, text, too_large};
use crate::upstream;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderName};
use hyper::{Request, Response, StatusCode};
use std::sync::Arc;
use std::time::{Duration, Instant};
use zcode_shared::scope::Scope;

/// How long a bridge may take to start answering a relayed request.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(60);

/// Relays `req` to instance `id`'s `/{rest}` for a client of `scope` (the bridge enforces it:
/// a watcher's writes are answered 403 there).
pub async fn relay(
    req: Request<Incoming>,
    hub: &Arc<Hub>,
    id: &str,
    rest: &str,
    scope: Scope,
    device: &str,
) -> Resp {
    if too_large(req.headers()) {
        return text(StatusCode::PAYLOAD_TOO_LARGE, "body too large");
    }
    // The bridge refuses a watcher's writes itself; refused here too, for the one the hub
    // would do in its place (a departed bridge's session delete).
    if !scope.allows_method(req.method().as_str()) {
        return text(StatusCode::FORBIDDEN, zcode_shared::scope::WATCH_ONLY);
    }
    // A settings body past the settings cap is refused here, as the hub's own mount does: the
    // bridge would answer 413 before reading it all, and a relay still sending would see the
    // connection close (a 502 instead of the 413).
    if rest.starts_with("settings/") && announced_over(req.headers(), zcode_shared::settings::MAX_BODY) {
        let v = serde_json::json!({"ok": false, "error": "body too large (256 KiB at most)"});
        return crate::http::json(StatusCode::PAYLOAD_TOO_LARGE, &v);
    }
    let deleting = (req.method() == hyper::Method::POST)
        .then(|| rest.strip_prefix("sessions/")?.strip_suffix("/delete"))
        .flatten()
        .filter(|sid| !sid.contains('/'))
        .map(str::to_owned);
    let port = hub.bridges.registry().port_of(id, Instant::now());
    let Some(port) = port else {
        return match deleting {
            Some(sid) if hub.bridges.registry().departed(id, Instant::now()) => {
                delete_here(hub, id, sid).await
            }
            _ => text(StatusCode::NOT_FOUND, "unknown instance"),
        };
    };
    let (parts, body) = req.into_parts();
    let target = match query_without_token(&parts.uri) {
        Some(q) => format!("/{rest}?{q}"),
        None => format!("/{rest}"),
    };
    let Ok(uri) = target.parse::<hyper::Uri>() else {
        return text(StatusCode::BAD_REQUEST, "bad path");
    };
    let mut out = Request::new(Limited::new(body, MAX_BODY));
    *out.method_mut() = parts.method;
    *out.uri_mut() = uri;
    copy_end_to_end(&parts.headers, out.headers_mut());
    out.headers_mut().remove(header::AUTHORIZATION);
    upstream::authorize_scoped(out.headers_mut(), port, &hub.auth.token.token(), scope, device);
    match tokio::time::timeout(RESPONSE_TIMEOUT, upstream::request(port, out)).await {
        Ok(Ok(resp)) => {
            let (mut parts, body) = resp.into_parts();
            let headers = std::mem::take(&mut parts.headers);
            copy_end_to_end(&headers, &mut parts.headers);
            Response::from_parts(parts, body.boxed_unsync())
        }
        Ok(Err(e)) => {
            tracing::debug!(instance = %id, port, "relay to the bridge failed: {e}");
            match deleting {
                Some(sid) => delete_here(hub, id, sid).await,
                None => text(StatusCode::BAD_GATEWAY, "bridge unreachable"),
            }
        }
        Err(_) => text(StatusCode::GATEWAY_TIMEOUT, "bridge did not answer"),
    }
}

/// Tombstones `sid` in the tasks index for a bridge that is gone, with the bridge's own rules
/// and answers: `400` a malformed id, `409` while a live bridge still advertises the session
/// (it is live there: close it first), `503` no tasks index.
async fn delete_here(hub: &Arc<Hub>, id: &str, sid: String) -> Resp {
    if !zcode_bridge::files::valid_session_id(&sid) {
        return text(StatusCode::BAD_REQUEST, "invalid sessionId — session id expected");
    }
    if hub.bridges.registry().advertised(&sid, Instant::now()) {
        return text(StatusCode::CONFLICT, "the session is live on a bridge — close it first");
    }
    tracing::info!(instance = %id, session = %sid, "the bridge has gone: the hub deletes the session");
    let now = zcode_shared::time::now_ms();
    match hub.store.run(move |st| st.write(|w| w.set_deleted(&sid, true, now))).await {
        Ok(Ok(())) => crate::http::json(StatusCode::OK, &serde_json::json!({"ok": true, "deleted": true})),
        Ok(Err(e)) => crate::http::store_unavailable(e),
        Err(e) => crate::http::store_unavailable(e),
    }
}

fn announced_over(headers: &HeaderMap, cap: usize) -> bool {
    crate::http::content_length(headers).is_some_and(|n| n > cap as u64)
}

/// Headers that describe one connection, not the message: never forwarded.
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Copies `from` into `to`, leaving out hop-by-hop headers, those named by `Connection`,
/// and `Host` (the bridge gets its own).
fn copy_end_to_end(from: &HeaderMap, to: &mut HeaderMap) {
    let named: Vec<String> = from
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|n| n.trim().to_ascii_lowercase())
        .collect();
    for (k, v) in from {
        if HOP_BY_HOP.contains(k) || k == header::HOST || named.iter().any(|n| n == k.as_str()) {
            continue;
        }
        to.append(k.clone(), v.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_stay_behind() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, "keep-alive, X-Secret-Hop".parse().unwrap());
        h.insert("x-secret-hop", "1".parse().unwrap());
        h.insert(header::TRANSFER_ENCODING, "chunked".parse().unwrap());
        h.insert(header::HOST, "example".parse().unwrap());
        h.insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
        h.append("x-multi", "a".parse().unwrap());
        h.append("x-multi", "b".parse().unwrap());
        let mut out = HeaderMap::new();
        copy_end_to_end(&h, &mut out);
        let keys: Vec<&str> = out.keys().map(HeaderName::as_str).collect();
        assert_eq!(keys, ["content-type", "x-multi"]);
        assert_eq!(out.get_all("x-multi").iter().count(), 2);
    }
}
