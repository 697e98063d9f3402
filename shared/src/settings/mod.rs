//! The settings API's core, shared by every mount (the hub's `/api/settings/*`, the bridge's
//! loopback `/settings/*`, relayed per instance): what the sections are, how they are read,
//! and the one safe way their files are written ([`safe`]).
//!
//! - [`raw`]: JSON objects kept as read, so a write changes only what it means to.
//! - [`safe`]: the cross-process lock, backups and atomic replacement.

pub mod raw;
pub mod safe;

#[cfg(test)]
mod process_tests;
