//! SGLang's scheduler: the event loop's batch forming, prefill admission, decode and retraction.
//!
//! Ported from 0.5.23's `Scheduler.get_next_batch_to_run` and what it calls
//! (`managers/scheduler.py`, `schedule_policy.py` `PrefillAdder`, `mem_cache/prefill_budget.py`,
//! `schedule_batch.py`, `mem_cache/common.py`) for a plain dense model on one GPU: one pass
//! stashes the chunked request's last chunk into the radix cache, merges the last prefill batch
//! into the running batch, tries a prefill (the chunked request first, then the waiting queue in
//! policy order, under the adder's token budgets), and otherwise decodes the running batch,
//! retracting requests when the next decode step does not fit. Results are applied by
//! [`Scheduler::process_result`]; the loop that orders forming and results (normal or overlap)
//! belongs to the caller.

mod admission;
mod decode;
mod kv;
mod policy;
mod request;
mod shape;
mod slot_pool;

pub use shape::GraphPolicy;

use super::radix_cache::{EvictionPolicy, NodeId, ROOT, RadixCache, RadixCacheError};
use request::Request;
use slot_pool::SlotPool;

/// `SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION`: the most new tokens an admission reserves.
pub const CLIP_MAX_NEW_TOKENS: usize = 4096;

/// `SGLANG_RETRACT_DECODE_STEPS`: decode steps of headroom a retraction frees for each survivor.
pub const RETRACT_DECODE_STEPS: usize = 20;

/// The order the waiting queue is admitted in (`--schedule-policy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchedulePolicy {
    /// Arrival order; retracted requests rejoin at the end.
    Fcfs,
    /// Longest `max_new_tokens` first (stable).
    Lof,
    /// Longest cached prefix first, a request whose new prefix another waiting request shares
    /// deprioritized; plain fcfs while more than 128 wait.
    Lpm,
    /// The radix tree's depth-first weight order (requests ending in heavier subtrees first).
    DfsWeight,
    /// A fresh shuffle of the queue every pass.
    Random,
}

/// What a scheduler instance is configured with, as the release resolves it.
#[derive(Clone, Debug, PartialEq)]
pub struct SchedulerConfig {
    /// Tokens per KV page.
    pub page_size: u32,
    /// KV slots in the pool (`max_total_num_tokens`).
    pub pool_tokens: usize,
    /// `chunked_prefill_size`; `None` when chunking is off.
    pub chunked_prefill_size: Option<usize>,
    /// `max_prefill_tokens`.
    pub max_prefill_tokens: usize,
    /// `pp_max_micro_batch_size`: running requests at most.
    pub max_running: usize,
    /// Rows of the request-to-token pool.
    pub req_pool_size: usize,
    /// `max_req_len`: prompt plus output tokens at most.
    pub max_req_len: usize,
    /// Queue order.
    pub policy: SchedulePolicy,
    /// `new_token_ratio`'s initial value, floor and decay per decode step.
    pub ratio_init: f64,
    /// Its floor.
    pub ratio_min: f64,
    /// Its decay per decode step that fits.
    pub ratio_decay: f64,
    /// The end-of-sequence token.
    pub eos_token: u32,
    /// The overlap loop (the default): a batch's result is applied after the next batch is
    /// formed, and requests that result finishes by length leave the next decode batch.
    pub overlap: bool,
    /// `--enable-mixed-chunk`: a prefill batch carries the running requests' decode rows.
    pub mixed_chunk: bool,
    /// `--radix-eviction-policy`: which unlocked leaves go first.
    pub eviction: EvictionPolicy,
}

/// A request's identity inside the scheduler: its index in arrival order.
pub type RequestId = usize;

/// Why a request finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// It produced `max_new_tokens`.
    Length,
    /// It produced the end-of-sequence token.
    Stop,
    /// It was aborted.
    Abort,
}

/// What a step ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BatchKind {
    /// Prefill (extend) rows.
    Extend,
    /// One token for each running request.
    Decode,
    /// Prefill rows with the running requests' decode rows after them (`--enable-mixed-chunk`).
    Mixed,
}

/// A batch formed by one pass.
#[derive(Clone, Debug)]
pub struct Batch {
    /// Prefill or decode.
    pub kind: BatchKind,
    /// Its requests, in batch order.
    pub requests: Vec<RequestId>,
    /// The chunked request when the batch was formed (`ScheduleBatch.chunked_req`).
    chunked: Option<RequestId>,
    /// The decode rows of a mixed batch (`decoding_reqs`).
    pub decoding: Vec<RequestId>,
}

/// One prefill row as the batch ran it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtendRow {
    /// The request.
    pub request: RequestId,
    /// Tokens already in the KV cache before this chunk.
    pub prefix_len: usize,
    /// Tokens this chunk computes.
    pub extend_len: usize,
}

/// Where the `random` policy's shuffles come from (upstream: `random.shuffle` on the process's
/// global generator); a simulation passes a named substream, an oracle replay Python's own.
pub trait QueueShuffle: std::fmt::Debug + Send {
    /// Shuffle the waiting queue in place.
    fn shuffle(&mut self, queue: &mut [RequestId]);
}

/// Why a scheduler cannot be built as configured.
#[derive(Debug)]
pub enum SchedulerError {
    /// The radix cache refused its page size.
    RadixCache(RadixCacheError),
    /// `random` was asked for without a shuffle source ([`Scheduler::with_shuffle`]).
    RandomWithoutShuffle,
}

impl std::fmt::Display for SchedulerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::RadixCache(e) => write!(f, "{e}"),
            Self::RandomWithoutShuffle => write!(f, "the random schedule policy needs a shuffle source"),
        }
    }
}

impl std::error::Error for SchedulerError {}

/// The scheduler of one SGLang instance.
#[derive(Debug)]
pub struct Scheduler {
    config: SchedulerConfig,
    tree: RadixCache,
    slots: SlotPool,
    free_rows: usize,
    requests: Vec<Request>,
    waiting: Vec<RequestId>,
    running: Vec<RequestId>,
    batch_is_full: bool,
    chunked: Option<RequestId>,
    pending_chunked_abort: Option<RequestId>,
    last_batch: Option<Batch>,
    ratio: f64,
    refresh_calls: u64,
    retracted: Vec<RequestId>,
    oom_aborted: Vec<RequestId>,
    chunked_aborted: Vec<RequestId>,
    finished: Vec<(RequestId, Finish, usize)>,
    /// Batches launched and not yet applied (`result_queue`, overlap loop only).
    result_queue: std::collections::VecDeque<Batch>,
    shuffle: Option<Box<dyn QueueShuffle>>,
    /// Ids of forgotten requests, reused by the next arrivals.
    free_ids: Vec<RequestId>,
}

impl Scheduler {
    /// An idle scheduler with an empty pool and tree (any policy but `random`).
    pub fn new(config: SchedulerConfig) -> Result<Self, SchedulerError> {
        if config.policy == SchedulePolicy::Random {
            return Err(SchedulerError::RandomWithoutShuffle);
        }
        Self::build(config, None)
    }

    /// An idle scheduler whose `random` policy draws its shuffles from `shuffle`.
    pub fn with_shuffle(
        config: SchedulerConfig,
        shuffle: Box<dyn QueueShuffle>,
    ) -> Result<Self, SchedulerError> {
        Self::build(config, Some(shuffle))
    }

    fn build(
        config: SchedulerConfig,
        shuffle: Option<Box<dyn QueueShuffle>>,
    ) -> Result<Self, SchedulerError> {
        let tree = RadixCache::new(config.page_size, config.eviction).map_err(SchedulerError::RadixCache)?;
        let slots = SlotPool::new(config.pool_tokens, config.page_size);
        Ok(Self {
            ratio: config.ratio_init,
            free_rows: config.req_pool_size,
            config,
            tree,
            slots,
            requests: Vec::new(),
            waiting: Vec::new(),
            running: Vec::new(),
            batch_is_full: false,
            chunked: None,
            pending_chunked_abort: None,
            last_batch: None,
            refresh_calls: 0,
            retracted: Vec::new(),
            oom_aborted: Vec::new(),
            chunked_aborted: Vec::new(),
            finished: Vec::new(),
            result_queue: std::collections::VecDeque::new(),
            shuffle,
            free_ids: Vec::new(),
        })
    }

    fn page(&self) -> usize {
        self.config.page_size as usize
    }

    fn ceil_page(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.page()) * self.page()
    }

    /// A new request joins the waiting queue (`init_req_max_new_tokens`, `_add_request_to_queue`);
    /// returns its id and the `max_new_tokens` it keeps after clipping.
    pub fn add_request(&mut self, prompt: Vec<u32>, max_new_tokens: usize) -> (RequestId, usize) {
        let input = prompt.len();
        let by_length = self.config.max_req_len.saturating_sub(input + 1);
        let by_memory = self.config.pool_tokens.saturating_sub(self.ceil_page(input) + self.page() + 1);
        let max_new_tokens = max_new_tokens.min(by_length).min(by_memory);
        let request = Request {
            fill_ids: prompt.clone(),
            origin: prompt,
            output: Vec::new(),
            max_new_tokens,
            prefix_len: 0,
            num_matched: 0,
            extend_end: 0,
            kv_committed: 0,
            kv_allocated: 0,
            cache_protected_len: 0,
            cache_inserted_len: 0,
            last_node: ROOT,
            lock: None,
            has_row: false,
            row: Vec::new(),
            inflight_middle_chunks: 0,
            is_retracted: false,
            retracted_stain: false,
            to_finish: false,
            finished: None,
            finished_len: None,
        };
        let id = match self.free_ids.pop() {
            Some(id) => {
                self.requests[id] = request;
                id
            }
            None => {
                self.requests.push(request);
                self.requests.len() - 1
            }
        };
        self.waiting.push(id);
        (id, max_new_tokens)
    }

    /// Request ids allocated so far (forgotten ones are reused): what the scheduler's books hold.
    pub fn request_slots(&self) -> usize {
        self.requests.len()
    }

    /// Drop what a finished request holds and let a later arrival take its id. Call it only once
    /// no batch in flight, no last batch and no running list can name it (two loop iterations
    /// after it finished); without it the scheduler keeps every request it was given.
    pub fn forget(&mut self, id: RequestId) {
        let r = &mut self.requests[id];
        debug_assert!(r.finished.is_some() && !r.has_row, "only a finished, released request is forgotten");
        r.origin = Vec::new();
        r.output = Vec::new();
        r.fill_ids = Vec::new();
        r.row = Vec::new();
        self.free_ids.push(id);
    }

    /// Abort a request (`abort_request`): a waiting one leaves at once, the chunked one at the
    /// next pass, a running one finishes as aborted at its next result.
    pub fn abort(&mut self, id: RequestId) {
        if self.chunked == Some(id) {
            self.pending_chunked_abort = Some(id);
        }
        if let Some(at) = self.waiting.iter().position(|&w| w == id) {
            self.waiting.remove(at);
            self.requests[id].finished = Some(Finish::Abort);
        }
        let inflight = self.running.iter().chain(self.last_batch.iter().flat_map(|b| b.requests.iter()));
        if inflight.copied().any(|r| r == id) && self.requests[id].finished.is_none() {
            self.requests[id].to_finish = true;
        }
    }

    /// The waiting queue, in order.
    pub fn waiting(&self) -> &[RequestId] {
        &self.waiting
    }

    /// The running batch, in order.
    pub fn running(&self) -> &[RequestId] {
        &self.running
    }

    /// The request in the middle of a chunked prefill.
    pub fn chunked(&self) -> Option<RequestId> {
        self.chunked
    }

    /// `running_batch.batch_is_full`.
    pub fn batch_is_full(&self) -> bool {
        self.batch_is_full
    }

    /// `new_token_ratio` now.
    pub fn new_token_ratio(&self) -> f64 {
        self.ratio
    }

    /// Free slots, evictable and protected tree tokens, free request rows.
    pub fn sizes(&self) -> [usize; 4] {
        [self.slots.available(), self.tree.evictable_size(), self.tree.protected_size(), self.free_rows]
    }

    /// Requests retracted by the last pass, in order.
    pub fn retracted(&self) -> &[RequestId] {
        &self.retracted
    }

    /// The request the last pass aborted because it alone could not decode (`retract_decode`).
    pub fn oom_aborted(&self) -> &[RequestId] {
        &self.oom_aborted
    }

    /// How a request finished, if it has.
    pub fn finish_of(&self, id: RequestId) -> Option<Finish> {
        self.requests[id].finished
    }

    /// The chunked request whose abort the last pass completed (`process_pending_chunked_abort`).
    pub fn chunked_aborted(&self) -> &[RequestId] {
        &self.chunked_aborted
    }

    /// Requests finished since the last call, with why and how many tokens they produced.
    pub fn take_finished(&mut self) -> Vec<(RequestId, Finish, usize)> {
        std::mem::take(&mut self.finished)
    }

    /// A prefill row's view as the batch ran it.
    pub fn extend_row(&self, id: RequestId) -> ExtendRow {
        let r = &self.requests[id];
        ExtendRow { request: id, prefix_len: r.prefix_len, extend_len: r.extend_end - r.prefix_len }
    }

    /// Whether `id` ever re-prefilled after a retraction.
    pub fn ever_retracted(&self, id: RequestId) -> bool {
        self.requests[id].retracted_stain
    }

    /// Output tokens so far.
    pub fn outputs(&self, id: RequestId) -> usize {
        self.requests[id].output.len()
    }

    /// Take one page from the pool with no owner, so the invariants' check must fire (a fault a
    /// checked run injects to prove it).
    pub fn inject_slot_leak(&mut self) {
        self.slots.take_page();
    }

    /// Prompt tokens of request `id`.
    pub fn prompt_len(&self, id: RequestId) -> usize {
        self.requests[id].origin.len()
    }

    /// Whether nothing waits, runs or is chunked (`is_fully_idle`, normal loop).
    pub fn is_fully_idle(&self) -> bool {
        self.running.is_empty()
            && self.chunked.is_none()
            && self.last_batch.as_ref().is_none_or(|b| match b.kind {
                // A decode batch is the running batch itself upstream.
                BatchKind::Decode => self.running.is_empty(),
                BatchKind::Extend | BatchKind::Mixed => b.requests.is_empty(),
            })
            && self.result_queue.is_empty()
            && self.waiting.is_empty()
    }

    /// `on_idle`: a fully idle scheduler resets `new_token_ratio`; returns whether it did.
    pub fn on_idle(&mut self) -> bool {
        if self.is_fully_idle() {
            self.ratio = self.config.ratio_init;
            return true;
        }
        false
    }

    /// Every KV page is free, owned by the tree, or held by exactly one request (its row past
    /// the tree-owned prefix), and the tree's sizes add up; the first broken rule, if any.
    pub fn check_invariants(&self) -> Result<(), String> {
        /// Who holds a page.
        #[derive(Clone, Copy, PartialEq, Eq, Debug)]
        enum Holder {
            Free,
            Tree,
            Request(RequestId),
        }
        let describe = |h: Holder| match h {
            Holder::Free => "free".to_owned(),
            Holder::Tree => "the tree's".to_owned(),
            Holder::Request(id) => format!("request {id}'s"),
        };
        self.tree.check_eviction_index()?;
        let page = self.config.page_size;
        let pages = self.config.pool_tokens / page as usize;
        // Page 0 is the allocator's padding dummy: pages 1..=pages are handed out.
        let mut holders: Vec<Option<Holder>> = vec![None; pages + 1];
        let mut accounted = 0usize;
        let mut claim = |p: u32, who: Holder| -> Result<(), String> {
            let slot = holders.get_mut(p as usize).ok_or_else(|| format!("page {p} is outside the pool"))?;
            match *slot {
                Some(other) if other == who && who != Holder::Free => Ok(()),
                Some(other) => Err(format!("page {p} is both {} and {}", describe(other), describe(who))),
                None => {
                    *slot = Some(who);
                    accounted += 1;
                    Ok(())
                }
            }
        };
        for &p in &self.slots.free_pages {
            claim(p, Holder::Free)?;
        }
        let mut tree_tokens = 0;
        for node in self.tree.depth_first() {
            tree_tokens += node.slots.len();
            for &slot in node.slots {
                claim(slot / page, Holder::Tree)?;
            }
        }
        if tree_tokens != self.tree.evictable_size() + self.tree.protected_size() {
            return Err(format!(
                "the tree holds {tree_tokens} tokens, evictable {} + protected {}",
                self.tree.evictable_size(),
                self.tree.protected_size()
            ));
        }
        let mut rows = 0;
        for (id, r) in self.requests.iter().enumerate().filter(|(_, r)| r.has_row) {
            rows += 1;
            for &slot in &r.row[r.cache_protected_len.min(r.row.len())..] {
                claim(slot / page, Holder::Request(id))?;
            }
        }
        if accounted != pages {
            return Err(format!("{accounted} of {pages} pages accounted for"));
        }
        if rows + self.free_rows != self.config.req_pool_size {
            return Err(format!(
                "{rows} rows held and {} free of {}",
                self.free_rows, self.config.req_pool_size
            ));
        }
        Ok(())
    }

    /// Record the batch just run as `last_batch` (the loop's `last_batch = batch`).
    pub fn set_last_batch(&mut self, batch: Option<Batch>) {
        self.last_batch = batch;
    }

    /// Form the next batch (`get_next_batch_to_run`).
    pub fn next_batch(&mut self) -> Option<Batch> {
        self.retracted.clear();
        self.oom_aborted.clear();
        self.chunked_aborted.clear();
        self.process_pending_chunked_abort();
        let mut exclude: Vec<RequestId> = Vec::new();
        if let Some(chunked) = self.chunked {
            exclude.push(chunked);
            if self.requests[chunked].extend_end > self.requests[chunked].prefix_len {
                self.checkpoint(chunked);
            }
        }
        if let Some(last) = self.last_batch.take() {
            if last.kind != BatchKind::Decode {
                if let Some(chunked) = last.chunked {
                    exclude.push(chunked);
                }
                let before = last.requests.len();
                let kept: Vec<RequestId> = last
                    .requests
                    .iter()
                    .copied()
                    .filter(|&r| self.requests[r].finished.is_none() && !exclude.contains(&r))
                    .collect();
                if kept.len() < before {
                    self.batch_is_full = false;
                }
                // Upstream keeps `batch_is_full` on the batch object: an empty running batch is
                // replaced by the prefill batch, whose flag is still clear.
                if self.running.is_empty() && !kept.is_empty() {
                    self.batch_is_full = false;
                }
                self.running.extend(kept.iter().copied());
                self.last_batch = Some(Batch { requests: kept, ..last });
            } else {
                self.last_batch = Some(last);
            }
        }
        let before = self.running.len();
        let requests = &self.requests;
        self.running.retain(|&r| requests[r].finished.is_none());
        if self.running.len() < before {
            self.batch_is_full = false;
        }
        if let Some(batch) = self.new_prefill_batch() {
            return Some(batch);
        }
        if self.running.is_empty() {
            return None;
        }
        self.update_running_batch()
    }

    fn process_pending_chunked_abort(&mut self) {
        let Some(id) = self.pending_chunked_abort.take() else { return };
        if self.chunked != Some(id) {
            if self.requests[id].finished.is_none() && self.requests[id].has_row {
                self.abort(id);
            }
            return;
        }
        self.requests[id].finished = Some(Finish::Abort);
        self.requests[id].to_finish = false;
        self.release(id, false);
        self.chunked = None;
        self.chunked_aborted.push(id);
    }

    /// Apply a batch's result (`process_batch_result_prefill` / `_decode`, plain path):
    /// `token(id, k)` is request `id`'s output token number `k`.
    pub fn process_result(&mut self, batch: &Batch, token: impl Fn(RequestId, usize) -> u32) {
        for &id in &batch.requests {
            let req = &self.requests[id];
            if batch.kind == BatchKind::Decode
                && self.config.overlap
                && (req.finished.is_some() || req.is_retracted)
            {
                continue;
            }
            if batch.kind != BatchKind::Decode {
                if (req.finished.is_some() && req.inflight_middle_chunks <= 0) || req.is_retracted {
                    continue;
                }
                if req.inflight_middle_chunks > 0 {
                    self.requests[id].inflight_middle_chunks -= 1;
                    continue;
                }
            }
            let k = self.requests[id].output.len();
            self.requests[id].output.push(token(id, k));
            self.update_finish_state(id);
            if let Some(reason) = self.requests[id].finished {
                self.release(id, true);
                self.finished.push((id, reason, self.requests[id].output.len()));
            } else if batch.kind != BatchKind::Decode && !batch.decoding.contains(&id) {
                self.checkpoint(id);
            }
        }
    }

    /// Launch a batch: its result waits in the queue (under the normal loop it is applied before
    /// the next pass, so the queue is empty whenever a pass looks at it).
    pub fn launch(&mut self, batch: &Batch) {
        self.result_queue.push_back(batch.clone());
    }

    /// The batches launched and not yet applied, oldest first.
    pub fn launched(&self) -> impl Iterator<Item = &Batch> {
        self.result_queue.iter()
    }

    /// Apply the oldest launched batch's result; false when none is queued.
    pub fn process_oldest(&mut self, token: impl Fn(RequestId, usize) -> u32) -> bool {
        let Some(batch) = self.result_queue.pop_front() else { return false };
        self.process_result(&batch, token);
        true
    }

    fn update_finish_state(&mut self, id: RequestId) {
        let eos = self.config.eos_token;
        let req = &mut self.requests[id];
        if req.finished.is_some() {
            return;
        }
        if req.to_finish {
            req.finished = Some(Finish::Abort);
            req.to_finish = false;
            return;
        }
        if req.output.last() == Some(&eos) {
            req.finished = Some(Finish::Stop);
            req.finished_len = Some(req.output.len());
            return;
        }
        if req.output.len() >= req.max_new_tokens {
            req.finished = Some(Finish::Length);
            req.finished_len = Some(req.max_new_tokens);
        }
    }
}
