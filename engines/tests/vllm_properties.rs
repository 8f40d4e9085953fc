//! Invariants of the vLLM port over random workloads and tiny KV caches, with prefix caching on
//! and off, synchronous and asynchronous scheduling, both policies and aborts: blocks are
//! conserved after every schedule and every update, budgets and sequence limits hold, and every
//! request finishes or is aborted (no livelock, no deadlock — a known failure of peer
//! simulators). The one exception is upstream's own: under the priority policy vLLM 0.15.1 lets
//! requests of equal priority and arrival preempt each other forever (recorded in
//! `traces/vllm-0.15.1/priority-livelock-*.jsonl`); such a case must show the instance's livelock
//! signature — `16 × max_model_len` steps without a sampled token — and never occurs under FCFS.

use std::collections::VecDeque;
use std::sync::Arc;

use blis_engines::vllm::{
    EngineRequest, KvCacheManager, Policy, Scheduler, SchedulerLimits, SchedulerOutput, UpdateOutput,
};
use proptest::prelude::*;

#[derive(Clone, Debug)]
struct Case {
    limits: SchedulerLimits,
    block_size: u32,
    num_blocks: u32,
    caching: bool,
    /// (arrival step, shared-prefix group, prompt tokens, output tokens, priority, abort step)
    requests: Vec<(u32, u32, u32, u32, i64, Option<u32>)>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        1u32..6,
        4u32..64,
        prop::sample::select(vec![1u32, 2, 4, 16]),
        (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()),
        0u32..6,
        0u32..4,
    )
        .prop_flat_map(
            |(seqs, budget, block_size, (chunked, caching, asynchronous, priority), threshold, spare)| {
                let max_model_len = 48u32;
                let budget = if chunked { budget.max(seqs) } else { budget.max(seqs).max(max_model_len) };
                // Enough blocks for one max_model_len request (the plan phase guarantees it), and a
                // few more: tight enough to force preemption.
                let num_blocks = 1 + max_model_len.div_ceil(block_size) + spare;
                let request =
                    (0u32..30, 0u32..3, 1u32..30, 1u32..18, 0i64..3, prop::option::weighted(0.15, 0u32..60));
                prop::collection::vec(request, 1..12).prop_map(move |requests| Case {
                    limits: SchedulerLimits {
                        max_num_seqs: seqs,
                        max_num_batched_tokens: budget,
                        max_model_len,
                        enable_chunked_prefill: chunked,
                        long_prefill_token_threshold: threshold,
                        policy: if priority { Policy::Priority } else { Policy::Fcfs },
                        async_scheduling: asynchronous,
                    },
                    block_size,
                    num_blocks,
                    caching,
                    requests: requests
                        .into_iter()
                        .map(|(at, group, p, o, pr, abort)| {
                            (at, group, p, o.min(max_model_len - p), pr, abort)
                        })
                        .collect(),
                })
            },
        )
}

/// Blocks held by requests (the null block excluded) plus free blocks must be all blocks, and
/// the references on held blocks must add up to the block tables.
fn check_blocks(s: &Scheduler, case: &Case) -> Result<(), TestCaseError> {
    let pool = s.kv().pool();
    let held = (1..pool.num_blocks()).filter(|&b| pool.ref_count(b) > 0).count() as u32;
    prop_assert_eq!(held + pool.num_free(), case.num_blocks - 1, "blocks leaked or double counted");
    let references: u64 = (1..pool.num_blocks()).map(|b| u64::from(pool.ref_count(b))).sum();
    prop_assert_eq!(references, s.blocks_held(), "references do not match the block tables");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn blocks_are_conserved_limits_hold_and_every_request_finishes(case in case()) {
        let kv = KvCacheManager::new(case.num_blocks, case.block_size, case.limits.max_model_len, case.caching);
        let mut s = Scheduler::new(case.limits, kv);
        let (mut finished, mut aborted) = (Vec::new(), Vec::new());
        let total_tokens: u32 = case.requests.iter().map(|r| r.2 + r.3).sum();
        let bound = 60 + 4 * total_tokens * (case.requests.len() as u32 + 1);
        let mut in_flight: VecDeque<SchedulerOutput> = VecDeque::new();
        let mut update = UpdateOutput::default();
        let mut step = 0u32;
        let mut steps_without_token = 0u32;
        loop {
            for (key, &(at, group, prompt, output, priority, _)) in case.requests.iter().enumerate() {
                if at == step {
                    // Requests of one group share their first tokens (a system prompt).
                    let tokens: Vec<u32> = (0..prompt).map(|t| if t < 20 { 1_000 * group + t } else { 7 + key as u32 }).collect();
                    s.add_request(&EngineRequest {
                        key: key as u64,
                        name: Arc::from(format!("r{key}")),
                        priority,
                        prompt_token_ids: tokens.into(),
                        output_token_ids: Arc::from(vec![2u32; output as usize]),
                        arrival_us: u64::from(step),
                    });
                }
            }
            for (key, r) in case.requests.iter().enumerate() {
                if r.5 == Some(step) && r.0 <= step && s.abort(key as u64).is_some() {
                    aborted.push(key);
                }
            }
            check_blocks(&s, &case)?;
            let all_arrived = case.requests.iter().all(|r| r.0 <= step);
            if all_arrived && !s.has_requests() && in_flight.is_empty() {
                break;
            }
            step += 1;
            prop_assert!(step < bound, "no progress after {} steps: livelock or deadlock", step);
            let mut update_now = None;
            if s.has_requests() {
                let mut out = SchedulerOutput::default();
                s.schedule(&mut out);
                prop_assert!(out.total <= case.limits.max_num_batched_tokens);
                prop_assert!(s.num_running() <= case.limits.max_num_seqs as usize);
                check_blocks(&s, &case)?;
                let total = out.total;
                in_flight.push_back(out);
                if !(case.limits.async_scheduling && total > 0 && in_flight.len() < 2) {
                    update_now = in_flight.pop_front();
                }
            } else if case.limits.async_scheduling {
                update_now = in_flight.pop_front();
            }
            if let Some(batch) = update_now {
                s.update_from_output(&batch, u64::from(step), &mut update);
                finished.append(&mut update.finished);
                check_blocks(&s, &case)?;
                let sampled = update.tokens.iter().any(|(_, token)| token.is_some());
                if sampled {
                    steps_without_token = 0;
                } else if !batch.scheduled.is_empty() {
                    steps_without_token += 1;
                }
            }
            if steps_without_token > 16 * case.limits.max_model_len {
                prop_assert_eq!(case.limits.policy, Policy::Priority, "a livelock under FCFS");
                return Ok(());
            }
        }
        prop_assert_eq!(finished.len() + aborted.len(), case.requests.len());
        for f in &finished {
            let (.., output, _, _) = case.requests[f.key as usize];
            prop_assert_eq!(f.token_times_us.len(), output as usize);
            prop_assert!(f.token_times_us.windows(2).all(|w| w[0] < w[1]));
        }
        prop_assert_eq!(s.kv().pool().num_free(), case.num_blocks - 1, "an idle engine holds no blocks");
    }
}
