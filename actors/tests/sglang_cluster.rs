//! SGLang pools in the cluster: a scenario naming `{kind: sglang, version: "0.5.23"}` runs end to
//! end, every call accounted for, byte-identically on every run; the Result names the release;
//! other releases and bad server arguments are refused by path; inert arguments change nothing;
//! the overlap loop hides the host time the normal loop pays; the llm-d router reads the pods by
//! SGLang's metric names.

mod common;

use blis_actors::{RunOptions, RunOutput, run};
use blis_engines::sglang::SGLANG_VERSION;
use blis_engines::sglang::fields::{ARGUMENTS, Treatment};

const WORKLOAD: &str = r#"
  clients:
    - name: a
      requests: 40
      arrival: { process: poisson, rate_per_s: 40 }
      shared_prefix: { groups: 2, tokens: 300 }
      input_tokens: { dist: uniform, min: 10, max: 600 }
      output_tokens: { dist: uniform, min: 1, max: 60 }
"#;

fn scenario(version: &str, args: &str, workload: &str) -> String {
    common::one_pool(Some(9), None, 2, args, workload)
        .replace("kind: vllm", "kind: sglang")
        .replace("version: \"0.15.1\"", &format!("version: \"{version}\""))
}

fn go(text: &str) -> RunOutput {
    run(text, RunOptions::default(), &mut |_| {}).unwrap_or_else(|e| panic!("{e}"))
}

/// The run's outputs as bytes, without the scenario text.
fn comparable(mut output: RunOutput) -> (String, String) {
    output.result.scenario.given.clear();
    let calls: Vec<String> = output.calls.iter().map(|c| serde_json::to_string(c).unwrap()).collect();
    (serde_json::to_string(&output.result).unwrap(), calls.join("\n"))
}

#[test]
fn an_sglang_pool_serves_every_call_and_names_its_release() {
    let output = go(&scenario(SGLANG_VERSION, "", WORKLOAD));
    let result = &output.result;
    let fates = &result.fates;
    assert_eq!((fates.completed, fates.dropped), (40, 0), "{fates:?}");
    assert!(
        result.engines.iter().any(|e| e.kind == "sglang" && e.version == SGLANG_VERSION),
        "{:?}",
        result.engines
    );
    assert_eq!(result.stack.get("sglang").map(String::as_str), Some(SGLANG_VERSION));
    let instance = &result.instances[0];
    let record = instance.sglang.as_ref().expect("an SGLang instance records its scheduler's counters");
    assert!(record.extend_batches > 0 && record.decode_batches > 0, "{record:?}");
    assert_eq!(instance.steps, record.extend_batches + record.decode_batches + record.mixed_batches);
    // The shared prefixes hit the radix cache.
    assert!(instance.prefix_cache_hits > 0 && instance.prefix_cache_hits < instance.prefix_cache_queries);
    let resolved = &result.scenario.resolved["pools"][0];
    assert_eq!(resolved["engine"]["kind"], "sglang");
    let config = &resolved["engine"]["config"];
    // H100-SXM, TP1: chunk 8192, decode graphs to 256, 58 prefill buckets. The catalog's
    // capacity is what torch reports (81090 MiB), not nvidia-smi's 81559 MiB that SGLang reads,
    // so the fraction is 0.829 where a real H100 gets 0.830.
    assert_eq!(config["chunked_prefill_size"], 8192);
    assert_eq!(config["mem_fraction_static"], 0.829);
    assert_eq!(config["overlap_schedule"], true);
    assert_eq!(config["decode_graph_batch_sizes"].as_array().unwrap().last().unwrap(), 256);
    assert_eq!(config["prefill_graph_token_buckets"].as_array().unwrap().len(), 58);
    assert_eq!(resolved["labels"]["llm-d.ai/engine-type"], "sglang");
    for call in &output.calls {
        assert!(call.instance.starts_with("engine/p-"), "{call:?}");
    }
}

#[test]
fn the_same_scenario_gives_the_same_bytes() {
    let text = scenario(SGLANG_VERSION, "schedule_policy: random", WORKLOAD);
    assert!(comparable(go(&text)) == comparable(go(&text)));
}

#[test]
fn another_release_or_a_bad_argument_is_refused_by_path() {
    let refused =
        |text: &str| run(text, RunOptions::default(), &mut |_| {}).expect_err("refused").to_string();
    let e = refused(&scenario("0.5.22", "", WORKLOAD));
    assert!(e.contains("cluster.pools[0].engine.version") && e.contains("SGLang 0.5.23 only"), "{e}");
    let e = refused(&scenario(SGLANG_VERSION, "max_num_seqs: 4", WORKLOAD));
    assert!(e.contains("cluster.pools[0].engine.args.max_num_seqs") && e.contains("unknown field"), "{e}");
    let e = refused(&scenario(SGLANG_VERSION, "speculative_algorithm: EAGLE", WORKLOAD));
    assert!(e.contains("engine.args.speculative_algorithm") && e.contains("speculative decoding"), "{e}");
    let e = refused(&scenario(SGLANG_VERSION, "mem_fraction_static: 0.1", WORKLOAD));
    assert!(e.contains("engine.args.mem_fraction_static") && e.contains("Not enough memory"), "{e}");
    let e = refused(&scenario(SGLANG_VERSION, "tp_size: 3", WORKLOAD));
    assert!(e.contains("engine.args.tp_size") && e.contains("attention heads"), "{e}");
    let e = refused(&scenario(SGLANG_VERSION, "context_length: 200000", WORKLOAD));
    assert!(e.contains("engine.args.context_length"), "{e}");
    let e = refused(&scenario(SGLANG_VERSION, "page_size: 0", WORKLOAD));
    assert!(e.contains("engine.args.page_size"), "{e}");
    let e = refused(&scenario(SGLANG_VERSION, "radix_eviction_policy: tlru", WORKLOAD));
    assert!(e.contains("engine.args.radix_eviction_policy"), "{e}");
    let e = refused(&scenario(SGLANG_VERSION, "schedule_policy: priority", WORKLOAD));
    assert!(e.contains("engine.args.schedule_policy") && e.contains("does not port yet"), "{e}");
    let e = refused(&scenario(SGLANG_VERSION, "max_total_tokens: 8", WORKLOAD));
    assert!(e.contains("engine.args.max_total_tokens") && e.contains("cannot serve a request"), "{e}");
}

#[test]
fn a_kv_pool_cap_forces_retraction_and_every_call_still_ends() {
    let long_outputs = r#"
  clients:
    - name: a
      requests: 40
      arrival: { process: poisson, rate_per_s: 200 }
      input_tokens: { dist: uniform, min: 100, max: 300 }
      output_tokens: { dist: uniform, min: 300, max: 600 }
"#;
    let output = go(&scenario(SGLANG_VERSION, "max_total_tokens: 2000", long_outputs));
    let fates = &output.result.fates;
    assert!(fates.conserved() && fates.completed > 0, "{fates:?}");
    assert!(output.result.instances.iter().any(|i| i.preemptions > 0), "a 2000-token pool retracts");
    // A retracted request gets one token time per token it produced, no more (under the overlap
    // loop the batch in flight when it was retracted gives it none).
    for call in output.calls.iter().filter(|c| !c.token_latency_us.is_empty()) {
        assert_eq!(call.token_latency_us.len() as u32, call.output_tokens, "{call:?}");
    }
    let pools = &output.result.scenario.resolved["pools"][0]["engine"];
    assert_eq!(pools["kv_pool"]["max_total_num_tokens"], 2000);
}

#[test]
fn inert_arguments_change_nothing() {
    let baseline = comparable(go(&scenario(SGLANG_VERSION, "", WORKLOAD)));
    let mut proven = 0;
    for &(name, treatment) in ARGUMENTS {
        let Treatment::Inert { sample, .. } = treatment else { continue };
        let output = go(&scenario(SGLANG_VERSION, &format!("{name}: {sample}"), WORKLOAD));
        assert!(comparable(output) == baseline, "{name}: {sample} changed the run");
        proven += 1;
    }
    assert!(proven >= 25, "{proven} inert arguments");
}

#[test]
fn the_overlap_loop_hides_host_time_the_normal_loop_pays() {
    let decode_heavy = r#"
  clients:
    - name: a
      requests: 16
      arrival: { process: poisson, rate_per_s: 1000 }
      input_tokens: { dist: uniform, min: 50, max: 60 }
      output_tokens: { dist: uniform, min: 200, max: 200 }
"#;
    let tpot = |args: &str| {
        let output = go(&scenario(SGLANG_VERSION, args, decode_heavy));
        let calls = &output.calls;
        let gaps: Vec<f64> = calls
            .iter()
            .map(|c| {
                c.token_latency_us[1..].iter().sum::<u64>() as f64 / (c.token_latency_us.len() - 1) as f64
            })
            .collect();
        gaps.iter().sum::<f64>() / gaps.len() as f64
    };
    let overlap = tpot("");
    let normal = tpot("disable_overlap_schedule: true");
    assert!(normal > overlap * 1.02, "normal {normal} µs per token, overlap {overlap}");
}

#[test]
fn an_llm_d_router_serves_sglang_pods_and_refuses_a_label_naming_another_engine() {
    let text = scenario(SGLANG_VERSION, "", WORKLOAD)
        .replace("router: { policy: round-robin }", "router: { config: {} }");
    let output = go(&text);
    assert_eq!(output.result.fates.completed, 40, "{:?}", output.result.fates);
    let labelled = scenario(SGLANG_VERSION, "", WORKLOAD)
        .replace("      hardware:", "      labels: { llm-d.ai/engine-type: vllm }\n      hardware:");
    let e = run(&labelled, RunOptions::default(), &mut |_| {}).expect_err("refused").to_string();
    assert!(e.contains("cluster.pools[0].labels.llm-d.ai/engine-type") && e.contains("sglang"), "{e}");
}
