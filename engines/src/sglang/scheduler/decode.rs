//! Decode: the running batch's next step and retraction (`update_running_batch`,
//! `retract_decode`).

use super::*;

impl Scheduler {
    pub(super) fn decode_fits(&mut self, batch: &[RequestId]) -> bool {
        let page = self.page();
        let need =
            page * batch.iter().filter(|&&r| self.requests[r].kv_committed.is_multiple_of(page)).count();
        self.evict_to_free(need);
        self.slots.available() >= need
    }

    /// Running requests whose queued result commits their last output by length
    /// (`_reqs_finishing_inflight`, overlap loop only).
    pub(super) fn finishing_inflight(&self) -> Vec<RequestId> {
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

    pub(super) fn update_running_batch(&mut self) -> Option<Batch> {
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
                self.release_for_retract(victim, order.len());
                self.retracted.push(victim);
            }
            // The last request is never retracted; if it alone does not fit it is aborted.
            if order.len() <= 1 {
                let remaining: Vec<RequestId> = order.iter().map(|&i| batch[i]).collect();
                if !self.decode_fits(&remaining) {
                    let last = batch[order.pop().expect("one request left")];
                    self.release_for_retract(last, 0);
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

    /// `release_req`: free a request's row without caching it, evict from the tree until the
    /// `remaining` requests have `RETRACT_DECODE_STEPS` tokens each of headroom, and reset it
    /// for a later re-prefill (`reset_for_retract`).
    fn release_for_retract(&mut self, id: RequestId, remaining: usize) {
        self.release(id, false);
        self.evict_to_free(remaining * RETRACT_DECODE_STEPS);
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
}
