//! zcode-hub: the hub library (token auth, registry, relay) arrives with the hub issue.
