//! Tests of a whole SGLang instance: the plan's defaults and KV pool for the GPU and the model,
//! its refusals by path, and the instance driven iteration by iteration as its host drives it
//! (token times, the overlap loop's one-iteration lag, the scheduler forgetting requests so its
//! books stay bounded by what is in flight).

use std::collections::VecDeque;
use std::sync::Arc;

use blis_contracts::yaml;
use blis_engines::sglang::scheduler::{QueueShuffle, RequestId};
use blis_engines::sglang::{Device, FinishedRequest, SglangArgs, SglangEngine, SglangPlan, plan};
use blis_engines::vllm::EngineRequest;

#[path = "support/flat_environment.rs"]
mod flat_environment;
use flat_environment::{Flat, GIB, model};

const MIB: u64 = 1 << 20;

#[derive(Debug)]
struct NoShuffle;

impl QueueShuffle for NoShuffle {
    fn shuffle(&mut self, _queue: &mut [RequestId]) {}
}

/// H100-SXM as nvidia-smi reports it (81559 MiB).
const H100_BYTES: u64 = 81_559 * MIB;

fn planned(args: &str, capacity_bytes: u64) -> Result<SglangPlan, blis_contracts::FieldError> {
    let args = SglangArgs::from_yaml(&yaml::from_str(args).expect("YAML"), "args")?;
    let device = Device { name: "H100-SXM", capacity_bytes };
    plan(&args, &model(), device, |_| Box::new(Flat { capacity_bytes }), "pool").map(|(plan, _)| plan)
}

#[test]
fn an_h100_resolves_the_release_defaults_and_sizes_the_pool_from_memory() {
    let plan = planned("{}", H100_BYTES).unwrap();
    let c = &plan.config;
    // handle_gpu_memory_settings for 81559 MiB at TP1 (sglang.md H.2's worked case): chunk 8192,
    // decode graphs to 256, 58 prefill buckets, reserved 13904 MiB → 0.830.
    assert_eq!((c.chunked_prefill_size, c.mem_fraction_static), (Some(8192), 0.83));
    assert_eq!(c.decode_graph_batch_sizes.last(), Some(&256));
    assert_eq!(c.prefill_graph_token_buckets.len(), 58);
    // budget = (total − other, 1 GiB) × 0.83 − weights (16 GiB); 128 KiB of KV per token.
    let budget = ((H100_BYTES - GIB) as f64 * 0.83) as i64 - 16 * GIB as i64;
    assert_eq!(plan.budget.budget_bytes, budget);
    assert_eq!(plan.budget.bytes_per_token, 2 * 32 * 8 * 128 * 2);
    assert_eq!(plan.budget.max_total_num_tokens, budget as u64 / (128 * 1024));
    // resolve_max_num_reqs: 512 per context length of capacity, clamped to 2048..4096.
    assert_eq!(c.max_running_requests, 2048);
    assert_eq!(plan.scheduler.max_req_len, 131_071);
    assert!(plan.scheduler.overlap && !plan.scheduler.mixed_chunk);
}

#[test]
fn a_page_size_floors_the_pool_to_whole_pages_and_a_cap_applies_first() {
    let plan = planned("{page_size: 16, max_total_tokens: 10007}", H100_BYTES).unwrap();
    assert_eq!(plan.budget.max_total_num_tokens, 10_000);
    assert_eq!(plan.pool.kv.num_blocks, 625);
    assert_eq!(plan.config.max_req_len, 9_999);
    assert_eq!(plan.config.max_req_input_len, 9_994);
    // 512 × 10,000 / 131,072 = 39, clamped up to 2,048; half the pool (5,000) does not bind.
    assert_eq!(plan.config.max_running_requests, 2_048);
    let tiny = planned("{max_total_tokens: 3000}", H100_BYTES).unwrap();
    assert_eq!(tiny.config.max_running_requests, 1_500, "half the pool binds");
}

#[test]
fn refusals_name_the_field() {
    let refuse = |args: &str| planned(args, H100_BYTES).expect_err(args);
    assert_eq!(refuse("{mem_fraction_static: 0.15}").path, "pool.engine.args.mem_fraction_static");
    assert_eq!(refuse("{mem_fraction_static: 1.5}").path, "pool.engine.args.mem_fraction_static");
    assert_eq!(refuse("{tp_size: 5}").path, "pool.engine.args.tp_size");
    assert_eq!(refuse("{pp_size: 2}").path, "pool.engine.args.pp_size");
    assert_eq!(refuse("{max_total_tokens: 5}").path, "pool.engine.args.max_total_tokens");
    assert_eq!(refuse("{chunked_prefill_size: 99999999}").path, "pool.engine.args.chunked_prefill_size");
    assert_eq!(refuse("{schedule_policy: hrrn}").path, "pool.engine.args.schedule_policy");
    assert_eq!(refuse("{kv_cache_dtype: fp4}").path, "pool.engine.args.kv_cache_dtype");
    // A GPU that cannot hold the weights at all.
    let small = planned("{}", 16 * GIB).expect_err("16 GiB");
    assert!(small.cause.contains("Not enough memory"), "{small}");
}

fn request(key: u64, prompt: u32, outputs: u32) -> EngineRequest {
    EngineRequest {
        key,
        name: Arc::from(format!("r{key}")),
        priority: 0,
        prompt_token_ids: (0..prompt).map(|t| 7 + (t + 13 * key as u32) % 30_000).collect(),
        output_token_ids: (0..outputs).map(|t| 40_000 + t).collect(),
        arrival_us: 0,
    }
}

/// Drive `engine` as its host does, with a flat one-microsecond-per-token device and no host
/// time: arrivals join at an iteration's top; returns the finished requests in order.
fn drive(engine: &mut SglangEngine, mut arrivals: VecDeque<(u64, EngineRequest)>) -> Vec<FinishedRequest> {
    let overlap = engine.overlap();
    let mut finished = Vec::new();
    let mut now = 0u64;
    let mut ends: VecDeque<u64> = VecDeque::new();
    let mut device_free = 0u64;
    for _ in 0..200_000 {
        while arrivals.front().is_some_and(|(at, _)| *at <= now) {
            let (_, r) = arrivals.pop_front().unwrap();
            engine.add_request(&r).unwrap();
        }
        match engine.form(&mut finished) {
            Some(price) => {
                let end = now.max(device_free) + (price.micros.ceil() as u64).max(1);
                device_free = end;
                ends.push_back(end);
                if engine.in_flight() > usize::from(overlap) {
                    now = now.max(ends.pop_front().unwrap());
                    engine.apply_oldest(now, &mut finished);
                    engine.end_iteration(true);
                } else {
                    engine.end_iteration(false);
                }
            }
            None if !ends.is_empty() => {
                now = now.max(ends.pop_front().unwrap());
                engine.apply_oldest(now, &mut finished);
                engine.end_iteration(true);
            }
            None => {
                engine.end_iteration(false);
                match arrivals.front() {
                    Some((at, _)) => now = *at,
                    None => return finished,
                }
            }
        }
    }
    panic!("the instance did not drain");
}

fn engine(args: &str) -> SglangEngine {
    let plan = planned(args, H100_BYTES).unwrap();
    SglangEngine::new(plan, Box::new(Flat { capacity_bytes: H100_BYTES }), Box::new(NoShuffle)).unwrap()
}

#[test]
fn one_request_gets_its_tokens_when_each_result_is_applied() {
    // Normal loop: a 100-token prompt runs as one extend padded to the 112-token bucket (its
    // first token at 112 µs), then 3 decodes padded to batch 1 (1 µs each).
    let mut normal = engine("{disable_overlap_schedule: true, max_total_tokens: 50000}");
    let done = drive(&mut normal, VecDeque::from([(0, request(1, 100, 4))]));
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].token_times_us, vec![112, 113, 114, 115]);
    // Overlap loop: the extend's result is applied only after the next batch (a decode) is
    // formed and launched, and each result when the following batch has launched: the same
    // device times, since results wait for nothing but the device here.
    let mut overlap = engine("{max_total_tokens: 50000}");
    let done = drive(&mut overlap, VecDeque::from([(0, request(1, 100, 4))]));
    assert_eq!(done[0].token_times_us, vec![112, 113, 114, 115]);
    assert_eq!(overlap.counters().decode_batches, 3, "a length-finisher leaves the next decode batch");
}

#[test]
fn the_books_stay_bounded_by_what_is_in_flight() {
    // 2,000 requests one after another: the scheduler reuses the ids of requests two iterations
    // after they finish, so it never holds more than a handful.
    for args in ["{max_total_tokens: 50000}", "{disable_overlap_schedule: true, max_total_tokens: 50000}"] {
        let mut e = engine(args);
        let arrivals = (0..2_000).map(|k| (k * 1_000, request(k, 50, 8))).collect();
        let done = drive(&mut e, arrivals);
        assert_eq!(done.len(), 2_000, "{args}");
        assert!(done.iter().all(|d| d.token_times_us.len() == 8), "{args}");
        assert!(e.scheduler().request_slots() <= 4, "{args}: {} slots", e.scheduler().request_slots());
        assert!(!e.has_requests());
        e.scheduler().check_invariants().unwrap();
    }
}
