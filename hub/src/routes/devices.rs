//! Pairing and devices (see [`crate::devices`]):
//!
//! - `POST /api/pairing` `{name?, scope?: "full"|"watch"}` → `{code, url, expiresAt}`: a
//!   one-time code (5 minutes) and the web client's URL carrying it in the fragment.
//! - `POST /api/pair` `{code, name?, publicKey?}` (no token) → `{deviceId, name, token}`: the
//!   device's own credential; a wrong, used or expired code is a 401 saying so, rate-limited
//!   like tokens. With `publicKey` (base64url of a raw P-256 point) → `{deviceId, name}` and no
//!   credential: the device signs challenges instead ([`crate::devices::keys`]).
//! - `POST /api/pair/challenge` (no token) → `{challenge, expiresAt}`: sign
//!   `"zcode-acp device token:" + challenge` (ECDSA P-256, SHA-256, raw r‖s).
//! - `POST /api/pair/token` `{deviceId, challenge, signature}` (no token) → `{token,
//!   expiresAt, expiresIn}`: an access token for 15 minutes; a used, expired or unknown challenge, another
//!   key's signature or a removed device is a 401 in words, rate-limited like wrong tokens.
//! - `POST /api/pair/key` `{publicKey}` (a device's stored credential) → `{ok, deviceId}`: the
//!   device signs challenges from now on, and that credential stops working.
//! - `GET /api/devices` → `{devices: [{id, name, scope, createdAt, lastSeenAt, current}]}`.
//! - `PATCH /api/devices/{id}` `{name}` → 200; `DELETE /api/devices/{id}` → 200 (the device's
//!   connections are closed); unknown id 404.
//! - `GET /api/audit[?limit=N&before=ID]` → `{entries: [{id, at, deviceId, deviceName,
//!   action, target, status}]}`, newest first.

use crate::Hub;
use crate::auth::{Principal, Scope};
use crate::devices::{self, PairError};
use crate::http::{Resp, json, read_json, read_preauth_json, say};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Request, StatusCode};
use serde_json::{Value, json};
use std::net::IpAddr;

fn error(status: StatusCode, msg: impl Into<String>) -> Resp {
    json(status, &json!({ "error": msg.into() }))
}

/// A JSON object body; an absent body is `{}`.
async fn object_body(req: Request<Incoming>, preauth: bool) -> Result<serde_json::Map<String, Value>, Resp> {
    let empty = crate::http::content_length(req.headers()).unwrap_or(0) == 0
        && !req.headers().contains_key(header::TRANSFER_ENCODING);
    if empty {
        return Ok(serde_json::Map::new());
    }
    let read = if preauth { read_preauth_json(req).await } else { read_json(req).await };
    match read {
        Ok(Value::Object(o)) => Ok(o),
        Ok(_) => Err(error(StatusCode::BAD_REQUEST, "the body must be a JSON object")),
        Err(e) => Err(e.response()),
    }
}

/// An optional name member, checked; the error is the 400's text.
fn name_of(body: &serde_json::Map<String, Value>) -> Result<Option<String>, &'static str> {
    match body.get("name") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => devices::check_name(s).map(Some),
        Some(_) => Err("name must be a string"),
    }
}

/// The web client's address as this request reached the hub (the tunnel's, through one).
fn base_url(req: &Request<Incoming>, hub: &Hub) -> String {
    let h = req.headers();
    let host = h.get(header::HOST).and_then(|v| v.to_str().ok()).filter(|v| !v.is_empty());
    let https = h.get("x-forwarded-proto").is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"https"));
    let scheme = if https { "https" } else { "http" };
    match host {
        Some(host) => format!("{scheme}://{host}"),
        None => format!("http://127.0.0.1:{}", hub.life.port()),
    }
}

/// `POST /api/pairing`.
pub async fn new_code(req: Request<Incoming>, hub: &Hub) -> Resp {
    let base = base_url(&req, hub);
    let body = match object_body(req, false).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let name = match name_of(&body) {
        Ok(n) => n,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    let scope = match body.get("scope") {
        None | Some(Value::Null) => Scope::Full,
        Some(v) => match v.as_str().and_then(Scope::parse) {
            Some(s) => s,
            None => return error(StatusCode::BAD_REQUEST, "scope must be \"full\" or \"watch\""),
        },
    };
    match hub.devices.new_code(name, scope) {
        Ok(c) => {
            let url = format!("{base}/#pair={}", c.code);
            json(
                StatusCode::OK,
                &json!({"code": c.code, "url": url, "expiresAt": c.expires_at, "scope": scope.as_str()}),
            )
        }
        Err(e) => pair_error(e),
    }
}

fn pair_error(e: PairError) -> Resp {
    match e {
        PairError::BadCode => error(
            StatusCode::UNAUTHORIZED,
            "this pairing code is wrong, already used or expired (codes work once, for 5 minutes): \
             ask for a new one (`zcode-acp pair`)",
        ),
        PairError::Limited(secs) => {
            let mut r =
                error(StatusCode::TOO_MANY_REQUESTS, "too many wrong pairing codes: wait and try again");
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
            r
        }
        PairError::Full(why) => error(StatusCode::CONFLICT, why),
        PairError::Store(why) => {
            error(StatusCode::SERVICE_UNAVAILABLE, format!("the store is unavailable: {why}"))
        }
    }
}

/// `POST /api/pair` (no token).
pub async fn pair(req: Request<Incoming>, hub: &Hub, addr: IpAddr) -> Resp {
    let body = match object_body(req, true).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let Some(code) = body.get("code").and_then(Value::as_str).filter(|c| !c.trim().is_empty()) else {
        return error(StatusCode::BAD_REQUEST, "code (the pairing code, a string) required");
    };
    let name = match name_of(&body) {
        Ok(n) => n,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    let public_key = match body.get("publicKey") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_str().map(devices::keys::parse_public_key) {
            Some(Ok(k)) => Some(k),
            Some(Err(why)) => return error(StatusCode::BAD_REQUEST, why),
            None => return error(StatusCode::BAD_REQUEST, "publicKey must be a string (base64url)"),
        },
    };
    match devices::pair(hub, code, name, public_key, addr).await {
        Ok(p) => {
            let who = Principal {
                credential: crate::auth::Credential::Device(p.id.clone()),
                scope: Scope::Full,
                name: p.name.clone(),
            };
            devices::audit::record(hub, &who, "pair", format!("device {}", p.id), Some(200)).await;
            let mut v = json!({"deviceId": p.id, "name": p.name});
            if let Some(token) = p.token {
                v["token"] = json!(token);
            }
            json(StatusCode::OK, &v)
        }
        Err(e) => pair_error(e),
    }
}

/// `POST /api/pair/challenge` (no token): refused only to an address over its limit.
pub fn challenge(hub: &Hub, addr: IpAddr) -> Resp {
    if let Err(refused) = hub.auth.may_try(addr) {
        return refused.response();
    }
    let (challenge, expires_at) = hub.devices.challenge();
    json(StatusCode::OK, &json!({"challenge": challenge, "expiresAt": expires_at}))
}

/// `POST /api/pair/token` (no token).
pub async fn access_token(req: Request<Incoming>, hub: &Hub, addr: IpAddr) -> Resp {
    use devices::keys::MintError;
    let body = match object_body(req, true).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let field = |k: &str| body.get(k).and_then(Value::as_str).filter(|v| !v.is_empty());
    let (Some(id), Some(challenge), Some(signature)) =
        (field("deviceId"), field("challenge"), field("signature"))
    else {
        return error(
            StatusCode::BAD_REQUEST,
            "deviceId, challenge (from POST /api/pair/challenge) and signature (base64url) required",
        );
    };
    match devices::keys::mint(hub, id, challenge, signature, addr).await {
        Ok(m) => {
            let life = devices::keys::ACCESS_LIFE.as_secs();
            json(
                StatusCode::OK,
                &json!({"token": m.token, "expiresAt": m.expires_at, "expiresIn": life, "deviceId": id}),
            )
        }
        Err(MintError::Challenge) => error(
            StatusCode::UNAUTHORIZED,
            "this challenge is unknown, already used or expired (each works once, for 60 seconds): \
             ask for a new one",
        ),
        Err(MintError::Signature) => error(
            StatusCode::UNAUTHORIZED,
            "the signature is not this device's key, or the device was removed: pair again with a new code",
        ),
        Err(MintError::Limited(secs)) => {
            let mut r =
                error(StatusCode::TOO_MANY_REQUESTS, "too many failed authentications: wait and try again");
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
            r
        }
        Err(MintError::Store(why)) => {
            error(StatusCode::SERVICE_UNAVAILABLE, format!("the store is unavailable: {why}"))
        }
    }
}

/// `POST /api/pair/key`: `who` (a device, by its stored credential) registers its key.
pub async fn register_key(req: Request<Incoming>, hub: &Hub, who: &Principal) -> Resp {
    use devices::keys::KeyError;
    let crate::auth::Credential::Device(id) = who.credential.clone() else {
        return error(
            StatusCode::CONFLICT,
            "the machine token is not a device's: pair this browser with a code (`zcode-acp pair`)",
        );
    };
    let body = match object_body(req, false).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let key = match body.get("publicKey").and_then(Value::as_str).map(devices::keys::parse_public_key) {
        Some(Ok(k)) => k,
        Some(Err(why)) => return error(StatusCode::BAD_REQUEST, why),
        None => return error(StatusCode::BAD_REQUEST, "publicKey (base64url of a raw P-256 point) required"),
    };
    match devices::keys::register(hub, &id, key).await {
        Ok(()) => json(StatusCode::OK, &json!({"ok": true, "deviceId": id})),
        Err(KeyError::Refused(why)) => error(StatusCode::CONFLICT, why),
        Err(KeyError::Store(why)) => {
            error(StatusCode::SERVICE_UNAVAILABLE, format!("the store is unavailable: {why}"))
        }
    }
}

/// `GET /api/devices`.
pub async fn list(hub: &Hub, who: &Principal) -> Resp {
    match hub.devices.list(hub, who).await {
        Ok(v) => json(StatusCode::OK, &v),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, format!("the store is unavailable: {e}")),
    }
}

/// `PATCH|DELETE /api/devices/{id}`.
pub async fn one(req: Request<Incoming>, hub: &Hub, id: &str) -> Resp {
    if id.is_empty() || id.contains('/') {
        return error(StatusCode::NOT_FOUND, "no such device");
    }
    let method = req.method().clone();
    let done = if method == hyper::Method::DELETE {
        devices::revoke(hub, id).await.map(|r| r.map(|name| json!({"ok": true, "id": id, "name": name})))
    } else if method == hyper::Method::PATCH {
        let body = match object_body(req, false).await {
            Ok(b) => b,
            Err(r) => return r,
        };
        let name = match name_of(&body) {
            Ok(Some(n)) => n,
            Ok(None) => return error(StatusCode::BAD_REQUEST, "name (a string) required"),
            Err(why) => return error(StatusCode::BAD_REQUEST, why),
        };
        devices::rename(hub, id, &name)
            .await
            .map(|found| found.then(|| json!({"ok": true, "id": id, "name": name})))
    } else {
        return say(StatusCode::METHOD_NOT_ALLOWED, "PATCH (rename) or DELETE (revoke) a device");
    };
    match done {
        Ok(Some(v)) => json(StatusCode::OK, &v),
        Ok(None) => error(StatusCode::NOT_FOUND, "no such device"),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, format!("the store is unavailable: {e}")),
    }
}

/// `GET /api/audit`.
pub async fn audit(req: &Request<Incoming>, hub: &Hub) -> Resp {
    let q = |k| crate::http::query_param(req.uri(), k);
    let limit = match q("limit").map(|v| v.parse::<i64>()) {
        None => 200,
        Some(Ok(n)) if (1..=10_000).contains(&n) => n,
        Some(_) => return error(StatusCode::BAD_REQUEST, "limit must be a number from 1 to 10000"),
    };
    let before = match q("before").map(|v| v.parse::<i64>()) {
        None => None,
        Some(Ok(n)) => Some(n),
        Some(Err(_)) => return error(StatusCode::BAD_REQUEST, "before must be an entry's id"),
    };
    match devices::audit::read(hub, limit, before).await {
        Ok(v) => json(StatusCode::OK, &v),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, format!("the store is unavailable: {e}")),
    }
}
