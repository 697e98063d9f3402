//! The connected clients and their outboxes: who is here, what each advertised and holds, and
//! sending to them. A client that stops reading is dropped here at once and handed to the
//! router ([`Clients::take_dropped`]), which detaches it from its sessions and requests.

use super::client::{Client, ClientId, ClientKind, EDITOR, Init, Outbox};
use super::turns::TurnStart;
use bytes::Bytes;
use serde_json::Value;
use std::collections::HashMap;
use zcode_shared::jsonrpc::{self, Id, RpcError};
use zcode_shared::scope::Scope;

/// Every connected client, by id.
#[derive(Default)]
pub struct Clients {
    /// Boxed: the table's slots are as big as an entry, and there are more slots than
    /// clients (a grown table is up to half empty), thousands of them behind the hub.
    map: HashMap<ClientId, Box<Client>>,
    /// Dropped for not reading, not yet detached from sessions and requests.
    dropped: Vec<(ClientId, Box<Client>)>,
}

impl std::ops::Deref for Clients {
    type Target = HashMap<ClientId, Box<Client>>;
    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl Clients {
    /// A client connected.
    pub fn connect(
        &mut self,
        client: ClientId,
        kind: ClientKind,
        scope: Scope,
        device: Option<Box<str>>,
        outbox: Outbox,
    ) {
        self.map.insert(client, Box::new(Client { scope, device, ..Client::new(kind, outbox) }));
    }

    /// One client, to change.
    pub fn get_mut(&mut self, client: &ClientId) -> Option<&mut Client> {
        self.map.get_mut(client).map(|c| &mut **c)
    }

    /// A client's connection ended: it is gone.
    pub fn remove(&mut self, client: &ClientId) -> Option<Box<Client>> {
        self.map.remove(client)
    }

    /// The clients dropped since the last call (not reading: over their queue's limit).
    pub fn take_dropped(&mut self) -> Vec<(ClientId, Box<Client>)> {
        std::mem::take(&mut self.dropped)
    }

    /// Whether `client` is the editor on stdio.
    pub fn is_editor(&self, client: ClientId) -> bool {
        self.map.get(&client).is_some_and(|c| c.kind == ClientKind::Editor)
    }

    /// Ends every connection now (shutdown).
    pub fn kill_all(&self) {
        for c in self.map.values() {
            c.outbox.kill();
        }
    }

    /// The record of who starts a turn now.
    pub fn turn_start(&self, client: ClientId) -> TurnStart {
        let by = match self.map.get(&client).map(|c| c.kind) {
            Some(ClientKind::Editor) => "editor".to_owned(),
            _ if client == EDITOR => "editor".to_owned(),
            _ => format!("remote:{client}"),
        };
        TurnStart { at: zcode_shared::time::now_ms(), by }
    }

    /// The clients whose `initialize` waits for the agent's, moved to `next`.
    pub fn take_waiting_inits(&mut self, next: Init) -> Vec<(ClientId, Id)> {
        self.map
            .iter_mut()
            .filter_map(|(c, client)| match &client.init {
                Init::Waiting(id) => {
                    let id = Id::clone(id);
                    client.init = next.clone();
                    Some((*c, id))
                }
                _ => None,
            })
            .collect()
    }

    /// Sends one line to a client, or holds it while a replay is read for that client.
    pub fn send_to(&mut self, client: ClientId, line: Bytes) {
        let Some(c) = self.map.get_mut(&client) else { return };
        if c.holds > 0 {
            let len = line.len();
            c.held_bytes += len;
            c.held.push(line);
            match c.outbox.limit() {
                Some(limit) if c.held_bytes > limit => self.drop_slow(client),
                Some(_) => {}
                // The editor, never dropped: what is held for it counts like its outbox, in the
                // gate the agent's reader waits on.
                None => crate::bounds::EDITOR.add(len),
            }
            return;
        }
        self.push(client, line);
    }

    /// Sends `line` to each of `targets`.
    pub fn send_all(&mut self, targets: impl IntoIterator<Item = ClientId>, line: &Bytes) {
        for c in targets {
            self.send_to(c, line.clone());
        }
    }

    /// Queues a replay batch for a client; one that asks for replays faster than it reads them
    /// is disconnected ([`Outbox::send_batch`]).
    pub fn push_batch(&mut self, client: ClientId, lines: Vec<Bytes>) {
        let Some(c) = self.map.get(&client) else { return };
        if !c.outbox.send_batch(lines) {
            self.drop_slow(client);
        }
    }

    /// A replay read for `client` was queued: once none is left, what was held meanwhile goes.
    pub fn release_hold(&mut self, client: ClientId) {
        let Some(c) = self.map.get_mut(&client) else { return };
        c.holds = c.holds.saturating_sub(1);
        if c.holds == 0 {
            if c.outbox.limit().is_none() {
                crate::bounds::EDITOR.sub(c.held_bytes);
            }
            c.held_bytes = 0;
            let held = std::mem::take(&mut c.held);
            for line in held {
                self.push(client, line);
            }
        }
    }

    fn drop_slow(&mut self, client: ClientId) {
        let Some(c) = self.map.remove(&client) else { return };
        tracing::warn!(client, "client is not reading (queue over its limit): disconnecting it");
        c.outbox.kill();
        self.dropped.push((client, c));
    }

    /// Queues one line to a client now; a remote client over its queue limit is disconnected.
    fn push(&mut self, client: ClientId, line: Bytes) {
        let Some(c) = self.map.get(&client) else { return };
        if !c.outbox.send(line) {
            self.drop_slow(client);
        }
    }

    /// Sends a JSON-RPC message to a client.
    pub fn send_msg(&mut self, client: ClientId, msg: &Value) {
        self.send_to(client, Bytes::from(msg.to_string()));
    }

    /// Answers a client's request `id`.
    pub fn reply(&mut self, client: ClientId, id: &Id, result: Result<Value, RpcError>) {
        let msg = match result {
            Ok(v) => jsonrpc::response(id, v),
            Err(e) => {
                tracing::debug!(%id, code = e.code, "request refused: {}", e.message.escape_debug());
                jsonrpc::error_response(Some(id), &e)
            }
        };
        self.send_msg(client, &msg);
    }

    /// Answers `id` with a result already serialised (passed byte for byte).
    pub fn reply_raw(&mut self, client: ClientId, id: &Id, result: &serde_json::value::RawValue) {
        self.send_to(client, Bytes::from(jsonrpc::response_line(id, Ok(result))));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn what_is_held_for_the_editor_during_a_replay_counts_in_the_gate_the_agents_reader_waits_on() {
        let _one = crate::bounds::EDITOR_GATE_TESTS.lock().await;
        let gate = &crate::bounds::EDITOR;
        let before = gate.bytes();
        let (out, mut reader) = Outbox::editor();
        let mut clients = Clients::default();
        clients.connect(EDITOR, ClientKind::Editor, Scope::Full, None, out);
        clients.get_mut(&EDITOR).expect("the editor").holds += 1;
        clients.send_to(EDITOR, Bytes::from_static(b"held while the replay is read"));
        assert_eq!(gate.bytes(), before + 29, "held bytes count");
        clients.release_hold(EDITOR);
        assert_eq!(gate.bytes(), before + 29, "counted once, now in the outbox");
        assert_eq!(reader.recv().await, Some(Bytes::from_static(b"held while the replay is read")));
        assert_eq!(gate.bytes(), before, "taken");
    }
}
