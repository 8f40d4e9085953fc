//! Upstream's saturation-detector tests (`flowcontrol/saturationdetector/utilization/
//! detector_test.go`) and legacy admission (`requestcontrol/admission_test.go`), the latter
//! through `Router::route`. Upstream reads the wall clock for staleness; here metrics are
//! stamped in simulated time and the view's `now` is the test's.

mod common;

use blis_router::plugins::PluginKind;
use blis_router::plugins::saturation::UtilizationDetector;
use blis_router::view::Attributes;
use blis_router::{Decision, Endpoint, Router};
use common::*;
use serde_json::{Value, json};

const NOW: u64 = 10_000_000;

fn detector(params: Value) -> UtilizationDetector {
    match build("utilization-detector", Some(params)) {
        PluginKind::UtilizationDetector(d) => d,
        other => panic!("{other:?}"),
    }
}

/// An endpoint scraped (q, kv) `age_ms` before `NOW`; `None` for one never scraped.
fn pod(name: &str, reading: Option<(u64, f64, u64)>) -> Endpoint {
    let mut e = endpoint(&format!("ns1/{name}"), &[]);
    if let Some((q, kv, age_ms)) = reading {
        e.metrics.apply(&scrape(q, 0, kv), blis_router::EngineType::Vllm, NOW - age_ms * 1000);
    }
    e
}

/// upstream: utilization/detector_test.go::TestDetector_Saturation (all twelve cases; Q 5,
/// KV 0.90, staleness 100 ms; ±1e-4).
#[test]
fn detector_saturation() {
    let d = detector(
        json!({"queueDepthThreshold": 5, "kvCacheUtilThreshold": 0.90, "metricsStalenessThreshold": "100ms"}),
    );
    type Reading = Option<(u64, f64, u64)>;
    let cases: [(&str, Vec<Reading>, f64); 12] = [
        ("No candidate pods", vec![], 1.0),
        ("Single pod with good capacity", vec![Some((2, 0.5, 0))], 0.5 / 0.9),
        ("Single pod with stale metrics", vec![Some((1, 0.1, 200))], 1.0),
        ("Single pod with high queue depth", vec![Some((10, 0.1, 0))], 2.0),
        ("Single pod with high KV cache utilization", vec![Some((1, 0.95, 0))], 0.95 / 0.90),
        ("Single pod with nil metrics", vec![None], 1.0),
        (
            "Multiple pods, all good capacity",
            vec![Some((1, 0.1, 0)), Some((0, 0.2, 0))],
            (0.2 + 0.2 / 0.9) / 2.0,
        ),
        ("Multiple pods, one good, one stale", vec![Some((1, 0.1, 0)), Some((0, 0.2, 300))], 0.6),
        ("Multiple pods, one good, one bad (high queue)", vec![Some((1, 0.1, 0)), Some((15, 0.2, 0))], 1.6),
        (
            "Multiple pods, all bad capacity",
            vec![Some((1, 0.1, 200)), Some((20, 0.2, 0)), Some((1, 0.99, 0))],
            (1.0 + 4.0 + 1.1) / 3.0,
        ),
        ("Queue depth exactly at threshold", vec![Some((5, 0.1, 0))], 1.0),
        ("Metrics age just over staleness threshold", vec![Some((1, 0.1, 101))], 1.0),
    ];
    for (name, readings, expected) in cases {
        let pods: Vec<Endpoint> =
            readings.iter().enumerate().map(|(i, r)| pod(&format!("p{i}"), *r)).collect();
        let got = with_view(&pods, &Attributes::default(), &[], NOW, |v| d.saturation(v, &all(pods.len())));
        assert!((got - expected).abs() < 1e-4, "{name}: {got} vs {expected}");
    }
}

/// upstream: utilization/detector_test.go::TestDetector_Filter (all seven cases; Q 5, KV 0.80,
/// staleness 100 ms, headroom 0.2; counts).
#[test]
fn detector_filter() {
    let d = detector(json!({
        "queueDepthThreshold": 5, "kvCacheUtilThreshold": 0.80, "metricsStalenessThreshold": "100ms", "headroom": 0.2
    }));
    // (case, pods as (queue, kv, age ms), survivors)
    type Case = (&'static str, Vec<(u64, f64, u64)>, usize);
    let cases: [Case; 7] = [
        ("All pass - under thresholds", vec![(1, 0.1, 0), (4, 0.7, 0)], 2),
        ("Pass - at threshold but under burst", vec![(5, 0.8, 0)], 1),
        ("Pass - in headroom burst", vec![(5, 0.9, 0)], 1),
        ("Filtered - exceeds queue burst", vec![(7, 0.1, 0), (1, 0.1, 0)], 1),
        ("Filtered - exceeds KV burst", vec![(1, 0.97, 0), (1, 0.5, 0)], 1),
        ("Pass - all stale (Fail open at pool level)", vec![(1, 0.1, 200), (1, 0.1, 200)], 2),
        ("Pass - all saturated (Fail open at pool level)", vec![(10, 0.1, 0), (1, 0.99, 0)], 2),
    ];
    for (name, readings, expected) in cases {
        let pods: Vec<Endpoint> =
            readings.iter().enumerate().map(|(i, &r)| pod(&format!("p{i}"), Some(r))).collect();
        let mut out = Vec::new();
        with_view(&pods, &Attributes::default(), &[], NOW, |v| d.filter(v, &all(pods.len()), &mut out));
        assert_eq!(out.len(), expected, "{name}");
    }
}

/// upstream: utilization/detector_test.go::TestUtilizationDetectorFactory (three accept, six
/// refuse), with upstream's texts.
#[test]
fn detector_factory() {
    for params in
        [json!({"queueDepthThreshold": 5, "kvCacheUtilThreshold": 0.8}), json!({}), json!({"headroom": 2.0})]
    {
        detector(params);
    }
    let warned = blis_router::plugins::build("utilization-detector", Some(&json!({"headroom": 2.0})))
        .unwrap()
        .unwrap();
    assert_eq!(
        warned.warnings,
        [
            "Unusually high headroom configured; verify value is a fraction, not a percentage (headroom 2, effectiveBurst 200%)"
        ]
    );
    let cases = [
        (
            json!({"queueDepthThreshold": 0}),
            "queueDepthThreshold",
            "queueDepthThreshold must be strictly positive, got 0",
        ),
        (
            json!({"kvCacheUtilThreshold": 1.5}),
            "kvCacheUtilThreshold",
            "kvCacheUtilThreshold must be in (0.0, 1.0], got 1.500000",
        ),
        (
            json!({"kvCacheUtilThreshold": 0.0}),
            "kvCacheUtilThreshold",
            "kvCacheUtilThreshold must be in (0.0, 1.0], got 0.000000",
        ),
        (
            json!({"metricsStalenessThreshold": "0s"}),
            "metricsStalenessThreshold",
            "metricsStalenessThreshold must be strictly positive, got 0s",
        ),
        (json!({"headroom": -0.5}), "headroom", "headroom must be a non-negative value, got -0.500000"),
    ];
    for (params, path, reason) in cases {
        let e = refusal("utilization-detector", params.clone());
        assert_eq!(e.path, path, "{params}");
        assert_eq!(e.reason, format!("invalid utilization detector configuration: {reason}"), "{params}");
    }
    let e = refusal("utilization-detector", json!({"queueDepthThreshold": "invalid_type"}));
    assert_eq!(e.path, "queueDepthThreshold");
    assert!(e.reason.starts_with("failed to unmarshal utilization detector config: json:"), "{e}");
}

/// A router on the default config over `pods`.
fn default_router(pods: Vec<Endpoint>) -> Router {
    Router::new(blis_router::load(None, Default::default()).unwrap(), pods)
}

/// upstream: requestcontrol/admission_test.go::TestLegacyAdmissionController_Admit (all four
/// cases) through the default config's utilization detector: "saturated" is one endpoint
/// never scraped (stale counts as full), "not saturated" one scraped just now with room.
/// ResourceExhausted is HTTP 429.
#[test]
fn legacy_admission_controller_admit() {
    let saturated = || default_router(vec![endpoint("ns1/pod", &[])]);
    let fresh = || {
        let mut r = default_router(vec![endpoint("ns1/pod", &[])]);
        r.record_scrape(0, &scrape(0, 0, 0.1), NOW);
        r
    };
    let rejected =
        Decision::Refused { status: 429, reason: "system saturated, sheddable request dropped".to_owned() };
    let at = |priority: i64| blis_router::RoutingRequest { priority, ..request(1, &[]) };
    // "non_sheddable_saturated_admit"
    assert!(matches!(
        saturated().route(&at(0), &[0], NOW, &mut rng(1)),
        Decision::Routed { endpoint: 0, .. }
    ));
    // "sheddable_not_saturated_admit"
    assert!(matches!(fresh().route(&at(-1), &[0], NOW, &mut rng(1)), Decision::Routed { endpoint: 0, .. }));
    // "sheddable_saturated_reject"
    assert_eq!(saturated().route(&at(-1), &[0], NOW, &mut rng(1)), rejected);
    // "sheddable_no_pods_reject": the detector reads no candidates as saturated.
    assert_eq!(fresh().route(&at(-1), &[], NOW, &mut rng(1)), rejected);
    // A non-sheddable request with no candidates is not admission's business: 503.
    assert_eq!(
        fresh().route(&at(0), &[], NOW, &mut rng(1)),
        Decision::Refused {
            status: 503,
            reason: "failed to find endpoint candidates for serving the request".to_owned()
        }
    );
}

// ---- concurrency-detector -------------------------------------------------------------------

/// (case, per-endpoint in-flight (requests, tokens), expected saturation)
type LoadCase = (&'static str, &'static [(u64, u64)], f64);

fn concurrency(params: Value) -> blis_router::plugins::saturation::ConcurrencyDetector {
    match build("concurrency-detector", Some(params)) {
        PluginKind::ConcurrencyDetector(mut d) => {
            d.producer = Some(0);
            d
        }
        other => panic!("{other:?}"),
    }
}

/// Saturation and filter survivors of `d` over endpoints holding `loads` (requests, tokens) in
/// the in-flight producer.
fn concurrency_view(
    d: &blis_router::plugins::saturation::ConcurrencyDetector,
    loads: &[(u64, u64)],
) -> (f64, Vec<u32>) {
    let pods: Vec<Endpoint> = (0..loads.len()).map(|i| endpoint(&format!("endpoint-{i}"), &[])).collect();
    let plugins = [in_flight(loads)];
    let mut kept = Vec::new();
    let saturation = with_view(&pods, &Attributes::default(), &plugins, NOW, |v| {
        d.filter(v, &all(pods.len()), &mut kept);
        d.saturation(v, &all(pods.len()))
    });
    (saturation, kept)
}

/// upstream: concurrency/detector_test.go::TestConcurrencyDetectorFactory (all nine cases), with
/// upstream's texts (every failed check joined, as `errors.Join` does).
#[test]
fn concurrency_detector_factory() {
    for params in [
        json!({"maxConcurrency": 50, "headroom": 0.2}),
        json!({}),
        json!({"concurrencyMode": "hybrid", "maxConcurrency": 10, "maxTokenConcurrency": 100}),
        json!({"headroom": 2.0}),
    ] {
        concurrency(params);
    }
    let cases = [
        (json!({"maxConcurrency": 0}), "maxConcurrency", "maxConcurrency must be strictly positive, got 0"),
        (
            json!({"maxTokenConcurrency": 0}),
            "maxTokenConcurrency",
            "maxTokenConcurrency must be strictly positive, got 0",
        ),
        (json!({"headroom": -0.5}), "headroom", "headroom must be a non-negative value, got -0.500000"),
        (json!({"concurrencyMode": "magic"}), "concurrencyMode", "unsupported concurrencyMode: \"magic\""),
        (
            json!({"maxConcurrency": -1, "concurrencyMode": "magic"}),
            "maxConcurrency",
            "maxConcurrency must be strictly positive, got -1\nunsupported concurrencyMode: \"magic\"",
        ),
    ];
    for (params, path, reason) in cases {
        let e = refusal("concurrency-detector", params.clone());
        assert_eq!(e.path, path, "{params}");
        assert_eq!(e.reason, format!("invalid concurrency detector configuration: {reason}"), "{params}");
    }
    let e = refusal("concurrency-detector", json!({"maxConcurrency": "invalid_type"}));
    assert!(e.reason.starts_with("failed to unmarshal concurrency detector config: json:"), "{e}");
}

/// upstream: concurrency/detector_test.go::TestDetector_Saturation (requests mode, cap 10; all
/// eight cases: the pool's in-flight requests over its capacity, 1.0 for no candidates; an
/// endpoint the producer never saw counts as empty).
#[test]
fn concurrency_detector_saturation() {
    let d = concurrency(json!({"maxConcurrency": 10}));
    let cases: [LoadCase; 7] = [
        ("single_endpoint_empty", &[(0, 0)], 0.0),
        ("single_endpoint_half_full", &[(5, 0)], 0.5),
        ("single_endpoint_full", &[(10, 0)], 1.0),
        ("multi_endpoint_mixed_load", &[(10, 0), (0, 0)], 0.5),
        ("multi_endpoint_overloaded", &[(15, 0), (5, 0)], 1.0),
        ("multi_endpoint_very_overloaded", &[(15, 0), (15, 0)], 1.5),
        ("unknown_endpoint_assumed_empty", &[(0, 0)], 0.0),
    ];
    for (name, loads, expected) in cases {
        assert!((concurrency_view(&d, loads).0 - expected).abs() < 1e-6, "{name}");
    }
    let empty = with_view(&[], &Attributes::default(), &[in_flight(&[])], NOW, |v| d.saturation(v, &[]));
    assert_eq!(empty, 1.0, "empty_candidate_list_fail_closed");
}

/// upstream: concurrency/detector_test.go::TestDetector_Configuration (max 50, headroom 0.2: 49
/// in flight → 0.98, 50 → 1.0; the filter keeps 59, drops 60 and keeps a clean endpoint beside
/// it) and ::TestDetector_Lifecycle (cap 1: 0 → 1.0 after one routed request → 0 after its end),
/// the latter through the router. (The DeleteEndpoint steps do not apply: endpoints never
/// leave.)
#[test]
fn concurrency_detector_configuration_and_lifecycle() {
    let d = concurrency(json!({"maxConcurrency": 50, "headroom": 0.2}));
    assert!((concurrency_view(&d, &[(49, 0)]).0 - 49.0 / 50.0).abs() < 1e-6);
    assert!((concurrency_view(&d, &[(50, 0)]).0 - 1.0).abs() < 1e-6);
    assert_eq!(concurrency_view(&d, &[(59, 0)]).1, [0]);
    assert_eq!(concurrency_view(&d, &[(60, 0), (0, 0)]).1, [1]);

    let document = json!({"apiVersion": "llm-d.ai/v1alpha1", "kind": "EndpointPickerConfig",
        "plugins": [{"name": "cd", "type": "concurrency-detector", "parameters": {"maxConcurrency": 1}}, {"type": "queue-scorer"}],
        "schedulingProfiles": [{"name": "default", "plugins": [{"pluginRef": "queue-scorer"}]}],
        "flowControl": {"saturationDetector": {"pluginRef": "cd"}}});
    let mut router = Router::new(
        blis_router::load(Some(&document), Default::default()).unwrap(),
        vec![endpoint("e", &[])],
    );
    let sheddable = |key| blis_router::RoutingRequest { priority: -1, ..request(key, &[]) };
    assert!(matches!(router.route(&sheddable(1), &[0], NOW, &mut rng(1)), Decision::Routed { .. }));
    assert!(matches!(
        router.route(&sheddable(2), &[0], NOW, &mut rng(1)),
        Decision::Refused { status: 429, .. }
    ));
    router.end(1);
    assert!(matches!(router.route(&sheddable(3), &[0], NOW, &mut rng(1)), Decision::Routed { .. }));
}

/// upstream: concurrency/detector_test.go::TestDetector_TokenSaturation (token cap 100; 3, 50,
/// 100 tokens in flight; 50 of 200 over two endpoints), ::TestDetector_TokenFilter (headroom
/// 0.2: 110 kept, 120 dropped) and ::TestDetector_TokenLifecycle (10 tokens → 0.1 → 0 after the
/// end).
#[test]
fn concurrency_detector_tokens() {
    let d = concurrency(json!({"concurrencyMode": "tokens", "maxTokenConcurrency": 100}));
    let cases: [LoadCase; 5] = [
        ("empty_requests", &[(0, 0)], 0.0),
        ("single_endpoint_partial_tokens", &[(1, 3)], 0.03),
        ("single_endpoint_half_full", &[(5, 50)], 0.5),
        ("single_endpoint_full", &[(10, 100)], 1.0),
        ("multiple_endpoints_mixed_token_load", &[(5, 50), (0, 0)], 0.25),
    ];
    for (name, loads, expected) in cases {
        assert!((concurrency_view(&d, loads).0 - expected).abs() < 1e-6, "{name}");
    }
    let burst =
        concurrency(json!({"concurrencyMode": "tokens", "maxTokenConcurrency": 100, "headroom": 0.2}));
    assert_eq!(concurrency_view(&burst, &[(11, 110)]).1.len(), 1);
    assert_eq!(concurrency_view(&burst, &[(12, 120)]).1.len(), 0);
    let mut p = blis_router::plugins::inflight::InFlightLoad::new();
    p.register_endpoints(1);
    p.add(1, &[(0, false, 10)]);
    let plugins = [instance("inflight-load-producer", PluginKind::InFlightLoadProducer(p.clone()))];
    let pods = [endpoint("e", &[])];
    assert!(
        (with_view(&pods, &Attributes::default(), &plugins, NOW, |v| d.saturation(v, &[0])) - 0.1).abs()
            < 1e-6
    );
    p.end(1);
    let plugins = [instance("inflight-load-producer", PluginKind::InFlightLoadProducer(p))];
    assert_eq!(with_view(&pods, &Attributes::default(), &plugins, NOW, |v| d.saturation(v, &[0])), 0.0);
}

/// upstream: concurrency/detector_test.go::TestDetector_HybridSaturation (all seven cases; each
/// endpoint the larger of its two shares, averaged) and ::TestDetector_HybridFilter (all four).
/// Tokens in flight always come with a request here, so the token-only endpoint of
/// "endpoints_saturated_on_different_dimensions" holds one request beside its 100 tokens
/// (max(0.1, 1.0) is still 1.0).
#[test]
fn concurrency_detector_hybrid() {
    let d =
        concurrency(json!({"concurrencyMode": "hybrid", "maxConcurrency": 10, "maxTokenConcurrency": 100}));
    let cases: [LoadCase; 7] = [
        ("empty", &[(0, 0)], 0.0),
        ("tokens_dominate", &[(2, 80)], 0.8),
        ("requests_dominate", &[(9, 10)], 0.9),
        ("request_dimension_saturates_first", &[(10, 5)], 1.0),
        ("token_dimension_saturates_first", &[(1, 100)], 1.0),
        ("endpoints_saturated_on_different_dimensions", &[(10, 0), (1, 100)], 1.0),
        ("per_endpoint_average", &[(10, 0), (0, 0)], 0.5),
    ];
    for (name, loads, expected) in cases {
        assert!((concurrency_view(&d, loads).0 - expected).abs() < 1e-6, "{name}");
    }
    for (name, load, kept) in [
        ("below_both_limits", (5, 50), 1),
        ("request_limit_reached", (10, 50), 0),
        ("token_limit_reached", (5, 100), 0),
        ("both_over", (20, 200), 0),
    ] {
        assert_eq!(concurrency_view(&d, &[load]).1.len(), kept, "{name}");
    }
}
