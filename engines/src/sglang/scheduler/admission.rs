//! Prefill admission: the prefill adder's budgets and the pass over the waiting queue
//! (`_get_new_batch_prefill_raw`, `PrefillAdder`, `PrefillBudget`).

use super::*;

/// Outcome of one admission check (`AddReqResult`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AddResult {
    Continue,
    NoToken,
    Other,
}

/// The prefill adder's budgets for one pass.
pub(super) struct Adder {
    pub(super) rem_input: i64,
    pub(super) rem_chunk: Option<i64>,
    pub(super) total_offset: f64,
    pub(super) current_offset: f64,
    pub(super) can_run: Vec<RequestId>,
    pub(super) new_chunked: Option<RequestId>,
}

impl Scheduler {
    pub(super) fn allocatable(&self, running: usize, held_rows: usize) -> usize {
        let by_batch = self.config.max_running.saturating_sub(running);
        by_batch.min(self.free_rows + held_rows)
    }

    pub(super) fn available_and_evictable(&self) -> f64 {
        (self.slots.available() + self.tree.evictable_size()) as f64
    }

    pub(super) fn budget_state(&self, adder: &Adder) -> AddResult {
        let base = self.available_and_evictable();
        if !(base - adder.total_offset > 0.0 && base - adder.current_offset > 0.0) {
            return AddResult::NoToken;
        }
        if adder.rem_input <= 0 || adder.rem_chunk.is_some_and(|c| c <= 0) {
            return AddResult::Other;
        }
        AddResult::Continue
    }

    pub(super) fn reserve(&self, adder: &mut Adder, extend: usize, max_new: usize) {
        let extend = self.ceil_page(extend);
        adder.total_offset += (extend + self.page() + max_new) as f64;
        adder.current_offset += (extend + self.page()) as f64;
        adder.rem_input -= extend as i64;
        if let Some(chunk) = &mut adder.rem_chunk {
            *chunk -= extend as i64;
        }
    }

    pub(super) fn new_prefill_batch(&mut self) -> Option<Batch> {
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

    pub(super) fn init_next_round_input(&mut self, id: RequestId) {
        self.requests[id].refresh_fill();
        let fill = &self.requests[id].fill_ids;
        let found = self.tree.match_prefix(&fill[..fill.len().saturating_sub(1)]);
        let req = &mut self.requests[id];
        req.prefix_len = found.prefix_len;
        req.last_node = found.node;
        req.cache_protected_len = found.prefix_len;
    }

    pub(super) fn add_chunked(&mut self, adder: &mut Adder, id: RequestId) -> Option<RequestId> {
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

    /// `PrefillAdder.add_one_req`: admit `id` whole or as a first chunk, holding a temporary
    /// lock on its matched prefix while checking (so that prefix does not count as evictable).
    pub(super) fn add_one(&mut self, adder: &mut Adder, id: RequestId) -> AddResult {
        let last_node = self.requests[id].last_node;
        self.tree.lock(last_node);
        let admission = self.select_admission(adder, id);
        if let Ok(admission) = admission {
            let req = &mut self.requests[id];
            req.extend_end = req.prefix_len + admission.extend;
            req.lock = Some(last_node);
            self.tree.lock(last_node);
            adder.can_run.push(id);
            if admission.chunked {
                adder.new_chunked = Some(id);
            }
            self.reserve(adder, admission.extend, admission.reserve_new);
        }
        self.tree.unlock(last_node);
        match admission {
            Err(result) => result,
            Ok(_) => self.budget_state(adder),
        }
    }

    /// `_select_prefill_admission`: the shape `id` would be admitted with, or why not.
    fn select_admission(&self, adder: &Adder, id: RequestId) -> Result<Admission, AddResult> {
        let page = self.page();
        let r = &self.requests[id];
        let candidate = r.fill_ids.len() - r.prefix_len;
        let remaining_new = r.max_new_tokens.saturating_sub(r.output.len()).min(CLIP_MAX_NEW_TOKENS);
        let total_tokens = (candidate + remaining_new + page) as f64;
        if total_tokens >= self.available_and_evictable() - adder.total_offset {
            return Err(AddResult::NoToken);
        }
        let input_tokens = self.ceil_page(candidate) as i64;
        if adder.rem_chunk.is_none() && !adder.can_run.is_empty() && input_tokens >= adder.rem_input {
            return Err(AddResult::Other);
        }
        let whole = Admission {
            extend: candidate,
            reserve_new: r.max_new_tokens.min(CLIP_MAX_NEW_TOKENS),
            chunked: false,
        };
        match adder.rem_chunk {
            Some(chunk) if input_tokens > chunk => {
                let len = (chunk.max(0) as usize) / page * page;
                let end = (r.prefix_len + len) / page * page;
                if end <= r.prefix_len {
                    return Err(AddResult::Other);
                }
                Ok(Admission { extend: end - r.prefix_len, reserve_new: 0, chunked: true })
            }
            _ => Ok(whole),
        }
    }
}

/// How a request is admitted: the tokens it computes now, the new tokens reserved for it, and
/// whether more chunks follow.
#[derive(Clone, Copy, Debug)]
struct Admission {
    extend: usize,
    reserve_new: usize,
    chunked: bool,
}
