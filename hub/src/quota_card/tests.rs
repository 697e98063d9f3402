//! The card's text, with and without colour, and local times from a real zone file.

use super::*;
use serde_json::json;

fn berlin() -> TimeZone {
    let tzif = std::fs::read("/usr/share/zoneinfo/Europe/Berlin").expect("tzdata");
    TimeZone::tzif("Europe/Berlin", &tzif).expect("a TZif file")
}

#[test]
fn local_times_follow_the_zone_and_its_summer_time() {
    let z = berlin();
    let now = zcode_shared::time::parse_rfc3339("2024-08-16T09:00:00Z").unwrap_or_default();
    let at = zcode_shared::time::parse_rfc3339("2024-08-16T12:00:00Z").unwrap_or_default();
    assert_eq!(local(at, now, &z), "14:00 CEST");
    let later = zcode_shared::time::parse_rfc3339("2024-12-20T12:30:00Z").unwrap_or_default();
    assert_eq!(local(later, now, &z), "Fri 20 Dec 13:30 CET");
    assert_eq!(local(at, now, &TimeZone::UTC), "12:00 UTC");
    assert!(TimeZone::tzif("x", b"not a zone file").is_err());
}

fn payload() -> Value {
    json!({
        "glm": {"kind": "success", "level": "pro", "items": [
            {"key": "token_5h", "label": "5h", "usedPercent": 35, "nextResetTime": 1_723_812_000_000u64},
            {"key": "mcp", "label": "MCP", "usedPercent": 10, "usedCount": 3, "totalCount": 30}]},
        "opencode": {"kind": "not_configured"},
        "ollama": {"kind": "success", "windows": [{"key": "monthly", "label": "Month", "usagePercent": 2.6}],
            "usage": {"plan": "pro", "usageUsd": 1.5747, "creditUsd": 60, "requestCount": 246, "window": "30d"}},
        "minimax": {"kind": "rate_limited"}
    })
}

#[test]
fn the_card_without_colour() {
    let now = 1_723_800_000_000;
    let (text, ok) = render(&payload(), false, false, now, &TimeZone::UTC);
    assert!(ok);
    assert_eq!(
        text,
        "GLM Coding Plan (pro)\n  5h     ███████░░░░░░░░░░░░░   35%  resets 12:40 UTC\n  MCP    ██░░░░░░░░░░░░░░░░░░   10%  3/30\n\n\
         Ollama Cloud (pro)\n  Month  █░░░░░░░░░░░░░░░░░░░  2.6%\n  spent $1.57 of $60 in 30 days, 246 requests\n\n\
         minimax\n  rate limited by the vendor: try again in a minute\n"
    );
    assert!(!text.contains('\x1b'));
}

#[test]
fn the_card_with_colour_goes_green_to_red() {
    let (text, _) = render(&payload(), false, true, 0, &TimeZone::UTC);
    assert!(text.contains("\x1b[1mGLM Coding Plan (pro)\x1b[0m"), "{text:?}");
    assert_eq!(shade(0.0), (63, 185, 80));
    assert_eq!(shade(50.0), (210, 153, 34));
    assert_eq!(shade(100.0), (248, 81, 73));
    let (r, g, b) = shade(35.0);
    assert!(text.contains(&format!("\x1b[38;2;{r};{g};{b}m███████")), "{text:?}");
}

#[test]
fn failures_and_nothing_configured() {
    let p = json!({"glm": {"kind": "auth_error"}, "opencode": {"kind": "unavailable"}, "ollama": {"kind": "not_configured"}});
    let (text, ok) = render(&p, false, false, 0, &TimeZone::UTC);
    assert!(!ok);
    assert_eq!(
        text,
        "GLM Coding Plan\n  credentials refused or expired: check quota.glm.apiKey or ZCODE_ACP_GLM_API_KEY\n\n\
         OpenCode Go\n  unavailable: no usable answer from the vendor in time; try again later\n"
    );
    let none = json!({"glm": {"kind": "not_configured"}});
    let (text, ok) = render(&none, false, false, 0, &TimeZone::UTC);
    assert!(!ok && text.starts_with("no quota provider is configured"));
    let (text, _) = render(&none, true, false, 0, &TimeZone::UTC);
    assert!(text.contains("not configured: set quota.glm.apiKey"), "{text}");
}

#[test]
fn watch_refreshes_every_30_s_by_default_and_never_faster_than_10() {
    assert_eq!(interval(None), Duration::from_secs(30));
    assert_eq!(interval(Some(3)), Duration::from_secs(10));
    assert_eq!(interval(Some(45)), Duration::from_secs(45));
}

#[test]
fn an_interval_under_the_minimum_is_refused_with_the_minimum() {
    assert_eq!(parse_interval("10"), Ok(10));
    assert_eq!(parse_interval("45"), Ok(45));
    let e = parse_interval("5").unwrap_err();
    assert!(e.contains("at least 10 seconds"), "{e}");
    assert!(parse_interval("soon").unwrap_err().contains("at least 10"));
}

/// The first bar's column on each window line of `text`.
fn bar_columns(text: &str) -> Vec<usize> {
    text.lines().filter_map(|l| l.chars().position(|c| c == '█' || c == '░')).collect()
}

#[test]
fn labels_of_every_section_line_up_their_bars() {
    let p = json!({
        "glm": {"kind": "success", "items": [{"label": "5h", "usedPercent": 1}, {"label": "Week", "usedPercent": 2}]},
        "ollama": {"kind": "success", "windows": [{"label": "Month", "usagePercent": 3}]},
        "copilot": {"kind": "success", "windows": [
            {"label": "Premium requests", "usagePercent": 4},
            {"label": "A label far longer than any column should be", "usagePercent": 5}]}
    });
    let (text, _) = render(&p, false, false, 0, &TimeZone::UTC);
    let cols = bar_columns(&text);
    assert_eq!(cols.len(), 5, "{text}");
    assert!(cols.iter().all(|c| *c == cols[0]), "bars in one column:\n{text}");
    assert!(text.contains("  Premium requests             █"), "{text}");
    assert!(text.contains("  A label far longer than any… █"), "{text}");
}

#[test]
fn a_command_section_that_could_not_be_used_says_why() {
    let p = json!({"mine": {"kind": "unavailable", "error": "window \"w\": `resetsAt` must be epoch milliseconds"}});
    let (text, ok) = render(&p, false, false, 0, &TimeZone::UTC);
    assert!(!ok);
    assert_eq!(text, "mine\n  unavailable: window \"w\": `resetsAt` must be epoch milliseconds\n");
}

/// A "slim" zone file (`zic -b slim`, as distributions increasingly ship): one transition, and
/// the rules from then on only in the TZif footer (`CET-1CEST,M3.5.0,M10.5.0/3`). A reader of the
/// transitions alone keeps summer time all year.
#[test]
fn a_slim_zone_files_footer_rules_give_winter_and_summer_time() {
    let z = TimeZone::tzif("Test/Berlin", include_bytes!("slim-berlin.tzif")).expect("a slim TZif file");
    let now = zcode_shared::time::parse_rfc3339("2026-01-15T09:00:00Z").unwrap_or_default();
    let winter = zcode_shared::time::parse_rfc3339("2026-01-15T12:00:00Z").unwrap_or_default();
    assert_eq!(local(winter, now, &z), "13:00 CET");
    let summer = zcode_shared::time::parse_rfc3339("2026-07-15T12:00:00Z").unwrap_or_default();
    assert_eq!(local(summer, now, &z), "Wed 15 Jul 14:00 CEST");
}
