//! Invariants of the vLLM port over random workloads and tiny KV caches: blocks are conserved
//! after every step, budgets and sequence limits hold, and every request finishes (no livelock,
//! no deadlock — a known failure of peer simulators).

use std::sync::Arc;

use blis_engines::vllm::{EngineRequest, KvCacheManager, Scheduler, SchedulerLimits};
use proptest::prelude::*;

#[derive(Clone, Debug)]
struct Case {
    limits: SchedulerLimits,
    block_size: u32,
    num_blocks: u32,
    /// (arrival step, prompt tokens, output tokens)
    requests: Vec<(u32, u32, u32)>,
}

fn case() -> impl Strategy<Value = Case> {
    (1u32..6, 4u32..64, prop::sample::select(vec![1u32, 2, 4, 16]), any::<bool>(), 0u32..6, 0u32..4)
        .prop_flat_map(|(seqs, budget, block_size, chunked, threshold, spare_blocks)| {
            let max_model_len = 48u32;
            let budget = if chunked { budget.max(seqs) } else { budget.max(seqs).max(max_model_len) };
            // Enough blocks for one max_model_len request (the plan phase guarantees it), and a
            // few more: tight enough to force preemption.
            let num_blocks = 1 + max_model_len.div_ceil(block_size) + spare_blocks;
            let requests =
                prop::collection::vec((0u32..30, 1u32..30, 1u32..18), 1..12).prop_map(move |requests| {
                    requests.into_iter().map(|(at, p, o)| (at, p, o.min(max_model_len - p))).collect()
                });
            requests.prop_map(move |requests| Case {
                limits: SchedulerLimits {
                    max_num_seqs: seqs,
                    max_num_batched_tokens: budget,
                    max_model_len,
                    enable_chunked_prefill: chunked,
                    long_prefill_token_threshold: threshold,
                },
                block_size,
                num_blocks,
                requests,
            })
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn blocks_are_conserved_limits_hold_and_every_request_finishes(case in case()) {
        let kv = KvCacheManager::new(case.num_blocks, case.block_size, case.limits.max_model_len);
        let mut s = Scheduler::new(case.limits, kv);
        let mut finished = Vec::new();
        let total_tokens: u32 = case.requests.iter().map(|&(_, p, o)| p + o).sum();
        let bound = 40 + 4 * total_tokens * (case.requests.len() as u32 + 1);
        let mut step = 0u32;
        loop {
            for (key, &(at, prompt, output)) in case.requests.iter().enumerate() {
                if at == step {
                    let request = EngineRequest {
                        key: key as u64,
                        prompt_token_ids: Arc::from(vec![1u32; prompt as usize]),
                        output_token_ids: Arc::from(vec![2u32; output as usize]),
                        arrival_us: u64::from(step),
                    };
                    prop_assert!(s.add_request(&request).is_ok());
                }
            }
            let all_arrived = case.requests.iter().all(|&(at, ..)| at <= step);
            if all_arrived && !s.has_work() {
                break;
            }
            step += 1;
            prop_assert!(step < bound, "no progress after {step} steps: livelock or deadlock");
            let shape = s.schedule();
            prop_assert!(shape.totals.new_tokens <= u64::from(case.limits.max_num_batched_tokens));
            prop_assert!(s.num_running() <= case.limits.max_num_seqs as usize);
            let pool = s.kv().pool();
            prop_assert_eq!(
                u64::from(pool.num_free()) + s.blocks_held() + 1,
                u64::from(pool.num_blocks()),
                "blocks leaked or double-held after scheduling step {}", step
            );
            s.update_from_output(u64::from(step), &mut finished);
            let pool = s.kv().pool();
            prop_assert_eq!(u64::from(pool.num_free()) + s.blocks_held() + 1, u64::from(pool.num_blocks()));
        }
        prop_assert_eq!(finished.len(), case.requests.len());
        for f in &finished {
            let (_, _, output) = case.requests[f.key as usize];
            prop_assert_eq!(f.token_times_us.len(), output as usize);
            prop_assert!(f.token_times_us.windows(2).all(|w| w[0] < w[1]));
        }
        prop_assert_eq!(s.kv().pool().num_free(), case.num_blocks - 1, "an idle engine holds no blocks");
    }
}
