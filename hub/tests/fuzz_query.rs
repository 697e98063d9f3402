//! Property tests of the hub's query-parameter handling (`zcode_hub::http`), through its
//! public functions: arbitrary queries never panic; an encoded parameter decodes to what was
//! encoded (the first of repeated names); the query forwarded to a bridge and the URI that
//! is logged never carry a `token` value. 256 cases per property unless `PROPTEST_CASES` says
//! otherwise (`scripts/fuzz` runs many more).

use hyper::Uri;
use proptest::prelude::*;
use zcode_hub::http::{query_param, query_without_token, redacted};

/// `cases` per property, unless `PROPTEST_CASES` is set.
fn config(cases: u32) -> ProptestConfig {
    let mut c = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = cases;
    }
    c
}

/// Percent-encodes everything but unreserved bytes.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|c| {
            if c.is_ascii_alphanumeric() || b"-._~".contains(&c) {
                (c as char).to_string()
            } else {
                format!("%{c:02X}")
            }
        })
        .collect()
}

/// Query text made of the pieces that matter: separators, escapes, token spellings.
fn query_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        3 => proptest::sample::select(vec![
            "&", "=", "%", "%2", "%zz", "%00", "%ff", "%C3%A9", "+", "token", "TOKEN", "Token",
            "instance", "42", "x", "sessionId", ";", "?", "/", "#",
        ]).prop_map(str::to_owned),
        1 => "[ -~]{0,8}",
    ];
    proptest::collection::vec(piece, 0..20).prop_map(|p| p.concat())
}

proptest! {
    #![proptest_config(config(256))]

    /// Whatever the query, the three functions return without panicking, and what they
    /// return is built from the query (no growth beyond the redaction marks).
    #[test]
    fn any_query_is_handled(q in prop_oneof![query_text(), any::<String>().prop_map(|s| encode(&s))]) {
        let Ok(uri) = format!("/acp?{q}").parse::<Uri>() else { return Ok(()) };
        for name in ["token", "instance", "x", ""] {
            if let Some(v) = query_param(&uri, name) {
                prop_assert!(v.len() <= q.len() * 3);
            }
        }
        if let Some(fwd) = query_without_token(&uri) {
            prop_assert!(fwd.len() <= q.len());
        }
        let logged = redacted(&uri);
        prop_assert!(logged.starts_with("/acp"));
        prop_assert!(logged.len() <= 5 + q.len() + 8 * (q.matches(['&', ';']).count() + 1));
    }

    /// Encoded parameters decode to what was encoded; the first of a repeated name wins.
    #[test]
    fn encoded_parameters_decode_to_what_was_encoded(
        pairs in proptest::collection::vec(("[a-z]{1,6}", any::<String>()), 1..8),
    ) {
        let q: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={}", encode(v))).collect();
        let uri: Uri = format!("/api/instances?{}", q.join("&")).parse().map_err(|e| TestCaseError::fail(format!("{e}")))?;
        for (k, _) in &pairs {
            let first = &pairs.iter().find(|(k2, _)| k2 == k).expect("present").1;
            let got = query_param(&uri, k);
            prop_assert_eq!(got.as_deref(), Some(first.as_str()));
        }
    }

    /// A token among other parameters is never forwarded and never logged; the other
    /// parameters are forwarded as they were, in order.
    #[test]
    fn the_token_is_neither_forwarded_nor_logged(
        before in proptest::collection::vec(("[a-z]{1,6}", "[a-zA-Z0-9%]{0,8}"), 0..4),
        after in proptest::collection::vec(("[a-z]{1,6}", "[a-zA-Z0-9%]{0,8}"), 0..4),
        spelling in proptest::sample::select(vec!["token", "TOKEN", "Token", "access_token"]),
        secret in "[A-Za-z0-9_-]{24,43}",
    ) {
        // Names that merely end in `token` count as tokens too: leave them out of the others.
        let plain = |pairs: &[(String, String)]| -> Vec<String> {
            pairs.iter().filter(|(k, _)| !k.ends_with("token")).map(|(k, v)| format!("{k}={v}")).collect()
        };
        let (b, a) = (plain(&before), plain(&after));
        let others = [b.clone(), a.clone()].concat();
        let all = [b, vec![format!("{spelling}=SECRET{secret}")], a].concat();
        let Ok(uri) = format!("/acp?{}", all.join("&")).parse::<Uri>() else { return Ok(()) };
        let fwd = query_without_token(&uri);
        prop_assert!(!fwd.as_deref().unwrap_or("").contains("SECRET"), "{fwd:?}");
        let kept: Vec<&str> = fwd.as_deref().map(|f| f.split('&').collect()).unwrap_or_default();
        prop_assert_eq!(kept, others.iter().map(String::as_str).collect::<Vec<_>>());
        let logged = redacted(&uri);
        prop_assert!(!logged.contains("SECRET"), "{logged}");
    }
}
