//! One way to do each thing, checked on the sources: every `ZCODE_ACP_*` variable handed to a
//! started process is read by something; only `shared::jsonrpc` writes a JSON-RPC envelope and
//! classifies messages; `bridge::upstream` does not reach into the router; `docs/ARCHITECTURE.md`
//! stays a map and, with the README, names every variable the product reads.

use std::path::{Path, PathBuf};

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace")
}

/// The non-test lines of every `.rs` file of the product crates: (path, line). An inline
/// `#[cfg(test)] mod … {` runs to the end of its file, and the files of a `#[cfg(test)] mod x;`
/// are skipped.
fn product_lines() -> Vec<(PathBuf, String)> {
    let mut files = vec![];
    for krate in ["shared", "bridge", "hub"] {
        sources(&workspace().join(krate).join("src"), &mut files);
    }
    let tests = test_files(&files);
    let mut out = vec![];
    for f in files.into_iter().filter(|f| !tests.contains(f)) {
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

/// The files of the modules that `files` declare with `#[cfg(test)]` and `mod x;`.
fn test_files(files: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = vec![];
    for f in files {
        let text = std::fs::read_to_string(f).expect("a source file");
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        // `a/mod.rs` and `lib.rs` hold their children beside them, `a/b.rs` in `a/b/`.
        let stem = f.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
        let dir = match stem {
            "mod" | "lib" | "main" => f.parent().expect("a directory").to_owned(),
            _ => f.with_extension(""),
        };
        for pair in lines.windows(2).filter(|p| p[0] == "#[cfg(test)]") {
            let decl = pair[1].trim_start_matches("pub(crate) ").trim_start_matches("pub ");
            if let Some(name) = decl.strip_prefix("mod ").and_then(|d| d.strip_suffix(';')) {
                out.push(dir.join(format!("{name}.rs")));
                out.push(dir.join(name).join("mod.rs"));
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

/// Every `ZCODE_ACP_*` name in `text`, with the text before it on its line's remainder.
fn variables(text: &str) -> Vec<(&str, String)> {
    let mut out = vec![];
    let mut rest = text;
    while let Some(at) = rest.find("ZCODE_ACP_") {
        let name: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        if name.len() > "ZCODE_ACP_".len() {
            out.push((&rest[..at], name));
        }
        rest = &rest[at + "ZCODE_ACP_".len()..];
    }
    out
}

#[test]
fn every_variable_handed_to_a_started_process_is_read() {
    let (mut set, mut read) = (std::collections::BTreeSet::new(), std::collections::BTreeSet::new());
    for (_, line) in product_lines() {
        for (before, name) in variables(&line) {
            // `.env("X", …)` and `export X=` hand a variable on; any other mention reads it.
            match before.ends_with(".env(\"") || before.ends_with("export ") {
                true => set.insert(name),
                false => read.insert(name),
            };
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

/// `(dependency, features)` of each `name = { …, features = [...] }` line of `section` in a
/// Cargo.toml (the sections end at the next `[`).
fn added_features(toml: &str, section: &str) -> Vec<(String, Vec<String>)> {
    let mut out = vec![];
    let mut inside = false;
    for line in toml.lines().map(str::trim) {
        if line.starts_with('[') {
            inside = line == section;
            continue;
        }
        let (Some((name, rest)), true) = (line.split_once('='), inside) else { continue };
        let Some(list) = rest.split_once("features").and_then(|(_, l)| l.split_once('[')) else { continue };
        let list = list.1.split(']').next().unwrap_or_default();
        let features =
            list.split(',').map(|f| f.trim().trim_matches('"').to_owned()).filter(|f| !f.is_empty());
        out.push((name.trim().to_owned(), features.collect()));
    }
    out
}

/// The binary the suite runs (`cargo build --bin zcode-acp`, the hub's features alone) must be
/// the one the test build made: a feature that only a dev-dependency or the test crate adds
/// to a dependency the product shares (hub's `tokio` `test-util` did) makes cargo compile that
/// dependency and the whole workspace a second time on every fresh run.
#[test]
fn no_test_only_feature_reaches_a_dependency_the_product_shares() {
    let read = |krate: &str| {
        std::fs::read_to_string(workspace().join(krate).join("Cargo.toml")).expect("Cargo.toml")
    };
    let hub: Vec<(String, Vec<String>)> = added_features(&read("hub"), "[dependencies]");
    let mut extra = vec![];
    for (krate, section) in [
        ("shared", "[dev-dependencies]"),
        ("bridge", "[dev-dependencies]"),
        ("hub", "[dev-dependencies]"),
        ("tests", "[dependencies]"),
        ("tests", "[dev-dependencies]"),
    ] {
        for (dep, features) in added_features(&read(krate), section) {
            let product = hub.iter().find(|(d, _)| *d == dep).map(|(_, f)| f.clone()).unwrap_or_default();
            for f in features.into_iter().filter(|f| !product.contains(f)) {
                extra.push(format!("{krate} {section} {dep}: {f}"));
            }
        }
    }
    assert!(extra.is_empty(), "features the product's own build does not have:\n{}", extra.join("\n"));
    let sample = "[dependencies]\nnix = { workspace = true, features = [\"net\", \"fs\"] }\n[dev-dependencies]\nx = \"1\"\n";
    assert_eq!(
        added_features(sample, "[dependencies]"),
        [("nix".to_owned(), vec!["net".to_owned(), "fs".to_owned()])]
    );
}

/// Test-only knobs are honoured by debug builds alone: every one is listed in
/// `zcode_shared::env::TEST_KNOBS` and read through `test_knob` (which a release build
/// answers with nothing), never by a direct `var(…)`, `var_os(…)` or `get(…)`.
#[test]
fn test_knobs_are_read_only_through_test_knob() {
    let listed = std::fs::read_to_string(workspace().join("shared/src/env.rs")).expect("env.rs");
    let mut wrong = vec![];
    for (f, line) in product_lines() {
        let mut rest = line.as_str();
        while let Some(at) = rest.find("\"ZCODE_ACP_") {
            let (before, after) = rest.split_at(at);
            let name: String =
                after[1..].chars().take_while(|c| c.is_ascii_uppercase() || *c == '_').collect();
            rest = &after[1 + name.len()..];
            if !(name.contains("_TEST_") || name == "ZCODE_ACP_USAGE_BACKDATE_MS") {
                continue;
            }
            if !listed.contains(&format!("\"{name}\",")) {
                wrong.push(format!("{name} is not in TEST_KNOBS ({})", f.display()));
            }
            if reads_directly(before) {
                wrong.push(format!("{}: {}", f.display(), line.trim()));
            }
        }
    }
    assert!(wrong.is_empty(), "test knobs read around test_knob:\n{}", wrong.join("\n"));
    assert!(reads_directly("let v = std::env::var(") && reads_directly("env.get(") && reads_directly("var("));
    assert!(!reads_directly("test_knob(env, ") && !reads_directly("test_var(") && !reads_directly("var: "));
}

/// Whether the text before a variable's name is a direct read of it: `var(`, `var_os(`, `get(`.
fn reads_directly(before: &str) -> bool {
    let before = before.trim_end();
    ["var(", "var_os(", "get("].iter().any(|call| {
        before
            .strip_suffix(call)
            .is_some_and(|head| !head.ends_with(|c: char| c == '_' || c.is_ascii_alphanumeric()))
    })
}

/// Every file of `tests/tests/` is a module of the one e2e binary (`autotests = false`: a file
/// left out would never be compiled, let alone run).
#[test]
fn every_test_file_is_a_module_of_the_e2e_binary() {
    let dir = workspace().join("tests/tests");
    let e2e = std::fs::read_to_string(dir.join("e2e.rs")).expect("e2e.rs");
    let mut missing = vec![];
    for e in std::fs::read_dir(&dir).expect("tests/tests").flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(module) = name.strip_suffix(".rs") else { continue };
        if module != "e2e" && !e2e.lines().any(|l| l.trim() == format!("mod {module};")) {
            missing.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "files of tests/tests/ that tests/tests/e2e.rs does not declare: {missing:?}"
    );
}

/// `docs/ARCHITECTURE.md` is a map a newcomer reads in a quarter of an hour (measurements and
/// what was tried live in `docs/PERFORMANCE.md`), and every `ZCODE_ACP_*` variable the product
/// reads or hands on is named, as a whole name, in it or in the README.
#[test]
fn the_architecture_doc_is_a_map_that_names_every_variable() {
    let doc = |name: &str| std::fs::read_to_string(workspace().join(name)).expect(name);
    let map = doc("docs/ARCHITECTURE.md");
    let lines = map.lines().count();
    assert!(
        lines <= 400,
        "docs/ARCHITECTURE.md has {lines} lines, over 400: it is a map; measurements and what was \
         tried go to docs/PERFORMANCE.md, user documentation to the README"
    );
    let readme = doc("README.md");
    let documented: std::collections::BTreeSet<String> =
        variables(&map).into_iter().chain(variables(&readme)).map(|(_, n)| n).collect();
    let mut missing: Vec<String> = product_lines()
        .iter()
        .flat_map(|(_, l)| variables(l).into_iter().map(|(_, n)| n).collect::<Vec<_>>())
        .filter(|n| !documented.contains(n))
        .collect();
    missing.sort();
    missing.dedup();
    assert!(missing.is_empty(), "variables the product uses that neither doc names: {missing:?}");
}

/// The top-level modules of a crate (a first-level directory or `.rs` file of its `src/`, the
/// crate roots aside) and, for each `from → to` between two of them, where `from` first names
/// `to`: `crate::to…`, `use crate::{…, to…}`, or a `super::…` that climbs out of `from`.
/// Built from the non-test lines (`product_lines`); names re-exported by `lib.rs` with a
/// `pub use m::{…}` count as `m`.
type ModuleGraph = std::collections::BTreeMap<(String, String), String>;

fn module_graph(krate: &str) -> (Vec<String>, ModuleGraph) {
    let src = workspace().join(krate).join("src");
    let mut modules: Vec<String> = std::fs::read_dir(&src)
        .expect("a src directory")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().trim_end_matches(".rs").to_owned())
        .filter(|m| m != "lib" && m != "main")
        .collect();
    modules.sort();
    let root = std::fs::read_to_string(src.join("lib.rs")).expect("lib.rs");
    let mut reexported = std::collections::BTreeMap::new();
    for line in root.lines().filter_map(|l| l.trim().strip_prefix("pub use ")) {
        if let Some((m, names)) = line.split_once("::") {
            for name in names.trim_matches(|c| "{};".contains(c)).split(',') {
                reexported.insert(name.trim().to_owned(), m.to_owned());
            }
        }
    }
    let mut files: std::collections::BTreeMap<PathBuf, Vec<String>> = Default::default();
    for (f, line) in product_lines().into_iter().filter(|(f, _)| f.starts_with(&src)) {
        files.entry(f).or_default().push(line);
    }
    let mut edges = ModuleGraph::new();
    for (file, lines) in files {
        // The module path of the file: `router/mod.rs` is `[router]`, `router/x.rs` `[router, x]`.
        let rel = file.strip_prefix(&src).expect("under src").with_extension("");
        let mut path: Vec<String> = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
        if path.last().is_some_and(|l| l == "mod") {
            path.pop();
        }
        let Some(from) = path.first().filter(|m| modules.contains(m)).cloned() else { continue };
        for (at, line) in lines.iter().enumerate() {
            // A group may run over the lines after it.
            let text = if line.contains("::{") { lines[at..].join("\n") } else { line.clone() };
            for target in named_modules(line, &text, &path) {
                let target = reexported.get(&target).cloned().unwrap_or(target);
                if target != from && modules.contains(&target) {
                    let place = format!("{}: {}", rel.display(), line.trim());
                    edges.entry((from.clone(), target)).or_insert(place);
                }
            }
        }
    }
    (modules, edges)
}

/// The first segment below the crate root of every path in `line` that starts with `crate::`
/// or `super::` (a group `{a, b::c}` gives each of its items; `text` is `line` and the lines
/// after it, for groups that span lines), seen from the module at `path`.
fn named_modules(line: &str, text: &str, path: &[String]) -> Vec<String> {
    let ident =
        |s: &str| -> String { s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect() };
    let mut out = vec![];
    let mut from = 0;
    while let Some(found) =
        ["crate::", "super::"].iter().filter_map(|p| line[from..].find(p).map(|i| from + i)).min()
    {
        let before = line[..found].chars().next_back();
        from = found + "crate::".len();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$' || c == ':') {
            continue;
        }
        let mut rest = &text[found..];
        let mut base: Vec<String> = vec![];
        if let Some(r) = rest.strip_prefix("crate::") {
            rest = r;
        } else {
            base = path.to_vec();
            while let Some(r) = rest.strip_prefix("super::") {
                base.pop();
                rest = r;
            }
            from = found + (text[found..].len() - rest.len());
        }
        if let Some(top) = base.first() {
            out.push(top.clone());
        } else if let Some(group) = rest.strip_prefix('{') {
            let (mut depth, mut item, mut items) = (0, String::new(), vec![]);
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => items.push(std::mem::take(&mut item)),
                    _ => item.push(c),
                }
            }
            items.push(item);
            out.extend(items.iter().map(|i| ident(i.trim())).filter(|i| !i.is_empty() && i != "self"));
        } else {
            out.push(ident(rest));
        }
    }
    out
}

/// Every elementary cycle of `edges`, each starting at its smallest module.
fn cycles(modules: &[String], edges: &ModuleGraph) -> Vec<Vec<String>> {
    fn walk(start: &str, at: &str, trail: &mut Vec<String>, edges: &ModuleGraph, out: &mut Vec<Vec<String>>) {
        for (_, to) in edges.keys().filter(|(f, t)| f == at && t.as_str() >= start) {
            if to == start {
                out.push(trail.clone());
            } else if !trail.contains(to) {
                trail.push(to.clone());
                walk(start, to, trail, edges, out);
                trail.pop();
            }
        }
    }
    let mut out = vec![];
    for m in modules {
        walk(m, m, &mut vec![m.clone()], edges, &mut out);
    }
    out
}

/// No import circles between the top-level modules of shared, bridge and hub; shared's core
/// (config, paths, token, store, jsonrpc) names none of the account features (settings, quota),
/// and the bridge's usage reaches into neither files nor register.
#[test]
fn top_level_modules_import_no_circle_and_keep_their_layers() {
    let mut wrong = vec![];
    for krate in ["shared", "bridge", "hub"] {
        let (modules, edges) = module_graph(krate);
        for cycle in cycles(&modules, &edges) {
            let mut steps = vec![];
            for (i, from) in cycle.iter().enumerate() {
                let to = &cycle[(i + 1) % cycle.len()];
                steps.push(format!("    {from} → {to}  ({})", edges[&(from.clone(), to.clone())]));
            }
            wrong.push(format!("{krate}: circle {} → {}\n{}", cycle.join(" → "), cycle[0], steps.join("\n")));
        }
    }
    let layers = [
        ("shared", &["config", "paths", "token", "store", "jsonrpc"][..], &["settings", "quota"][..]),
        ("bridge", &["usage"][..], &["files", "register"][..]),
    ];
    for (krate, lower, upper) in layers {
        let (_, edges) = module_graph(krate);
        for ((from, to), place) in &edges {
            if lower.contains(&from.as_str()) && upper.contains(&to.as_str()) {
                wrong.push(format!("{krate}: {from} names {to} ({place})"));
            }
        }
    }
    assert!(wrong.is_empty(), "module imports that go round or up:\n{}", wrong.join("\n"));

    // The reader itself: a group over lines, a re-export, `super::` climbing out, `$crate`.
    let path = ["router".to_owned(), "turn".to_owned()];
    let text = "use crate::{\n    quota::{A, B},\n    self,\n    usage,\n};";
    assert_eq!(named_modules("use crate::{", text, &path), ["quota", "usage"]);
    assert_eq!(named_modules("super::super::files::x()", "super::super::files::x()", &path), ["files"]);
    assert_eq!(named_modules("use super::Event;", "use super::Event;", &path), ["router"]);
    assert!(named_modules("$crate::x!()", "$crate::x!()", &path).is_empty());
    let square = ModuleGraph::from([
        (("a".into(), "b".into()), String::new()),
        (("b".into(), "a".into()), String::new()),
        (("b".into(), "c".into()), String::new()),
        (("c".into(), "a".into()), String::new()),
    ]);
    let names = ["a".to_owned(), "b".to_owned(), "c".to_owned()];
    assert_eq!(cycles(&names, &square), [vec!["a", "b"], vec!["a", "b", "c"]]);
}

/// The README's `scripts/test …` examples name what exists: a FILE of the suite
/// (`tests/tests/FILE.rs`), after `web` a browser test file (`tests/web/FILE.test.mjs`), and
/// `scripts/test` itself knows the `web` and `--` forms the README shows.
#[test]
fn the_readmes_scripts_test_examples_name_what_exists() {
    let root = workspace();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let script = std::fs::read_to_string(root.join("scripts/test")).expect("scripts/test");
    let mut wrong = vec![];
    let mut seen = 0;
    for line in readme.lines().filter(|l| l.starts_with("scripts/test ")) {
        seen += 1;
        let words: Vec<&str> =
            line.split('#').next().unwrap_or_default().split_whitespace().skip(1).collect();
        match words.first().copied() {
            Some("web") => {
                for f in &words[1..] {
                    if !root.join(format!("tests/web/{f}.test.mjs")).exists() {
                        wrong.push(format!("{line}: no tests/web/{f}.test.mjs"));
                    }
                }
            }
            Some("--") => {}
            Some(_) if line.contains("one file") || line.contains("files") => {
                for f in &words {
                    if !root.join(format!("tests/tests/{f}.rs")).exists() {
                        wrong.push(format!("{line}: no tests/tests/{f}.rs"));
                    }
                }
            }
            _ => {}
        }
    }
    assert!(seen >= 5, "the README shows {seen} scripts/test examples");
    assert!(script.contains("  web)") && script.contains("  --)"), "scripts/test lost its web or -- form");
    assert!(wrong.is_empty(), "README examples naming nothing:\n{}", wrong.join("\n"));
}

/// Issue 30, point 7: the binary's `main.rs` parses arguments and dispatches, nothing more (the
/// hub's start-up and every subcommand live in modules of their own), and the hub's shared
/// state is a few parts (auth, bridges, account, life) rather than one bag of fields that every
/// route file reaches into.
#[test]
fn the_hub_binary_only_dispatches_and_the_hub_state_comes_in_parts() {
    let main = std::fs::read_to_string(workspace().join("hub/src/main.rs")).expect("main.rs");
    let fns: Vec<&str> = main
        .lines()
        .filter_map(|l| {
            let l = l.trim_start().trim_start_matches("pub(crate) ").trim_start_matches("pub ");
            l.strip_prefix("async fn ").or_else(|| l.strip_prefix("fn "))
        })
        .map(|rest| rest.split(['(', '<']).next().unwrap_or_default())
        .collect();
    assert_eq!(fns, ["main", "run"], "hub/src/main.rs holds only `main` and its dispatch `run`");
    let lines = main.lines().count();
    assert!(lines <= 220, "hub/src/main.rs is {lines} lines (at most 220: the arguments and a match)");

    let mut files = vec![];
    sources(&workspace().join("hub/src"), &mut files);
    let mut hubs = vec![];
    for f in files {
        let text = std::fs::read_to_string(&f).expect("a source file");
        let Some(at) = text.find("pub struct Hub {") else { continue };
        let body = &text[at..text[at..].find("\n}").map_or(text.len(), |e| at + e)];
        let fields = body
            .lines()
            .skip(1)
            .map(str::trim)
            .filter(|l| !l.starts_with("//") && l.contains(':') && l.ends_with(','))
            .count();
        hubs.push((f, fields));
    }
    assert_eq!(hubs.len(), 1, "one `pub struct Hub`: {hubs:?}");
    assert!(
        hubs[0].1 <= 8,
        "`Hub` has {} fields (at most 8: group them): {}",
        hubs[0].1,
        hubs[0].0.display()
    );
}

/// Issue 30, point 8: one pre-auth connection pool for both servers (`shared::slots`), and one
/// parse of the `Authorization` header's Bearer scheme (`shared::token::bearer`).
#[test]
fn both_servers_share_one_connection_pool_and_one_bearer_parse() {
    let mut wrong = vec![];
    for (f, line) in product_lines() {
        let own = f.ends_with("shared/src/slots.rs") || f.ends_with("shared/src/token.rs");
        let l = line.trim();
        if !own && (l.contains("struct Slots") || l.contains("struct Slot ") || l.contains("struct Pool ")) {
            wrong.push(format!("{}: a connection pool of its own: {l}", f.display()));
        }
        if !own && (l.contains("\"Bearer \"") || l.contains("\"bearer \"")) && !l.contains("format!") {
            wrong.push(format!("{}: a Bearer parse of its own: {l}", f.display()));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// One of each piece of plumbing: process groups are made, signalled and reaped only by
/// `shared::procgroup` (the guard against signalling a reused group id lives there), outgoing
/// HTTP requests (hyper's or written by hand) and TLS client settings are made only by
/// `shared::http_client`, and an
/// order-preserving raw-JSON object is read only by `shared::ordered`.
#[test]
fn one_of_each_piece_of_plumbing() {
    let only = [
        ("shared/src/procgroup.rs", &["process_group(", "killpg", "setpgid", "waitid", "waitpid"][..]),
        (
            "shared/src/http_client.rs",
            &["http1::handshake", "ClientConfig::builder", "TlsConnector", r"HTTP/1.1\r\nHost"][..],
        ),
        ("shared/src/ordered.rs", &["MapAccess", "next_entry"][..]),
    ];
    let mut wrong = vec![];
    for (f, l) in product_lines() {
        for (home, needles) in only {
            let needle = needles.iter().find(|n| l.contains(**n));
            if let Some(n) = needle.filter(|_| f != workspace().join(home)) {
                wrong.push(format!("{}: `{n}` outside {home}: {}", f.display(), l.trim()));
            }
        }
    }
    assert!(wrong.is_empty(), "plumbing built by hand beside its one module:\n{}", wrong.join("\n"));
}

/// The router's fields, as `pub struct Router { … }` in `bridge/src/router/mod.rs` declares them.
fn router_fields(module: &str) -> Vec<String> {
    let body = module.split("pub struct Router {").nth(1).expect("`pub struct Router {` in router/mod.rs");
    let body = body.split("\n}").next().unwrap_or_default();
    body.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("//") && !l.starts_with('#'))
        .filter_map(|l| l.trim_start_matches("pub(super) ").trim_start_matches("pub ").split_once(':'))
        .map(|(name, _)| name.trim().to_owned())
        .filter(|n| !n.is_empty() && n.chars().all(|c| c.is_alphanumeric() || c == '_'))
        .collect()
}

/// The router's fields that `text`'s `impl Router { … }` blocks name as `self.FIELD` (a field,
/// not a method call).
fn router_fields_named(text: &str, fields: &[String]) -> Vec<String> {
    let mut named = std::collections::BTreeSet::new();
    let mut inside = false;
    for line in text.lines() {
        if line.starts_with("impl Router {") {
            inside = true;
            continue;
        }
        if inside && line.starts_with('}') {
            inside = false;
        }
        if !inside {
            continue;
        }
        for (at, _) in line.match_indices("self.") {
            let rest = &line[at + 5..];
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            let after = rest[name.len()..].trim_start();
            if !after.starts_with('(') && fields.contains(&name) {
                named.insert(name);
            }
        }
    }
    named.into_iter().collect()
}

/// The router is one task that owns everything, but not one bag of fields: its state is a few
/// sub-states that own their data (clients and their outboxes, sessions, the agent's requests,
/// the bridge's lifetime…), and no file of its handlers reaches into most of them. A feature
/// touches the sub-states it needs; `mod.rs` alone dispatches over all of them.
#[test]
fn the_router_is_a_few_sub_states_and_no_handler_file_reaches_into_all_of_them() {
    const MAX_FIELDS: usize = 12;
    const MAX_NAMED: usize = 6;
    let dir = workspace().join("bridge/src/router");
    let module = std::fs::read_to_string(dir.join("mod.rs")).expect("router/mod.rs");
    let fields = router_fields(&module);
    assert!(fields.len() >= 5, "router/mod.rs: Router's fields not found: {fields:?}");
    let mut wide = vec![];
    if fields.len() > MAX_FIELDS {
        wide.push(format!("Router has {} fields (at most {MAX_FIELDS}): {fields:?}", fields.len()));
    }
    for e in std::fs::read_dir(&dir).expect("bridge/src/router").flatten() {
        let p = e.path();
        if p.extension().is_none_or(|x| x != "rs") || p.ends_with("mod.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&p).expect("a router file");
        let named = router_fields_named(&text, &fields);
        if named.len() > MAX_NAMED {
            wide.push(format!("{}: {} of Router's fields {named:?}", p.display(), named.len()));
        }
    }
    assert!(
        wide.is_empty(),
        "the router is to be a few sub-states, no handler file naming more than {MAX_NAMED} of them:\n{}",
        wide.join("\n")
    );
}

/// Nothing blocks the router's task on a file: its files call `std::fs` only in
/// `settings::read_config`, which runs on the blocking pool (`Tasks::spawn_blocking`).
#[test]
fn the_router_reads_no_file_on_its_task() {
    let dir = workspace().join("bridge/src/router");
    let mut wrong = vec![];
    let mut current = (PathBuf::new(), String::new());
    for (path, line) in product_lines().into_iter().filter(|(p, _)| p.starts_with(&dir)) {
        if let Some(rest) = line.trim_start().split("fn ").nth(1).filter(|_| line.contains("fn ")) {
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            current = (path.clone(), name);
        }
        let allowed = current.0 == path && path.ends_with("settings.rs") && current.1 == "read_config";
        if line.contains("std::fs::") && !allowed {
            wrong.push(format!("{}: in fn {}: {}", path.display(), current.1, line.trim()));
        }
    }
    assert!(wrong.is_empty(), "file access on the router's task:\n{}", wrong.join("\n"));
}

/// No test waits out wall-clock time it does not need: no fixed sleep over 100 ms in the
/// end-to-end suite (`tests/tests/`, `tests/src/`; the benchmarks of `tests/src/bin/` aside) or
/// the browser tests (`tests/web/`). A production period is shortened with a timing knob; an
/// event, a socket's or a page's state is waited for with the suite's deadline; a page's timers
/// are moved with playwright's clock.
#[test]
fn no_test_sleeps_over_100_ms() {
    let tests = workspace().join("tests");
    let mut files = vec![];
    sources(&tests.join("tests"), &mut files);
    for dir in ["src", "web"] {
        for e in std::fs::read_dir(tests.join(dir)).expect("a test directory").flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "rs" || x == "mjs") {
                files.push(p);
            }
        }
    }
    let mut wrong = vec![];
    for f in &files {
        let text = std::fs::read_to_string(f).expect("a test file");
        // (The rule's own examples below aside.)
        for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.contains("fixed_sleep_ms(")) {
            if let Some(ms) = fixed_sleep_ms(line).filter(|ms| *ms > 100) {
                let at = f.strip_prefix(workspace()).unwrap_or(f).display();
                wrong.push(format!("{at}:{}: {ms} ms: {}", i + 1, line.trim()));
            }
        }
    }
    assert!(files.len() > 50, "only {} test files found", files.len());
    assert!(
        wrong.is_empty(),
        "fixed sleeps over 100 ms (wait for an event or a state, or shorten the period with a timing knob):\n{}",
        wrong.join("\n")
    );
    // The rule sees each spelling it is meant to, and not a wait with a deadline.
    assert_eq!(fixed_sleep_ms("std::thread::sleep(Duration::from_secs(2));"), Some(2000));
    assert_eq!(fixed_sleep_ms("    tokio::time::sleep(Duration::from_millis(1_500)).await;"), Some(1500));
    assert_eq!(fixed_sleep_ms("    await new Promise((r) => setTimeout(r, 9000));"), Some(9000));
    assert_eq!(fixed_sleep_ms("await page.waitForTimeout(500);"), Some(500));
    assert_eq!(fixed_sleep_ms("std::thread::sleep(Duration::from_millis(20));"), Some(20));
    assert_eq!(
        fixed_sleep_ms("await Promise.race([this.exited, new Promise((r) => setTimeout(r, 3000))]);"),
        None
    );
    assert_eq!(fixed_sleep_ms("// std::thread::sleep(Duration::from_secs(2));"), None);
}

/// The milliseconds `line` sleeps when it is a fixed sleep: Rust's `sleep(Duration::from_millis(N))`
/// or `sleep(Duration::from_secs(N))`, JavaScript's `await new Promise((r) => setTimeout(r, N))`
/// or `waitForTimeout(N)`. A commented-out line sleeps nothing.
fn fixed_sleep_ms(line: &str) -> Option<u64> {
    let line = line.trim_start();
    if line.starts_with("//") {
        return None;
    }
    let number = |s: &str| -> Option<u64> {
        let digits: String =
            s.chars().take_while(|c| c.is_ascii_digit() || *c == '_').filter(|c| *c != '_').collect();
        digits.parse().ok()
    };
    let after = |marker: &str| line.find(marker).map(|at| &line[at + marker.len()..]);
    if let Some(arg) = after("sleep(Duration::from_millis(") {
        return number(arg);
    }
    if let Some(arg) = after("sleep(Duration::from_secs(") {
        return number(arg).map(|s| s * 1000);
    }
    if let Some(arg) = after("waitForTimeout(") {
        return number(arg);
    }
    if line.contains("await new Promise(") {
        return after("setTimeout(r, ").and_then(number);
    }
    None
}

/// Issue 30, point 14: the hub's store thread runs SQL only. What a route hands to
/// `store.run(…)` names no file-system call (a slow disk or mount would stall every query
/// behind it); the catalog's checks of the file system run on the blocking pool.
#[test]
fn the_hub_store_thread_runs_sql_only() {
    let mut files = vec![];
    sources(&workspace().join("hub/src"), &mut files);
    let forbidden = ["std::fs", "canonicalize", "is_dir", "metadata(", "read_dir", "creatable(", "shown("];
    let mut wrong = vec![];
    for f in files {
        let text = std::fs::read_to_string(&f).expect("a source file");
        // `store.run(` or `store` then `.run(` on the next line: the argument, by its parentheses.
        let flat = text.replace("store\n", "store ");
        let mut rest = flat.as_str();
        while let Some(at) = rest.find(".run(") {
            let before = rest[..at].trim_end();
            let args = &rest[at + ".run(".len()..];
            rest = args;
            if !before.ends_with("store") {
                continue;
            }
            let mut depth = 1;
            let end = args
                .char_indices()
                .find(|&(_, c)| {
                    depth += match c {
                        '(' => 1,
                        ')' => -1,
                        _ => 0,
                    };
                    depth == 0
                })
                .map_or(args.len(), |(i, _)| i);
            let body = &args[..end];
            for needle in forbidden.iter().filter(|n| body.contains(**n)) {
                wrong.push(format!(
                    "{}: `{needle}` handed to the store thread: {}",
                    f.display(),
                    body.trim()
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "file-system work on the hub's store thread:\n{}", wrong.join("\n\n"));
}
