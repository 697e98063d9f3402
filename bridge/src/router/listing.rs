//! ACP `session/list` as the tasks index sees it, like the hub's history listing: sessions
//! tombstoned (or archived) there are left out, and the index's title (a rename, the automatic
//! one) replaces the agent's. Sessions the index never saw pass as the agent listed them.

use super::{ClientId, Event, Router};
use serde_json::Value;
use tokio::sync::oneshot;
use zcode_shared::jsonrpc::{Id, RawMessage};
use zcode_shared::store::IndexView;

impl Router {
    /// The agent answered a client's `session/list`: the rows go through the index (on the
    /// journal thread, after every write this bridge sent before), then to the client.
    pub(super) fn on_listed(&mut self, client: Option<(ClientId, Id)>, msg: RawMessage) {
        let Some((c, id)) = client else { return };
        let result = msg.result_as::<Value>().filter(|r| msg.error.is_none() && r["sessions"].is_array());
        let Some(result) = result else { return self.answer_client(Some((c, id)), &msg) };
        let ids: Vec<String> = result["sessions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["sessionId"].as_str().map(str::to_owned))
            .collect();
        let (tx, rx) = oneshot::channel();
        self.journal.query(Box::new(move |store| {
            let view = store.map(|st| st.index_view(&ids));
            let _ = tx.send(match view {
                Some(Ok(v)) => v,
                Some(Err(e)) => {
                    tracing::warn!(
                        "session/list: the tasks index is unreadable ({e}): listing as the agent did"
                    );
                    Default::default()
                }
                None => Default::default(),
            });
        }));
        self.tasks.spawn(async move {
            let view = rx.await.unwrap_or_default();
            let result = apply(result, &view);
            Event::Listed { client: c, id, result }
        });
    }
}

/// The agent's listing with the index's verdicts applied.
fn apply(mut result: Value, view: &std::collections::HashMap<String, IndexView>) -> Value {
    if let Some(rows) = result["sessions"].as_array_mut() {
        rows.retain(|r| r["sessionId"].as_str().and_then(|s| view.get(s)).is_none_or(|v| !v.hidden));
        for r in rows {
            let title = r["sessionId"].as_str().and_then(|s| view.get(s)).and_then(|v| v.title.clone());
            if let Some(t) = title {
                r["title"] = Value::String(t);
            }
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn hidden_rows_go_and_index_titles_win() {
        let view = [
            ("gone".to_owned(), IndexView { hidden: true, title: None }),
            ("named".to_owned(), IndexView { hidden: false, title: Some("Renamed".into()) }),
            ("untitled".to_owned(), IndexView { hidden: false, title: None }),
        ]
        .into_iter()
        .collect();
        let listing = json!({"sessions": [
            {"sessionId": "gone", "title": "x"}, {"sessionId": "named", "title": "agent's"},
            {"sessionId": "untitled", "title": "kept"}, {"sessionId": "unknown"}], "nextCursor": "c"});
        assert_eq!(
            apply(listing, &view),
            json!({"sessions": [{"sessionId": "named", "title": "Renamed"},
                {"sessionId": "untitled", "title": "kept"}, {"sessionId": "unknown"}], "nextCursor": "c"})
        );
    }
}
