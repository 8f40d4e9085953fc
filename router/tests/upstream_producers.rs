//! Upstream's data-producer tests: `inflight-load-producer` (`dataproducer/inflightload/
//! producer_test.go`, `token_estimator_test.go`) and the `token-producer` factory
//! (`dataproducer/tokenizer/tokenizer_test.go`).
//!
//! Not ported, because they cannot happen here: the flap, crash, stale-delete and notification
//! cases (an endpoint never leaves the router's table in a run), the janitor, eviction and touch
//! cases (every request the router routes is ended by its response or its client; nothing is
//! reaped by wall-clock age), the concurrency stress and atomic-release races (one thread), the
//! nil-request / nil-result / empty-request-id panic-safety cases (Rust has no nil; a request
//! always has a key), and DumpState (the producer has no dump endpoint).

mod common;

use blis_router::plugins::PluginKind;
use blis_router::plugins::inflight::InFlightLoad;
use blis_router::plugins::prefix::PrefixMatchInfo;
use blis_router::{Decision, Router};
use common::*;
use serde_json::{Value, json};

fn producer(params: Option<Value>) -> InFlightLoad {
    match build("inflight-load-producer", params) {
        PluginKind::InFlightLoadProducer(mut p) => {
            p.register_endpoints(4);
            p
        }
        other => panic!("{other:?}"),
    }
}

/// upstream's `newTestProducer`: output estimation on.
fn with_output() -> InFlightLoad {
    producer(Some(json!({"addEstimatedOutputTokens": true})))
}

fn info(match_blocks: u64, total_blocks: u64, block_size_tokens: u32) -> Option<PrefixMatchInfo> {
    Some(PrefixMatchInfo { match_blocks, total_blocks, block_size_tokens, cached_block_count: match_blocks })
}

const E: u32 = 0;
const A: u32 = 1;
const B: u32 = 2;

/// upstream: inflightload/producer_test.go::TestInFlightLoadProducer_Consumes (TokenizedPrompt
/// required; the default prefix key optional, not required) and
/// ::TestInFlightLoadProducer_PrefixMatchInfoProducerName (the optional key follows the name;
/// match info under it discounts: (1, 2, 4) on 5 tokens → 4; without it → 5).
#[test]
fn consumes_and_prefix_producer_name() {
    let kind = build("inflight-load-producer", None);
    let keys = |v: Vec<blis_router::plugins::DataKey>| v.iter().map(ToString::to_string).collect::<Vec<_>>();
    assert_eq!(keys(kind.requires()), ["TokenizedPrompt/token-producer"]);
    assert_eq!(keys(kind.optional()), ["PrefixCacheMatchInfo/approx-prefix-cache-producer"]);
    let kind = build(
        "inflight-load-producer",
        Some(json!({"prefixMatchInfoProducerName": "precise-prefix-cache-producer"})),
    );
    assert_eq!(keys(kind.optional()), ["PrefixCacheMatchInfo/precise-prefix-cache-producer"]);
    let p = producer(Some(json!({"prefixMatchInfoProducerName": "precise-prefix-cache-producer"})));
    assert_eq!(p.estimate(5, info(1, 2, 4), None), 4);
    assert_eq!(p.estimate(5, None, None), 5);
    // Through the loader: info written by the approx producer is not read by a producer
    // pointed at another name.
    let config = load_json(json!({
        "apiVersion": "llm-d.ai/v1alpha1", "kind": "EndpointPickerConfig",
        "plugins": [
            {"type": "approx-prefix-cache-producer"},
            {"type": "inflight-load-producer", "parameters": {"prefixMatchInfoProducerName": "precise-prefix-cache-producer"}},
            {"type": "token-load-scorer"}, {"type": "prefix-cache-scorer"}],
        "schedulingProfiles": [{"name": "default", "plugins": [{"pluginRef": "token-load-scorer"}, {"pluginRef": "prefix-cache-scorer"}]}],
    }))
    .unwrap();
    let resolved = config.plugins.iter().find_map(|p| match &p.kind {
        PluginKind::InFlightLoadProducer(p) => Some(p.prefix_producer),
        _ => None,
    });
    assert_eq!(resolved, Some(None));
}

fn token_load_router(params: Value, endpoints: usize) -> Router {
    let config = load_json(json!({
        "apiVersion": "llm-d.ai/v1alpha1", "kind": "EndpointPickerConfig",
        "plugins": [{"type": "inflight-load-producer", "parameters": params}, {"type": "token-load-scorer"}],
        "schedulingProfiles": [{"name": "default", "plugins": [{"pluginRef": "token-load-scorer"}]}],
    }))
    .unwrap();
    Router::new(config, (0..endpoints).map(|i| endpoint(&format!("default/e{i}"), &[])).collect())
}

/// upstream: inflightload/producer_test.go::TestInFlightLoadProducer_Produce (4 tokens with
/// output on → 10 uncached-request tokens, and no in-flight load before the request is sent)
/// and ::TestInFlightLoadProducer_Lifecycle (routed → 1 request, 10 tokens; end of stream → 0, 0),
/// through the router.
#[test]
fn produce_and_lifecycle() {
    let mut router = token_load_router(json!({"addEstimatedOutputTokens": true}), 1);
    assert_eq!(in_flight_of(router.plugins(), 0), (0, 0));
    let prompt = [1, 2, 3, 4];
    let decision = router.route(&request(7, &prompt), &[0], 0, &mut rng(1));
    assert!(matches!(decision, Decision::Routed { endpoint: 0, .. }));
    assert_eq!(in_flight_of(router.plugins(), 0), (1, 10));
    router.end(7);
    assert_eq!(in_flight_of(router.plugins(), 0), (0, 0));
}

/// upstream: inflightload/producer_test.go::TestInFlightLoadProducer_MultiPodLifecycle (prefill
/// → A, decode → B: the first chunk releases A entirely, the end releases B).
#[test]
fn multi_pod_lifecycle() {
    let mut p = with_output();
    let tokens = p.estimate(4, None, None);
    p.add(1, &[(A, true, tokens), (B, false, tokens)]);
    assert_eq!((p.load(A).0, p.load(B).0), (1, 1));
    p.first_chunk(1);
    assert_eq!((p.load(A).0, p.load(B).0), (0, 1));
    p.end(1);
    assert_eq!((p.load(A).0, p.load(B).0), (0, 0));
}

/// upstream: inflightload/producer_test.go::TestInFlightLoadProducer_ExcludeOutputTokens_StartOfStreamRelease
/// (output off: 1/4 → first chunk 1/0 → end 0/0), through the router.
#[test]
fn exclude_output_tokens_start_of_stream_release() {
    let mut router = token_load_router(json!({}), 1);
    let prompt = [1, 2, 3, 4];
    router.route(&request(3, &prompt), &[0], 0, &mut rng(1));
    assert_eq!(in_flight_of(router.plugins(), 0), (1, 4));
    router.first_chunk(3);
    assert_eq!(in_flight_of(router.plugins(), 0), (1, 0));
    router.end(3);
    assert_eq!(in_flight_of(router.plugins(), 0), (0, 0));
}

/// upstream: inflightload/producer_test.go::TestInFlightLoadProducer_ExcludeOutputTokens_PrefillReleasedAtStartOfStream
#[test]
fn exclude_output_tokens_prefill_released_at_start_of_stream() {
    let mut p = producer(None);
    p.add(1, &[(A, true, 4), (B, false, 4)]);
    assert_eq!((p.load(A), p.load(B)), ((1, 4), (1, 4)));
    p.first_chunk(1);
    assert_eq!((p.load(A), p.load(B)), ((0, 0), (1, 0)));
    p.end(1);
    assert_eq!(p.load(B), (0, 0));
}

/// upstream: inflightload/producer_test.go::TestInFlightLoadProducer_ExcludeOutputTokens_SingleChunk
/// (one chunk that both starts and ends the stream) and
/// ::TestInFlightLoadProducer_ExcludeOutputTokens_EndOfStreamWithoutStart.
#[test]
fn exclude_output_tokens_single_chunk_and_end_without_start() {
    let mut p = producer(None);
    p.add(1, &[(E, false, 4)]);
    p.first_chunk(1);
    p.end(1);
    assert_eq!(p.load(E), (0, 0));
    p.add(2, &[(E, false, 4)]);
    assert_eq!(p.load(E), (1, 4));
    p.end(2);
    assert_eq!(p.load(E), (0, 0));
    // The request's entry is gone: a late first chunk releases nothing more.
    p.add(3, &[(E, false, 4)]);
    p.first_chunk(2);
    assert_eq!(p.load(E), (1, 4));
}

/// upstream: inflightload/producer_test.go::TestInFlightLoadProducer_PrefixCacheDiscount (info
/// (1, 2, 4), 8 tokens, output on → 4 uncached + 12 output = 16).
#[test]
fn prefix_cache_discount() {
    let mut p = with_output();
    let tokens = p.estimate(8, info(1, 2, 4), None);
    assert_eq!(tokens, 16);
    p.add(1, &[(E, false, tokens)]);
    assert_eq!(p.load(E), (1, 16));
    p.end(1);
    assert_eq!(p.load(E), (0, 0));
}

/// upstream: inflightload/producer_test.go::TestInFlightLoadProducer_PrefixCacheDiscount_PerEndpoint
/// (A fully cached (2, 2, 4) → 0 + 12; B (0, 2, 4) → 8 + 12).
#[test]
fn prefix_cache_discount_per_endpoint() {
    let mut p = with_output();
    let (a, b) = (p.estimate(8, info(2, 2, 4), None), p.estimate(8, info(0, 2, 4), None));
    assert_eq!((a, b), (12, 20));
    p.add(1, &[(A, true, a), (B, false, b)]);
    assert_eq!((p.load(A).1, p.load(B).1), (12, 20));
    p.first_chunk(1);
    p.end(1);
    assert_eq!((p.load(A), p.load(B)), ((0, 0), (0, 0)));
}

/// upstream: inflightload/producer_test.go::TestInFlightLoadProducer_BalancedAddRelease_MultipleProfilesSameEndpoint
#[test]
fn balanced_add_release_multiple_profiles_same_endpoint() {
    let mut p = with_output();
    let tokens = p.estimate(4, None, None);
    p.add(1, &[(E, true, tokens), (E, false, tokens)]);
    assert_eq!(p.load(E), (2, 20));
    p.first_chunk(1);
    assert_eq!(p.load(E), (1, 10));
    p.end(1);
    assert_eq!(p.load(E), (0, 0));
}

/// upstream: inflightload/producer_test.go::TestInFlightLoadProducer_LateResponseAfterReap (a
/// second end after the first releases nothing twice), and the sequential half of
/// ::TestInFlightLoadProducer_ConcurrencyStress (5000 add/end pairs without a tokenized prompt
/// leave 0/0).
#[test]
fn late_end_and_many_requests_never_underflow() {
    let mut p = with_output();
    p.add(1, &[(E, false, 10)]);
    p.end(1);
    p.end(1);
    p.first_chunk(1);
    assert_eq!(p.load(E), (0, 0));
    for key in 0..5000 {
        p.add(100 + key, &[(E, false, p.estimate(0, None, None))]);
        p.end(100 + key);
    }
    assert_eq!(p.load(E), (0, 0));
}

/// upstream: inflightload/producer_test.go::TestUncachedInputTokens_Overestimate (5 tokens, info
/// (1, 2, 4): 4 uncached indexed tokens, the tail 5 − 8 < 0 counts 0).
#[test]
fn uncached_input_tokens_overestimate() {
    assert_eq!(producer(None).estimate(5, info(1, 2, 4), None), 4);
}

/// upstream: inflightload/producer_test.go::TestInFlightLoadProducerFactory_OutputRatio and
/// ::TestInFlightLoadProducerFactory_MaxEstimatedOutputTokens.
#[test]
fn factory_output_ratio_and_cap() {
    assert_eq!(with_output().estimate_output(10, None), 15);
    let ratio = |r: f64| producer(Some(json!({"addEstimatedOutputTokens": true, "outputRatio": r})));
    assert_eq!(ratio(2.0).estimate_output(10, None), 20);
    assert_eq!(ratio(0.0).estimate_output(10, None), 0);
    let e = refusal("inflight-load-producer", json!({"addEstimatedOutputTokens": true, "outputRatio": -1.0}));
    assert_eq!(
        (e.path.as_str(), e.reason.as_str()),
        ("outputRatio", "outputRatio must be non-negative, got -1")
    );
    let cap =
        |c: i64| producer(Some(json!({"addEstimatedOutputTokens": true, "maxEstimatedOutputTokens": c})));
    assert_eq!(cap(40).estimate_output(100, None), 40);
    assert_eq!(cap(1000).estimate_output(100, None), 150);
    let e = refusal("inflight-load-producer", json!({"maxEstimatedOutputTokens": -1}));
    assert_eq!(
        (e.path.as_str(), e.reason.as_str()),
        ("maxEstimatedOutputTokens", "maxEstimatedOutputTokens must be non-negative, got -1")
    );
    let e = refusal("inflight-load-producer", json!({"outputRatio": "1.5"}));
    assert!(e.reason.starts_with("failed to decode inflight-load-producer parameters: json:"), "{e}");
}

/// upstream: inflightload/token_estimator_test.go::TestSimpleTokenEstimator_Estimate (the input
/// plus its output estimate: 0 → 0, 1 → 3, 10 → 25; the nil/empty request cases are all "no
/// tokenized prompt", i.e. 0 input tokens), ::TestSimpleTokenEstimator_Estimate_HonorsClientCap
/// and ::TestSimpleTokenEstimator_Estimate_CustomConfig.
#[test]
fn simple_token_estimator_estimate() {
    let p = with_output();
    assert_eq!([0, 1, 10].map(|n| p.estimate(n, None, None)), [0, 3, 25]);
    assert_eq!(p.estimate(10, None, Some(3)), 13);
    let custom = producer(Some(json!({"addEstimatedOutputTokens": true, "outputRatio": 2.0})));
    assert_eq!([0, 4, 10].map(|n| custom.estimate(n, None, None)), [0, 12, 30]);
}

/// upstream: inflightload/token_estimator_test.go::TestSimpleTokenEstimator_EstimateOutput (every
/// case whose inputs are representable: token counts and caps are unsigned here, so "Negative
/// input" and "Negative client cap ignored" have no counterpart).
#[test]
fn simple_token_estimator_estimate_output() {
    let with = |ratio: f64, cap: Option<i64>| {
        let mut params = json!({"addEstimatedOutputTokens": true, "outputRatio": ratio});
        if let Some(c) = cap {
            params["maxEstimatedOutputTokens"] = json!(c);
        }
        producer(Some(params))
    };
    // (case, ratio, operator cap, input, client cap, expected)
    type Case = (&'static str, f64, Option<i64>, u64, Option<u64>, u64);
    let cases: [Case; 10] = [
        ("Zero input", 2.0, None, 0, None, 0),
        ("Positive input, no caps", 2.0, None, 8, None, 16),
        ("Zero ratio", 0.0, None, 100, None, 0),
        ("Client cap binds", 1.5, None, 100, Some(50), 50),
        ("Client cap looser than estimate", 1.5, None, 100, Some(500), 150),
        ("Client cap zero binds", 1.5, None, 100, Some(0), 0),
        ("Operator cap binds", 1.5, Some(40), 100, None, 40),
        ("Both caps, client tighter", 1.5, Some(80), 100, Some(30), 30),
        ("Both caps, operator tighter", 1.5, Some(30), 100, Some(80), 30),
        ("Both caps, estimate tightest", 1.5, Some(500), 100, Some(500), 150),
    ];
    for (name, ratio, op, input, client, expected) in cases {
        assert_eq!(with(ratio, op).estimate_output(input, client), expected, "{name}");
    }
}

/// upstream: tokenizer/tokenizer_test.go::TestPluginFactory_Validation (every case but "invalid
/// JSON", which cannot reach a factory here: the document is parsed before loading), plus the
/// factory's "only one backend" rule.
#[test]
fn token_producer_factory_validation() {
    build("token-producer", Some(json!({})));
    build("token-producer", None);
    build(
        "token-producer",
        Some(json!({"estimate": {"image": {"mode": "static", "static": {"staticToken": 8}}}})),
    );
    let e = refusal("token-producer", json!({"vllm": {}}));
    assert_eq!(e.path, "modelName");
    assert_eq!(e.reason, "invalid configuration for 'token-producer' plugin: 'modelName' must be specified");
    let e = refusal("token-producer", json!({"estimate": {"image": {"mode": "bogus"}}}));
    assert_eq!(
        e.reason,
        "invalid configuration for 'token-producer' plugin: estimate.image.mode must be \"dynamic\" or \"static\""
    );
    let e = refusal("token-producer", json!({"estimate": {}, "modelName": "m"}));
    assert_eq!(
        e.reason,
        "invalid configuration for 'token-producer' plugin: only one of 'estimate', 'vllm', or 'udsTokenizerConfig' may be set"
    );
    let e = refusal("token-producer", json!({"modelName": 5}));
    assert!(
        e.reason.starts_with("failed to parse the parameters of the 'token-producer' plugin - json:"),
        "{e}"
    );
}
