//! The local time zone's offset from UTC at an instant, read from the TZif file of `TZ`
//! (`Area/City`, `:Area/City` or a path) or `/etc/localtime`: the transitions of the 64-bit
//! block and their types. No zone file (or one we cannot read) is UTC. The standard library
//! has no time zones, and `localtime_r` would need `unsafe`.

use std::path::{Path, PathBuf};

/// A zone: transition instants (epoch seconds) with the offset and abbreviation after each.
#[derive(Debug, Default)]
pub struct Zone {
    transitions: Vec<(i64, usize)>,
    types: Vec<(i64, String)>,
}

impl Zone {
    /// The machine's local zone (`TZ`, else `/etc/localtime`); UTC when unreadable.
    pub fn local() -> Zone {
        let path = match std::env::var("TZ") {
            Ok(tz) if !tz.is_empty() => {
                let tz = tz.trim_start_matches(':');
                match tz.starts_with('/') {
                    true => PathBuf::from(tz),
                    false => Path::new("/usr/share/zoneinfo").join(tz),
                }
            }
            _ => PathBuf::from("/etc/localtime"),
        };
        std::fs::read(path).ok().and_then(|b| Zone::parse(&b)).unwrap_or_default()
    }

    /// Parses a TZif file (version 2 or later: its 64-bit block).
    pub fn parse(b: &[u8]) -> Option<Zone> {
        let counts = |at: usize| -> Option<[usize; 6]> {
            if b.get(at..at + 4)? != b"TZif" {
                return None;
            }
            let mut c = [0usize; 6];
            for (i, n) in c.iter_mut().enumerate() {
                let o = at + 20 + i * 4;
                *n = u32::from_be_bytes(b.get(o..o + 4)?.try_into().ok()?) as usize;
            }
            Some(c)
        };
        let [isut, isstd, leap, time, typ, chars] = counts(0)?;
        if b.get(4).is_none_or(|v| *v < b'2') {
            return None;
        }
        let v1 = time * 5 + typ * 6 + chars + leap * 8 + isstd + isut;
        let at = 44 + v1;
        let [_, _, _, time, typ, chars] = counts(at)?;
        let mut p = at + 44;
        let mut transitions = Vec::with_capacity(time);
        for i in 0..time {
            let t = i64::from_be_bytes(b.get(p + i * 8..p + i * 8 + 8)?.try_into().ok()?);
            transitions.push((t, usize::from(*b.get(p + time * 8 + i)?)));
        }
        p += time * 9;
        let abbrs = b.get(p + typ * 6..p + typ * 6 + chars)?;
        let mut types = Vec::with_capacity(typ);
        for i in 0..typ {
            let o = p + i * 6;
            let off = i32::from_be_bytes(b.get(o..o + 4)?.try_into().ok()?);
            let ai = usize::from(*b.get(o + 5)?);
            let name = abbrs.get(ai..)?.split(|c| *c == 0).next().unwrap_or_default();
            types.push((i64::from(off), String::from_utf8_lossy(name).into_owned()));
        }
        if types.is_empty() || transitions.iter().any(|(_, t)| *t >= types.len()) {
            return None;
        }
        Some(Zone { transitions, types })
    }

    /// The offset (seconds east of UTC) and abbreviation in force at `secs` since the epoch.
    pub fn at(&self, secs: i64) -> (i64, &str) {
        let i = self.transitions.partition_point(|(t, _)| *t <= secs);
        let ty = match i {
            0 => self.types.first(),
            i => self.types.get(self.transitions[i - 1].1),
        };
        ty.map_or((0, "UTC"), |(o, n)| (*o, n.as_str()))
    }
}
