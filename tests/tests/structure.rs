//! One way to do each thing, checked on the sources: every `ZCODE_ACP_*` variable handed to a
//! started process is read by something; only `shared::jsonrpc` writes a JSON-RPC envelope and
//! classifies messages; `bridge::upstream` does not reach into the router.

use std::path::{Path, PathBuf};

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace")
}

/// The non-test lines of every `.rs` file of the product crates: (path, line). An inline
/// `#[cfg(test)] mod … {` runs to the end of its file, and `tests.rs` files are skipped.
fn product_lines() -> Vec<(PathBuf, String)> {
    let mut files = vec![];
    for krate in ["shared", "bridge", "hub"] {
        sources(&workspace().join(krate).join("src"), &mut files);
    }
    let mut out = vec![];
    for f in files.into_iter().filter(|f| !f.ends_with("tests.rs")) {
        let text = std::fs::read_to_string(&f).expect("a source file");
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let next = lines.get(i + 1).map_or("", |l| l.trim());
            if line.trim() == "#[cfg(test)]" && next.starts_with("mod ") && next.ends_with('{') {
                break;
            }
            if !line.trim_start().starts_with("//") {
                out.push((f.clone(), (*line).to_owned()));
            }
        }
    }
    out
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("a source directory").flatten() {
        let p = e.path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn every_variable_handed_to_a_started_process_is_read() {
    let (mut set, mut read) = (std::collections::BTreeSet::new(), std::collections::BTreeSet::new());
    for (_, line) in product_lines() {
        let mut rest = line.as_str();
        while let Some(at) = rest.find("ZCODE_ACP_") {
            let name: String = rest[at..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            let before = &rest[..at];
            if name.len() > "ZCODE_ACP_".len() {
                // `.env("X", …)` and `export X=` hand a variable on; any other mention reads it.
                match before.ends_with(".env(\"") || before.ends_with("export ") {
                    true => set.insert(name),
                    false => read.insert(name),
                };
            }
            rest = &rest[at + "ZCODE_ACP_".len()..];
        }
    }
    let dead: Vec<&String> = set.difference(&read).collect();
    assert!(dead.is_empty(), "variables set for a started process that nothing reads: {dead:?}");
}

#[test]
fn only_shared_jsonrpc_writes_the_envelope() {
    let jsonrpc = workspace().join("shared/src/jsonrpc");
    let by_hand: Vec<String> = product_lines()
        .into_iter()
        .filter(|(f, _)| !f.starts_with(&jsonrpc))
        .filter(|(_, l)| l.contains(r#""jsonrpc""#) || l.contains(r#"\"jsonrpc\""#))
        .map(|(f, l)| format!("{}: {}", f.display(), l.trim()))
        .collect();
    assert!(by_hand.is_empty(), "JSON-RPC envelopes built outside shared::jsonrpc:\n{}", by_hand.join("\n"));
}

#[test]
fn raw_message_is_the_one_classifier_and_upstream_has_its_own_events() {
    let second: Vec<String> = product_lines()
        .into_iter()
        .filter(|(_, l)| {
            l.contains("fn classify(") || l.contains("jsonrpc::classify") || l.contains("Kind::Request {")
        })
        .map(|(f, l)| format!("{}: {}", f.display(), l.trim()))
        .collect();
    assert!(second.is_empty(), "a classifier beside RawMessage:\n{}", second.join("\n"));
    let upstream = std::fs::read_to_string(workspace().join("bridge/src/upstream.rs")).expect("upstream.rs");
    assert!(!upstream.contains("crate::router"), "bridge::upstream imports the router's types");
}
