//! `zcode-bridge`: what an editor spawns instead of its agent.
//!
//! - [`demo`]: the built-in scripted ACP agent (the embedded default and the tests' fixture).
//!
//! The multiplexer itself (router, upstream, remote endpoint) is built by the bridge issue.

pub mod demo;
