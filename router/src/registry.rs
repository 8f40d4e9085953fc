//! The plugin types llm-d-router v0.10.0 registers, with their stability level, and what this
//! build does with each.
//!
//! Source: `cmd/epp/runner/runner.go::registerInTreePlugins` at the pinned tag. A type the release
//! does not register is refused as upstream refuses it (`plugin type '…' is not registered`); a
//! type it registers but this build does not model is refused by name, never ignored.

/// A plugin type's stability level: Alpha types load only with `--allow-experimental-plugins`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stability {
    /// Needs the experimental flag.
    Alpha,
    /// Loads by default.
    Beta,
}

/// What this build does with a registered type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Support {
    /// Ported: it decides as upstream's does.
    Modelled,
    /// Registered upstream but not ported; the reason says what it needs.
    NotModelled(&'static str),
}

/// One registered plugin type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PluginType {
    /// The type name as configs write it.
    pub name: &'static str,
    /// Its stability level.
    pub stability: Stability,
    /// Whether upstream marks it deprecated (it still loads, with a warning).
    pub deprecated: bool,
    /// What this build does with it.
    pub support: Support,
}

use Stability::{Alpha, Beta};
use Support::{Modelled, NotModelled};

const LORA: &str = "LoRA adapters are not simulated";
const EVICTION: &str = "upstream's runner builds its own sheddable filter and priority-then-time order when \
                        flowControl.enableEviction is on and never consults a configured instance; set \
                        enableEviction instead";
const FLOW: &str = "not ported with flow control, which models the fcfs, edf and slo-deadline ordering, \
                    global-strict and round-robin fairness and static usage-limit policies";
const PD: &str = "this P/D plugin is not ported (disagg-profile-handler and its deciders are)";
const LATENCY: &str = "the latency predictor (a trained model) is not ported";
const MULTICLUSTER: &str = "multi-cluster routing is not simulated";
const DATA: &str = "endpoints and their attributes come from the scenario's pools";
const MULTIMODAL: &str = "multimodal requests are not simulated";
const PARSER: &str = "blis-actor's clients send OpenAI completions with token ids";
const TEST: &str = "an upstream test fixture";
const TOPOLOGY: &str = "node topology attributes are not simulated";

const fn ty(name: &'static str, stability: Stability, support: Support) -> PluginType {
    PluginType { name, stability, deprecated: false, support }
}

const fn deprecated(name: &'static str, support: Support) -> PluginType {
    PluginType { name, stability: Beta, deprecated: true, support }
}

/// Every type the release registers, in name order.
pub const PLUGIN_TYPES: &[PluginType] = &[
    ty("active-request-scorer", Beta, Modelled),
    ty("agent-identity", Alpha, NotModelled(FLOW)),
    ty("always-disagg-multimodal-decider", Beta, NotModelled(MULTIMODAL)),
    ty("always-disagg-pd-decider", Beta, Modelled),
    ty("anthropic-parser", Beta, Modelled),
    ty("approx-prefix-cache-producer", Beta, Modelled),
    ty("burst-prefix-cache-producer", Alpha, NotModelled("the burst prefix producer is not ported")),
    deprecated("by-label", Modelled),
    deprecated("by-label-selector", Modelled),
    ty("concurrency-detector", Beta, Modelled),
    ty("context-length-aware", Beta, NotModelled("the context-length-aware scorer is not ported")),
    ty("core-metrics-extractor", Beta, Modelled),
    ty("cross-replica-publisher", Beta, NotModelled("one router replica is simulated")),
    ty(
        "data-parallel-profile-handler",
        Beta,
        NotModelled("data-parallel ranks as endpoints are not simulated"),
    ),
    ty("dcgm-data-source", Alpha, NotModelled(DATA)),
    ty("dcgm-extractor", Alpha, NotModelled(DATA)),
    ty("decode-filter", Beta, Modelled),
    ty("destination-endpoint-served-verifier", Beta, NotModelled(TEST)),
    deprecated("disagg-headers-handler", NotModelled(PD)),
    ty("disagg-profile-handler", Beta, Modelled),
    ty("disaggregatedset-rollout-pod-extractor", Alpha, NotModelled(DATA)),
    ty("disaggregatedset-rollout-screener", Alpha, NotModelled(PD)),
    ty("edf-ordering-policy", Beta, Modelled),
    ty("encode-filter", Beta, Modelled),
    ty("endpoint-attribute-filter", Alpha, NotModelled(DATA)),
    ty("endpoint-attribute-scorer", Alpha, NotModelled(DATA)),
    ty("endpoint-notification-source", Beta, Modelled),
    ty("fcfs-ordering-policy", Beta, Modelled),
    ty("file-discovery", Beta, NotModelled(DATA)),
    ty("global-strict-fairness-policy", Beta, Modelled),
    ty("header-based-testing-filter", Beta, NotModelled(TEST)),
    ty("header-label-affinity-scorer", Alpha, NotModelled("request headers are not simulated")),
    ty("header-profile-handler", Alpha, NotModelled("request headers are not simulated")),
    ty("inflight-load-producer", Beta, Modelled),
    ty("k8s-notification-source", Beta, NotModelled(DATA)),
    ty("kv-cache-utilization-scorer", Beta, Modelled),
    ty("label-selector-filter", Beta, Modelled),
    ty("latency-scorer", Beta, NotModelled(LATENCY)),
    ty("latency-slo-admitter", Beta, NotModelled(LATENCY)),
    ty("load-aware-scorer", Beta, Modelled),
    ty("local-syncer", Beta, NotModelled("one router replica is simulated")),
    ty("lora-affinity-scorer", Beta, NotModelled(LORA)),
    ty("max-score-picker", Beta, Modelled),
    ty("metrics-data-source", Beta, Modelled),
    ty("mm-embeddings-cache-producer", Beta, NotModelled(MULTIMODAL)),
    ty("mm-embeddings-cache-scorer", Beta, NotModelled(MULTIMODAL)),
    ty("models-data-extractor", Beta, NotModelled(DATA)),
    ty("models-data-source", Beta, NotModelled(DATA)),
    ty("multicluster-approx-prefix-cache-producer", Alpha, NotModelled(MULTICLUSTER)),
    ty("multicluster-file-discovery", Alpha, NotModelled(MULTICLUSTER)),
    ty("multicluster-kv-cache-utilization-scorer", Alpha, NotModelled(MULTICLUSTER)),
    ty("multicluster-metrics-data-source", Alpha, NotModelled(MULTICLUSTER)),
    ty("multicluster-metrics-extractor", Alpha, NotModelled(MULTICLUSTER)),
    ty("multicluster-prefix-cache-scorer", Alpha, NotModelled(MULTICLUSTER)),
    ty("multicluster-queue-scorer", Alpha, NotModelled(MULTICLUSTER)),
    ty("multicluster-session-affinity-filter", Alpha, NotModelled(MULTICLUSTER)),
    ty("no-hit-lru-scorer", Beta, Modelled),
    ty("openai-parser", Beta, Modelled),
    ty("p2p-source-producer", Alpha, NotModelled("KV offloading peers come with the KV-tiering port")),
    ty("passthrough-parser", Beta, NotModelled(PARSER)),
    deprecated("pd-profile-handler", NotModelled(PD)),
    ty("precise-prefix-cache-producer", Beta, Modelled),
    ty("precise-prefix-cache-scorer", Beta, Modelled),
    ty("predicted-latency-producer", Beta, NotModelled(LATENCY)),
    ty("prefill-filter", Beta, Modelled),
    deprecated("prefill-header-handler", NotModelled(PD)),
    ty("prefix-based-pd-decider", Beta, Modelled),
    ty("prefix-cache-affinity-filter", Beta, Modelled),
    ty("prefix-cache-scorer", Beta, Modelled),
    ty("priority-holdback-policy", Alpha, NotModelled(FLOW)),
    ty("priority-then-time-eviction-order-policy", Alpha, NotModelled(EVICTION)),
    ty("probabilistic-admitter", Beta, NotModelled(FLOW)),
    ty("program-aware-fairness", Beta, NotModelled(FLOW)),
    ty("queue-scorer", Beta, Modelled),
    ty("random-picker", Beta, Modelled),
    ty("request-attribute-reporter", Beta, NotModelled("request attributes are not reported")),
    ty("round-robin-fairness-policy", Beta, Modelled),
    ty("running-requests-size-scorer", Beta, Modelled),
    ty("session-affinity-filter", Alpha, Modelled),
    ty("session-affinity-scorer", Alpha, Modelled),
    ty("session-id-producer", Beta, Modelled),
    ty("sheddable-eviction-filter", Alpha, NotModelled(EVICTION)),
    ty("single-profile-handler", Beta, Modelled),
    ty("slo-deadline-ordering-policy", Beta, Modelled),
    ty("slo-headroom-tier-filter", Beta, NotModelled(LATENCY)),
    ty("soft-reflective-ceiling-policy", Alpha, NotModelled(FLOW)),
    ty("static-usage-limit-policy", Beta, Modelled),
    ty("token-load-scorer", Beta, Modelled),
    ty("token-producer", Beta, Modelled),
    deprecated("tokenizer", Modelled),
    ty("topology-affinity-filter", Alpha, NotModelled(TOPOLOGY)),
    ty("topology-affinity-scorer", Alpha, NotModelled(TOPOLOGY)),
    ty("topology-extractor", Alpha, NotModelled(TOPOLOGY)),
    ty("utilization-detector", Beta, Modelled),
    ty("utilization-filter", Alpha, Modelled),
    ty("vertexai-parser", Beta, NotModelled(PARSER)),
    ty("vllmgrpc-parser", Beta, NotModelled(PARSER)),
    ty("vllmhttp-parser", Beta, Modelled),
    ty("weighted-random-picker", Beta, Modelled),
];

/// The registered type called `name`, if the release registers one.
pub fn plugin_type(name: &str) -> Option<&'static PluginType> {
    PLUGIN_TYPES.binary_search_by(|t| t.name.cmp(name)).ok().map(|i| &PLUGIN_TYPES[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_and_has_no_duplicates() {
        assert!(PLUGIN_TYPES.windows(2).all(|w| w[0].name < w[1].name));
    }

    #[test]
    fn the_alpha_types_are_those_the_release_marks_alpha() {
        for name in
            ["session-affinity-filter", "utilization-filter", "header-profile-handler", "agent-identity"]
        {
            assert_eq!(plugin_type(name).unwrap().stability, Stability::Alpha, "{name}");
        }
        for name in
            ["queue-scorer", "prefix-cache-scorer", "approx-prefix-cache-producer", "max-score-picker"]
        {
            assert_eq!(plugin_type(name).unwrap().stability, Stability::Beta, "{name}");
        }
        assert!(plugin_type("active-request-filter").is_none(), "renamed to utilization-filter in v0.10.0");
    }
}
