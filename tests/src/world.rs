//! A hub with projects: a private home whose `config.json` names the agents, a project root, a
//! private tmux directory (`TMUX_TMPDIR`, `TMUX` unset: the user's default tmux server is never
//! touched) and a hub. Dropped, every bridge the hub lists and this home's tmux servers go
//! with it (a live bridge would start another hub in the removed home).

use crate::Home;
use crate::hub::{AUTH, Hub, http};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The home, its project root and tmux directory, and its hub.
pub struct World {
    /// The private home (its `config.json` names the agents).
    pub home: Home,
    /// The project root (`ZCODE_ACP_PROJECT_ROOTS`).
    pub root: tempfile::TempDir,
    /// `TMUX_TMPDIR` of everything here: where a default tmux server would put its socket.
    pub tmux_tmp: tempfile::TempDir,
    /// The hub, started by the test.
    pub hub: Hub,
}

/// The demo agent (no delay between chunks) as an entry of the config's `agents`.
pub fn demo() -> Value {
    json!({"command": crate::bin(), "args": ["demo-agent", "--delay-ms", "0"]})
}

impl World {
    /// `agents`: the config's `agents` object; `extra`: more of the hub's environment (after
    /// the defaults: a name given again wins). The hub opens no terminal window unless `extra`
    /// sets `ZCODE_ACP_HUB_TERMINAL`; its serve bridges idle out 5 s after their last client.
    pub fn start(agents: Value, extra: &[(&str, &str)]) -> World {
        let home = Home::new();
        std::fs::write(home.path().join("config.json"), json!({ "agents": agents }).to_string())
            .expect("write config.json");
        let root = tempfile::tempdir().expect("a project root");
        let tmux_tmp = tempfile::tempdir().expect("a tmux directory");
        let (roots, tmp) = (root.path().display().to_string(), tmux_tmp.path().display().to_string());
        let mut env = vec![
            ("ZCODE_ACP_PROJECT_ROOTS", roots.as_str()),
            ("ZCODE_ACP_REMOTE_PORT", "0"),
            ("ZCODE_ACP_HEARTBEAT_MS", "200"),
            ("ZCODE_ACP_HUB_TERMINAL", "0"),
            ("ZCODE_ACP_SERVE_IDLE_MS", "5000"),
            ("TMUX_TMPDIR", tmp.as_str()),
            ("TMUX", ""),
        ];
        env.extend_from_slice(extra);
        let hub = Hub::start(&home, &env);
        World { home, root, tmux_tmp, hub }
    }

    /// Directory `name` under the project root, created, canonical.
    pub fn project(&self, name: &str) -> PathBuf {
        let p = self.root.path().join(name);
        std::fs::create_dir_all(&p).expect("a project directory");
        std::fs::canonicalize(&p).expect("canonical")
    }

    /// The tmux socket the hub uses for this home.
    pub fn socket(&self) -> PathBuf {
        self.home.path().join("run").join("tmux.sock")
    }

    /// `tmux -S <home socket> {args}`: its stdout.
    pub fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-S")
            .arg(self.socket())
            .args(args)
            .env("TMUX_TMPDIR", self.tmux_tmp.path())
            .env_remove("TMUX")
            .stderr(Stdio::null())
            .output()
            .expect("tmux");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for World {
    fn drop(&mut self) {
        let list = http(self.hub.port, "GET", "/api/instances", &[AUTH], b"");
        let list: Value = serde_json::from_slice(&list.body).unwrap_or_default();
        for i in list.as_array().into_iter().flatten() {
            let pid = i["id"].as_str().and_then(|s| s.parse::<u32>().ok());
            if let Some(pid) = pid.filter(|&pid| crate::runs_in(pid, self.home.path())) {
                let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            }
        }
        // Whatever happened, this test's tmux servers (and the chats in them) go with it.
        let _ = self.tmux(&["kill-server"]);
        let _ = Command::new("tmux")
            .arg("kill-server")
            .env("TMUX_TMPDIR", self.tmux_tmp.path())
            .env_remove("TMUX")
            .stderr(Stdio::null())
            .status();
    }
}
