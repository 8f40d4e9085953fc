//! The SGLang host: adapts one SGLang instance to messages and simulated time, as SGLang's
//! scheduler process runs its event loop.
//!
//! Each iteration ingests what arrived (new requests, aborts), forms a batch and launches it,
//! and applies a result:
//!
//! - **Normal loop** (`disable_overlap_schedule`): form at `t`, launch after the host time, wait
//!   for the device, apply the result at `t + host + device`, loop.
//! - **Overlap loop** (the default): form batch k at `t` and launch it after the host time; then
//!   apply batch k−1's result, which waits for k−1 to end on the device; loop. So batch k is
//!   formed before k−1's tokens, finishes and prompt insertions are known, and the device runs
//!   batches back to back.
//!
//! A result's tokens reach the client when it is applied. Requests leave the API server
//! (tokenizer) after its priced time and join the scheduler at the next iteration's top, as
//! aborts do.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use blis_contracts::{RankShares, SglangRecord, StepGraph};
use blis_engines::sglang::scheduler::{QueueShuffle, RequestId};
use blis_engines::sglang::{Ending, FinishedRequest, Rejection, SglangEngine};
use blis_kernel::{
    Actor, ActorId, Context, Description, Event, Outbox, SimDuration, SimTime, Substream, TimeAdvance,
};
use blis_router::Scrape;

use crate::instance::{ApiServer, UsageMeter, ceil_micros, next_event, step_times};
use crate::message::{CallAbort, CallCompletion, CallRejection, CallRequest, ClusterMessage};

/// The `random` policy's shuffles, drawn from the instance's named substream
/// (`<instance>/sglang-shuffle`) instead of the process-wide generator upstream uses.
#[derive(Debug)]
pub struct SeededShuffle(Substream);

impl SeededShuffle {
    /// Shuffles drawn from `stream`.
    pub fn new(stream: Substream) -> SeededShuffle {
        SeededShuffle(stream)
    }
}

impl QueueShuffle for SeededShuffle {
    fn shuffle(&mut self, queue: &mut [RequestId]) {
        // Fisher–Yates, as Python's random.shuffle walks the list (from the end).
        for i in (1..queue.len()).rev() {
            let j = self.0.below(i as u64 + 1) as usize;
            queue.swap(i, j);
        }
    }
}

/// What the loop does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Loop {
    /// Nothing to do until a request arrives.
    Idle,
    /// At the top of an iteration at this time.
    Top(SimTime),
    /// Applying the oldest launched batch's result at this time, which ends the iteration.
    Apply(SimTime),
}

/// What reached the scheduler's input queue and is ingested at the next iteration's top.
enum Inbound {
    Request(Box<CallRequest>),
    Abort(u64),
}

/// One SGLang instance.
pub struct SglangHost {
    name: Arc<str>,
    router: ActorId,
    delay_to_router: SimDuration,
    engine: SglangEngine,
    next: Loop,
    device_free: SimTime,
    batch_ends: VecDeque<SimTime>,
    last_transition: SimTime,
    clients: BTreeMap<u64, ActorId>,
    first_token_pending: BTreeSet<u64>,
    finished: Vec<FinishedRequest>,
    answered: Option<Vec<u64>>,
    aborted: u64,
    api_server: ApiServer,
    inbox: Vec<Inbound>,
    priced: RankShares,
    kv_usage: UsageMeter,
}

impl SglangHost {
    /// A host for `engine`, named `name`, answering through `router`; it keeps the keys of the
    /// requests it answered if `keep_answered` (a run with a horizon needs them).
    pub fn new(
        name: &str,
        engine: SglangEngine,
        router: ActorId,
        delay_to_router: SimDuration,
        keep_answered: bool,
    ) -> SglangHost {
        SglangHost {
            name: Arc::from(name),
            router,
            delay_to_router,
            engine,
            next: Loop::Idle,
            device_free: SimTime::ZERO,
            batch_ends: VecDeque::new(),
            last_transition: SimTime::ZERO,
            clients: BTreeMap::new(),
            first_token_pending: BTreeSet::new(),
            finished: Vec::new(),
            answered: keep_answered.then(Vec::new),
            aborted: 0,
            api_server: ApiServer::default(),
            inbox: Vec::new(),
            priced: RankShares::default(),
            kv_usage: UsageMeter::default(),
        }
    }

    /// The instance's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The engine.
    pub fn engine(&self) -> &SglangEngine {
        &self.engine
    }

    /// Priced step time so far, by the rank of the coefficients that priced it.
    pub fn priced(&self) -> &RankShares {
        &self.priced
    }

    /// Keys of the requests this instance finished and answered (none unless kept).
    pub fn answered(&self) -> &[u64] {
        self.answered.as_deref().unwrap_or_default()
    }

    /// Time average of the KV usage from the start to `end`, and its peak.
    pub fn kv_usage(&self, end: SimTime) -> (f64, f64) {
        self.kv_usage.mean_and_peak(self.engine.kv_usage(), end)
    }

    /// The scheduler's counters for the Result.
    pub fn record(&self) -> SglangRecord {
        let c = self.engine.counters();
        SglangRecord {
            extend_batches: c.extend_batches,
            decode_batches: c.decode_batches,
            mixed_batches: c.mixed_batches,
            retractions: c.retractions,
            out_of_memory_aborts: c.out_of_memory_aborts,
        }
    }

    /// What a scrape of `/metrics` reads now: SGLang's scheduler gauges as of their last update,
    /// and `sglang:cache_config_info{page_size, num_pages}`.
    fn scrape(&self) -> Scrape {
        let g = self.engine.gauges();
        let pool = &self.engine.plan().pool.kv;
        Scrape {
            samples: vec![
                ("sglang:num_running_reqs".into(), g.num_running_reqs),
                ("sglang:num_queue_reqs".into(), g.num_queue_reqs),
                ("sglang:token_usage".into(), g.token_usage),
                ("sglang:cache_hit_rate".into(), g.cache_hit_rate),
                ("sglang:new_token_ratio".into(), g.new_token_ratio),
            ],
            cache_config: Some((u64::from(pool.block_size), pool.num_blocks)),
        }
    }

    fn accept(&mut self, message: ClusterMessage, now: SimTime, out: &mut Outbox<ClusterMessage>) {
        match message {
            ClusterMessage::Request(call) => self.send_to_frontend(call, now, out),
            ClusterMessage::Abort(abort) => self.abort(abort, now),
            ClusterMessage::Scrape => {
                out.send(self.router, self.delay_to_router, ClusterMessage::Metrics(Box::new(self.scrape())));
            }
            _ => {}
        }
    }

    /// A request enters the API server, which works on it first (HTTP, tokenization).
    fn send_to_frontend(&mut self, call: Box<CallRequest>, now: SimTime, out: &mut Outbox<ClusterMessage>) {
        let delay = self.engine.frontend_micros(call.request.prompt_token_ids.len() as u32);
        match ceil_micros(delay) {
            Ok(delay) => self.api_server.enter(call, now.saturating_add(delay)),
            Err(unpriceable) => out.halt(format!("{}: {unpriceable}", self.name)),
        }
    }

    /// Queue an input for the next iteration's top, waking an idle loop.
    fn ingest_later(&mut self, inbound: Inbound, now: SimTime) {
        self.inbox.push(inbound);
        if self.next == Loop::Idle {
            self.next = Loop::Top(now);
        }
    }

    /// A call its client gave up on: still in the API server it never reaches the scheduler;
    /// otherwise the scheduler aborts it at its next iteration.
    fn abort(&mut self, abort: CallAbort, now: SimTime) {
        if self.api_server.cancel(abort.key) {
            return;
        }
        self.ingest_later(Inbound::Abort(abort.key), now);
    }

    /// The iteration's top: take in what arrived, in arrival order.
    fn ingest(&mut self, out: &mut Outbox<ClusterMessage>) {
        for inbound in std::mem::take(&mut self.inbox) {
            match inbound {
                Inbound::Request(call) => self.admit(&call, out),
                Inbound::Abort(key) => {
                    if self.engine.abort(key) {
                        self.clients.remove(&key);
                        self.first_token_pending.remove(&key);
                        self.aborted += 1;
                        if let Some(notes) = out.notes() {
                            notes.phase_end("request", key);
                            notes.phase_begin("request", key, "aborted");
                        }
                    }
                }
            }
        }
    }

    /// Hand a request to the scheduler (or refuse it as the server would).
    fn admit(&mut self, call: &CallRequest, out: &mut Outbox<ClusterMessage>) {
        let key = call.request.key;
        match self.engine.add_request(&call.request) {
            Ok(()) => {
                self.clients.insert(key, call.client);
                if call.report_first_token {
                    self.first_token_pending.insert(key);
                }
            }
            Err(rejection) => self.refuse(call, rejection, out),
        }
    }

    /// Answer `call` with the server's refusal.
    fn refuse(&self, call: &CallRequest, rejection: Rejection, out: &mut Outbox<ClusterMessage>) {
        let answer = CallRejection {
            key: call.request.key,
            client: call.client,
            instance: self.name.clone(),
            reason: rejection.reason().to_owned(),
        };
        out.send(self.router, self.delay_to_router, ClusterMessage::Rejection(Box::new(answer)));
    }

    /// Answer for the requests that left the instance.
    fn answer(&mut self, out: &mut Outbox<ClusterMessage>) {
        let mut finished = std::mem::take(&mut self.finished);
        for done in finished.drain(..) {
            let Some(client) = self.clients.remove(&done.key) else { continue };
            self.first_token_pending.remove(&done.key);
            let message = match done.ending {
                Ending::Finished => {
                    if let Some(answered) = &mut self.answered {
                        answered.push(done.key);
                    }
                    ClusterMessage::Completion(Box::new(CallCompletion {
                        key: done.key,
                        client,
                        instance: self.name.clone(),
                        token_times_us: done.token_times_us,
                        num_preemptions: done.retractions,
                        cached_tokens: done.cached_tokens,
                        kv_transfer: None,
                        disaggregated: None,
                    }))
                }
                Ending::OutOfMemory => ClusterMessage::Rejection(Box::new(CallRejection {
                    key: done.key,
                    client,
                    instance: self.name.clone(),
                    reason: "aborted_out_of_memory".to_owned(),
                })),
            };
            out.send(self.router, self.delay_to_router, message);
        }
        self.finished = finished;
    }

    /// Apply the oldest batch's result at `now` and close the iteration.
    fn apply(&mut self, now: SimTime, out: &mut Outbox<ClusterMessage>) {
        self.batch_ends.pop_front();
        self.engine.apply_oldest(now.as_micros(), &mut self.finished);
        if !self.first_token_pending.is_empty() {
            for &key in self.engine.first_tokens() {
                if self.first_token_pending.remove(&key) {
                    let client = self.clients[&key];
                    out.send(
                        self.router,
                        self.delay_to_router,
                        ClusterMessage::FirstToken(CallAbort { key, client }),
                    );
                }
            }
        }
        self.answer(out);
        self.engine.end_iteration(true);
    }

    /// The top of an iteration at `now`: ingest, form and launch; returns what the loop does next.
    fn iterate(&mut self, now: SimTime, out: &mut Outbox<ClusterMessage>) -> Loop {
        self.ingest(out);
        let formed = self.engine.form(&mut self.finished);
        self.answer(out);
        let Some(price) = formed else {
            return match self.batch_ends.front() {
                Some(&end) => Loop::Apply(end.max(now)),
                None => {
                    self.engine.end_iteration(false);
                    Loop::Idle
                }
            };
        };
        self.priced.merge(&price.by_rank);
        let (host, device) = match step_times(&price) {
            Ok(times) => times,
            Err(unpriceable) => {
                out.halt(format!("{}: {unpriceable}", self.name));
                return Loop::Idle;
            }
        };
        let ready = now.saturating_add(host);
        let start = ready.max(self.device_free);
        // A step always takes time, so the loop cannot spin at one instant.
        let end = start.saturating_add(device).max(now.saturating_add(SimDuration::from_micros(1)));
        self.device_free = end;
        self.batch_ends.push_back(end);
        self.note_step(start, end, price.micros, price.host_micros, out);
        let waits_for = if self.engine.overlap() { 1 } else { 0 };
        if self.engine.in_flight() > waits_for {
            Loop::Apply(self.batch_ends[0].max(ready))
        } else {
            self.engine.end_iteration(false);
            Loop::Top(ready)
        }
    }

    /// Run the loop at `now` until it waits for a later time or for a request.
    fn run_loop(&mut self, now: SimTime, out: &mut Outbox<ClusterMessage>) {
        loop {
            match self.next {
                Loop::Idle => return,
                Loop::Top(at) | Loop::Apply(at) if at > now => return,
                Loop::Apply(_) => {
                    self.apply(now, out);
                    self.next = Loop::Top(now);
                }
                Loop::Top(_) => {
                    if self.engine.deadlock().is_some() {
                        return;
                    }
                    self.next = self.iterate(now, out);
                }
            }
        }
    }

    fn note_step(
        &self,
        start: SimTime,
        end: SimTime,
        micros: f64,
        host_micros: f64,
        out: &mut Outbox<ClusterMessage>,
    ) {
        let Some(notes) = out.notes() else { return };
        let shape = self.engine.shape();
        let t = shape.totals;
        let graph = match shape.graph {
            StepGraph::Eager => "eager",
            StepGraph::Piecewise => "piecewise",
            StepGraph::Full => "full",
        };
        notes
            .span("steps", "step", start, end)
            .arg("requests", u64::from(t.requests))
            .arg("prefill_requests", u64::from(t.prefill_requests))
            .arg("prefill_tokens", t.prefill_tokens)
            .arg("decode_tokens", u64::from(t.decode_requests))
            .arg("padded_tokens", shape.padded_tokens)
            .arg("graph", graph)
            .arg("priced_us", micros)
            .arg("host_us", host_micros);
    }

    /// Note the engine's counters.
    fn note(&self, out: &mut Outbox<ClusterMessage>) {
        let Some(notes) = out.notes() else { return };
        let scheduler = self.engine.scheduler();
        notes.counter("engine", "running", scheduler.running().len() as f64);
        notes.counter("engine", "waiting", scheduler.waiting().len() as f64);
        notes.counter("engine", "kv_usage", self.engine.kv_usage());
    }
}

impl Actor<ClusterMessage> for SglangHost {
    fn time_advance(&self) -> TimeAdvance {
        let engine = match self.next {
            Loop::Idle => None,
            Loop::Top(at) | Loop::Apply(at) => Some(at),
        };
        next_event(self.last_transition, engine, self.api_server.next_exit())
    }

    fn transition(
        &mut self,
        ctx: &Context,
        event: Event<'_, ClusterMessage>,
        out: &mut Outbox<ClusterMessage>,
    ) {
        let now = ctx.now.time;
        self.kv_usage.observe(self.engine.kv_usage(), now);
        let bag = match event {
            Event::Internal => None,
            Event::External(bag) | Event::Confluent(bag) => Some(bag),
        };
        if let Some(bag) = bag {
            for envelope in bag {
                self.accept(envelope.payload, now, out);
            }
        }
        // Requests leaving the API server now, in the order they entered it.
        // Requests leaving the API server now: the tokenizer manager refuses what no context
        // holds and sends the rest to the scheduler's input queue.
        while let Some(call) = self.api_server.leave(now) {
            match self.engine.validate(&call.request) {
                Ok(()) => self.ingest_later(Inbound::Request(call), now),
                Err(rejection) => self.refuse(&call, rejection, out),
            }
        }
        self.run_loop(now, out);
        if let Some(deadlock) = self.engine.deadlock() {
            out.halt(format!("{}: {deadlock}", self.name));
            self.next = Loop::Idle;
        }
        self.note(out);
        self.last_transition = now;
    }

    fn check(&self, violations: &mut Vec<String>) {
        self.engine.check_invariants(violations);
        for (key, _) in self.engine.held() {
            if !self.clients.contains_key(&key) && !self.engine.is_aborted(key) {
                violations.push(format!("I4 request {key} is held with no client to answer"));
            }
        }
    }

    fn describe(&self, description: &mut Description) {
        let scheduler = self.engine.scheduler();
        let [available, evictable, protected, rows] = scheduler.sizes();
        description.arg("running", scheduler.running().len());
        description.arg("waiting", scheduler.waiting().len());
        description.arg("in_flight", self.engine.in_flight());
        description.arg("aborted", self.aborted);
        description.arg("kv_tokens_total", self.engine.plan().scheduler.pool_tokens);
        description.arg("kv_tokens_free", available);
        description.arg("kv_tokens_evictable", evictable);
        description.arg("kv_tokens_protected", protected);
        description.arg("request_rows_free", rows);
        description.arg("kv_usage", self.engine.kv_usage());
    }
}
