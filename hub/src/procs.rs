//! What `/proc` says about a process: owner, parent, state and command line. `stop` and
//! `status` check a pid here before they signal it or say what it is.

use std::time::{Duration, Instant};

/// One process, as `/proc/<pid>` showed it.
#[derive(Clone, Debug)]
pub struct Proc {
    /// Its id.
    pub pid: u32,
    /// Its real uid.
    pub uid: u32,
    /// Its parent's id.
    pub ppid: u32,
    /// Its command line.
    pub argv: Vec<String>,
}

impl Proc {
    /// Reads `pid`; `None` when it is gone (or a zombie: it has exited).
    pub fn read(pid: u32) -> Option<Proc> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let mut fields = stat.rsplit(')').next()?.split_whitespace();
        let state = fields.next()?;
        let ppid = fields.next()?.parse().ok()?;
        if state == "Z" {
            return None;
        }
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let uid = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|u| u.parse().ok())?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let argv = cmdline
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        Some(Proc { pid, uid, ppid, argv })
    }

    /// Whether it runs as this user.
    pub fn ours(&self) -> bool {
        self.uid == nix::unistd::getuid().as_raw()
    }

    /// The subcommand when it is a `zcode-acp` (`hub`, `bridge`, `serve`, `up`…), else `None`.
    pub fn role(&self) -> Option<&str> {
        let exe = self.argv.first()?.rsplit('/').next()?;
        exe.starts_with("zcode-acp").then(|| self.argv.get(1).map(String::as_str)).flatten()
    }

    /// Its working directory (a bridge's project), when readable.
    pub fn cwd(&self) -> Option<String> {
        std::fs::read_link(format!("/proc/{}/cwd", self.pid)).ok().map(|p| p.display().to_string())
    }

    /// The data directory its environment resolves to (`ZCODE_ACP_HOME`, else this user's
    /// default): which home a `zcode-acp` belongs to.
    pub fn data_dir(&self) -> Option<std::path::PathBuf> {
        let raw = std::fs::read(format!("/proc/{}/environ", self.pid)).ok()?;
        let env: std::collections::HashMap<String, String> = raw
            .split(|b| *b == 0)
            .filter_map(|kv| {
                String::from_utf8_lossy(kv).split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned()))
            })
            .collect();
        zcode_shared::paths::Paths::resolve(&env).ok().map(|p| p.data_dir)
    }

    /// Its command line, for messages.
    pub fn command_line(&self) -> String {
        self.argv.join(" ")
    }
}

/// Whether `pid` has exited (a zombie its parent has not reaped yet counts as exited).
pub fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rsplit(')').next().and_then(|r| r.split_whitespace().next()) == Some("Z"),
        Err(_) => true,
    }
}

/// The live processes whose parent is `pid`.
pub fn children(pid: u32) -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(Proc::read)
        .filter(|p| p.ppid == pid)
        .collect()
}

/// Every bridge process of this user whose home is `paths` (`zcode-acp bridge`, `serve` or
/// `up`), registered with a hub or not: what `stop` finds when no hub runs to list them.
pub fn bridges_of(paths: &zcode_shared::paths::Paths) -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(Proc::read)
        .filter(|p| p.ours() && matches!(p.role(), Some("bridge" | "serve" | "up")))
        .filter(|p| p.data_dir().as_ref() == Some(&paths.data_dir))
        .collect()
}

/// SIGTERM to each of `pids`, then waits up to `within` for them to exit; returns those that
/// did not (or could not be signalled), with why.
pub fn terminate(pids: &[u32], within: Duration) -> Vec<(u32, String)> {
    let mut failed = Vec::new();
    let mut waiting = Vec::new();
    for &pid in pids {
        let raw = nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap_or(-1));
        match nix::sys::signal::kill(raw, nix::sys::signal::Signal::SIGTERM) {
            Ok(()) => waiting.push(pid),
            Err(e) => failed.push((pid, format!("cannot signal it: {e}"))),
        }
    }
    let deadline = Instant::now() + within;
    loop {
        waiting.retain(|pid| !gone(*pid));
        if waiting.is_empty() || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let why = format!("still running {} s after SIGTERM", within.as_secs());
    failed.extend(waiting.into_iter().map(|pid| (pid, why.clone())));
    failed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_reads_as_ours_and_a_child_is_listed_then_terminated() {
        let me = Proc::read(std::process::id()).expect("this process");
        assert!(me.ours() && me.role().is_none());
        let mut child = std::process::Command::new("sleep").arg("60").spawn().unwrap();
        let listed = children(std::process::id()).iter().any(|p| p.pid == child.id());
        assert!(listed, "the child is not listed");
        // Reaped by this thread: the wait below is what `gone` sees as exited (a zombie).
        assert!(terminate(&[child.id()], Duration::from_secs(10)).is_empty());
        let _ = child.wait();
        assert!(gone(child.id()));
    }
}
