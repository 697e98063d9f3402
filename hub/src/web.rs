//! The web client's assets (`hub/web/`), compiled into the binary and served from memory for
//! every plain `GET`/`HEAD` that is not an API path: the page needs no token to load, the token
//! lives in the page (it arrives in the URL fragment, which never reaches a server).
//!
//! `build.rs` walks `hub/web/` (a new file needs no edit here), fingerprints the client
//! ([`VERSION`]) and gzips every text asset. The page (`/`, every unknown path: client-side
//! routing) and `sw.js` are `Cache-Control: no-cache` with a strong `ETag` (`304` while the
//! build is the same); the page names every other asset under `/assets/<VERSION>/…`, served
//! `public, max-age=31536000, immutable`, and preloads every module (`<link rel="modulepreload">`),
//! so a first visit fetches the whole client at once and a later start asks only for the page.
//! The same assets stay at their plain paths (`no-cache`) too. A request that accepts gzip gets
//! the gzipped bytes (`Content-Encoding: gzip`, `Vary: Accept-Encoding`), any other the plain
//! ones. Every answer carries `X-Content-Type-Options: nosniff`; the page, the worker and
//! errors also the policy (a Content-Security-Policy that forbids inline scripts and any
//! script or style origin but the hub's; the page may call other machines' hubs, see [`CSP`]) and `Referrer-Policy: no-referrer`. `build.rs` serves modules without
//! their whole-line comments (line numbers kept): the client is mostly comments. Missing files under `/js/`, `/icons/` and `/assets/` and
//! `/favicon.ico` get a 404 rather than HTML under a script's name.
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
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Response, StatusCode};

mod policy;
pub use policy::CSP;

/// One asset, as `build.rs` made it.
struct Asset {
    /// Its path under `hub/web/` (`/js/app.js`).
    path: &'static str,
    mime: &'static str,
    /// Whether it is also served under `/assets/<VERSION>/`, cacheable for good.
    versioned: bool,
    /// The bytes served.
    body: &'static [u8],
    /// The same, gzipped (text assets).
    gzip: Option<&'static [u8]>,
    /// A hex prefix of the SHA-256 of `body`: the validator.
    tag: &'static str,
}

include!(concat!(env!("OUT_DIR"), "/web_assets.rs"));

/// How long a versioned asset may be kept without asking: a year, never revalidated.
const IMMUTABLE: &str = "public, max-age=31536000, immutable";

/// The total size of the client, in bytes (uncompressed).
pub fn total_size() -> usize {
    ASSETS.iter().map(|a| a.body.len()).sum()
}

/// Whether `path` belongs to the API or the WebSocket relay, never to the web client.
pub fn is_api(path: &str) -> bool {
    path == "/api" || path == "/acp" || path.starts_with("/api/") || path.starts_with("/acp/")
}

/// Which asset `path` names and whether it is this build's versioned URL of it; `None` for a
/// path that must be a 404.
fn lookup(path: &str) -> Option<(&'static Asset, bool)> {
    if let Some(rest) = path.strip_prefix("/assets/") {
        // `/assets/<version>/<path>`: another build's version gets today's bytes, revalidated.
        let (version, rest) = rest.split_once('/')?;
        let asset = ASSETS.iter().find(|a| a.versioned && a.path.strip_prefix('/') == Some(rest))?;
        return Some((asset, version == VERSION));
    }
    let wanted = if path == "/" { "/index.html" } else { path };
    match ASSETS.iter().find(|a| a.path == wanted) {
        Some(a) => Some((a, false)),
        None if path.starts_with("/js/") || path.starts_with("/icons/") || path == "/favicon.ico" => None,
        None => Some((&ASSETS[0], false)),
    }
}

/// Whether a request's `Accept-Encoding` allows gzip (named with a nonzero q, or `*` is).
fn accepts_gzip(headers: &HeaderMap) -> bool {
    let mut star = false;
    for value in headers.get_all(header::ACCEPT_ENCODING) {
        for item in value.to_str().unwrap_or("").split(',') {
            let mut parts = item.split(';').map(str::trim);
            let coding = parts.next().unwrap_or("").to_ascii_lowercase();
            let q = parts
                .find_map(|p| p.strip_prefix("q=").or_else(|| p.strip_prefix("Q=")))
                .map_or(1.0, |q| q.parse::<f32>().unwrap_or(0.0));
            match coding.as_str() {
                "gzip" | "x-gzip" => return q > 0.0,
                "*" => star = q > 0.0,
                _ => {}
            }
        }
    }
    star
}

/// Answers `method path` from the web client's assets: `None` for anything that is not a
/// plain `GET`/`HEAD` of a non-API path (the caller routes it on). `headers` are the
/// request's: `If-None-Match` (a match gets `304 Not Modified`) and `Accept-Encoding`.
pub fn serve(method: &Method, path: &str, headers: &HeaderMap) -> Option<Resp> {
    if (method != Method::GET && method != Method::HEAD) || is_api(path) {
        return None;
    }
    let Some((asset, immutable)) = lookup(path) else {
        return Some(not_found());
    };
    let gzip = asset.gzip.filter(|_| accepts_gzip(headers));
    let etag = if gzip.is_some() { format!("\"{}-gz\"", asset.tag) } else { format!("\"{}\"", asset.tag) };
    let bytes = gzip.unwrap_or(asset.body);
    let fresh =
        headers.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok()).is_some_and(|v| matches(v, &etag));
    let (status, body): (StatusCode, Body) = if fresh {
        (StatusCode::NOT_MODIFIED, full(""))
    } else if method == Method::HEAD {
        (StatusCode::OK, full(""))
    } else {
        (StatusCode::OK, full(bytes))
    };
    let mut r = Response::new(body);
    *r.status_mut() = status;
    let h = r.headers_mut();
    if status == StatusCode::OK {
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(asset.mime));
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
        if gzip.is_some() {
            h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        }
    }
    if asset.gzip.is_some() {
        h.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    }
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    if asset.mime.starts_with("text/html") || asset.path == "/sw.js" {
        // What only a document or a worker obeys: not repeated on each of its subresources.
        security_headers(h);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if immutable {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static(IMMUTABLE));
    }
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

fn security_headers(h: &mut HeaderMap) {
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    /// A request's headers with `Accept-Encoding: accept` (none for `""`).
    fn with(accept: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        if !accept.is_empty() {
            h.insert(header::ACCEPT_ENCODING, HeaderValue::from_str(accept).unwrap());
        }
        h
    }

    fn get(path: &str) -> Resp {
        serve(&Method::GET, path, &HeaderMap::new()).unwrap()
    }

    async fn body_bytes(r: Resp) -> Vec<u8> {
        r.into_body().collect().await.unwrap().to_bytes().to_vec()
    }

    async fn body(r: Resp) -> String {
        String::from_utf8(body_bytes(r).await).unwrap()
    }

    fn sha256_hex(body: &[u8]) -> String {
        use sha2::Digest;
        sha2::Sha256::digest(body).iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Where the page asks for `path`.
    fn at(path: &str) -> String {
        format!("/assets/{VERSION}{path}")
    }

    fn page() -> &'static str {
        std::str::from_utf8(ASSETS[0].body).unwrap()
    }

    #[tokio::test]
    async fn the_page_and_unknown_paths_get_index_html_with_the_security_headers() {
        assert_eq!(ASSETS[0].path, "/index.html");
        for path in ["/", "/index.html", "/s/123/sess_1", "/anything/else"] {
            let r = get(path);
            assert_eq!(r.status(), StatusCode::OK, "{path}");
            let h = r.headers();
            assert_eq!(h[header::CONTENT_TYPE], "text/html; charset=utf-8");
            assert_eq!(h[header::CACHE_CONTROL], "no-cache");
            assert_eq!(h[header::REFERRER_POLICY], "no-referrer");
            assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
            let csp = h[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
            assert!(csp.contains("script-src 'self';") && !csp.contains("unsafe-inline"), "{csp}");
            let want = format!("<script type=\"module\" src=\"{}\">", at("/js/app.js"));
            assert!(body(r).await.contains(&want));
        }
    }

    #[tokio::test]
    async fn assets_have_their_types_and_validators() {
        let r = get("/js/app.js");
        assert_eq!(r.headers()[header::CONTENT_TYPE], "text/javascript; charset=utf-8");
        let etag = r.headers()[header::ETAG].clone();
        assert!(etag.to_str().unwrap().starts_with('"'));
        let mut h = HeaderMap::new();
        h.insert(header::IF_NONE_MATCH, etag.clone());
        let again = serve(&Method::GET, "/js/app.js", &h).unwrap();
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
        assert_eq!(again.headers()[header::ETAG], etag);
        assert!(body(again).await.is_empty());
        let weak = HeaderValue::from_str(&format!("\"x\", W/{}", etag.to_str().unwrap())).unwrap();
        h.insert(header::IF_NONE_MATCH, weak);
        assert_eq!(serve(&Method::GET, "/js/app.js", &h).unwrap().status(), StatusCode::NOT_MODIFIED);
        h.insert(header::IF_NONE_MATCH, HeaderValue::from_static("\"nope\""));
        assert_eq!(serve(&Method::GET, "/js/app.js", &h).unwrap().status(), StatusCode::OK);
        assert_eq!(get("/app.css").headers()[header::CONTENT_TYPE], "text/css; charset=utf-8");
    }

    #[tokio::test]
    async fn head_has_the_headers_without_the_body() {
        let r = serve(&Method::HEAD, "/app.css", &HeaderMap::new()).unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let len: usize = r.headers()[header::CONTENT_LENGTH].to_str().unwrap().parse().unwrap();
        assert!(len > 0);
        assert!(body(r).await.is_empty());
    }

    #[test]
    fn api_paths_and_other_methods_are_not_served() {
        for path in ["/api", "/api/instances", "/api/health", "/acp", "/acp/x"] {
            assert!(serve(&Method::GET, path, &HeaderMap::new()).is_none(), "{path}");
        }
        assert!(serve(&Method::POST, "/", &HeaderMap::new()).is_none());
        assert!(serve(&Method::OPTIONS, "/", &HeaderMap::new()).is_none());
        for path in [
            "/js/missing.js",
            "/favicon.ico",
            "/assets/x",
            &at("/js/missing.js"),
            &at("/index.html"),
            &at("/sw.js"),
        ] {
            assert_eq!(get(path).status(), StatusCode::NOT_FOUND, "{path}");
        }
    }

    #[test]
    fn the_client_stays_small() {
        assert!(total_size() < 400 * 1024, "the web client is {} bytes", total_size());
        // What a first visit downloads: the page and every file it names, gzipped (the browser
        // test measures the same on the wire, headers and the API's answers included).
        let named: usize = ASSETS
            .iter()
            .filter(|a| a.path == "/index.html" || page().contains(&format!("\"{}\"", at(a.path))))
            .map(|a| a.gzip.unwrap_or(a.body).len())
            .sum();
        assert!(named < 64 * 1024, "a first visit downloads {named} bytes");
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
        assert_eq!(page().matches("<script").count(), 1, "one module script, by src");
        for (path, body) in texts() {
            assert!(!body.contains("innerHTML") && !body.contains("outerHTML"), "{path}");
            assert!(!body.contains("eval(") && !body.contains("new Function"), "{path}");
            assert!(!body.contains("insertAdjacentHTML") && !body.contains("document.write"), "{path}");
        }
    }

    #[tokio::test]
    async fn the_app_manifest_icons_and_service_worker_are_served() {
        let m = get("/manifest.webmanifest");
        assert_eq!(m.headers()[header::CONTENT_TYPE], "application/manifest+json");
        let manifest: serde_json::Value = serde_json::from_str(&body(m).await).unwrap();
        let icons = manifest["icons"].as_array().unwrap();
        for icon in icons {
            let src = icon["src"].as_str().unwrap();
            let r = get(src);
            assert_eq!(r.status(), StatusCode::OK, "{src}");
            assert_eq!(r.headers()[header::CONTENT_TYPE], icon["type"].as_str().unwrap(), "{src}");
            assert!(r.headers().contains_key(header::ETAG), "{src}");
        }
        assert!(body_bytes(get("/icons/icon-512.png")).await.starts_with(b"\x89PNG\r\n"));
        let sw = get("/sw.js");
        assert_eq!(sw.headers()[header::CONTENT_TYPE], "text/javascript; charset=utf-8");
        assert_eq!(sw.headers()[header::CACHE_CONTROL], "no-cache", "a new worker is seen at once");
        let csp = sw.headers()[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
        assert!(csp.contains("worker-src 'self'") && csp.contains("manifest-src 'self'"), "{csp}");
        assert_eq!(get("/icons/missing.png").status(), StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn the_service_worker_is_served_with_this_builds_version() {
        let r = get("/sw.js");
        let etag = r.headers()[header::ETAG].to_str().unwrap().to_owned();
        let sw = body(r).await;
        assert!(!sw.contains("__ZCODE_WEB_VERSION__"), "the placeholder is filled in");
        let version = sw.split("const VERSION = '").nth(1).and_then(|v| v.split('\'').next()).unwrap();
        assert_eq!(version, VERSION);
        assert!(version.len() == 20 && version.chars().all(|c| c.is_ascii_hexdigit()), "{version}");
        // The validator is the served bytes': a new version is a new worker to the browser.
        assert_eq!(etag, format!("\"{}\"", &sha256_hex(sw.as_bytes())[..20]));
    }

    #[tokio::test]
    async fn the_service_worker_knows_every_assets_hash_and_the_policy() {
        let sw = body(get("/sw.js")).await;
        assert!(!sw.contains("__ZCODE_WEB_HASHES__") && !sw.contains("__ZCODE_WEB_CSP__"), "filled in");
        for a in ASSETS.iter().filter(|a| a.path != "/sw.js" && a.path != "/index.html") {
            let url = if a.versioned { at(a.path) } else { a.path.to_owned() };
            let served = body_bytes(get(&url)).await;
            let entry = format!("\"{url}\": \"{}\"", sha256_hex(&served));
            assert!(sw.contains(&entry), "sw.js lacks {entry}");
        }
        let page = body_bytes(get("/")).await;
        assert!(sw.contains(&format!("\"/\": \"{}\"", sha256_hex(&page))));
        assert!(!CSP.contains('"') && sw.contains(&format!("const CSP = \"{CSP}\";")));
    }

    #[test]
    fn the_page_carries_the_policy_in_a_meta_too() {
        let meta =
            page().split("http-equiv=\"Content-Security-Policy\" content=\"").nth(1).expect("a CSP <meta>");
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

    #[tokio::test]
    async fn the_service_worker_caches_every_text_asset_under_this_builds_url() {
        // A new asset left out of the shell would be missing when the app starts offline.
        let sw = body(get("/sw.js")).await;
        let list = &sw[sw.find("const SHELL = [").unwrap()..];
        let list = &list[..list.find("];").unwrap()];
        for a in ASSETS
            .iter()
            .filter(|a| !a.mime.starts_with("image/png") && a.path != "/sw.js" && a.path != "/index.html")
        {
            let url = if a.versioned { at(a.path) } else { a.path.to_owned() };
            assert!(list.contains(&format!("'{url}'")), "sw.js's SHELL lacks {url}");
        }
        assert!(list.contains("'/'"), "the page itself");
        // What install fetches must all be known, or the install fails.
        for entry in list["const SHELL = [".len()..].split(", ") {
            let url = entry.trim_matches('\'');
            assert!(sw.contains(&format!("\"{url}\": \"")), "sw.js's SHELL has {url}, but no hash for it");
        }
        assert!(sw.contains("const CACHE = `zcode-acp-shell-${VERSION}`"), "a cache per build");
    }

    #[tokio::test]
    async fn gzip_is_served_when_accepted_and_identity_otherwise() {
        for (accept, gzip) in [
            ("gzip, deflate, br, zstd", true),
            ("br;q=1.0, gzip;q=0.8", true),
            ("*", true),
            ("", false),
            ("identity", false),
            ("br", false),
            ("gzip;q=0, *", false),
        ] {
            for a in texts().map(|(p, _)| p).chain(["/"]) {
                let r = serve(&Method::GET, a, &with(accept)).unwrap();
                assert_eq!(r.headers()[header::VARY], "Accept-Encoding", "{a}");
                let coded = r.headers().get(header::CONTENT_ENCODING).cloned();
                let len: usize = r.headers()[header::CONTENT_LENGTH].to_str().unwrap().parse().unwrap();
                let bytes = body_bytes(r).await;
                assert_eq!(bytes.len(), len, "{a}");
                let plain = body_bytes(get(a)).await;
                if gzip {
                    assert_eq!(
                        coded.as_ref().map(|v| v.to_str().unwrap()),
                        Some("gzip"),
                        "{a} for {accept:?}"
                    );
                    assert_eq!(&bytes[..3], b"\x1f\x8b\x08", "{a}");
                    let inflated =
                        miniz_oxide::inflate::decompress_to_vec(&bytes[10..bytes.len() - 8]).unwrap();
                    assert_eq!(inflated, plain, "{a}: the gzip holds the same bytes");
                    let size = u32::from_le_bytes(bytes[bytes.len() - 4..].try_into().unwrap());
                    assert_eq!(size as usize, plain.len(), "{a}");
                } else {
                    assert!(coded.is_none(), "{a} for {accept:?}");
                    assert_eq!(bytes, plain, "{a}");
                }
            }
        }
        // The two are different representations: each has its own validator.
        let gz = serve(&Method::GET, "/js/app.js", &with("gzip")).unwrap();
        assert_ne!(gz.headers()[header::ETAG], get("/js/app.js").headers()[header::ETAG]);
        let png = serve(&Method::GET, "/icons/icon-192.png", &with("gzip")).unwrap();
        assert!(png.headers().get(header::CONTENT_ENCODING).is_none(), "a PNG is compressed already");
    }

    #[test]
    fn versioned_assets_are_cacheable_for_good_and_the_page_is_revalidated() {
        for a in ASSETS.iter().filter(|a| a.versioned) {
            let r = serve(&Method::GET, &at(a.path), &with("gzip")).unwrap();
            assert_eq!(r.status(), StatusCode::OK, "{}", a.path);
            assert_eq!(
                r.headers()[header::CACHE_CONTROL],
                "public, max-age=31536000, immutable",
                "{}",
                a.path
            );
            assert_eq!(r.headers()[header::CONTENT_TYPE], a.mime, "{}", a.path);
            // Another build's URL gets today's bytes, but never for good.
            let old = get(&format!("/assets/0123456789abcdef0123{}", a.path));
            assert_eq!(old.headers()[header::CACHE_CONTROL], "no-cache", "{}", a.path);
        }
        for path in ["/", "/s/1/x", "/sw.js", "/manifest.webmanifest", "/js/app.js"] {
            assert_eq!(get(path).headers()[header::CACHE_CONTROL], "no-cache", "{path}");
        }
    }

    /// What `module` imports statically, by file name.
    fn imports(module: &Asset) -> Vec<&'static str> {
        let text = std::str::from_utf8(module.body).unwrap();
        text.lines()
            .map(str::trim_start)
            .filter(|l| {
                ["import ", "export ", "} "].iter().any(|p| l.starts_with(p)) && l.contains(" from './")
            })
            .map(|l| l.split(" from './").nth(1).unwrap().split('\'').next().unwrap())
            .collect()
    }

    #[test]
    fn the_page_preloads_every_module_of_the_home_screen_and_names_every_other_with_its_imports() {
        let preloaded: Vec<&str> = page()
            .split("<link rel=\"modulepreload\" href=\"")
            .skip(1)
            .map(|s| &s[..s.find('"').unwrap()])
            .collect();
        let lazy = page().split("<meta name=\"zcode-lazy\" content=\"").nth(1).unwrap();
        let lazy: Vec<(&str, Vec<&str>)> = lazy[..lazy.find('"').unwrap()]
            .split(';')
            .filter_map(|e| e.split_once('='))
            .map(|(n, deps)| (n, deps.split(' ').filter(|d| !d.is_empty()).collect()))
            .collect();
        let is_preloaded = |name: &str| preloaded.contains(&at(&format!("/js/{name}")).as_str());
        let modules: Vec<_> = ASSETS.iter().filter(|a| a.path.starts_with("/js/")).collect();
        assert!(modules.len() > 10, "the modules are all served");
        for m in &modules {
            let name = &m.path[4..];
            let screen = lazy.iter().find(|(n, _)| *n == name);
            assert!(
                is_preloaded(name) != screen.is_some(),
                "{name}: preloaded, or a screen loaded when shown"
            );
            for dep in imports(m) {
                // A preloaded module's imports are preloaded; a screen's arrive with it.
                let with_it = screen.is_some_and(|(_, deps)| deps.contains(&dep));
                assert!(
                    is_preloaded(dep) || with_it,
                    "{name} imports {dep}, which would be fetched only after it"
                );
            }
        }
        assert!(is_preloaded("app.js") && is_preloaded("home.js"));
        let session =
            lazy.iter().find(|(n, _)| *n == "session.js").expect("the session screen loads when shown");
        assert!(session.1.contains(&"transcript.js"), "{session:?}");
        // Every file the page names (a path with an extension; `/settings` is a route).
        let files = page()
            .split(['"', '\''])
            .filter(|s| s.starts_with('/') && s.rsplit('/').next().is_some_and(|n| n.contains('.')));
        for url in files {
            let plain = url.strip_prefix(&format!("/assets/{VERSION}")).unwrap_or(url);
            let a = ASSETS.iter().find(|a| a.path == plain);
            assert!(a.is_some(), "index.html names {url}, which is not served");
            assert!(url != plain || url == "/manifest.webmanifest", "{url} is not versioned");
        }
    }
}
