//! Any other vendor: a user-configured command (`quota.commands.<name>`) that prints one
//! section's JSON, `{kind, items|windows, …}`. It runs without a shell, stdin closed, stderr
//! discarded, in its own process group, which is killed when it overruns its timeout or its
//! output passes [`OUTPUT_CAP`]. Anything but one JSON object with a known `kind` (and, for
//! `success`, an `items` or `windows` array whose reset times are epoch ms or RFC 3339) is
//! `unavailable`, with an `error` that says what was expected.

use super::{CommandSpec, Fetch, Kind, Provider};
use crate::procgroup::Group;
use serde_json::Value;
use std::process::Stdio;
use tokio::io::AsyncReadExt;

/// The most bytes of output read.
pub const OUTPUT_CAP: usize = 256 * 1024;

/// A command provider.
pub struct CommandProvider {
    spec: CommandSpec,
}

impl CommandProvider {
    /// The provider for `spec`.
    pub fn new(spec: CommandSpec) -> CommandProvider {
        CommandProvider { spec }
    }
}

impl Provider for CommandProvider {
    fn name(&self) -> &str {
        &self.spec.name
    }

    fn fetch(&self) -> Fetch<'_> {
        Box::pin(async move {
            match run(&self.spec).await {
                Ok(out) => section(&out),
                Err(why) => {
                    tracing::warn!(provider = %self.spec.name, "quota command: {why}");
                    Kind::Unavailable.section()
                }
            }
        })
    }
}

/// The command's output (at most [`OUTPUT_CAP`] bytes), or why there is none.
async fn run(spec: &CommandSpec) -> Result<Vec<u8>, String> {
    let mut cmd = std::process::Command::new(&spec.command);
    cmd.args(&spec.args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null());
    let spawned = Group::spawn(&mut cmd).map_err(|e| format!("cannot start {:?}: {e}", spec.command))?;
    // Dropping the group on any way out kills what is left of it and reaps the command.
    let group = spawned.group;
    let stdout = spawned.stdout.ok_or("no stdout")?;
    let mut stdout =
        tokio::process::ChildStdout::from_std(stdout).map_err(|e| format!("reading its output: {e}"))?;
    let read = async {
        let mut out = Vec::new();
        let n = (&mut stdout).take(OUTPUT_CAP as u64 + 1).read_to_end(&mut out).await;
        n.map(|_| out).map_err(|e| format!("reading its output: {e}"))
    };
    let out = match tokio::time::timeout(spec.timeout, read).await {
        Ok(r) => r,
        Err(_) => return Err(format!("no answer within {} ms: killed", spec.timeout.as_millis())),
    };
    match out {
        Ok(o) if o.len() > OUTPUT_CAP => Err(format!("more than {OUTPUT_CAP} bytes of output: killed")),
        Ok(o) => {
            // Its output is complete; whatever it left running in its group goes with it.
            let _ = tokio::time::timeout(spec.timeout, group.exited()).await;
            Ok(o)
        }
        Err(e) => Err(e),
    }
}

/// The section a command printed, or unavailable. A window's reset time (`resetsAt`,
/// `nextResetTime`) may be epoch milliseconds or an RFC 3339 string, which becomes epoch
/// milliseconds (the contract's type); anything else makes the section unavailable with an
/// `error` that says the expected type.
pub fn section(out: &[u8]) -> Value {
    let Ok(mut v) = serde_json::from_slice::<Value>(out) else {
        return unusable("its output is not one JSON object".into());
    };
    let kind = v.get("kind").and_then(Value::as_str).and_then(Kind::parse);
    let lists = ["items", "windows"].iter().any(|k| v.get(k).is_some_and(Value::is_array));
    match kind {
        Some(Kind::Success) if lists => match resets_to_ms(&mut v) {
            Ok(()) => v,
            Err(why) => unusable(why),
        },
        Some(Kind::Success) => unusable("a success needs an `items` or `windows` array".into()),
        None => unusable(
            "`kind` must be one of success, not_configured, auth_error, rate_limited, unavailable".into(),
        ),
        Some(k) => k.section(),
    }
}

/// An unavailable section that says why (shown by the card; logged too).
fn unusable(why: String) -> Value {
    tracing::warn!("quota command: {why}");
    let mut s = Kind::Unavailable.section();
    s["error"] = Value::from(why);
    s
}

/// Every window's reset time as epoch milliseconds, or what is wrong with one.
fn resets_to_ms(v: &mut Value) -> Result<(), String> {
    for list in ["items", "windows"] {
        let Some(rows) = v.get_mut(list).and_then(Value::as_array_mut) else { continue };
        for row in rows.iter_mut().filter_map(Value::as_object_mut) {
            let name = row.get("key").or(row.get("label")).and_then(Value::as_str).unwrap_or("?");
            let name: String = crate::text::strip_controls(name).chars().take(40).collect();
            for field in ["resetsAt", "nextResetTime"] {
                let Some(at) = row.get(field) else { continue };
                let ms = match at {
                    Value::Null => continue,
                    Value::Number(n) => n.as_u64(),
                    Value::String(s) => crate::time::parse_rfc3339(s),
                    _ => None,
                };
                match ms {
                    Some(ms) => {
                        row.insert(field.to_owned(), Value::from(ms));
                    }
                    None => {
                        let got: String =
                            crate::text::strip_controls(&at.to_string()).chars().take(60).collect();
                        return Err(format!(
                            "window {name:?}: `{field}` must be epoch milliseconds (a whole number) or an \
                             RFC 3339 time such as \"2026-12-03T10:00:00Z\"; got {got}"
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}
