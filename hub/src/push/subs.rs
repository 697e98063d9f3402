//! The devices to notify: one Web Push subscription per device, keyed by its endpoint, kept in
//! `<data>/push/subscriptions.json` (written atomically, 0600). What a browser's
//! `PushSubscription.toJSON()` gives is validated here before it is kept.

use base64::Engine;
use base64::engine::general_purpose::{URL_SAFE, URL_SAFE_NO_PAD};
use hyper::Uri;
use p256::PublicKey;
use serde_json::{Value, json};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// The most subscriptions kept; a new device past it replaces the one changed longest ago
/// (a browser that re-subscribed left its old endpoint behind until a push finds it gone).
pub const MAX_SUBSCRIPTIONS: usize = 64;

/// The longest endpoint URL accepted (real ones are a few hundred bytes).
const MAX_ENDPOINT: usize = 2048;

/// One device's subscription.
#[derive(Clone, Debug, PartialEq)]
pub struct Subscription {
    /// The push resource URL (RFC 8030): where a push is POSTed.
    pub endpoint: String,
    /// The browser's ECDH public key (`keys.p256dh`).
    pub p256dh: PublicKey,
    /// The browser's authentication secret (`keys.auth`).
    pub auth: [u8; 16],
    /// Whether this device also wants to hear when a turn ends.
    pub notify_turn_end: bool,
    /// When it was last stored (epoch ms).
    pub updated_at: u64,
    /// The sessions this device muted: it hears nothing of them.
    pub muted: Vec<String>,
}

/// The most sessions one device keeps muted (the oldest mute goes first).
pub const MAX_MUTED: usize = 256;

/// Decodes base64url with or without padding (browsers send it without; some libraries pad).
fn b64(s: &str) -> Option<Vec<u8>> {
    URL_SAFE_NO_PAD.decode(s).or_else(|_| URL_SAFE.decode(s)).ok()
}

/// Checks an endpoint URL: `https://` anywhere, or `http://` to a loopback address only (a
/// push service on this machine: tests, a local gateway). The error is the 400's text.
pub fn check_endpoint(endpoint: &str) -> Result<Uri, &'static str> {
    const SHAPE: &str = "endpoint must be an https:// URL (http:// only to a loopback address)";
    if endpoint.len() > MAX_ENDPOINT {
        return Err("endpoint is too long");
    }
    let uri: Uri = endpoint.parse().map_err(|_| SHAPE)?;
    let host = uri.host().filter(|h| !h.is_empty()).ok_or(SHAPE)?;
    if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
        return Err("endpoint must not carry a user name or password");
    }
    match uri.scheme_str() {
        Some("https") => Ok(uri),
        Some("http") if is_loopback(host) => Ok(uri),
        _ => Err(SHAPE),
    }
}

fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost") || bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

impl Subscription {
    /// Validates `PushSubscription.toJSON()` plus an optional `notifyTurnEnd` flag. The
    /// error is the 400's text.
    pub fn parse(v: &Value, now_ms: u64) -> Result<Subscription, &'static str> {
        let o = v.as_object().ok_or("a subscription must be a JSON object")?;
        let endpoint = o.get("endpoint").and_then(Value::as_str).ok_or("endpoint (a URL string) required")?;
        check_endpoint(endpoint)?;
        let keys = o.get("keys").and_then(Value::as_object).ok_or("keys {p256dh, auth} required")?;
        let p256dh = keys
            .get("p256dh")
            .and_then(Value::as_str)
            .and_then(b64)
            .filter(|k| k.len() == 65 && k[0] == 4)
            .and_then(|k| PublicKey::from_sec1_bytes(&k).ok())
            .ok_or("keys.p256dh must be a base64url uncompressed P-256 public key")?;
        let auth = keys
            .get("auth")
            .and_then(Value::as_str)
            .and_then(b64)
            .and_then(|a| <[u8; 16]>::try_from(a).ok())
            .ok_or("keys.auth must be 16 bytes of base64url")?;
        let notify_turn_end = match o.get("notifyTurnEnd") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err("notifyTurnEnd must be true or false"),
        };
        let muted = match o.get("muted") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(list)) => list
                .iter()
                .filter_map(Value::as_str)
                .filter(|s| zcode_shared::registration::valid_id(s))
                .take(MAX_MUTED)
                .map(str::to_owned)
                .collect(),
            Some(_) => return Err("muted must be a list of session ids"),
        };
        Ok(Subscription {
            endpoint: endpoint.to_owned(),
            p256dh,
            auth,
            notify_turn_end,
            updated_at: now_ms,
            muted,
        })
    }

    fn to_json(&self) -> Value {
        json!({
            "endpoint": self.endpoint,
            "keys": {
                "p256dh": URL_SAFE_NO_PAD.encode(super::ece::uncompressed(&self.p256dh)),
                "auth": URL_SAFE_NO_PAD.encode(self.auth),
            },
            "notifyTurnEnd": self.notify_turn_end,
            "updatedAt": self.updated_at,
            "muted": self.muted,
        })
    }
}

/// The stored subscriptions, mirrored in memory; every change is written through.
pub struct Store {
    file: PathBuf,
    subs: Vec<Subscription>,
}

impl Store {
    /// The subscriptions in `file` (none when it does not exist; unreadable entries are
    /// skipped with a warning, so one bad line never silences every device).
    pub fn load(file: &Path) -> Store {
        let subs = match std::fs::read(file) {
            Ok(bytes) => match serde_json::from_slice::<Value>(&bytes) {
                Ok(v) => {
                    let list = v["subscriptions"].as_array().cloned().unwrap_or_default();
                    list.iter()
                        .filter_map(|s| {
                            let at = s["updatedAt"].as_u64().unwrap_or(0);
                            Subscription::parse(s, at)
                                .inspect_err(|why| tracing::warn!(file = %file.display(), "skipping a stored push subscription: {why}"))
                                .ok()
                        })
                        .collect()
                }
                Err(e) => {
                    tracing::warn!(file = %file.display(), "push subscriptions unreadable, starting empty: {e}");
                    Vec::new()
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => {
                tracing::warn!(file = %file.display(), "push subscriptions unreadable, starting empty: {e}");
                Vec::new()
            }
        };
        Store { file: file.to_owned(), subs }
    }

    /// Every subscription.
    pub fn all(&self) -> &[Subscription] {
        &self.subs
    }

    /// Stores `sub` (replacing the one with its endpoint, whose mutes it keeps); `true` when it
    /// is a new device.
    pub fn put(&mut self, mut sub: Subscription) -> std::io::Result<bool> {
        let new = match self.subs.iter_mut().find(|s| s.endpoint == sub.endpoint) {
            Some(old) => {
                if sub.muted.is_empty() {
                    sub.muted = std::mem::take(&mut old.muted);
                }
                *old = sub;
                false
            }
            None => {
                if self.subs.len() >= MAX_SUBSCRIPTIONS {
                    let oldest =
                        self.subs.iter().enumerate().min_by_key(|(_, s)| s.updated_at).map(|(i, _)| i);
                    if let Some(i) = oldest {
                        let gone = self.subs.remove(i);
                        tracing::info!(endpoint = %origin_of(&gone.endpoint), "too many push subscriptions: dropped the oldest");
                    }
                }
                self.subs.push(sub);
                true
            }
        };
        self.save()?;
        Ok(new)
    }

    /// Mutes or unmutes `session` for the device of `endpoint`: its muted sessions after, or
    /// `None` when no such subscription is stored.
    pub fn mute(
        &mut self,
        endpoint: &str,
        session: &str,
        muted: bool,
    ) -> std::io::Result<Option<Vec<String>>> {
        let Some(sub) = self.subs.iter_mut().find(|s| s.endpoint == endpoint) else { return Ok(None) };
        sub.muted.retain(|s| s != session);
        if muted {
            if sub.muted.len() >= MAX_MUTED {
                sub.muted.remove(0);
            }
            sub.muted.push(session.to_owned());
        }
        let list = sub.muted.clone();
        self.save()?;
        Ok(Some(list))
    }

    /// Forgets the subscription of `endpoint`; whether there was one.
    pub fn remove(&mut self, endpoint: &str) -> std::io::Result<bool> {
        let before = self.subs.len();
        self.subs.retain(|s| s.endpoint != endpoint);
        if self.subs.len() == before {
            return Ok(false);
        }
        self.save()?;
        Ok(true)
    }

    fn save(&self) -> std::io::Result<()> {
        crate::hold::point("push-save");
        if let Some(dir) = self.file.parent() {
            zcode_shared::paths::Paths::ensure_private_dir(dir)?;
        }
        let list: Vec<Value> = self.subs.iter().map(Subscription::to_json).collect();
        let text = format!("{:#}\n", json!({"subscriptions": list}));
        zcode_shared::config::write_private_atomic(&self.file, text.as_bytes())
    }
}

/// The origin of an endpoint (what logs show: the rest of the URL is the device's secret
/// capability), or `?`.
pub fn origin_of(endpoint: &str) -> String {
    endpoint.parse::<Uri>().ok().and_then(|u| origin(&u)).unwrap_or_else(|| "?".into())
}

/// `scheme://host[:port]` of `uri`, the port only when it is not the scheme's default: the
/// VAPID token's audience (RFC 8292 §2).
pub fn origin(uri: &Uri) -> Option<String> {
    let scheme = uri.scheme_str()?;
    let host = uri.host()?;
    let default = match scheme {
        "https" => 443,
        _ => 80,
    };
    Some(match uri.port_u16() {
        Some(p) if p != default => format!("{scheme}://{host}:{p}"),
        _ => format!("{scheme}://{host}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn key() -> String {
        URL_SAFE_NO_PAD.encode(super::super::ece::uncompressed(
            &super::super::ece::random_secret().unwrap().public_key(),
        ))
    }

    fn body(endpoint: &str) -> Value {
        json!({"endpoint": endpoint, "expirationTime": null, "keys": {"p256dh": key(), "auth": "BTBZMqHH6r4Tts7J_aSIgg"}})
    }

    #[test]
    fn endpoints_are_https_or_loopback_http() {
        for ok in [
            "https://fcm.googleapis.com/fcm/send/abc",
            "http://127.0.0.1:9/p",
            "http://[::1]:80/x",
            "http://localhost/x",
        ] {
            assert!(check_endpoint(ok).is_ok(), "{ok}");
        }
        for bad in [
            "http://example.com/x",
            "http://10.0.0.1/x",
            "ftp://x/y",
            "/relative",
            "https://",
            "https://u:p@h/x",
            "not a url",
        ] {
            assert!(check_endpoint(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn bad_shapes_are_refused_with_a_reason() {
        let good = body("https://push.example.net/x");
        assert!(Subscription::parse(&good, 1).is_ok());
        for (mut v, want) in [
            (json!([]), "JSON object"),
            (json!({}), "endpoint"),
            (body("http://push.example.net/x"), "https://"),
            (json!({"endpoint": "https://h/x"}), "keys"),
            (
                json!({"endpoint": "https://h/x", "keys": {"p256dh": "AAAA", "auth": "BTBZMqHH6r4Tts7J_aSIgg"}}),
                "p256dh",
            ),
            (json!({"endpoint": "https://h/x", "keys": {"p256dh": key(), "auth": "AAAA"}}), "auth"),
            (good.clone(), "notifyTurnEnd"),
        ] {
            if want == "notifyTurnEnd" {
                v["notifyTurnEnd"] = json!("yes");
            }
            let e = Subscription::parse(&v, 1).unwrap_err();
            assert!(e.contains(want), "{v}: {e}");
        }
        // A point not on the curve.
        let mut off = [4u8; 65];
        off[1] = 1;
        let v = json!({"endpoint": "https://h/x", "keys": {"p256dh": URL_SAFE_NO_PAD.encode(off), "auth": "BTBZMqHH6r4Tts7J_aSIgg"}});
        assert!(Subscription::parse(&v, 1).is_err());
    }

    #[test]
    fn one_per_endpoint_written_through_privately_and_capped() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("push/subscriptions.json");
        let mut store = Store::load(&file);
        let a = Subscription::parse(&body("https://h/a"), 1).unwrap();
        assert!(store.put(a.clone()).unwrap());
        let mut a2 = a.clone();
        a2.notify_turn_end = true;
        assert!(!store.put(a2).unwrap(), "the same endpoint is the same device");
        assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
        let again = Store::load(&file);
        assert_eq!(again.all().len(), 1);
        assert!(again.all()[0].notify_turn_end);
        assert_eq!(again.all()[0].p256dh, a.p256dh);
        assert_eq!(store.mute("https://h/a", "s1", true).unwrap(), Some(vec!["s1".to_owned()]));
        assert_eq!(store.mute("https://h/none", "s1", true).unwrap(), None);
        store.put(a.clone()).unwrap();
        assert_eq!(Store::load(&file).all()[0].muted, ["s1"], "kept across a re-subscription and a restart");
        assert_eq!(store.mute("https://h/a", "s1", false).unwrap(), Some(vec![]));
        assert!(store.remove("https://h/a").unwrap());
        assert!(!store.remove("https://h/a").unwrap());
        assert!(Store::load(&file).all().is_empty());

        for i in 0..MAX_SUBSCRIPTIONS as u64 + 1 {
            store.put(Subscription::parse(&body(&format!("https://h/{i}")), 100 + i).unwrap()).unwrap();
        }
        assert_eq!(store.all().len(), MAX_SUBSCRIPTIONS);
        assert!(store.all().iter().all(|s| s.endpoint != "https://h/0"), "the oldest went");
    }

    #[test]
    fn origins_drop_default_ports() {
        let o = |s: &str| origin(&s.parse().unwrap());
        assert_eq!(o("https://push.example.net/a/b?c").as_deref(), Some("https://push.example.net"));
        assert_eq!(o("https://push.example.net:443/a").as_deref(), Some("https://push.example.net"));
        assert_eq!(o("http://127.0.0.1:8080/a").as_deref(), Some("http://127.0.0.1:8080"));
        assert_eq!(origin_of("nope"), "?");
    }
}
