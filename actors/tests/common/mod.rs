//! Scenario text shared by the integration tests.

/// A scenario of one pool of `replicas` vLLM 0.15.1 instances serving Llama-3.1-8B on H100s, with
/// the engine arguments `args` (the inside of a YAML flow map), an optional seed and network
/// line, and then `workload` (the text after `workload:`).
pub fn one_pool(
    seed: Option<u64>,
    network: Option<&str>,
    replicas: u32,
    args: &str,
    workload: &str,
) -> String {
    let seed = seed.map_or_else(String::new, |s| format!("seed: {s}\n"));
    let network = network.map_or_else(String::new, |n| format!("  network: {{ {n} }}\n"));
    format!(
        "{seed}cluster:\n{network}  router: {{ policy: round-robin }}\n  pools:\n    - name: p\n      replicas: {replicas}\n      hardware: {{ chip: H100-SXM }}\n      model: Llama-3.1-8B\n      engine:\n        kind: vllm\n        version: \"0.15.1\"\n        args: {{ {args} }}\nworkload:{workload}"
    )
}
