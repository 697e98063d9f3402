//! The end-to-end suite as one test binary (one link instead of one per file): each file of
//! `tests/tests/` is a module, so a test is named `FILE::test_name` and `scripts/test FILE`
//! selects one file. The test harness starts tests in the order of their names: the browser
//! tests, the longest by far (one test running all of `tests/web/`), are `a_browser::` so that
//! they start first (`_` sorts before every letter) and the rest runs beside them: as
//! `browser::` they started only after the 42 tests named before them (~30 s on two cores).

mod a_browser;
mod acp_negotiation;
mod acpx_demo;
mod agent_failures;
mod agents_pick;
mod bounds;
mod bridge_acpx;
mod bridge_failures;
mod bridge_multi;
mod changes;
mod chat;
mod cli;
mod cli_stop;
mod cli_up;
mod demo_agent;
mod device_keys;
mod devices;
mod discovery;
mod editor_stdio;
mod fanout_load;
mod files;
mod glance;
mod harness;
mod home_private;
mod hooks;
mod hooks_settings;
mod hub_http;
mod hub_lifecycle;
mod hub_nonblocking;
mod hub_registry;
mod hub_relay;
mod hub_spawn;
mod hub_upgrade;
mod images;
mod journal;
mod journal_exact;
mod journal_locked;
mod lifecycle;
mod listing;
mod log_context;
mod ping;
mod projects;
mod prompt_queue;
mod python_sdk;
mod quota;
mod readme_hooks;
mod replay_backpressure;
mod resume;
mod router_nonblocking;
mod security_bridge;
mod security_confine;
mod security_inert;
mod security_peer;
mod security_preauth;
mod service;
mod settings_api;
mod structure;
mod tombstones;
mod turn_end;
mod usage;
mod watch_scope;
mod web_push;
