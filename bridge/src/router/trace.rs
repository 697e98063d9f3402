//! The bridge's tracing spans, so that every log line says whose it is: `client{id=3}` (the
//! editor's is `client{id=editor}`), `session{id=…}`, `agent{generation=2}`. Spans are made per
//! connection, agent process or routed event; an agent's notifications (the hot path) reuse one
//! span per agent process, and nothing long-lived holds a span per idle client (a span costs
//! the subscriber a few hundred bytes, an idle remote client ~2 KiB in all).

use super::{ClientId, EDITOR, Event};
use tracing::Span;
use zcode_shared::jsonrpc::RawKind;

/// A client's span.
pub fn client(id: ClientId) -> Span {
    match id {
        EDITOR => tracing::info_span!(parent: None, "client", id = %"editor"),
        id => tracing::info_span!(parent: None, "client", id),
    }
}

/// An agent process's span (a restarted agent is a new generation).
pub fn agent(generation: u64) -> Span {
    tracing::info_span!(parent: None, "agent", generation)
}

/// The router's spans: the span an event is handled in.
#[derive(Default)]
pub struct Spans {
    /// The current agent's span, kept: its notifications are the router's busiest events.
    agent: Option<(u64, Span)>,
    /// The span of the last client message, kept for the next one from the same client about
    /// the same session (a client's messages come in runs): making a span per message cost
    /// ~3 µs of a 15 µs round trip (`scripts/bench-bridge`). One, not one per client: an idle
    /// client holds none.
    last: Option<(ClientId, Option<String>, Span)>,
}

impl Spans {
    /// The span `event` is handled in: its client's or agent's, with its session's inside
    /// where the event names one (a client's message, an agent's request: an agent's
    /// notifications are not parsed for it). [`Span::none`] for the bridge's own events.
    pub fn of(&mut self, event: &Event) -> Span {
        match event {
            Event::Frame { client: c, msg } => {
                let sid = msg.as_ref().ok().and_then(|m| m.session_id());
                match &self.last {
                    Some((last, s, span)) if last == c && *s == sid => span.clone(),
                    _ => {
                        let span = within(client(*c), sid.as_deref());
                        self.last = Some((*c, sid, span.clone()));
                        span
                    }
                }
            }
            Event::Replay { client: c, session, .. } => within(client(*c), Some(session)),
            Event::Closed { client: c }
            | Event::Listed { client: c, .. }
            | Event::Answer { client: c, .. } => client(*c),
            Event::Agent { generation, msg } => {
                let sid =
                    msg.as_ref().ok().filter(|m| m.kind() == RawKind::Request).and_then(|m| m.session_id());
                within(self.agent(*generation), sid.as_deref())
            }
            Event::AgentExited { generation, .. } | Event::Local { generation, .. } => {
                self.agent(*generation)
            }
            Event::Lifecycle { session, .. } | Event::SessionRoot { session, .. } => {
                tracing::info_span!(parent: None, "session", id = session.as_str())
            }
            _ => Span::none(),
        }
    }

    fn agent(&mut self, generation: u64) -> Span {
        match &self.agent {
            Some((g, span)) if *g == generation => span.clone(),
            _ => self.agent.insert((generation, agent(generation))).1.clone(),
        }
    }
}

/// `parent`, or a session's span inside it.
fn within(parent: Span, session: Option<&str>) -> Span {
    match session {
        Some(id) => tracing::info_span!(parent: &parent, "session", id),
        None => parent,
    }
}
