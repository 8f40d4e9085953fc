//! The waiting queue's order (`SchedulePolicy.calc_priority`).

use super::*;
use crate::sglang::radix_cache::Inserter;

/// Above this many waiting requests `lpm` behaves as `fcfs` (`WAITING_QUEUE_PREFIX_MATCH_MAX`).
pub(super) const WAITING_QUEUE_PREFIX_MATCH_MAX: usize = 128;

/// A request whose cached prefix is at most this long is checked against the other waiting
/// requests (`IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD`)...
pub(super) const IN_BATCH_PREFIX_CHECK_THRESHOLD: usize = 32;

/// ...and deprioritized when it shares at least this many tokens with one ahead of it
/// (`IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD`).
pub(super) const IN_BATCH_PREFIX_DEPRIORITIZE_THRESHOLD: usize = 32;

impl Scheduler {
    /// Order the waiting queue (`SchedulePolicy.calc_priority`).
    pub(super) fn calc_priority(&mut self) {
        let active = match self.config.policy {
            SchedulePolicy::Lpm if self.waiting.len() > WAITING_QUEUE_PREFIX_MATCH_MAX => {
                SchedulePolicy::Fcfs
            }
            policy => policy,
        };
        match active {
            SchedulePolicy::Fcfs => {}
            SchedulePolicy::Random => {
                let shuffle = self.shuffle.as_mut().expect("a random scheduler is built with a shuffle");
                shuffle.shuffle(&mut self.waiting);
            }
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
    pub(super) fn compute_prefix_matches(&mut self) -> Vec<RequestId> {
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
}
