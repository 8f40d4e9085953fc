//! llm-d's router end to end: the built-in default and the same config written out route
//! byte-identically, requests reach only endpoints serving their model, labels reach the role
//! filters, the scrape interval changes decisions, and every bad router setting is refused by
//! path.

mod byte_identity;

use std::path::PathBuf;

use blis_actors::{RunError, RunOptions, run};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Eight instances behind `router` (the YAML after `router:`), one client of `requests` calls.
fn eight(router: &str, requests: u32, replicas: u32) -> String {
    format!(
        "seed: 3\nframe: {{ replications: 1 }}\ncluster:\n  network: {{ client_router_us: 500, router_engine_us: 100 }}\n  router: {router}\n  pools:\n    - name: h100\n      replicas: {replicas}\n      hardware: {{ chip: H100-SXM }}\n      model: Llama-3.1-8B\n      engine: {{ kind: vllm, version: \"0.15.1\", args: {{}} }}\nworkload:\n  clients:\n    - name: chat\n      requests: {requests}\n      arrival: {{ process: poisson, rate_per_s: 40 }}\n      shared_prefix: {{ groups: 8, tokens: 512 }}\n      input_tokens: {{ dist: uniform, min: 50, max: 400 }}\n      output_tokens: {{ dist: uniform, min: 10, max: 60 }}\n"
    )
}

fn options(base: Option<PathBuf>) -> RunOptions {
    RunOptions { base_dir: base, threads: Some(1), ..RunOptions::default() }
}

fn refusal(text: &str) -> blis_contracts::FieldError {
    match run(text, options(Some(root())), &mut |_| {}) {
        Err(RunError::Input(e)) => e,
        Err(other) => panic!("expected a refusal, got {other}"),
        Ok(_) => panic!("expected a refusal, the run succeeded"),
    }
}

#[test]
fn the_built_in_default_and_the_same_config_written_out_route_byte_identically() {
    let dir = tempfile::Builder::new().prefix("blis-routing-default-").tempdir().unwrap();
    std::fs::write(dir.path().join("default.yaml"), blis_router::config::DEFAULT_CONFIG_YAML).unwrap();
    let built_in = run(&eight("{ config: {} }", 10_000, 8), options(None), &mut |_| {}).unwrap();
    let written = run(
        &eight("{ config_file: default.yaml }", 10_000, 8),
        options(Some(dir.path().to_path_buf())),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(built_in.result.fates.completed, 10_000);
    // The call records (the calls.jsonl header differs: its workload hash covers the scenario text).
    assert!(built_in.calls == written.calls, "the two configs routed differently");
    // And it is not round-robin in disguise.
    let round_robin = run(&eight("{ policy: round-robin }", 10_000, 8), options(None), &mut |_| {}).unwrap();
    assert!(built_in.calls_jsonl() != round_robin.calls_jsonl());
}

#[test]
fn prefix_aware_routing_finds_more_cached_prompt_than_round_robin() {
    let hits = |router: &str| {
        let sessions = eight(router, 150, 4)
            + "      session: { turns: { dist: uniform, min: 3, max: 6 }, think_time_s: { dist: exponential, mean: 1 } }\n";
        let out = run(&sessions, options(Some(root())), &mut |_| {}).unwrap();
        let (cached, prompt): (u64, u64) = out
            .calls
            .iter()
            .map(|c| (u64::from(c.cached_tokens), u64::from(c.input_tokens)))
            .fold((0, 0), |(a, b), (c, d)| (a + c, b + d));
        cached as f64 / prompt as f64
    };
    let round_robin = hits("{ policy: round-robin }");
    let prefix_aware = hits("{ config_file: fixtures/router-configs/epp-config.yaml }");
    assert!(
        prefix_aware > round_robin + 0.05,
        "prefix-aware {prefix_aware:.3} vs round-robin {round_robin:.3}"
    );
}

#[test]
fn the_scrape_interval_changes_the_decisions() {
    let fast =
        run(&eight("{ config: {}, refresh_metrics_interval_s: 0.05 }", 600, 4), options(None), &mut |_| {})
            .unwrap();
    let slow =
        run(&eight("{ config: {}, refresh_metrics_interval_s: 1.0 }", 600, 4), options(None), &mut |_| {})
            .unwrap();
    let instances =
        |o: &blis_actors::RunOutput| o.calls.iter().map(|c| c.instance.clone()).collect::<Vec<_>>();
    assert_ne!(instances(&fast), instances(&slow), "figures a second old should change some picks");
}

#[test]
fn requests_reach_only_endpoints_serving_their_model_and_labels_reach_the_filters() {
    let text = "seed: 2\nframe: { replications: 1 }\ncluster:\n  router: { config_file: fixtures/router-configs/epp-config.yaml }\n  pools:\n    - name: small\n      replicas: 2\n      hardware: { chip: H100-SXM }\n      model: Llama-3.1-8B\n      engine: { kind: vllm, version: \"0.15.1\", args: {} }\n    - name: prefill-only\n      replicas: 2\n      labels: { llm-d.ai/role: prefill }\n      hardware: { chip: H100-SXM }\n      model: Llama-3.1-8B\n      engine: { kind: vllm, version: \"0.15.1\", args: {} }\n    - name: qwen\n      replicas: 2\n      hardware: { chip: H100-SXM }\n      model: Qwen2.5-7B\n      engine: { kind: vllm, version: \"0.15.1\", args: {} }\nworkload:\n  clients:\n    - name: llama\n      model: Llama-3.1-8B\n      requests: 200\n      arrival: { process: poisson, rate_per_s: 20 }\n      input_tokens: { dist: uniform, min: 20, max: 200 }\n      output_tokens: { dist: constant, value: 8 }\n    - name: qwen\n      model: Qwen2.5-7B\n      requests: 100\n      arrival: { process: poisson, rate_per_s: 10 }\n      input_tokens: { dist: uniform, min: 20, max: 200 }\n      output_tokens: { dist: constant, value: 8 }\n";
    let out = run(text, options(Some(root())), &mut |_| {}).unwrap();
    assert_eq!(out.result.fates.completed, 300);
    for call in &out.calls {
        match call.client.as_str() {
            // decode-filter keeps unlabelled pods and drops those labelled prefill.
            "llama" => assert!(
                call.instance.starts_with("engine/small-"),
                "{} went to {}",
                call.request_id,
                call.instance
            ),
            _ => assert!(
                call.instance.starts_with("engine/qwen-"),
                "{} went to {}",
                call.request_id,
                call.instance
            ),
        }
    }
    let without_model = text.replace("      model: Qwen2.5-7B\n      requests: 100", "      requests: 100");
    let e = refusal(&without_model);
    assert_eq!(e.path, "workload.clients[1].model");
    assert!(e.cause.contains("several models"), "{e}");
    let unserved = text.replace(
        "      model: Qwen2.5-7B\n      requests: 100",
        "      model: Llama-3.1-70B\n      requests: 100",
    );
    let e = refusal(&unserved);
    assert_eq!(e.path, "workload.clients[1].model");
    assert!(e.to_string().contains("\"Llama-3.1-70B\"") && e.cause.contains("no pool serves"), "{e}");
}

#[test]
fn bad_router_settings_are_refused_by_path_value_and_cause() {
    let cases: &[(&str, &str, &str)] = &[
        ("{ policy: round-robin, config: {} }", "cluster.router.policy", "not both"),
        ("{ config: {}, version: \"0.9.0\" }", "cluster.router.version", "llm-d-router 0.10.0"),
        ("{}", "cluster.router", "choose a router"),
        (
            "{ config: {}, refresh_metrics_interval_s: 0 }",
            "cluster.router.refresh_metrics_interval_s",
            "between",
        ),
        (
            "{ config: { apiVersion: llm-d.ai/v1alpha1, kind: EndpointPickerConfig, plugins: [ { type: lora-affinity-scorer } ] } }",
            "cluster.router.config.plugins[0].type",
            "plugin type `lora-affinity-scorer` is not modelled yet",
        ),
        (
            "{ config: { apiVersion: llm-d.ai/v1alpha1, kind: EndpointPickerConfig, plugins: [ { type: max-score-picker }, { type: approx-prefix-cache-producer, parameters: { blockSizeTokens: x } } ] } }",
            "cluster.router.config.plugins[1].parameters.blockSizeTokens",
            "failed to create plugin 'approx-prefix-cache-producer'",
        ),
        (
            "{ config: { apiVersion: llm-d.ai/v1, kind: EndpointPickerConfig } }",
            "cluster.router.config.apiVersion",
            "no kind \"EndpointPickerConfig\" is registered for version \"llm-d.ai/v1\"",
        ),
        (
            "{ config: { apiVersion: llm-d.ai/v1alpha1, kind: EndpointPickerConfig, plugins: [ { type: utilization-filter, parameters: { conditions: [ { metric: waiting-queue, maxValue: 4 } ] } } ] } }",
            "cluster.router.config.plugins[0].type",
            "--allow-experimental-plugins",
        ),
        ("{ config_file: no-such-file.yaml }", "cluster.router.config_file", "cannot read"),
        (
            "{ config: { apiVersion: llm-d.ai/v1alpha1, kind: EndpointPickerConfig, plugins: [ { type: queue-scorer } ], schedulingProfiles: [ { name: default, plugins: [ { pluginRef: queue-scorer, weight: .nan } ] } ] } }",
            "cluster.router.config.schedulingProfiles[0].plugins[0].weight",
            "non-finite",
        ),
    ];
    for (router, path, cause) in cases {
        let e = refusal(&eight(router, 10, 2));
        assert_eq!(e.path, *path, "{router}: {e}");
        assert!(e.to_string().contains(cause), "{router}: {e}");
    }
    // The Alpha plugin loads with the flag.
    let alpha = "{ config: { apiVersion: llm-d.ai/v1alpha1, kind: EndpointPickerConfig, plugins: [ { type: utilization-filter, parameters: { conditions: [ { metric: waiting-queue, maxValue: 4 } ] } } ] }, allow_experimental_plugins: true }";
    assert!(run(&eight(alpha, 10, 2), options(None), &mut |_| {}).is_ok());
}

#[test]
fn every_shipped_sample_config_loads_and_routes() {
    for name in ["epp-config", "epp-estimate-prefix-cache-config", "sim-epp-config", "optimized-baseline"] {
        let router = format!("{{ config_file: fixtures/router-configs/{name}.yaml }}");
        let out = run(&eight(&router, 100, 2), options(Some(root())), &mut |_| {}).unwrap();
        assert_eq!(out.result.fates.completed, 100, "{name}");
        assert_eq!(out.result.stack.get("llm-d-router").map(String::as_str), Some("0.10.0"));
    }
}

#[test]
fn the_stack_names_the_releases_this_build_models() {
    let stack = blis_contracts::stack();
    assert_eq!(stack["vllm"], blis_engines::vllm::VLLM_VERSION);
    assert_eq!(stack["llm-d-router"], blis_contracts::LLMD_ROUTER_VERSION);
}

#[test]
fn llm_d_routing_is_byte_identical_across_hosts_and_thread_counts() {
    let text = std::fs::read_to_string(root().join("fixtures/gate/llmd-chat.yaml")).unwrap();
    byte_identity::identical_across_hosts_and_threads(&text, None);
}

/// With a core to spare, the client draws ahead and makes each prompt's block digests for the
/// router's approximate prefix producer, which chains them instead of hashing the ids: the
/// outputs are those of one thread, where the router hashes every prompt itself (prompts share
/// 512-token prefixes here, so the prefix scorer steers the picks).
#[test]
fn prompt_digests_made_ahead_route_as_the_router_hashing_the_ids() {
    let text = eight("{ config: {} }", 400, 8);
    let with = |threads: usize| {
        let out = run(&text, RunOptions { threads: Some(threads), ..options(None) }, &mut |_| {}).unwrap();
        (out.result_json(), out.calls_jsonl())
    };
    assert!(with(2) == with(1), "drawn ahead on a spare core vs drawn as sent");
}
