//! Property test of the agent's own `fs/*` service over the files API's trap tree (symlinks
//! out, loops, magic links, `..`, NUL, long names, a second root): whatever path the agent
//! asks for, a read never returns the outside's bytes and a write never creates or changes
//! anything outside the session's directories. 64 cases unless `PROPTEST_CASES` says otherwise.

use super::Roots;
use super::fs::{read_text_file, write_text_file};
use crate::files::fuzz::{component, config, tree};
use proptest::prelude::*;
use serde_json::json;

/// An absolute path the agent may ask for: mostly beneath a root, sometimes anywhere.
fn agent_path() -> impl Strategy<Value = String> {
    let t = tree();
    let prefix = prop_oneof![
        3 => Just(t.root.display().to_string()),
        1 => Just(t.root2.display().to_string()),
        1 => Just(t.outside.display().to_string()),
        1 => Just(String::new()),
    ];
    // The traps, often: a path through them is what must never get out.
    let part = prop_oneof![
        2 => proptest::sample::select(vec![
            "link_abs", "link_rel_out", "link_root2", "magic", "loop1", "secret", "sub", "up_out",
            "file", "new", "..",
        ]).prop_map(str::to_owned),
        1 => component(),
    ];
    (prefix, proptest::collection::vec(part, 0..5))
        .prop_map(|(prefix, parts)| format!("{prefix}/{}", parts.join("/")))
}

/// What is outside: (name, content) of every entry.
fn outside_now() -> Vec<(String, Vec<u8>)> {
    let mut all: Vec<_> = std::fs::read_dir(&tree().outside)
        .expect("outside")
        .map(|e| {
            let e = e.expect("entry");
            (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap_or_default())
        })
        .collect();
    all.sort();
    all
}

proptest! {
    #![proptest_config(config(64))]

    #[test]
    fn the_agents_reads_and_writes_stay_in_the_sessions_directories(path in agent_path()) {
        let t = tree();
        let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        let before = outside_now();
        let (read, wrote) = rt.block_on(async {
            let roots = Roots::resolve(&[t.root.clone(), t.root2.clone()]).await;
            let read = read_text_file(&json!({"path": path}), &roots).await;
            let wrote = write_text_file(&json!({"path": path, "content": "fuzz"}), &roots).await;
            (read, wrote)
        });
        if let Ok(v) = read {
            prop_assert!(!v["content"].as_str().unwrap_or_default().contains("OUTSIDE"), "{path:?}");
        }
        prop_assert_eq!(outside_now(), before, "{:?} changed the outside (write: {:?})", path, wrote);
    }
}
