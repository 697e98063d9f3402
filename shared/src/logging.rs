//! Tracing setup. Logs go to stderr only: the stdout of `bridge` and `demo-agent` carries ACP.
//! fmt's default format puts a line's spans first (`conn{id=7 peer=…}:relay{instance="…"}: …`):
//! that is how a line names the connection, client, session or agent it is about.

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber: `RUST_LOG` if set, else `debug` when `debug` is true, else
/// `info` for our crates and `warn` for the rest. Safe to call more than once.
pub fn init(debug: bool) {
    let default = if debug { "debug" } else { "warn,zcode_shared=info,zcode_bridge=info,zcode_hub=info" };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}
