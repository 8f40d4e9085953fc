//! The scenario generator: a random valid scenario from a swarm seed, every draw from a named
//! substream of that seed, so `blis-actor swarm --seed S --count 1` rebuilds the same one.
//!
//! Scenarios are small (at most a few hundred calls) so that thousands run in minutes, and
//! reach the corners: one to three pools of one to three instances on several chips and
//! models, vLLM and SGLang pools with their arguments across their ranges, KV caches from one
//! request's worth of blocks to the whole GPU, every scheduling policy, open and closed clients with sessions,
//! shared prefixes, timeouts (hence aborts), prompts too long for the engine, horizons, and
//! every router: round-robin, llm-d's built-in default, the sample EndpointPickerConfigs,
//! precise prefix scoring from KV events, flow control and session affinity.

use blis_kernel::{Streams, Substream};

/// The llm-d configs the generator routes with, besides round-robin and `config: {}`: the
/// release's samples, precise prefix scoring from KV events, flow control on (a short TTL, a
/// capped sheddable band and in-flight eviction, so requests are queued, shed, expired and
/// evicted), and session affinity (an Alpha plugin, so with the flag).
const ROUTER_CONFIGS: [(&str, bool); 7] = [
    (include_str!("../../../fixtures/router-configs/epp-config.yaml"), false),
    (include_str!("../../../fixtures/router-configs/epp-estimate-prefix-cache-config.yaml"), false),
    (include_str!("../../../fixtures/router-configs/optimized-baseline.yaml"), false),
    (include_str!("../../../fixtures/router-configs/sim-epp-config.yaml"), false),
    (include_str!("../../../fixtures/router-configs/precise-default.yaml"), false),
    (FLOW_CONTROL, false),
    (SESSION_AFFINITY, true),
];

const FLOW_CONTROL: &str = "apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
featureGates: [flowControl]
flowControl:
  defaultRequestTTL: 2s
  defaultNegativePriorityBand: { maxRequests: 4 }
  enableEviction: true
plugins:
- type: queue-scorer
- type: prefix-cache-scorer
schedulingProfiles:
- name: default
  plugins:
  - { pluginRef: queue-scorer, weight: 2 }
  - { pluginRef: prefix-cache-scorer, weight: 3 }
";

const SESSION_AFFINITY: &str = "apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: session-affinity-scorer
schedulingProfiles:
- name: default
  plugins:
  - { pluginRef: queue-scorer, weight: 1 }
  - { pluginRef: session-affinity-scorer, weight: 3 }
";

/// Chips with models that fit them on one GPU.
const CHIPS: [&str; 6] = ["H100-SXM", "H200", "A100-80GB-SXM", "B200", "L40S", "MI300X"];
const MODELS: [&str; 3] = ["Llama-3.1-8B", "Qwen2.5-7B", "Mistral-7B-v0.1"];

/// Draws of one generated scenario.
struct Draws {
    streams: Streams,
}

impl Draws {
    fn stream(&self, purpose: &str, entity: &str) -> Substream {
        self.streams.stream("swarm", purpose, entity)
    }
}

/// A value of `options`, drawn from `stream`.
fn pick<'a, T>(stream: &mut Substream, options: &'a [T]) -> &'a T {
    &options[stream.below(options.len() as u64) as usize]
}

/// An integer in `[low, high]`.
fn between(stream: &mut Substream, low: u64, high: u64) -> u64 {
    low + stream.below(high - low + 1)
}

/// Whether an event of probability `p` happens.
fn chance(stream: &mut Substream, p: f64) -> bool {
    stream.unit() < p
}

/// The scenario of swarm seed `seed`, as YAML text.
pub fn scenario(seed: u64) -> String {
    let draws = Draws { streams: Streams::new(seed) };
    let mut top = draws.stream("top", "");
    let mut out = format!("# blis-actor swarm scenario of seed {seed}\nseed: {}\n", top.below(1 << 32));
    if chance(&mut top, 0.3) {
        out.push_str(&format!("horizon_s: {}\n", between(&mut top, 1, 60)));
    }
    out.push_str("frame: { replications: 1 }\ncluster:\n");
    if chance(&mut top, 0.5) {
        out.push_str(&format!(
            "  network: {{ client_router_us: {}, router_engine_us: {} }}\n",
            between(&mut top, 0, 2000),
            between(&mut top, 0, 500)
        ));
    }
    router(&mut draws.stream("router", ""), &mut out);
    let pools = between(&mut top, 1, 3) as usize;
    let two_models = pools > 1 && chance(&mut top, 0.3);
    let mut models = Vec::new();
    let mut shortest = u64::MAX;
    out.push_str("  pools:\n");
    for p in 0..pools {
        let mut s = draws.stream("pool", &p.to_string());
        let model = if two_models { MODELS[p % 2] } else { MODELS[0] };
        if !models.contains(&model) {
            models.push(model);
        }
        let max_model_len = *pick(&mut s, &[256u64, 512, 1024, 2048, 4096, 8192]);
        shortest = shortest.min(max_model_len);
        out.push_str(&format!(
            "    - name: p{p}\n      replicas: {}\n      hardware: {{ chip: {} }}\n      model: {model}\n",
            between(&mut s, 1, 3),
            pick(&mut s, &CHIPS)
        ));
        if chance(&mut s, 0.3) {
            out.push_str("      labels: { llm-d.ai/role: decode }\n");
        }
        if chance(&mut s, 0.3) {
            out.push_str("      engine:\n        kind: sglang\n        version: \"0.5.23\"\n        args:\n");
            sglang_args(&mut s, max_model_len, &mut out);
        } else {
            out.push_str("      engine:\n        kind: vllm\n        version: \"0.15.1\"\n        args:\n");
            engine_args(&mut s, max_model_len, &mut out);
        }
    }
    out.push_str("workload:\n  clients:\n");
    let clients = between(&mut top, 1, 3) as usize;
    for c in 0..clients {
        let model = two_models.then(|| models[c % models.len()]);
        client(&mut draws.stream("client", &c.to_string()), c, shortest, model, &mut out);
    }
    out
}

/// The router: round-robin, llm-d's default, or a sample config; a scrape interval.
fn router(s: &mut Substream, out: &mut String) {
    match s.below(2 + ROUTER_CONFIGS.len() as u64) {
        0 => out.push_str("  router: { policy: round-robin }\n"),
        1 => out.push_str("  router:\n    config: {}\n"),
        k => {
            let (config, experimental) = ROUTER_CONFIGS[(k - 2) as usize];
            out.push_str("  router:\n");
            if experimental {
                out.push_str("    allow_experimental_plugins: true\n");
            }
            out.push_str("    config:\n");
            for line in config.lines() {
                if !line.trim_start().starts_with('#') && !line.trim().is_empty() {
                    out.push_str(&format!("      {line}\n"));
                }
            }
        }
    }
    if !out.ends_with("round-robin }\n") && chance(s, 0.5) {
        let interval = *pick(s, &["0.05", "0.2", "1"]);
        out.push_str(&format!("    refresh_metrics_interval_s: {interval}\n"));
    }
}

/// vLLM arguments across their ranges, with a KV cache from one request's worth of blocks to
/// the whole GPU.
fn engine_args(s: &mut Substream, max_model_len: u64, out: &mut String) {
    let block_size = *pick(s, &[8u64, 16, 32]);
    let chunked = chance(s, 0.7);
    let max_num_seqs = *pick(s, &[1u64, 2, 4, 16, 64, 256]);
    let mut batched = (*pick(s, &[16u64, 64, 256, 2048, 8192])).max(max_num_seqs);
    if !chunked {
        batched = batched.max(max_model_len);
    }
    let mut args = vec![
        format!("max_model_len: {max_model_len}"),
        format!("block_size: {block_size}"),
        format!("max_num_seqs: {max_num_seqs}"),
        format!("max_num_batched_tokens: {batched}"),
        format!("enable_chunked_prefill: {chunked}"),
        format!("enable_prefix_caching: {}", chance(s, 0.7)),
        format!("async_scheduling: {}", chance(s, 0.5)),
        format!("enforce_eager: {}", chance(s, 0.5)),
    ];
    if chance(s, 0.4) {
        args.push("scheduling_policy: priority".to_owned());
    }
    if chunked && chance(s, 0.2) {
        args.push(format!("long_prefill_token_threshold: {}", between(s, 1, max_model_len)));
    }
    let per_request = max_model_len.div_ceil(block_size);
    match s.below(3) {
        0 => args.push(format!("num_gpu_blocks_override: {}", per_request + between(s, 1, 8))),
        1 => args.push(format!("num_gpu_blocks_override: {}", between(s, per_request + 1, 20 * per_request))),
        _ => {}
    }
    for arg in args {
        out.push_str(&format!("          {arg}\n"));
    }
}

/// SGLang server arguments across their ranges: every schedule policy, page sizes, chunking on
/// and off, both loops, mixed chunk, every eviction policy, and a KV pool of one to four
/// requests' worth of tokens.
fn sglang_args(s: &mut Substream, max_model_len: u64, out: &mut String) {
    let page_size = *pick(s, &[1u64, 1, 4, 16]);
    let mut args = vec![
        format!("context_length: {max_model_len}"),
        format!("page_size: {page_size}"),
        format!("schedule_policy: {}", pick(s, &["fcfs", "lpm", "lof", "dfs-weight", "random"])),
        format!("chunked_prefill_size: {}", pick(s, &[-1i64, 64, 256, 8192])),
        format!("disable_overlap_schedule: {}", chance(s, 0.4)),
        format!("enable_mixed_chunk: {}", chance(s, 0.3)),
        format!(
            "radix_eviction_policy: {}",
            pick(s, &["lru", "lfu", "slru", "fifo", "mru", "filo", "priority"])
        ),
        format!("disable_cuda_graph: {}", chance(s, 0.3)),
    ];
    if chance(s, 0.5) {
        args.push(format!("max_running_requests: {}", pick(s, &[1u64, 2, 8, 64])));
    }
    // A pool of a few requests' worth keeps the per-instant check (every slot) cheap.
    args.push(format!(
        "max_total_tokens: {}",
        between(s, max_model_len + 2 * page_size + 8, 4 * max_model_len)
    ));
    for arg in args {
        out.push_str(&format!("          {arg}\n"));
    }
}

/// One client: an arrival process, lengths (some longer than the engine takes), and maybe a
/// session, a shared prefix, a priority and a timeout.
fn client(s: &mut Substream, index: usize, max_model_len: u64, model: Option<&str>, out: &mut String) {
    out.push_str(&format!("    - name: c{index}\n      requests: {}\n", between(s, 1, 40)));
    let rate = *pick(s, &["0.5", "5", "50", "500"]);
    let arrival = match s.below(5) {
        0 => format!("{{ process: poisson, rate_per_s: {rate} }}"),
        1 => format!("{{ process: gamma, rate_per_s: {rate}, cv: {} }}", pick(s, &["0.5", "2", "8"])),
        2 => format!("{{ process: constant, rate_per_s: {rate} }}"),
        3 => format!(
            "{{ process: closed, concurrency: {}, think_time_s: {{ dist: exponential, mean: 0.2 }} }}",
            between(s, 1, 8)
        ),
        _ => format!(
            "{{ process: staged, stages: [{{ rate_per_s: {rate}, duration_s: 2, gaps: poisson }}, {{ rate_per_s: 5, duration_s: 1, gaps: constant }}] }}"
        ),
    };
    out.push_str(&format!("      arrival: {arrival}\n"));
    // Now and then a prompt longer than the engine takes, which it drops.
    let longest = if chance(s, 0.1) { max_model_len * 2 } else { max_model_len / 2 };
    let input_max = between(s, 1, longest.max(1));
    out.push_str(&format!(
        "      input_tokens: {{ dist: uniform, min: {}, max: {input_max} }}\n",
        between(s, 1, input_max)
    ));
    out.push_str(&format!(
        "      output_tokens: {{ dist: uniform, min: 1, max: {} }}\n",
        between(s, 1, (max_model_len / 4).clamp(1, 300))
    ));
    if chance(s, 0.25) {
        out.push_str(&format!(
            "      session: {{ turns: {{ dist: uniform, min: 1, max: {} }}, think_time_s: {{ dist: exponential, mean: 0.5 }} }}\n",
            between(s, 1, 4)
        ));
    }
    if chance(s, 0.3) {
        out.push_str(&format!(
            "      shared_prefix: {{ groups: {}, tokens: {} }}\n",
            between(s, 1, 4),
            between(s, 1, (max_model_len / 4).max(1))
        ));
    }
    match s.below(3) {
        0 => out.push_str(&format!(
            "      slo_class: {}\n",
            pick(s, &["critical", "standard", "sheddable", "batch", "background"])
        )),
        1 => out.push_str(&format!("      priority: {}\n", between(s, 0, 10) as i64 - 5)),
        _ => {}
    }
    if chance(s, 0.3) {
        out.push_str(&format!("      timeout_s: {}\n", pick(s, &["0.05", "0.5", "2", "20"])));
    }
    if let Some(model) = model {
        out.push_str(&format!("      model: {model}\n"));
    }
}
