//! Nanoseconds per SGLang scheduler step at batch 256: one pass of `get_next_batch_to_run` (a
//! decode batch), its step shape, and its result applied, in the normal and the overlap loop.
//! Figures in `docs/PERFORMANCE.md`.

use std::hint::black_box;

use blis_contracts::StepShape;
use blis_engines::sglang::radix_cache::EvictionPolicy;
use blis_engines::sglang::scheduler::{GraphPolicy, SchedulePolicy, Scheduler, SchedulerConfig};
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};

const BATCH: usize = 256;
const STEPS: usize = 1_000;

fn config(overlap: bool) -> SchedulerConfig {
    SchedulerConfig {
        page_size: 1,
        pool_tokens: 2_000_000,
        chunked_prefill_size: Some(8192),
        max_prefill_tokens: 16_384,
        max_running: 1024,
        req_pool_size: 1024,
        max_req_len: 8191,
        policy: SchedulePolicy::Fcfs,
        ratio_init: 0.7,
        ratio_min: 0.7 * 0.14,
        ratio_decay: (0.7 - 0.7 * 0.14) / 600.0,
        eos_token: u32::MAX,
        overlap,
        mixed_chunk: false,
        eviction: EvictionPolicy::Lru,
    }
}

fn token(id: usize, k: usize) -> u32 {
    (1_000 + 131 * id + k) as u32 % 32_000
}

/// One pass and its result, in the loop's order.
fn step(scheduler: &mut Scheduler, graphs: &GraphPolicy, shape: &mut StepShape, overlap: bool) {
    let batch = scheduler.next_batch();
    if let Some(b) = &batch {
        scheduler.step_shape(b, graphs, shape);
    }
    if overlap {
        if let Some(b) = &batch {
            scheduler.launch(b);
        }
        scheduler.process_oldest(token);
    } else if let Some(b) = &batch {
        scheduler.process_result(b, token);
    }
    scheduler.set_last_batch(batch);
}

/// A scheduler with `BATCH` requests of 1,000-token prompts decoding (their prefills done).
fn warmed(overlap: bool) -> (Scheduler, GraphPolicy, StepShape) {
    let mut scheduler = Scheduler::new(config(overlap)).expect("fcfs needs no shuffle");
    for id in 0..BATCH {
        scheduler.add_request((0..1_000).map(|t| (t + 7 * id as u32) % 32_000).collect(), 4_000);
    }
    let graphs = GraphPolicy {
        decode_sizes: blis_engines::sglang::defaults::decode_graph_batch_sizes(256, false),
        prefill_buckets: Vec::new(),
    };
    let mut shape = StepShape::default();
    for _ in 0..100 {
        step(&mut scheduler, &graphs, &mut shape, overlap);
    }
    assert_eq!(scheduler.running().len(), BATCH);
    (scheduler, graphs, shape)
}

fn scheduler_step(c: &mut Criterion) {
    for (name, overlap) in [("normal", false), ("overlap", true)] {
        c.bench_function(&format!("sglang/decode-256/{name}/1000-steps"), |b| {
            b.iter_batched(
                || warmed(overlap),
                |(mut s, graphs, mut shape)| {
                    for _ in 0..STEPS {
                        step(&mut s, &graphs, &mut shape, overlap);
                    }
                    black_box(shape.totals);
                    assert_eq!(
                        shape.totals.decode_requests as usize, BATCH,
                        "every step decodes the whole batch"
                    );
                    s
                },
                BatchSize::PerIteration,
            )
        });
    }
}

criterion_group!(benches, scheduler_step);
criterion_main!(benches);
