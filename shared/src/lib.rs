//! `zcode-shared`: what the hub, the bridge and the binary all need.
//!
//! - [`jsonrpc`]: the JSON-RPC 2.0 envelope (the only module that knows its shape).
//! - [`env`]: the [`env::Env`] trait settings are read through.
//! - [`paths`]: where config, data, token, logs and port files live.
//! - [`config`]: the one config struct, environment over file over default.
//! - [`token`]: the remote token, its generation and rotation.
//! - [`peer`]: which user holds the other end of a local TCP connection.
//! - [`quota`]: plan quota providers and their caches (`/api/quota`, `account/usage_stats`).
//! - [`registration`]: the payload a bridge registers with (both sides' one definition).
//! - [`logging`]: tracing setup (stderr only: stdout carries ACP).
//! - [`time`]: epoch milliseconds and ISO 8601.
//! - [`rlimit`]: the open-file limit both servers raise at start.
//! - [`text`]: request text made inert for terminals (control sequences out, clean titles).
//! - [`store`]: the SQLite store (journal and tasks index): the only SQL in the workspace.
//! - [`settings`]: the settings API's sections and their safe, locked writes.

pub mod config;
pub mod env;
pub mod jsonrpc;
pub mod logging;
pub mod paths;
pub mod peer;
pub mod quota;
pub mod registration;
pub mod rlimit;
pub mod settings;
pub mod store;
pub mod text;
pub mod time;
pub mod token;

/// The version of this build, reported to peers (`agentInfo`, registration).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
