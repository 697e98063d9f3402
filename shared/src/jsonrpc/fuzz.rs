//! Property tests of the raw JSON-RPC reader and the id rewrite: arbitrary bytes and
//! JSON-shaped noise never panic and are classified -32700 or -32600; for valid messages,
//! rewriting the id and parsing back gives the new id and byte-identical params, result and
//! error. 256 cases per property unless `PROPTEST_CASES` says otherwise (`scripts/fuzz`).

use super::{INVALID_REQUEST, Id, PARSE_ERROR, RawKind, RawMessage};
use proptest::prelude::*;

/// `cases` per property, unless `PROPTEST_CASES` is set.
fn config(cases: u32) -> ProptestConfig {
    let mut c = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = cases;
    }
    c
}

/// JSON numbers in every spelling a peer may use (`-0`, `1.50`, `2E+3`, 30-digit integers).
fn number() -> impl Strategy<Value = String> {
    "-?(0|[1-9][0-9]{0,30})(\\.[0-9]{1,5})?([eE][+-]?[0-9]{1,3})?"
}

/// A JSON string with escapes, control characters and non-ASCII text.
fn string() -> impl Strategy<Value = String> {
    any::<String>().prop_map(|s| serde_json::Value::from(s).to_string())
}

/// JSON whitespace, often none.
fn ws() -> impl Strategy<Value = String> {
    prop_oneof![3 => Just(String::new()), 1 => "[ \t\r\n]{1,3}"]
}

/// A JSON text as a peer might spell it: whitespace, number spellings and key order kept.
fn json_text() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("false".to_owned()),
        number(),
        string(),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            (proptest::collection::vec((ws(), inner.clone()), 0..6), ws()).prop_map(|(items, end)| {
                let items: Vec<String> = items.into_iter().map(|(w, v)| format!("{w}{v}")).collect();
                format!("[{}{end}]", items.join(","))
            }),
            (proptest::collection::vec((string(), ws(), inner), 0..6), ws()).prop_map(|(items, end)| {
                let items: Vec<String> = items.into_iter().map(|(k, w, v)| format!("{k}:{w}{v}")).collect();
                format!("{{{}{end}}}", items.join(","))
            }),
        ]
    })
}

/// An id as it goes on the wire, and as [`Id`].
fn id() -> impl Strategy<Value = Id> {
    prop_oneof![number().prop_map(Id::Number), any::<String>().prop_map(Id::String)]
}

fn id_json(id: &Id) -> String {
    let mut s = String::new();
    id.write_json(&mut s);
    s
}

/// A valid message: (line, its id, its method, params, result, error as raw text).
#[derive(Debug, Clone)]
struct Valid {
    line: String,
    id: Option<Id>,
    method: Option<String>,
    parts: [Option<String>; 3],
}

fn valid() -> impl Strategy<Value = Valid> {
    let part = || proptest::option::of(json_text());
    (proptest::option::of(id()), proptest::option::of(any::<String>()), part(), part(), part(), ws())
        .prop_filter("a method, a result or an error", |(_, m, _, r, e, _)| {
            m.is_some() || r.is_some() || e.is_some()
        })
        .prop_map(|(id, method, params, result, error, w)| {
            let mut fields = vec!["\"jsonrpc\":\"2.0\"".to_owned()];
            if let Some(id) = &id {
                fields.push(format!("\"id\":{w}{}", id_json(id)));
            }
            if let Some(m) = &method {
                fields.push(format!("\"method\":{}", serde_json::Value::from(m.as_str())));
            }
            for (name, part) in [("params", &params), ("result", &result), ("error", &error)] {
                if let Some(p) = part {
                    fields.push(format!("\"{name}\":{w}{p}"));
                }
            }
            // Field order is the peer's: reverse it sometimes.
            if w.len() % 2 == 1 {
                fields.reverse();
            }
            Valid {
                line: format!("{w}{{{}}}{w}", fields.join(",")),
                id,
                method,
                parts: [params, result, error],
            }
        })
}

/// The raw parts of a parsed message.
fn parts(m: &RawMessage) -> [Option<String>; 3] {
    [&m.params, &m.result, &m.error].map(|p| p.as_deref().map(|r| r.get().to_owned()))
}

/// Fragments of JSON-RPC envelopes, glued at random: the envelope checks' corner cases.
fn envelope_noise() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("{".to_owned()),
        Just("}".to_owned()),
        Just("[".to_owned()),
        Just("]".to_owned()),
        Just(",".to_owned()),
        Just(":".to_owned()),
        Just("\"id\"".to_owned()),
        Just("\"method\"".to_owned()),
        Just("\"params\"".to_owned()),
        Just("\"result\"".to_owned()),
        Just("\"error\"".to_owned()),
        Just("\"jsonrpc\"".to_owned()),
        Just("null".to_owned()),
        Just("\\u0000".to_owned()),
        Just("\"\\ud800\"".to_owned()),
        number(),
        string(),
        ws(),
    ];
    proptest::collection::vec(piece, 0..24).prop_map(|p| p.concat())
}

proptest! {
    #![proptest_config(config(256))]

    /// Arbitrary bytes (as the lossy text a reader would hand over) never panic, and a refusal
    /// is a parse error or an invalid request.
    #[test]
    fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..512)) {
        check_any(&String::from_utf8_lossy(&b))?;
    }

    /// JSON-shaped noise: the same.
    #[test]
    fn envelope_noise_never_panics(text in envelope_noise()) {
        check_any(&text)?;
    }

    /// Any JSON value at all: an object may be a message, anything else is -32600.
    #[test]
    fn any_json_is_classified(text in json_text()) {
        match RawMessage::parse(&text) {
            Ok(_) => prop_assert!(text.starts_with('{'), "{text:?} was accepted"),
            Err(e) => prop_assert!(
                e.code() == INVALID_REQUEST || (e.code() == PARSE_ERROR && text.starts_with('{')),
                "{text:?}: {e}"
            ),
        }
    }

    /// Valid messages parse to what was sent; rewriting the id (or removing it) and parsing
    /// back gives the new id and byte-identical params, result and error.
    #[test]
    fn rewriting_the_id_keeps_every_payload_byte(v in valid(), new in proptest::option::of(id())) {
        let m = RawMessage::parse(&v.line).map_err(|e| TestCaseError::fail(format!("{e}: {}", v.line)))?;
        prop_assert_eq!(&m.id, &v.id);
        prop_assert_eq!(&m.method, &v.method);
        prop_assert_eq!(parts(&m), v.parts.clone());
        let line = m.line_with_id(new.as_ref());
        prop_assert!(!line.contains('\n') || v.parts.iter().flatten().any(|p| p.contains('\n')));
        let back = RawMessage::parse(&line).map_err(|e| TestCaseError::fail(format!("{e}: {line}")))?;
        prop_assert_eq!(&back.id, &new);
        prop_assert_eq!(&back.method, &v.method);
        prop_assert_eq!(parts(&back), v.parts);
        let kind = match (&v.method, &new) {
            (Some(_), Some(_)) => RawKind::Request,
            (Some(_), None) => RawKind::Notification,
            (None, _) => RawKind::Response,
        };
        prop_assert_eq!(back.kind(), kind);
        // Typed reads of any payload never panic.
        let _ = back.session_id();
        let _ = back.params_value();
    }
}

/// No panic; a refusal carries a JSON-RPC code; an accepted message re-serializes and parses
/// back to the same envelope and payloads, with its id rewritten.
fn check_any(text: &str) -> Result<(), TestCaseError> {
    match RawMessage::parse(text) {
        Ok(m) => {
            let line = m.to_line();
            let back = RawMessage::parse(&line).map_err(|e| TestCaseError::fail(format!("{e}: {line}")))?;
            prop_assert_eq!((&back.id, &back.method, parts(&back)), (&m.id, &m.method, parts(&m)));
            let new = Id::String("rewritten".into());
            let back = RawMessage::parse(&m.line_with_id(Some(&new)))
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(back.id, Some(new));
            // Nothing is added but the envelope: no unbounded growth.
            prop_assert!(line.len() <= text.len() + 64 + m.method.as_ref().map_or(0, |s| s.len() * 6));
        }
        Err(e) => prop_assert!([PARSE_ERROR, INVALID_REQUEST].contains(&e.code()), "{e}"),
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(16))]

    /// Nesting to any depth never overflows the stack: kept raw (a payload is never parsed to
    /// be forwarded), refused by typed reads past serde_json's recursion limit.
    #[test]
    fn deep_nesting_never_overflows_the_stack(n in 1usize..200_000, object in any::<bool>()) {
        let (open, close) = if object { ("{\"sessionId\":", "}") } else { ("[", "]") };
        let text = format!("{{\"method\":\"m\",\"params\":{}1{}}}", open.repeat(n), close.repeat(n));
        let m = RawMessage::parse(&text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(m.params.as_deref().map(|p| p.get().len()), Some(text.len() - 24));
        prop_assert_eq!(m.session_id(), None);
        if n > 200 {
            prop_assert_eq!(m.params_value(), serde_json::Value::Null);
        }
        prop_assert_eq!(m.line_with_id(Some(&Id::Number("1".into()))).len(), text.len() + 23);
    }
}
