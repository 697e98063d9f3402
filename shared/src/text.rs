//! Text from a request made inert for a terminal: terminal control sequences removed
//! ([`strip_controls`]) and session titles normalized to one clean line ([`title`],
//! [`title_of`]). Whatever a peer sends, what these return cannot retitle a pane, move a cursor
//! or ring a bell.

/// The longest title, in characters.
pub const TITLE_MAX: usize = 80;

/// `text` without terminal control sequences: CSI (`ESC [` or U+009B … final byte), OSC
/// (`ESC ]` or U+009D … BEL or ST), DCS/SOS/PM/APC (`ESC P`/`X`/`^`/`_` or their C1 forms …
/// ST), other `ESC` sequences, and every remaining C0/C1 control and DEL, except newline and
/// tab. An unterminated sequence swallows the rest of `text`, so a sequence split across two
/// chunks leaves no escape behind in either.
pub fn strip_controls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' | '\t' => out.push(c),
            '\x1b' => match chars.next() {
                Some('[') => skip_csi(&mut chars),
                Some(']') => skip_string(&mut chars, true),
                Some('P' | 'X' | '^' | '_') => skip_string(&mut chars, false),
                // nF: intermediates, then one final byte (`ESC ( B`).
                Some(' '..='/') => {
                    while chars.next_if(|c| (' '..='/').contains(c)).is_some() {}
                    chars.next();
                }
                // Two-character sequences (`ESC c`, `ESC 7`) and a lone trailing ESC.
                _ => {}
            },
            '\u{9b}' => skip_csi(&mut chars),
            '\u{9d}' => skip_string(&mut chars, true),
            '\u{90}' | '\u{98}' | '\u{9e}' | '\u{9f}' => skip_string(&mut chars, false),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

/// Skips a CSI's parameter and intermediate bytes and its final byte (`@`–`~`); anything
/// else ends it (and is dropped).
fn skip_csi(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    for c in chars.by_ref() {
        if !(' '..='?').contains(&c) {
            return;
        }
    }
}

/// Skips a control string up to its terminator: ST (`ESC \` or U+009C), and BEL for OSC.
fn skip_string(chars: &mut std::iter::Peekable<std::str::Chars<'_>>, bel_ends: bool) {
    while let Some(c) = chars.next() {
        match c {
            '\u{9c}' => return,
            '\x07' if bel_ends => return,
            '\x1b' => {
                chars.next_if_eq(&'\\');
                return;
            }
            _ => {}
        }
    }
}

/// A title from any text: control sequences removed, every run of whitespace (newlines too)
/// one space, trimmed, at most [`TITLE_MAX`] characters; a longer one is cut at the last word
/// that fits and ends with `…` (mid-word only when one word fills most of it). Idempotent.
pub fn title(text: &str) -> String {
    let flat = strip_controls(text).split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= TITLE_MAX {
        return flat;
    }
    let head: String = flat.chars().take(TITLE_MAX - 1).collect();
    // The cut at a word, when the next character starts a new one or a space lies late enough.
    let at_word = flat.chars().nth(TITLE_MAX - 1) == Some(' ');
    let cut = match head.rfind(' ') {
        _ if at_word => head.as_str(),
        Some(i) if head[..i].chars().count() > TITLE_MAX / 2 => &head[..i],
        _ => head.as_str(),
    };
    format!("{}…", cut.trim_end_matches(|c: char| c.is_whitespace() || ",;:-".contains(c)))
}

/// A title from prompt text: its first line with something visible, as [`title`].
pub fn title_of(text: &str) -> String {
    text.lines().map(title).find(|t| !t.is_empty()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_go_text_stays() {
        for (input, want) in [
            ("plain\ttext\n", "plain\ttext\n"),
            ("a\x1b]0;evil\x07b", "ab"),
            ("a\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\b", "alinkb"),
            ("\x1b[2J\x1b[1;31mred\x1b[0m", "red"),
            ("a\u{9b}31mb\u{9d}0;t\u{9c}c", "abc"),
            ("a\x1bPq#;2;0\x1b\\b", "ab"),
            ("a\x1b(Bb\x1bcc\x1b7d", "abcd"),
            ("bell\x07 del\x7f cr\r bs\x08 nul\0", "bell del cr bs nul"),
            ("cut \x1b]0;never ends", "cut "),
            ("trailing\x1b", "trailing"),
            ("é ünïcödé 🙂 #(x) $(y) `z`", "é ünïcödé 🙂 #(x) $(y) `z`"),
        ] {
            assert_eq!(strip_controls(input), want, "{input:?}");
        }
    }

    #[test]
    fn no_control_survives_any_short_mix() {
        let alphabet = [
            '\x1b', '[', ']', 'P', '\\', '\x07', '\u{9b}', '\u{9c}', '\u{9d}', '\u{90}', '(', '0', ';', 'm',
            'a', '\n', '\r', '\x7f', '\u{85}', 'é',
        ];
        let n = alphabet.len();
        for i in 0..n * n * n * n {
            let s: String =
                [i % n, i / n % n, i / n / n % n, i / n / n / n % n].iter().map(|&k| alphabet[k]).collect();
            let out = strip_controls(&s);
            assert!(!out.chars().any(|c| c.is_control() && c != '\n' && c != '\t'), "{s:?} -> {out:?}");
            let t = title(&s);
            assert!(!t.chars().any(char::is_control), "{s:?} -> {t:?}");
            assert_eq!(title(&t), t);
        }
    }

    #[test]
    fn titles() {
        assert_eq!(title_of("\n  Fix   the\tbug \nnext"), "Fix the bug");
        assert_eq!(title_of("\x1b]0;\x07\n second"), "second");
        assert_eq!(title_of(&"x".repeat(4096)).chars().count(), TITLE_MAX);
        // A long title is cut at a word, with an ellipsis.
        let long = "Refactor the settings screen so that every card keeps its distance and the restart dialog speaks";
        assert_eq!(
            title(long),
            "Refactor the settings screen so that every card keeps its distance and the…"
        );
        assert_eq!(title(&title(long)), title(long));
        assert_eq!(title(&"word ".repeat(16)), "word ".repeat(16).trim_end());
        assert_eq!(title(&"word ".repeat(17)).chars().count(), TITLE_MAX);
        assert_eq!(title("a\nb\x1b[31m c\x07"), "a b c");
        assert_eq!(title(""), "");
        let t = title("\u{9b}1m ok \x1b]2;x\x1b\\ fine");
        assert_eq!(title(&t), t);
    }
}
