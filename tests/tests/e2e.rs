//! The end-to-end suite as one test binary (one link instead of one per file): each file of
//! `tests/tests/` is a module, so a test is named `FILE::test_name` and `scripts/test FILE`
//! selects one file.

mod acp_negotiation;
mod acpx_demo;
mod bridge_acpx;
mod bridge_failures;
mod bridge_multi;
mod chat;
mod cli;
mod cli_stop;
mod cli_up;
mod demo_agent;
mod discovery;
mod editor_stdio;
mod fanout_load;
mod files;
mod glance;
mod hooks;
mod hooks_settings;
mod hub_http;
mod hub_lifecycle;
mod hub_nonblocking;
mod hub_registry;
mod hub_relay;
mod hub_spawn;
mod hub_upgrade;
mod journal;
mod journal_exact;
mod lifecycle;
mod listing;
mod projects;
mod python_sdk;
mod quota;
mod readme_hooks;
mod replay_backpressure;
mod security_bridge;
mod security_confine;
mod security_inert;
mod security_peer;
mod security_preauth;
mod settings_api;
mod structure;
mod turn_end;
mod usage;
mod web_client;
mod web_push;
