//! Wall-clock helpers: epoch milliseconds, their ISO 8601 spelling and back, monthly
//! anniversaries, without a date crate.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// `ms` since the epoch as ISO 8601 UTC with milliseconds: `2026-09-01T10:00:00.000Z`.
pub fn iso8601(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z", rem / 3600, rem % 3600 / 60, rem % 60, ms % 1000)
}

/// An RFC 3339 instant (`2026-10-16T09:38:00.308Z`, `…+02:00`; a date alone is midnight UTC)
/// as epoch milliseconds; `None` when it is not one or lies before 1970.
pub fn parse_rfc3339(s: &str) -> Option<u64> {
    let s = s.trim();
    let digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit()).then(|| t.parse::<i64>().ok()).flatten();
    let (y, m, d) = (digits(s.get(0..4)?)?, digits(s.get(5..7)?)?, digits(s.get(8..10)?)?);
    if s.get(4..5)? != "-" || s.get(7..8)? != "-" || !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    let mut ms = days_from_civil(y, m as u32, d as u32) * 86_400_000;
    let rest = &s[10..];
    if !rest.is_empty() {
        let rest = rest.strip_prefix(['T', 't', ' '])?;
        let (h, mi, se) = (digits(rest.get(0..2)?)?, digits(rest.get(3..5)?)?, digits(rest.get(6..8)?)?);
        if h > 23 || mi > 59 || se > 60 {
            return None;
        }
        ms += (h * 3600 + mi * 60 + se) * 1000;
        let mut tail = &rest[8..];
        if let Some(frac) = tail.strip_prefix('.') {
            let n = frac.bytes().take_while(u8::is_ascii_digit).count();
            let f: String = frac[..n].chars().chain("000".chars()).take(3).collect();
            ms += f.parse::<i64>().ok()?;
            tail = &frac[n..];
        }
        ms -= match tail {
            "Z" | "z" | "" => 0,
            _ => {
                let sign = match tail.get(0..1)? {
                    "+" => 1,
                    "-" => -1,
                    _ => return None,
                };
                // `+hh:mm` and nothing after it.
                if tail.len() != 6 || tail.get(3..4)? != ":" {
                    return None;
                }
                let (oh, om) = (digits(tail.get(1..3)?)?, digits(tail.get(4..6)?)?);
                if oh > 23 || om > 59 {
                    return None;
                }
                sign * (oh * 3600 + om * 60) * 1000
            }
        };
    }
    u64::try_from(ms).ok()
}

/// (year, month, day) to days since 1970-01-01 (the inverse of `civil_from_days`).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The first instant after `now` (epoch ms) that falls on `anchor`'s day of the month and time
/// of day (a day the month lacks becomes its last day): a monthly billing anniversary.
pub fn next_monthly(anchor: u64, now: u64) -> u64 {
    let day_ms = 86_400_000;
    let (_, _, ad) = civil_from_days((anchor / day_ms) as i64);
    let tod = anchor % day_ms;
    let (mut y, mut m, _) = civil_from_days((now / day_ms) as i64);
    loop {
        let last = days_in_month(y, m);
        let at = (days_from_civil(y, m, ad.min(last)) as u64) * day_ms + tod;
        if at > now && at > anchor {
            return at;
        }
        (y, m) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    }
}

fn days_in_month(y: i64, m: u32) -> u32 {
    let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    (days_from_civil(ny, nm, 1) - days_from_civil(y, m, 1)) as u32
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (Howard Hinnant's method).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(1_723_800_000_000), "2024-08-16T09:20:00.000Z");
        assert_eq!(iso8601(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(iso8601(4_102_444_799_999), "2099-12-31T23:59:59.999Z");
    }

    #[test]
    fn parses_rfc3339_back() {
        for ms in [0, 1_723_800_000_000, 951_782_400_123, 4_102_444_799_999] {
            assert_eq!(parse_rfc3339(&iso8601(ms)), Some(ms));
        }
        assert_eq!(parse_rfc3339("2024-08-16T11:20:00+02:00"), Some(1_723_800_000_000));
        assert_eq!(parse_rfc3339("2024-08-16T09:20:00.5Z"), Some(1_723_800_000_500));
        assert_eq!(parse_rfc3339("2024-08-16"), Some(1_723_766_400_000));
        for bad in [
            "",
            "soon",
            "2024-13-01",
            "2024-08-16T25:00:00Z",
            "2024-08-16X",
            "2024-08-16T11:20:00+02:00garbage",
            "2024-08-16T11:20:00+02x00",
            "2024-08-16T11:20:00+24:00",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    proptest::proptest! {
        /// Any instant, written in UTC or with any offset, parses back to itself.
        #[test]
        fn rfc3339_round_trips_with_any_offset(ms in 0u64..8_000_000_000_000, off in -1439i64..=1439) {
            proptest::prop_assert_eq!(parse_rfc3339(&iso8601(ms)), Some(ms));
            let local = ms as i64 + off * 60_000;
            proptest::prop_assume!(local >= 0);
            let z = iso8601(local as u64);
            let sign = if off < 0 { '-' } else { '+' };
            let with = format!("{}{sign}{:02}:{:02}", &z[..z.len() - 1], off.abs() / 60, off.abs() % 60);
            proptest::prop_assert_eq!(parse_rfc3339(&with), Some(ms), "{}", with);
        }
    }

    #[test]
    fn monthly_anniversaries_clamp_to_short_months() {
        let jan31 = parse_rfc3339("2026-01-31T10:00:00Z").unwrap();
        let feb10 = parse_rfc3339("2026-02-10T00:00:00Z").unwrap();
        assert_eq!(iso8601(next_monthly(jan31, feb10)), "2026-02-28T10:00:00.000Z");
        let mar1 = parse_rfc3339("2026-03-01T00:00:00Z").unwrap();
        assert_eq!(iso8601(next_monthly(jan31, mar1)), "2026-03-31T10:00:00.000Z");
    }
}
