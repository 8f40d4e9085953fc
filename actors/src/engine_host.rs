//! The engine host: adapts one vLLM instance to messages and simulated time.
//!
//! Requests arrive as messages; each engine step is an internal event whose duration is the
//! cost model's price of the step (rounded up to the microsecond). At the end of a step the
//! host applies its outputs, sends a completion (with every token's time) for each request that
//! finished, and schedules the next step. Synchronous scheduling: a request that arrives while
//! a step runs joins the next `schedule()`; one that arrives exactly when a step ends joins the
//! step scheduled then (the step's outputs are applied first, then arrivals, then the next step
//! is scheduled — the order of vLLM's engine loop).

use std::collections::BTreeMap;
use std::sync::Arc;

use blis_engines::vllm::{FinishedRequest, VllmEngine};
use blis_kernel::{Actor, ActorId, Context, Description, Event, Outbox, SimDuration, SimTime, TimeAdvance};

use crate::message::{CallCompletion, CallRejection, ClusterMessage};

/// One engine instance.
pub struct EngineHost {
    name: Arc<str>,
    router: ActorId,
    delay_to_router: SimDuration,
    engine: VllmEngine,
    step_ends: Option<SimTime>,
    last_transition: SimTime,
    clients: BTreeMap<u64, ActorId>,
    finished: Vec<FinishedRequest>,
    answered: Vec<u64>,
}

impl EngineHost {
    /// A host for `engine`, named `name`, answering through `router`.
    pub fn new(name: &str, engine: VllmEngine, router: ActorId, delay_to_router: SimDuration) -> EngineHost {
        EngineHost {
            name: Arc::from(name),
            router,
            delay_to_router,
            engine,
            step_ends: None,
            last_transition: SimTime::ZERO,
            clients: BTreeMap::new(),
            finished: Vec::new(),
            answered: Vec::new(),
        }
    }

    /// The engine.
    pub fn engine(&self) -> &VllmEngine {
        &self.engine
    }

    /// Keys of the requests this instance finished and answered.
    pub fn answered(&self) -> &[u64] {
        &self.answered
    }

    fn accept(&mut self, message: ClusterMessage, out: &mut Outbox<ClusterMessage>) {
        let ClusterMessage::Request(call) = message else { return };
        let key = call.request.key;
        match self.engine.add_request(&call.request) {
            Ok(()) => {
                self.clients.insert(key, call.client);
            }
            Err(rejection) => {
                let answer = CallRejection {
                    key,
                    client: call.client,
                    instance: self.name.clone(),
                    reason: rejection.reason(),
                };
                out.send(self.router, self.delay_to_router, ClusterMessage::Rejection(Box::new(answer)));
            }
        }
    }

    fn end_step(&mut self, now: SimTime, out: &mut Outbox<ClusterMessage>) {
        self.engine.finish_step(now.as_micros(), &mut self.finished);
        for done in self.finished.drain(..) {
            let client = self.clients.remove(&done.key).expect("a finished request was accepted here");
            self.answered.push(done.key);
            let answer = CallCompletion {
                key: done.key,
                client,
                instance: self.name.clone(),
                token_times_us: done.token_times_us,
                num_preemptions: done.num_preemptions,
            };
            out.send(self.router, self.delay_to_router, ClusterMessage::Completion(Box::new(answer)));
        }
        self.step_ends = None;
    }

    fn start_step(&mut self, now: SimTime) {
        self.step_ends = self.engine.start_step().map(|(price, _)| {
            let duration =
                SimDuration::from_micros_ceil(price.micros).expect("the cost model prices steps finitely");
            now.saturating_add(duration.max(SimDuration::from_micros(1)))
        });
    }
}

impl Actor<ClusterMessage> for EngineHost {
    fn time_advance(&self) -> TimeAdvance {
        self.step_ends.map_or(TimeAdvance::Passive, |end| TimeAdvance::until(self.last_transition, end))
    }

    fn transition(
        &mut self,
        ctx: &Context,
        event: Event<'_, ClusterMessage>,
        out: &mut Outbox<ClusterMessage>,
    ) {
        let now = ctx.now.time;
        let bag = match event {
            Event::Internal => {
                self.end_step(now, out);
                None
            }
            Event::External(bag) => Some(bag),
            // A step ending as requests arrive: outputs first, then the arrivals, then the next
            // step sees them.
            Event::Confluent(bag) => {
                self.end_step(now, out);
                Some(bag)
            }
        };
        if let Some(bag) = bag {
            for envelope in bag {
                self.accept(envelope.payload, out);
            }
        }
        if self.step_ends.is_none() && self.engine.has_work() {
            self.start_step(now);
        }
        self.last_transition = now;
    }

    fn describe(&self, description: &mut Description) {
        let scheduler = self.engine.scheduler();
        let pool = scheduler.kv().pool();
        description.arg("running", scheduler.num_running());
        description.arg("waiting", scheduler.num_waiting());
        description.arg("kv_blocks_total", u64::from(pool.num_blocks()));
        description.arg("kv_blocks_free", u64::from(pool.num_free()));
        description.arg("kv_blocks_held", scheduler.blocks_held());
        description.arg("kv_usage", pool.usage());
    }
}
