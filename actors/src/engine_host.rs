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

use blis_contracts::{Rank, RankShares, StepMode};
use blis_engines::vllm::{FinishedRequest, SchedulerEvent, VllmEngine};
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
    priced: RankShares,
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
            priced: RankShares::default(),
        }
    }

    /// The engine.
    pub fn engine(&self) -> &VllmEngine {
        &self.engine
    }

    /// Priced step time so far, by the rank of the coefficients that priced it.
    pub fn priced(&self) -> &RankShares {
        &self.priced
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
                    reason: rejection.reason().to_owned(),
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

    fn start_step(&mut self, now: SimTime, out: &mut Outbox<ClusterMessage>) {
        let (name, priced) = (&self.name, &mut self.priced);
        self.step_ends = self.engine.start_step().map(|(price, shape)| {
            priced.merge(&price.by_rank);
            let duration = SimDuration::from_micros_ceil(price.micros).expect("the cost model prices steps finitely");
            let end = now.saturating_add(duration.max(SimDuration::from_micros(1)));
            let t = &shape.totals;
            tracing::debug!(engine = %name, requests = t.requests, tokens = t.new_tokens, micros = duration.as_micros(), "step");
            if let Some(notes) = out.notes() {
                let mode = match shape.mode() {
                    StepMode::Mixed => "mixed",
                    StepMode::DecodeOnly => "decode-only",
                };
                notes
                    .span("steps", "step", now, end)
                    .arg("requests", u64::from(t.requests))
                    .arg("prefill_requests", u64::from(t.prefill_requests))
                    .arg("prefill_tokens", t.prefill_tokens)
                    .arg("decode_tokens", u64::from(t.decode_requests))
                    .arg("padded_tokens", shape.padded_tokens)
                    .arg("mode", mode)
                    .arg("priced_us", price.micros)
                    .arg("rank", dominant_rank(&price.by_rank));
            }
            end
        });
    }

    /// Note the requests' phase changes of this transition and the engine's counters.
    fn note(&self, out: &mut Outbox<ClusterMessage>) {
        let Some(notes) = out.notes() else { return };
        for &(key, event) in self.engine.events() {
            notes.phase_end("request", key);
            let next = match event {
                SchedulerEvent::Admitted { .. } => "prefill",
                SchedulerEvent::Preempted => "preempted",
                SchedulerEvent::PrefillDone => "decode",
                SchedulerEvent::Finished => "returning",
            };
            notes.phase_begin("request", key, next);
        }
        let scheduler = self.engine.scheduler();
        notes.counter("engine", "running", scheduler.num_running() as f64);
        notes.counter("engine", "waiting", scheduler.num_waiting() as f64);
        notes.counter("engine", "kv_usage", scheduler.kv().pool().usage());
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
            self.start_step(now, out);
        }
        self.note(out);
        self.engine.clear_events();
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

/// The rank that priced most of a step.
fn dominant_rank(shares: &RankShares) -> &'static str {
    Rank::ALL
        .iter()
        .max_by(|a, b| shares.get(**a).total_cmp(&shares.get(**b)))
        .map_or("roofline", |r| r.as_str())
}
