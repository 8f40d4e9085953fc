//! The fabric actor: adapts [`Flows`] to messages.
//!
//! A `TransferStart` from any actor starts a transfer keyed by (sender, its id); when the last
//! byte of it has drained the fabric sends that sender a `TransferDone`. The next completion (or
//! the next latency expiry) is the actor's internal event.

use blis_kernel::{Actor, ActorId, Context, Description, Event, Outbox, SimDuration, SimTime, TimeAdvance};

use super::flows::Flows;
use super::topology::Topology;
use crate::message::{ClusterMessage, TransferDone};

/// The one fabric of a run.
pub struct FabricActor {
    topology: Topology,
    flows: Flows<(ActorId, u64)>,
    last_transition: SimTime,
    carried: u64,
}

impl FabricActor {
    /// A fabric over these links, carrying nothing yet.
    pub fn new(topology: Topology) -> FabricActor {
        let flows = Flows::new(topology.capacities());
        FabricActor { topology, flows, last_transition: SimTime::ZERO, carried: 0 }
    }

    /// How many transfers it has completed.
    pub fn carried(&self) -> u64 {
        self.carried
    }

    /// The state machine, for inspection.
    pub fn flows(&self) -> &Flows<(ActorId, u64)> {
        &self.flows
    }

    fn complete(&mut self, done: Vec<(ActorId, u64)>, out: &mut Outbox<ClusterMessage>) {
        for (to, id) in done {
            self.carried += 1;
            out.send(to, SimDuration::ZERO, ClusterMessage::TransferDone(TransferDone { id }));
        }
    }
}

impl Actor<ClusterMessage> for FabricActor {
    fn time_advance(&self) -> TimeAdvance {
        match self.flows.next_event_us() {
            Some(at) => TimeAdvance::until(self.last_transition, SimTime::from_micros(at)),
            None => TimeAdvance::Passive,
        }
    }

    fn transition(
        &mut self,
        ctx: &Context,
        event: Event<'_, ClusterMessage>,
        out: &mut Outbox<ClusterMessage>,
    ) {
        let now = ctx.now.time.as_micros();
        let done = self.flows.advance(now);
        self.complete(done, out);
        if let Event::External(bag) | Event::Confluent(bag) = event {
            for envelope in bag {
                match envelope.payload {
                    ClusterMessage::TransferStart(start) => {
                        let started = self
                            .topology
                            .parts(start.from, start.to, start.bytes)
                            .map_err(|e| e.to_string())
                            .and_then(|(parts, latency)| {
                                self.flows
                                    .start(now, (envelope.sender, start.id), parts, latency)
                                    .map_err(|e| e.to_string())
                            });
                        match started {
                            Ok(done) => self.complete(done, out),
                            Err(e) => out.halt(format!("fabric: transfer {} refused: {e}", start.id)),
                        }
                    }
                    ClusterMessage::TransferCancel(cancel) => {
                        let done = self.flows.cancel(now, &(envelope.sender, cancel.id));
                        self.complete(done, out);
                    }
                    other => out
                        .halt(format!("fabric: unexpected {} message", blis_kernel::Message::label(&other))),
                }
            }
        }
        self.last_transition = ctx.now.time;
    }

    fn describe(&self, description: &mut Description) {
        description.arg("transfers", self.flows.len() as u64);
    }

    fn check(&self, violations: &mut Vec<String>) {
        for (link, (load, cap)) in self.flows.link_loads().iter().zip(self.flows.capacities()).enumerate() {
            if *load > cap * (1.0 + 1e-9) {
                violations.push(format!(
                    "I13 fabric: {} carries {load} B/µs over its {cap}",
                    self.topology.link_name(link)
                ));
            }
        }
    }
}
