//! Nanoseconds per engine step of the vLLM scheduler and KV-cache manager at batch 256: one
//! `schedule()` and one `update_from_output()`, synchronous and asynchronous with prefix caching
//! on, and synchronous with it off (no block hashing).
//! Figures in `docs/PERFORMANCE.md`.

use std::hint::black_box;
use std::sync::Arc;

use blis_engines::vllm::{
    EngineRequest, KvCacheManager, Policy, Scheduler, SchedulerLimits, SchedulerOutput, UpdateOutput,
};
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};

const BATCH: u64 = 256;
const STEPS: u64 = 1_000;

/// A scheduler with `BATCH` requests of 1,000-token prompts decoding (their prefills done), each
/// with more output to go than the measured steps.
fn warmed(asynchronous: bool, caching: bool) -> Scheduler {
    let limits = SchedulerLimits {
        max_num_seqs: 1024,
        max_num_batched_tokens: 8192,
        max_model_len: 4096,
        enable_chunked_prefill: true,
        long_prefill_token_threshold: 0,
        policy: Policy::Fcfs,
        async_scheduling: asynchronous,
    };
    let mut scheduler = Scheduler::new(limits, KvCacheManager::new(60_000, 16, 4096, caching));
    for key in 0..BATCH {
        scheduler.add_request(&EngineRequest {
            key,
            name: Arc::from(format!("r{key}")),
            priority: 0,
            prompt_token_ids: (0..1_000).map(|t| (t + 7 * key as u32) % 32_000).collect(),
            output_token_ids: (0..2_500).map(|t| t % 32_000).collect(),
            arrival_us: 0,
        });
    }
    let (mut out, mut update) = (SchedulerOutput::default(), UpdateOutput::default());
    // Prefills (8192 tokens a step), then a few decodes.
    for now in 0..64 {
        scheduler.schedule(&mut out);
        scheduler.update_from_output(&out, now, &mut update);
    }
    assert_eq!(scheduler.num_running() as u64, BATCH);
    scheduler
}

fn run_steps(mut scheduler: Scheduler, asynchronous: bool) -> Scheduler {
    let (mut update, mut in_flight) = (UpdateOutput::default(), Vec::<SchedulerOutput>::with_capacity(2));
    let mut spare = vec![SchedulerOutput::default(), SchedulerOutput::default(), SchedulerOutput::default()];
    for now in 0..STEPS {
        let mut out = spare.pop().expect("three outputs cycle");
        scheduler.schedule(&mut out);
        in_flight.push(out);
        if !asynchronous || in_flight.len() == 2 {
            let done = in_flight.remove(0);
            scheduler.update_from_output(&done, 1_000 + now, &mut update);
            spare.push(done);
        }
    }
    black_box(&update);
    scheduler
}

fn scheduler_step(c: &mut Criterion) {
    for (name, asynchronous, caching) in
        [("sync", false, true), ("async", true, true), ("sync-no-prefix-caching", false, false)]
    {
        c.bench_function(&format!("vllm/decode-256/{name}/1000-steps"), |b| {
            b.iter_batched(
                || warmed(asynchronous, caching),
                |s| run_steps(s, asynchronous),
                BatchSize::PerIteration,
            )
        });
    }
}

criterion_group!(benches, scheduler_step);
criterion_main!(benches);
