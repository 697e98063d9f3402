//! Property tests of the files API's parsers: query strings (arbitrary text never panics; an
//! encoded query decodes to exactly what was encoded; a bad escape is always refused) and path
//! resolution beneath a root (arbitrary requested paths with `..`, NUL, symlinks out, loops,
//! long names: never panics, never opens anything outside the root). 256 cases per property
//! unless `PROPTEST_CASES` says otherwise (`scripts/fuzz` runs many more).

use super::resolve::{Refusal, Root};
use crate::http::query::Query;
use nix::fcntl::OFlag;
use proptest::prelude::*;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

/// `cases` per property, unless `PROPTEST_CASES` is set.
pub(crate) fn config(cases: u32) -> ProptestConfig {
    let mut c = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = cases;
    }
    c
}

/// A tree with a root full of traps and a sibling outside it, made once per test binary.
pub(crate) struct Tree {
    _dir: tempfile::TempDir,
    /// `base/root`, canonical.
    pub(crate) root: PathBuf,
    /// `base/root2`: a second root, for sessions with several directories.
    pub(crate) root2: PathBuf,
    /// `base/outside`, holding `secret` (content `OUTSIDE`).
    pub(crate) outside: PathBuf,
}

/// The shared [`Tree`].
pub(crate) fn tree() -> &'static Tree {
    static TREE: OnceLock<Tree> = OnceLock::new();
    TREE.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let base = dir.path().canonicalize().expect("canonical temp dir");
        let (root, root2, outside) = (base.join("root"), base.join("root2"), base.join("outside"));
        for d in [root.join("sub/deeper"), root2.clone(), outside.clone()] {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        std::fs::write(outside.join("secret"), "OUTSIDE").expect("write");
        std::fs::write(root.join("file"), "inside").expect("write");
        std::fs::write(root.join("sub/file"), "inside").expect("write");
        std::fs::write(root2.join("file"), "inside").expect("write");
        let links: [(&Path, &str); 9] = [
            (&outside, "link_abs"),
            (Path::new("../outside"), "link_rel_out"),
            (Path::new("sub"), "link_in"),
            (Path::new("/"), "link_root"),
            (Path::new("loop2"), "loop1"),
            (Path::new("loop1"), "loop2"),
            (Path::new("/proc/self/root"), "magic"),
            (Path::new("../root2"), "link_root2"),
            (Path::new("../../outside/secret"), "sub/up_out"),
        ];
        for (target, name) in links {
            std::os::unix::fs::symlink(target, root.join(name)).expect("symlink");
        }
        Tree { _dir: dir, root, root2, outside }
    })
}

/// Where an open file descriptor really is.
pub(crate) fn real_path(fd: &OwnedFd) -> PathBuf {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).expect("readlink /proc/self/fd")
}

/// One path component: the tree's names and traps, dots, empties, odd bytes, long names.
pub(crate) fn component() -> impl Strategy<Value = String> {
    let t = tree();
    prop_oneof![
        3 => proptest::sample::select(vec![
            "..", ".", "", "sub", "deeper", "file", "link_abs", "link_rel_out", "link_in",
            "link_root", "loop1", "magic", "link_root2", "up_out", "outside", "secret", "root",
            "root2", "nope", "é", "a\0b", "%2e%2e", "\\..", " ..",
        ]).prop_map(str::to_owned),
        1 => Just(t.root.display().to_string()),
        1 => Just(t.outside.display().to_string()),
        1 => "[a-z.]{1,3}",
        1 => "[a-z]{250,300}",
        1 => any::<String>(),
    ]
}

/// A requested path: components joined by `/`, maybe absolute.
pub(crate) fn requested() -> impl Strategy<Value = String> {
    (any::<bool>(), proptest::collection::vec(component(), 0..8)).prop_map(|(abs, parts)| {
        let p = parts.join("/");
        if abs { format!("/{p}") } else { p }
    })
}

/// Percent-encodes every byte but unreserved ones; spaces as `+` when `plus`.
fn encode(b: &[u8], plus: bool) -> String {
    let mut s = String::new();
    for &c in b {
        match c {
            b' ' if plus => s.push('+'),
            c if c.is_ascii_alphanumeric() || b"-._~".contains(&c) => s.push(c as char),
            c => s.push_str(&format!("%{c:02X}")),
        }
    }
    s
}

/// Whether every `%` in `s` starts an escape of two hex digits.
fn escapes_ok(s: &str) -> bool {
    let b = s.as_bytes();
    (0..b.len()).filter(|&i| b[i] == b'%').all(|i| {
        b.get(i + 1).is_some_and(u8::is_ascii_hexdigit) && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit)
    })
}

proptest! {
    #![proptest_config(config(256))]

    /// Any query text: no panic; refused exactly when an escape is bad or a name is not UTF-8;
    /// typed reads never panic either.
    #[test]
    fn any_query_parses_or_is_refused(raw in prop_oneof![
        any::<String>(),
        proptest::collection::vec(
            proptest::sample::select(vec!["&", "=", "%", "%2", "%zz", "%+f", "%-1", "%e9", "%C3%A9", "+", "a", "path", "line", "1", "é"]),
            0..16,
        ).prop_map(|p| p.concat()),
    ]) {
        match Query::parse(Some(&raw)) {
            Ok(q) => {
                prop_assert!(escapes_ok(&raw), "{raw:?} was accepted with a bad escape");
                for key in ["path", "line", "a", ""] {
                    let _ = (q.str(key), q.u64(key), q.flag(key), q.bytes(key));
                }
            }
            Err(m) => prop_assert!(!m.is_empty()),
        }
    }

    /// An encoded query decodes to exactly the bytes encoded (the last value of a repeated
    /// name wins), however the values were spelled.
    #[test]
    fn encoded_queries_decode_to_what_was_encoded(
        pairs in proptest::collection::vec(
            ("[a-zA-Z0-9_]{1,8}", proptest::collection::vec(any::<u8>(), 0..40), any::<bool>()),
            0..8,
        ),
    ) {
        let raw: Vec<String> =
            pairs.iter().map(|(k, v, plus)| format!("{}={}", encode(k.as_bytes(), *plus), encode(v, *plus))).collect();
        let q = Query::parse(Some(&raw.join("&"))).map_err(TestCaseError::fail)?;
        let want: HashMap<&str, &[u8]> = pairs.iter().map(|(k, v, _)| (k.as_str(), v.as_slice())).collect();
        for (k, v) in want {
            prop_assert_eq!(q.bytes(k), Some(v));
        }
    }

    /// Any requested path: no panic; a path accepted has only plain components; whatever
    /// opens (through symlinks, loops, magic links) is beneath the root, and nothing read
    /// through it is the outside's.
    #[test]
    fn resolution_never_leaves_the_root(req in requested(), raw_bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let t = tree();
        let root = Root::open(&t.root).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        for bytes in [req.as_bytes(), &raw_bytes[..]] {
            let rel = match root.relative(bytes, &t.root) {
                Ok(rel) => rel,
                Err(Refusal::Bad(_) | Refusal::Forbidden(_) | Refusal::NotFound(_)) => continue,
            };
            prop_assert!(rel.components().all(|c| matches!(c, Component::Normal(_))), "{rel:?}");
            for flags in [OFlag::O_PATH, OFlag::O_RDONLY, OFlag::O_RDONLY | OFlag::O_DIRECTORY] {
                let Ok(fd) = root.open_beneath(&rel, flags) else { continue };
                let real = real_path(&fd);
                prop_assert!(real.starts_with(&t.root), "{req:?} opened {real:?}");
                prop_assert!(!real.starts_with(&t.outside));
            }
        }
    }
}
