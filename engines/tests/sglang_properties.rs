//! Invariants of the SGLang scheduler over random workloads and tight pools, in both loops: after
//! every step each KV page is free, owned by the radix tree or held by one request, the batch
//! respects the chunk and running-request budgets, and every request ends — finished, retracted
//! and finished later, or aborted — within a bounded number of steps, leaving the pool whole.

use blis_engines::sglang::scheduler::{Batch, BatchKind, SchedulePolicy, Scheduler};
use proptest::prelude::*;

#[path = "support/sglang_config.rs"]
mod sglang_config;
use sglang_config::Knobs;

#[derive(Clone, Debug)]
struct Arrival {
    prompt: Vec<u32>,
    max_new: usize,
    at: usize,
    abort_after: Option<usize>,
    eos_at: Option<usize>,
}

fn arrival() -> impl Strategy<Value = Arrival> {
    (
        0usize..3,
        prop::collection::vec(3u32..999, 1..30),
        1usize..40,
        0usize..20,
        prop::option::weighted(0.2, 0usize..12),
        prop::option::weighted(0.2, 0usize..20),
    )
        .prop_map(|(group, suffix, max_new, at, abort_after, eos_at)| {
            // Three shared prefixes (or none) so the radix cache has hits to share and evict.
            let mut prompt: Vec<u32> = (0..group * 12).map(|t| 100 + group as u32 * 50 + t as u32).collect();
            prompt.extend(suffix);
            Arrival { prompt, max_new, at, abort_after, eos_at }
        })
}

fn policy() -> impl Strategy<Value = SchedulePolicy> {
    prop_oneof![
        Just(SchedulePolicy::Fcfs),
        Just(SchedulePolicy::Lof),
        Just(SchedulePolicy::Lpm),
        Just(SchedulePolicy::DfsWeight)
    ]
}

/// Steps after the last arrival by which every request must have ended.
const STEP_LIMIT: usize = 20_000;

proptest! {
    #![proptest_config(ProptestConfig { cases: 160, ..ProptestConfig::default() })]

    #[test]
    fn pages_are_conserved_budgets_hold_and_every_request_ends(
        page_size in prop_oneof![Just(1u32), Just(4)],
        pages in 24usize..100,
        chunk in prop::option::of(prop_oneof![Just(8usize), Just(16), Just(32)]),
        max_running in 2usize..8,
        policy in policy(),
        overlap in any::<bool>(),
        mixed in any::<bool>(),
        decay_steps in prop_oneof![Just(2.0f64), Just(20.0), Just(600.0)],
        arrivals in prop::collection::vec(arrival(), 1..14),
    ) {
        let pool = pages * page_size as usize;
        let config = sglang_config::config(Knobs {
            page_size,
            pool_tokens: pool,
            chunked_prefill_size: chunk,
            max_running,
            policy,
            decay_steps,
            overlap,
            mixed_chunk: mixed && chunk.is_some(),
        });
        let mut sched = Scheduler::new(config).expect("a valid page size");
        let mut ids = vec![None; arrivals.len()];
        let mut launched = false;
        let last_arrival = arrivals.iter().map(|a| a.at).max().unwrap_or(0);
        let mut step = 0;
        loop {
            for (i, a) in arrivals.iter().enumerate() {
                // Prompts must stay under max_req_input_len (max_req_len − 5).
                if a.at == step && a.prompt.len() + 6 < pool {
                    ids[i] = Some(sched.add_request(a.prompt.clone(), a.max_new).0);
                }
                if let (Some(id), Some(after)) = (ids[i], a.abort_after)
                    && a.at + after == step
                {
                    sched.abort(id);
                }
            }
            let eos: Vec<Option<usize>> = arrivals.iter().map(|a| a.eos_at).collect();
            let index_of = ids.clone();
            let token = move |id, k| {
                let i = index_of.iter().position(|&x| x == Some(id)).expect("an arrived request");
                if eos[i] == Some(k) { 2 } else { 1000 + k as u32 }
            };
            let batch: Option<Batch> = sched.next_batch();
            if let Some(b) = &batch {
                prop_assert!(b.requests.len() <= max_running, "{} rows, cap {}", b.requests.len(), max_running);
                if let Some(chunk) = chunk && b.kind != BatchKind::Decode {
                    let page = page_size as usize;
                    let prefill: usize = b
                        .requests
                        .iter()
                        .filter(|r| !b.decoding.contains(r))
                        .map(|&r| sched.extend_row(r).extend_len.div_ceil(page) * page)
                        .sum();
                    prop_assert!(prefill <= chunk, "prefill of {} tokens over a chunk of {}", prefill, chunk);
                }
            }
            if overlap {
                if let Some(b) = &batch {
                    sched.launch(b);
                }
                if launched {
                    sched.process_oldest(&token);
                } else if batch.is_none() {
                    sched.on_idle();
                }
                launched = batch.is_some();
            } else if let Some(b) = &batch {
                sched.process_result(b, &token);
            } else {
                sched.on_idle();
            }
            sched.set_last_batch(batch);
            if let Err(broken) = sched.check_invariants() {
                return Err(TestCaseError::fail(format!("step {step}: {broken}")));
            }
            let arrived: Vec<usize> = ids.iter().flatten().copied().collect();
            if step > last_arrival + 12 && arrived.iter().all(|&id| sched.finish_of(id).is_some()) && sched.is_fully_idle() {
                break;
            }
            prop_assert!(step < last_arrival + STEP_LIMIT, "requests still unfinished after {} steps", step);
            step += 1;
        }
        let [free, evictable, protected, rows] = sched.sizes();
        prop_assert_eq!(protected, 0);
        prop_assert_eq!(free + evictable, pool);
        prop_assert_eq!(rows, max_running);
    }
}
