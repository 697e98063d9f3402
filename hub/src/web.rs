//! The web client's assets (`hub/web/`), compiled into the binary with `include_bytes!` (no build
//! step) and served from memory for every plain `GET`/`HEAD` that is not an API path: the page
//! needs no token to load, the token lives in the page (it arrives in the URL fragment, which
//! never reaches a server).
//!
//! Every answer carries a strong `ETag` (a SHA-256 prefix of the asset, computed once) and
//! `Cache-Control: no-cache`, so browsers revalidate and get `304` while the binary is the same;
//! and the security headers: a Content-Security-Policy that forbids inline scripts and any
//! origin but the hub's, `Referrer-Policy: no-referrer`, `X-Content-Type-Options: nosniff`.
//! Unknown paths get `index.html` (client-side routing), except missing files under `/js/` and
//! `/icons/` and `/favicon.ico`, which get a 404 rather than HTML under a script's name.
//!
//! The client is an installable web app: `/manifest.webmanifest`, PNG icons (192, 512, and a
//! maskable 512) and a service worker at `/sw.js` (its default scope is `/`, so it needs no
//! `Service-Worker-Allowed`), which caches the shell for offline starts and shows Web Push
//! notifications. `sw.js` is served with the SHA-256 of every other asset written into it: the
//! worker caches and serves only bytes that hash to those, so a page served on this origin by
//! anyone else (another user's program on the port while the hub is down) never becomes the
//! cached app shell. `index.html` carries the same policy in a `<meta>` (minus what a `<meta>`
//! cannot say), so the page keeps it whoever serves it from a cache.

use crate::http::{Body, Resp, full};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Response, StatusCode};
use std::sync::OnceLock;

/// The policy every page response carries: scripts and styles from the hub only (no inline
/// script can run, whatever text ends up in the page), images also from `data:`/`blob:` (file
/// previews), sockets to the hub, the service worker and the manifest from the hub, never
/// framed, no `<base>` rewriting.
/// No plugins (`object-src 'none'`). `connect-src` names `ws: wss:` because Safari before 15.4
/// did not count the page's own WebSocket origin as `'self'`.
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; \
connect-src 'self' ws: wss:; worker-src 'self'; manifest-src 'self'; object-src 'none'; frame-ancestors 'none'; \
base-uri 'none'; form-action 'self'";

/// One asset: its path, content type and bytes.
struct Asset {
    path: &'static str,
    mime: &'static str,
    body: &'static [u8],
}

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const PNG: &str = "image/png";

/// Every file of `hub/web/`. `index.html` is first: it is what unknown paths get.
const ASSETS: &[Asset] = &[
    Asset { path: "/index.html", mime: HTML, body: include_bytes!("../web/index.html") },
    Asset { path: "/app.css", mime: "text/css; charset=utf-8", body: include_bytes!("../web/app.css") },
    Asset { path: "/usage.css", mime: "text/css; charset=utf-8", body: include_bytes!("../web/usage.css") },
    Asset { path: "/icon.svg", mime: "image/svg+xml", body: include_bytes!("../web/icon.svg") },
    Asset {
        path: "/manifest.webmanifest",
        mime: "application/manifest+json",
        body: include_bytes!("../web/manifest.webmanifest"),
    },
    Asset { path: "/icons/icon-192.png", mime: PNG, body: include_bytes!("../web/icons/icon-192.png") },
    Asset { path: "/icons/icon-512.png", mime: PNG, body: include_bytes!("../web/icons/icon-512.png") },
    Asset {
        path: "/icons/maskable-512.png",
        mime: PNG,
        body: include_bytes!("../web/icons/maskable-512.png"),
    },
    Asset {
        path: "/icons/apple-touch-icon.png",
        mime: PNG,
        body: include_bytes!("../web/icons/apple-touch-icon.png"),
    },
    Asset { path: "/sw.js", mime: JS, body: include_bytes!("../web/sw.js") },
    Asset { path: "/js/app.js", mime: JS, body: include_bytes!("../web/js/app.js") },
    Asset { path: "/js/api.js", mime: JS, body: include_bytes!("../web/js/api.js") },
    Asset { path: "/js/conn.js", mime: JS, body: include_bytes!("../web/js/conn.js") },
    Asset { path: "/js/dom.js", mime: JS, body: include_bytes!("../web/js/dom.js") },
    Asset { path: "/js/md.js", mime: JS, body: include_bytes!("../web/js/md.js") },
    Asset { path: "/js/home.js", mime: JS, body: include_bytes!("../web/js/home.js") },
    Asset { path: "/js/projects.js", mime: JS, body: include_bytes!("../web/js/projects.js") },
    Asset { path: "/js/session.js", mime: JS, body: include_bytes!("../web/js/session.js") },
    Asset { path: "/js/transcript.js", mime: JS, body: include_bytes!("../web/js/transcript.js") },
    Asset { path: "/js/composer.js", mime: JS, body: include_bytes!("../web/js/composer.js") },
    Asset { path: "/js/files.js", mime: JS, body: include_bytes!("../web/js/files.js") },
    Asset { path: "/js/push.js", mime: JS, body: include_bytes!("../web/js/push.js") },
    Asset { path: "/js/usage.js", mime: JS, body: include_bytes!("../web/js/usage.js") },
    Asset { path: "/js/hooks.js", mime: JS, body: include_bytes!("../web/js/hooks.js") },
    Asset { path: "/js/hooks_settings.js", mime: JS, body: include_bytes!("../web/js/hooks_settings.js") },
    Asset { path: "/js/settings.js", mime: JS, body: include_bytes!("../web/js/settings.js") },
    Asset {
        path: "/settings.css",
        mime: "text/css; charset=utf-8",
        body: include_bytes!("../web/settings.css"),
    },
    Asset { path: "/js/quota.js", mime: JS, body: include_bytes!("../web/js/quota.js") },
    Asset { path: "/quota.css", mime: "text/css; charset=utf-8", body: include_bytes!("../web/quota.css") },
    Asset { path: "/js/inbox.js", mime: JS, body: include_bytes!("../web/js/inbox.js") },
    Asset { path: "/js/board.js", mime: JS, body: include_bytes!("../web/js/board.js") },
    Asset { path: "/js/about.js", mime: JS, body: include_bytes!("../web/js/about.js") },
    Asset { path: "/js/saved.js", mime: JS, body: include_bytes!("../web/js/saved.js") },
    Asset { path: "/js/devices.js", mime: JS, body: include_bytes!("../web/js/devices.js") },
    Asset { path: "/js/qr.js", mime: JS, body: include_bytes!("../web/js/qr.js") },
];

/// What the service worker's `VERSION` says in `sw.js` as written; the hub serves it with a
/// fingerprint of every other asset there, so the worker's cache is per build of the client.
const SW_VERSION: &str = "__ZCODE_WEB_VERSION__";

/// A hex prefix of the SHA-256 of `body` (a binary body is hashed as its hex: lossless).
fn digest_hex(body: &[u8]) -> String {
    let d = match std::str::from_utf8(body) {
        Ok(text) => zcode_shared::token::digest(text),
        Err(_) => zcode_shared::token::digest(&body.iter().map(|b| format!("{b:02x}")).collect::<String>()),
    };
    d.iter().take(10).map(|b| format!("{b:02x}")).collect()
}

/// Where `sw.js` gets each asset's SHA-256, and the page's policy.
const SW_HASHES: &str = "/*__ZCODE_WEB_HASHES__*/";
const SW_CSP: &str = "__ZCODE_WEB_CSP__";

/// The full hex SHA-256 of `body`, as the service worker computes it.
fn sha256_hex(body: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(body).iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes served for `asset`: its own, but `sw.js` with this build's version, every other
/// asset's SHA-256 (`"/path": "hex"`, and `"/"` for the page) and the policy filled in.
fn body_of(asset: &Asset) -> &'static [u8] {
    static SW: OnceLock<Vec<u8>> = OnceLock::new();
    if asset.path != "/sw.js" {
        return asset.body;
    }
    SW.get_or_init(|| {
        let others = || ASSETS.iter().filter(|a| a.path != "/sw.js");
        let all: String = others().map(|a| digest_hex(a.body)).collect();
        let mut hashes = format!("\"/\": \"{}\"", sha256_hex(ASSETS[0].body));
        for a in others() {
            hashes.push_str(&format!(", \"{}\": \"{}\"", a.path, sha256_hex(a.body)));
        }
        let text = std::str::from_utf8(asset.body).expect("sw.js is UTF-8");
        text.replace(SW_VERSION, &digest_hex(all.as_bytes()))
            .replace(SW_HASHES, &hashes)
            .replace(SW_CSP, CSP)
            .into_bytes()
    })
}

/// The strong validator of each asset (of the bytes served), in [`ASSETS`] order.
fn etags() -> &'static [String] {
    static TAGS: OnceLock<Vec<String>> = OnceLock::new();
    TAGS.get_or_init(|| ASSETS.iter().map(|a| format!("\"{}\"", digest_hex(body_of(a)))).collect())
}

/// The total size of the client, in bytes (what a first visit downloads, uncompressed).
pub fn total_size() -> usize {
    ASSETS.iter().map(|a| a.body.len()).sum()
}

/// Whether `path` belongs to the API or the WebSocket relay, never to the web client.
fn is_api(path: &str) -> bool {
    path == "/api" || path.starts_with("/api/") || path == "/acp" || path.starts_with("/acp/")
}

/// Answers `method path` from the web client's assets: `None` for anything that is not a
/// plain `GET`/`HEAD` of a non-API path (the caller routes it on). `if_none_match` is the
/// request's `If-None-Match`; a match gets `304 Not Modified`.
pub fn serve(method: &Method, path: &str, if_none_match: Option<&HeaderValue>) -> Option<Resp> {
    if (method != Method::GET && method != Method::HEAD) || is_api(path) {
        return None;
    }
    let wanted = if path == "/" { "/index.html" } else { path };
    let index = match ASSETS.iter().position(|a| a.path == wanted) {
        Some(i) => i,
        None if path.starts_with("/js/") || path.starts_with("/icons/") || path == "/favicon.ico" => {
            return Some(not_found());
        }
        None => 0,
    };
    let asset = &ASSETS[index];
    let etag = &etags()[index];
    let fresh = if_none_match.and_then(|v| v.to_str().ok()).is_some_and(|v| matches(v, etag));
    let (status, body): (StatusCode, Body) = if fresh {
        (StatusCode::NOT_MODIFIED, full(""))
    } else if method == Method::HEAD {
        (StatusCode::OK, full(""))
    } else {
        (StatusCode::OK, full(body_of(asset)))
    };
    let mut r = Response::new(body);
    *r.status_mut() = status;
    let h = r.headers_mut();
    if status == StatusCode::OK {
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(asset.mime));
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(body_of(asset).len()));
    }
    if let Ok(v) = HeaderValue::from_str(etag) {
        h.insert(header::ETAG, v);
    }
    security_headers(h);
    Some(r)
}

/// Whether an `If-None-Match` value names `etag` (weak comparison, as RFC 9110 asks for it).
fn matches(if_none_match: &str, etag: &str) -> bool {
    if_none_match.split(',').map(str::trim).any(|t| t == "*" || t.strip_prefix("W/").unwrap_or(t) == etag)
}

fn not_found() -> Resp {
    let mut r = crate::http::text(StatusCode::NOT_FOUND, "not found");
    security_headers(r.headers_mut());
    r
}

fn security_headers(h: &mut hyper::HeaderMap) {
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    async fn body_bytes(r: Resp) -> Vec<u8> {
        r.into_body().collect().await.unwrap().to_bytes().to_vec()
    }

    async fn body(r: Resp) -> String {
        String::from_utf8(body_bytes(r).await).unwrap()
    }

    #[tokio::test]
    async fn the_page_and_unknown_paths_get_index_html_with_the_security_headers() {
        for path in ["/", "/index.html", "/s/123/sess_1", "/anything/else"] {
            let r = serve(&Method::GET, path, None).unwrap();
            assert_eq!(r.status(), StatusCode::OK, "{path}");
            let h = r.headers();
            assert_eq!(h[header::CONTENT_TYPE], HTML);
            assert_eq!(h[header::CACHE_CONTROL], "no-cache");
            assert_eq!(h[header::REFERRER_POLICY], "no-referrer");
            assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
            let csp = h[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
            assert!(csp.contains("script-src 'self';") && !csp.contains("unsafe-inline"), "{csp}");
            assert!(body(r).await.contains("<script type=\"module\" src=\"/js/app.js\">"));
        }
    }

    #[tokio::test]
    async fn assets_have_their_types_and_validators() {
        let r = serve(&Method::GET, "/js/app.js", None).unwrap();
        assert_eq!(r.headers()[header::CONTENT_TYPE], JS);
        let etag = r.headers()[header::ETAG].clone();
        assert!(etag.to_str().unwrap().starts_with('"'));
        let again = serve(&Method::GET, "/js/app.js", Some(&etag)).unwrap();
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
        assert_eq!(again.headers()[header::ETAG], etag);
        assert!(body(again).await.is_empty());
        let weak = HeaderValue::from_str(&format!("\"x\", W/{}", etag.to_str().unwrap())).unwrap();
        assert_eq!(
            serve(&Method::GET, "/js/app.js", Some(&weak)).unwrap().status(),
            StatusCode::NOT_MODIFIED
        );
        let other = HeaderValue::from_static("\"nope\"");
        assert_eq!(serve(&Method::GET, "/js/app.js", Some(&other)).unwrap().status(), StatusCode::OK);
        let css = serve(&Method::GET, "/app.css", None).unwrap();
        assert_eq!(css.headers()[header::CONTENT_TYPE], "text/css; charset=utf-8");
    }

    #[tokio::test]
    async fn head_has_the_headers_without_the_body() {
        let r = serve(&Method::HEAD, "/app.css", None).unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let len: usize = r.headers()[header::CONTENT_LENGTH].to_str().unwrap().parse().unwrap();
        assert!(len > 0);
        assert!(body(r).await.is_empty());
    }

    #[test]
    fn api_paths_and_other_methods_are_not_served() {
        for path in ["/api", "/api/instances", "/api/health", "/acp", "/acp/x"] {
            assert!(serve(&Method::GET, path, None).is_none(), "{path}");
        }
        assert!(serve(&Method::POST, "/", None).is_none());
        assert!(serve(&Method::OPTIONS, "/", None).is_none());
        assert_eq!(serve(&Method::GET, "/js/missing.js", None).unwrap().status(), StatusCode::NOT_FOUND);
        assert_eq!(serve(&Method::GET, "/favicon.ico", None).unwrap().status(), StatusCode::NOT_FOUND);
    }

    #[test]
    fn the_client_stays_small() {
        // 300 KiB until the permission card and the notification actions (issue 33: +13 KB).
        assert!(total_size() < 320 * 1024, "the web client is {} bytes", total_size());
    }

    /// The text assets (everything but the images), as text.
    fn texts() -> impl Iterator<Item = (&'static str, &'static str)> {
        ASSETS
            .iter()
            .filter(|a| !a.mime.starts_with("image/png"))
            .map(|a| (a.path, std::str::from_utf8(a.body).unwrap()))
    }

    #[test]
    fn no_asset_carries_an_inline_script_or_handler() {
        let index = std::str::from_utf8(ASSETS[0].body).unwrap();
        assert_eq!(index.matches("<script").count(), 1, "one module script, by src");
        for (path, body) in texts() {
            assert!(!body.contains("innerHTML") && !body.contains("outerHTML"), "{path}");
            assert!(!body.contains("eval(") && !body.contains("new Function"), "{path}");
            assert!(!body.contains("insertAdjacentHTML") && !body.contains("document.write"), "{path}");
        }
    }

    #[tokio::test]
    async fn the_app_manifest_icons_and_service_worker_are_served() {
        let m = serve(&Method::GET, "/manifest.webmanifest", None).unwrap();
        assert_eq!(m.headers()[header::CONTENT_TYPE], "application/manifest+json");
        let manifest: serde_json::Value = serde_json::from_str(&body(m).await).unwrap();
        let icons = manifest["icons"].as_array().unwrap();
        for icon in icons {
            let src = icon["src"].as_str().unwrap();
            let r = serve(&Method::GET, src, None).unwrap();
            assert_eq!(r.status(), StatusCode::OK, "{src}");
            assert_eq!(r.headers()[header::CONTENT_TYPE], icon["type"].as_str().unwrap(), "{src}");
            assert!(r.headers().contains_key(header::ETAG), "{src}");
        }
        let png = serve(&Method::GET, "/icons/icon-512.png", None).unwrap();
        assert!(body_bytes(png).await.starts_with(b"\x89PNG\r\n"));
        let sw = serve(&Method::GET, "/sw.js", None).unwrap();
        assert_eq!(sw.headers()[header::CONTENT_TYPE], JS);
        assert_eq!(sw.headers()[header::CACHE_CONTROL], "no-cache", "a new worker is seen at once");
        let csp = sw.headers()[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
        assert!(csp.contains("worker-src 'self'") && csp.contains("manifest-src 'self'"), "{csp}");
        assert_eq!(serve(&Method::GET, "/icons/missing.png", None).unwrap().status(), StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn the_service_worker_is_served_with_this_builds_version() {
        let r = serve(&Method::GET, "/sw.js", None).unwrap();
        let etag = r.headers()[header::ETAG].to_str().unwrap().to_owned();
        let sw = body(r).await;
        assert!(!sw.contains(SW_VERSION), "the placeholder is filled in");
        let version = sw.split("const VERSION = '").nth(1).and_then(|v| v.split('\'').next()).unwrap();
        assert!(version.len() == 20 && version.chars().all(|c| c.is_ascii_hexdigit()), "{version}");
        // The validator is the served bytes': a new version is a new worker to the browser.
        assert_eq!(etag, format!("\"{}\"", digest_hex(sw.as_bytes())));
    }

    #[tokio::test]
    async fn the_service_worker_knows_every_assets_hash_and_the_policy() {
        let sw = body(serve(&Method::GET, "/sw.js", None).unwrap()).await;
        assert!(!sw.contains(SW_HASHES) && !sw.contains(SW_CSP), "placeholders filled in");
        for a in ASSETS.iter().filter(|a| a.path != "/sw.js") {
            let served = body_bytes(serve(&Method::GET, a.path, None).unwrap()).await;
            let entry = format!("\"{}\": \"{}\"", a.path, sha256_hex(&served));
            assert!(sw.contains(&entry), "sw.js lacks {entry}");
        }
        let page = body_bytes(serve(&Method::GET, "/", None).unwrap()).await;
        assert!(sw.contains(&format!("\"/\": \"{}\"", sha256_hex(&page))));
        assert!(!CSP.contains('"') && sw.contains(&format!("const CSP = \"{CSP}\";")));
    }

    #[test]
    fn the_page_carries_the_policy_in_a_meta_too() {
        let index = std::str::from_utf8(ASSETS[0].body).unwrap();
        let meta =
            index.split("http-equiv=\"Content-Security-Policy\" content=\"").nth(1).expect("a CSP <meta>");
        let meta = &meta[..meta.find('"').unwrap()];
        // The header's policy minus what a <meta> cannot carry (frame-ancestors).
        let want: Vec<&str> = CSP.split("; ").filter(|d| !d.starts_with("frame-ancestors")).collect();
        assert_eq!(meta.split("; ").collect::<Vec<_>>(), want);
        assert!(
            CSP.contains("object-src 'none'")
                && CSP.contains("frame-ancestors 'none'")
                && CSP.contains("base-uri 'none'")
        );
    }

    #[test]
    fn the_service_worker_caches_every_text_asset() {
        // Its shell list is written out in sw.js: a new asset left out of it would be missing
        // when the app starts offline.
        let sw = std::str::from_utf8(ASSETS.iter().find(|a| a.path == "/sw.js").unwrap().body).unwrap();
        let list = &sw[sw.find("const SHELL = [").unwrap()..];
        let list = &list[..list.find("];").unwrap()];
        for (path, _) in texts().filter(|(p, _)| *p != "/sw.js" && *p != "/index.html") {
            assert!(list.contains(&format!("'{path}'")), "sw.js's SHELL lacks {path}");
        }
        assert!(list.contains("'/'"), "the page itself");
    }
}
