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

use super::radix_cache::{EvictionPolicy, Inserter, NodeId, ROOT, RadixCache, RadixCacheError};

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
}

/// Above this many waiting requests `lpm` behaves as `fcfs` (`WAITING_QUEUE_PREFIX_MATCH_MAX`).
const WAITING_QUEUE_PREFIX_MATCH_MAX: usize = 128;

/// A request whose cached prefix is at most this long is checked against the other waiting
/// requests (`IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD`)...
const IN_BATCH_PREFIX_CHECK_THRESHOLD: usize = 32;

/// ...and deprioritized when it shares at least this many tokens with one ahead of it
/// (`IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD`).
const IN_BATCH_PREFIX_DEPRIORITIZE_THRESHOLD: usize = 32;

/// What a scheduler instance is configured with, as the release resolves it.
#[derive(Clone, Debug)]
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

#[derive(Clone, Debug)]
struct Request {
    origin: Vec<u32>,
    output: Vec<u32>,
    /// `full_untruncated_fill_ids`: prompt and outputs as of the last refresh, not of now.
    fill_ids: Vec<u32>,
    max_new_tokens: usize,
    prefix_len: usize,
    num_matched: usize,
    extend_end: usize,
    kv_committed: usize,
    kv_allocated: usize,
    cache_protected_len: usize,
    cache_inserted_len: usize,
    last_node: NodeId,
    lock: Option<NodeId>,
    has_row: bool,
    row: Vec<u32>,
    inflight_middle_chunks: i64,
    is_retracted: bool,
    retracted_stain: bool,
    to_finish: bool,
    finished: Option<Finish>,
    finished_len: Option<usize>,
}

impl Request {
    fn fill(&self) -> Vec<u32> {
        let mut fill = self.origin.clone();
        fill.extend_from_slice(&self.output);
        fill
    }

    /// `refresh_fill_ids`: bring `fill_ids` up to the outputs produced since.
    fn refresh_fill(&mut self) {
        self.fill_ids.clear();
        self.fill_ids.extend_from_slice(&self.origin);
        self.fill_ids.extend_from_slice(&self.output);
    }

    fn owned_kv_len(&self) -> usize {
        match self.finished_len {
            None => self.kv_committed,
            Some(len) => self.kv_committed.min(self.origin.len() + len.min(self.output.len())),
        }
    }
}

/// The token-to-KV pool in pages (`TokenToKVPoolAllocator` for pages of one token,
/// `PagedTokenToKVPoolAllocator` above): pages handed out from the front; freed ones return to
/// the back for single-token pages and to the front, in ascending order, for larger ones.
#[derive(Clone, Debug)]
struct SlotPool {
    page_size: u32,
    free_pages: std::collections::VecDeque<u32>,
}

impl SlotPool {
    fn new(pool_tokens: usize, page_size: u32) -> Self {
        Self { page_size, free_pages: (1..=(pool_tokens / page_size as usize) as u32).collect() }
    }

    fn available(&self) -> usize {
        self.free_pages.len() * self.page_size as usize
    }

    fn take_page(&mut self) -> u32 {
        self.free_pages.pop_front().expect("admission budgets leave room for every allocation")
    }

    fn give_back(&mut self, slots: &[u32]) {
        if slots.is_empty() {
            return;
        }
        if self.page_size == 1 {
            self.free_pages.extend(slots.iter().copied());
            return;
        }
        let pages: std::collections::BTreeSet<u32> = slots.iter().map(|s| s / self.page_size).collect();
        for &page in pages.iter().rev() {
            self.free_pages.push_front(page);
        }
    }
}

/// Outcome of one admission check (`AddReqResult`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AddResult {
    Continue,
    NoToken,
    Other,
}

/// The prefill adder's budgets for one pass.
struct Adder {
    rem_input: i64,
    rem_chunk: Option<i64>,
    total_offset: f64,
    current_offset: f64,
    can_run: Vec<RequestId>,
    new_chunked: Option<RequestId>,
}

/// The scheduler of one SGLang instance.
#[derive(Clone, Debug)]
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
}

impl Scheduler {
    /// An idle scheduler with an empty pool and tree.
    pub fn new(config: SchedulerConfig) -> Result<Self, RadixCacheError> {
        let tree = RadixCache::new(config.page_size, EvictionPolicy::Lru)?;
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
        let id = self.requests.len();
        self.requests.push(Request {
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
        });
        self.waiting.push(id);
        (id, max_new_tokens)
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
        let page = self.config.page_size;
        let mut owner: std::collections::BTreeMap<u32, String> = std::collections::BTreeMap::new();
        let mut claim = |p: u32, who: String| match owner.insert(p, who.clone()) {
            Some(other) if other != who => Err(format!("page {p} is both {other} and {who}")),
            _ => Ok(()),
        };
        let distinct_free: std::collections::BTreeSet<u32> = self.slots.free_pages.iter().copied().collect();
        if distinct_free.len() != self.slots.free_pages.len() {
            return Err("a page is free twice".into());
        }
        for &p in &self.slots.free_pages {
            claim(p, "free".into())?;
        }
        let mut tree_tokens = 0;
        for node in self.tree.depth_first() {
            tree_tokens += node.slots.len();
            for &slot in node.slots {
                claim(slot / page, "the tree's".into())?;
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
                claim(slot / page, format!("request {id}'s"))?;
            }
        }
        let pages = self.config.pool_tokens / page as usize;
        if owner.len() != pages {
            return Err(format!("{} of {pages} pages accounted for", owner.len()));
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

    fn allocatable(&self, running: usize, held_rows: usize) -> usize {
        let by_batch = self.config.max_running.saturating_sub(running);
        by_batch.min(self.free_rows + held_rows)
    }

    fn available_and_evictable(&self) -> f64 {
        (self.slots.available() + self.tree.evictable_size()) as f64
    }

    fn budget_state(&self, adder: &Adder) -> AddResult {
        let base = self.available_and_evictable();
        if !(base - adder.total_offset > 0.0 && base - adder.current_offset > 0.0) {
            return AddResult::NoToken;
        }
        if adder.rem_input <= 0 || adder.rem_chunk.is_some_and(|c| c <= 0) {
            return AddResult::Other;
        }
        AddResult::Continue
    }

    fn reserve(&self, adder: &mut Adder, extend: usize, max_new: usize) {
        let extend = self.ceil_page(extend);
        adder.total_offset += (extend + self.page() + max_new) as f64;
        adder.current_offset += (extend + self.page()) as f64;
        adder.rem_input -= extend as i64;
        if let Some(chunk) = &mut adder.rem_chunk {
            *chunk -= extend as i64;
        }
    }

    /// Order the waiting queue (`SchedulePolicy.calc_priority`).
    fn calc_priority(&mut self) {
        let active = match self.config.policy {
            SchedulePolicy::Lpm if self.waiting.len() > WAITING_QUEUE_PREFIX_MATCH_MAX => {
                SchedulePolicy::Fcfs
            }
            policy => policy,
        };
        match active {
            SchedulePolicy::Fcfs => {}
            SchedulePolicy::Lof => {
                let requests = &self.requests;
                self.waiting.sort_by_key(|&r| std::cmp::Reverse(requests[r].max_new_tokens));
            }
            SchedulePolicy::Lpm => {
                let deprioritized = self.compute_prefix_matches();
                let requests = &self.requests;
                self.waiting.sort_by_key(|r| {
                    if deprioritized.contains(r) { i64::MAX } else { -(requests[*r].num_matched as i64) }
                });
            }
            SchedulePolicy::DfsWeight => {
                self.compute_prefix_matches();
                let nodes: Vec<NodeId> = self.waiting.iter().map(|&r| self.requests[r].last_node).collect();
                let order = self.tree.dfs_weight_order(&nodes);
                self.waiting = order.iter().map(|&i| self.waiting[i]).collect();
            }
        }
        if matches!(active, SchedulePolicy::Lpm | SchedulePolicy::DfsWeight) {
            return;
        }
        // Cache-agnostic policies refresh the LRU stamps of the first 128 waiting prompts every
        // 32nd pass, the head last (`_touch_waiting_prefixes`).
        let refresh = self.refresh_calls.is_multiple_of(32);
        self.refresh_calls += 1;
        if refresh && !self.waiting.is_empty() {
            let touched: Vec<RequestId> =
                self.waiting.iter().take(WAITING_QUEUE_PREFIX_MATCH_MAX).rev().copied().collect();
            for r in touched {
                let fill = self.requests[r].fill();
                self.tree.match_prefix(&fill);
            }
        }
    }

    /// Match every waiting request against the tree, and against the others ahead of it when
    /// its own hit is short (`_compute_prefix_matches`); returns the deprioritized ones.
    fn compute_prefix_matches(&mut self) -> Vec<RequestId> {
        let mut scratch = RadixCache::new(1, EvictionPolicy::Lru).expect("pages of one token");
        let mut deprioritized = Vec::new();
        for r in self.waiting.clone() {
            let fill = self.requests[r].fill();
            let found = self.tree.match_prefix(&fill);
            let req = &mut self.requests[r];
            req.prefix_len = found.prefix_len;
            req.last_node = found.node;
            req.num_matched = found.prefix_len.min(fill.len().saturating_sub(1));
            if found.prefix_len <= IN_BATCH_PREFIX_CHECK_THRESHOLD {
                if scratch.match_prefix(&fill).prefix_len >= IN_BATCH_PREFIX_DEPRIORITIZE_THRESHOLD {
                    deprioritized.push(r);
                } else {
                    let mut freed = Vec::new();
                    scratch.insert(&fill, &vec![0; fill.len()], Inserter::default(), &mut freed);
                }
            }
        }
        deprioritized
    }

    fn new_prefill_batch(&mut self) -> Option<Batch> {
        if self.running.is_empty() {
            self.batch_is_full = false;
        }
        if (self.batch_is_full || self.waiting.is_empty()) && self.chunked.is_none() {
            return None;
        }
        let running_bs = self.running.len();
        if self.allocatable(running_bs, 0) == 0 && self.chunked.is_none() {
            self.batch_is_full = true;
            return None;
        }
        self.calc_priority();
        // A mixed batch's decode rows take a token each from the prefill budgets.
        let mixed_tokens = if self.config.mixed_chunk { running_bs } else { 0 };
        let mut adder = Adder {
            rem_input: self.config.max_prefill_tokens as i64 - mixed_tokens as i64,
            rem_chunk: self.config.chunked_prefill_size.map(|c| c as i64 - mixed_tokens as i64),
            total_offset: mixed_tokens as f64,
            current_offset: mixed_tokens as f64,
            can_run: Vec::new(),
            new_chunked: None,
        };
        let running_offset: f64 = self
            .running
            .iter()
            .map(|&r| {
                let req = &self.requests[r];
                (req.max_new_tokens.saturating_sub(req.output.len()).min(CLIP_MAX_NEW_TOKENS)) as f64
                    * self.ratio
            })
            .sum();
        adder.total_offset += running_offset;
        if let Some(chunked) = self.chunked {
            self.requests[chunked].refresh_fill();
            self.chunked = self.add_chunked(&mut adder, chunked);
        }
        let queue = self.waiting.clone();
        for id in queue {
            if self.budget_state(&adder) == AddResult::Other {
                break;
            }
            let held = adder.can_run.iter().filter(|&&r| self.requests[r].has_row).count();
            if adder.can_run.len() >= self.allocatable(running_bs, held) {
                self.batch_is_full = true;
            }
            if self.batch_is_full {
                break;
            }
            self.init_next_round_input(id);
            let result = self.add_one(&mut adder, id);
            if result != AddResult::Continue {
                if result == AddResult::NoToken {
                    self.batch_is_full = !adder.can_run.is_empty() || !self.running.is_empty();
                }
                break;
            }
        }
        if adder.can_run.is_empty() {
            return None;
        }
        self.waiting.retain(|r| !adder.can_run.contains(r));
        if let Some(new_chunked) = adder.new_chunked {
            self.chunked = Some(new_chunked);
        }
        if let Some(chunked) = self.chunked {
            self.requests[chunked].inflight_middle_chunks += 1;
        }
        self.prepare_for_extend(&adder.can_run);
        let mut batch = Batch {
            kind: BatchKind::Extend,
            requests: adder.can_run,
            chunked: self.chunked,
            decoding: Vec::new(),
        };
        if self.config.mixed_chunk && !self.running.is_empty() {
            let finishing = self.finishing_inflight();
            self.running.retain(|r| !finishing.contains(r));
            if !finishing.is_empty() {
                self.batch_is_full = false;
            }
            let running = self.running.clone();
            if !running.is_empty() && self.decode_fits(&running) {
                self.prepare_for_decode();
                batch.kind = BatchKind::Mixed;
                // `mix_with_running`: each decode row extends its sequence by the one new token.
                for &id in &running {
                    self.requests[id].refresh_fill();
                    self.requests[id].extend_end = self.requests[id].kv_committed;
                }
                batch.requests.extend(running.iter().copied());
                batch.decoding = running;
                self.running.clear();
            }
        }
        Some(batch)
    }

    fn init_next_round_input(&mut self, id: RequestId) {
        self.requests[id].refresh_fill();
        let fill = self.requests[id].fill_ids.clone();
        let limit = fill.len().saturating_sub(1);
        let found = self.tree.match_prefix(&fill[..limit]);
        let req = &mut self.requests[id];
        req.prefix_len = found.prefix_len;
        req.last_node = found.node;
        req.cache_protected_len = found.prefix_len;
    }

    fn add_chunked(&mut self, adder: &mut Adder, id: RequestId) -> Option<RequestId> {
        let chunk = adder.rem_chunk.expect("a chunked request needs chunked prefill");
        let remaining = (self.available_and_evictable() - adder.total_offset).trunc() as i64;
        let room = chunk.min(remaining);
        let room = if room > 0 { room } else { chunk };
        let req = &self.requests[id];
        let candidate = (req.fill_ids.len() - req.prefix_len) as i64;
        let truncated = candidate > room;
        let new_len = candidate.min(room) as usize;
        let max_new = if truncated { 0 } else { req.max_new_tokens.min(CLIP_MAX_NEW_TOKENS) };
        self.requests[id].extend_end = self.requests[id].prefix_len + new_len;
        adder.can_run.push(id);
        self.reserve(adder, new_len, max_new);
        truncated.then_some(id)
    }

    fn add_one(&mut self, adder: &mut Adder, id: RequestId) -> AddResult {
        let page = self.page();
        let (prefix_len, candidate, remaining_new, max_new_tokens, last_node) = {
            let r = &self.requests[id];
            (
                r.prefix_len,
                r.fill_ids.len() - r.prefix_len,
                r.max_new_tokens.saturating_sub(r.output.len()).min(CLIP_MAX_NEW_TOKENS),
                r.max_new_tokens,
                r.last_node,
            )
        };
        let total_tokens = (candidate + remaining_new + page) as f64;
        self.tree.lock(last_node);
        let verdict = (|| {
            if total_tokens >= self.available_and_evictable() - adder.total_offset {
                return Err(AddResult::NoToken);
            }
            let input_tokens = self.ceil_page(candidate) as i64;
            if adder.rem_chunk.is_none() && !adder.can_run.is_empty() && input_tokens >= adder.rem_input {
                return Err(AddResult::Other);
            }
            let mut extend = candidate;
            let mut reserve_new = max_new_tokens.min(CLIP_MAX_NEW_TOKENS);
            let mut chunked = false;
            if let Some(chunk) = adder.rem_chunk
                && input_tokens > chunk
            {
                let len = (chunk.max(0) as usize) / page * page;
                let end = (prefix_len + len) / page * page;
                if end <= prefix_len {
                    return Err(AddResult::Other);
                }
                extend = end - prefix_len;
                reserve_new = 0;
                chunked = true;
            }
            Ok((extend, reserve_new, chunked))
        })();
        let outcome = match verdict {
            Err(result) => Err(result),
            Ok((extend, reserve_new, chunked)) => {
                self.requests[id].extend_end = prefix_len + extend;
                self.tree.lock(last_node);
                self.requests[id].lock = Some(last_node);
                adder.can_run.push(id);
                if chunked {
                    adder.new_chunked = Some(id);
                }
                self.reserve(adder, extend, reserve_new);
                Ok(())
            }
        };
        self.tree.unlock(last_node);
        match outcome {
            Err(result) => result,
            Ok(()) => self.budget_state(adder),
        }
    }

    /// The slot after `previous` in its page, or the first slot of a fresh page.
    fn next_slot(&mut self, position: usize, previous: Option<u32>) -> u32 {
        match previous {
            Some(slot) if !position.is_multiple_of(self.page()) => slot + 1,
            _ => self.slots.take_page() * self.config.page_size,
        }
    }

    fn evict_to_free(&mut self, count: usize) {
        let shortfall = count.saturating_sub(self.slots.available());
        if shortfall > 0 {
            let mut freed = Vec::new();
            self.tree.evict(shortfall, &mut freed);
            self.slots.give_back(&freed);
        }
    }

    fn prepare_for_extend(&mut self, batch: &[RequestId]) {
        for &id in batch {
            if !self.requests[id].has_row {
                self.free_rows -= 1;
                self.requests[id].has_row = true;
            }
        }
        let total: usize =
            batch.iter().map(|&id| self.requests[id].extend_end - self.requests[id].prefix_len).sum();
        // Paged extends evict for a page more per request (`alloc_paged_token_slots_extend`).
        let paged_extra = if self.page() > 1 { batch.len() * self.page() } else { 0 };
        self.evict_to_free(total + paged_extra);
        for &id in batch {
            let prefix = self.requests[id].prefix_len;
            let end = self.requests[id].extend_end;
            if self.requests[id].row.len() < prefix {
                let mut matched = Vec::new();
                self.tree.prefix_slots(self.requests[id].last_node, &mut matched);
                self.requests[id].row = matched;
            }
            self.requests[id].row.truncate(prefix);
            for position in prefix..end {
                let previous = self.requests[id].row.last().copied();
                let slot = self.next_slot(position, previous);
                self.requests[id].row.push(slot);
            }
            let req = &mut self.requests[id];
            req.kv_allocated = end;
            req.kv_committed = end;
            req.is_retracted = false;
        }
    }

    /// `checkpoint_into_tree` up to `extend_end` (`checkpoint_kv_cache`).
    fn checkpoint(&mut self, id: RequestId) {
        let up_to = self.requests[id].extend_end;
        self.insert_into_tree(id, up_to);
        self.requests[id].prefix_len = up_to;
    }

    fn insert_into_tree(&mut self, id: RequestId, up_to: usize) {
        let page = self.page();
        let fill = self.requests[id].fill_ids.clone();
        let tokens = &fill[..up_to.min(fill.len())];
        let aligned = tokens.len() / page * page;
        if aligned == 0 {
            return;
        }
        let values = self.requests[id].row[..aligned].to_vec();
        let owner = Inserter {
            prev_prefix_len: self.requests[id].cache_protected_len,
            inserted_len: self.requests[id].cache_inserted_len,
            priority: 0,
        };
        let mut freed = Vec::new();
        let inserted = self.tree.insert(tokens, &values, owner, &mut freed);
        let req = &mut self.requests[id];
        req.cache_inserted_len = req.cache_inserted_len.max(aligned);
        let prompt = req.origin.len() / page * page;
        if 0 < prompt && prompt < aligned {
            let again = Inserter { prev_prefix_len: prompt, inserted_len: prompt, priority: 1 };
            self.tree.insert(&tokens[..prompt], &values[..prompt], again, &mut freed);
        }
        self.slots.give_back(&freed);
        let mut path = Vec::new();
        self.tree.prefix_slots(inserted.node, &mut path);
        let req = &mut self.requests[id];
        let protected = req.cache_protected_len;
        req.row[protected..path.len()].copy_from_slice(&path[protected..]);
        if let Some(old) = req.lock.take() {
            self.tree.unlock(old);
        }
        self.tree.lock(inserted.node);
        let req = &mut self.requests[id];
        req.lock = Some(inserted.node);
        req.cache_protected_len = path.len();
        req.last_node = inserted.node;
    }

    /// `release_kv_cache`: give the request's row back, inserting it into the tree first if
    /// `checkpoint`.
    fn release(&mut self, id: RequestId, checkpoint: bool) {
        let owned = self.requests[id].owned_kv_len();
        if checkpoint {
            self.requests[id].refresh_fill();
            self.insert_into_tree(id, owned);
        }
        let req = &mut self.requests[id];
        let protected = req.cache_protected_len.min(owned);
        let own: Vec<u32> = req.row[protected..owned].to_vec();
        let start = owned.div_ceil(self.config.page_size as usize) * self.config.page_size as usize;
        let extra: Vec<u32> =
            if start < req.kv_allocated { req.row[start..req.kv_allocated].to_vec() } else { Vec::new() };
        let lock = req.lock.take();
        req.has_row = false;
        req.row.clear();
        self.slots.give_back(&own);
        if let Some(node) = lock {
            self.tree.unlock(node);
        }
        self.slots.give_back(&extra);
        self.free_rows += 1;
    }

    fn decode_fits(&mut self, batch: &[RequestId]) -> bool {
        let page = self.page();
        let need =
            page * batch.iter().filter(|&&r| self.requests[r].kv_committed.is_multiple_of(page)).count();
        self.evict_to_free(need);
        self.slots.available() >= need
    }

    /// Running requests whose queued result commits their last output by length
    /// (`_reqs_finishing_inflight`, overlap loop only).
    fn finishing_inflight(&self) -> Vec<RequestId> {
        let Some(queued) = self.result_queue.front().filter(|_| self.config.overlap) else {
            return Vec::new();
        };
        self.running
            .iter()
            .copied()
            .filter(|r| queued.requests.contains(r))
            .filter(|&r| self.requests[r].output.len() + 1 >= self.requests[r].max_new_tokens)
            .collect()
    }

    fn update_running_batch(&mut self) -> Option<Batch> {
        let initial = self.running.len();
        let finishing = self.finishing_inflight();
        self.running.retain(|r| !finishing.contains(r));
        if self.running.is_empty() {
            self.batch_is_full = false;
            return None;
        }
        let batch = self.running.clone();
        let fits = self.decode_fits(&batch);
        if !fits && !finishing.is_empty() {
            self.batch_is_full = false;
            return None;
        }
        if !fits {
            let mut order: Vec<usize> = (0..batch.len()).collect();
            let requests = &self.requests;
            let key = |i: &usize| {
                let r = &requests[batch[*i]];
                (r.output.len(), std::cmp::Reverse(r.origin.len()))
            };
            order.sort_by_key(|i| std::cmp::Reverse(key(i)));
            let mut first = true;
            loop {
                let remaining: Vec<RequestId> = order.iter().map(|&i| batch[i]).collect();
                if !first && self.decode_fits(&remaining) {
                    break;
                }
                if order.len() == 1 {
                    break;
                }
                first = false;
                let victim = batch[order.pop().expect("more than one request")];
                self.release(victim, false);
                self.evict_to_free(order.len() * RETRACT_DECODE_STEPS);
                self.reset_for_retract(victim);
                self.retracted.push(victim);
            }
            // The last request is never retracted; if it alone does not fit it is aborted.
            if order.len() <= 1 {
                let remaining: Vec<RequestId> = order.iter().map(|&i| batch[i]).collect();
                if !self.decode_fits(&remaining) {
                    let last = batch[order.pop().expect("one request left")];
                    self.release(last, false);
                    self.reset_for_retract(last);
                    self.requests[last].finished = Some(Finish::Abort);
                    self.oom_aborted.push(last);
                }
            }
            self.running = order.iter().map(|&i| batch[i]).collect();
            let decoded: usize = self.running.iter().map(|&r| self.requests[r].output.len()).sum();
            let max_new: usize = self.running.iter().map(|&r| self.requests[r].max_new_tokens).sum();
            let estimate =
                (decoded + RETRACT_DECODE_STEPS * self.running.len()) as f64 / (max_new + 1) as f64;
            self.ratio = estimate.min(1.0);
            self.waiting.extend(self.retracted.iter().copied());
        } else {
            self.ratio = (self.ratio - self.config.ratio_decay).max(self.config.ratio_min);
        }
        if self.running.len() < initial {
            self.batch_is_full = false;
        }
        if self.running.is_empty() {
            return None;
        }
        self.prepare_for_decode();
        Some(Batch {
            kind: BatchKind::Decode,
            requests: self.running.clone(),
            chunked: None,
            decoding: Vec::new(),
        })
    }

    /// A KV slot for each running request's next token (`prepare_for_decode`).
    fn prepare_for_decode(&mut self) {
        self.evict_to_free(self.running.len() * self.page());
        for id in self.running.clone() {
            let position = self.requests[id].kv_committed;
            let previous = self.requests[id].row.last().copied();
            let slot = self.next_slot(position, previous);
            let req = &mut self.requests[id];
            req.row.push(slot);
            req.kv_allocated += 1;
            req.kv_committed += 1;
        }
    }

    fn reset_for_retract(&mut self, id: RequestId) {
        let req = &mut self.requests[id];
        req.prefix_len = 0;
        req.last_node = ROOT;
        req.cache_protected_len = 0;
        req.cache_inserted_len = 0;
        req.lock = None;
        req.extend_end = 0;
        req.is_retracted = true;
        req.retracted_stain = true;
        req.inflight_middle_chunks = 0;
        req.kv_committed = 0;
        req.kv_allocated = 0;
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

    /// Launch a batch under the overlap loop: its result waits in the queue.
    pub fn launch(&mut self, batch: &Batch) {
        self.result_queue.push_back(batch.clone());
    }

    /// Apply the oldest launched batch's result (overlap loop); false when none is queued.
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
