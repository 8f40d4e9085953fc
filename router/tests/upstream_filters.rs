//! Upstream's filter tests (`pkg/epp/framework/plugins/scheduling/filter/…`): prefix-cache
//! affinity, the role filters, label selectors, `by-label` and the utilization filter.

mod common;

use blis_kernel::Streams;
use blis_router::Endpoint;
use blis_router::plugins::PluginKind;
use blis_router::plugins::filters::{PrefixCacheAffinity, TtftSource};
use blis_router::plugins::prefix::PrefixMatchInfo;
use blis_router::view::{Attributes, PluginInstance};
use common::*;
use serde_json::{Value, json};

// ---- prefix-cache-affinity-filter -----------------------------------------------------------

/// Upstream's `Config` literal: every field it leaves out is Go's zero value; the prefix info
/// comes from plugin 0 and the in-flight counters from plugin 1.
fn affinity(threshold: f64, exploration: f64, penalty: f64, peak: f64) -> PrefixCacheAffinity {
    PrefixCacheAffinity {
        affinity_threshold: threshold,
        exploration_probability: exploration,
        max_ttft_penalty_ms: penalty,
        ttft_source: TtftSource::PrefillThroughput,
        peak_prefill_throughput: peak,
        prefix_producer_name: String::new(),
        in_flight_producer_name: String::new(),
        prefix_producer: Some(0),
        in_flight_producer: Some(1),
    }
}

/// upstream's `makeEndpoint(name, prefixMatch, _, tokens)`: match info (prefixMatch, 100, 16)
/// and `tokens` in flight; the predicted-TTFT argument has no counterpart (the latency
/// predictor is not ported).
fn run_affinity(filter: &PrefixCacheAffinity, endpoints: &[(&str, i64, u64)]) -> Vec<String> {
    let table: Vec<Endpoint> =
        endpoints.iter().map(|(n, _, _)| endpoint(&format!("default/{n}"), &[])).collect();
    let mut attributes = Attributes::default();
    let slots = attributes.prefix_slots(0, table.len());
    for (i, &(_, prefix, _)) in endpoints.iter().enumerate() {
        if prefix >= 0 {
            slots[i] = Some(PrefixMatchInfo {
                match_blocks: prefix as u64,
                total_blocks: 100,
                block_size_tokens: 16,
                cached_block_count: prefix as u64,
            });
        }
    }
    let loads: Vec<(u64, u64)> = endpoints.iter().map(|&(_, _, t)| (u64::from(t > 0), t)).collect();
    let plugins = [instance("approx-prefix-cache-producer", PluginKind::QueueScorer), in_flight(&loads)];
    let mut exploration = Streams::new(1).stream("router", "exploration", "");
    let mut out = Vec::new();
    with_view(&table, &attributes, &plugins, 0, |v| {
        filter.filter(v, &all(table.len()), &mut exploration, &mut out)
    });
    out.iter().map(|&e| endpoints[e as usize].0.to_owned()).collect()
}

/// upstream: prefixcacheaffinity/plugin_test.go::TestFilter_AffinityThresholdDisabled
#[test]
fn affinity_threshold_disabled() {
    assert_eq!(run_affinity(&affinity(0.0, 0.0, 0.0, 0.0), &[("a", 0, 0), ("b", 90, 0)]), ["a", "b"]);
}

/// upstream: prefixcacheaffinity/plugin_test.go::TestFilter_SingleEndpoint
#[test]
fn affinity_single_endpoint() {
    assert_eq!(run_affinity(&affinity(0.8, 0.0, 0.0, 0.0), &[("a", 90, 0)]), ["a"]);
}

/// upstream: prefixcacheaffinity/plugin_test.go::TestFilter_NoStickyEndpoints
#[test]
fn affinity_no_sticky_endpoints() {
    let got = run_affinity(&affinity(0.8, 0.0, 0.0, 0.0), &[("a", 10, 0), ("b", 20, 0), ("c", 50, 0)]);
    assert_eq!(got, ["a", "b", "c"]);
}

/// upstream: prefixcacheaffinity/plugin_test.go::TestFilter_NarrowToSticky and
/// ::TestFilter_TTFTPenaltyBreaksStickiness use `ttftSource: latencyPredictor` with a TTFT
/// penalty > 0, which reads the latency predictor's predicted TTFT. The predictor is not
/// ported, so that configuration is refused by name; both cases are ported as that refusal.
/// The narrowing itself (sticky a, b of a, b, c) is checked with the gate off.
#[test]
fn affinity_latency_predictor_with_a_penalty_is_refused_by_name() {
    for penalty in [5000, 100] {
        let e = refusal(
            "prefix-cache-affinity-filter",
            json!({"affinityThreshold": 0.8, "maxTTFTPenaltyMs": penalty, "ttftSource": "latencyPredictor"}),
        );
        assert_eq!(e.path, "ttftSource");
        assert_eq!(e.value.as_deref(), Some("\"latencyPredictor\""));
        assert!(e.reason.contains("the latency predictor (a trained model) is not ported"), "{e}");
    }
    let got = run_affinity(&affinity(0.8, 0.0, 0.0, 0.0), &[("a", 90, 0), ("b", 85, 0), ("c", 10, 0)]);
    assert_eq!(got, ["a", "b"]);
}

/// upstream: prefixcacheaffinity/plugin_test.go::TestFilter_ThroughputTTFTBreaksStickiness
/// (a 500 ms, b 50 ms: 450 > 100 → all) and ::TestFilter_ThroughputTTFTWithinThreshold
/// (penalty 1000 → only a).
#[test]
fn affinity_throughput_ttft_gate() {
    let endpoints = [("a", 90, 500), ("b", 10, 50)];
    assert_eq!(run_affinity(&affinity(0.8, 0.0, 100.0, 1000.0), &endpoints), ["a", "b"]);
    assert_eq!(run_affinity(&affinity(0.8, 0.0, 1000.0, 1000.0), &endpoints), ["a"]);
}

/// upstream: prefixcacheaffinity/plugin_test.go::TestFilter_TTFTPenaltyDisabled
#[test]
fn affinity_ttft_penalty_disabled() {
    assert_eq!(run_affinity(&affinity(0.8, 0.0, 0.0, 1000.0), &[("a", 90, 5000), ("b", 10, 50)]), ["a"]);
}

/// upstream: prefixcacheaffinity/plugin_test.go::TestFilter_ExplorationProbability (1.0 always
/// explores).
#[test]
fn affinity_exploration_probability() {
    for _ in 0..20 {
        assert_eq!(run_affinity(&affinity(0.8, 1.0, 0.0, 0.0), &[("a", 90, 0), ("b", 10, 0)]), ["a", "b"]);
    }
}

fn affinity_built(params: Option<Value>) -> PrefixCacheAffinity {
    match build("prefix-cache-affinity-filter", params) {
        PluginKind::PrefixCacheAffinityFilter(f) => f,
        other => panic!("{other:?}"),
    }
}

fn required(kind: &PluginKind) -> Vec<String> {
    kind.requires().iter().map(ToString::to_string).collect()
}

/// upstream: prefixcacheaffinity/plugin_test.go::TestConsumes_ConditionalAttributes: penalty 0
/// needs only the prefix key; prefillThroughput with a penalty adds `InFlightLoad`. (The
/// latencyPredictor case, which adds `LatencyPredictionInfo`, is refused by name: see
/// `affinity_latency_predictor_with_a_penalty_is_refused_by_name`.)
#[test]
fn affinity_consumes_conditional_attributes() {
    let prefix = "PrefixCacheMatchInfo/approx-prefix-cache-producer";
    let off = build("prefix-cache-affinity-filter", Some(json!({"maxTTFTPenaltyMs": 0})));
    assert_eq!(required(&off), [prefix]);
    let on = build(
        "prefix-cache-affinity-filter",
        Some(
            json!({"maxTTFTPenaltyMs": 5000, "ttftSource": "prefillThroughput", "peakPrefillThroughput": 1000}),
        ),
    );
    assert_eq!(required(&on), [prefix, "InFlightLoad/inflight-load-producer"]);
    let predictor_off = build(
        "prefix-cache-affinity-filter",
        Some(json!({"maxTTFTPenaltyMs": 0, "ttftSource": "latencyPredictor"})),
    );
    assert_eq!(required(&predictor_off), [prefix]);
}

/// upstream: prefixcacheaffinity/plugin_test.go::TestFactory_ValidConfig,
/// ::TestFactory_PartialConfigPreservesDefaults (three cases), ::TestFactory_ThroughputModeValid,
/// ::TestFactory_ZeroPeakPrefillThroughputAllowedWhenUnused (both cases) and
/// ::TestFactory_DefaultsToPrefillThroughput (nil params).
#[test]
fn affinity_factory_accepts() {
    let f = affinity_built(None);
    assert_eq!(
        (
            f.affinity_threshold,
            f.exploration_probability,
            f.max_ttft_penalty_ms,
            f.ttft_source,
            f.peak_prefill_throughput
        ),
        (0.80, 0.0, 18_000.0, TtftSource::PrefillThroughput, 15_928.0)
    );
    let f = affinity_built(Some(json!({"affinityThreshold": 0.95})));
    assert_eq!(
        (f.affinity_threshold, f.exploration_probability, f.max_ttft_penalty_ms),
        (0.95, 0.0, 18_000.0)
    );
    let f = affinity_built(Some(json!({"explorationProbability": 0.05})));
    assert_eq!(
        (f.affinity_threshold, f.exploration_probability, f.max_ttft_penalty_ms),
        (0.80, 0.05, 18_000.0)
    );
    let f = affinity_built(Some(json!({"maxTTFTPenaltyMs": 10000})));
    assert_eq!(
        (
            f.affinity_threshold,
            f.exploration_probability,
            f.max_ttft_penalty_ms,
            f.ttft_source,
            f.peak_prefill_throughput
        ),
        (0.80, 0.0, 10_000.0, TtftSource::PrefillThroughput, 15_928.0)
    );
    let f = affinity_built(Some(json!({"ttftSource": "prefillThroughput", "peakPrefillThroughput": 1000})));
    assert_eq!((f.ttft_source, f.peak_prefill_throughput), (TtftSource::PrefillThroughput, 1000.0));
    affinity_built(Some(
        json!({"maxTTFTPenaltyMs": 0, "ttftSource": "prefillThroughput", "peakPrefillThroughput": 0}),
    ));
    // `{"ttftSource":"latencyPredictor","peakPrefillThroughput":0}` keeps the default penalty
    // (18000 > 0) and so needs the predictor: refused by name here (see above).
    let e = refusal(
        "prefix-cache-affinity-filter",
        json!({"ttftSource": "latencyPredictor", "peakPrefillThroughput": 0}),
    );
    assert_eq!(e.path, "ttftSource");
    let f = affinity_built(Some(
        json!({"ttftSource": "latencyPredictor", "peakPrefillThroughput": 0, "maxTTFTPenaltyMs": 0}),
    ));
    assert_eq!(f.ttft_source, TtftSource::LatencyPredictor);
}

/// upstream: prefixcacheaffinity/plugin_test.go::TestFactory_InvalidAffinityThreshold,
/// ::TestFactory_InvalidExplorationProbability, ::TestFactory_InvalidPeakPrefillThroughput,
/// ::TestFactory_ThroughputModeRequiresPeakPrefillThroughput, ::TestFactory_InvalidTTFTSource,
/// ::TestFactory_EmptyTTFTSourceRejected and ::TestFactory_DefaultsToPrefillThroughput
/// (`{"peakPrefillThroughput":0}`), with upstream's full texts.
#[test]
fn affinity_factory_refuses() {
    let cases = [
        (
            json!({"affinityThreshold": 1.5}),
            "affinityThreshold",
            "invalid config: affinityThreshold must be <= 1.0, got 1.500000",
        ),
        (
            json!({"explorationProbability": -0.1}),
            "explorationProbability",
            "invalid config: explorationProbability must be in [0, 1], got -0.100000",
        ),
        (
            json!({"peakPrefillThroughput": -1}),
            "peakPrefillThroughput",
            "invalid config: peakPrefillThroughput must be >= 0, got -1.000000",
        ),
        (
            json!({"ttftSource": "prefillThroughput", "peakPrefillThroughput": 0}),
            "peakPrefillThroughput",
            "invalid config: peakPrefillThroughput must be > 0 when ttftSource is prefillThroughput",
        ),
        (
            json!({"ttftSource": "bogus"}),
            "ttftSource",
            "invalid config: ttftSource must be \"latencyPredictor\" or \"prefillThroughput\", got \"bogus\"",
        ),
        (
            json!({"ttftSource": ""}),
            "ttftSource",
            "invalid config: ttftSource must be \"latencyPredictor\" or \"prefillThroughput\", got \"\"",
        ),
        (
            json!({"peakPrefillThroughput": 0}),
            "peakPrefillThroughput",
            "invalid config: peakPrefillThroughput must be > 0 when ttftSource is prefillThroughput",
        ),
        (
            json!({"maxTTFTPenaltyMs": -1}),
            "maxTTFTPenaltyMs",
            "invalid config: maxTTFTPenaltyMs must be >= 0, got -1.000000",
        ),
    ];
    for (params, path, reason) in cases {
        let e = refusal("prefix-cache-affinity-filter", params.clone());
        assert_eq!((e.path.as_str(), e.reason.as_str()), (path, reason), "{params}");
    }
    let e = refusal("prefix-cache-affinity-filter", json!({"affinityThreshold": "high"}));
    assert!(e.reason.starts_with("failed to unmarshal config: json:"), "{e}");
}

// ---- role filters ---------------------------------------------------------------------------

fn run_filter(kind: &PluginKind, endpoints: &[Endpoint]) -> Vec<String> {
    let out: Vec<u32> = all(endpoints.len())
        .into_iter()
        .filter(|&e| match kind {
            PluginKind::ByLabelFilter(f) => f.keeps(&endpoints[e as usize]),
            PluginKind::LabelSelectorFilter(f) => f.matches(&endpoints[e as usize].labels),
            other => panic!("{other:?}"),
        })
        .collect();
    out.iter().map(|&e| endpoints[e as usize].name.to_string()).collect()
}

fn role(name: &str, role: Option<&str>) -> Endpoint {
    match role {
        Some(r) => endpoint(name, &[("llm-d.ai/role", r)]),
        None => endpoint(name, &[("app", "vllm")]),
    }
}

/// upstream: bylabel/roles_test.go::TestRoleFilterDecodeRole
#[test]
fn role_filter_decode() {
    let endpoints = [
        role("decode-pod", Some("decode")),
        role("prefill-pod", Some("prefill")),
        role("pd-pod", Some("prefill-decode")),
        role("both-pod", Some("both")),
        role("epd-pod", Some("encode-prefill-decode")),
        role("encode-pod", Some("encode")),
        role("ep-pod", Some("encode-prefill")),
        role("no-label-pod", None),
        endpoint("empty-labels-pod", &[]),
    ];
    assert_eq!(
        run_filter(&build("decode-filter", None), &endpoints),
        ["decode-pod", "pd-pod", "both-pod", "epd-pod", "no-label-pod", "empty-labels-pod"]
    );
}

/// upstream: bylabel/roles_test.go::TestRoleFilterPrefillRole
#[test]
fn role_filter_prefill() {
    let endpoints = [
        role("decode-pod", Some("decode")),
        role("prefill-pod", Some("prefill")),
        role("pd-pod", Some("prefill-decode")),
        role("both-pod", Some("both")),
        role("epd-pod", Some("encode-prefill-decode")),
        role("encode-pod", Some("encode")),
        role("ep-pod", Some("encode-prefill")),
        role("no-label-pod", None),
    ];
    assert_eq!(
        run_filter(&build("prefill-filter", None), &endpoints),
        ["prefill-pod", "pd-pod", "both-pod", "epd-pod", "ep-pod"]
    );
}

/// upstream: bylabel/roles_test.go::TestRoleFilterEncodeRole, and ::TestRoleFilterEmptyEndpoints
/// (empty in, empty out).
#[test]
fn role_filter_encode() {
    let endpoints = [
        role("decode-pod", Some("decode")),
        role("prefill-pod", Some("prefill")),
        role("encode-pod", Some("encode")),
        role("ep-pod", Some("encode-prefill")),
        role("epd-pod", Some("encode-prefill-decode")),
        role("no-label-pod", None),
    ];
    assert_eq!(run_filter(&build("encode-filter", None), &endpoints), ["encode-pod", "ep-pod", "epd-pod"]);
    assert!(run_filter(&build("encode-filter", None), &[]).is_empty());
}

/// upstream: bylabel/roles_test.go::TestRoleFilterFactory: the role factories ignore their
/// parameters (here: any parameters are accepted and reported inert by the loader).
#[test]
fn role_filter_factories_ignore_parameters() {
    for type_name in ["decode-filter", "prefill-filter", "encode-filter"] {
        build(type_name, Some(json!({"anything": [1, 2], "label": 7})));
    }
}

// ---- label-selector-filter ------------------------------------------------------------------

fn selector_pods() -> Vec<Endpoint> {
    vec![
        endpoint("nginx-1", &[("app", "nginx"), ("version", "v1.0"), ("tier", "frontend")]),
        endpoint("nginx-2", &[("app", "nginx"), ("version", "v1.1"), ("tier", "frontend")]),
        endpoint("coredns-1", &[("app", "coredns"), ("tier", "system")]),
        endpoint("redis-1", &[("app", "redis"), ("tier", "backend"), ("deprecated", "true")]),
        endpoint("web-1", &[("app", "web"), ("tier", "frontend"), ("environment", "production")]),
    ]
}

/// upstream: bylabel/selector_test.go::TestLabelSelectorFilterFiltering (all nine cases).
#[test]
fn label_selector_filtering() {
    let pods = selector_pods();
    let cases: [(&str, Value, &[&str]); 9] = [
        ("matchLabels - app nginx", json!({"matchLabels": {"app": "nginx"}}), &["nginx-1", "nginx-2"]),
        (
            "matchLabels - exact match",
            json!({"matchLabels": {"app": "nginx", "version": "v1.0"}}),
            &["nginx-1"],
        ),
        (
            "matchExpressions - In operator",
            json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["frontend", "backend"]}]}),
            &["nginx-1", "nginx-2", "redis-1", "web-1"],
        ),
        (
            "matchExpressions - NotIn operator",
            json!({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["system"]}]}),
            &["nginx-1", "nginx-2", "redis-1", "web-1"],
        ),
        (
            "matchExpressions - Exists operator",
            json!({"matchExpressions": [{"key": "deprecated", "operator": "Exists"}]}),
            &["redis-1"],
        ),
        (
            "matchExpressions - DoesNotExist operator",
            json!({"matchExpressions": [{"key": "deprecated", "operator": "DoesNotExist"}]}),
            &["nginx-1", "nginx-2", "coredns-1", "web-1"],
        ),
        (
            "combined matchLabels and matchExpressions",
            json!({"matchLabels": {"tier": "frontend"}, "matchExpressions": [{"key": "environment", "operator": "Exists"}]}),
            &["web-1"],
        ),
        ("empty selector - matches all", json!({}), &["nginx-1", "nginx-2", "coredns-1", "redis-1", "web-1"]),
        ("no matches", json!({"matchLabels": {"app": "nonexistent"}}), &[]),
    ];
    for (name, params, expected) in cases {
        assert_eq!(run_filter(&build("label-selector-filter", Some(params)), &pods), expected, "{name}");
    }
}

/// upstream: bylabel/selector_test.go::TestLabelSelectorFilterHasNoAllowsNoLabelEscapeHatch
#[test]
fn label_selector_has_no_allows_no_label_escape_hatch() {
    let pods =
        [role("decode-0", Some("decode")), role("encode-0", Some("encode")), endpoint("mystery-0", &[])];
    let kind = build(
        "label-selector-filter",
        Some(
            json!({"matchExpressions": [{"key": "llm-d.ai/role", "operator": "In", "values": ["decode", "prefill-decode"]}]}),
        ),
    );
    assert_eq!(run_filter(&kind, &pods), ["decode-0"]);
}

/// upstream: bylabel/selector_test.go::TestLabelSelectorFilterFactoryWithJSON (all five accept),
/// ::TestLabelSelectorFilterFactoryWithInvalidJSON ("InvalidOperator"; truncated JSON cannot
/// reach a factory here: the document is parsed before loading), ::TestLabelSelectorFilterEdgeCases
/// and ::TestDeprecatedSelectorFactoryBackwardCompat.
#[test]
fn label_selector_factory() {
    for params in [
        json!({"matchLabels": {"app": "nginx", "version": "v1.0"}}),
        json!({"matchLabels": {"tier": "frontend"}, "matchExpressions": [
            {"key": "environment", "operator": "In", "values": ["production", "staging"]},
            {"key": "deprecated", "operator": "DoesNotExist"}]}),
        json!({}),
        json!({"matchExpressions": [{"key": "component", "operator": "NotIn", "values": ["test", "debug"]}]}),
        json!({"matchExpressions": [{"key": "release", "operator": "Exists"}]}),
    ] {
        build("label-selector-filter", Some(params));
    }
    let e = refusal(
        "label-selector-filter",
        json!({"matchExpressions": [{"key": "app", "operator": "InvalidOperator", "values": ["x"]}]}),
    );
    assert_eq!(e.path, "matchExpressions[0].operator");
    assert_eq!(e.reason, "\"InvalidOperator\" is not a valid label selector operator");
    let e = refusal("label-selector-filter", json!({"matchExpressions": [{"key": "app", "operator": "In"}]}));
    assert_eq!(
        e.reason,
        "values: Invalid value: []string(nil): for 'in', 'notin' operators, values set can't be empty"
    );
    let e = refusal(
        "label-selector-filter",
        json!({"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["a", "b"]}]}),
    );
    assert_eq!(
        e.reason,
        "values: Invalid value: []string{\"a\", \"b\"}: values set must be empty for exists and does not exist"
    );
    let e = refusal("by-label-selector", json!({"matchLabels": 3}));
    assert!(
        e.reason.starts_with("failed to parse the parameters of the 'label-selector-filter' filter - json:"),
        "{e}"
    );
    // Edge cases: selector app=test over nothing, and over endpoints without labels.
    let test = build("label-selector-filter", Some(json!({"matchLabels": {"app": "test"}})));
    assert!(run_filter(&test, &[]).is_empty());
    assert!(run_filter(&test, &[endpoint("bare", &[])]).is_empty());
    // The deprecated alias selects the same way.
    let alias = build("by-label-selector", Some(json!({"matchLabels": {"app": "nginx"}})));
    let pods = [selector_pods()[0].clone(), selector_pods()[3].clone()];
    assert_eq!(run_filter(&alias, &pods), ["nginx-1"]);
}

// ---- by-label -------------------------------------------------------------------------------

/// upstream: bylabel/filter_test.go::TestFactory (three accept, four refuse) and
/// ::TestFactoryInvalidJSON (wrong types; truncated JSON cannot reach a factory here).
#[test]
fn by_label_factory() {
    for params in [
        json!({"label": "role", "allowsNoLabel": false, "validValues": ["prefill"]}),
        json!({"label": "role", "allowsNoLabel": true, "validValues": []}),
        json!({"label": "role", "allowsNoLabel": true, "validValues": ["decode", "both"]}),
    ] {
        build("by-label", Some(params));
    }
    let label = "invalid configuration for 'by-label' filter: 'label' must be specified";
    let values = "invalid configuration for 'by-label' filter: either 'validValues' must be non-empty or 'allowsNoLabel' must be true";
    for (params, reason) in [
        (json!({"label": "", "allowsNoLabel": true, "validValues": ["x"]}), label),
        (json!({"allowsNoLabel": true, "validValues": ["x"]}), label),
        (json!({"label": "role", "allowsNoLabel": false, "validValues": []}), values),
        (json!({"label": "role", "allowsNoLabel": false}), values),
    ] {
        assert_eq!(refusal("by-label", params.clone()).reason, reason, "{params}");
    }
    for params in
        [json!({"label": "role", "validValues": "true"}), json!({"label": "role", "allowsNoLabel": "yes"})]
    {
        let e = refusal("by-label", params.clone());
        assert!(
            e.reason.starts_with("failed to parse the parameters of the 'by-label' filter - json:"),
            "{e}"
        );
    }
}

/// upstream: bylabel/filter_test.go::TestByLabelFiltering (all four cases).
#[test]
fn by_label_filtering() {
    let mut pods = selector_pods();
    pods.push(endpoint("no-tier-pod", &[("app", "unknown")]));
    let cases: [(Value, &[&str]); 4] = [
        (json!({"label": "app", "validValues": ["nginx"]}), &["nginx-1", "nginx-2"]),
        (json!({"label": "version", "validValues": ["v1.0"]}), &["nginx-1"]),
        (json!({"label": "tier", "allowsNoLabel": true}), &["no-tier-pod"]),
        (
            json!({"label": "tier", "validValues": ["frontend", "backend", "system"]}),
            &["nginx-1", "nginx-2", "coredns-1", "redis-1", "web-1"],
        ),
    ];
    for (params, expected) in cases {
        assert_eq!(run_filter(&build("by-label", Some(params.clone())), &pods), expected, "{params}");
    }
}

// ---- utilization-filter ---------------------------------------------------------------------

/// Run a utilization filter built from `params` over endpoints (name, in-flight requests,
/// running, waiting, kv); the in-flight producer is plugin 0.
fn run_utilization(params: Value, endpoints: &[(&str, u64, u64, u64, f64)]) -> Vec<String> {
    let PluginKind::UtilizationFilter(mut filter) = build("utilization-filter", Some(params)) else {
        unreachable!()
    };
    filter.producer = Some(0);
    let table: Vec<Endpoint> = endpoints.iter().map(|&(n, _, r, q, kv)| loaded(n, q, r, kv)).collect();
    let plugins: [PluginInstance; 1] =
        [in_flight(&endpoints.iter().map(|&(_, a, ..)| (a, 0)).collect::<Vec<_>>())];
    let mut out = Vec::new();
    with_view(&table, &Attributes::default(), &plugins, 0, |v| filter.filter(v, &all(table.len()), &mut out));
    out.iter().map(|&e| endpoints[e as usize].0.to_owned()).collect()
}

fn cond(metric: &str, max: f64) -> Value {
    json!({"metric": metric, "maxValue": max})
}

/// upstream: utilization/filter_test.go::TestUtilizationFilter_Filter (all nine cases).
#[test]
fn utilization_filter() {
    let c = |conditions: Vec<Value>| json!({"conditions": conditions});
    type Case<'a> = (&'a str, Value, Vec<(&'a str, u64, u64, u64, f64)>, Vec<&'a str>);
    let cases: Vec<Case> = vec![
        (
            "active-requests keeps endpoints at or below maxValue",
            c(vec![cond("active-requests", 2.0)]),
            vec![("a", 1, 0, 0, 0.0), ("b", 2, 0, 0, 0.0), ("c", 3, 0, 0, 0.0)],
            vec!["a", "b"],
        ),
        (
            "active-requests endpoints without load attribute are kept",
            c(vec![cond("active-requests", 1.0)]),
            vec![("a", 0, 0, 0, 0.0), ("b", 5, 0, 0, 0.0)],
            vec!["a"],
        ),
        (
            "running-requests keeps endpoints at or below maxValue",
            c(vec![cond("running-requests", 4.0)]),
            vec![("a", 0, 4, 0, 0.0), ("b", 0, 5, 0, 0.0)],
            vec!["a"],
        ),
        (
            "waiting-queue keeps endpoints at or below maxValue",
            c(vec![cond("waiting-queue", 0.0)]),
            vec![("a", 0, 0, 0, 0.0), ("b", 0, 0, 3, 0.0)],
            vec!["a"],
        ),
        (
            "kv-cache-utilization keeps endpoints at or below maxValue",
            c(vec![cond("kv-cache-utilization", 0.8)]),
            vec![("a", 0, 0, 0, 0.5), ("b", 0, 0, 0, 0.9)],
            vec!["a"],
        ),
        (
            "multiple conditions drop endpoints exceeding any cap",
            c(vec![cond("running-requests", 40.0), cond("waiting-queue", 0.0)]),
            vec![("a", 0, 10, 0, 0.0), ("b", 0, 41, 0, 0.0), ("c", 0, 10, 1, 0.0)],
            vec!["a"],
        ),
        (
            "conditions mix EPP-tracked and model-server metrics",
            c(vec![cond("active-requests", 10.0), cond("kv-cache-utilization", 0.8)]),
            vec![("a", 5, 0, 0, 0.0), ("b", 11, 0, 0, 0.0), ("c", 0, 0, 0, 0.9)],
            vec!["a"],
        ),
        (
            "all filtered out without fallback returns empty",
            c(vec![cond("active-requests", 1.0)]),
            vec![("a", 2, 0, 0, 0.0), ("b", 3, 0, 0, 0.0)],
            vec![],
        ),
        (
            "all filtered out with fallback returns original candidates",
            json!({"conditions": [cond("active-requests", 1.0)], "fallbackOnEmpty": true}),
            vec![("a", 2, 0, 0, 0.0), ("b", 3, 0, 0, 0.0)],
            vec!["a", "b"],
        ),
    ];
    for (name, params, endpoints, expected) in cases {
        assert_eq!(run_utilization(params, &endpoints), expected, "{name}");
    }
}

/// upstream: utilization/filter_test.go::TestNewUtilizationFilter_InvalidParameters (all six),
/// ::TestUtilizationFilter_FactoryRejectsMissingParameters, with the exact texts.
#[test]
fn utilization_filter_invalid_parameters() {
    let metric = |got: &str| {
        format!(
            "utilization filter condition metric must be one of \"active-requests\", \"running-requests\", \
             \"waiting-queue\", \"kv-cache-utilization\", got \"{got}\""
        )
    };
    let cases = [
        (json!({"conditions": []}), "conditions", "utilization filter requires at least one condition".to_owned()),
        (json!({"conditions": [{"maxValue": 1}]}), "conditions[0].metric", metric("")),
        (json!({"conditions": [{"metric": "unknown", "maxValue": 1}]}), "conditions[0].metric", metric("unknown")),
        (
            json!({"conditions": [{"metric": "active-requests"}]}),
            "conditions[0].maxValue",
            "utilization filter condition for \"active-requests\" requires maxValue".to_owned(),
        ),
        (
            json!({"conditions": [{"metric": "active-requests", "maxValue": -1}]}),
            "conditions[0].maxValue",
            "utilization filter condition for \"active-requests\" requires a non-negative maxValue, got -1".to_owned(),
        ),
        (
            json!({"conditions": [{"metric": "kv-cache-utilization", "maxValue": 80}]}),
            "conditions[0].maxValue",
            "utilization filter maxValue for \"kv-cache-utilization\" is a fraction and must be at most 1, got 80".to_owned(),
        ),
    ];
    for (params, path, reason) in cases {
        let e = refusal("utilization-filter", params.clone());
        assert_eq!((e.path.as_str(), e.reason.as_str()), (path, reason.as_str()), "{params}");
    }
    assert!(
        blis_router::plugins::build("utilization-filter", None).unwrap().is_err(),
        "nil parameters: no conditions"
    );
    let e = refusal("utilization-filter", json!({"conditions": "all"}));
    assert!(
        e.reason.starts_with("failed to parse the parameters of the 'utilization-filter' filter - json:"),
        "{e}"
    );
}

/// upstream: utilization/filter_test.go::TestUtilizationFilter_Factory (two conditions kept in
/// order) and ::TestUtilizationFilter_Consumes (the in-flight key only with an active-requests
/// condition).
#[test]
fn utilization_filter_factory_and_consumes() {
    let kind = build(
        "utilization-filter",
        Some(
            json!({"conditions": [{"metric": "running-requests", "maxValue": 40}, {"metric": "waiting-queue", "maxValue": 0}]}),
        ),
    );
    let PluginKind::UtilizationFilter(f) = &kind else { unreachable!() };
    assert_eq!(f.conditions.len(), 2);
    assert_eq!(f.conditions[0].1, 40.0);
    assert!(required(&kind).is_empty());
    assert!(kind.optional().is_empty());
    let active = build(
        "utilization-filter",
        Some(json!({"conditions": [{"metric": "active-requests", "maxValue": 3}]})),
    );
    assert_eq!(required(&active), ["InFlightLoad/inflight-load-producer"]);
}

/// Go's encoding/json matches field names case-insensitively at every depth, so nested
/// parameters written in another case load as upstream loads them.
#[test]
fn nested_parameter_names_fold_as_go_folds_them() {
    let kind = build(
        "utilization-filter",
        Some(json!({"Conditions": [{"Metric": "waiting-queue", "MAXVALUE": 0}]})),
    );
    let PluginKind::UtilizationFilter(f) = kind else { unreachable!() };
    assert_eq!(f.conditions.len(), 1);
    let kind = build(
        "label-selector-filter",
        Some(json!({"MatchExpressions": [{"Key": "tier", "Operator": "In", "Values": ["frontend"]}]})),
    );
    assert_eq!(run_filter(&kind, &selector_pods()), ["nginx-1", "nginx-2", "web-1"]);
}
