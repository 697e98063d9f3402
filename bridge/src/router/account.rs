//! ACP `account/usage_stats` (and `_account/usage_stats`): answered by the bridge itself for
//! any client after `initialize`, no session needed, never forwarded to the agent. The payload
//! comes from [`crate::quota::QuotaSource`] on a task of its own; the answer comes back as
//! [`Event::Answer`].

use super::{ClientId, Event, Router};
use zcode_shared::jsonrpc::Id;

impl Router {
    pub(super) fn on_usage_stats(&mut self, client: ClientId, id: Id) {
        let source = self.tasks.quota.clone();
        self.tasks.spawn(async move {
            let result = source.payload().await;
            Event::Answer { client, id, result }
        });
    }
}
