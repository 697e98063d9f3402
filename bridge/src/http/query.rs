//! Query strings: percent-decoding and typed parameters, each failure a message for a 400.

use std::collections::HashMap;

/// The decoded parameters of a query string (last value wins).
#[derive(Debug, Default)]
pub struct Query {
    params: HashMap<String, Vec<u8>>,
}

impl Query {
    /// Parses `a=1&b=x%20y`. Values stay bytes: a NUL or invalid UTF-8 is judged by the caller.
    pub fn parse(raw: Option<&str>) -> Result<Query, String> {
        let mut params = HashMap::new();
        for pair in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let key =
                String::from_utf8(decode(k)?).map_err(|_| "a parameter name is not UTF-8".to_owned())?;
            params.insert(key, decode(v)?);
        }
        Ok(Query { params })
    }

    /// The raw bytes of a parameter.
    pub fn bytes(&self, key: &str) -> Option<&[u8]> {
        self.params.get(key).map(Vec::as_slice)
    }

    /// A UTF-8 parameter.
    pub fn str(&self, key: &str) -> Result<Option<&str>, String> {
        match self.bytes(key) {
            None => Ok(None),
            Some(b) => std::str::from_utf8(b).map(Some).map_err(|_| format!("`{key}` is not UTF-8")),
        }
    }

    /// A non-negative integer parameter.
    pub fn u64(&self, key: &str) -> Result<Option<u64>, String> {
        match self.str(key)? {
            None => Ok(None),
            Some(s) => s
                .parse::<u64>()
                .map(Some)
                .map_err(|_| format!("`{key}` must be a non-negative integer, got {s:?}")),
        }
    }

    /// Whether a flag is set (`1` or `true`).
    pub fn flag(&self, key: &str) -> bool {
        matches!(self.bytes(key), Some(b"1" | b"true"))
    }
}

/// Percent-decodes one component (`+` is a space, as forms send it).
fn decode(s: &str) -> Result<Vec<u8>, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                // Two hex digits, checked as such: `from_str_radix` alone takes `%+f` as 0x0f.
                let hex = b.get(i + 1..i + 3).filter(|h| h.iter().all(u8::is_ascii_hexdigit));
                let hex = hex.and_then(|h| std::str::from_utf8(h).ok());
                let byte =
                    hex.and_then(|h| u8::from_str_radix(h, 16).ok()).ok_or("a bad %-escape in the query")?;
                out.push(byte);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_and_types() {
        let q = Query::parse(Some("path=%2e%2e/x&line=5&dl=1&n=a+b&z=a%00b")).unwrap();
        assert_eq!(q.str("path").unwrap(), Some("../x"));
        assert_eq!(q.u64("line").unwrap(), Some(5));
        assert!(q.flag("dl"));
        assert_eq!(q.str("n").unwrap(), Some("a b"));
        assert_eq!(q.bytes("z"), Some(&b"a\0b"[..]));
        assert!(Query::parse(Some("x=%zz")).is_err());
        assert!(Query::parse(Some("x=%+f")).is_err(), "a sign is not a hex digit");
        assert!(Query::parse(Some("line=-1")).unwrap().u64("line").is_err());
    }
}
