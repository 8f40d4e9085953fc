//! One vLLM instance: its plan, its scheduler, its in-flight batches, and the Environment that
//! prices its steps.
//!
//! The host drives it the way vLLM's engine core loop does. [`VllmEngine::schedule`] schedules a
//! batch and queues it as launched; [`VllmEngine::complete_oldest`] applies the outputs of the
//! oldest launched batch. Synchronously a batch completes before the next is scheduled;
//! asynchronously up to two are in flight, so a batch is scheduled before the previous one's
//! outputs are known.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use std::fmt;

use blis_contracts::{Environment, StepGraph, StepPrice, StepRequest, StepShape, Transfer};

use super::block_hash::KeysAhead;
use super::connector::{
    Connector, ConnectorOutput, Job, KvTransferParams, NixlScheduler, OffloadWorker, OffloadingScheduler,
    cpu_blocks,
};
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
    /// A decode leg whose `kv_transfer_params` name no remote blocks (vLLM's NIXL scheduler
    /// asserts on it).
    NoRemoteBlocks,
}

impl Rejection {
    /// A short machine-readable reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Rejection::ExceedsMaxModelLen { .. } => "exceeds_max_model_len",
            Rejection::EmptyPrompt => "empty_prompt",
            Rejection::NoRemoteBlocks => "no_remote_blocks",
        }
    }
}

/// The engine id of a NIXL instance whose `kv_transfer_config` names none and whose host has
/// not named it.
const DEFAULT_ENGINE_ID: &str = "engine-0";

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
    /// when the cache holds only one of them), or a NIXL decode instance's waiting requests hold
    /// the blocks its queue head needs.
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
                "livelock: {steps} steps without a sampled token ({preemptions} preemptions meanwhile); vLLM 0.15.1 does the same for this configuration (see engines/src/vllm/FIELDS.md, 'Known upstream stalls')"
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
        let meta =
            batch.connector_meta.as_ref().and_then(|m| m.offload()).expect("an offloading step's metadata");
        let submitted = self.worker.start_kv_transfers(meta);
        self.submitted.extend(submitted);
    }
}

/// NIXL's worker side in an instance (`NixlConnectorWorker`, its bookkeeping only): the reads a
/// decode instance is to start and those done, the requests a prefill instance holds for a
/// reader with when the hold expires, and the notifications of reads done.
#[derive(Default)]
struct NixlSide {
    pulls: Vec<KvPull>,
    reads_in_flight: BTreeSet<u64>,
    reads_done: BTreeSet<u64>,
    to_process: BTreeSet<u64>,
    holds: BTreeMap<u64, u64>,
    notified: BTreeSet<u64>,
    /// Reads handed out and their bytes.
    reads: (u64, u64),
    /// Holds released by the expiry rather than by a reader.
    expired: u64,
}

impl NixlSide {
    /// `start_load_kv` at the top of a batch's execute_model: the batch's reads are started, and
    /// the requests it names enter the books.
    fn start_batch(&mut self, batch: &SchedulerOutput, environment: &dyn Environment) {
        let Some(meta) = batch.connector_meta.as_ref().and_then(|m| m.nixl()) else { return };
        for recv in &meta.reqs_to_recv {
            let blocks = recv.local_blocks.len() as u64;
            let bytes =
                if blocks == 0 { 0 } else { environment.transfer_bytes(&Transfer { gpu_blocks: blocks }) };
            if blocks > 0 {
                self.reads_in_flight.insert(recv.key);
                self.reads.0 += 1;
                self.reads.1 += bytes;
            }
            self.pulls.push(KvPull {
                key: recv.key,
                remote_engine_id: recv.remote_engine_id.clone(),
                remote_request_key: recv.remote_request_key,
                local_blocks: blocks as u32,
                bytes,
            });
        }
        self.to_process.extend(meta.reqs_in_batch.iter().copied());
        for key in &meta.reqs_not_processed {
            self.to_process.remove(key);
        }
        self.holds.extend(meta.reqs_to_send.iter().copied());
    }

    /// `get_finished` at `now_us`: reads done, and held requests a reader notified or whose hold
    /// expired, in key order.
    fn get_finished(&mut self, now_us: u64) -> ConnectorOutput {
        let finished_recving: Vec<u64> = std::mem::take(&mut self.reads_done).into_iter().collect();
        let mut finished_sending = Vec::new();
        let notified = std::mem::take(&mut self.notified);
        for key in notified {
            if self.holds.remove(&key).is_some() {
                self.to_process.remove(&key);
                finished_sending.push(key);
            } else if self.to_process.contains(&key) {
                // Notified before the hold reached the worker: counted now, released with it.
                self.notified.insert(key);
            }
        }
        let expired: Vec<u64> =
            self.holds.iter().filter(|&(_, &expiry)| expiry < now_us).map(|(&key, _)| key).collect();
        for key in expired {
            self.holds.remove(&key);
            self.to_process.remove(&key);
            self.expired += 1;
            finished_sending.push(key);
        }
        finished_sending.sort_unstable();
        ConnectorOutput { finished_sending, finished_recving, invalid_block_ids: Vec::new() }
    }
}

/// A KV read a decode instance's worker starts (NIXL `READ`), for the host to carry from the
/// prefill instance's GPUs to its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvPull {
    /// The decode instance's request.
    pub key: u64,
    /// The prefill instance (its engine id) to read from.
    pub remote_engine_id: Arc<str>,
    /// The prefill instance's request.
    pub remote_request_key: u64,
    /// Blocks read (0: nothing to read, only a notification that the prefill side may free).
    pub local_blocks: u32,
    /// Bytes over all the decode instance's GPUs, as the cost model counts KV bytes.
    pub bytes: u64,
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
    nixl: Option<NixlSide>,
    plan: VllmPlan,
    scheduler: Scheduler,
    environment: Box<dyn Environment>,
    in_flight: VecDeque<Box<SchedulerOutput>>,
    /// Completed batches kept for reuse. Boxed like `in_flight`'s, so a batch moves between
    /// the two as a pointer rather than as its ~260 bytes.
    #[allow(clippy::vec_box)]
    spare: Vec<Box<SchedulerOutput>>,
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
        let offload_connector = config.offload.map(|o| {
            let factor = o.block_size / config.block_size;
            let per_gpu_block = environment.transfer_bytes(&Transfer { gpu_blocks: 1 });
            let blocks = cpu_blocks(o.cpu_bytes_to_use, per_gpu_block, factor);
            Connector::Offloading(Box::new(OffloadingScheduler::new(
                config.block_size,
                o.block_size,
                u32::try_from(blocks).unwrap_or(u32::MAX),
                config.enable_prefix_caching,
                false,
            )))
        });
        let offload = offload_connector.as_ref().map(|_| OffloadSide {
            worker: OffloadWorker::new(),
            submitted: Vec::new(),
            done: Vec::new(),
            wait_for: BTreeSet::new(),
            stores: (0, 0),
            loads: (0, 0),
        });
        let nixl_connector = config.nixl.as_ref().map(|n| {
            let engine_id = n.engine_id.as_deref().unwrap_or(DEFAULT_ENGINE_ID);
            Connector::Nixl(NixlScheduler::new(Arc::from(engine_id), config.tensor_parallel_size))
        });
        let nixl = nixl_connector.as_ref().map(|_| NixlSide::default());
        let mut scheduler = Scheduler::with_connector(limits, kv, offload_connector.or(nixl_connector));
        // Nothing here reads the running requests' vLLM descriptions; the steps keep their shape.
        scheduler.describe_running_requests(false);
        VllmEngine {
            offload,
            nixl,
            scheduler,
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
        self.admissible(request)?;
        self.scheduler.add_request(request);
        Ok(())
    }

    /// Accept a request as [`VllmEngine::add_request`] does, its blocks keyed from `ahead`
    /// when it was made for this instance's block size.
    pub fn add_request_with_keys(
        &mut self,
        request: &EngineRequest,
        ahead: &KeysAhead,
    ) -> Result<(), Rejection> {
        self.admissible(request)?;
        self.scheduler.add_request_with_keys(request, ahead);
        Ok(())
    }

    /// The API server's checks of a request.
    fn admissible(&self, request: &EngineRequest) -> Result<(), Rejection> {
        let prompt = request.prompt_token_ids.len() as u32;
        let max_tokens = request.output_token_ids.len() as u32;
        let max_model_len = self.scheduler.limits().max_model_len;
        if prompt == 0 {
            return Err(Rejection::EmptyPrompt);
        }
        if u64::from(prompt) + u64::from(max_tokens) > u64::from(max_model_len) {
            return Err(Rejection::ExceedsMaxModelLen { prompt, max_tokens, max_model_len });
        }
        Ok(())
    }

    /// Accept a request carrying `kv_transfer_params` (the decode sidecar's legs), or refuse it
    /// as [`VllmEngine::add_request`] does. A decode leg whose params name no blocks to read is
    /// refused: vLLM's scheduler would fail its assertion on it.
    pub fn add_request_with_transfer(
        &mut self,
        request: &EngineRequest,
        params: KvTransferParams,
    ) -> Result<(), Rejection> {
        if self.nixl.is_some() && params.do_remote_prefill && params.remote_block_ids.is_empty() {
            return Err(Rejection::NoRemoteBlocks);
        }
        self.admissible(request)?;
        self.scheduler.add_request_with_transfer(request, params);
        Ok(())
    }

    /// Whether the instance runs NIXL (prefill/decode disaggregation).
    pub fn nixl(&self) -> bool {
        self.nixl.is_some()
    }

    /// The instance's NIXL engine id (what its returned params name it by).
    pub fn engine_id(&self) -> Option<&str> {
        self.scheduler.connector().and_then(|c| c.nixl()).map(|n| &**n.engine_id())
    }

    /// Name the instance for NIXL (the host gives each instance its own id, as vLLM draws a
    /// fresh uuid4 for each unless one is configured).
    pub fn set_engine_id(&mut self, engine_id: Arc<str>) {
        self.scheduler.set_nixl_engine_id(engine_id);
    }

    /// Reads started since the last call (a decode instance's), for the host to carry.
    pub fn take_pulls(&mut self) -> Vec<KvPull> {
        self.nixl.as_mut().map_or_else(Vec::new, |side| std::mem::take(&mut side.pulls))
    }

    /// The read for request `key` finished (its bytes arrived); the worker reports it at its
    /// next poll.
    pub fn pull_done(&mut self, key: u64) {
        if let Some(side) = &mut self.nixl
            && side.reads_in_flight.remove(&key)
        {
            side.reads_done.insert(key);
        }
    }

    /// A decode instance finished reading this instance's blocks for its request
    /// `remote_request_key`; the hold is released at the next poll.
    pub fn notify_sent(&mut self, remote_request_key: u64) {
        if let Some(side) = &mut self.nixl {
            side.notified.insert(remote_request_key);
        }
    }

    /// NIXL's totals so far: reads started, bytes read, holds released by expiry.
    pub fn nixl_totals(&self) -> Option<(u64, u64, u64)> {
        self.nixl.as_ref().map(|side| (side.reads.0, side.reads.1, side.expired))
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
            let sum: u64 = batch.scheduled.iter().map(|s| u64::from(s.tokens)).sum::<u64>()
                + u64::from(batch.cohort.requests);
            if sum != u64::from(batch.total) || batch.total > limits.max_num_batched_tokens {
                violations.push(format!(
                    "I6 a step schedules {sum} tokens (total {}), budget max_num_batched_tokens {}",
                    batch.total, limits.max_num_batched_tokens
                ));
            }
            if batch.num_scheduled() > limits.max_num_seqs as usize {
                violations.push(format!(
                    "I6 a step schedules {} requests, more than max_num_seqs {}",
                    batch.num_scheduled(),
                    limits.max_num_seqs
                ));
            }
        }
    }

    /// Advance plain decoders as a cohort (on by default) or walk every running request each
    /// step, the reference path (see [`Scheduler::set_decode_cohort`]); outputs are the same.
    pub fn set_decode_cohort(&mut self, on: bool) {
        self.scheduler.set_decode_cohort(on);
    }

    /// Cache blocks past a request's prompt only when it is preempted, for a workload whose
    /// prompts never hold another request's outputs (see
    /// [`KvCacheManager::set_defer_output_blocks`]); outputs are the same.
    pub fn set_defer_output_blocks(&mut self, on: bool) {
        self.scheduler.set_defer_output_blocks(on);
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
        if output.cohort.requests > 0 {
            self.shape.push_decodes(output.cohort.requests, output.cohort.context_tokens);
        }
        // An empty step that preempted nothing left the scheduler as it was: with nothing in
        // flight, every later step would be the same. (An empty step that preempted is normal:
        // a request that preempts itself ends the running pass, and the next step differs.)
        if output.is_empty()
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
        if self.in_flight.is_empty() {
            if let Some(side) = &mut self.offload {
                side.start_batch(&output);
            }
            if let Some(side) = &mut self.nixl {
                side.start_batch(&output, &*self.environment);
            }
        }
        self.in_flight.push_back(output);
        self.pad_to_graph();
        let price = if self.shape.totals.requests == 0 {
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
            let meta = batch
                .connector_meta
                .as_ref()
                .and_then(|m| m.offload())
                .expect("an offloading step's metadata");
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
        let output = output.or_else(|| {
            let side = self.nixl.as_mut()?;
            let output = side.get_finished(now_us);
            (batch.total > 0 || !output.is_empty()).then_some(output)
        });
        self.scheduler.update_from_output_with(&batch, now_us, output.as_ref(), &mut self.update);
        if let Some(next) = self.in_flight.front() {
            if let Some(side) = &mut self.offload {
                side.start_batch(next);
            }
            if let Some(side) = &mut self.nixl {
                side.start_batch(next, &*self.environment);
            }
        }
        if self.update.cohort_tokens > 0
            || self.update.tokens.iter().any(|(_, token)| token.is_some())
            || !self.scheduler.has_requests()
        {
            self.steps_without_token = 0;
            self.preemptions_without_token = 0;
        } else if !batch.is_empty() || !self.transfers_pending() {
            // An empty step counts too unless a transfer is under way: a decode instance whose
            // waiting requests hold the blocks its queue head needs polls forever, as vLLM does.
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
            || self
                .nixl
                .as_ref()
                .is_some_and(|side| !side.reads_in_flight.is_empty() || !side.reads_done.is_empty())
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
