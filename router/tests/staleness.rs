//! The router decides on what its last scrapes said, never on the engines' present state: a
//! decision on figures one interval old differs from one on fresh figures exactly as upstream's
//! would, and metrics past the detector's staleness threshold count as saturated.

use std::sync::Arc;

use blis_kernel::Streams;
use blis_router::{
    Decision, Endpoint, EndpointMetrics, LoadOptions, Router, RouterRng, RoutingRequest, Scrape, load,
};

fn router(config: &str) -> Router {
    let document: serde_json::Value = serde_json::from_str(config).unwrap();
    let config = load(Some(&document), LoadOptions::default()).unwrap();
    let endpoint = |name: &str| Endpoint {
        name: Arc::from(name),
        labels: Default::default(),
        model: Arc::from("m"),
        metrics: EndpointMetrics::default(),
    };
    Router::new(config, vec![endpoint("a"), endpoint("b")])
}

fn rng() -> RouterRng {
    let streams = Streams::new(1);
    RouterRng {
        tie_break: streams.stream("router", "tie-break", ""),
        exploration: streams.stream("router", "exploration", ""),
    }
}

fn waiting(queue: f64) -> Scrape {
    Scrape {
        samples: vec![("vllm:num_requests_waiting".into(), queue), ("vllm:kv_cache_usage_perc".into(), 0.1)],
        cache_config: Some((16, 1000)),
    }
}

fn request(key: u64, priority: i64) -> RoutingRequest<'static> {
    RoutingRequest {
        key,
        model: "m",
        prompt_token_ids: &[1, 2, 3],
        priority,
        cache_salt: &[],
        max_tokens: Some(4),
        headers: &[],
        prompt_digests: None,
    }
}

const QUEUE_ONLY: &str = r#"{"apiVersion": "llm-d.ai/v1alpha1", "kind": "EndpointPickerConfig",
  "plugins": [{"type": "queue-scorer"}],
  "schedulingProfiles": [{"name": "default", "plugins": [{"pluginRef": "queue-scorer"}]}]}"#;

fn picked(decision: Decision) -> u32 {
    match decision {
        Decision::Routed { endpoint, .. } => endpoint,
        Decision::Refused { status, reason } => panic!("refused {status}: {reason}"),
    }
}

#[test]
fn a_decision_on_a_scrape_one_interval_old_differs_from_one_on_fresh_figures() {
    let mut rng = rng();
    // At t = 0 the scrapes say a has 5 waiting, b none: b wins.
    let mut stale = router(QUEUE_ONLY);
    stale.record_scrape(0, &waiting(5.0), 0);
    stale.record_scrape(1, &waiting(0.0), 0);
    let mut fresh = stale.clone();
    assert_eq!(picked(stale.route(&request(1, 0), &[0, 1], 0, &mut rng)), 1);
    // 50 ms later the engines have changed: a is idle, b has 5 waiting. A router whose next
    // scrape has come back sees it and picks a; one still on the t = 0 figures picks b again.
    fresh.record_scrape(0, &waiting(0.0), 50_000);
    fresh.record_scrape(1, &waiting(5.0), 50_000);
    assert_eq!(picked(fresh.route(&request(2, 0), &[0, 1], 50_000, &mut rng)), 0);
    assert_eq!(picked(stale.route(&request(2, 0), &[0, 1], 50_000, &mut rng)), 1);
}

#[test]
fn metrics_older_than_the_detectors_threshold_count_as_saturated() {
    // The default config's legacy admission sheds sheddable (priority < 0) requests when the
    // utilization detector reads saturation ≥ 1; a pod not scraped for over 200 ms reads 1.
    let mut r = router(r#"{}"#);
    let mut rng = rng();
    r.record_scrape(0, &waiting(0.0), 0);
    r.record_scrape(1, &waiting(0.0), 0);
    assert!(matches!(r.route(&request(1, -1), &[0, 1], 200_000, &mut rng), Decision::Routed { .. }));
    match r.route(&request(2, -1), &[0, 1], 200_001, &mut rng) {
        Decision::Refused { status: 429, reason } => {
            assert_eq!(reason, "system saturated, sheddable request dropped")
        }
        other => panic!("expected 429, got {other:?}"),
    }
    // Requests that are not sheddable never consult the detector.
    assert!(matches!(r.route(&request(3, 0), &[0, 1], 10_000_000, &mut rng), Decision::Routed { .. }));
    // Before any scrape every pod is unseen, so sheddable requests are shed from the start.
    let mut unseen = router(r#"{}"#);
    assert!(matches!(
        unseen.route(&request(4, -1), &[0, 1], 0, &mut rng),
        Decision::Refused { status: 429, .. }
    ));
}
