//! The router host: adapts the router's picker to messages.
//!
//! Requests from clients go to the picked engine; completions and rejections pass back through
//! to their client; an abort goes to the engine the call was sent to. The router learns nothing
//! of the engines except what passes through it.

use std::collections::BTreeMap;

use blis_kernel::{Actor, ActorId, Context, Event, Outbox, SimDuration, TimeAdvance};
use blis_router::RoundRobin;

use crate::message::ClusterMessage;

/// The router in front of the engines.
pub struct RouterHost {
    engines: Vec<ActorId>,
    engine_names: Vec<String>,
    picker: RoundRobin,
    delay_to_engine: SimDuration,
    delay_to_client: SimDuration,
    routed: u64,
    /// Where each unanswered call went, for its abort.
    destinations: BTreeMap<u64, ActorId>,
}

impl RouterHost {
    /// A round-robin router over `engines` (with their names, in name order) with one-way delays
    /// to each side.
    pub fn new(
        engines: Vec<(ActorId, String)>,
        delay_to_engine: SimDuration,
        delay_to_client: SimDuration,
    ) -> RouterHost {
        let (engines, engine_names) = engines.into_iter().unzip();
        RouterHost {
            engines,
            engine_names,
            picker: RoundRobin::default(),
            delay_to_engine,
            delay_to_client,
            routed: 0,
            destinations: BTreeMap::new(),
        }
    }
}

impl Actor<ClusterMessage> for RouterHost {
    fn time_advance(&self) -> TimeAdvance {
        TimeAdvance::Passive
    }

    fn transition(
        &mut self,
        _ctx: &Context,
        event: Event<'_, ClusterMessage>,
        out: &mut Outbox<ClusterMessage>,
    ) {
        let (Event::External(bag) | Event::Confluent(bag)) = event else { return };
        for envelope in bag {
            match envelope.payload {
                ClusterMessage::Request(call) => {
                    let picked = self.picker.pick(self.engines.len());
                    self.routed += 1;
                    if let Some(notes) = out.notes() {
                        notes
                            .decision("decisions", "route")
                            .arg("request", call.request.key)
                            .arg("picked", self.engine_names[picked].as_str())
                            .arg("policy", "round-robin")
                            .arg("endpoints", self.engines.len());
                    }
                    self.destinations.insert(call.request.key, self.engines[picked]);
                    out.send(self.engines[picked], self.delay_to_engine, ClusterMessage::Request(call));
                }
                ClusterMessage::Abort(abort) => {
                    // An abort for a call already answered has nowhere to go.
                    if let Some(engine) = self.destinations.remove(&abort.key) {
                        out.send(engine, self.delay_to_engine, ClusterMessage::Abort(abort));
                    }
                }
                answer @ (ClusterMessage::Completion(_) | ClusterMessage::Rejection(_)) => {
                    self.destinations.remove(&answer.key());
                    out.send(answer.client(), self.delay_to_client, answer);
                }
            }
        }
    }

    fn describe(&self, description: &mut blis_kernel::Description) {
        description.arg("routed", self.routed);
    }
}
