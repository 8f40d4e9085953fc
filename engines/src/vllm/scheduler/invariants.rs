//! The scheduler's own invariants, checked on demand (checked runs and tests only; never on the
//! hot path): KV blocks conserved, the running budget kept, every request in exactly one queue.

use super::Scheduler;
use crate::vllm::request::Status;

impl Scheduler {
    /// Check the scheduler's invariants, appending one line per broken rule to `violations`,
    /// each starting with the number of the invariant it breaks (see `docs/INVARIANTS.md`).
    pub fn check_invariants(&self, violations: &mut Vec<String>) {
        self.check_blocks(violations);
        self.check_queues(violations);
        if let Some(c) = self.connector.as_ref().and_then(|c| c.offloading()) {
            c.check(violations);
        }
    }

    /// Fault injection for checked runs: take one free block and forget it, a leak the
    /// block-conservation check (I5) must catch. Never called by a normal run.
    pub fn leak_kv_block(&mut self) {
        let pool = self.kv.pool_mut();
        if pool.num_free() > 0 {
            pool.get_new_blocks(1, &mut Vec::new());
        }
    }

    /// I5: every block is either free or held; a held block's reference count is the number
    /// of block tables holding it (the null block counts one more); the free count is the rest.
    fn check_blocks(&self, violations: &mut Vec<String>) {
        let pool = self.kv.pool();
        let mut held: Vec<u32> = Vec::new();
        let mut tables = 0usize;
        for request in self.slots.iter().filter_map(|(_, r)| r.as_ref()) {
            held.extend_from_slice(&request.blocks);
            tables += usize::from(request.has_table);
        }
        held.sort_unstable();
        let mut distinct_usable = 0u32;
        let mut at = 0;
        while at < held.len() {
            let id = held[at];
            let run = held[at..].iter().take_while(|&&b| b == id).count();
            at += run;
            if id >= pool.num_blocks() {
                violations
                    .push(format!("I5 block {id} is held but the pool has {} blocks", pool.num_blocks()));
                continue;
            }
            let expected = run as u32 + u32::from(id == 0);
            if pool.ref_count(id) != expected {
                violations.push(format!(
                    "I5 block {id} has reference count {} but {run} block tables hold it",
                    pool.ref_count(id)
                ));
            }
            distinct_usable += u32::from(id != 0);
        }
        let usable = pool.num_blocks() - 1;
        if pool.num_free() + distinct_usable != usable {
            violations.push(format!(
                "I5 {} free + {distinct_usable} held blocks != {usable} usable blocks ({} leaked)",
                pool.num_free(),
                i64::from(usable) - i64::from(pool.num_free()) - i64::from(distinct_usable)
            ));
        }
        if tables != self.kv.tables() {
            violations.push(format!(
                "I5 {tables} requests have a block table but the manager counts {}",
                self.kv.tables()
            ));
        }
    }

    /// I6 and I7: at most `max_num_seqs` run; every held request is waiting or
    /// running, not both, and indexed under its key; no request has computed more tokens than it
    /// has.
    fn check_queues(&self, violations: &mut Vec<String>) {
        let limits = &self.limits;
        if self.running.len() > limits.max_num_seqs as usize {
            violations.push(format!(
                "I6 {} requests run, more than max_num_seqs {}",
                self.running.len(),
                limits.max_num_seqs
            ));
        }
        let mut queued: Vec<u64> = self
            .running
            .iter()
            .chain(self.waiting.iter().collect::<Vec<_>>().iter())
            .map(|&h| self.get(h).spec.key)
            .collect();
        queued.sort_unstable();
        let before = queued.len();
        queued.dedup();
        if queued.len() != before {
            violations.push("I7 a request is queued twice (waiting and running, or twice in one)".to_owned());
        }
        let mut slots: Vec<u64> = Vec::new();
        let mut held = 0;
        for request in self.slots.iter().filter_map(|(_, r)| r.as_ref()) {
            if !self.by_key.contains_key(&request.spec.key) {
                violations
                    .push(format!("I7 request {} is held but not indexed by its key", request.spec.key));
            }
            if request.status == Status::Finished {
                // Finished, its blocks held by its connector: in no queue.
                held += 1;
                continue;
            }
            slots.push(request.spec.key);
            // Under asynchronous scheduling a computed token may be an output placeholder.
            let tokens = request.num_tokens() + request.num_output_placeholders;
            if request.num_computed_tokens > tokens {
                violations.push(format!(
                    "I7 request {} has computed {} of its {tokens} tokens (placeholders included)",
                    request.spec.key, request.num_computed_tokens
                ));
            }
        }
        if held != self.held_requests {
            violations.push(format!(
                "I7 {held} finished requests hold blocks but {} are counted",
                self.held_requests
            ));
        }
        slots.sort_unstable();
        if slots != queued {
            violations.push(format!(
                "I7 {} requests are held but {} are waiting or running",
                slots.len(),
                queued.len()
            ));
        }
        if self.by_key.len() != slots.len() + held {
            violations.push(format!(
                "I7 {} keys are indexed for {} held requests",
                self.by_key.len(),
                slots.len() + held
            ));
        }
    }
}
