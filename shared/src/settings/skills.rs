//! Skills: directories with a `SKILL.md` (frontmatter `name`, `description`) in the agent's
//! own skills directory (default `~/.claude/skills`). A disabled skill's file is renamed
//! `SKILL.md.disabled`: an agent that looks for `<dir>/*/SKILL.md` no longer finds it, and the
//! directory (the path clients name it by) stays where it is.

use super::front::Front;
use super::safe::{self, Refusal};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

const ON: &str = "SKILL.md";
const OFF: &str = "SKILL.md.disabled";

/// Files and bytes a copy may take.
const COPY_FILES: usize = 1000;
const COPY_BYTES: u64 = 20 * 1024 * 1024;

/// The `skills` read.
pub fn read(dir: &Path) -> Value {
    let mut rows: Vec<(String, Value)> = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().filter_map(Result::ok) {
        let path = e.path();
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let (file, enabled) = match (path.join(ON).is_file(), path.join(OFF).is_file()) {
            (true, _) => (path.join(ON), true),
            (false, true) => (path.join(OFF), false),
            _ => continue,
        };
        let dir_name = e.file_name().to_string_lossy().into_owned();
        let front = std::fs::read_to_string(&file).map(|t| Front::parse(&t));
        let (name, description, error) = match &front {
            Ok(f) => (
                f.get("name").unwrap_or_else(|| dir_name.clone()),
                f.get("description"),
                f.get("description").is_none().then_some("SKILL.md has no description"),
            ),
            Err(_) => (dir_name.clone(), None, Some("SKILL.md is unreadable")),
        };
        rows.push((
            dir_name,
            json!({"name": name, "description": description, "path": path.display().to_string(),
                   "enabled": enabled, "scope": "user", "error": error}),
        ));
    }
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    json!({"dir": dir.display().to_string(), "skills": rows.into_iter().map(|(_, v)| v).collect::<Vec<_>>()})
}

/// A skill directory named by a client: an existing direct child of `dir` (no symlink), never
/// anything else.
fn skill_dir(dir: &Path, path: &str) -> Result<PathBuf, Refusal> {
    let p = Path::new(path);
    let name = p.file_name().ok_or_else(|| Refusal::bad("`path` must name a skill directory"))?;
    let parent_ok = p.parent().is_some_and(|parent| {
        parent == dir
            || (std::fs::canonicalize(parent).ok().is_some()
                && std::fs::canonicalize(parent).ok() == std::fs::canonicalize(dir).ok())
    });
    if !parent_ok || name.to_string_lossy().starts_with('.') {
        return Err(Refusal::bad(format!(
            "`path` must be a skill directory directly under {}",
            dir.display()
        )));
    }
    let target = dir.join(name);
    match std::fs::symlink_metadata(&target) {
        Ok(m) if m.is_dir() && (target.join(ON).is_file() || target.join(OFF).is_file()) => Ok(target),
        _ => Err(Refusal::missing(format!("no skill at {path}"))),
    }
}

/// `POST /settings/skills/enable {path, enable}`.
pub fn enable(dir: &Path, path: &str, enable: bool) -> Result<(), Refusal> {
    let d = skill_dir(dir, path)?;
    let _lock = safe::lock(&d.join(ON))?;
    let (from, to) = if enable { (d.join(OFF), d.join(ON)) } else { (d.join(ON), d.join(OFF)) };
    if !from.is_file() {
        return Ok(());
    }
    std::fs::rename(&from, &to).map_err(|e| Refusal::io(&from, &e))
}

/// `DELETE /settings/skills/{path}`: the directory and what is in it.
pub fn delete(dir: &Path, path: &str) -> Result<(), Refusal> {
    let d = skill_dir(dir, path)?;
    let _lock = safe::lock(&d.join(ON))?;
    std::fs::remove_dir_all(&d).map_err(|e| Refusal::io(&d, &e))
}

/// `POST /settings/skills/copy-to-user {path}`: a skill directory elsewhere (a workspace's)
/// copied into the user's skills directory; regular files and directories only.
pub fn copy_to_user(dir: &Path, path: &str) -> Result<String, Refusal> {
    let src = Path::new(path);
    if !src.is_absolute() || !src.join(ON).is_file() {
        return Err(Refusal::bad("`path` must be an absolute skill directory (with a SKILL.md)"));
    }
    let name = src.file_name().ok_or_else(|| Refusal::bad("`path` must name a directory"))?;
    let target = dir.join(name);
    if target.exists() {
        return Err(Refusal::new(409, format!("{} already exists", target.display())));
    }
    crate::paths::Paths::ensure_private_dir(dir).map_err(|e| Refusal::io(dir, &e))?;
    let mut budget = (COPY_FILES, COPY_BYTES);
    if let Err(e) = copy_tree(src, &target, &mut budget) {
        let _ = std::fs::remove_dir_all(&target);
        return Err(e);
    }
    Ok(target.display().to_string())
}

fn copy_tree(src: &Path, dst: &Path, budget: &mut (usize, u64)) -> Result<(), Refusal> {
    std::fs::create_dir(dst).map_err(|e| Refusal::io(dst, &e))?;
    for e in std::fs::read_dir(src).map_err(|e| Refusal::io(src, &e))?.filter_map(Result::ok) {
        let (from, to) = (e.path(), dst.join(e.file_name()));
        let meta = std::fs::symlink_metadata(&from).map_err(|e| Refusal::io(&from, &e))?;
        if budget.0 == 0 || budget.1 < meta.len() {
            return Err(Refusal::bad("the skill is too large to copy (1000 files, 20 MiB at most)"));
        }
        budget.0 -= 1;
        if meta.is_dir() {
            copy_tree(&from, &to, budget)?;
        } else if meta.is_file() {
            budget.1 -= meta.len();
            std::fs::copy(&from, &to).map_err(|e| Refusal::io(&from, &e))?;
        }
        // Symlinks and special files are left out: a copy never reaches outside the skill.
    }
    Ok(())
}
