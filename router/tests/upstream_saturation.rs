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
        e.metrics.apply(&scrape(q, 0, kv), NOW - age_ms * 1000);
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
