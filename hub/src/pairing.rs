//! The pairing URL `up` and `token` print: the running hub's port (or a tunnel's address), the
//! token in the fragment, a QR code of it, and a note when only this machine can open it.

use zcode_shared::config::Config;

/// The port of this home's running hub: the port file's (a hub on an OS-picked port), else the
/// configured one, whichever answers as a hub; `None` when none does.
pub fn running_hub_port(cfg: &Config) -> Option<u16> {
    let from_file = cfg.paths.read_hub_port().filter(|p| *p != 0);
    let configured = Some(cfg.remote.hub_port).filter(|p| *p != 0);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
    [from_file, configured]
        .into_iter()
        .flatten()
        .find(|p| rt.block_on(zcode_hub::daemon::hub_answers(&cfg.remote.hub_host, *p)))
}

/// The pairing URL: the hub's (or the tunnel's) address with the token in the fragment, so it
/// never reaches a server log.
pub fn pairing_url(host: &str, port: u16, token: &str, public_url: Option<String>) -> String {
    let base = public_url.unwrap_or_else(|| format!("http://{host}:{port}"));
    format!("{}/#token={token}", base.trim_end_matches('/'))
}

/// What to say under a pairing URL only this machine can open (a phone cannot reach loopback).
pub fn loopback_note(url: &str) -> Option<String> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '#', '?']).next().unwrap_or("");
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    let local = host.eq_ignore_ascii_case("localhost")
        || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback() || ip.is_unspecified());
    local.then(|| {
        "  note:   this URL opens only on this machine; for a phone, start a tunnel: \
         `zcode-acp up --tunnel cloudflare` (or `--tunnel tailscale`), or run your own and pass \
         `--public-url https://…` (see the README)"
            .to_owned()
    })
}

/// A QR code of `text` for the terminal (two modules per character cell).
pub fn qr(text: &str) -> String {
    match qrcode::QrCode::new(text.as_bytes()) {
        Ok(code) => code.render::<qrcode::render::unicode::Dense1x2>().quiet_zone(true).build() + "\n",
        Err(_) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_urls_a_phone_cannot_reach_get_the_note() {
        for url in [
            "http://127.0.0.1:8377/#token=t",
            "http://localhost:8377/#token=t",
            "http://0.0.0.0:8377/#token=t",
            "http://[::1]:8377/#token=t",
            "http://127.0.0.2/#token=t",
        ] {
            assert!(loopback_note(url).is_some(), "{url}");
        }
        for url in [
            "https://x.trycloudflare.com/#token=t",
            "http://192.168.1.5:8377/#token=t",
            "https://[2001:db8::1]/",
        ] {
            assert!(loopback_note(url).is_none(), "{url}");
        }
    }

    #[test]
    fn the_token_goes_in_the_fragment_after_one_slash() {
        assert_eq!(pairing_url("127.0.0.1", 9, "T", None), "http://127.0.0.1:9/#token=T");
        assert_eq!(pairing_url("h", 9, "T", Some("https://p.example/".into())), "https://p.example/#token=T");
    }
}
