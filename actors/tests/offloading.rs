//! KV offloading end to end: vLLM's OffloadingConnector in the engine host, its copies priced by
//! the cost model and carried by the fabric, and the refusals of misconfigured connectors.

use blis_actors::{RunError, RunOptions, run};

mod common;

/// Sessions whose history outgrows a GPU cache of 300 blocks, with `args` added.
fn sessions(args: &str) -> String {
    common::one_pool(
        Some(5),
        Some("client_router_us: 100, router_engine_us: 20"),
        1,
        &format!(
            "max_model_len: 4096, num_gpu_blocks_override: 300, max_num_batched_tokens: 2048, max_num_seqs: 16{args}"
        ),
        "\n  clients:\n    - name: s\n      requests: 12\n      arrival: { process: poisson, rate_per_s: 2 }\n      \
         input_tokens: { dist: uniform, min: 400, max: 900 }\n      output_tokens: { dist: uniform, min: 20, max: 60 }\n      \
         session: { turns: { dist: constant, value: 3 }, think_time_s: { dist: exponential, mean: 4 } }\n",
    )
}

const ON: &str = ", kv_offloading_size: 8, disable_hybrid_kv_cache_manager: true";

fn refusal(text: &str) -> blis_contracts::FieldError {
    match run(text, RunOptions::default(), &mut |_| {}) {
        Err(RunError::Input(error)) => error,
        other => panic!("expected a refusal, got {:?}", other.map(|o| o.result.fates)),
    }
}

#[test]
fn a_cpu_tier_turns_evicted_history_into_cpu_hits_and_every_call_completes() {
    let off = run(&sessions(""), RunOptions::default(), &mut |_| {}).unwrap();
    let on = run(&sessions(ON), RunOptions::default(), &mut |_| {}).unwrap();
    assert_eq!(off.result.fates.completed, 36);
    assert_eq!(on.result.fates.completed, 36);
    let instance = &on.result.instances[0];
    let tier = instance.offload.as_ref().expect("the instance offloads");
    // 8 GiB over 2 MiB blocks (Llama-3.1-8B: 32 layers x K,V x 8 heads x 128 x 2 B x 16 tokens).
    assert_eq!(tier.cpu_blocks, 4096);
    assert!(tier.cpu_blocks_stored > 0 && tier.store_jobs > 0, "{tier:?}");
    assert!(tier.external_prefix_cache_hits > 0 && tier.load_jobs > 0, "{tier:?}");
    assert_eq!(tier.store_bytes % (2 << 20), 0, "whole blocks of 2 MiB");
    assert!(off.result.instances[0].offload.is_none());
    // Loading history beats recomputing it: fewer prefill tokens, so a faster run.
    let ttft = |o: &blis_actors::RunOutput| o.result.metrics.as_ref().unwrap().ttft_ms.as_ref().unwrap().mean;
    assert!(ttft(&on) < ttft(&off), "TTFT on {} vs off {}", ttft(&on), ttft(&off));
    // And the same seed gives the same bytes.
    let again = run(&sessions(ON), RunOptions::default(), &mut |_| {}).unwrap();
    assert_eq!(serde_json::to_string(&on.result).unwrap(), serde_json::to_string(&again.result).unwrap());
}

#[test]
fn misconfigured_connectors_are_refused_with_path_value_and_cause() {
    let at = "cluster.pools[0].engine.args";
    // An unknown connector and a registered one that is not modelled.
    let e = refusal(&sessions(", kv_transfer_config: { kv_connector: MyConnector, kv_role: kv_both }"));
    assert_eq!(
        (e.path.as_str(), e.value.as_deref()),
        (format!("{at}.kv_transfer_config.kv_connector").as_str(), Some("MyConnector"))
    );
    assert!(e.cause.contains("Unsupported connector type: MyConnector"), "{e}");
    let e = refusal(&sessions(", kv_transfer_config: { kv_connector: P2pNcclConnector, kv_role: kv_both }"));
    assert_eq!(e.value.as_deref(), Some("P2pNcclConnector"));
    assert!(e.cause.contains("does not model"), "{e}");
    // vLLM's own conditions.
    let e = refusal(&sessions(", kv_transfer_config: { kv_connector: OffloadingConnector }"));
    assert_eq!(e.path, format!("{at}.kv_transfer_config.kv_role"));
    assert!(e.cause.contains("Please specify kv_role"), "{e}");
    let e =
        refusal(&sessions(", kv_transfer_config: { kv_connector: OffloadingConnector, kv_role: kv_both }"));
    assert_eq!(e.path, format!("{at}.kv_transfer_config.kv_connector_extra_config.cpu_bytes_to_use"));
    assert!(e.cause.contains("cpu_bytes_to_use must be specified"), "{e}");
    let e = refusal(&sessions(
        ", kv_transfer_config: { kv_connector: OffloadingConnector, kv_role: kv_both, kv_connector_extra_config: { cpu_bytes_to_use: 1e9, eviction_policy: arc } }",
    ));
    assert_eq!(e.value.as_deref(), Some("arc"));
    assert!(e.cause.contains("KeyError"), "{e}");
    let e = refusal(&sessions(", kv_offloading_size: 8"));
    assert_eq!(e.path, format!("{at}.kv_offloading_size"));
    assert!(e.cause.contains("does not support HMA"), "{e}");
    let e = refusal(&sessions(
        ", kv_offloading_size: 8, kv_offloading_backend: lmcache, disable_hybrid_kv_cache_manager: true",
    ));
    assert_eq!(e.path, format!("{at}.kv_offloading_backend"));
    // More CPU tier than the node's host memory in the catalog (DGX H100: 2 TB).
    let e = refusal(&sessions(", kv_offloading_size: 2000, disable_hybrid_kv_cache_manager: true"));
    assert_eq!(e.path, at);
    assert!(e.cause.contains("host memory") && e.cause.contains("dgx-h100-ddr5"), "{e}");
    // A fabric link kind the catalog lacks.
    let text = sessions(ON).replace("  router:", "  fabric: { gpu_host: pcie-gen7 }\n  router:");
    let e = refusal(&text);
    assert_eq!((e.path.as_str(), e.value.as_deref()), ("cluster.fabric.gpu_host", Some("pcie-gen7")));
}
