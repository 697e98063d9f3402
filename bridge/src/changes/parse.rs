//! Reading what git printed: `status --porcelain=v2 --branch -z`, `diff --raw --numstat -z`
//! and a unified diff. Names stay bytes until they are shown; nothing here runs anything.

use std::collections::HashMap;

/// The branch part of `status --porcelain=v2 --branch`, and its untracked files.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Status {
    /// The commit checked out; `None` before the first commit.
    pub oid: Option<String>,
    /// The branch; `None` when detached.
    pub branch: Option<String>,
    /// The upstream branch, if any.
    pub upstream: Option<String>,
    /// Commits ahead of and behind the upstream (with an upstream only).
    pub ab: Option<(u64, u64)>,
    /// Untracked files, relative to the repository's top.
    pub untracked: Vec<Vec<u8>>,
}

/// Reads `git status --porcelain=v2 --branch -z --untracked-files=all`.
pub fn status(out: &[u8]) -> Status {
    let mut st = Status::default();
    let mut fields = out.split(|b| *b == 0);
    while let Some(rec) = fields.next() {
        if let Some(h) = rec.strip_prefix(b"# ") {
            let h = String::from_utf8_lossy(h);
            let (key, value) = h.split_once(' ').unwrap_or((&h, ""));
            match key {
                "branch.oid" if value != "(initial)" => st.oid = Some(value.to_owned()),
                "branch.head" if value != "(detached)" => st.branch = Some(value.to_owned()),
                "branch.upstream" => st.upstream = Some(value.to_owned()),
                "branch.ab" => {
                    let mut n = value.split(' ').map(|v| v.trim_start_matches(['+', '-']).parse::<u64>());
                    if let (Some(Ok(a)), Some(Ok(b))) = (n.next(), n.next()) {
                        st.ab = Some((a, b));
                    }
                }
                _ => {}
            }
        } else if let Some(p) = rec.strip_prefix(b"? ") {
            st.untracked.push(p.to_vec());
        } else if rec.starts_with(b"2 ") {
            // A rename or copy: its original path is the next field.
            fields.next();
        }
    }
    st
}

/// One changed file as `diff --raw --numstat` tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Its path (the new one for a rename).
    pub path: Vec<u8>,
    /// The path it had, for a rename or copy.
    pub old_path: Option<Vec<u8>>,
    /// `modified`, `added`, `deleted`, `renamed`, `copied`, `conflicted`, `untracked`.
    pub status: &'static str,
    /// Lines added and deleted (0 for a binary file).
    pub additions: u64,
    pub deletions: u64,
    /// Git takes it for binary.
    pub binary: bool,
}

/// Reads `git diff --raw --numstat -z -M`: the raw records first (`:modes oids STATUS`, then
/// one path, two for a rename or copy), then the numstat ones (`A\tD\tpath`, or `A\tD\t` and
/// two paths), matched to them by path.
pub fn changes(out: &[u8]) -> Vec<Change> {
    let mut list: Vec<Change> = Vec::new();
    let mut counts: HashMap<Vec<u8>, Option<(u64, u64)>> = HashMap::new();
    let mut fields = out.split(|b| *b == 0).peekable();
    while let Some(rec) = fields.next() {
        if rec.is_empty() {
            continue;
        }
        if let Some(raw) = rec.strip_prefix(b":") {
            let letter = raw.rsplit(|b| *b == b' ').next().and_then(|s| s.first().copied());
            let two = matches!(letter, Some(b'R' | b'C'));
            let first = fields.next().unwrap_or_default().to_vec();
            let (path, old_path) =
                if two { (fields.next().unwrap_or_default().to_vec(), Some(first)) } else { (first, None) };
            let status = match letter {
                Some(b'A') => "added",
                Some(b'D') => "deleted",
                Some(b'R') => "renamed",
                Some(b'C') => "copied",
                Some(b'U') => "conflicted",
                _ => "modified",
            };
            list.push(Change { path, old_path, status, additions: 0, deletions: 0, binary: false });
        } else {
            let mut parts = rec.splitn(3, |b| *b == b'\t');
            let (a, d, rest) = (parts.next(), parts.next(), parts.next().unwrap_or_default());
            let path = if rest.is_empty() {
                fields.next();
                fields.next().unwrap_or_default().to_vec()
            } else {
                rest.to_vec()
            };
            let num = |f: Option<&[u8]>| std::str::from_utf8(f?).ok()?.parse::<u64>().ok();
            counts.insert(path, num(a).zip(num(d)));
        }
    }
    for c in &mut list {
        match counts.get(&c.path) {
            Some(Some((a, d))) => (c.additions, c.deletions) = (*a, *d),
            Some(None) => c.binary = true,
            None => {}
        }
    }
    list
}

/// One line of a hunk.
#[derive(Debug, PartialEq, Eq)]
pub struct Line {
    /// `' '`, `'+'` or `'-'`.
    pub kind: char,
    pub text: String,
    pub old_no: Option<u64>,
    pub new_no: Option<u64>,
}

/// One hunk of a unified diff.
#[derive(Debug, PartialEq, Eq)]
pub struct Hunk {
    pub old_start: u64,
    pub old_lines: u64,
    pub new_start: u64,
    pub new_lines: u64,
    pub lines: Vec<Line>,
}

/// A unified diff of one file: its hunks, and whether git called it binary. `cut`: the output
/// was cut at a bound, so its last (partial) line is left out.
pub fn hunks(out: &[u8], cut: bool) -> (Vec<Hunk>, bool) {
    let mut body = out;
    if cut {
        body = match out.iter().rposition(|b| *b == b'\n') {
            Some(i) => &out[..=i],
            None => b"",
        };
    }
    let mut hunks: Vec<Hunk> = Vec::new();
    let (mut old_no, mut new_no) = (0u64, 0u64);
    // Lines the current hunk's header announced and not yet seen: past them, nothing is a line
    // of it (a `--- a/x` header of a next file would look like a deletion).
    let (mut old_left, mut new_left) = (0u64, 0u64);
    let mut binary = false;
    let mut lines: Vec<&[u8]> = body.split(|b| *b == b'\n').collect();
    // The split's last piece is what follows the final newline.
    if lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    for l in lines {
        if let Some(h) = header(l) {
            (old_no, new_no) = (h.old_start, h.new_start);
            (old_left, new_left) = (h.old_lines, h.new_lines);
            hunks.push(h);
            continue;
        }
        let Some(h) = hunks.last_mut() else {
            if l.starts_with(b"Binary files ") || l == b"GIT binary patch" {
                binary = true;
            }
            continue;
        };
        let text = |rest: &[u8]| String::from_utf8_lossy(rest).into_owned();
        match l.first() {
            Some(b' ') if old_left > 0 && new_left > 0 => {
                (old_left, new_left) = (old_left - 1, new_left - 1);
                h.lines.push(Line {
                    kind: ' ',
                    text: text(&l[1..]),
                    old_no: Some(old_no),
                    new_no: Some(new_no),
                });
                old_no += 1;
                new_no += 1;
            }
            Some(b'-') if old_left > 0 => {
                old_left -= 1;
                h.lines.push(Line { kind: '-', text: text(&l[1..]), old_no: Some(old_no), new_no: None });
                old_no += 1;
            }
            Some(b'+') if new_left > 0 => {
                new_left -= 1;
                h.lines.push(Line { kind: '+', text: text(&l[1..]), old_no: None, new_no: Some(new_no) });
                new_no += 1;
            }
            // `\ No newline at end of file`, or the next file's header (one file is asked for).
            _ => {}
        }
    }
    (hunks, binary)
}

/// `@@ -a[,b] +c[,d] @@…` as an empty hunk.
fn header(l: &[u8]) -> Option<Hunk> {
    let rest = l.strip_prefix(b"@@ -")?;
    let end = rest.windows(3).position(|w| w == b" @@")?;
    let spec = std::str::from_utf8(&rest[..end]).ok()?;
    let (old, new) = spec.split_once(" +")?;
    let range = |s: &str| -> Option<(u64, u64)> {
        match s.split_once(',') {
            Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
            None => Some((s.parse().ok()?, 1)),
        }
    };
    let ((old_start, old_lines), (new_start, new_lines)) = (range(old)?, range(new)?);
    Some(Hunk { old_start, old_lines, new_start, new_lines, lines: Vec::new() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_reads_the_branch_and_untracked_names_as_bytes() {
        let out = b"# branch.oid abc\0# branch.head main\0# branch.upstream origin/main\0# branch.ab +2 -1\0\
2 R. N... 100644 100644 100644 x y R100 new\0? old\n? x\0? -n\xff\0";
        let st = status(out);
        assert_eq!(st.oid.as_deref(), Some("abc"));
        assert_eq!(st.branch.as_deref(), Some("main"));
        assert_eq!(st.upstream.as_deref(), Some("origin/main"));
        assert_eq!(st.ab, Some((2, 1)));
        // The rename's original path (which here looks like an untracked record) is skipped.
        assert_eq!(st.untracked, vec![b"-n\xff".to_vec()]);
        let fresh = status(b"# branch.oid (initial)\0# branch.head (detached)\0");
        assert_eq!((fresh.oid, fresh.branch, fresh.ab), (None, None, None));
    }

    #[test]
    fn raw_and_numstat_records_pair_up() {
        let out = b":100644 100644 a b M\0f.txt\0:100644 100644 c c R100\0old\0new\0\
:000000 100644 0 d A\0bin\0:100644 000000 e 0 D\0gone\x0a1\0\
1\t1\tf.txt\0\x30\t0\t\0old\0new\0-\t-\tbin\0\x30\t4\tgone\x0a1\0";
        let c = changes(out);
        assert_eq!(c.len(), 4);
        assert_eq!((c[0].status, c[0].additions, c[0].deletions), ("modified", 1, 1));
        assert_eq!(
            (c[1].status, c[1].path.as_slice(), c[1].old_path.as_deref()),
            ("renamed", &b"new"[..], Some(&b"old"[..]))
        );
        assert!(c[2].binary && c[2].status == "added");
        assert_eq!((c[3].status, c[3].path.as_slice(), c[3].deletions), ("deleted", &b"gone\n1"[..], 4));
    }

    #[test]
    fn hunks_number_their_lines() {
        let out = b"diff --git a/f b/f\nindex 1..2 100644\n--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@ fn x\n a\n-b\n+B\n c\n@@ -10 +10,2 @@\n x\n+y\n\\ No newline at end of file\n";
        let (h, binary) = hunks(out, false);
        assert!(!binary);
        assert_eq!(h.len(), 2);
        assert_eq!((h[0].old_start, h[0].old_lines, h[0].new_start, h[0].new_lines), (1, 3, 1, 3));
        let l = &h[0].lines;
        assert_eq!((l[1].kind, l[1].text.as_str(), l[1].old_no, l[1].new_no), ('-', "b", Some(2), None));
        assert_eq!((l[2].kind, l[2].old_no, l[2].new_no), ('+', None, Some(2)));
        assert_eq!((l[3].old_no, l[3].new_no), (Some(3), Some(3)));
        assert_eq!((h[1].old_lines, h[1].lines.len(), h[1].lines[1].new_no), (1, 2, Some(11)));
        let (h, binary) = hunks(b"diff --git a/b b/b\nBinary files a/b and b/b differ\n", false);
        assert!(binary && h.is_empty());
        let (h, _) = hunks(b"@@ -1 +1 @@\n-a\n+abc", true);
        assert_eq!(h[0].lines.len(), 1, "a cut line is left out");
    }
}
