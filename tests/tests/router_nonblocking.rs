//! The router never reads a file itself: `config.json` (the hooks tree and MCP servers read at
//! an agent start, the default model read at a `session/new`) is read off the router task. A
//! config file that blocks its reader (here a FIFO nobody writes, as a hung network mount
//! would) holds up only what needs it, never the routing of every other client; once it reads,
//! what waited goes on in order.

use serde_json::json;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use zcode_tests::{Bridge, Home, demo_agent};

/// O_NONBLOCK on Linux: opening a FIFO's write end without waiting for a reader.
const O_NONBLOCK: i32 = 0o4000;

/// `config.json` swapped for a FIFO nobody writes; dropping it puts a regular (empty-object)
/// config back and releases every reader blocked on the FIFO, so nothing stays stuck on it
/// (the hub's config watcher reads it too), whether the test passed or not.
struct BlockingConfig {
    config: PathBuf,
    fifo: PathBuf,
}

impl BlockingConfig {
    fn install(home: &Home, name: &str) -> BlockingConfig {
        let config = home.path().join("config.json");
        let fifo = home.path().join(name);
        let status = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
        assert!(status.success(), "mkfifo failed");
        let staged = home.path().join(format!("{name}.link"));
        std::fs::hard_link(&fifo, &staged).expect("a second name for the FIFO");
        std::fs::rename(&staged, &config).expect("config.json becomes the FIFO");
        BlockingConfig { config, fifo }
    }

    /// A regular `config.json` again, then every reader blocked on the FIFO released.
    fn release(&self) {
        let regular = self.config.with_extension("regular");
        std::fs::write(&regular, "{}").expect("a regular config");
        std::fs::rename(&regular, &self.config).expect("config.json is a regular file again");
        release_readers(&self.fifo);
    }
}

/// Opens `fifo` for writing (when someone is blocked reading it), writes `{}` and closes it.
fn release_readers(fifo: &Path) {
    if let Ok(mut w) = std::fs::OpenOptions::new().write(true).custom_flags(O_NONBLOCK).open(fifo) {
        let _ = w.write_all(b"{}");
    }
}

impl Drop for BlockingConfig {
    fn drop(&mut self) {
        self.release();
    }
}

#[test]
fn a_config_file_that_blocks_its_reader_stalls_no_other_client() {
    let home = Home::new();
    let mut bridge = Bridge::start(&home, &demo_agent(0));
    let cwd = tempfile::tempdir().expect("a project directory");

    // The agent starts on the editor's initialize: its hooks tree and MCP servers are read
    // from config.json, which blocks.
    let blocking = BlockingConfig::install(&home, "start.fifo");
    let init = bridge.editor.request("initialize", json!({"protocolVersion": 1, "clientCapabilities": {}}));
    // Meanwhile another client is routed as usual: the router answers it at once.
    let mut remote = bridge.remote();
    let (early, _) = remote.call("session/new", json!({"cwd": cwd.path(), "mcpServers": []}));
    assert!(
        early["error"]["message"].as_str().is_some_and(|m| m.contains("initialize` first")),
        "the router answers another client while config.json cannot be read: {early}"
    );
    // Once the file reads, the agent starts and the editor's initialize is answered.
    blocking.release();
    let (answer, _) = bridge.editor.response_to(&init);
    assert!(answer["result"]["agentCapabilities"].is_object(), "initialize after the read: {answer}");
    drop(blocking);

    // A session/new reads the default model from config.json: that read blocks now.
    let (ok, _) = remote.call("initialize", json!({"protocolVersion": 1, "clientCapabilities": {}}));
    assert!(ok["result"].is_object(), "{ok}");
    let blocking = BlockingConfig::install(&home, "new.fifo");
    let new = bridge.editor.request("session/new", json!({"cwd": cwd.path(), "mcpServers": []}));
    // A request the router answers itself is answered meanwhile.
    let (other, _) = remote.call("session/load_earlier", json!({"sessionId": "elsewhere", "before": "c"}));
    assert!(
        other["error"]["message"].as_str().is_some_and(|m| m.contains("not attached on this connection")),
        "the router answers another client while session/new waits for config.json: {other}"
    );
    blocking.release();
    let (created, _) = bridge.editor.response_to(&new);
    assert!(created["result"]["sessionId"].is_string(), "session/new after the read: {created}");
}
