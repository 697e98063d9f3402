//! The machine-level sections: config backups (list, restore), and the ZCode-desktop features
//! this machine does not have, answered with the contract's own "not on this machine" shapes:
//! reset cards (`credentials_unavailable`) and app update (`updateAvailable: false`,
//! `currentVersion: null`). Nothing here pretends a success.

use super::safe::{self, Edit, Refusal};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// Every backup a client may restore: `config.json`'s and the subagent files', newest first.
pub fn backups(config: &Path, subagents: Option<&Path>) -> Vec<(PathBuf, PathBuf)> {
    let mut out: Vec<(PathBuf, PathBuf)> =
        safe::backups_of(config).into_iter().map(|b| (b, config.to_owned())).collect();
    if let Some(dir) = subagents {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter_map(|n| n.split_once(".bak-").map(|(orig, _)| orig.to_owned()))
            .filter(|orig| orig.ends_with(".md") || orig.ends_with(".md.disabled"))
            .map(|orig| dir.join(orig))
            .collect();
        files.sort();
        files.dedup();
        for f in files {
            out.extend(safe::backups_of(&f).into_iter().map(|b| (b, f.clone())));
        }
    }
    out.sort_by_key(|b| std::cmp::Reverse(stamp(&b.0)));
    out
}

fn stamp(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().rsplit_once(".bak-").map_or(String::new(), |(_, s)| s.to_owned()))
        .unwrap_or_default()
}

/// The `backups` read.
pub fn read_backups(list: &[(PathBuf, PathBuf)]) -> Value {
    let rows: Vec<Value> = list
        .iter()
        .map(|(b, target)| {
            let size = std::fs::metadata(b).map(|m| m.len()).unwrap_or(0);
            json!({"path": b.display().to_string(), "file": target.display().to_string(),
                   "createdAt": stamp(b), "size": size, "effect": "needs-restart"})
        })
        .collect();
    json!({"backups": rows})
}

/// `POST /settings/backups/restore {path}`: `path` must be one of `list`; the current file is
/// backed up first; `check` validates the backup's text for its file.
pub fn restore(
    list: &[(PathBuf, PathBuf)],
    path: &str,
    check: impl FnOnce(&Path, &str) -> Result<(), Refusal>,
) -> Result<PathBuf, Refusal> {
    let Some((backup, target)) = list.iter().find(|(b, _)| b.as_os_str() == path) else {
        return Err(Refusal::missing("no such backup: use a `path` from GET /settings/backups"));
    };
    let text = std::fs::read_to_string(backup).map_err(|e| Refusal::io(backup, &e))?;
    check(target, &text)?;
    safe::update(target, |_| Ok((Edit::Write(text), target.clone())))
}

/// The reset-card eligibility the `all` snapshot carries.
pub fn reset_eligibility() -> Value {
    json!({"providers": [], "credentialsAvailable": false, "reason": "credentials_unavailable"})
}

/// Why no reset card can be read or spent here (503, `credentials_unavailable`).
pub fn no_credentials() -> Refusal {
    Refusal::new(
        503,
        "credentials_unavailable: this machine has no ZCode credential store, so no coding-plan reset card can be read or used",
    )
}

/// The reset-card writes: the body is checked as the contract says, then [`no_credentials`].
pub fn reset_write(action: &str, body: &Value) -> Refusal {
    let Some(pid) = body["providerId"].as_str().filter(|p| !p.is_empty()) else {
        return Refusal::bad("`providerId` is required");
    };
    if action == "use" {
        if !pid.starts_with("account:") {
            return Refusal::new(403, "reset cards exist only for `account:*` providers");
        }
        if !matches!(body["resetType"].as_str(), Some("FIVE_HOUR" | "WEEK")) {
            return Refusal::bad("`resetType` must be FIVE_HOUR or WEEK");
        }
        for k in ["nonce", "idempotencyKey"] {
            if body[k].as_str().is_none_or(str::is_empty) {
                return Refusal::bad(format!("`{k}` is required"));
            }
        }
    }
    no_credentials()
}

/// `GET /settings/app-update?channel=`: no ZCode desktop app on this machine.
pub fn app_update(channel: Option<&str>) -> Result<Value, Refusal> {
    let channel = channel_of(channel)?;
    Ok(json!({
        "updateAvailable": false, "currentVersion": null, "latestVersion": null,
        "channel": channel, "platform": null, "appPath": null, "releaseName": null,
        "releaseNotes": null, "files": [],
        "install": {"stage": "idle", "version": null, "receivedBytes": 0, "totalBytes": null},
    }))
}

/// `POST /settings/app-update/install`: checked, then refused (409): nothing is installed here.
pub fn app_install(body: &Value) -> Refusal {
    if let Err(r) = channel_of(body["channel"].as_str()) {
        return r;
    }
    let (Some(_), Some(url)) = (body["version"].as_str(), body["url"].as_str()) else {
        return Refusal::bad("`version` and `url` are required strings (from GET /settings/app-update)");
    };
    if !url.starts_with("https://cdn-zcode.z.ai/") {
        return Refusal::bad("only https://cdn-zcode.z.ai/ URLs are accepted");
    }
    Refusal::new(409, "no ZCode desktop app is installed on this machine: there is nothing to update")
}

fn channel_of(c: Option<&str>) -> Result<&str, Refusal> {
    match c {
        None | Some("stable") => Ok("stable"),
        Some("preview") => Ok("preview"),
        Some(_) => Err(Refusal::bad("`channel` must be stable or preview")),
    }
}
