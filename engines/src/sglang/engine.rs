//! One SGLang instance: its scheduler, its batches in flight, its gauges, and the Environment
//! that prices its steps.
//!
//! The host drives it the way `event_loop_normal` and `event_loop_overlap` do, one iteration at a
//! time: [`SglangEngine::form`] forms (and prices) the next batch and launches it;
//! [`SglangEngine::apply_oldest`] applies the oldest launched batch's result; and
//! [`SglangEngine::end_iteration`] closes the iteration (`last_batch = batch`, or `on_idle`). In
//! the normal loop a batch's result is applied before the next is formed; in the overlap loop
//! after it, so batch k is formed while batch k−1 still runs.

use std::collections::{BTreeMap, VecDeque};

use blis_contracts::{Environment, StepPrice, StepShape};

use super::plan::SglangPlan;
use super::scheduler::{Batch, BatchKind, Finish, QueueShuffle, RequestId, Scheduler, SchedulerError};
use crate::vllm::EngineRequest;

/// Why a request was refused on arrival, as SGLang's tokenizer manager or scheduler refuses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// Prompt plus requested output exceed `context_length` (the server answers 400).
    ExceedsContextLength {
        /// Prompt plus output tokens.
        total: u64,
        /// The limit.
        context_length: u32,
    },
    /// The prompt is at least `max_req_input_len` (the scheduler answers 400).
    ExceedsMaxInputLength {
        /// Prompt tokens.
        prompt: u32,
        /// The limit.
        max_req_input_len: u32,
    },
    /// An empty prompt.
    EmptyPrompt,
}

impl Rejection {
    /// A short machine-readable reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Rejection::ExceedsContextLength { .. } => "exceeds_context_length",
            Rejection::ExceedsMaxInputLength { .. } => "exceeds_max_req_input_len",
            Rejection::EmptyPrompt => "empty_prompt",
        }
    }
}

/// How a request left the instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// It produced all its tokens.
    Finished,
    /// The last running request did not fit one more decode step and was aborted
    /// (`retract_decode`'s out-of-memory abort); the client receives an error.
    OutOfMemory,
}

/// A request that left the instance, with what its client is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FinishedRequest {
    /// The caller's key.
    pub key: u64,
    /// How it ended.
    pub ending: Ending,
    /// When each output token's result was processed, µs.
    pub token_times_us: Vec<u64>,
    /// Times it was retracted.
    pub retractions: u32,
    /// Prompt tokens its first prefill found in the radix cache (`cached_tokens`).
    pub cached_tokens: u32,
}

/// The scheduler's Prometheus gauges as of their last update, as a scrape of `/metrics` reads
/// them. Upstream reports them when a prefill (or mixed) batch's result is processed, with the
/// running count, hit rate and ratio its pass saw; every `decode_log_interval` decode results,
/// with that decode batch's size; and when the server falls idle.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Gauges {
    /// `sglang:num_running_reqs`.
    pub num_running_reqs: f64,
    /// `sglang:num_queue_reqs`.
    pub num_queue_reqs: f64,
    /// `sglang:token_usage`, rounded to two decimals as upstream rounds it.
    pub token_usage: f64,
    /// `sglang:cache_hit_rate` of the last prefill batch.
    pub cache_hit_rate: f64,
    /// `sglang:new_token_ratio`.
    pub new_token_ratio: f64,
}

/// What the instance did over a run, for the Result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counters {
    /// Batches run: prefill (extend), decode and mixed.
    pub extend_batches: u64,
    /// Decode batches.
    pub decode_batches: u64,
    /// Mixed batches.
    pub mixed_batches: u64,
    /// Requests retracted (`sglang:num_retracted_requests_total`).
    pub retractions: u64,
    /// Requests aborted because the last one did not fit a decode step.
    pub out_of_memory_aborts: u64,
    /// Prompt tokens first-prefilled (retracted re-prefills excluded).
    pub prompt_tokens: u64,
    /// Of those, found in the radix cache.
    pub cached_tokens: u64,
}

/// The instance stopped making progress.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deadlock {
    /// Requests waiting.
    pub waiting: usize,
}

impl std::fmt::Display for Deadlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "deadlock: no batch could be formed with {} requests waiting and nothing running",
            self.waiting
        )
    }
}

/// One request as the instance holds it beside the scheduler.
#[derive(Debug)]
struct Held {
    key: u64,
    outputs: std::sync::Arc<[u32]>,
    token_times_us: Vec<u64>,
    retractions: u32,
    cached_tokens: Option<u32>,
    /// Its client gave up: it ends without an answer.
    aborted: bool,
}

impl Held {
    /// What its client is told when it leaves by `ending`.
    fn answer(self, ending: Ending) -> FinishedRequest {
        FinishedRequest {
            key: self.key,
            ending,
            token_times_us: self.token_times_us,
            retractions: self.retractions,
            cached_tokens: self.cached_tokens.unwrap_or(0),
        }
    }
}

/// What a prefill pass saw when it formed its batch (`PrefillStats`), reported with its result.
#[derive(Clone, Copy, Debug)]
struct PrefillSnapshot {
    running: usize,
    cache_hit_rate: f64,
    new_token_ratio: f64,
}

/// One SGLang instance.
pub struct SglangEngine {
    plan: SglangPlan,
    scheduler: Scheduler,
    environment: Box<dyn Environment>,
    shape: StepShape,
    held: Vec<Option<Held>>,
    by_key: BTreeMap<u64, RequestId>,
    /// Per batch launched and not yet applied (the scheduler queues the batches themselves):
    /// what its pass saw, for a prefill batch.
    in_flight: VecDeque<Option<PrefillSnapshot>>,
    /// The batch this iteration formed, until the iteration ends.
    formed: Option<Batch>,
    gauges: Gauges,
    counters: Counters,
    decode_results: u64,
    deadlock: Option<Deadlock>,
    /// Keys whose first token the last applied result produced.
    first_tokens: Vec<u64>,
    /// Requests released this iteration, and the iteration before: the scheduler forgets the
    /// older ones at the iteration's end, when no batch can name them any more.
    released_now: Vec<RequestId>,
    released_before: Vec<RequestId>,
    /// The rows of the batch being applied and their output counts before it (reused).
    applying: Vec<(RequestId, usize)>,
}

impl SglangEngine {
    /// An idle instance of `plan`, pricing with `environment`; the `random` policy draws its
    /// shuffles from `shuffle`.
    pub fn new(
        plan: SglangPlan,
        environment: Box<dyn Environment>,
        shuffle: Box<dyn QueueShuffle>,
    ) -> Result<SglangEngine, SchedulerError> {
        let scheduler = Scheduler::with_shuffle(plan.scheduler.clone(), shuffle)?;
        Ok(SglangEngine {
            plan,
            scheduler,
            environment,
            shape: StepShape::default(),
            held: Vec::new(),
            by_key: BTreeMap::new(),
            in_flight: VecDeque::new(),
            formed: None,
            gauges: Gauges::default(),
            counters: Counters::default(),
            decode_results: 0,
            deadlock: None,
            first_tokens: Vec::new(),
            released_now: Vec::new(),
            released_before: Vec::new(),
            applying: Vec::new(),
        })
    }

    /// Leak one KV page before the run starts (breaks I5, so a checked run can show it fires).
    pub fn inject_kv_leak(&mut self) {
        self.scheduler.inject_slot_leak();
    }

    /// The plan.
    pub fn plan(&self) -> &SglangPlan {
        &self.plan
    }

    /// The scheduler.
    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    /// The API server's time for a request before the scheduler sees it, µs.
    pub fn frontend_micros(&self, prompt_tokens: u32) -> f64 {
        self.environment.frontend_micros(prompt_tokens)
    }

    /// The tokenizer manager's checks of a request (`_validate_one_request`), made before it
    /// is sent to the scheduler.
    pub fn validate(&self, request: &EngineRequest) -> Result<(), Rejection> {
        let config = &self.plan.config;
        let prompt = request.prompt_token_ids.len() as u32;
        if prompt == 0 {
            return Err(Rejection::EmptyPrompt);
        }
        let total = u64::from(prompt) + request.output_token_ids.len() as u64;
        if total > u64::from(config.context_length) {
            return Err(Rejection::ExceedsContextLength { total, context_length: config.context_length });
        }
        Ok(())
    }

    /// The scheduler takes a request [`SglangEngine::validate`] passed, or refuses one whose
    /// prompt is at least `max_req_input_len` (upstream queues it as a one-token prefill and
    /// answers 400 with that prefill's result; here it is refused at once).
    pub fn add_request(&mut self, request: &EngineRequest) -> Result<(), Rejection> {
        let config = &self.plan.config;
        let prompt = request.prompt_token_ids.len() as u32;
        if prompt >= config.max_req_input_len {
            return Err(Rejection::ExceedsMaxInputLength {
                prompt,
                max_req_input_len: config.max_req_input_len,
            });
        }
        let (id, _) =
            self.scheduler.add_request(request.prompt_token_ids.to_vec(), request.output_token_ids.len());
        if id == self.held.len() {
            self.held.push(None);
        }
        debug_assert!(self.held[id].is_none(), "a reused id was released");
        self.held[id] = Some(Held {
            key: request.key,
            outputs: request.output_token_ids.clone(),
            token_times_us: Vec::with_capacity(request.output_token_ids.len()),
            retractions: 0,
            cached_tokens: None,
            aborted: false,
        });
        self.by_key.insert(request.key, id);
        Ok(())
    }

    /// A client gave up on `key`: the scheduler aborts it (`abort_request`); it leaves without an
    /// answer. False when the instance no longer holds it.
    pub fn abort(&mut self, key: u64) -> bool {
        let Some(&id) = self.by_key.get(&key) else { return false };
        let held = self.held[id].as_mut().expect("a held key has its request");
        held.aborted = true;
        self.scheduler.abort(id);
        // A waiting request leaves at once. (No batch in flight can name it: aborts arrive at an
        // iteration's top, and a request retracted back to the queue was left out of the batch
        // launched since, the only one still in flight.)
        if self.scheduler.finish_of(id) == Some(Finish::Abort) {
            debug_assert!(!self.scheduler.launched().any(|b| b.requests.contains(&id)));
            self.release(id);
        }
        true
    }

    fn release(&mut self, id: RequestId) -> Option<Held> {
        let held = self.held[id].take()?;
        self.by_key.remove(&held.key);
        self.released_now.push(id);
        Some(held)
    }

    /// Form the next batch (`get_next_batch_to_run`) and launch it; its price, or `None` when
    /// there is nothing to run.
    pub fn form(&mut self, finished: &mut Vec<FinishedRequest>) -> Option<StepPrice> {
        let chunked_before = self.scheduler.chunked();
        let batch = self.scheduler.next_batch();
        for &id in self.scheduler.retracted() {
            if let Some(held) = self.held[id].as_mut() {
                held.retractions += 1;
            }
            self.counters.retractions += 1;
        }
        for i in 0..self.scheduler.oom_aborted().len() {
            let id = self.scheduler.oom_aborted()[i];
            self.counters.out_of_memory_aborts += 1;
            if let Some(held) = self.release(id)
                && !held.aborted
            {
                finished.push(held.answer(Ending::OutOfMemory));
            }
        }
        for i in 0..self.scheduler.chunked_aborted().len() {
            let id = self.scheduler.chunked_aborted()[i];
            self.release(id);
        }
        let batch = batch?;
        self.scheduler.step_shape(&batch, &self.plan.graphs, &mut self.shape);
        match batch.kind {
            BatchKind::Extend => self.counters.extend_batches += 1,
            BatchKind::Decode => self.counters.decode_batches += 1,
            BatchKind::Mixed => self.counters.mixed_batches += 1,
        }
        let prefill = (batch.kind != BatchKind::Decode).then(|| self.prefill_pass(&batch, chunked_before));
        let price = self.environment.price(&self.shape);
        self.scheduler.launch(&batch);
        self.in_flight.push_back(prefill);
        self.formed = Some(batch);
        Some(price)
    }

    /// A prefill pass formed `batch`: first prefills record their cached prompt tokens, and what
    /// the pass saw is kept for its result's report. The chunk carried over from the last pass
    /// adds no hit tokens (`add_chunked_req`); re-prefills of retracted requests add none either.
    fn prefill_pass(&mut self, batch: &Batch, chunked_before: Option<RequestId>) -> PrefillSnapshot {
        let (mut hit, mut extend) = (0u64, 0u64);
        for &id in batch.requests.iter().filter(|id| !batch.decoding.contains(id)) {
            let row = self.scheduler.extend_row(id);
            extend += row.extend_len as u64;
            if self.scheduler.ever_retracted(id) || chunked_before == Some(id) {
                continue;
            }
            hit += row.prefix_len as u64;
            if let Some(held) = self.held[id].as_mut()
                && held.cached_tokens.is_none()
            {
                held.cached_tokens = Some(row.prefix_len as u32);
                self.counters.cached_tokens += row.prefix_len as u64;
                self.counters.prompt_tokens += self.scheduler.prompt_len(id) as u64;
            }
        }
        // The running batch as the pass saw it, before a mixed batch took its decodes.
        let running = match batch.kind {
            BatchKind::Mixed => batch.decoding.len(),
            _ => self.scheduler.running().len(),
        };
        PrefillSnapshot {
            running,
            cache_hit_rate: if hit + extend > 0 { hit as f64 / (hit + extend) as f64 } else { 0.0 },
            new_token_ratio: self.scheduler.new_token_ratio(),
        }
    }

    /// The gauges read from the pool and the queue now, with `running` requests running.
    fn report(&mut self, running: usize) {
        let [available, evictable, _, _] = self.scheduler.sizes();
        let capacity = self.plan.scheduler.pool_tokens as f64;
        let used = capacity - available as f64 - evictable as f64;
        self.gauges.num_running_reqs = running as f64;
        self.gauges.num_queue_reqs = self.scheduler.waiting().len() as f64;
        self.gauges.token_usage = (used / capacity * 100.0).round() / 100.0;
    }

    /// The step the last formed batch runs.
    pub fn shape(&self) -> &StepShape {
        &self.shape
    }

    /// Batches launched whose results are not yet applied.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Whether the loop runs the overlap schedule.
    pub fn overlap(&self) -> bool {
        self.plan.scheduler.overlap
    }

    /// Apply the oldest launched batch's result at `now_us`: its tokens are stamped `now_us`,
    /// and the requests it finished are handed out.
    pub fn apply_oldest(&mut self, now_us: u64, finished: &mut Vec<FinishedRequest>) {
        let Some(prefill) = self.in_flight.pop_front() else { return };
        let batch = self.scheduler.launched().next().expect("a batch in flight is queued");
        let is_decode = batch.kind == BatchKind::Decode;
        // Counted now, not when the batch was formed: under the overlap loop the batch before it
        // was applied in between (and a request it retracted gets no token from this one).
        self.applying.clear();
        self.applying.extend(batch.requests.iter().map(|&id| (id, self.scheduler.outputs(id))));
        let outputs = &self.held;
        let token = |id: RequestId, k: usize| {
            outputs[id].as_ref().and_then(|h| h.outputs.get(k).copied()).unwrap_or(0)
        };
        self.scheduler.process_oldest(token);
        self.first_tokens.clear();
        for &(id, before) in &self.applying {
            if self.scheduler.outputs(id) > before
                && let Some(held) = self.held[id].as_mut()
            {
                held.token_times_us.push(now_us);
                if held.token_times_us.len() == 1 {
                    self.first_tokens.push(held.key);
                }
            }
        }
        match prefill {
            Some(pass) => {
                self.report(pass.running);
                self.gauges.cache_hit_rate = pass.cache_hit_rate;
                self.gauges.new_token_ratio = pass.new_token_ratio;
            }
            None => {
                debug_assert!(is_decode);
                self.decode_results += 1;
                if self.decode_results.is_multiple_of(u64::from(self.plan.config.decode_log_interval)) {
                    self.report(self.applying.len());
                }
            }
        }
        for (id, _, _) in self.scheduler.take_finished() {
            if let Some(held) = self.release(id)
                && !held.aborted
            {
                finished.push(held.answer(Ending::Finished));
            }
        }
    }

    /// Close the iteration: the batch it formed becomes `last_batch`; an iteration that formed
    /// none and applied none idles (`on_idle`, which resets `new_token_ratio` when nothing is
    /// left). A scheduler that formed nothing with requests waiting and nothing running or in
    /// flight can never form anything: that is a deadlock.
    pub fn end_iteration(&mut self, applied: bool) {
        for id in self.released_before.drain(..) {
            self.scheduler.forget(id);
        }
        std::mem::swap(&mut self.released_before, &mut self.released_now);
        let batch = self.formed.take();
        if batch.is_none() && !applied {
            // Fully idle: the ratio resets and stale gauges are republished (`_maybe_log_idle_metrics`).
            if self.scheduler.on_idle() && self.gauges.num_running_reqs != 0.0 {
                self.report(0);
            }
            if self.in_flight.is_empty()
                && !self.scheduler.waiting().is_empty()
                && self.scheduler.running().is_empty()
            {
                self.deadlock.get_or_insert(Deadlock { waiting: self.scheduler.waiting().len() });
            }
        }
        self.scheduler.set_last_batch(batch);
    }

    /// Whether the scheduler holds any request.
    pub fn has_requests(&self) -> bool {
        !self.by_key.is_empty()
    }

    /// The deadlock, once one is found.
    pub fn deadlock(&self) -> Option<&Deadlock> {
        self.deadlock.as_ref()
    }

    /// Whether the instance holds `key` only until the scheduler drops it (its client gave up).
    pub fn is_aborted(&self, key: u64) -> bool {
        self.by_key.get(&key).and_then(|&id| self.held[id].as_ref()).is_some_and(|h| h.aborted)
    }

    /// Keys whose first token the last applied result produced.
    pub fn first_tokens(&self) -> &[u64] {
        &self.first_tokens
    }

    /// The gauges a scrape reads now.
    pub fn gauges(&self) -> Gauges {
        self.gauges
    }

    /// What the instance did so far.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Share of the KV pool held by requests now (neither free nor evictable), 0–1.
    pub fn kv_usage(&self) -> f64 {
        let [available, evictable, _, _] = self.scheduler.sizes();
        let capacity = self.plan.scheduler.pool_tokens as f64;
        (capacity - available as f64 - evictable as f64) / capacity
    }

    /// Keys of the requests held, with whether each was ever scheduled.
    pub fn held(&self) -> impl Iterator<Item = (u64, bool)> + '_ {
        self.by_key
            .iter()
            .map(|(&key, &id)| (key, self.held[id].as_ref().is_some_and(|h| h.cached_tokens.is_some())))
    }

    /// The scheduler's invariants.
    pub fn check_invariants(&self, violations: &mut Vec<String>) {
        if let Err(e) = self.scheduler.check_invariants() {
            violations.push(format!("I5 {e}"));
        }
    }
}
