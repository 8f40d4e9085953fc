//! One vLLM instance: its plan, its scheduler, its in-flight batches, and the Environment that
//! prices its steps.
//!
//! The host drives it the way vLLM's engine core loop does. [`VllmEngine::schedule`] schedules a
//! batch and queues it as launched; [`VllmEngine::complete_oldest`] applies the outputs of the
//! oldest launched batch. Synchronously a batch completes before the next is scheduled;
//! asynchronously up to two are in flight, so a batch is scheduled before the previous one's
//! outputs are known.

use std::collections::{BTreeSet, VecDeque};

use std::fmt;

use blis_contracts::{Environment, StepGraph, StepPrice, StepRequest, StepShape, Transfer};

use super::connector::{Connector, ConnectorOutput, Job, OffloadWorker, OffloadingScheduler, cpu_blocks};
use super::kv_cache_manager::KvCacheManager;
use super::metrics::{CacheConfigInfo, MetricsSnapshot};
use super::plan::VllmPlan;
use super::request::EngineRequest;
use super::scheduler::{
    FinishedRequest, Policy, Scheduler, SchedulerCounters, SchedulerEvent, SchedulerLimits, SchedulerOutput,
    UpdateOutput,
};

/// Why a request was refused on arrival, as vLLM's API server refuses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// Prompt plus requested output exceed `max_model_len` (the server answers 400).
    ExceedsMaxModelLen {
        /// Prompt tokens.
        prompt: u32,
        /// Requested output tokens.
        max_tokens: u32,
        /// The limit.
        max_model_len: u32,
    },
    /// An empty prompt.
    EmptyPrompt,
}

impl Rejection {
    /// A short machine-readable reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Rejection::ExceedsMaxModelLen { .. } => "exceeds_max_model_len",
            Rejection::EmptyPrompt => "empty_prompt",
        }
    }
}

/// Steps without a sampled token, per token of `max_model_len`, after which an instance is
/// declared livelocked. Without preemption a running request gains at least one token a step,
/// so it samples within `max_model_len` steps; sixteen times that only passes when requests
/// keep losing their progress.
const LIVELOCK_STEPS_PER_TOKEN: u64 = 16;

/// The instance stopped making progress, as the upstream would, and the run cannot finish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stall {
    /// Steps ran without any request sampling a token: requests preempt each other in a cycle
    /// (vLLM 0.15.1's priority policy does this for requests of equal priority and arrival time
    /// when the cache holds only one of them).
    Livelock {
        /// Consecutive steps without a sampled token.
        steps: u64,
        /// Preemptions during those steps.
        preemptions: u64,
    },
    /// A step scheduled and preempted nothing with nothing in flight while requests wait: no
    /// later step can differ.
    Deadlock {
        /// Requests waiting.
        waiting: usize,
        /// Requests running.
        running: usize,
    },
}

impl fmt::Display for Stall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stall::Livelock { steps, preemptions } => write!(
                f,
                "livelock: {steps} steps without a sampled token while requests preempted each other {preemptions} times; vLLM 0.15.1 does the same for this configuration (see engines/src/vllm/FIELDS.md, 'Known upstream livelock')"
            ),
            Stall::Deadlock { waiting, running } => write!(
                f,
                "deadlock: a step scheduled no token with {waiting} requests waiting and {running} running and nothing in flight"
            ),
        }
    }
}

/// The offloading connector's worker side in an instance: its job books, the copy jobs submitted
/// and not yet handed to the host, those done and not yet polled, and those a preemption waits
/// for.
struct OffloadSide {
    worker: OffloadWorker,
    submitted: Vec<Job>,
    done: Vec<u64>,
    wait_for: BTreeSet<u64>,
    /// Jobs and bytes handed out, stores then loads.
    stores: (u64, u64),
    loads: (u64, u64),
}

impl OffloadSide {
    /// The worker at the top of a batch's execute_model: a preemption submits the pending
    /// stores and waits for the preempted requests' ones; then the pending stores and the
    /// batch's loads are submitted.
    fn start_batch(&mut self, batch: &SchedulerOutput) {
        if !batch.preempted.is_empty() {
            let (submitted, wait) = self.worker.handle_preemptions(&batch.preempted);
            self.submitted.extend(submitted);
            let done = &self.done;
            self.wait_for.extend(wait.into_iter().filter(|j| !done.contains(j)));
        }
        let meta = batch.connector_meta.as_ref().expect("a connector's step has metadata");
        let submitted = self.worker.start_kv_transfers(meta);
        self.submitted.extend(submitted);
    }
}

/// A copy job the host hands to the fabric: its id, its direction and its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyJob {
    /// The job's id (reported back with [`VllmEngine::job_done`]).
    pub id: u64,
    /// GPU → CPU (a store) or CPU → GPU (a load).
    pub store: bool,
    /// Bytes over all the instance's GPUs, as the cost model counts them.
    pub bytes: u64,
}

/// A vLLM instance as a plain state machine.
pub struct VllmEngine {
    offload: Option<OffloadSide>,
    plan: VllmPlan,
    scheduler: Scheduler,
    environment: Box<dyn Environment>,
    in_flight: VecDeque<SchedulerOutput>,
    spare: Vec<SchedulerOutput>,
    shape: StepShape,
    update: UpdateOutput,
    steps_without_token: u64,
    preemptions_without_token: u64,
    stall: Option<Stall>,
    metrics: MetricsSnapshot,
}

impl VllmEngine {
    /// An idle instance of `plan`, priced by `environment`.
    pub fn new(plan: VllmPlan, environment: Box<dyn Environment>) -> VllmEngine {
        let config = &plan.config;
        let limits = SchedulerLimits {
            max_num_seqs: config.max_num_seqs,
            max_num_batched_tokens: config.max_num_batched_tokens,
            max_model_len: config.max_model_len,
            enable_chunked_prefill: config.enable_chunked_prefill,
            long_prefill_token_threshold: config.long_prefill_token_threshold,
            policy: if config.scheduling_policy == "priority" { Policy::Priority } else { Policy::Fcfs },
            async_scheduling: config.async_scheduling,
        };
        let blocks = u32::try_from(plan.budget.num_gpu_blocks).expect("the plan bounds the block count");
        let mut kv = KvCacheManager::new(
            blocks,
            config.block_size,
            config.max_model_len,
            config.enable_prefix_caching,
        );
        // Only a router that indexes KV events (llm-d's precise prefix cache) reads them, so an
        // instance records none until `set_record_kv_events` and computes no SHA-256 block hash;
        // prefix hits are decided by block keys either way.
        kv.set_record_events(false);
        let metrics = MetricsSnapshot::new(CacheConfigInfo {
            block_size: config.block_size,
            num_gpu_blocks: plan.budget.num_gpu_blocks,
            enable_prefix_caching: config.enable_prefix_caching,
            cache_dtype: config.kv_cache_dtype.clone(),
            gpu_memory_utilization: config.gpu_memory_utilization,
        });
        let connector = config.offload.map(|o| {
            let factor = o.block_size / config.block_size;
            let per_gpu_block = environment.transfer_bytes(&Transfer { gpu_blocks: 1 });
            let blocks = cpu_blocks(o.cpu_bytes_to_use, per_gpu_block, factor);
            Connector::Offloading(OffloadingScheduler::new(
                config.block_size,
                o.block_size,
                u32::try_from(blocks).unwrap_or(u32::MAX),
                config.enable_prefix_caching,
                false,
            ))
        });
        let offload = connector.as_ref().map(|_| OffloadSide {
            worker: OffloadWorker::new(),
            submitted: Vec::new(),
            done: Vec::new(),
            wait_for: BTreeSet::new(),
            stores: (0, 0),
            loads: (0, 0),
        });
        VllmEngine {
            offload,
            scheduler: Scheduler::with_connector(limits, kv, connector),
            plan,
            environment,
            in_flight: VecDeque::new(),
            spare: Vec::new(),
            shape: StepShape::default(),
            update: UpdateOutput::default(),
            steps_without_token: 0,
            preemptions_without_token: 0,
            stall: None,
            metrics,
        }
    }

    /// The plan this instance runs.
    pub fn plan(&self) -> &VllmPlan {
        &self.plan
    }

    /// The scheduler (for state and counters).
    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    /// The API server's time for a request of `prompt_tokens` before the engine sees it, µs.
    pub fn frontend_micros(&self, prompt_tokens: u32) -> f64 {
        self.environment.frontend_micros(prompt_tokens)
    }

    /// Accept a request, or refuse it as vLLM's API server would.
    pub fn add_request(&mut self, request: &EngineRequest) -> Result<(), Rejection> {
        let prompt = request.prompt_token_ids.len() as u32;
        let max_tokens = request.output_token_ids.len() as u32;
        let max_model_len = self.scheduler.limits().max_model_len;
        if prompt == 0 {
            return Err(Rejection::EmptyPrompt);
        }
        if u64::from(prompt) + u64::from(max_tokens) > u64::from(max_model_len) {
            return Err(Rejection::ExceedsMaxModelLen { prompt, max_tokens, max_model_len });
        }
        self.scheduler.add_request(request);
        Ok(())
    }

    /// Abort a request; its record if it was held.
    pub fn abort(&mut self, key: u64) -> Option<FinishedRequest> {
        self.scheduler.abort(key)
    }

    /// Whether a `schedule` would do anything (vLLM's `has_requests`).
    pub fn has_requests(&self) -> bool {
        self.scheduler.has_requests()
    }

    /// Batches launched and not yet completed.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Check the engine's invariants — the scheduler's, and every launched batch within its
    /// token and sequence budgets — appending one line per broken rule (checked runs, tests).
    pub fn check_invariants(&self, violations: &mut Vec<String>) {
        self.scheduler.check_invariants(violations);
        let limits = self.scheduler.limits();
        for batch in &self.in_flight {
            let sum: u64 = batch.scheduled.iter().map(|s| u64::from(s.tokens)).sum();
            if sum != u64::from(batch.total) || batch.total > limits.max_num_batched_tokens {
                violations.push(format!(
                    "I6 a step schedules {sum} tokens (total {}), budget max_num_batched_tokens {}",
                    batch.total, limits.max_num_batched_tokens
                ));
            }
            if batch.scheduled.len() > limits.max_num_seqs as usize {
                violations.push(format!(
                    "I6 a step schedules {} requests, more than max_num_seqs {}",
                    batch.scheduled.len(),
                    limits.max_num_seqs
                ));
            }
        }
    }

    /// Fault injection for checked runs: leak one KV block (see [`Scheduler::leak_kv_block`]).
    pub fn inject_kv_leak(&mut self) {
        self.scheduler.leak_kv_block();
    }

    /// Schedule the next batch, queue it as launched, pad it to its CUDA graph, and price it.
    /// The shape is empty (and the price zero) when no request got a token.
    pub fn schedule(&mut self) -> (StepPrice, &StepShape) {
        let mut output = self.spare.pop().unwrap_or_default();
        self.scheduler.schedule(&mut output);
        self.shape.clear();
        for s in &output.scheduled {
            self.shape.push(StepRequest {
                new_tokens: s.tokens,
                context_tokens: s.context,
                samples: s.samples,
            });
        }
        // An empty step that preempted nothing left the scheduler as it was: with nothing in
        // flight, every later step would be the same. (An empty step that preempted is normal:
        // a request that preempts itself ends the running pass, and the next step differs.)
        if self.shape.requests.is_empty()
            && output.preempted.is_empty()
            && self.in_flight.is_empty()
            && self.scheduler.has_requests()
            && !self.transfers_pending()
            && self.scheduler.waiting_holding_blocks() == 0
        {
            self.stall.get_or_insert(Stall::Deadlock {
                waiting: self.scheduler.num_waiting(),
                running: self.scheduler.num_running(),
            });
        }
        self.preemptions_without_token += output.preempted.len() as u64;
        // The worker runs batches one after another: a batch's execute_model starts once the
        // previous one's has ended (under asynchronous scheduling, when that batch completes).
        if self.in_flight.is_empty()
            && let Some(side) = &mut self.offload
        {
            side.start_batch(&output);
        }
        self.in_flight.push_back(output);
        self.pad_to_graph();
        let price = if self.shape.requests.is_empty() {
            StepPrice::default()
        } else {
            self.environment.price(&self.shape)
        };
        (price, &self.shape)
    }

    /// vLLM's CUDA-graph dispatch (FULL_AND_PIECEWISE): a step of at most the largest capture
    /// size runs at the next capture size; a uniform decode step whose padded size is at most
    /// `max_num_seqs` replays a full graph, any other a piecewise one; larger steps run eagerly.
    fn pad_to_graph(&mut self) {
        let sizes = &self.plan.config.cudagraph_capture_sizes;
        let tokens = self.shape.totals.new_tokens;
        let Some(&padded) = sizes.iter().find(|&&size| u64::from(size) >= tokens) else { return };
        let uniform_decode = tokens == u64::from(self.shape.totals.requests);
        self.shape.padded_tokens = u64::from(padded);
        self.shape.graph = if uniform_decode && padded <= self.plan.config.max_num_seqs {
            StepGraph::Full
        } else {
            StepGraph::Piecewise
        };
    }

    /// Apply the outputs of the oldest launched batch, which ended at `now_us`; finished
    /// requests move to `finished`. The rest of the update (tokens, statistics, KV events) stays
    /// readable through [`VllmEngine::last_update`] until the next completion.
    pub fn complete_oldest(&mut self, now_us: u64, finished: &mut Vec<FinishedRequest>) {
        let Some(batch) = self.in_flight.pop_front() else { return };
        let output = self.offload.as_mut().and_then(|side| {
            // After the forward: this step's stores are queued for the next; then the poll.
            let meta = batch.connector_meta.as_ref().expect("a connector's step has metadata");
            if batch.total > 0 {
                side.worker.prepare_store_kv(meta);
            }
            let done = std::mem::take(&mut side.done);
            let (finished_sending, finished_recving) = side.worker.get_finished(&done, &batch.finished_prev);
            let output =
                ConnectorOutput { finished_sending, finished_recving, invalid_block_ids: Vec::new() };
            // A zero-token step drops an empty output (kv_connector_no_forward).
            (batch.total > 0 || !output.is_empty()).then_some(output)
        });
        self.scheduler.update_from_output_with(&batch, now_us, output.as_ref(), &mut self.update);
        if let (Some(side), Some(next)) = (&mut self.offload, self.in_flight.front()) {
            side.start_batch(next);
        }
        if self.update.tokens.iter().any(|(_, token)| token.is_some()) || !self.scheduler.has_requests() {
            self.steps_without_token = 0;
            self.preemptions_without_token = 0;
        } else if !batch.scheduled.is_empty() {
            self.steps_without_token += 1;
            let limit = LIVELOCK_STEPS_PER_TOKEN * u64::from(self.plan.config.max_model_len);
            if self.steps_without_token > limit {
                self.stall.get_or_insert(Stall::Livelock {
                    steps: self.steps_without_token,
                    preemptions: self.preemptions_without_token,
                });
            }
        }
        finished.append(&mut self.update.finished);
        self.metrics.record(&self.update.stats, self.scheduler.counters().preemptions);
        self.spare.push(batch);
    }

    /// Copy jobs submitted since the last call, for the host to carry, with their bytes.
    pub fn take_copy_jobs(&mut self) -> Vec<CopyJob> {
        let Some(side) = &mut self.offload else { return Vec::new() };
        let environment = &self.environment;
        let jobs: Vec<CopyJob> = side
            .submitted
            .drain(..)
            .map(|job| CopyJob {
                id: job.id,
                store: job.direction == super::connector::Direction::Store,
                bytes: environment.transfer_bytes(&Transfer { gpu_blocks: job.spec.gpu_blocks.len() as u64 }),
            })
            .collect();
        for job in &jobs {
            let count = if job.store { &mut side.stores } else { &mut side.loads };
            count.0 += 1;
            count.1 += job.bytes;
        }
        jobs
    }

    /// A copy job finished (its bytes arrived); the worker sees it at its next poll.
    pub fn job_done(&mut self, id: u64) {
        if let Some(side) = &mut self.offload {
            side.done.push(id);
            side.wait_for.remove(&id);
        }
    }

    /// Whether the step just scheduled must wait for store jobs of requests it preempted
    /// (`handle_preemptions` blocks until they are done) before it can run.
    pub fn waiting_for_jobs(&self) -> bool {
        self.offload.as_ref().is_some_and(|side| !side.wait_for.is_empty())
    }

    /// What the CPU tier did so far, when the instance offloads.
    pub fn offload_record(&self) -> Option<blis_contracts::OffloadRecord> {
        let side = self.offload.as_ref()?;
        let tier = self.scheduler.connector().and_then(|c| c.offloading())?;
        let (stored, evicted) = tier.manager().totals();
        Some(blis_contracts::OffloadRecord {
            cpu_blocks: u64::from(tier.manager().num_blocks()),
            external_prefix_cache_queries: self.metrics.external_prefix_cache_queries,
            external_prefix_cache_hits: self.metrics.external_prefix_cache_hits,
            cpu_blocks_stored: stored,
            cpu_blocks_evicted: evicted,
            store_jobs: side.stores.0,
            store_bytes: side.stores.1,
            load_jobs: side.loads.0,
            load_bytes: side.loads.1,
            refused_stores: tier.cannot_store(),
        })
    }

    /// Whether the instance has an offloading connector.
    pub fn offloads(&self) -> bool {
        self.offload.is_some()
    }

    /// Whether transfers are in flight or finished requests still hold blocks (an idle vLLM
    /// stops polling and notices neither until new work arrives).
    pub fn transfers_pending(&self) -> bool {
        self.offload.as_ref().is_some_and(|side| side.worker.jobs_in_flight() > 0 || !side.done.is_empty())
            || self.scheduler.num_held() > 0
    }

    /// Whether requests wait or run (vLLM's `has_unfinished_requests`).
    pub fn has_unfinished(&self) -> bool {
        self.scheduler.has_unfinished()
    }

    /// The instance's `/metrics` after its latest update.
    pub fn metrics(&self) -> &MetricsSnapshot {
        &self.metrics
    }

    /// Publish KV events with each update (`last_update().kv_events`) or not. An instance
    /// starts without them, and so computes no SHA-256 block hash; the engine host turns them on
    /// before the first request when the router's config indexes them.
    pub fn set_record_kv_events(&mut self, on: bool) {
        self.scheduler.set_record_kv_events(on);
    }

    /// The outputs applied by the latest [`VllmEngine::complete_oldest`].
    pub fn last_update(&self) -> &UpdateOutput {
        &self.update
    }

    /// Why the instance can make no more progress, once it cannot.
    pub fn stall(&self) -> Option<&Stall> {
        self.stall.as_ref()
    }

    /// What the scheduler did so far.
    pub fn counters(&self) -> SchedulerCounters {
        self.scheduler.counters()
    }

    /// Request events since the last [`VllmEngine::clear_events`].
    pub fn events(&self) -> &[(u64, SchedulerEvent)] {
        self.scheduler.events()
    }

    /// Forget the events seen so far.
    pub fn clear_events(&mut self) {
        self.scheduler.clear_events();
    }
}
