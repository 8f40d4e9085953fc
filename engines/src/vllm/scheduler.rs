//! vLLM V1's scheduler, one step at a time: a port of `v1/core/sched/scheduler.py` and
//! `async_scheduler.py` of release 0.15.1, checked decision by decision against that release
//! (`traces/vllm-0.15.1/`, replayed by `engines/tests/oracle.rs`).
//!
//! There is no prefill or decode phase: each request has `num_computed_tokens`, and each step
//! hands it new tokens so the count catches up with its prompt plus its outputs. One
//! [`Scheduler::schedule`]:
//!
//! 1. **Running requests first**, in list order, while budget remains: each gets
//!    `min(remaining, long_prefill_token_threshold, budget, max_model_len − 1 − computed)`
//!    tokens (under asynchronous scheduling a request whose in-flight token is certain to be its
//!    last is skipped); a request given zero tokens is skipped, the loop goes on. If its slots
//!    cannot be allocated, a victim is preempted — the tail of the running list (FCFS) or the
//!    running request with the largest `(priority, arrival)` (priority; if it was already
//!    scheduled this step its tokens go back to the budget) — until allocation succeeds or the
//!    request itself was the victim, which ends the running pass. Preemption is by recompute:
//!    blocks freed, computed tokens reset, back to the front of the waiting queue.
//! 2. **Waiting requests** only if nothing was preempted, while budget remains and fewer than
//!    `max_num_seqs` run: the head is looked up in the prefix cache (whole blocks, at most
//!    `num_tokens − 1` tokens), gets its remaining tokens cut to the budget (the chunked-prefill
//!    cut; without chunked prefill a prompt that does not fit stops admission), and is admitted
//!    if its slots can be allocated; otherwise admission stops — a waiting request never
//!    preempts.
//! 3. Every scheduled request's computed count advances at once. Synchronously, a request
//!    samples a token in this step when it has now computed all its tokens; asynchronously, when
//!    it has computed all its tokens plus those still in flight (an *output placeholder* is then
//!    added, and removed when the token arrives).
//!
//! [`Scheduler::update_from_output`] applies a step's sampled tokens: each goes to its request
//! (if it still exists), which finishes at `max_tokens` or `max_model_len`; finished requests
//! free their blocks at once, leave the running (or waiting) list, and are reported with the next
//! schedule. Aborts ([`Scheduler::abort`]) remove and free a request at once.
//!
//! Under FCFS, running requests that decode with nothing due are advanced as a *cohort* without
//! being read step by step (`cohort.rs`), making the same decisions;
//! [`Scheduler::set_decode_cohort`] turns it off for the reference walk.

mod cohort;
mod invariants;

use std::collections::{BTreeMap, BTreeSet};

use super::block_hash::KeysAhead;
use super::block_pool::{BlockId, KvEvents};
use super::connector::{
    Connector, ConnectorEvent, ConnectorMeta, ConnectorOutput, KvTransferParams, ScheduledRequest,
};
use super::kv_cache_manager::{KvCacheManager, PrefixCacheStats};
use super::queue::{PriorityKey, WaitingQueue};
use super::request::{EngineRequest, Request, Status};
pub(crate) use cohort::CohortRun;
pub use cohort::CohortStep;
use cohort::{Cohort, RunLimits};

/// How waiting requests are ordered and running ones chosen for preemption.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// First come first served; the most recently admitted request is preempted first.
    Fcfs,
    /// Lowest `(priority, arrival)` first; the highest is preempted first.
    Priority,
}

/// The scheduling limits and modes of one instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedulerLimits {
    /// Most requests running.
    pub max_num_seqs: u32,
    /// Most tokens per step.
    pub max_num_batched_tokens: u32,
    /// Longest prompt plus output.
    pub max_model_len: u32,
    /// Whether a prompt may be split over steps.
    pub enable_chunked_prefill: bool,
    /// Per-request token cap per step (0: none).
    pub long_prefill_token_threshold: u32,
    /// The scheduling policy.
    pub policy: Policy,
    /// Asynchronous scheduling: steps are scheduled one ahead of their outputs.
    pub async_scheduling: bool,
}

/// Why a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// It generated `max_tokens` tokens, or reached `max_model_len`.
    Length,
    /// It was aborted.
    Abort,
}

/// A request that ended, with the time each of its tokens was produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FinishedRequest {
    /// The caller's key.
    pub key: u64,
    /// When each output token was produced, µs (the end of the step that sampled it).
    pub token_times_us: Vec<u64>,
    /// Why it ended.
    pub reason: FinishReason,
    /// How many times it was preempted.
    pub num_preemptions: u32,
    /// Prompt tokens found in the prefix cache (or supplied by its connector) at its first
    /// admission.
    pub num_cached_tokens: u32,
    /// Whether it was ever admitted to running (vLLM's `num_cached_tokens` is −1 otherwise).
    pub admitted: bool,
    /// The `kv_transfer_params` its connector returned (a NIXL prefill instance's, for the
    /// decode instance that reads its KV).
    pub kv_transfer: Option<KvTransferParams>,
}

/// A change in one request's life, kept until [`Scheduler::clear_events`], for timelines and
/// metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchedulerEvent {
    /// Moved from the waiting queue to the running list; `resumed` after a preemption.
    Admitted {
        /// Whether it had been preempted.
        resumed: bool,
    },
    /// Preempted: blocks freed, back to the waiting queue.
    Preempted,
    /// Sampled a token right after computing (or recomputing) its prompt.
    PrefillDone,
    /// Finished (or was aborted) and left the engine.
    Finished,
}

/// Counts of what the scheduler did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedulerCounters {
    /// Steps scheduled with at least one token.
    pub steps: u64,
    /// Preemptions.
    pub preemptions: u64,
}

/// A request's place in the scheduler: a slot and the slot's generation, so a handle to a
/// finished request never reaches its slot's next occupant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestHandle {
    slot: u32,
    generation: u32,
}

/// One request's part of a scheduled step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scheduled {
    /// The request.
    pub handle: RequestHandle,
    /// Its key.
    pub key: u64,
    /// Tokens scheduled.
    pub tokens: u32,
    /// Tokens it had computed before this step.
    pub context: u32,
    /// Whether this step samples a token for it.
    pub samples: bool,
}

/// How a request entered a step's batch, as vLLM's `SchedulerOutput` describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// A new request: its computed tokens (the prefix hit) and its whole block table.
    New {
        /// The request's key.
        key: u64,
        /// Computed tokens after the prefix hit, before this step.
        computed: u32,
        /// Its block table, in [`SchedulerOutput::blocks`].
        blocks: BlockSpan,
    },
    /// A running or resumed request.
    Cached {
        /// The request's key.
        key: u64,
        /// Whether it resumes after a preemption.
        resumed: bool,
        /// Computed tokens before this step.
        computed: u32,
        /// Output tokens plus those in flight.
        outputs: u32,
        /// Blocks taken this step (its whole new table when resumed), in
        /// [`SchedulerOutput::blocks`]; none if none.
        new_blocks: Option<BlockSpan>,
    },
}

/// A run of block ids in a step's [`SchedulerOutput::blocks`], so describing a step allocates
/// nothing once its buffers have grown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockSpan {
    /// Where the run starts.
    pub start: u32,
    /// How many ids it has.
    pub len: u32,
}

/// One scheduled step.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SchedulerOutput {
    /// Requests and their tokens, in vLLM's `num_scheduled_tokens` order.
    pub scheduled: Vec<Scheduled>,
    /// Tokens scheduled in all.
    pub total: u32,
    /// New requests, in admission order.
    pub new: Vec<Admission>,
    /// Running requests (in schedule order; only while the scheduler describes them, see
    /// [`Scheduler::describe_running_requests`]), then resumed ones (in admission order).
    pub cached: Vec<Admission>,
    /// Keys preempted, in preemption order.
    pub preempted: Vec<u64>,
    /// Keys finished or aborted since the previous schedule, in key order.
    pub finished_prev: Vec<u64>,
    /// Cascade attention's common prefix, in blocks; only while the scheduler describes its
    /// running requests (see [`Scheduler::describe_running_requests`]), as only a comparison
    /// with vLLM reads it.
    pub common_prefix_blocks: u32,
    /// The block ids the admissions' spans point into.
    pub blocks: Vec<BlockId>,
    /// The connector's metadata for this step (its loads and stores), with a connector.
    pub connector_meta: Option<ConnectorMeta>,
    /// The step's number (from 1), so its outputs are applied in order.
    pub batch: u64,
    /// Decoding requests advanced as a cohort, not listed in `scheduled`.
    pub cohort: CohortStep,
}

impl SchedulerOutput {
    /// Whether no request got a token.
    pub fn is_empty(&self) -> bool {
        self.scheduled.is_empty() && self.cohort.requests == 0
    }

    /// Requests that got tokens, listed or in the cohort.
    pub fn num_scheduled(&self) -> usize {
        self.scheduled.len() + self.cohort.requests as usize
    }

    /// The block ids of `span`.
    pub fn block_ids(&self, span: BlockSpan) -> &[BlockId] {
        &self.blocks[span.start as usize..(span.start + span.len) as usize]
    }

    /// Append `ids` to the step's blocks and return their span.
    fn push_blocks(&mut self, ids: &[BlockId]) -> BlockSpan {
        let start = self.blocks.len() as u32;
        self.blocks.extend_from_slice(ids);
        BlockSpan { start, len: ids.len() as u32 }
    }
}

/// What one [`Scheduler::update_from_output`] did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UpdateOutput {
    /// Keys that were sampled a token, in batch order, with the token — `None` for requests that
    /// had ended meanwhile, whose tokens are dropped.
    pub tokens: Vec<(u64, Option<u32>)>,
    /// Requests that finished, in batch order.
    pub finished: Vec<FinishedRequest>,
    /// The scheduler's statistics after the update.
    pub stats: SchedulerStats,
    /// The KV events published with this update.
    pub kv_events: KvEvents,
    /// The connector's KV events, published after the GPU ones.
    pub connector_events: Vec<ConnectorEvent>,
    /// Tokens sampled for the batch's cohort (not listed in `tokens`).
    pub cohort_tokens: u32,
}

/// vLLM's `SchedulerStats`, as attached to every update.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SchedulerStats {
    /// `len(running)`.
    pub num_running: u32,
    /// `len(waiting)`.
    pub num_waiting: u32,
    /// `1 − free/(N−1)`.
    pub kv_cache_usage: f64,
    /// Prefix-cache lookups since the previous update.
    pub prefix_cache: PrefixCacheStats,
    /// The connector's external prefix hits since the previous update (recorded when a request
    /// is admitted to running: its tokens, and the tokens its connector supplied).
    pub connector_prefix_cache: ConnectorPrefixCacheStats,
}

/// vLLM's connector `PrefixCacheStats`: as [`PrefixCacheStats`], but the hits are signed, because
/// vLLM's invalid-block handling subtracts the tokens a failed load lost from the request's
/// external count including the last block's padding, which can take it below zero
/// (`traces/vllm-0.15.1/nixl-mixed-everything-*`, r10: −9).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnectorPrefixCacheStats {
    /// Lookups by never-preempted requests.
    pub requests: u64,
    /// Tokens those lookups covered.
    pub queries: u64,
    /// Tokens the connector supplied them (may be negative, as above).
    pub hits: i64,
    /// Lookups by preempted requests.
    pub preempted_requests: u64,
    /// Tokens those covered.
    pub preempted_queries: u64,
    /// Tokens the connector supplied them.
    pub preempted_hits: i64,
}

/// A running-phase entry while a step is being scheduled: request, tokens, computed before,
/// blocks taken (in the step's blocks).
type RunningEntry = (RequestHandle, u32, u32, BlockSpan);

/// An admission while a step is being scheduled: request, tokens, hit tokens, resumed.
type AdmittedEntry = (RequestHandle, u32, u32, bool);

/// The scheduler of one vLLM instance.
#[derive(Clone, Debug)]
pub struct Scheduler {
    limits: SchedulerLimits,
    kv: KvCacheManager,
    slots: Vec<(u32, Option<Request>)>,
    free_slots: Vec<u32>,
    by_key: BTreeMap<u64, RequestHandle>,
    waiting: WaitingQueue,
    running: Vec<RequestHandle>,
    finished_ids: Vec<u64>,
    counters: SchedulerCounters,
    events: Vec<(u64, SchedulerEvent)>,
    hits: Vec<BlockId>,
    /// Per-step working lists, kept so a step allocates nothing once they have grown.
    running_entries: Vec<RunningEntry>,
    admitted: Vec<AdmittedEntry>,
    new_blocks: Vec<BlockId>,
    stopped: Vec<(RequestHandle, Status)>,
    scratch: Vec<u8>,
    connector: Option<Connector>,
    key_block_size: Option<usize>,
    /// The block size output tokens are keyed with as they are generated: `key_block_size`,
    /// or none when output blocks are keyed late ([`Scheduler::set_defer_output_blocks`]).
    output_key_block_size: Option<usize>,
    finished_recving: BTreeSet<u64>,
    failed_recving: BTreeSet<u64>,
    connector_stats: ConnectorPrefixCacheStats,
    skipped: Vec<RequestHandle>,
    held_requests: usize,
    record_events: bool,
    /// Whether steps list their running requests in [`SchedulerOutput::cached`].
    describe_running: bool,
    /// The time of the latest update, µs (when a NIXL hold taken at a finish expires from).
    clock_us: u64,
    /// Decoding requests advanced without being walked, and the batch numbers.
    cohort: Cohort,
    /// The running requests not in the cohort, in running order (with their places in it),
    /// while `walked_valid`: after a step with a cohort.
    walked: Vec<(u64, RequestHandle)>,
    walked_valid: bool,
    /// The place the next request appended to the running list gets.
    next_running_seq: u64,
}

/// Write a running request's part of a step (`n` tokens after `computed`, the blocks taken in
/// `new_blocks`) into `out`, as vLLM's `SchedulerOutput` describes it (its cached-request entry
/// only if `cached`), before its counts advance; returns where its entry is in `out.scheduled`
/// (not sampling until advanced).
fn describe_running(
    out: &mut SchedulerOutput,
    cached: bool,
    request: &Request,
    handle: RequestHandle,
    n: u32,
    computed: u32,
    new_blocks: BlockSpan,
) -> usize {
    let key = request.spec.key;
    if cached {
        out.cached.push(Admission::Cached {
            key,
            resumed: false,
            computed,
            outputs: request.num_output_tokens() + request.num_output_placeholders,
            new_blocks: (new_blocks.len > 0).then_some(new_blocks),
        });
    }
    out.scheduled.push(Scheduled { handle, key, tokens: n, context: computed, samples: false });
    out.scheduled.len() - 1
}

/// The tokens a running request gets this step with `budget` left: what it lacks of its tokens
/// and placeholders, cut to the long-prefill threshold, the budget and `max_model_len`; `None`
/// when it gets none (asynchronously, also when its in-flight token is certain to be its last).
#[inline]
fn running_tokens(request: &Request, limits: &SchedulerLimits, budget: u32) -> Option<u32> {
    let placeholders = request.num_output_placeholders;
    let computed = request.num_computed_tokens;
    if placeholders > 0 && computed + 2 - placeholders >= request.num_prompt_tokens + request.max_tokens {
        return None;
    }
    let mut n = request.num_tokens() + placeholders - computed;
    if limits.long_prefill_token_threshold > 0 && limits.long_prefill_token_threshold < n {
        n = limits.long_prefill_token_threshold;
    }
    n = n.min(budget).min(limits.max_model_len.saturating_sub(1).saturating_sub(computed));
    (n > 0).then_some(n)
}

impl Scheduler {
    /// A scheduler with `limits` over `kv`.
    pub fn new(limits: SchedulerLimits, kv: KvCacheManager) -> Scheduler {
        Scheduler::with_connector(limits, kv, None)
    }

    /// A scheduler with `limits` over `kv` and a KV connector (requests are then keyed by
    /// block even with prefix caching off, as EngineCore gives them a block hasher whenever a
    /// connector exists).
    pub fn with_connector(
        limits: SchedulerLimits,
        kv: KvCacheManager,
        connector: Option<Connector>,
    ) -> Scheduler {
        let key_block_size =
            if connector.is_some() { Some(kv.block_size() as usize) } else { kv.hash_block_size() };
        let waiting = match limits.policy {
            Policy::Fcfs => WaitingQueue::Fcfs(Default::default()),
            Policy::Priority => WaitingQueue::Priority(Default::default()),
        };
        Scheduler {
            limits,
            kv,
            slots: Vec::new(),
            free_slots: Vec::new(),
            by_key: BTreeMap::new(),
            waiting,
            running: Vec::new(),
            finished_ids: Vec::new(),
            counters: SchedulerCounters::default(),
            events: Vec::new(),
            hits: Vec::new(),
            running_entries: Vec::new(),
            admitted: Vec::new(),
            new_blocks: Vec::new(),
            stopped: Vec::new(),
            scratch: Vec::new(),
            key_block_size,
            output_key_block_size: key_block_size,
            connector,
            finished_recving: BTreeSet::new(),
            failed_recving: BTreeSet::new(),
            connector_stats: ConnectorPrefixCacheStats::default(),
            skipped: Vec::new(),
            held_requests: 0,
            record_events: false,
            describe_running: true,
            clock_us: 0,
            cohort: Cohort::new(limits.async_scheduling),
            walked: Vec::new(),
            walked_valid: false,
            next_running_seq: 0,
        }
    }

    /// Whether each step lists its running requests in [`SchedulerOutput::cached`] (vLLM's
    /// `scheduled_cached_reqs`, which only a comparison with vLLM reads; a request resuming
    /// after a preemption is always listed). On by default; an engine turns it off.
    pub fn describe_running_requests(&mut self, on: bool) {
        self.describe_running = on;
    }

    /// Advance decoding requests with nothing due as a cohort (on by default; the scheduler
    /// does so only under FCFS, without a connector, a long-prefill threshold or running-request
    /// descriptions), or walk every running request each step, the reference path the cohort
    /// is tested against. The cohort assumes, as vLLM's engine core runs, that at most one
    /// batch is in flight when a step is scheduled, so a preempted request's last in-flight
    /// token has landed before it can be taken back in.
    pub fn set_decode_cohort(&mut self, on: bool) {
        self.cohort.enabled = on;
    }

    /// Cache blocks past a request's prompt only when it is preempted (see
    /// [`KvCacheManager::set_defer_output_blocks`]); never with a connector.
    pub fn set_defer_output_blocks(&mut self, on: bool) {
        self.kv.set_defer_output_blocks(on && self.connector.is_none());
        self.output_key_block_size = if self.kv.keys_outputs_late() { None } else { self.key_block_size };
    }

    /// Whether steps may advance decoding requests as a cohort (see
    /// [`Scheduler::set_decode_cohort`]).
    fn cohort_in_scope(&self) -> bool {
        let limits = &self.limits;
        self.cohort.enabled
            && self.connector.is_none()
            && limits.policy == Policy::Fcfs
            && limits.long_prefill_token_threshold == 0
            && !self.describe_running
    }

    /// The KV connector, if any.
    pub fn connector(&self) -> Option<&Connector> {
        self.connector.as_ref()
    }

    /// Waiting requests that hold blocks (loaded by their connector, or allocated while a load
    /// runs): what starves admission in vLLM 0.15.1's offloading livelock
    /// (`traces/vllm-0.15.1/offload-livelock-sync.jsonl`).
    pub fn waiting_holding_blocks(&self) -> usize {
        self.waiting.iter().filter(|&h| !self.get(h).blocks.is_empty()).count()
    }

    /// Requests finished whose blocks their connector still holds.
    pub fn num_held(&self) -> usize {
        self.held_requests
    }

    /// The limits.
    pub fn limits(&self) -> &SchedulerLimits {
        &self.limits
    }

    /// Add a request to the waiting queue. Its key must be new.
    pub fn add_request(&mut self, spec: &EngineRequest) {
        self.add(spec, None);
    }

    /// Add a request as [`Scheduler::add_request`] does, its blocks keyed from `ahead` when it
    /// was made for the block size this scheduler keys.
    pub fn add_request_with_keys(&mut self, spec: &EngineRequest, ahead: &KeysAhead) {
        self.add(spec, Some(ahead));
    }

    /// The block size its prefix-cache keys are made for, if it keys blocks.
    pub fn key_block_size(&self) -> Option<usize> {
        self.key_block_size
    }

    /// Rename the instance's NIXL connector (see [`super::connector::NixlScheduler::set_engine_id`]).
    pub fn set_nixl_engine_id(&mut self, engine_id: std::sync::Arc<str>) {
        if let Some(nixl) = self.connector.as_mut().and_then(Connector::nixl_mut) {
            nixl.set_engine_id(engine_id);
        }
    }

    /// Add a request carrying `kv_transfer_params` for its NIXL connector (see
    /// [`KvTransferParams`]); without a NIXL connector the params are ignored, as vLLM warns and
    /// runs the request normally.
    pub fn add_request_with_transfer(&mut self, spec: &EngineRequest, params: KvTransferParams) {
        if let Some(nixl) = self.connector.as_mut().and_then(Connector::nixl_mut) {
            nixl.register(spec.key, params);
        }
        self.add(spec, None);
    }

    fn add(&mut self, spec: &EngineRequest, ahead: Option<&KeysAhead>) {
        let request = Request::new(spec, self.key_block_size, ahead, &mut self.scratch);
        request.prefetch_keys();
        let slot = match self.free_slots.pop() {
            Some(slot) => slot,
            None => {
                self.slots.push((0, None));
                (self.slots.len() - 1) as u32
            }
        };
        let entry = &mut self.slots[slot as usize];
        entry.0 = entry.0.wrapping_add(1);
        entry.1 = Some(request);
        let handle = RequestHandle { slot, generation: entry.0 };
        self.by_key.insert(spec.key, handle);
        let key = self.priority_key(handle);
        self.waiting.add(key);
    }

    /// Whether any request is unfinished, or finished ids are still to be reported (vLLM's
    /// `has_requests`).
    pub fn has_requests(&self) -> bool {
        !self.waiting.is_empty() || !self.running.is_empty() || !self.finished_ids.is_empty()
    }

    /// Whether any request is waiting or running.
    pub fn has_unfinished(&self) -> bool {
        !self.waiting.is_empty() || !self.running.is_empty()
    }

    /// Requests running.
    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    /// Requests waiting (new or preempted).
    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Record KV events or not (see [`KvCacheManager::set_record_events`]).
    pub fn set_record_kv_events(&mut self, on: bool) {
        self.record_events = on;
        self.kv.set_record_events(on);
    }

    /// The KV-cache manager.
    pub fn kv(&self) -> &KvCacheManager {
        &self.kv
    }

    /// What the scheduler did so far.
    pub fn counters(&self) -> SchedulerCounters {
        self.counters
    }

    /// Request events since the last [`Scheduler::clear_events`], in the order they happened.
    pub fn events(&self) -> &[(u64, SchedulerEvent)] {
        &self.events
    }

    /// Forget the events seen so far.
    pub fn clear_events(&mut self) {
        self.events.clear();
    }

    /// Keys of the running requests, in list order.
    pub fn running_keys(&self) -> impl Iterator<Item = u64> + '_ {
        self.running.iter().map(|&h| self.get(h).spec.key)
    }

    /// Keys of the waiting requests, in admission order.
    pub fn waiting_keys(&self) -> impl Iterator<Item = u64> + '_ {
        self.waiting.iter().map(|h| self.get(h).spec.key)
    }

    /// Keys of the requests held, unfinished, each with whether it was ever scheduled.
    pub fn held(&self) -> impl Iterator<Item = (u64, bool)> + '_ {
        self.slots
            .iter()
            .filter_map(|(_, r)| r.as_ref())
            .filter(|r| r.status != Status::Finished)
            .map(|r| (r.spec.key, r.num_cached_tokens.is_some()))
    }

    /// Keys of finished requests whose blocks their connector holds.
    pub fn held_by_connector(&self) -> impl Iterator<Item = u64> + '_ {
        self.slots
            .iter()
            .filter_map(|(_, r)| r.as_ref())
            .filter(|r| r.status == Status::Finished)
            .map(|r| r.spec.key)
    }

    /// Blocks held by requests, summed over block tables.
    pub fn blocks_held(&self) -> u64 {
        self.slots.iter().filter_map(|(_, r)| r.as_ref()).map(|r| r.blocks.len() as u64).sum()
    }

    fn get(&self, handle: RequestHandle) -> &Request {
        match &self.slots[handle.slot as usize] {
            (generation, Some(request)) if *generation == handle.generation => request,
            _ => unreachable!("a live handle"),
        }
    }

    fn get_mut(&mut self, handle: RequestHandle) -> &mut Request {
        match &mut self.slots[handle.slot as usize] {
            (generation, Some(request)) if *generation == handle.generation => request,
            _ => unreachable!("a live handle"),
        }
    }

    fn priority_key(&self, handle: RequestHandle) -> PriorityKey {
        let spec = &self.get(handle).spec;
        PriorityKey { priority: spec.priority, arrival_us: spec.arrival_us, name: spec.name.clone(), handle }
    }

    /// Schedule the next step into `out`.
    pub fn schedule(&mut self, out: &mut SchedulerOutput) {
        out.scheduled.clear();
        out.new.clear();
        out.cached.clear();
        out.preempted.clear();
        out.finished_prev.clear();
        out.blocks.clear();
        out.connector_meta = None;
        let limits = self.limits;
        let mut budget = limits.max_num_batched_tokens;
        let mut running_entries = std::mem::take(&mut self.running_entries);
        running_entries.clear();
        let mut preempted_any = false;
        let asynchronous = limits.async_scheduling;
        // Under FCFS without a connector no entry leaves the walk's list once in it, and nothing
        // between the walk and the advance (3.) reads a running request's counters: its part of
        // the step is written and advanced as the walk passes it, in the same order.
        let advance_in_walk = self.connector.is_none() && limits.policy == Policy::Fcfs;

        // 1. Running requests, in order: with a cohort, those not in it; otherwise all.
        let batch = self.cohort.scheduled + 1;
        let with_cohort = self.cohort_in_scope() && self.cohort_walk_fits(batch, budget);
        if with_cohort {
            budget = self.walk_beside_cohort(out, batch, budget);
        } else {
            self.cohort.disband(&self.running, &mut self.slots);
            self.walked_valid = false;
        }
        let mut index = 0;
        while !with_cohort && index < self.running.len() && budget > 0 {
            let handle = self.running[index];
            self.settle(handle);
            let request = self.get(handle);
            let computed = request.num_computed_tokens;
            let Some(n) = running_tokens(request, &limits, budget) else {
                index += 1;
                continue;
            };
            let start = out.blocks.len() as u32;
            let allocated = loop {
                let kv = &mut self.kv;
                let request = match &mut self.slots[handle.slot as usize].1 {
                    Some(r) => r,
                    None => unreachable!("running requests exist"),
                };
                if kv.allocate_running(request, n, &mut out.blocks) {
                    break true;
                }
                let victim = match limits.policy {
                    Policy::Fcfs => self.running.pop().expect("the request itself is running"),
                    Policy::Priority => {
                        let position = self.priority_victim();
                        let victim = self.running.remove(position);
                        if let Some(at) = running_entries.iter().position(|e| e.0 == victim) {
                            let entry = running_entries.remove(at);
                            budget += entry.1;
                            index -= 1;
                        }
                        victim
                    }
                };
                self.preempt(victim);
                preempted_any = true;
                out.preempted.push(self.get(victim).spec.key);
                if victim == handle {
                    break false;
                }
            };
            if !allocated {
                break;
            }
            let span = BlockSpan { start, len: out.blocks.len() as u32 - start };
            if advance_in_walk {
                let request = match &mut self.slots[handle.slot as usize].1 {
                    Some(r) => r,
                    None => unreachable!("running requests exist"),
                };
                let at = describe_running(out, self.describe_running, request, handle, n, computed, span);
                out.scheduled[at].samples = request.advance(n, asynchronous);
            } else {
                running_entries.push((handle, n, computed, span));
            }
            budget -= n;
            index += 1;
        }
        out.batch = batch;
        out.cohort = self.cohort.count_step(batch);
        budget -= out.cohort.requests;

        // 2. Waiting requests, only if nobody was preempted.
        let mut admitted = std::mem::take(&mut self.admitted);
        admitted.clear();
        let mut skipped = std::mem::take(&mut self.skipped);
        skipped.clear();
        while !preempted_any && budget > 0 {
            if self.running.len() == limits.max_num_seqs as usize {
                break;
            }
            let Some(handle) = self.waiting.peek() else { break };
            self.settle(handle);
            debug_assert!(
                self.get(handle).cohort_run.is_none(),
                "a request is taken back in once its run's batches have completed"
            );
            if self.get(handle).status == Status::WaitingForRemoteKvs {
                if self.update_waiting_for_remote_kv(handle) {
                    let request = self.get_mut(handle);
                    request.status =
                        if request.num_preemptions > 0 { Status::Preempted } else { Status::Waiting };
                } else {
                    self.waiting.pop();
                    skipped.push(handle);
                    continue;
                }
            }
            let mut hits = std::mem::take(&mut self.hits);
            let (hit_tokens, num_tokens, lookup) = {
                let request = match &self.slots[handle.slot as usize].1 {
                    Some(r) => r,
                    None => unreachable!("waiting requests exist"),
                };
                if request.num_computed_tokens == 0 {
                    let hit = self.kv.get_computed_blocks(request, &mut hits);
                    let external = self.connector.as_mut().map(|c| {
                        c.get_num_new_matched_tokens(
                            request.spec.key,
                            request.block_keys(),
                            request.num_tokens(),
                            request.num_prompt_tokens,
                            hit,
                        )
                    });
                    (hit, request.num_tokens(), external)
                } else {
                    hits.clear();
                    (0, request.num_tokens(), Some((Some(0), false)))
                }
            };
            let (external, load_async) = match lookup {
                None => (0, false),
                Some((None, _)) => {
                    self.hits = hits;
                    self.waiting.pop();
                    skipped.push(handle);
                    continue;
                }
                Some((Some(e), load_async)) => (e, load_async),
            };
            let num_computed = {
                let request = self.get_mut(handle);
                if request.num_computed_tokens == 0 {
                    if lookup.is_some() {
                        request.num_external_computed_tokens = i64::from(external);
                    }
                    hit_tokens + external
                } else {
                    request.num_computed_tokens
                }
            };
            let mut n = 0;
            if !load_async {
                n = num_tokens - num_computed;
                if limits.long_prefill_token_threshold > 0 && limits.long_prefill_token_threshold < n {
                    n = limits.long_prefill_token_threshold;
                }
                if !limits.enable_chunked_prefill && n > budget {
                    self.hits = hits;
                    break;
                }
                n = n.min(budget);
            }
            let mut new_blocks = std::mem::take(&mut self.new_blocks);
            new_blocks.clear();
            let ok = {
                let kv = &mut self.kv;
                let request = match &mut self.slots[handle.slot as usize].1 {
                    Some(r) => r,
                    None => unreachable!("waiting requests exist"),
                };
                kv.allocate_slots(request, n, hit_tokens, &hits, external, load_async, &mut new_blocks)
            };
            let num_hit_blocks = hits.len();
            self.hits = hits;
            self.new_blocks = new_blocks;
            if !ok {
                break;
            }
            if let Some(connector) = &mut self.connector {
                let request = match &self.slots[handle.slot as usize].1 {
                    Some(r) => r,
                    None => unreachable!("waiting requests exist"),
                };
                connector.update_state_after_alloc(
                    request.spec.key,
                    request.block_keys(),
                    &request.blocks,
                    num_hit_blocks,
                    external,
                );
            }
            self.waiting.pop();
            if load_async {
                skipped.push(handle);
                self.get_mut(handle).status = Status::WaitingForRemoteKvs;
                continue;
            }
            if self.connector.is_some() {
                let request = self.get(handle);
                let (tokens, ext) = (u64::from(request.num_tokens()), request.num_external_computed_tokens);
                let preempted = request.num_preemptions > 0;
                let stats = &mut self.connector_stats;
                if preempted {
                    stats.preempted_requests += 1;
                    stats.preempted_queries += tokens;
                    stats.preempted_hits += ext;
                } else {
                    stats.requests += 1;
                    stats.queries += tokens;
                    stats.hits += ext;
                }
            }
            self.running.push(handle);
            let seq = self.next_running_seq;
            self.next_running_seq += 1;
            if with_cohort {
                self.walked.push((seq, handle));
            }
            let request = self.get_mut(handle);
            request.running_seq = seq;
            let resumed = request.status == Status::Preempted;
            request.status = Status::Running;
            request.num_computed_tokens = num_computed;
            request.num_cached_tokens.get_or_insert(num_computed);
            let key = request.spec.key;
            self.events.push((key, SchedulerEvent::Admitted { resumed }));
            admitted.push((handle, n, num_computed, resumed));
            budget -= n;
        }
        // Skipped requests go back to the head of the queue in their order (FCFS), or back
        // into the order (priority).
        for &handle in skipped.iter().rev() {
            let key = self.priority_key(handle);
            self.waiting.prepend(key);
        }
        self.skipped = skipped;

        // The step's description, as vLLM's SchedulerOutput lays it out.
        let advanced = out.scheduled.len();
        for &(handle, n, computed, new_blocks) in &running_entries {
            describe_running(out, self.describe_running, self.get(handle), handle, n, computed, new_blocks);
        }
        for &(handle, n, computed, resumed) in &admitted {
            let request = self.get(handle);
            out.scheduled.push(Scheduled {
                handle,
                key: request.spec.key,
                tokens: n,
                context: computed,
                samples: false,
            });
            let (key, outputs) =
                (request.spec.key, request.num_output_tokens() + request.num_output_placeholders);
            let slot = handle.slot as usize;
            let blocks = match &self.slots[slot].1 {
                Some(r) => out.push_blocks(&r.blocks),
                None => unreachable!("admitted requests exist"),
            };
            if resumed {
                out.cached.push(Admission::Cached {
                    key,
                    resumed: true,
                    computed,
                    outputs,
                    new_blocks: Some(blocks),
                });
            } else {
                out.new.push(Admission::New { key, computed, blocks });
            }
        }
        self.running_entries = running_entries;
        self.admitted = admitted;
        out.total = out.scheduled.iter().map(|s| s.tokens).sum::<u32>() + out.cohort.requests;
        out.common_prefix_blocks = match self.running.first() {
            Some(&first) if self.describe_running => self.kv.common_prefix_blocks(self.get(first)),
            _ => 0,
        };
        std::mem::swap(&mut out.finished_prev, &mut self.finished_ids);
        out.finished_prev.sort_unstable();

        if self.connector.is_some() {
            self.build_connector_meta(out);
        }

        // 3. Advance computed counts; decide which requests sample a token.
        for entry in &mut out.scheduled[advanced..] {
            let request = match &mut self.slots[entry.handle.slot as usize].1 {
                Some(r) => r,
                None => unreachable!("scheduled requests exist"),
            };
            entry.samples = request.advance(entry.tokens, asynchronous);
        }
        if !out.is_empty() {
            self.counters.steps += 1;
        }
    }

    /// Whether a step can keep its cohort: every running request not in it gets all the tokens
    /// it asks for, so neither the budget nor the free blocks make running order decide who
    /// gets what. Members whose run ended with the batch before leave the cohort first, back
    /// among the walked requests in running order.
    fn cohort_walk_fits(&mut self, batch: u64, budget: u32) -> bool {
        if !self.walked_valid {
            // The step before walked every request; none is in the cohort.
            debug_assert!(!self.cohort.has_members(), "a walk of every request disbands the cohort");
            self.walked.clear();
            for &handle in &self.running {
                self.walked.push((self.get(handle).running_seq, handle));
            }
            self.walked_valid = true;
        }
        let leaving = self.cohort.take_leaving(batch);
        for &(seq, handle) in &leaving {
            let request = match &mut self.slots[handle.slot as usize] {
                (generation, Some(r)) if *generation == handle.generation => r,
                _ => continue,
            };
            if self.cohort.run_through(handle.slot) + 1 != batch || request.running_seq != seq {
                // Its run was cut (an abort, or a step that walked every request).
                continue;
            }
            self.cohort.leave(handle, request);
            let at = self.walked.partition_point(|&(walked_seq, _)| walked_seq < seq);
            self.walked.insert(at, (seq, handle));
        }
        self.cohort.give_back_leaving(batch, leaving);
        let limits = self.limits;
        let (mut tokens, mut blocks) = (u64::from(self.cohort.members()), 0usize);
        for &(_, handle) in &self.walked {
            let request = match &mut self.slots[handle.slot as usize].1 {
                Some(r) => r,
                None => unreachable!("running requests exist"),
            };
            self.cohort.settle(request, self.output_key_block_size, &mut self.scratch);
            if let Some(n) = running_tokens(request, &limits, u32::MAX) {
                tokens += u64::from(n);
                blocks += self.kv.blocks_to_run(request, n);
            }
        }
        tokens <= u64::from(budget) && blocks <= self.kv.pool().num_free() as usize
    }

    /// Walk the running requests not in the cohort, in order, as the faithful walk does (none
    /// is cut short or preempted: [`Scheduler::cohort_walk_fits`] said so); those left with
    /// nothing due for a while join the cohort from the next batch. Returns the budget left.
    fn walk_beside_cohort(&mut self, out: &mut SchedulerOutput, batch: u64, mut budget: u32) -> u32 {
        let limits = self.limits;
        let run_limits = RunLimits {
            block_size: self.kv.block_size(),
            caching: self.kv.pool().caching(),
            max_model_len: limits.max_model_len,
        };
        let mut kept = 0;
        for index in 0..self.walked.len() {
            let (seq, handle) = self.walked[index];
            let request = match &mut self.slots[handle.slot as usize].1 {
                Some(r) => r,
                None => unreachable!("running requests exist"),
            };
            let computed = request.num_computed_tokens;
            let mut joined = false;
            if let Some(n) = running_tokens(request, &limits, budget) {
                let start = out.blocks.len() as u32;
                let allocated = self.kv.allocate_running(request, n, &mut out.blocks);
                assert!(allocated, "a step beside the cohort found its blocks free");
                if n == 1 && self.cohort.try_rejoin(handle, request, batch, run_limits) {
                    // Counted in the cohort's part of the batch (whose tokens the budget is
                    // charged with), not listed; the step's new blocks still hold the one it took.
                    continue;
                }
                budget -= n;
                let span = BlockSpan { start, len: out.blocks.len() as u32 - start };
                let at = describe_running(out, self.describe_running, request, handle, n, computed, span);
                let samples = request.advance(n, limits.async_scheduling);
                out.scheduled[at].samples = samples;
                joined = samples && n == 1 && self.cohort.try_join(handle, request, batch, run_limits);
            }
            if !joined {
                self.walked[kept] = (seq, handle);
                kept += 1;
            }
        }
        self.walked.truncate(kept);
        budget
    }

    /// Bring `handle`'s fields up to date with its cohort run, if it has one.
    fn settle(&mut self, handle: RequestHandle) {
        if let Some(request) = self.slots[handle.slot as usize].1.as_mut() {
            self.cohort.settle(request, self.output_key_block_size, &mut self.scratch);
        }
    }

    /// `_update_waiting_for_remote_kv`: whether a parked request's load was reported; if so its
    /// loaded blocks are cached and its computed count set (all it holds, less the last token
    /// when that is everything), or, after a failed load, cut back (freeing everything when
    /// nothing valid is left, so it is looked up afresh).
    fn update_waiting_for_remote_kv(&mut self, handle: RequestHandle) -> bool {
        let key = self.get(handle).spec.key;
        if !self.finished_recving.contains(&key) {
            return false;
        }
        let block_size = self.kv.block_size();
        let kv = &mut self.kv;
        let request = match &mut self.slots[handle.slot as usize].1 {
            Some(r) => r,
            None => unreachable!("waiting requests exist"),
        };
        if self.failed_recving.remove(&key) {
            if request.num_computed_tokens > 0 {
                let computed = request.num_computed_tokens;
                kv.cache_blocks(request, computed);
            } else {
                kv.free(request);
            }
        } else {
            let mut computed = (request.blocks.len() as u32 * block_size).min(request.num_tokens());
            if computed == request.num_tokens() {
                computed -= 1;
            }
            kv.cache_blocks(request, computed);
            request.num_computed_tokens = computed;
        }
        self.finished_recving.remove(&key);
        true
    }

    /// `build_connector_meta`, at the end of `schedule()`: the connector sees the scheduled
    /// requests (new, then running, then resumed) with the tokens they will have computed by the
    /// step's end and their new blocks, and the step's preemptions.
    fn build_connector_meta(&mut self, out: &mut SchedulerOutput) {
        if self.record_events {
            for entry in &out.scheduled {
                let kv = &mut self.kv;
                if let Some(request) = &mut self.slots[entry.handle.slot as usize].1 {
                    kv.hash_all_blocks(request);
                }
            }
        }
        let slots = &self.slots;
        let request = |h: RequestHandle| match &slots[h.slot as usize].1 {
            Some(r) => r,
            None => unreachable!("scheduled requests exist"),
        };
        fn view<'a>(
            r: &'a Request,
            tokens: u32,
            context: u32,
            new_blocks: Option<&'a [BlockId]>,
            resumed: bool,
        ) -> ScheduledRequest<'a> {
            ScheduledRequest {
                key: r.spec.key,
                new_blocks,
                resumed,
                total_tokens: context + tokens,
                block_keys: r.block_keys(),
                block_hashes: &r.block_hashes,
            }
        }
        let mut scheduled = Vec::with_capacity(out.scheduled.len());
        for &(h, n, computed, resumed) in &self.admitted {
            if !resumed {
                scheduled.push(view(request(h), n, computed, Some(&request(h).blocks), false));
            }
        }
        for &(h, n, computed, span) in &self.running_entries {
            let new_blocks = (span.len > 0).then(|| out.block_ids(span));
            scheduled.push(view(request(h), n, computed, new_blocks, false));
        }
        for &(h, n, computed, resumed) in &self.admitted {
            if resumed {
                scheduled.push(view(request(h), n, computed, Some(&request(h).blocks), true));
            }
        }
        let connector = self.connector.as_mut().expect("called with a connector");
        out.connector_meta = Some(connector.build_connector_meta(scheduled.into_iter(), &out.preempted));
    }

    /// `_handle_invalid_blocks` under the `recompute` policy: parked requests whose loaded
    /// blocks include an invalid one are cut back to the first bad block (applied when they
    /// become ready); running ones are cut back now and their tokens of this update dropped.
    /// Returns the running requests affected.
    fn handle_invalid_blocks(&mut self, invalid: &BTreeSet<BlockId>) -> BTreeSet<u64> {
        let block_size = self.kv.block_size();
        let parked: Vec<RequestHandle> =
            self.waiting.iter().filter(|&h| self.get(h).status == Status::WaitingForRemoteKvs).collect();
        let mut affected_parked = BTreeSet::new();
        let mut marked = BTreeSet::new();
        for h in parked {
            let key = self.get(h).spec.key;
            let failed = self.failed_recving.contains(&key);
            let request = self.get_mut(h);
            let span =
                if failed { request.num_computed_tokens } else { request.blocks.len() as u32 * block_size };
            if Self::cut_at_invalid(request, span, invalid, &mut marked, block_size) {
                affected_parked.insert(key);
            }
        }
        let mut affected_running = BTreeSet::new();
        let mut marked = BTreeSet::new();
        for i in 0..self.running.len() {
            let h = self.running[i];
            let request = self.get_mut(h);
            let span = request.num_cached_tokens.unwrap_or(0);
            if Self::cut_at_invalid(request, span, invalid, &mut marked, block_size) {
                affected_running.insert(request.spec.key);
            }
        }
        self.failed_recving.extend(affected_parked);
        affected_running
    }

    /// `_update_requests_with_invalid_blocks` for one request: whether it is affected.
    fn cut_at_invalid(
        request: &mut Request,
        span: u32,
        invalid: &BTreeSet<BlockId>,
        marked: &mut BTreeSet<BlockId>,
        block_size: u32,
    ) -> bool {
        let mut affected = false;
        let mut cut = false;
        let blocks = span.div_ceil(block_size) as usize;
        for (idx, &block) in request.blocks.iter().take(blocks).enumerate() {
            if !invalid.contains(&block) {
                continue;
            }
            affected = true;
            if !marked.insert(block) || cut {
                continue;
            }
            cut = true;
            request.num_computed_tokens = idx as u32 * block_size;
            let lost = span - request.num_computed_tokens;
            request.num_external_computed_tokens -= i64::from(lost);
        }
        if affected && !cut {
            request.num_computed_tokens = request.num_cached_tokens.unwrap_or(0);
        }
        affected
    }

    /// Index in `running` of the priority policy's victim: the largest `(priority, arrival)`,
    /// the first such in list order.
    fn priority_victim(&self) -> usize {
        let mut best = 0;
        for (i, &h) in self.running.iter().enumerate() {
            let (r, b) = (&self.get(h).spec, &self.get(self.running[best]).spec);
            if (r.priority, r.arrival_us) > (b.priority, b.arrival_us) {
                best = i;
            }
        }
        best
    }

    fn preempt(&mut self, handle: RequestHandle) {
        let kv = &mut self.kv;
        let request = match &mut self.slots[handle.slot as usize].1 {
            Some(r) => r,
            None => unreachable!("running requests exist"),
        };
        // Its run's last batches may be in flight; their tokens still come (it is among the
        // cohort's departed until they have).
        self.cohort.settle(request, self.output_key_block_size, &mut self.scratch);
        kv.cache_deferred(request);
        kv.free(request);
        request.status = Status::Preempted;
        request.num_computed_tokens = 0;
        request.num_preemptions += 1;
        request.in_prefill = true;
        let key = request.spec.key;
        self.counters.preemptions += 1;
        self.events.push((key, SchedulerEvent::Preempted));
        let priority_key = self.priority_key(handle);
        self.waiting.prepend(priority_key);
    }

    /// Apply the sampled tokens of `batch` (a step scheduled earlier) at time `now_us`.
    pub fn update_from_output(&mut self, batch: &SchedulerOutput, now_us: u64, out: &mut UpdateOutput) {
        self.update_from_output_with(batch, now_us, None, out);
    }

    /// [`Scheduler::update_from_output`] with what the workers' connector reported this step:
    /// invalid loaded blocks first, then the tokens, then finished transfers (loads mark their
    /// parked requests ready, sends free held requests), then the events, GPU before connector.
    pub fn update_from_output_with(
        &mut self,
        batch: &SchedulerOutput,
        now_us: u64,
        connector_output: Option<&ConnectorOutput>,
        out: &mut UpdateOutput,
    ) {
        self.clock_us = now_us;
        out.cohort_tokens = self.cohort.complete(batch.batch, now_us, batch.cohort);
        let filling = self.cohort.take_filling(batch.batch);
        for &(first, handle) in &filling {
            if let (generation, Some(request)) = &mut self.slots[handle.slot as usize]
                && *generation == handle.generation
            {
                self.cohort.cut_at_fill(handle, request, first);
            }
        }
        self.cohort.give_back_filling(batch.batch, filling);
        out.tokens.clear();
        out.finished.clear();
        out.kv_events.clear();
        out.connector_events.clear();
        let skip = match connector_output {
            Some(o) if !o.invalid_block_ids.is_empty() && self.connector.is_some() => {
                let invalid: BTreeSet<BlockId> = o.invalid_block_ids.iter().copied().collect();
                self.handle_invalid_blocks(&invalid)
            }
            _ => BTreeSet::new(),
        };
        let mut stopped = std::mem::take(&mut self.stopped);
        stopped.clear();
        let max_model_len = self.limits.max_model_len;
        let asynchronous = self.limits.async_scheduling;
        let hash_block_size = self.output_key_block_size;
        for entry in &batch.scheduled {
            if !entry.samples || skip.contains(&entry.key) {
                continue;
            }
            let kv = &mut self.kv;
            let scratch = &mut self.scratch;
            let request = match &mut self.slots[entry.handle.slot as usize] {
                (generation, Some(r)) if *generation == entry.handle.generation => r,
                _ => {
                    // Finished or aborted meanwhile: vLLM drops the token.
                    out.tokens.push((entry.key, None));
                    continue;
                }
            };
            self.cohort.settle(request, hash_block_size, scratch);
            let status_before = request.status;
            out.tokens.push((request.spec.key, Some(request.next_output())));
            request.append_output(hash_block_size, scratch);
            request.token_times_us.push(now_us);
            if request.in_prefill && status_before == Status::Running {
                request.in_prefill = false;
                self.events.push((request.spec.key, SchedulerEvent::PrefillDone));
            }
            let finished =
                request.num_tokens() >= max_model_len || request.num_output_tokens() >= request.max_tokens;
            if asynchronous {
                request.num_output_placeholders -= 1;
                if status_before == Status::Running {
                    let upto = request.num_computed_tokens - request.num_output_placeholders;
                    kv.cache_blocks(request, upto);
                }
            }
            if finished {
                stopped.push((entry.handle, status_before));
                self.free_request(entry.handle, FinishReason::Length, &mut out.finished);
            }
        }
        if !stopped.is_empty() {
            let ran =
                |h: &RequestHandle| stopped.iter().any(|(s, status)| s == h && *status == Status::Running);
            self.running.retain(|h| !ran(h));
            if self.walked_valid {
                self.walked.retain(|(_, h)| !ran(h));
            }
            for (handle, status) in &stopped {
                if *status != Status::Running {
                    // A preempted request finished by a token that was already in flight.
                    self.remove_waiting(*handle);
                }
            }
        }
        self.stopped = stopped;
        self.settle_departed();
        if let (Some(o), Some(connector)) = (connector_output, &mut self.connector) {
            connector.update_connector_output(o);
            self.finished_recving.extend(o.finished_recving.iter().copied());
            for &key in &o.finished_sending {
                self.free_held(key);
            }
        }
        self.kv.take_events(&mut out.kv_events);
        if let Some(connector) = &mut self.connector {
            out.connector_events = connector.take_events();
        }
        out.stats = SchedulerStats {
            num_running: self.running.len() as u32,
            num_waiting: self.waiting.len() as u32,
            kv_cache_usage: self.kv.pool().usage(),
            prefix_cache: self.kv.take_stats(),
            connector_prefix_cache: std::mem::take(&mut self.connector_stats),
        };
    }

    /// Settle the requests that left the cohort with their run not yet settled, forgetting
    /// those whose run is.
    fn settle_departed(&mut self) {
        let mut departed = self.cohort.take_departed();
        if departed.is_empty() {
            return;
        }
        departed.retain(|handle| match &mut self.slots[handle.slot as usize] {
            // A request in the cohort again is settled when it next leaves it.
            (generation, Some(request))
                if *generation == handle.generation && self.cohort.run_through(handle.slot) == 0 =>
            {
                self.cohort.settle(request, self.output_key_block_size, &mut self.scratch);
                request.cohort_run.is_some()
            }
            _ => false,
        });
        self.cohort.keep_departed(departed);
    }

    /// A held request's transfers are done: free its blocks and forget it.
    fn free_held(&mut self, key: u64) {
        let handle = *self.by_key.get(&key).expect("finished sending is reported only for held requests");
        let entry = &mut self.slots[handle.slot as usize];
        let mut request = entry.1.take().expect("a held request");
        debug_assert_eq!(request.status, Status::Finished);
        self.free_slots.push(handle.slot);
        self.kv.free(&mut request);
        self.by_key.remove(&key);
        self.held_requests -= 1;
    }

    fn remove_waiting(&mut self, handle: RequestHandle) {
        match &mut self.waiting {
            WaitingQueue::Fcfs(q) => q.retain(|&h| h != handle),
            WaitingQueue::Priority(q) => q.retain(|k| k.handle != handle),
        }
    }

    /// Free a finished request: report it with the next schedule, return its blocks, drop it.
    fn free_request(
        &mut self,
        handle: RequestHandle,
        reason: FinishReason,
        finished: &mut Vec<FinishedRequest>,
    ) {
        let key = self.get(handle).spec.key;
        let now_us = self.clock_us;
        let (held, kv_transfer) = match (&mut self.connector, &self.slots[handle.slot as usize].1) {
            (Some(c), Some(request)) => {
                c.request_finished(key, reason == FinishReason::Length, &request.blocks, now_us)
            }
            _ => (false, None),
        };
        if held {
            // The connector holds its blocks until the worker reports its transfers done.
            let request = self.get_mut(handle);
            request.status = Status::Finished;
            let record = FinishedRequest {
                key,
                token_times_us: std::mem::take(&mut request.token_times_us),
                reason,
                num_preemptions: request.num_preemptions,
                num_cached_tokens: request.num_cached_tokens.unwrap_or(0),
                admitted: request.num_cached_tokens.is_some(),
                kv_transfer,
            };
            self.held_requests += 1;
            self.finished_ids.push(key);
            self.events.push((key, SchedulerEvent::Finished));
            finished.push(record);
            return;
        }
        let entry = &mut self.slots[handle.slot as usize];
        let mut request = entry.1.take().expect("a live request");
        self.free_slots.push(handle.slot);
        self.kv.free(&mut request);
        self.by_key.remove(&request.spec.key);
        self.finished_ids.push(request.spec.key);
        self.events.push((request.spec.key, SchedulerEvent::Finished));
        finished.push(FinishedRequest {
            key: request.spec.key,
            token_times_us: request.token_times_us,
            reason,
            num_preemptions: request.num_preemptions,
            num_cached_tokens: request.num_cached_tokens.unwrap_or(0),
            admitted: request.num_cached_tokens.is_some(),
            kv_transfer,
        });
    }

    /// Abort the request `key` (vLLM's `finish_requests` with `FINISHED_ABORTED`): out of the
    /// running list or the waiting queue, blocks freed at once. `None` if it is not held (never
    /// added, or already finished); otherwise the request's record.
    pub fn abort(&mut self, key: u64) -> Option<FinishedRequest> {
        let handle = *self.by_key.get(&key)?;
        let status = self.get(handle).status;
        if status == Status::Finished {
            return None;
        }
        {
            let request = match &mut self.slots[handle.slot as usize].1 {
                Some(r) => r,
                None => unreachable!("held requests exist"),
            };
            self.cohort.cut(handle, request);
            self.cohort.settle(request, self.output_key_block_size, &mut self.scratch);
            self.cohort.drop_in_flight(request);
            request.cohort_run = None;
        }
        if status == Status::Running {
            if let Some(i) = self.running.iter().position(|&h| h == handle) {
                self.running.remove(i);
            }
            if self.walked_valid {
                self.walked.retain(|&(_, h)| h != handle);
            }
        } else {
            let priority_key = self.priority_key(handle);
            self.waiting.remove(&priority_key);
        }
        let mut finished = Vec::with_capacity(1);
        self.free_request(handle, FinishReason::Abort, &mut finished);
        finished.pop()
    }

    /// What the workers need to know of finished requests this step (vLLM's
    /// `finished_req_ids` of the step just scheduled): the keys of `batch.finished_prev`.
    pub fn finished_req_ids(batch: &SchedulerOutput) -> &[u64] {
        &batch.finished_prev
    }

    /// The prompt tokens the request `key` found cached at its first admission, if it is held
    /// and was admitted.
    pub fn num_cached_tokens(&self, key: u64) -> Option<u32> {
        self.by_key.get(&key).and_then(|&h| self.get(h).num_cached_tokens)
    }

    /// Whether the request `key` is held, and in which state.
    pub fn status(&self, key: u64) -> Option<Status> {
        self.by_key.get(&key).map(|&h| self.get(h).status)
    }
}
