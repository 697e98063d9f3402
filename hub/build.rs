//! Build script: the web client (`web/`, every file of it, found by walking the folder) made
//! ready to serve. It fingerprints the client (`VERSION`, from every file's bytes), writes the
//! page with its assets' versioned URLs (`/assets/<VERSION>/…`, cacheable for good) and a
//! `<link rel="modulepreload">` for every module under `web/js/` (the browser fetches them all
//! at once instead of one import level at a time), fills `sw.js` in (version, each asset's
//! SHA-256, the shell list, the policy), and gzips every text asset once, here, so the hub
//! serves compressed bytes without compressing anything at run time. `$OUT_DIR/web_assets.rs`
//! lists them for `src/web.rs`.

use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

#[path = "src/web/policy.rs"]
mod policy;

/// Where the page's assets are served, cacheable for good (the version is appended).
const PREFIX: &str = "/assets/";

/// One file of the client as it will be served.
struct File {
    /// Its path under `web/`, with a leading `/` (`/js/app.js`).
    path: String,
    mime: &'static str,
    /// The bytes served (the source's, but the page's and the worker's filled in).
    body: Vec<u8>,
}

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let web = manifest.join("web");
    println!("cargo:rerun-if-changed=web");
    println!("cargo:rerun-if-changed=src/web/policy.rs");
    let mut paths = Vec::new();
    walk(&web, &web, &mut paths);
    paths.sort();
    let mut files: Vec<File> = paths
        .iter()
        .map(|p| File {
            path: p.clone(),
            mime: mime_of(p),
            body: std::fs::read(web.join(&p[1..])).unwrap_or_else(|e| panic!("web{p}: {e}")),
        })
        .collect();
    for f in files.iter_mut().filter(|f| f.path.ends_with(".js")) {
        let text = std::str::from_utf8(&f.body).unwrap_or_else(|_| panic!("web{} is not UTF-8", f.path));
        f.body = lean(text).into_bytes();
    }
    let version = fingerprint(&files);
    let at = |p: &str| format!("{PREFIX}{version}{p}");

    let index = files.iter().position(|f| f.path == "/index.html").expect("web/index.html");
    files.swap(0, index);
    let page = page(std::str::from_utf8(&files[0].body).expect("index.html is UTF-8"), &files, &at);
    files[0].body = page.into_bytes();

    fill_worker(&mut files, &version, &at);
    write_assets(&out, &files, &version);
}

/// Fills `sw.js` in: this build's version, the SHA-256 of every asset (the page under "/",
/// every other asset under its versioned URL, and the manifest and icons also under their own:
/// the manifest and notifications name them there), the shell install caches, the policy.
fn fill_worker(files: &mut [File], version: &str, at: &dyn Fn(&str) -> String) {
    let mut hashes = format!("\"/\": \"{}\"", sha256_hex(&files[0].body));
    let mut shell = String::from("'/'");
    for f in files.iter().filter(|f| f.path != "/index.html" && f.path != "/sw.js") {
        write!(hashes, ", \"{}\": \"{}\"", at(&f.path), sha256_hex(&f.body)).expect("a String");
        if !versioned(&f.path) || f.path.starts_with("/icons/") {
            write!(hashes, ", \"{}\": \"{}\"", f.path, sha256_hex(&f.body)).expect("a String");
        }
        if !f.mime.starts_with("image/png") {
            write!(shell, ", '{}'", if versioned(&f.path) { at(&f.path) } else { f.path.clone() })
                .expect("a String");
        }
    }
    shell.push_str(", '/icons/icon-192.png'");
    let sw = files.iter_mut().find(|f| f.path == "/sw.js").expect("web/sw.js");
    let text = std::str::from_utf8(&sw.body).expect("sw.js is UTF-8");
    for hole in
        ["__ZCODE_WEB_VERSION__", "/*__ZCODE_WEB_HASHES__*/", "/*__ZCODE_WEB_SHELL__*/", "__ZCODE_WEB_CSP__"]
    {
        assert!(text.contains(hole), "sw.js lacks its placeholder {hole}");
    }
    sw.body = text
        .replace("__ZCODE_WEB_VERSION__", version)
        .replace("/*__ZCODE_WEB_HASHES__*/", &hashes)
        .replace("/*__ZCODE_WEB_SHELL__*/", &shell)
        .replace("__ZCODE_WEB_CSP__", policy::CSP)
        .into_bytes();
}

/// Writes every asset (and its gzip) under `$OUT_DIR/web/`, and `$OUT_DIR/web_assets.rs`, which
/// lists them for `src/web.rs`.
fn write_assets(out: &Path, files: &[File], version: &str) {
    let dir = out.join("web");
    std::fs::create_dir_all(&dir).expect("OUT_DIR/web");
    let mut list = String::new();
    for (i, f) in files.iter().enumerate() {
        let plain = dir.join(format!("{i}"));
        std::fs::write(&plain, &f.body).expect("write an asset");
        let gzip = if f.mime.starts_with("image/png") {
            "None".to_owned()
        } else {
            let gz = dir.join(format!("{i}.gz"));
            std::fs::write(&gz, gzip(&f.body)).expect("write an asset");
            format!("Some(include_bytes!({:?}))", gz.display().to_string())
        };
        let tag = &sha256_hex(&f.body)[..20];
        writeln!(
            list,
            "    Asset {{ path: {:?}, mime: {:?}, versioned: {}, body: include_bytes!({:?}), gzip: {gzip}, tag: {tag:?} }},",
            f.path,
            f.mime,
            versioned(&f.path),
            plain.display().to_string(),
        )
        .expect("a String");
    }
    let code = format!(
        "/// This build of the web client: a fingerprint of every file of `hub/web/`.\n\
         pub const VERSION: &str = {version:?};\n\n\
         /// Every file of `hub/web/`, as served; `index.html` first.\n\
         const ASSETS: &[Asset] = &[\n{list}];\n"
    );
    std::fs::write(out.join("web_assets.rs"), code).expect("write web_assets.rs");
}

/// Whether `path` is also served under the versioned prefix, cacheable for good: everything but
/// the page, the worker (both must be revalidated to see a new build) and the manifest (its
/// URL is the installed app's identity).
fn versioned(path: &str) -> bool {
    !matches!(path, "/index.html" | "/sw.js" | "/manifest.webmanifest")
}

/// The page: each asset it names at its versioned URL, a modulepreload for every module its
/// entry (`js/app.js`) imports, however deeply, and for every other module (a screen loaded
/// when first shown) the modules it would add, in `<meta name="zcode-lazy">`
/// (`a.js=b.js c.js;…`), which app.js preloads with it.
fn page(source: &str, files: &[File], at: &dyn Fn(&str) -> String) -> String {
    let mut page = source.to_owned();
    for f in files.iter().filter(|f| versioned(&f.path)) {
        page = page.replace(&format!("=\"{}\"", f.path), &format!("=\"{}\"", at(&f.path)));
    }
    let entry = "<script type=\"module\"";
    assert!(page.contains(entry), "index.html has no module script");
    let modules: Vec<(&str, Vec<String>)> = files
        .iter()
        .filter_map(|f| Some((f.path.strip_prefix("/js/")?, f)))
        .filter(|(name, _)| name.ends_with(".js") && !name.contains('/'))
        .map(|(name, f)| (name, static_imports(std::str::from_utf8(&f.body).expect("UTF-8"))))
        .collect();
    let closure = |from: &str| {
        let mut seen = vec![from.to_owned()];
        let mut i = 0;
        while i < seen.len() {
            let deps = modules.iter().find(|(n, _)| *n == seen[i]).map(|(_, d)| d.clone());
            let deps = deps.unwrap_or_else(|| panic!("js/{} is imported but does not exist", seen[i]));
            seen.extend(deps.into_iter().filter(|d| !seen.contains(d)).collect::<Vec<_>>());
            i += 1;
        }
        seen
    };
    let eager = closure("app.js");
    let mut preloads = String::new();
    for name in &eager {
        writeln!(preloads, "<link rel=\"modulepreload\" href=\"{}\">", at(&format!("/js/{name}")))
            .expect("a String");
    }
    let lazy: Vec<String> = modules
        .iter()
        .filter(|(n, _)| !eager.iter().any(|e| e == n))
        .map(|(n, _)| {
            let more: Vec<String> = closure(n).into_iter().skip(1).filter(|d| !eager.contains(d)).collect();
            format!("{n}={}", more.join(" "))
        })
        .collect();
    writeln!(preloads, "<meta name=\"zcode-lazy\" content=\"{}\">", lazy.join(";")).expect("a String");
    page.replacen(entry, &format!("{preloads}{entry}"), 1)
}

/// The modules `source` imports statically (`import … from './x.js'`, `export … from`, the
/// `} from './x.js'` line of a multi-line one), by file name: what the browser must fetch
/// before the module runs.
fn static_imports(source: &str) -> Vec<String> {
    source
        .lines()
        .map(str::trim_start)
        .filter(|l| ["import ", "export ", "} "].iter().any(|p| l.starts_with(p)) && l.contains(" from './"))
        .filter_map(|l| l.split(" from './").nth(1)?.split('\'').next().map(str::to_owned))
        .collect()
}

/// `source` without its whole-line comments and indentation, line for line (an error's line
/// number is still the source's): the client is mostly comments, and fewer bytes travel. A
/// line that leaves a template literal open (a multi-line string, where this would change the
/// text) keeps the file as it is.
fn lean(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut block = false;
    for line in source.lines() {
        let t = line.trim();
        if block || t.starts_with("//") || t.starts_with("/*") {
            block = (block || t.starts_with("/*")) && !t.contains("*/");
        } else if t.matches('`').count() % 2 == 1 {
            return source.to_owned();
        } else {
            out.push_str(t);
        }
        out.push('\n');
    }
    out
}

/// Every file under `dir` (no dot-files), as `/relative/path`.
fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).expect("UTF-8 file names in web/");
        if name.starts_with('.') {
            continue;
        }
        if path.is_dir() {
            walk(root, &path, out);
        } else {
            let rel = path.strip_prefix(root).expect("under web/").to_str().expect("UTF-8");
            out.push(format!("/{}", rel.replace('\\', "/")));
        }
    }
}

/// The content type of a file of the client, by its extension; a new kind must be named here.
fn mime_of(path: &str) -> &'static str {
    match path.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=utf-8",
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("webmanifest") => "application/manifest+json",
        Some("json") => "application/json",
        _ => panic!("web{path}: no content type known for it (add its extension to hub/build.rs)"),
    }
}

/// A hex prefix of the SHA-256 of every file's path and bytes.
fn fingerprint(files: &[File]) -> String {
    let mut h = Sha256::new();
    for f in files {
        h.update(f.path.as_bytes());
        h.update([0]);
        h.update((f.body.len() as u64).to_le_bytes());
        h.update(&f.body);
    }
    h.finalize().iter().take(10).map(|b| format!("{b:02x}")).collect()
}

fn sha256_hex(body: &[u8]) -> String {
    Sha256::digest(body).iter().map(|b| format!("{b:02x}")).collect()
}

/// `body` as a gzip member (RFC 1952): a fixed header, the deflate stream, CRC-32 and size.
fn gzip(body: &[u8]) -> Vec<u8> {
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 2, 255];
    out.extend(miniz_oxide::deflate::compress_to_vec(body, 10));
    out.extend(crc32(body).to_le_bytes());
    out.extend((body.len() as u32).to_le_bytes());
    out
}

/// The CRC-32 (IEEE, reflected) gzip ends with.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}
