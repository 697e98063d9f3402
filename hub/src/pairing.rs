//! `zcode-acp token`, and the pairing URL it and `up` print: the running hub's port (or a
//! tunnel's address), the token in the fragment, a QR code of it, and a note when only this
//! machine can open it.

use std::process::ExitCode;
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

/// Whether a credential may be sent in a URL for `host:port`: `Err`, in words naming the other
/// user, when a process of another user holds that port (whoever serves that origin reads the
/// token in it). A port nobody holds passes: only this user's hub can take the address then,
/// as a hub refuses to share its port. What `token`, `pair` and `up` call before printing a URL.
pub fn check_port_owner(host: &str, port: u16) -> Result<(), String> {
    use zcode_hub::daemon::Holder;
    use zcode_shared::peer::PeerError;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot check who holds port {port}: {e}"))?;
    match rt.block_on(zcode_hub::daemon::holder(host, port)) {
        Holder::Ours | Holder::Nobody => Ok(()),
        Holder::NotOurs(PeerError::Foreign { uid, .. }) => Err(format!(
            "port {port} on {host} is held by another user (uid {uid}), not by this user's hub: \
             refusing to print a URL with the token for it (stop that program, or choose another \
             remote.hubPort / ZCODE_ACP_HUB_PORT)"
        )),
        Holder::NotOurs(e) => {
            Err(format!("{host}:{port} is in use and {e}: refusing to print a URL with the token for it"))
        }
    }
}

/// The pairing URL: the hub's (or the tunnel's) address with a one-time pairing `code` in the
/// fragment, so it never reaches a server log (the web client redeems it at `POST /api/pair`).
pub fn pairing_url(host: &str, port: u16, code: &str, public_url: Option<String>) -> String {
    let base = public_url.unwrap_or_else(|| format!("http://{host}:{port}"));
    format!("{}/#pair={code}", base.trim_end_matches('/'))
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

/// Modules of light margin around the code: the QR standard's quiet zone, without which
/// readers miss the finder patterns.
const QUIET: usize = 4;

/// Dark modules on light ones, whatever the terminal's own colours: black on white (the basic
/// pair first, then the 256-colour cube's exact values, which themes leave alone).
const COLOURS: &str = "\x1b[30;47m\x1b[38;5;16;48;5;231m";
const RESET: &str = "\x1b[0m";

/// Whether a QR code on this stream gets explicit colours: when it is a terminal (a file or a
/// pipe gets plain characters) and `NO_COLOR` is not set.
pub fn colour_for(stream: &impl std::io::IsTerminal) -> bool {
    stream.is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// A QR code of `text` for the terminal: two modules per character cell (half blocks drawn in
/// the dark colour), a quiet zone of [`QUIET`] modules, and with `colour`, every cell's
/// colours set, so the code reads the same on dark and light terminals (without them a dark
/// terminal shows it inverted, which many phone readers refuse).
pub fn qr(text: &str, colour: bool) -> String {
    let Ok(code) = qrcode::QrCode::new(text.as_bytes()) else { return String::new() };
    let width = code.width();
    let modules = code.to_colors();
    let dark = |x: usize, y: usize| {
        let inside = (QUIET..QUIET + width).contains(&x) && (QUIET..QUIET + width).contains(&y);
        inside && modules[(y - QUIET) * width + (x - QUIET)] == qrcode::Color::Dark
    };
    let size = width + 2 * QUIET;
    let mut out = String::new();
    for y in (0..size).step_by(2) {
        if colour {
            out += COLOURS;
        }
        for x in 0..size {
            out.push(match (dark(x, y), dark(x, y + 1)) {
                (true, true) => '█',
                (true, false) => '▀',
                (false, true) => '▄',
                (false, false) => ' ',
            });
        }
        if colour {
            out += RESET;
        }
        out.push('\n');
    }
    out
}

/// `zcode-acp token`: prints the machine's token (or rotates it), for local tools and scripts.
/// A phone is paired with `zcode-acp pair` (a one-time code): the token itself never goes in
/// a URL or a QR code, where it would be kept by every browser that scanned it.
pub(crate) fn token(rotate: bool) -> anyhow::Result<ExitCode> {
    let cfg = Config::load()?;
    zcode_shared::logging::init(cfg.debug);
    let (token, source) =
        if rotate { zcode_shared::token::rotate(&cfg)? } else { zcode_shared::token::resolve(&cfg)? };
    println!("{token}");
    if rotate {
        eprintln!(
            "new token written to {source}; the running hub and bridges take it within seconds \
             (the old one stops working, and every connection made with it is closed): give it to \
             every local tool that used the old one"
        );
    } else {
        eprintln!("token from {source}");
    }
    eprintln!(
        "to pair a phone or a browser: `zcode-acp pair` (a one-time code; the token never goes in a URL)"
    );
    Ok(ExitCode::SUCCESS)
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

    /// The modules a rendering shows, row by row (`true`: dark), read back from its characters.
    fn modules_of(rendered: &str) -> Vec<Vec<bool>> {
        let mut rows = Vec::new();
        for line in rendered.lines() {
            let cells: Vec<char> = line.replace(COLOURS, "").replace(RESET, "").chars().collect();
            rows.push(cells.iter().map(|c| matches!(c, '█' | '▀')).collect());
            rows.push(cells.iter().map(|c| matches!(c, '█' | '▄')).collect());
        }
        rows
    }

    #[test]
    fn the_qr_code_is_the_codes_modules_inside_a_light_quiet_zone() {
        let url = "https://x.trycloudflare.com/#token=abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG";
        let code = qrcode::QrCode::new(url.as_bytes()).unwrap();
        let w = code.width();
        let colours = code.to_colors();
        for colour in [false, true] {
            let text = qr(url, colour);
            let m = modules_of(&text);
            assert!(m.len() >= w + 2 * QUIET && m.iter().all(|r| r.len() == w + 2 * QUIET), "{text}");
            for (y, row) in m.iter().enumerate() {
                for (x, &d) in row.iter().enumerate() {
                    let inside = (QUIET..QUIET + w).contains(&x) && (QUIET..QUIET + w).contains(&y);
                    let want = inside && colours[(y - QUIET) * w + (x - QUIET)] == qrcode::Color::Dark;
                    assert_eq!(d, want, "module ({x}, {y}), colour {colour}");
                }
            }
            for line in text.lines() {
                assert_eq!(line.starts_with(COLOURS) && line.ends_with(RESET), colour, "{line:?}");
            }
        }
    }

    #[test]
    fn the_token_goes_in_the_fragment_after_one_slash() {
        assert_eq!(pairing_url("127.0.0.1", 9, "C", None), "http://127.0.0.1:9/#pair=C");
        assert_eq!(pairing_url("h", 9, "C", Some("https://p.example/".into())), "https://p.example/#pair=C");
    }
}
