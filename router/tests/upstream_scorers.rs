//! Upstream's scorer tests (`pkg/epp/framework/plugins/scheduling/scorer/…`), re-expressed over
//! the ported scorers. Endpoints, in-flight counters and prefix match info are set through the
//! public API; tolerances are upstream's.

mod common;

use blis_router::plugins::PluginKind;
use blis_router::plugins::scorers::NoHitLru;
use blis_router::view::Attributes;
use blis_router::{Decision, Router};
use common::*;
use serde_json::json;

fn queue_case(queues: &[u64], expected: &[f64]) {
    let endpoints: Vec<_> =
        queues.iter().enumerate().map(|(i, &q)| loaded(&format!("p{i}"), q, 0, 0.0)).collect();
    let got = with_view(&endpoints, &Attributes::default(), &[], 0, |v| {
        scored(v, &build("queue-scorer", None), &all(endpoints.len()))
    });
    assert_near(&got, expected, 1e-4);
}

/// upstream: queuedepth/queue_test.go::TestQueueScorer (all three cases; all equal gives 1.0).
#[test]
fn queue_scorer() {
    queue_case(&[10, 5, 0], &[0.0, 0.5, 1.0]); // "Different queue sizes"
    queue_case(&[5, 5], &[1.0, 1.0]); // "Same queue sizes"
    queue_case(&[0, 0], &[1.0, 1.0]); // "Zero queue sizes"
}

fn kv_case(kvs: &[f64], expected: &[f64]) {
    let endpoints: Vec<_> =
        kvs.iter().enumerate().map(|(i, &kv)| loaded(&format!("p{i}"), 0, 0, kv)).collect();
    let got = with_view(&endpoints, &Attributes::default(), &[], 0, |v| {
        scored(v, &build("kv-cache-utilization-scorer", None), &all(endpoints.len()))
    });
    assert_near(&got, expected, 1e-4);
}

/// upstream: kvcacheutilization/kvcache_utilization_test.go::TestKvCacheUtilizationScorer (all
/// four cases; not min-max normalised).
#[test]
fn kv_cache_utilization_scorer() {
    kv_case(&[0.8, 0.5, 0.0], &[0.2, 0.5, 1.0]); // "Different KV cache utilization"
    kv_case(&[0.6, 0.6], &[0.4, 0.4]); // "Same KV cache utilization"
    kv_case(&[0.0, 0.0], &[1.0, 1.0]); // "Zero KV cache utilization"
    kv_case(&[1.0, 0.5], &[0.0, 0.5]); // "Full KV cache utilization"
}

fn running_case(running: &[u64], expected: &[f64]) {
    let endpoints: Vec<_> =
        running.iter().enumerate().map(|(i, &r)| loaded(&format!("p{i}"), 0, r, 0.0)).collect();
    let got = with_view(&endpoints, &Attributes::default(), &[], 0, |v| {
        scored(v, &build("running-requests-size-scorer", None), &all(endpoints.len()))
    });
    assert_near(&got, expected, 1e-4);
}

/// upstream: runningrequests/running_test.go::TestRunningRequestsSizeScorer (all three cases).
#[test]
fn running_requests_size_scorer() {
    running_case(&[10, 5, 0], &[0.0, 0.5, 1.0]); // "Different running queue sizes"
    running_case(&[5, 5], &[1.0, 1.0]); // "Same running queue sizes"
    running_case(&[0, 0], &[1.0, 1.0]); // "Zero running queue sizes"
}

/// upstream: loadaware/load_aware_test.go::TestLoadBasedScorer "load based scorer" (threshold
/// 10; exact).
#[test]
fn load_aware_scorer() {
    let endpoints = [loaded("pod-a", 2, 0, 0.0), loaded("pod-b", 0, 0, 0.0), loaded("pod-c", 15, 0, 0.0)];
    let kind = build("load-aware-scorer", Some(json!({"threshold": 10})));
    let got = with_view(&endpoints, &Attributes::default(), &[], 0, |v| scored(v, &kind, &all(3)));
    assert_eq!(got, vec![0.5 * (1.0 - 2.0 / 10.0), 0.5, 0.0]);
    assert_eq!(got[0], 0.4);
}

/// A token-load scorer (Q = 1000) reading the in-flight producer at plugin index 0.
fn token_load(producer: usize) -> PluginKind {
    let mut kind = build("token-load-scorer", Some(json!({"queueThresholdTokens": 1000})));
    if let PluginKind::TokenLoadScorer(s) = &mut kind {
        s.producer = Some(producer);
    }
    kind
}

/// upstream: tokenload/token_load_test.go::TestTokenLoadScorer "in-flight load only",
/// "in-flight load plus current request impact", "missing data key degrades gracefully".
/// ("typed nil attribute handles gracefully" has no Rust counterpart: an attribute is either
/// written or absent, which is the "missing data key" case.)
#[test]
fn token_load_scorer() {
    let endpoints = [endpoint("pod1", &[]), endpoint("pod2", &[]), endpoint("pod3", &[])];
    // "in-flight load only": pod1 nothing, pod2 500 tokens, pod3 1000 tokens.
    let plugins = [in_flight(&[(0, 0), (1, 500), (1, 1000)])];
    let got =
        with_view(&endpoints, &Attributes::default(), &plugins, 0, |v| scored(v, &token_load(0), &all(3)));
    assert_near(&got, &[1.0, 0.5, 0.0], 1e-4);
    // "in-flight load plus current request impact": 0/250/750 in flight plus 250 uncached each.
    let plugins = [in_flight(&[(0, 0), (1, 250), (1, 750)])];
    let mut attributes = Attributes::default();
    attributes.uncached_slots(0, 3).iter_mut().for_each(|s| *s = Some(250));
    let got = with_view(&endpoints, &attributes, &plugins, 0, |v| scored(v, &token_load(0), &all(3)));
    assert_near(&got, &[0.75, 0.5, 0.0], 1e-4);
    // "missing data key degrades gracefully": no producer resolved at all.
    let kind = build("token-load-scorer", Some(json!({"queueThresholdTokens": 1000})));
    let got = with_view(&endpoints[..1], &Attributes::default(), &[], 0, |v| scored(v, &kind, &all(1)));
    assert_eq!(got, vec![1.0]);
}

/// An active-request scorer built from `params`, reading the producer at plugin index 0.
fn active_request(params: Option<serde_json::Value>) -> PluginKind {
    let mut kind = build("active-request-scorer", params);
    if let PluginKind::ActiveRequestScorer(s) = &mut kind {
        s.producer = Some(0);
    }
    kind
}

/// upstream: activerequest/active_request_test.go::TestActiveRequestScorer_Score (all three
/// cases; the waiting queues the fixture carries are ignored by the scorer).
#[test]
fn active_request_scorer_score() {
    let endpoints = [loaded("pod-a", 2, 0, 0.0), loaded("pod-b", 0, 0, 0.0), loaded("pod-c", 15, 0, 0.0)];
    let kind = active_request(None);
    let case = |loads: &[(u64, u64)]| {
        let plugins = [in_flight(loads)];
        with_view(&endpoints, &Attributes::default(), &plugins, 0, |v| scored(v, &kind, &all(3)))
    };
    // "no load attribute set"
    let none = build("active-request-scorer", None);
    let got = with_view(&endpoints, &Attributes::default(), &[], 0, |v| scored(v, &none, &all(3)));
    assert_eq!(got, vec![1.0, 1.0, 1.0]);
    // "all endpoints have different request counts"
    assert_eq!(case(&[(3, 0), (0, 0), (6, 0)]), vec![0.5, 1.0, 0.0]);
    // "some endpoints have load data" (b has none: 0 requests)
    assert_eq!(case(&[(4, 0), (0, 0), (1, 0)]), vec![0.0, 1.0, 0.75]);
}

/// upstream: activerequest/active_request_test.go::TestActiveRequest_IdleThresholdAndMaxBusyScore
/// "binary mode: idleThreshold=0, maxBusyScore=0" and "hybrid mode: idleThreshold=1,
/// maxBusyScore=0.5".
#[test]
fn active_request_idle_threshold_and_max_busy_score() {
    let endpoints = [endpoint("A", &[]), endpoint("B", &[]), endpoint("C", &[])];
    let binary = active_request(Some(json!({"idleThreshold": 0, "maxBusyScore": 0.0})));
    let plugins = [in_flight(&[(0, 0), (0, 0)])];
    let got =
        with_view(&endpoints[..2], &Attributes::default(), &plugins, 0, |v| scored(v, &binary, &all(2)));
    assert_eq!(got, vec![1.0, 1.0]);
    let plugins = [in_flight(&[(1, 0), (0, 0)])];
    let got =
        with_view(&endpoints[..2], &Attributes::default(), &plugins, 0, |v| scored(v, &binary, &all(2)));
    assert_eq!(got, vec![0.0, 1.0], "busy pod scores 0 in binary mode");
    let hybrid = active_request(Some(json!({"idleThreshold": 1, "maxBusyScore": 0.5})));
    let plugins = [in_flight(&[(1, 0), (2, 0), (0, 0)])];
    let got = with_view(&endpoints, &Attributes::default(), &plugins, 0, |v| scored(v, &hybrid, &all(3)));
    assert_eq!(got, vec![1.0, 0.0, 1.0]);
}

/// upstream: activerequest/active_request_test.go::TestActiveRequest_DefaultParamsProduceContinuousScores
/// (an empty parameter object means maxBusyScore 1.0, not 0).
#[test]
fn active_request_default_params_produce_continuous_scores() {
    let endpoints = [endpoint("light", &[]), endpoint("heavy", &[])];
    let kind = active_request(Some(json!({})));
    let plugins = [in_flight(&[(3, 0), (11, 0)])];
    let got = with_view(&endpoints, &Attributes::default(), &plugins, 0, |v| scored(v, &kind, &all(2)));
    assert!((got[0] - 8.0 / 11.0).abs() < 1e-3, "{got:?}");
    assert_eq!(got[1], 0.0);
}

/// upstream: activerequest/active_request_test.go::TestActiveRequestScorer_UsesInFlightLoadProducerLifecycle.
/// The loader creates the default `inflight-load-producer` the scorer requires; req-1 is routed
/// to A (the only candidate, as upstream's result targets A), then both endpoints are scored:
/// A 0.0, B 1.0; after the end of its stream both score 1.0.
#[test]
fn active_request_uses_in_flight_load_producer_lifecycle() {
    let config = load_json(json!({
        "apiVersion": "llm-d.ai/v1alpha1", "kind": "EndpointPickerConfig",
        "plugins": [{"type": "active-request-scorer"}],
        "schedulingProfiles": [{"name": "default", "plugins": [{"pluginRef": "active-request-scorer"}]}],
    }))
    .unwrap();
    let mut router = Router::new(config, vec![endpoint("A", &[]), endpoint("B", &[])]);
    let prompt = [1, 2, 3, 4];
    let decision = router.route(&request(1, &prompt), &[0], 0, &mut rng(1));
    assert!(matches!(decision, Decision::Routed { endpoint: 0, .. }), "{decision:?}");
    assert_eq!(in_flight_of(router.plugins(), 0).0, 1);
    assert_eq!(in_flight_of(router.plugins(), 1).0, 0);
    let score_both = |router: &Router| {
        let scorer = router.plugins().iter().find(|p| p.type_name == "active-request-scorer").unwrap();
        with_view(router.endpoints(), &Attributes::default(), router.plugins(), 0, |v| {
            scored(v, &scorer.kind, &all(2))
        })
    };
    assert_eq!(score_both(&router), vec![0.0, 1.0]);
    router.end(1);
    assert_eq!(in_flight_of(router.plugins(), 0), (0, 0));
    assert_eq!(score_both(&router), vec![1.0, 1.0]);
}

/// upstream: activerequest/active_request_test.go::TestNewActiveRequestScorer_DeprecatedRequestTimeoutIgnored
/// and ::TestActiveRequestScorer_Consumes (one required key, the default `InFlightLoad` key).
#[test]
fn active_request_factory_and_consumes() {
    let kind = build("active-request-scorer", Some(json!({"requestTimeout": "invalid"})));
    let keys: Vec<String> = kind.requires().iter().map(ToString::to_string).collect();
    assert_eq!(keys, ["InFlightLoad/inflight-load-producer"]);
    let PluginKind::ActiveRequestScorer(s) =
        build("active-request-scorer", Some(json!({"idleThreshold": -3})))
    else {
        unreachable!()
    };
    assert_eq!(s.idle_threshold, 0, "a negative idleThreshold becomes 0");
    let PluginKind::ActiveRequestScorer(s) =
        build("active-request-scorer", Some(json!({"maxBusyScore": 1.5})))
    else {
        unreachable!()
    };
    assert_eq!(s.max_busy_score, 1.0, "an out-of-range maxBusyScore is ignored");
    let e = refusal("active-request-scorer", json!({"idleThreshold": "x"}));
    assert!(
        e.reason.starts_with("failed to parse the parameters of the 'active-request-scorer' scorer - json:"),
        "{e}"
    );
}

/// Endpoints `default/<name>` for the LRU tests, and a warm attribute table where `warm`
/// endpoints carry match info (5, 10, 1) from the producer at plugin index 0.
fn lru_fixture(names: &[&str], warm: &[usize]) -> (Vec<blis_router::Endpoint>, Attributes) {
    let endpoints: Vec<_> = names.iter().map(|n| endpoint(&format!("default/{n}"), &[])).collect();
    let mut attributes = Attributes::default();
    let slots = attributes.prefix_slots(0, endpoints.len());
    for &w in warm {
        slots[w] = Some(blis_router::plugins::prefix::PrefixMatchInfo {
            match_blocks: 5,
            total_blocks: 10,
            block_size_tokens: 1,
            cached_block_count: 5,
        });
    }
    (endpoints, attributes)
}

fn lru_scores(
    lru: &NoHitLru,
    endpoints: &[blis_router::Endpoint],
    attributes: &Attributes,
    candidates: &[u32],
) -> Vec<f64> {
    let kind = PluginKind::NoHitLruScorer(lru.clone());
    with_view(endpoints, attributes, &[], 0, |v| scored(v, &kind, candidates))
}

fn reading_producer_0() -> NoHitLru {
    let mut lru = NoHitLru::new(1024);
    lru.producer = Some(0);
    lru
}

/// upstream: nohitlru/no_hit_lru_test.go::TestNoHitLRUScorer (all three cases; exact).
#[test]
fn no_hit_lru_scorer() {
    let (endpoints, cold) = lru_fixture(&["pod-a", "pod-b", "pod-c"], &[]);
    let lru = reading_producer_0();
    assert_eq!(lru_scores(&lru, &endpoints, &cold, &all(3)), vec![1.0, 0.5, 0.0]);
    let (_, warm) = lru_fixture(&["pod-a", "pod-b", "pod-c"], &[0]);
    assert_eq!(lru_scores(&lru, &endpoints, &warm, &all(3)), vec![0.5, 0.5, 0.5]);
    assert_eq!(lru_scores(&lru, &endpoints, &cold, &[0]), vec![1.0]);
}

/// upstream: nohitlru/no_hit_lru_test.go::TestNoHitLRUPreferLeastRecentlyUsedAfterColdRequests
/// (all five steps, one scorer; "pre-request to X" is the cycle's touch of a cold request's
/// target; a warm request never touches).
#[test]
fn no_hit_lru_prefers_least_recently_used_after_cold_requests() {
    let (endpoints, cold) = lru_fixture(&["pod-a", "pod-b", "pod-c"], &[]);
    let (_, warm) = lru_fixture(&["pod-a", "pod-b", "pod-c"], &[0]);
    let mut lru = reading_producer_0();
    // 1. "initial cold request seeds cache"
    let kind = PluginKind::NoHitLruScorer(lru.clone());
    assert!(with_view(&endpoints, &cold, &[], 0, |v| match &kind {
        PluginKind::NoHitLruScorer(s) => s.is_cold(v, &all(3)),
        _ => unreachable!(),
    }));
    lru.touch("default/pod-a");
    // 2. "unused endpoints rank above existing ones": A, B, C → 0.0, 1.0, 0.5.
    assert_eq!(lru_scores(&lru, &endpoints, &cold, &all(3)), vec![0.0, 1.0, 0.5]);
    // 3. "warm request leaves LRU untouched"
    assert_eq!(lru_scores(&lru, &endpoints, &warm, &all(3)), vec![0.5, 0.5, 0.5]);
    let after_warm = lru_scores(&lru, &endpoints, &cold, &all(3));
    assert!(after_warm[1] > after_warm[0]);
    // 4. "second cold request rotates to endpointB": LRU [A, B] → A 0.5, B 0.0, C 1.0.
    lru.touch("default/pod-b");
    assert_eq!(lru_scores(&lru, &endpoints, &cold, &all(3)), vec![0.5, 0.0, 1.0]);
    // 5. "third cold request rotates back to endpointA": LRU [A, B, C] → 1.0, 0.5, 0.0.
    lru.touch("default/pod-c");
    assert_eq!(lru_scores(&lru, &endpoints, &cold, &all(3)), vec![1.0, 0.5, 0.0]);
}

/// upstream: nohitlru/no_hit_lru_test.go::TestNoHitLRUPrefillDecodeTracking "non-P/D scenario -
/// only primary profile exists", through the router: two cold requests over [decode-a,
/// decode-b] go to different endpoints, the second to the one the first did not use. (The P/D
/// case needs a prefill profile, which the single-profile handler cannot have; the nil and
/// empty result cases have no Rust counterpart: the cycle always hands a result.)
#[test]
fn no_hit_lru_primary_profile_tracking_through_the_router() {
    let config = load_json(json!({
        "apiVersion": "llm-d.ai/v1alpha1", "kind": "EndpointPickerConfig",
        "plugins": [{"type": "no-hit-lru-scorer"}],
        "schedulingProfiles": [{"name": "default", "plugins": [{"pluginRef": "no-hit-lru-scorer"}]}],
    }))
    .unwrap();
    let mut router =
        Router::new(config, vec![endpoint("default/decode-a", &[]), endpoint("default/decode-b", &[])]);
    let mut r = rng(3);
    let first = router.route(&request(1, &[]), &[0, 1], 0, &mut r);
    // Cold, both never used: the first in candidate order scores 1.0, the second 0.0.
    assert_eq!(first, Decision::Routed { endpoint: 0, targets: smallvec::smallvec![0], score: 1.0 });
    let second = router.route(&request(2, &[]), &[0, 1], 0, &mut r);
    assert_eq!(second, Decision::Routed { endpoint: 1, targets: smallvec::smallvec![1], score: 1.0 });
    let third = router.route(&request(3, &[]), &[0, 1], 0, &mut r);
    assert_eq!(third, Decision::Routed { endpoint: 0, targets: smallvec::smallvec![0], score: 1.0 });
}

/// upstream: nohitlru/no_hit_lru_test.go::TestNoHitLRUEdgeCases ("empty endpoints list", "nil
/// endpoints list" → empty; "single endpoint returns 1.0"), ::TestNoHitLRUBasicFunctionality
/// (cold [a, b] → 1.0 and 0.0) and ::TestNoPrefixCacheStateFound (single cold endpoint → 1.0).
#[test]
fn no_hit_lru_edge_cases() {
    let (endpoints, cold) = lru_fixture(&["pod-a", "pod-b"], &[]);
    let lru = reading_producer_0();
    assert!(lru_scores(&lru, &endpoints, &cold, &[]).is_empty());
    assert_eq!(lru_scores(&lru, &endpoints, &cold, &[0]), vec![1.0]);
    assert_eq!(lru_scores(&lru, &endpoints, &cold, &all(2)), vec![1.0, 0.0]);
}

/// upstream: nohitlru/no_hit_lru_test.go::TestNoHitLRUFactoryDependencyValidation (the factory
/// has no dependency check) and the factory's defaults (`lruSize` ≤ 0 → 1024).
#[test]
fn no_hit_lru_factory() {
    let PluginKind::NoHitLruScorer(s) = build("no-hit-lru-scorer", None) else { unreachable!() };
    assert_eq!(s.lru_size, 1024);
    let PluginKind::NoHitLruScorer(s) = build("no-hit-lru-scorer", Some(json!({"lruSize": -5}))) else {
        unreachable!()
    };
    assert_eq!(s.lru_size, 1024);
    let keys: Vec<String> =
        build("no-hit-lru-scorer", None).requires().iter().map(ToString::to_string).collect();
    assert_eq!(keys, ["PrefixCacheMatchInfo/approx-prefix-cache-producer"]);
}

/// The LRU capacity bounds it: touching more endpoints than `lruSize` forgets the oldest, which
/// then counts as never used again.
#[test]
fn no_hit_lru_capacity_forgets_the_oldest() {
    let (endpoints, cold) = lru_fixture(&["pod-a", "pod-b", "pod-c"], &[]);
    let mut lru = NoHitLru::new(2);
    lru.producer = Some(0);
    lru.touch("default/pod-a");
    lru.touch("default/pod-b");
    lru.touch("default/pod-c");
    // LRU [B, C]; A is never used again: A 1.0 (fresh 0), B rank 1+0 → 0.5, C rank 1+1 → 0.0.
    assert_eq!(lru_scores(&lru, &endpoints, &cold, &all(3)), vec![1.0, 0.5, 0.0]);
}
