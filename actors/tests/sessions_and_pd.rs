//! Session affinity and P/D selection end to end: a conversation's turns carry its session (the
//! workload request) and the tokens the router wrote on the previous answer, so session affinity
//! keeps every turn on one instance; a scenario whose router would send whole requests to a
//! prefill pool, or pair pools that cannot move the KV cache, is refused by name (P/D execution
//! itself: `disaggregation.rs`).

use std::collections::BTreeMap;

use blis_actors::{RunError, RunOptions, run};

/// Four instances behind `router`, 120 chat sessions of 3–6 turns.
fn chat(router: &str, pools: &str) -> String {
    format!(
        "seed: 5\nframe: {{ replications: 1 }}\ncluster:\n  network: {{ client_router_us: 500, router_engine_us: 100 }}\n  \
         router: {router}\n  pools:\n    - name: h100\n      replicas: 4\n      hardware: {{ chip: H100-SXM }}\n      \
         model: Llama-3.1-8B\n      engine: {{ kind: vllm, version: \"0.15.1\", args: {{}} }}\n{pools}workload:\n  \
         clients:\n    - name: chat\n      requests: 120\n      arrival: {{ process: poisson, rate_per_s: 6 }}\n      \
         shared_prefix: {{ groups: 2, tokens: 512 }}\n      input_tokens: {{ dist: uniform, min: 50, max: 300 }}\n      \
         output_tokens: {{ dist: uniform, min: 20, max: 80 }}\n      session: {{ turns: {{ dist: uniform, min: 3, max: 6 }}, \
         think_time_s: {{ dist: exponential, mean: 1 }} }}\n"
    )
}

fn options() -> RunOptions {
    RunOptions { threads: Some(1), ..RunOptions::default() }
}

/// Per workload request (conversation), the instances its turns went to, in order.
fn instances_per_session(text: &str) -> BTreeMap<String, Vec<String>> {
    let out = run(text, options(), &mut |_| {}).unwrap();
    let mut sessions: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for call in &out.calls {
        sessions.entry(call.request.clone()).or_default().push(call.instance.clone());
    }
    sessions
}

fn sessions_that_moved(sessions: &BTreeMap<String, Vec<String>>) -> usize {
    sessions.values().filter(|turns| turns.windows(2).any(|w| w[0] != w[1])).count()
}

fn affinity_router(params: &str) -> String {
    format!(
        "{{ allow_experimental_plugins: true, config: {{ apiVersion: llm-d.ai/v1alpha1, kind: EndpointPickerConfig, \
         plugins: [{{type: session-affinity-filter, parameters: {params}}}, {{type: queue-scorer}}], \
         schedulingProfiles: [{{name: default, plugins: [{{pluginRef: session-affinity-filter}}, {{pluginRef: queue-scorer}}]}}] }} }}"
    )
}

#[test]
fn every_turn_of_a_conversation_stays_on_one_instance_under_session_affinity() {
    let baseline = instances_per_session(&chat(
        "{ config: { apiVersion: llm-d.ai/v1alpha1, kind: EndpointPickerConfig, plugins: [{type: queue-scorer}] } }",
        "",
    ));
    assert!(sessions_that_moved(&baseline) > 10, "queue-only routing moves sessions, so the test can fail");
    for params in ["{}", "{strategy: session_id}"] {
        let sessions = instances_per_session(&chat(&affinity_router(params), ""));
        assert_eq!(sessions.len(), 120);
        assert!(sessions.values().all(|turns| turns.len() >= 3));
        assert_eq!(sessions_that_moved(&sessions), 0, "{params}: {sessions:?}");
        let used: std::collections::BTreeSet<&String> = sessions.values().map(|t| &t[0]).collect();
        assert_eq!(used.len(), 4, "sessions still spread over the instances");
    }
}

fn refusal(text: &str) -> blis_contracts::FieldError {
    match run(text, options(), &mut |_| {}) {
        Err(RunError::Input(e)) => e,
        Err(other) => panic!("expected a refusal, got {other}"),
        Ok(_) => panic!("expected a refusal, the run succeeded"),
    }
}

const PREFILL_POOL: &str = "    - name: prefill\n      replicas: 2\n      labels: { llm-d.ai/role: prefill }\n      \
                            hardware: { chip: H100-SXM }\n      model: Llama-3.1-8B\n      \
                            engine: { kind: vllm, version: \"0.15.1\", args: {} }\n";

fn pd_router(handler: &str, decider: &str) -> String {
    format!(
        "{{ config: {{ apiVersion: llm-d.ai/v1alpha1, kind: EndpointPickerConfig, plugins: [\
         {{type: prefix-based-pd-decider, parameters: {decider}}}, {{type: decode-filter}}, {{type: prefill-filter}}, \
         {{type: queue-scorer}}, {{type: disagg-profile-handler, parameters: {handler}}}], schedulingProfiles: [\
         {{name: decode, plugins: [{{pluginRef: decode-filter}}, {{pluginRef: queue-scorer}}]}}, \
         {{name: prefill, plugins: [{{pluginRef: prefill-filter}}, {{pluginRef: queue-scorer}}]}}] }} }}"
    )
}

#[test]
fn a_router_that_would_route_whole_requests_to_a_prefill_pool_or_pair_pools_without_nixl_is_refused() {
    // A prefill pool no filter of the default profile excludes.
    let e = refusal(&chat("{ config: {} }", PREFILL_POOL));
    assert_eq!(
        (e.path.as_str(), e.value.as_deref()),
        ("cluster.pools[1].labels.llm-d.ai/role", Some("prefill"))
    );
    assert!(
        e.cause.starts_with("a prefill pool the router's profile 'default' (the one every request runs) can route whole requests to"),
        "{e}"
    );
    // A disagg handler whose decider can say yes, over pools without NixlConnector: the KV
    // cache could not move (the unlabelled pool is a decode target, the prefill pool a prefill
    // one; the first without the connector is named).
    let enabled = pd_router("{deciders: {prefill: prefix-based-pd-decider}}", "{nonCachedTokens: 256}");
    let e = refusal(&chat(&enabled, PREFILL_POOL));
    assert_eq!(
        (e.path.as_str(), e.value.as_deref()),
        ("cluster.pools[0].engine.args.kv_transfer_config", Some("absent (no NixlConnector)"))
    );
    assert!(e.cause.contains("decode profile 'decode' can pick this pool"), "{e}");
    // So does the prefill-first order, which runs the prefill profile for every request.
    let e = refusal(&chat(&pd_router("{stageOrder: prefill-first}", "{}"), PREFILL_POOL));
    assert_eq!(e.path, "cluster.pools[0].engine.args.kv_transfer_config");
    // A disabled decider (nonCachedTokens 0) never disaggregates: the run goes ahead, decode only,
    // and the prefill pool (dropped by decode-filter) serves nothing.
    let disabled = pd_router("{deciders: {prefill: prefix-based-pd-decider}}", "{nonCachedTokens: 0}");
    let out = run(&chat(&disabled, PREFILL_POOL), options(), &mut |_| {}).unwrap();
    assert!(out.calls.iter().all(|c| c.instance.starts_with("engine/h100-")));
    assert!(out.result.fates.completed > 400);
}
