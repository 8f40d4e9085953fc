//! Upstream's scheduler, scheduler-profile and single-profile-handler tests
//! (`pkg/epp/scheduling/scheduler_profile_test.go`, `scheduler_test.go`,
//! `scheduling/profilehandler/single/single_profile_handler_test.go`), through `load` and
//! `Router::route`. Upstream's fake `testPlugin` (a filter keeping named pods, a scorer giving a
//! constant) is re-expressed with real plugins of the same role: label-selector filters keeping
//! pods by a `name` label, and metric scorers whose scores the scraped figures fix.

mod common;

use blis_router::cycle::clamp_unit;
use blis_router::{Decision, Endpoint, Router};
use common::*;
use serde_json::{Value, json};

fn pods(n: usize) -> Vec<Endpoint> {
    (1..=n)
        .map(|i| {
            let name = format!("pod{i}");
            endpoint(&name, &[("name", name.as_str())])
        })
        .collect()
}

/// A label-selector filter plugin named `name` keeping the pods named in `keep`.
fn keeping(name: &str, keep: &[&str]) -> Value {
    json!({"name": name, "type": "label-selector-filter",
           "parameters": {"matchExpressions": [{"key": "name", "operator": "In", "values": keep}]}})
}

fn config(plugins: Value, profile: Value) -> blis_router::RouterConfig {
    load_json(json!({
        "apiVersion": "llm-d.ai/v1alpha1", "kind": "EndpointPickerConfig",
        "plugins": plugins,
        "schedulingProfiles": [{"name": "default", "plugins": profile}],
    }))
    .unwrap()
}

fn refs(names: &[&str]) -> Value {
    Value::Array(names.iter().map(|n| json!({"pluginRef": n})).collect())
}

fn failed_profile() -> Decision {
    Decision::Refused {
        status: 429,
        reason: "failed to find target endpoint: failed to run scheduler profile 'default'".to_owned(),
    }
}

/// upstream: scheduler_profile_test.go::TestEnforceScoreRange (exact).
#[test]
fn enforce_score_range() {
    assert_eq!([-0.5, 1.5, 0.0, 1.0, 0.5].map(clamp_unit), [0.0, 1.0, 0.0, 1.0, 0.5]);
}

/// upstream: scheduler_profile_test.go::TestRunWithOutOfRangeScores. One endpoint; a KV use of
/// 1.5 makes the kv-cache scorer return −0.5 (clamped to 0) beside queue's 1.0 → total 1.0; a
/// KV use of −0.5 makes it return 1.5 (clamped to 1) → total 2.0.
#[test]
fn run_with_out_of_range_scores() {
    let plugins = json!([{"type": "kv-cache-utilization-scorer"}, {"type": "queue-scorer"}]);
    let profile = refs(&["kv-cache-utilization-scorer", "queue-scorer"]);
    for (kv, total) in [(1.5, 1.0), (-0.5, 2.0)] {
        let mut router = Router::new(config(plugins.clone(), profile.clone()), pods(1));
        router.record_scrape(0, &scrape(0, 0, kv), 0);
        assert_eq!(
            router.route(&request(1, &[]), &[0], 0, &mut rng(1)),
            Decision::Routed { endpoint: 0, targets: smallvec::smallvec![0], score: total }
        );
    }
}

/// upstream: scheduler_profile_test.go::TestSchedulePlugins. Filters keep pod1–pod3 then
/// pod1, pod2; scorers kv-cache (KV 0.7 → 0.3 on both survivors) and queue (equal queues →
/// 1.0). Weights 1/1 give 0.3 + 1.0, weights 60/40 give 0.3·60 + 1.0·40 (upstream: 0.3·60 +
/// 0.8·40 = 50 with its constant scorers); the sum is not normalised. Survivors tie, so the
/// pick is one of pod1, pod2. A filter keeping nothing fails the profile ("filter all").
#[test]
fn schedule_plugins() {
    let filters = [keeping("tp1", &["pod1", "pod2", "pod3"]), keeping("tp2", &["pod1", "pod2"])];
    for (w1, w2) in [(1.0, 1.0), (60.0, 40.0)] {
        let plugins = json!([filters[0], filters[1], {"type": "kv-cache-utilization-scorer"}, {"type": "queue-scorer"}]);
        let profile = json!([{"pluginRef": "tp1"}, {"pluginRef": "tp2"},
            {"pluginRef": "kv-cache-utilization-scorer", "weight": w1}, {"pluginRef": "queue-scorer", "weight": w2}]);
        let mut router = Router::new(config(plugins, profile), pods(3));
        for e in 0..3 {
            router.record_scrape(e, &scrape(0, 0, 0.7), 0);
        }
        let Decision::Routed { endpoint, targets, score } =
            router.route(&request(1, &[]), &[0, 1, 2], 0, &mut rng(1))
        else {
            panic!("routed")
        };
        assert!(endpoint < 2, "a survivor of both filters");
        assert_eq!(targets.as_slice(), &[endpoint]);
        assert_eq!(score, 0.0 + (1.0 - 0.7) * w1 + 1.0 * w2);
    }
    let plugins = json!([filters[0], keeping("tpFilterAll", &["nobody"])]);
    let mut router = Router::new(config(plugins, refs(&["tp1", "tpFilterAll"])), pods(3));
    assert_eq!(router.route(&request(1, &[]), &[0, 1, 2], 0, &mut rng(1)), failed_profile());
}

/// upstream: scheduler_profile_test.go::TestFilterExecutionOrder (and
/// configloader_test.go::TestFilterExecutionOrderFromYAML's effect). Filters run in profile
/// order, each on the previous output: `app` keeps pod1, pod2; `idle` (running ≤ 1, falling
/// back to its input when it would drop everything) keeps only pod3 of all three. app → idle
/// gives pod1/pod2 (idle falls back to app's output); idle → app leaves nothing.
#[test]
fn filter_execution_order() {
    let plugins = json!([
        keeping("app", &["pod1", "pod2"]),
        {"name": "idle", "type": "utilization-filter",
         "parameters": {"conditions": [{"metric": "running-requests", "maxValue": 1}], "fallbackOnEmpty": true}},
    ]);
    let options = blis_router::LoadOptions { allow_experimental_plugins: true };
    let route = |order: &[&str]| {
        let document = json!({"apiVersion": "llm-d.ai/v1alpha1", "kind": "EndpointPickerConfig",
            "plugins": plugins, "schedulingProfiles": [{"name": "default", "plugins": refs(order)}]});
        let mut router = Router::new(blis_router::load(Some(&document), options).unwrap(), pods(3));
        for (e, running) in [(0, 5), (1, 5), (2, 0)] {
            router.record_scrape(e, &scrape(0, running, 0.0), 0);
        }
        router.route(&request(1, &[]), &[0, 1, 2], 0, &mut rng(2))
    };
    assert!(matches!(route(&["app", "idle"]), Decision::Routed { endpoint: 0 | 1, .. }));
    assert_eq!(route(&["idle", "app"]), failed_profile());
}

/// upstream: scheduler_profile_test.go::TestFilterChainReceivesPreviousOutput (filter1 keeps
/// pod1, pod2; filter2 keeps pod1; the last filter sees only pod1, so it is the one target).
#[test]
fn filter_chain_receives_previous_output() {
    let plugins = json!([keeping("filter1", &["pod1", "pod2"]), keeping("filter2", &["pod1", "pod3"]),
        {"type": "max-score-picker", "parameters": {"maxNumOfEndpoints": 3}}]);
    let mut router = Router::new(config(plugins, refs(&["filter1", "filter2", "max-score-picker"])), pods(3));
    assert_eq!(
        router.route(&request(1, &[]), &[0, 1, 2], 0, &mut rng(1)),
        Decision::Routed { endpoint: 0, targets: smallvec::smallvec![0], score: 0.0 }
    );
}

/// upstream: scheduler_test.go::TestSchedule "no candidate endpoints" (503) and "finds optimal
/// endpoint" without its lora-affinity scorer (LoRA adapters are not modelled): kv-cache,
/// queue and prefix-cache scorers, weight 1 each, max-score picker. pod1 and pod2 (queue 0, KV
/// 0.2) tie at 0.8 + 1.0 + 0 = 1.8 and beat pod3 (queue 10, KV 0.8: 0.2 + 0 + 0); upstream's
/// lora scorer is what breaks the tie for pod2 there (2.8).
#[test]
fn schedule_finds_optimal_endpoint() {
    let plugins = json!([{"type": "kv-cache-utilization-scorer"}, {"type": "queue-scorer"},
        {"type": "prefix-cache-scorer", "parameters": {"prefixMatchInfoProducerName": "approx-prefix-cache-producer"}},
        {"type": "max-score-picker"}, {"type": "single-profile-handler"}]);
    let profile =
        refs(&["kv-cache-utilization-scorer", "queue-scorer", "prefix-cache-scorer", "max-score-picker"]);
    let mut router = Router::new(config(plugins, profile), pods(3));
    assert_eq!(
        router.route(&request(1, &[]), &[], 0, &mut rng(1)),
        Decision::Refused {
            status: 503,
            reason: "failed to find endpoint candidates for serving the request".to_owned()
        }
    );
    for (e, q, kv) in [(0, 0, 0.2), (1, 0, 0.2), (2, 10, 0.8)] {
        router.record_scrape(e, &scrape(q, 0, kv), 0);
    }
    let mut winners = [0; 3];
    let mut r = rng(4);
    for key in 0..40 {
        let Decision::Routed { endpoint, score, .. } =
            router.route(&request(key, &[]), &[0, 1, 2], 0, &mut r)
        else {
            panic!("routed")
        };
        assert_eq!(score, 0.0 + (1.0 - 0.2) + 1.0 + 0.0);
        winners[endpoint as usize] += 1;
    }
    assert_eq!(winners[2], 0);
    assert!(winners[0] > 0 && winners[1] > 0, "ties are broken both ways: {winners:?}");
}

/// upstream: single_profile_handler_test.go::TestProcessResults "single successful profile"
/// (the one profile's result is primary: its targets are the decision) and "nil result
/// (profile execution failure) returns error" (429, `failed to run scheduler profile
/// '<name>'`); TestPick's "returns all, then empty" is the cycle running the one profile once.
/// "no profiles" cannot occur (the loader injects a default profile) and "multiple profiles"
/// is refused at load (see upstream_loader.rs).
#[test]
fn single_profile_handler_process_results() {
    let plugins = json!([{"type": "queue-scorer"}, {"type": "max-score-picker", "parameters": {"maxNumOfEndpoints": 2}}]);
    let mut router = Router::new(config(plugins, refs(&["queue-scorer", "max-score-picker"])), pods(2));
    router.record_scrape(0, &scrape(4, 0, 0.0), 0);
    router.record_scrape(1, &scrape(0, 0, 0.0), 0);
    assert_eq!(
        router.route(&request(1, &[]), &[0, 1], 0, &mut rng(1)),
        Decision::Routed { endpoint: 1, targets: smallvec::smallvec![1, 0], score: 1.0 }
    );
    let mut router = Router::new(config(json!([keeping("none", &["ghost"])]), refs(&["none"])), pods(2));
    assert_eq!(router.route(&request(1, &[]), &[0, 1], 0, &mut rng(1)), failed_profile());
}

/// upstream: single_profile_handler_test.go::TestSingleProfileHandlerFactory (a custom name,
/// parameters ignored: reported inert).
#[test]
fn single_profile_handler_factory() {
    let config = load_json(json!({"apiVersion": "llm-d.ai/v1alpha1", "kind": "EndpointPickerConfig",
        "plugins": [{"name": "custom-name", "type": "single-profile-handler", "parameters": {"x": 1}}, {"type": "queue-scorer"}],
        "schedulingProfiles": [{"name": "default", "plugins": refs(&["queue-scorer"])}]}))
    .unwrap();
    let handler = &config.plugins[config.handler];
    assert_eq!(
        (handler.name.as_str(), handler.type_name.as_str()),
        ("custom-name", "single-profile-handler")
    );
    assert!(config.inert.iter().any(|s| s.path == "plugins[0].parameters.x"), "{:?}", config.inert);
}
