//! Tests of a whole vLLM instance: argument defaults as vLLM 0.15.1 resolves them, CUDA-graph
//! capture sizes and the padding of each step, and the stall detector on the upstream livelock.

use std::sync::Arc;

use blis_contracts::{GraphPolicy, StepGraph};
use blis_engines::vllm::{
    DeviceClass, EngineRequest, FinishedRequest, KvEvent, Stall, VllmArgs, VllmEngine, capture_sizes,
    event_value, hash_block, none_hash, plan,
};

#[path = "support/flat_environment.rs"]
mod flat_environment;
use flat_environment::{Flat, GIB, model};

const H100: DeviceClass<'static> = DeviceClass { name: "H100-SXM-80GB", capacity_bytes: 80 * GIB };
const A100_40: DeviceClass<'static> = DeviceClass { name: "A100-SXM-40GB", capacity_bytes: 40 * GIB };

/// Engine args from `key: value` lines (the scenario parser's job; kept tiny here).
fn args(lines: &str) -> VllmArgs {
    let object: serde_json::Map<String, serde_json::Value> = lines
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let (key, value) = line.split_once(':').expect("key: value");
            let value = value.trim();
            let json =
                serde_json::from_str(value).unwrap_or_else(|_| serde_json::Value::String(value.to_owned()));
            (key.trim().to_owned(), json)
        })
        .collect();
    serde_json::from_value(serde_json::Value::Object(object)).expect("valid args")
}

fn engine(yaml: &str, device: DeviceClass<'_>) -> VllmEngine {
    let (plan, environment) = plan(
        &args(yaml),
        &model(),
        device,
        |_| Box::new(Flat { capacity_bytes: device.capacity_bytes }),
        "pool",
    )
    .expect("plans");
    VllmEngine::new(plan, environment)
}

fn request(key: u64, prompt: u32, max_tokens: u32, priority: i64) -> EngineRequest {
    EngineRequest {
        key,
        name: Arc::from(format!("r{key}")),
        priority,
        prompt_token_ids: (0..prompt).map(|t| t + 1000 * key as u32).collect(),
        output_token_ids: Arc::from(vec![7u32; max_tokens as usize]),
        arrival_us: 0,
    }
}

#[test]
fn unset_arguments_resolve_as_vllm_serve_resolves_them() {
    let h100 = engine("", H100);
    let config = &h100.plan().config;
    assert_eq!((config.max_num_batched_tokens, config.max_num_seqs), (8192, 1024));
    assert!(config.enable_prefix_caching && config.async_scheduling && !config.enforce_eager);
    assert_eq!(h100.plan().pool.steps_in_flight, 2);
    assert_eq!(config.scheduling_policy, "fcfs");
    let a100 = engine("max_model_len: 8192", A100_40);
    assert_eq!((a100.plan().config.max_num_batched_tokens, a100.plan().config.max_num_seqs), (2048, 256));
    // A defaulted token budget never exceeds what the sequences could use, and a defaulted
    // sequence cap never exceeds the budget.
    let short = engine("max_model_len: 16\nmax_num_seqs: 4", H100);
    assert_eq!((short.plan().config.max_num_batched_tokens, short.plan().config.max_num_seqs), (64, 4));
    let small_budget = engine("max_num_batched_tokens: 512", H100);
    assert_eq!(small_budget.plan().config.max_num_seqs, 512);
    // Without chunked prefill a defaulted budget holds one whole prompt.
    let unchunked = engine("enable_chunked_prefill: false\nmax_model_len: 32768", H100);
    assert_eq!(unchunked.plan().config.max_num_batched_tokens, 32768);
    let sync = engine("async_scheduling: false\nenforce_eager: true", H100);
    assert_eq!(sync.plan().pool.steps_in_flight, 1);
    assert_eq!(sync.plan().pool.graphs, GraphPolicy::Eager);
}

#[test]
fn default_capture_sizes_follow_vllm() {
    let sizes = capture_sizes(1024, 8192);
    assert_eq!(sizes.len(), 51);
    assert_eq!(&sizes[..6], &[1, 2, 4, 8, 16, 24]);
    assert_eq!(&sizes[sizes.len() - 3..], &[480, 496, 512]);
    assert!(sizes.contains(&248) && sizes.contains(&256) && sizes.contains(&272) && !sizes.contains(&264));
    assert_eq!(capture_sizes(128, 8192).last(), Some(&256));
    assert_eq!(capture_sizes(8, 8192), vec![1, 2, 4, 8, 16]);
    assert_eq!(capture_sizes(1, 8192), vec![1, 2]);
    assert_eq!(capture_sizes(256, 100).last(), Some(&96), "capped by max_num_batched_tokens");
}

/// Schedules one step with the waiting requests and returns its shape.
fn first_step(engine: &mut VllmEngine) -> (u64, u64, StepGraph) {
    let (_, shape) = engine.schedule();
    (shape.totals.new_tokens, shape.padded_tokens, shape.graph)
}

#[test]
fn a_step_runs_at_the_next_capture_size_and_beyond_the_largest_eagerly() {
    // 37 one-token prompts: uniform query length 1, padded to 40, a full graph.
    let mut decode = engine("", H100);
    for key in 0..37 {
        decode.add_request(&request(key, 1, 4, 0)).unwrap();
    }
    assert_eq!(first_step(&mut decode), (37, 40, StepGraph::Full));

    // A 257-token prompt: padded to 272 under a piecewise graph (attention eager).
    let mut mixed = engine("", H100);
    mixed.add_request(&request(0, 257, 4, 0)).unwrap();
    assert_eq!(first_step(&mut mixed), (257, 272, StepGraph::Piecewise));

    // 600 tokens exceed the largest capture size (512): eager at the exact count.
    let mut large = engine("", H100);
    large.add_request(&request(0, 600, 4, 0)).unwrap();
    assert_eq!(first_step(&mut large), (600, 600, StepGraph::Eager));

    // Uniform decode padded beyond max_num_seqs has no full graph: piecewise (max_num_seqs 8
    // captures up to 16).
    let mut narrow = engine("max_num_seqs: 8", H100);
    for key in 0..8 {
        narrow.add_request(&request(key, 1, 4, 0)).unwrap();
    }
    assert_eq!(first_step(&mut narrow), (8, 8, StepGraph::Full));
    let mut narrow = engine("max_num_seqs: 8\nmax_num_batched_tokens: 64", H100);
    narrow.add_request(&request(0, 9, 4, 0)).unwrap();
    assert_eq!(first_step(&mut narrow), (9, 16, StepGraph::Piecewise));

    // Eager mode never pads.
    let mut eager = engine("enforce_eager: true", H100);
    eager.add_request(&request(0, 37, 4, 0)).unwrap();
    assert_eq!(first_step(&mut eager), (37, 37, StepGraph::Eager));
}

/// Drives `engine` synchronously until idle or stalled; returns the steps run and the finished.
fn drive(engine: &mut VllmEngine, max_steps: u64) -> (u64, Vec<FinishedRequest>) {
    let mut finished = Vec::new();
    let mut steps = 0;
    while engine.has_requests() && engine.stall().is_none() && steps < max_steps {
        steps += 1;
        engine.schedule();
        engine.complete_oldest(steps, &mut finished);
    }
    (steps, finished)
}

#[test]
fn the_upstream_priority_livelock_is_reported_not_run_forever() {
    // The configuration of traces/vllm-0.15.1/priority-livelock-bs16-*.jsonl: vLLM 0.15.1 lets
    // two requests of equal priority and arrival preempt each other forever.
    let setup = "scheduling_policy: priority\nnum_gpu_blocks_override: 10\nblock_size: 16\nmax_num_seqs: 2\nmax_num_batched_tokens: 576\nmax_model_len: 144\nlong_prefill_token_threshold: 16\nenable_prefix_caching: false\nasync_scheduling: false";
    let mut livelocked = engine(setup, H100);
    livelocked.add_request(&request(0, 40, 72, 1)).unwrap();
    livelocked.add_request(&request(1, 48, 64, 1)).unwrap();
    let (steps, finished) = drive(&mut livelocked, 100_000);
    assert!(finished.is_empty());
    match livelocked.stall() {
        Some(Stall::Livelock { steps: quiet, preemptions }) => {
            assert_eq!(*quiet, 16 * 144 + 1, "declared after 16 × max_model_len steps without a token");
            assert!(*preemptions > 100, "{preemptions} preemptions");
            assert!(steps < 10_000, "{steps} steps");
        }
        other => panic!("expected the livelock, got {other:?}"),
    }

    // The same requests under FCFS finish: the oldest running request is never the victim.
    let mut fcfs = engine(&setup.replace("priority", "fcfs"), H100);
    fcfs.add_request(&request(0, 40, 72, 1)).unwrap();
    fcfs.add_request(&request(1, 48, 64, 1)).unwrap();
    let (_, finished) = drive(&mut fcfs, 100_000);
    assert_eq!(finished.len(), 2);
    assert!(fcfs.stall().is_none());
}

#[test]
fn partial_prefills_capture_sizes_and_kv_bytes_resolve_as_vllm_resolves_them() {
    // More than one partial prefill turns on a long-prefill threshold of 4% of max_model_len.
    let partial = engine("max_model_len: 10000\nmax_num_partial_prefills: 2", H100);
    assert_eq!(partial.plan().config.long_prefill_token_threshold, 400);
    let refused = plan(
        &args("max_num_partial_prefills: 2\nenable_chunked_prefill: false"),
        &model(),
        H100,
        |_| Box::new(Flat { capacity_bytes: 80 * GIB }),
        "pool",
    );
    assert_eq!(refused.err().map(|e| e.path), Some("pool.engine.args.max_num_partial_prefills".to_owned()));

    // Explicit capture sizes are deduplicated, sorted and cut at the token budget.
    let explicit = engine("cudagraph_capture_sizes: [64, 8, 8, 16, 9000]", H100);
    assert_eq!(explicit.plan().config.cudagraph_capture_sizes, vec![8, 16, 64]);
    let capped = engine("max_cudagraph_capture_size: 100", H100);
    assert_eq!(capped.plan().config.cudagraph_capture_sizes.last(), Some(&96));
    let inconsistent = plan(
        &args("cudagraph_capture_sizes: [8, 16]\nmax_cudagraph_capture_size: 32"),
        &model(),
        H100,
        |_| Box::new(Flat { capacity_bytes: 80 * GIB }),
        "pool",
    );
    assert!(inconsistent.err().is_some_and(|e| e.cause.contains("should be consistent")));

    // kv_cache_memory_bytes replaces the utilization rule: 1 GiB of 2 MiB blocks (K and V × 32
    // layers × 8 heads × 128 × 2 B × 16 tokens).
    let fixed = engine("kv_cache_memory_bytes: 1073741824\nmax_model_len: 4096", H100);
    assert_eq!(fixed.plan().budget.bytes_per_block, 2_097_152);
    assert_eq!(fixed.plan().budget.num_gpu_blocks, 512);
}

#[test]
fn kv_events_are_published_only_when_turned_on_and_carry_vllms_hashes() {
    let run = |on: bool| {
        let mut instance = engine("", H100);
        instance.set_record_kv_events(on);
        instance.add_request(&request(0, 40, 2, 0)).unwrap();
        instance.schedule();
        let mut finished = Vec::new();
        instance.complete_oldest(1, &mut finished);
        instance.last_update().kv_events.clone()
    };
    assert!(run(false).is_empty());
    let events = run(true);
    // 40 prompt tokens fill two blocks of 16, cached in one BlockStored event whose values are
    // the last 8 bytes of vLLM's SHA-256 block hashes and whose token ids are those 32 tokens.
    let tokens: Vec<u32> = (0..32).collect();
    let mut scratch = Vec::new();
    let first = hash_block(&none_hash(), &tokens[..16], &mut scratch);
    let second = hash_block(&first, &tokens[16..], &mut scratch);
    let all: Vec<KvEvent> = events.iter().copied().collect();
    let [KvEvent::BlockStored { request: 0, first_block: 0, hashes, parent: None, tokens: span }] = all[..]
    else {
        panic!("{all:?}")
    };
    assert_eq!(events.hashes(hashes), [event_value(&first), event_value(&second)]);
    assert_eq!(events.tokens(span), &tokens[..]);
}
