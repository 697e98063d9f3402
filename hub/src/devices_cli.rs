//! `zcode-acp pair` (a one-time pairing code, its URL and QR code) and `zcode-acp devices`
//! (list, revoke, rename): asked of this home's running hub with the machine's token, sent
//! only once the hub's socket is known to be this user's.

use crate::pairing::{colour_for, loopback_note, qr, running_hub_port};
use http_body_util::Full;
use hyper::body::Bytes;
use serde_json::{Value, json};
use std::process::ExitCode;
use std::time::Duration;
use zcode_shared::config::Config;

/// What `devices` does.
#[derive(clap::Subcommand)]
pub enum DevicesCommand {
    /// Revoke a device: its credential stops working and its connections close at once
    Revoke {
        /// The device's id (as `zcode-acp devices` lists it)
        id: String,
    },
    /// Rename a device
    Rename {
        /// The device's id
        id: String,
        /// Its new name
        name: String,
    },
}

/// The running hub's port and the machine's token, or why there is no hub to ask.
fn hub(cfg: &Config) -> anyhow::Result<(u16, String)> {
    let Some(port) = running_hub_port(cfg) else {
        anyhow::bail!("no hub is running: start one with `zcode-acp up` (or `zcode-acp hub --background`)");
    };
    let (token, _) = zcode_shared::token::resolve(cfg)?;
    Ok((port, token))
}

/// `method path` with `body` on this user's hub: (status, JSON body or `{error: text}`).
fn call(cfg: &Config, method: &str, path: &str, body: Option<Value>) -> anyhow::Result<(u16, Value)> {
    let (port, token) = hub(cfg)?;
    let host = cfg.remote.hub_host.clone();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let ask = async move {
        let s = match zcode_hub::daemon::connect_verified(&host, port).await {
            Ok(Some(s)) => s,
            Ok(None) => anyhow::bail!("nothing answers on {host}:{port}"),
            Err(e) => anyhow::bail!("refusing to send the token to port {port}: {e}"),
        };
        let mut bearer = hyper::header::HeaderValue::from_str(&format!("Bearer {token}"))?;
        bearer.set_sensitive(true);
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, "hub")
            .header(hyper::header::AUTHORIZATION, bearer)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))?;
        let reply = zcode_shared::http_client::exchange(s, req, 16 << 20).await?;
        let status = reply.status.as_u16();
        let bytes =
            reply.body.map_err(|e| anyhow::anyhow!("the hub's answer could not be read whole ({e:?})"))?;
        let v = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| json!({"error": String::from_utf8_lossy(&bytes).trim().to_owned()}));
        Ok((status, v))
    };
    rt.block_on(async { tokio::time::timeout(Duration::from_secs(10), ask).await })
        .unwrap_or_else(|_| anyhow::bail!("the hub did not answer within 10 s"))
}

/// The error a refused call ends with.
fn refused(status: u16, v: &Value) -> anyhow::Error {
    let why = v["error"].as_str().map_or_else(|| v.to_string(), str::to_owned);
    match status {
        401 => anyhow::anyhow!("the hub refused this machine's token (is ZCODE_ACP_REMOTE_TOKEN the hub's?)"),
        _ => anyhow::anyhow!("the hub answered {status}: {why}"),
    }
}

/// A one-time pairing code (5 minutes) from this user's running hub, for a device named `name`
/// (else the name it gives itself), `watch` or full.
pub(crate) fn new_code(cfg: &Config, watch: bool, name: Option<String>) -> anyhow::Result<String> {
    let scope = if watch { "watch" } else { "full" };
    let (status, v) = call(cfg, "POST", "/api/pairing", Some(json!({"name": name, "scope": scope})))?;
    if status != 200 {
        return Err(refused(status, &v));
    }
    v["code"].as_str().map(str::to_owned).ok_or_else(|| anyhow::anyhow!("the hub answered no code: {v}"))
}

/// `zcode-acp pair`: a one-time pairing code (5 minutes) for a new device, its URL (the code
/// in the fragment, never the machine's token) and a QR code of it.
pub(crate) fn pair(
    watch: bool,
    name: Option<String>,
    public_url: Option<String>,
) -> anyhow::Result<ExitCode> {
    let cfg = Config::load()?;
    zcode_shared::logging::init(cfg.debug);
    let scope = if watch { "watch" } else { "full" };
    let code = new_code(&cfg, watch, name)?;
    let public_url = public_url.or_else(|| crate::tunnel::Advert::read(&cfg.paths).map(|t| t.url));
    let port = hub(&cfg).map(|h| h.0).unwrap_or(0);
    let url = crate::pairing::pairing_url(&cfg.remote.hub_host, port, &code, public_url);
    println!("{url}");
    eprintln!("pairing code {code} ({scope}): works once, for 5 minutes");
    if let Some(note) = loopback_note(&url) {
        eprintln!("{note}");
    }
    eprint!("{}", qr(&url, colour_for(&std::io::stderr())));
    Ok(ExitCode::SUCCESS)
}

/// `zcode-acp devices [revoke ID | rename ID NAME]`.
pub(crate) fn devices(cmd: Option<DevicesCommand>) -> anyhow::Result<ExitCode> {
    let cfg = Config::load()?;
    zcode_shared::logging::init(cfg.debug);
    let (status, v) = match &cmd {
        None => call(&cfg, "GET", "/api/devices", None)?,
        Some(DevicesCommand::Revoke { id }) => {
            call(&cfg, "DELETE", &format!("/api/devices/{}", path_part(id)), None)?
        }
        Some(DevicesCommand::Rename { id, name }) => {
            call(&cfg, "PATCH", &format!("/api/devices/{}", path_part(id)), Some(json!({"name": name})))?
        }
    };
    if status != 200 {
        return Err(refused(status, &v));
    }
    match cmd {
        None => print_list(&v),
        Some(DevicesCommand::Revoke { id }) => {
            println!("revoked {id} ({})", v["name"].as_str().unwrap_or(""))
        }
        Some(DevicesCommand::Rename { id, name }) => println!("renamed {id} to {name}"),
    }
    Ok(ExitCode::SUCCESS)
}

/// An id as one path segment (ids are URL-safe; anything else is percent-encoded).
fn path_part(id: &str) -> String {
    id.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn print_list(v: &Value) {
    let list = v["devices"].as_array().cloned().unwrap_or_default();
    if list.is_empty() {
        println!("no paired devices (`zcode-acp pair` pairs one)");
        return;
    }
    println!("{:<14} {:<6} {:<20} {:<20} NAME", "ID", "SCOPE", "PAIRED", "LAST SEEN");
    let when = |v: &Value| {
        v.as_u64()
            .map_or_else(|| "never".to_owned(), |ms| zcode_shared::time::iso8601(ms)[..19].replace('T', " "))
    };
    for d in list {
        println!(
            "{:<14} {:<6} {:<20} {:<20} {}",
            d["id"].as_str().unwrap_or(""),
            d["scope"].as_str().unwrap_or(""),
            when(&d["createdAt"]),
            when(&d["lastSeenAt"]),
            zcode_shared::text::strip_controls(d["name"].as_str().unwrap_or("")),
        );
    }
}
