//! `zcode-acp quota [glm|go|ollama|NAME] [-w] [-i SECS] [--json]`: the plan quota card. One
//! section per configured provider (unconfigured ones are left out), one line per window: the
//! label (every bar of the card in one column), a 20-cell bar, the percentage used, the reset
//! time in local time; a failure is one line that says what to do. Colours (green → yellow →
//! red by use) only on a terminal (and not with `NO_COLOR`). Exit status 1 when no provider
//! answered; with nothing configured, `-w` says so once and exits 1 too.
//!
//! The providers run in this process (`zcode_shared::quota`, the same code as the hub's).

use jiff::tz::TimeZone;
use serde_json::{Map, Value};
use std::fmt::Write as _;
use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;
use zcode_shared::config::Config;
use zcode_shared::quota::{Kind, Quota};

/// The shortest refresh period of `-w`.
pub const MIN_INTERVAL: u64 = 10;
/// The default refresh period of `-w`.
pub const DEFAULT_INTERVAL: u64 = 30;
/// Cells in a bar.
const CELLS: usize = 20;
/// The label column's least width (`Month`, `Week`, `5h` and the bars after them line up).
const LABEL_MIN: usize = 6;
/// The label column's most width: a longer label is cut with `…`.
const LABEL_MAX: usize = 28;

/// What the command line asked for.
pub struct Options {
    /// One section (`glm`, `go`/`opencode`, `ollama` or a command's name), or all.
    pub provider: Option<String>,
    /// Refresh until interrupted.
    pub watch: bool,
    /// Seconds between refreshes (at least [`MIN_INTERVAL`], see [`parse_interval`]).
    pub interval: Option<u64>,
    /// Print the payload instead of the card.
    pub json: bool,
}

/// `zcode-acp quota`: loads the configuration (logging only when it says `debug`) and runs.
pub fn command(opts: Options) -> anyhow::Result<ExitCode> {
    let cfg = Config::load()?;
    if cfg.debug {
        zcode_shared::logging::init(true);
    }
    run(&cfg, opts)
}

/// Runs the command.
pub fn run(cfg: &Config, opts: Options) -> anyhow::Result<ExitCode> {
    // The suite's watch test refreshes after this many milliseconds instead of waiting out
    // the 10 s minimum (what `-i` accepts is unchanged); the vendor's answers are kept as long.
    let period =
        zcode_shared::env::test_knob(&zcode_shared::env::ProcessEnv, "ZCODE_ACP_TEST_QUOTA_PERIOD_MS")
            .and_then(|ms| ms.parse().ok())
            .map(Duration::from_millis);
    let quota = match period {
        Some(p) => Quota::with_ttls(&cfg.quota, p, p),
        None => Quota::new(&cfg.quota),
    };
    let only = match opts.provider.as_deref() {
        None => Vec::new(),
        Some("go") => vec!["opencode".to_owned()],
        Some(name) if quota.names().iter().any(|n| n == name) => vec![name.to_owned()],
        Some(name) => {
            let names = quota.names().join(", ");
            eprintln!("zcode-acp quota: no provider named {name:?} (known: {names}; `go` is opencode)");
            return Ok(ExitCode::from(2));
        }
    };
    let watch = opts.watch || opts.interval.is_some();
    let interval = period.unwrap_or_else(|| interval(opts.interval));
    let tty = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let color = tty && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    loop {
        let payload = rt.block_on(quota.sections(&only)).map_err(|e| anyhow::anyhow!("{e}"))?;
        let zone = TimeZone::system();
        let configured = any_configured(&payload);
        let (text, answered) = match opts.json {
            true => (format!("{payload:#}\n"), any_success(&payload)),
            false => render(&payload, !only.is_empty(), color, zcode_shared::time::now_ms(), &zone),
        };
        let mut out = std::io::stdout().lock();
        if watch && tty {
            let _ = out.write_all(b"\x1b[H\x1b[2J");
        }
        out.write_all(text.as_bytes())?;
        out.flush()?;
        drop(out);
        // Nothing configured will not change by asking again: said once, in watch mode too.
        if !watch || !configured {
            return Ok(if answered { ExitCode::SUCCESS } else { ExitCode::FAILURE });
        }
        std::thread::sleep(interval);
        if !tty {
            println!();
        }
    }
}

/// The refresh period of `-w`: `-i SECS`, at least [`MIN_INTERVAL`], else [`DEFAULT_INTERVAL`].
pub fn interval(asked: Option<u64>) -> Duration {
    Duration::from_secs(asked.unwrap_or(DEFAULT_INTERVAL).max(MIN_INTERVAL))
}

/// `-i SECS` as the command line gives it: whole seconds, at least [`MIN_INTERVAL`] (each
/// refresh queries every vendor; faster would only earn rate limits).
pub fn parse_interval(s: &str) -> Result<u64, String> {
    let secs = s.parse::<u64>().map_err(|_| format!("expected whole seconds, at least {MIN_INTERVAL}"))?;
    if secs < MIN_INTERVAL {
        return Err(format!(
            "the refresh period is at least {MIN_INTERVAL} seconds (each refresh asks every vendor)"
        ));
    }
    Ok(secs)
}

fn any_success(payload: &Value) -> bool {
    payload.as_object().is_some_and(|o| o.values().any(|s| s["kind"] == "success"))
}

/// Whether any section is of a configured provider (whatever it answered).
fn any_configured(payload: &Value) -> bool {
    payload.as_object().is_some_and(|o| o.values().any(|s| s["kind"] != "not_configured"))
}

/// The label column's width for `sections`: the widest window label, within bounds.
fn label_width<'a>(sections: impl Iterator<Item = &'a Value>) -> usize {
    let rows = sections.flat_map(|s| {
        let rows = s["items"].as_array().or(s["windows"].as_array());
        rows.map(Vec::as_slice).unwrap_or(&[])
    });
    rows.map(|r| label(r).chars().count()).max().unwrap_or(0).clamp(LABEL_MIN, LABEL_MAX)
}

/// A window's label, inert, cut to [`LABEL_MAX`] characters.
fn label(row: &Value) -> String {
    let l = zcode_shared::text::strip_controls(row["label"].as_str().or(row["key"].as_str()).unwrap_or("?"));
    match l.chars().count() > LABEL_MAX {
        true => l.chars().take(LABEL_MAX - 1).chain(['…']).collect(),
        false => l,
    }
}

/// The card for `payload` at `now` (epoch ms) in `zone`, and whether any provider answered.
/// `asked`: a single provider was asked for by name (shown even when not configured).
pub fn render(payload: &Value, asked: bool, color: bool, now: u64, zone: &TimeZone) -> (String, bool) {
    let mut out = String::new();
    let empty = Map::new();
    let sections = payload.as_object().unwrap_or(&empty);
    // The built-ins in the contract's order, then the commands (the map itself is sorted).
    let built_in = zcode_shared::quota::BUILT_IN.iter().filter_map(|n| sections.get_key_value(*n));
    let others = sections.iter().filter(|(n, _)| !zcode_shared::quota::BUILT_IN.contains(&n.as_str()));
    let width = label_width(sections.values().filter(|s| s["kind"] == "success"));
    for (name, s) in built_in.chain(others) {
        let kind = s["kind"].as_str().and_then(Kind::parse).unwrap_or(Kind::Unavailable);
        if kind == Kind::NotConfigured && !asked {
            continue;
        }
        if !out.is_empty() {
            out.push('\n');
        }
        let title = title(name, s);
        let _ = writeln!(out, "{}", if color { format!("\x1b[1m{title}\x1b[0m") } else { title });
        match kind {
            Kind::Success => {
                let rows = s["items"].as_array().or(s["windows"].as_array()).cloned().unwrap_or_default();
                for row in &rows {
                    out.push_str(&line(row, width, color, now, zone));
                }
                if let Some(u) = s.get("usage") {
                    out.push_str(&spend(u));
                }
                if rows.is_empty() && s.get("usage").is_none() {
                    out.push_str("  no usage windows reported\n");
                }
            }
            other => match s["error"].as_str() {
                // A command's output that could not be used says why.
                Some(why) => {
                    let _ = writeln!(out, "  unavailable: {}", zcode_shared::text::strip_controls(why));
                }
                None => {
                    let _ = writeln!(out, "  {}", failure(name, other));
                }
            },
        }
    }
    if out.is_empty() {
        out.push_str(
            "no quota provider is configured: set quota.glm.apiKey, quota.opencode, quota.ollama.apiKey \
             or quota.commands in config.json (or ZCODE_ACP_GLM_API_KEY, OPENCODE_GO_WORKSPACE_ID + \
             OPENCODE_GO_AUTH_COOKIE, OLLAMA_API_KEY)\n",
        );
    }
    (out, any_success(payload))
}

fn title(name: &str, s: &Value) -> String {
    let base = match name {
        "glm" => "GLM Coding Plan",
        "opencode" => "OpenCode Go",
        "ollama" => "Ollama Cloud",
        other => other,
    };
    let plan = s["level"].as_str().or(s["usage"]["plan"].as_str()).map(zcode_shared::text::strip_controls);
    match plan {
        Some(p) if !p.is_empty() => format!("{} ({p})", zcode_shared::text::strip_controls(base)),
        _ => zcode_shared::text::strip_controls(base),
    }
}

/// What a failure means, and what to do about it.
fn failure(name: &str, kind: Kind) -> String {
    match kind {
        Kind::AuthError => {
            let hint = match name {
                "glm" => "quota.glm.apiKey or ZCODE_ACP_GLM_API_KEY",
                "opencode" => "OPENCODE_GO_WORKSPACE_ID and OPENCODE_GO_AUTH_COOKIE (or quota.opencode)",
                "ollama" => "OLLAMA_API_KEY or quota.ollama.apiKey",
                _ => "the credentials its command uses",
            };
            format!("credentials refused or expired: check {hint}")
        }
        Kind::RateLimited => "rate limited by the vendor: try again in a minute".into(),
        Kind::NotConfigured => match name {
            "glm" => "not configured: set quota.glm.apiKey or ZCODE_ACP_GLM_API_KEY".into(),
            "opencode" => "not configured: set OPENCODE_GO_WORKSPACE_ID and OPENCODE_GO_AUTH_COOKIE".into(),
            "ollama" => "not configured: set OLLAMA_API_KEY or quota.ollama.apiKey".into(),
            _ => "not configured".into(),
        },
        Kind::Success | Kind::Unavailable => {
            "unavailable: no usable answer from the vendor in time; try again later".into()
        }
    }
}

/// One window: `  5h     ███████░░░░░░░░░░░░░  35%  resets 14:00 CEST`, its label padded to
/// `width` characters.
fn line(row: &Value, width: usize, color: bool, now: u64, zone: &TimeZone) -> String {
    let label = label(row);
    let pct = row["usedPercent"].as_f64().or(row["usagePercent"].as_f64()).unwrap_or(0.0).clamp(0.0, 100.0);
    let filled = ((pct / 100.0 * CELLS as f64).round() as usize).min(CELLS);
    let bar = "█".repeat(filled);
    let rest = "░".repeat(CELLS - filled);
    let shown = if pct.fract() == 0.0 { format!("{pct:.0}%") } else { format!("{pct:.1}%") };
    let (bar, shown) = match color {
        true => {
            let (r, g, b) = shade(pct);
            (
                format!("\x1b[38;2;{r};{g};{b}m{bar}\x1b[2m{rest}\x1b[0m"),
                format!("\x1b[38;2;{r};{g};{b}m{shown:>5}\x1b[0m"),
            )
        }
        false => (format!("{bar}{rest}"), format!("{shown:>5}")),
    };
    let mut s = format!("  {label:<width$} {bar} {shown}");
    if let (Some(u), Some(t)) = (row["usedCount"].as_u64(), row["totalCount"].as_u64()) {
        let _ = write!(s, "  {u}/{t}");
    }
    if let Some(at) = row["nextResetTime"].as_u64().or(row["resetsAt"].as_u64()) {
        let _ = write!(s, "  resets {}", local(at, now, zone));
    }
    s.push('\n');
    s
}

/// Ollama's spend line.
fn spend(u: &Value) -> String {
    let Some(spent) = u["usageUsd"].as_f64() else { return String::new() };
    let of = u["creditUsd"].as_f64().map_or_else(String::new, |c| format!(" of ${c:.0}"));
    let reqs = u["requestCount"].as_u64().unwrap_or(0);
    format!("  spent ${spent:.2}{of} in 30 days, {reqs} requests\n")
}

/// Green (0 %) through yellow (50 %) to red (100 %).
fn shade(pct: f64) -> (u8, u8, u8) {
    let (green, yellow, red) = ((63.0, 185.0, 80.0), (210.0, 153.0, 34.0), (248.0, 81.0, 73.0));
    let mix = |a: (f64, f64, f64), b: (f64, f64, f64), t: f64| {
        ((a.0 + (b.0 - a.0) * t) as u8, (a.1 + (b.1 - a.1) * t) as u8, (a.2 + (b.2 - a.2) * t) as u8)
    };
    if pct <= 50.0 { mix(green, yellow, pct / 50.0) } else { mix(yellow, red, (pct - 50.0) / 50.0) }
}

/// `14:00 CEST` today, else `Fri 18 Aug 14:00 CEST`, in `zone` (jiff: the TZif file's
/// transitions and, past them, its footer's rules).
pub fn local(at_ms: u64, now_ms: u64, zone: &TimeZone) -> String {
    let zoned = |ms: u64| {
        let t = jiff::Timestamp::from_millisecond(i64::try_from(ms).unwrap_or(i64::MAX));
        t.unwrap_or(jiff::Timestamp::MAX).to_zoned(zone.clone())
    };
    let (at, now) = (zoned(at_ms), zoned(now_ms));
    let format = if at.date() == now.date() { "%H:%M %Z" } else { "%a %-d %b %H:%M %Z" };
    at.strftime(format).to_string()
}

#[cfg(test)]
mod tests;
