//! Every bad scenario is refused with one message naming the field path, the value and the
//! cause — never a panic.

use blis_actors::{RunError, RunOptions, run};

const BASE: &str = r#"
cluster:
  router: { policy: round-robin }
  pools:
    - name: p
      replicas: 1
      hardware: { chip: H100-SXM }
      model: Llama-3.1-8B
      engine:
        kind: vllm
        version: "0.15.1"
        args: { block_size: 16 }
workload:
  clients:
    - name: a
      requests: 3
      arrival: { process: poisson, rate_per_s: 1 }
      input_tokens: { dist: constant, value: 10 }
      output_tokens: { dist: constant, value: 4 }
"#;

/// The refusal of `BASE` with `from` replaced by `to`.
fn refusal(from: &str, to: &str) -> blis_contracts::FieldError {
    assert!(BASE.contains(from), "the base scenario has no {from:?}");
    let text = BASE.replacen(from, to, 1);
    match run(&text, RunOptions::default(), &mut |_| {}) {
        Err(RunError::Input(error)) => error,
        other => panic!("expected a refusal for {to:?}, got {:?}", other.map(|o| o.result.fates)),
    }
}

#[test]
fn the_base_scenario_runs() {
    let output = run(BASE, RunOptions::default(), &mut |_| {}).unwrap();
    assert_eq!(output.result.fates.completed, 3);
}

#[test]
fn an_unknown_field_is_named() {
    let e = refusal("replicas: 1", "replicas: 1\n      replica_count: 2");
    assert_eq!(e.path, "cluster.pools[0].replica_count");
    assert!(e.cause.contains("unknown field `replica_count`"), "{e}");
}

#[test]
fn an_unknown_engine_argument_is_named() {
    let e = refusal("block_size: 16", "block_size: 16, max_num_seq: 4");
    assert_eq!(e.path, "cluster.pools[0].engine.args.max_num_seq");
    assert!(e.cause.contains("unknown field"), "{e}");
}

#[test]
fn a_wrong_type_is_named() {
    let e = refusal("requests: 3", "requests: three");
    assert_eq!(e.path, "workload.clients[0].requests");
    assert!(e.cause.contains("invalid type") && e.cause.contains("three"), "{e}");
    let e = refusal("replicas: 1", "replicas: -1");
    assert_eq!(e.path, "cluster.pools[0].replicas");
    assert!(e.cause.contains("-1"), "{e}");
}

#[test]
fn a_negative_rate_is_refused() {
    let e = refusal("rate_per_s: 1", "rate_per_s: -2.5");
    assert_eq!(e.path, "workload.clients[0].arrival.rate_per_s");
    assert_eq!(e.value.as_deref(), Some("-2.5"));
    assert!(e.cause.contains("positive"), "{e}");
}

#[test]
fn zero_engines_are_refused() {
    let e = refusal("replicas: 1", "replicas: 0");
    assert_eq!(e.path, "cluster.pools[0].replicas");
    assert_eq!(e.value.as_deref(), Some("0"));
    let text = BASE.replacen(
        BASE[BASE.find("  pools:").unwrap()..BASE.find("workload:").unwrap()].trim_end(),
        "  pools: []",
        1,
    );
    match run(&text, RunOptions::default(), &mut |_| {}) {
        Err(RunError::Input(e)) => assert_eq!(e.path, "cluster.pools"),
        other => panic!("{:?}", other.map(|o| o.result.fates)),
    }
}

#[test]
fn a_model_or_chip_not_in_the_catalog_is_refused() {
    let e = refusal("model: Llama-3.1-8B", "model: Llama-9-1T");
    assert_eq!(e.path, "cluster.pools[0].model");
    assert_eq!(e.value.as_deref(), Some("Llama-9-1T"));
    assert!(e.cause.contains("not in the catalog"), "{e}");
    let e = refusal("chip: H100-SXM", "chip: H99");
    assert_eq!(e.path, "cluster.pools[0].hardware.chip");
    assert!(e.cause.contains("H100-SXM"), "the known chips are listed: {e}");
}

#[test]
fn a_deployment_that_cannot_hold_one_request_is_refused() {
    // Llama-2-70B's 138 GB of weights do not fit one H100 at any gpu_memory_utilization: the
    // cure is more GPUs.
    let e = refusal("model: Llama-3.1-8B", "model: Llama-2-70B");
    assert_eq!(e.path, "cluster.pools[0].engine.args.tensor_parallel_size");
    assert!(e.cause.contains("a larger tensor_parallel_size"), "{e}");
    assert!(!e.cause.contains("Try increasing `gpu_memory_utilization`"), "{e}");
    // Llama-3.1-8B's 16 GB fit an H100, but not in 15% of it: vLLM's own message.
    let e = refusal("block_size: 16", "block_size: 16, gpu_memory_utilization: 0.15");
    assert_eq!(e.path, "cluster.pools[0].engine.args.gpu_memory_utilization");
    assert!(e.cause.contains("No available memory for the cache blocks"), "{e}");
    // Llama-3.1-8B's full 131,072-token context needs 16 GiB of KV; at 40% of the GPU there is
    // less than that left after the weights.
    let e = refusal("block_size: 16", "block_size: 16, gpu_memory_utilization: 0.4");
    assert_eq!(e.path, "cluster.pools[0].engine.args.max_model_len");
    assert!(e.cause.contains("To serve at least one request with the models's max seq len (131072)"), "{e}");
    // A block override too small for one max_model_len request.
    let e = refusal("block_size: 16", "block_size: 16, max_model_len: 4096, num_gpu_blocks_override: 100");
    assert_eq!(e.path, "cluster.pools[0].engine.args.num_gpu_blocks_override");
    assert!(e.cause.contains("cannot hold one request"), "{e}");
    // A cache sized by hand does not make room for the weights: Llama-2-70B on one H100 with a
    // 2 GB cache once ran; vLLM runs out of memory loading it.
    let e = refusal(
        "model: Llama-3.1-8B\n      engine:\n        kind: vllm\n        version: \"0.15.1\"\n        args: { block_size: 16 }",
        "model: Llama-2-70B\n      engine:\n        kind: vllm\n        version: \"0.15.1\"\n        args: { block_size: 16, kv_cache_memory_bytes: 2000000000 }",
    );
    assert_eq!(e.path, "cluster.pools[0].engine.args.tensor_parallel_size");
    assert!(e.cause.contains("loading the weights"), "{e}");
    // Llama-3.1-8B's 15 GiB of weights and a 70 GiB cache do not fit 79 GiB together.
    let e = refusal("block_size: 16", "block_size: 16, kv_cache_memory_bytes: 75161927680");
    assert_eq!(e.path, "cluster.pools[0].engine.args.kv_cache_memory_bytes");
    assert!(e.cause.contains("allocating the cache"), "{e}");
}

#[test]
fn features_this_build_does_not_model_are_refused_by_name() {
    let e = refusal("version: \"0.15.1\"", "version: \"0.16.0\"");
    assert_eq!(e.path, "cluster.pools[0].engine.version");
    assert!(e.cause.contains("0.15.1"), "{e}");
    let e = refusal("block_size: 16", "block_size: 16, pipeline_parallel_size: 2");
    assert_eq!(e.path, "cluster.pools[0].engine.args.pipeline_parallel_size");
    assert!(e.cause.contains("not modelled"), "{e}");
    let e = refusal("block_size: 16", "block_size: 16, scheduling_policy: lifo");
    assert_eq!(e.path, "cluster.pools[0].engine.args.scheduling_policy");
    assert_eq!(e.value.as_deref(), Some("lifo"));
    let e = refusal("block_size: 16", "block_size: 16, quantization: awq");
    assert_eq!(e.path, "cluster.pools[0].engine.args.quantization");
}

#[test]
fn malformed_yaml_is_refused_without_a_panic() {
    for text in ["", "cluster: [", "\u{0}", "cluster:\n  pools: {a: 1}\n", "- 1\n- 2\n", "workload: 7"] {
        match run(text, RunOptions::default(), &mut |_| {}) {
            Err(RunError::Input(e)) => assert!(!e.cause.is_empty()),
            other => panic!("{text:?}: {:?}", other.map(|o| o.result.fates)),
        }
    }
}
