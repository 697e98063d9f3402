//! Markdown with a `---` frontmatter block of `key: value` lines (subagents, `SKILL.md`): read
//! the flat keys, and edit some while every other line, and the body, stays as written.

/// A parsed file: the frontmatter's lines and the body after it.
#[derive(Clone, Debug)]
pub struct Front {
    lines: Vec<String>,
    body: String,
    had_block: bool,
}

impl Front {
    /// Splits `text`; a file without a frontmatter block has none (and all of it is body).
    pub fn parse(text: &str) -> Front {
        let rest = text.strip_prefix("---\n").or_else(|| text.strip_prefix("---\r\n"));
        if let Some(rest) = rest {
            let mut end = None;
            let mut pos = 0;
            for line in rest.split_inclusive('\n') {
                if line.trim_end() == "---" {
                    end = Some((pos, pos + line.len()));
                    break;
                }
                pos += line.len();
            }
            if let Some((head_end, body_start)) = end {
                let lines = rest[..head_end].lines().map(str::to_owned).collect();
                return Front { lines, body: rest[body_start..].to_owned(), had_block: true };
            }
        }
        Front { lines: Vec::new(), body: text.to_owned(), had_block: false }
    }

    /// Whether the file had a frontmatter block.
    pub fn has_block(&self) -> bool {
        self.had_block
    }

    /// A top-level key's value, unquoted (`"…"` as JSON, `'…'` as YAML single quotes).
    pub fn get(&self, key: &str) -> Option<String> {
        self.lines.iter().find_map(|l| value_of(l, key))
    }

    /// Sets a key: its line replaced in place, else appended; `None` removes it.
    pub fn set(&mut self, key: &str, value: Option<&str>) {
        let at =
            self.lines.iter().position(|l| value_of(l, key).is_some() || l.trim_end() == format!("{key}:"));
        match (at, value) {
            (Some(i), Some(v)) => self.lines[i] = format!("{key}: {}", quote(v)),
            (Some(i), None) => {
                self.lines.remove(i);
            }
            (None, Some(v)) => self.lines.push(format!("{key}: {}", quote(v))),
            (None, None) => {}
        }
        self.had_block = true;
    }

    /// The file again.
    pub fn render(&self) -> String {
        if !self.had_block {
            return self.body.clone();
        }
        let mut out = String::from("---\n");
        for l in &self.lines {
            out.push_str(l);
            out.push('\n');
        }
        out.push_str("---\n");
        out.push_str(&self.body);
        out
    }
}

fn value_of(line: &str, key: &str) -> Option<String> {
    let rest = line.strip_prefix(key)?.strip_prefix(':')?;
    let v = rest.trim();
    if v.is_empty() {
        return None;
    }
    if v.starts_with('"') {
        return serde_json::from_str::<String>(v).ok().or_else(|| Some(v.to_owned()));
    }
    if let Some(inner) = v.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')) {
        return Some(inner.replace("''", "'"));
    }
    Some(v.to_owned())
}

/// Plain when YAML reads it back as the same string, else double-quoted (JSON escapes are
/// YAML's too).
fn quote(v: &str) -> String {
    let plain = !v.is_empty()
        && v.trim() == v
        && !v.contains(": ")
        && !v.contains(" #")
        && !v.starts_with(['"', '\'', '[', '{', '>', '|', '*', '&', '!', '%', '@', '`', '#', '-', '?', ','])
        && !["true", "false", "null", "yes", "no", "on", "off", "~"]
            .contains(&v.to_ascii_lowercase().as_str())
        && v.parse::<f64>().is_err()
        && !v.ends_with(':');
    if plain { v.to_owned() } else { serde_json::Value::from(v).to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits_keep_other_lines_and_the_body() {
        let text = "---\nname: rev\ndescription: \"Reviews: code\"\ntools: [Read, Grep]\n---\nYou review.\n";
        let mut f = Front::parse(text);
        assert_eq!(f.get("description").as_deref(), Some("Reviews: code"));
        assert_eq!(f.get("tools").as_deref(), Some("[Read, Grep]"));
        f.set("model", Some("sonnet"));
        f.set("description", Some("true"));
        assert_eq!(
            f.render(),
            "---\nname: rev\ndescription: \"true\"\ntools: [Read, Grep]\nmodel: sonnet\n---\nYou review.\n"
        );
        assert_eq!(Front::parse(&f.render()).get("description").as_deref(), Some("true"));
        assert!(Front::parse("no block").get("name").is_none());
    }
}
