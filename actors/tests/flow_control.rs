//! llm-d's flow control end to end (the `burst-fc-*` scenarios of docs/ROUTING.md): every call
//! of a burst gets a fate and the dropped ones carry upstream's reasons; with the gate off only
//! sheddable classes are shed; a client that gives up on a queued call leaves nothing behind;
//! outputs are byte-identical on both hosts and with one or two threads; a bad section is
//! refused with its full path.

mod byte_identity;

use std::collections::BTreeMap;
use std::path::PathBuf;

use blis_actors::{RunError, RunOptions, run};

fn scenario(variant: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../fixtures/scenarios/routing/burst-fc-{variant}.yaml"));
    std::fs::read_to_string(path).unwrap()
}

fn options() -> RunOptions {
    RunOptions { threads: Some(1), ..RunOptions::default() }
}

/// Per client: (calls, completed, dropped by reason, timed out).
type Tally = BTreeMap<String, (u64, u64, BTreeMap<String, u64>, u64)>;

fn tally(text: &str) -> (Tally, blis_contracts::FateCounts) {
    let out = run(text, options(), &mut |_| {}).unwrap();
    let mut by_client = Tally::new();
    for call in &out.calls {
        let entry = by_client.entry(call.client.clone()).or_default();
        entry.0 += 1;
        match &call.fate {
            blis_contracts::Fate::Completed => entry.1 += 1,
            blis_contracts::Fate::Dropped { reason } => *entry.2.entry(reason.clone()).or_default() += 1,
            blis_contracts::Fate::TimedOut => entry.3 += 1,
            other => panic!("{}: unexpected fate {other:?}", call.request_id),
        }
    }
    (by_client, out.result.fates)
}

const SHED: &str = "router_429: rejected-saturated: request rejected pre-queue: queue at capacity";
const EXPIRED: &str = "router_429: rejected-ttl-expired: request timed out in queue: request evicted from queue: request TTL expired";

/// Flow control on, 5 s TTL, sheddable bands capped at 20: the critical and standard classes
/// all complete; the sheddable ones are shed at capacity or expire, with upstream's reasons and
/// status; every call is counted once in the fates.
#[test]
fn a_burst_under_flow_control_sheds_and_expires_only_the_sheddable_bands() {
    let (by_client, fates) = tally(&scenario("on-ttl5s"));
    let total: u64 = by_client.values().map(|t| t.0).sum();
    assert_eq!(fates.arrivals, total);
    assert_eq!(fates.completed + fates.dropped, total, "{fates:?}");
    for class in ["critical", "standard"] {
        let (calls, completed, dropped, _) = &by_client[class];
        assert_eq!((completed, dropped.len()), (calls, 0), "{class}");
    }
    for class in ["batch", "background"] {
        let (calls, completed, dropped, _) = &by_client[class];
        assert!(dropped.keys().all(|r| r == SHED || r == EXPIRED), "{class}: {dropped:?}");
        assert!(dropped.get(SHED).is_some_and(|&n| n > 0), "{class} shed at capacity: {dropped:?}");
        assert!(dropped.get(EXPIRED).is_some_and(|&n| n > 0), "{class} expired: {dropped:?}");
        assert_eq!(completed + dropped.values().sum::<u64>(), *calls, "{class}");
    }
}

/// The same burst with the gate off: the legacy admission sheds only sheddable classes, with
/// its own reason; with the release's flow-control defaults (TTL 60 s, 5,000 per band) nothing
/// is dropped: everything waits.
#[test]
fn the_legacy_admission_sheds_sheddable_classes_and_the_release_defaults_shed_nothing() {
    let (by_client, _) = tally(&scenario("off"));
    for (class, (calls, completed, dropped, _)) in &by_client {
        let sheddable = class == "batch" || class == "background";
        assert_eq!(dropped.is_empty(), !sheddable, "{class}: {dropped:?}");
        assert!(dropped.keys().all(|r| r == "router_429: system saturated, sheddable request dropped"));
        assert_eq!(completed + dropped.values().sum::<u64>(), *calls);
    }
    let (by_client, fates) = tally(&scenario("on-defaults"));
    assert_eq!(fates.completed, fates.arrivals, "{fates:?}");
    assert!(by_client.values().all(|t| t.2.is_empty()));
}

/// A client timeout shorter than the queue wait: the call times out at the client, the router
/// finalizes it in its queue (nothing reaches an engine for it), and the run still accounts for
/// every call.
#[test]
fn a_client_giving_up_on_a_queued_call_is_accounted_for() {
    let text = scenario("on-defaults").replace(
        "      output_tokens: { dist: uniform, min: 100, max: 200 }\n",
        "      output_tokens: { dist: uniform, min: 100, max: 200 }\n      timeout_s: 1.5\n",
    );
    let (by_client, fates) = tally(&text);
    assert!(fates.timed_out > 0, "{fates:?}");
    assert_eq!(fates.completed + fates.timed_out + fates.dropped, fates.arrivals, "{fates:?}");
    let timed_out_sheddable: u64 = ["batch", "background"].iter().map(|c| by_client[*c].3).sum();
    assert!(timed_out_sheddable > 0);
}

/// Byte-identical outputs with flow control on: inline or tasks host, one or two threads.
#[test]
fn flow_control_is_byte_identical_across_hosts_and_thread_counts() {
    let text = scenario("on-ttl5s");
    byte_identity::identical_across_hosts_and_threads(&text, None);
}

/// A bad section is refused at scenario level with its full path.
#[test]
fn a_band_without_priority_is_refused_with_its_scenario_path() {
    let text = scenario("on-ttl5s").replace(
        "        defaultRequestTTL: 5s\n",
        "        defaultRequestTTL: 5s\n        priorityBands: [{ maxRequests: 3 }]\n",
    );
    match run(&text, options(), &mut |_| {}) {
        Err(RunError::Input(e)) => {
            assert_eq!(e.path, "cluster.router.config.flowControl.priorityBands[0].priority", "{e}");
            assert!(e.cause.contains("a priority band must name its priority"), "{e}");
        }
        Err(other) => panic!("expected a refusal, got {other}"),
        Ok(_) => panic!("expected a refusal"),
    }
}

/// Every invariant of docs/INVARIANTS.md holds after every instant of the burst under flow
/// control, with and without client timeouts racing the queue (a checked run, with the
/// determinism rerun).
#[test]
fn flow_control_keeps_every_invariant() {
    use blis_actors::swarm::{CheckOptions, run_checked};
    let data = blis_costmodel::CostData::embedded();
    let timeouts = scenario("on-ttl5s").replace(
        "      output_tokens: { dist: uniform, min: 100, max: 200 }\n",
        "      output_tokens: { dist: uniform, min: 100, max: 200 }\n      timeout_s: 2\n",
    );
    for text in [scenario("on-ttl5s"), timeouts] {
        let parsed = blis_contracts::Scenario::parse(&text).unwrap();
        let options = CheckOptions { fault: None, determinism: true };
        let checked = run_checked(&parsed, 7, &data, options).unwrap();
        assert!(checked.violations.is_empty(), "{:?}", checked.violations);
        assert_eq!(checked.ending, "settled");
        assert!(checked.calls > 500);
    }
}

/// One flow controller per InferencePool (per served model): a burst saturating the Llama pool
/// sheds and expires its sheddable calls, while the same class on the idle Qwen pool is
/// dispatched at once.
#[test]
fn each_pool_has_its_own_flow_controller() {
    let text = "seed: 5\nframe: { replications: 1 }\ncluster:\n  network: { client_router_us: 500, router_engine_us: 100 }\n  router:\n    config:\n      apiVersion: llm-d.ai/v1alpha1\n      kind: EndpointPickerConfig\n      featureGates: [flowControl]\n      flowControl:\n        defaultRequestTTL: 2s\n        defaultNegativePriorityBand: { maxRequests: 5 }\n      plugins: [{ type: queue-scorer }]\n  pools:\n    - name: llama\n      replicas: 1\n      hardware: { chip: H100-SXM }\n      model: Llama-3.1-8B\n      engine: { kind: vllm, version: \"0.15.1\", args: { max_num_seqs: 8 } }\n    - name: qwen\n      replicas: 1\n      hardware: { chip: H100-SXM }\n      model: Qwen2.5-7B\n      engine: { kind: vllm, version: \"0.15.1\", args: {} }\nworkload:\n  clients:\n    - name: llama\n      model: Llama-3.1-8B\n      slo_class: batch\n      requests: 300\n      arrival: { process: poisson, rate_per_s: 60 }\n      input_tokens: { dist: uniform, min: 300, max: 700 }\n      output_tokens: { dist: uniform, min: 100, max: 200 }\n    - name: qwen\n      model: Qwen2.5-7B\n      slo_class: batch\n      requests: 40\n      arrival: { process: poisson, rate_per_s: 4 }\n      input_tokens: { dist: uniform, min: 50, max: 100 }\n      output_tokens: { dist: constant, value: 20 }\n";
    let (by_client, fates) = tally(text);
    assert_eq!(fates.completed + fates.dropped, fates.arrivals);
    let (calls, completed, dropped, _) = &by_client["qwen"];
    assert_eq!((completed, dropped.len()), (calls, 0), "{dropped:?}");
    let (_, _, dropped, _) = &by_client["llama"];
    assert!(dropped.get(SHED).is_some_and(|&n| n > 0), "{dropped:?}");
}

/// A flow control without TTL (`"0s"`) can hold a request for ever, so a run without a horizon
/// is refused (it might not end); with a horizon it runs.
#[test]
fn no_ttl_needs_a_horizon() {
    let text = scenario("on-defaults").replace(
        "      featureGates: [flowControl]\n",
        "      featureGates: [flowControl]\n      flowControl: { defaultRequestTTL: 0s }\n",
    );
    match run(&text, options(), &mut |_| {}) {
        Err(RunError::Input(e)) => {
            assert_eq!(e.path, "cluster.router.config.flowControl.defaultRequestTTL", "{e}");
            assert!(e.cause.contains("give the scenario a horizon_s"), "{e}");
        }
        Err(other) => panic!("expected a refusal, got {other}"),
        Ok(_) => panic!("expected a refusal"),
    }
    let bounded = text.replace("seed: 7\n", "seed: 7\nhorizon_s: 40\n");
    let out = run(&bounded, options(), &mut |_| {}).unwrap();
    assert_eq!(out.result.fates.dropped, 0);
}

/// Two tenants of one class (one band), each its own flow by `fairness_id`: a heavy burst and a
/// light trickle. Round-robin fairness serves the flows in turn, so the light tenant waits far
/// less than under global-strict (which serves the band in arrival order, whoever sent it):
/// 3.74 s mean TTFT against 9.01 s on this seed. An empty `fairness_id` is refused.
#[test]
fn round_robin_fairness_shields_a_light_flow_from_a_heavy_one() {
    let text = |fairness: &str| {
        format!(
            "seed: 11\nframe: {{ replications: 1 }}\ncluster:\n  network: {{ client_router_us: 500, router_engine_us: 100 }}\n  router:\n    config:\n      apiVersion: llm-d.ai/v1alpha1\n      kind: EndpointPickerConfig\n      featureGates: [flowControl]\n      plugins: [{{ type: queue-scorer }}, {{ type: {fairness} }}]\n      flowControl:\n        defaultPriorityBand: {{ fairnessPolicyRef: {fairness} }}\n  pools:\n    - name: h100\n      replicas: 1\n      hardware: {{ chip: H100-SXM }}\n      model: Llama-3.1-8B\n      engine: {{ kind: vllm, version: \"0.15.1\", args: {{ max_num_seqs: 8 }} }}\nworkload:\n  clients:\n    - name: heavy\n      fairness_id: tenant-heavy\n      requests: 200\n      arrival: {{ process: poisson, rate_per_s: 100 }}\n      input_tokens: {{ dist: uniform, min: 300, max: 700 }}\n      output_tokens: {{ dist: uniform, min: 100, max: 200 }}\n    - name: light\n      fairness_id: tenant-light\n      requests: 10\n      arrival: {{ process: poisson, rate_per_s: 5 }}\n      input_tokens: {{ dist: uniform, min: 300, max: 700 }}\n      output_tokens: {{ dist: uniform, min: 100, max: 200 }}\n"
        )
    };
    let light_ttft = |fairness: &str| {
        let out = run(&text(fairness), options(), &mut |_| {}).unwrap();
        assert_eq!(out.result.fates.completed, out.result.fates.arrivals);
        let light: Vec<u64> =
            out.calls.iter().filter(|c| c.client == "light").map(|c| c.token_latency_us[0]).collect();
        light.iter().sum::<u64>() / light.len() as u64
    };
    let strict = light_ttft("global-strict-fairness-policy");
    let round_robin = light_ttft("round-robin-fairness-policy");
    assert!(round_robin * 2 < strict, "round-robin {round_robin} µs vs global-strict {strict} µs");
    let bad = text("round-robin-fairness-policy").replace("fairness_id: tenant-light", "fairness_id: \"\"");
    match run(&bad, options(), &mut |_| {}) {
        Err(RunError::Input(e)) => assert_eq!(e.path, "workload.clients[1].fairness_id", "{e}"),
        other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
    }
}

/// Two clients in one flow, each burst at the same rate: one's requests carry an
/// `x-llm-d-slo-ttft-ms` of 200, the other's 60,000. Under `slo-deadline-ordering-policy` the
/// queue is ordered by received + target, so the tight client's calls leave it first and its mean
/// TTFT falls well below what FCFS ordering gives it; a target of 0 is refused by path.
#[test]
fn slo_deadline_ordering_serves_the_tighter_ttft_target_first() {
    let text = |ordering: &str| {
        format!(
            "seed: 5\nframe: {{ replications: 1 }}\ncluster:\n  network: {{ client_router_us: 500, router_engine_us: 100 }}\n  router:\n    config:\n      apiVersion: llm-d.ai/v1alpha1\n      kind: EndpointPickerConfig\n      featureGates: [flowControl]\n      plugins: [{{ type: queue-scorer }}, {{ type: {ordering} }}]\n      flowControl:\n        defaultPriorityBand: {{ orderingPolicyRef: {ordering} }}\n  pools:\n    - name: h100\n      replicas: 1\n      hardware: {{ chip: H100-SXM }}\n      model: Llama-3.1-8B\n      engine: {{ kind: vllm, version: \"0.15.1\", args: {{ max_num_seqs: 8 }} }}\nworkload:\n  clients:\n    - name: tight\n      slo_ttft_ms: 200\n      requests: 100\n      arrival: {{ process: poisson, rate_per_s: 50 }}\n      input_tokens: {{ dist: uniform, min: 300, max: 700 }}\n      output_tokens: {{ dist: uniform, min: 100, max: 200 }}\n    - name: relaxed\n      slo_ttft_ms: 60000\n      requests: 100\n      arrival: {{ process: poisson, rate_per_s: 50 }}\n      input_tokens: {{ dist: uniform, min: 300, max: 700 }}\n      output_tokens: {{ dist: uniform, min: 100, max: 200 }}\n"
        )
    };
    let mean_ttft = |ordering: &str, client: &str| {
        let out = run(&text(ordering), options(), &mut |_| {}).unwrap();
        assert_eq!(out.result.fates.completed, out.result.fates.arrivals);
        let ttfts: Vec<u64> =
            out.calls.iter().filter(|c| c.client == client).map(|c| c.token_latency_us[0]).collect();
        ttfts.iter().sum::<u64>() / ttfts.len() as u64
    };
    let fcfs = mean_ttft("fcfs-ordering-policy", "tight");
    let slo = mean_ttft("slo-deadline-ordering-policy", "tight");
    // 6.18 s against 10.94 s on this seed.
    assert!(slo * 3 < fcfs * 2, "slo-deadline {slo} µs vs fcfs {fcfs} µs");
    let bad = text("slo-deadline-ordering-policy").replace("slo_ttft_ms: 200", "slo_ttft_ms: 0");
    match run(&bad, options(), &mut |_| {}) {
        Err(RunError::Input(e)) => assert_eq!(e.path, "workload.clients[0].slo_ttft_ms", "{e}"),
        other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
    }
}

const EVICTED: &str = "router_429: evicted: request evicted by flow control";

/// The burst with in-flight eviction on (`burst-fc-on-evict`: the `on-ttl5s` settings plus
/// `enableEviction`, the utilization detector's 2.3 s grace): critical and standard calls all
/// complete; sheddable calls already at an engine are revoked while a higher band waits, each
/// answered once with upstream's 429 `evicted`; every call has exactly one fate, and the Result
/// counts the evictions under their reason. Then the same with the concurrency detector (10 ms
/// grace): more decisions, so more evictions.
#[test]
fn eviction_revokes_sheddable_calls_in_flight_with_upstreams_reason() {
    let check = |text: &str| {
        let out = run(text, options(), &mut |_| {}).unwrap();
        let (by_client, fates) = tally(text);
        let total: u64 = by_client.values().map(|t| t.0).sum();
        assert_eq!(fates.completed + fates.dropped, total, "{fates:?}");
        for class in ["critical", "standard"] {
            let (calls, completed, dropped, _) = &by_client[class];
            assert_eq!((completed, dropped.len()), (calls, 0), "{class}");
        }
        let mut evicted = BTreeMap::new();
        for class in ["batch", "background"] {
            let (calls, completed, dropped, _) = &by_client[class];
            assert!(
                dropped.keys().all(|r| r == SHED || r == EXPIRED || r == EVICTED),
                "{class}: {dropped:?}"
            );
            assert_eq!(completed + dropped.values().sum::<u64>(), *calls, "{class}");
            evicted.insert(class, dropped.get(EVICTED).copied().unwrap_or(0));
        }
        let total_evicted: u64 = evicted.values().sum();
        assert_eq!(out.result.dropped_by_reason.get(EVICTED).copied().unwrap_or(0), total_evicted);
        evicted
    };
    let utilization = check(&scenario("on-evict"));
    assert_eq!(utilization, BTreeMap::from([("background", 4), ("batch", 4)]), "utilization detector");
    let concurrency = check(&evict_with_concurrency_detector());
    assert_eq!(concurrency, BTreeMap::from([("background", 20), ("batch", 0)]), "concurrency detector");
}

/// `burst-fc-on-evict` with the concurrency detector (10 ms confirmation grace).
fn evict_with_concurrency_detector() -> String {
    scenario("on-evict")
        .replace(
            "        enableEviction: true\n",
            "        enableEviction: true\n        saturationDetector: { pluginRef: concurrency-detector }\n",
        )
        .replace(
            "      - type: queue-scorer\n",
            "      - type: queue-scorer\n      - type: concurrency-detector\n",
        )
}

/// Byte-identical outputs with eviction on (both detectors), and every invariant of
/// docs/INVARIANTS.md after every instant — I4 (a call answered at most once) included. The
/// third run puts 100 ms between router and engines, so engines answer evicted calls before
/// the abort reaches them; its checked run (seed 2) reports I4 ("answered in state Answered")
/// if the host forwards such a late answer instead of dropping it.
#[test]
fn eviction_is_byte_identical_and_keeps_every_invariant() {
    use blis_actors::swarm::{CheckOptions, run_checked};
    let data = blis_costmodel::CostData::embedded();
    let far =
        evict_with_concurrency_detector().replace("router_engine_us: 100 }", "router_engine_us: 100000 }");
    for (text, seed) in [(scenario("on-evict"), 7), (evict_with_concurrency_detector(), 7), (far, 2)] {
        let reference = byte_identity::identical_across_hosts_and_threads(&text, None);
        assert!(String::from_utf8_lossy(&reference.1).contains("evicted"), "the run evicts");
        let parsed = blis_contracts::Scenario::parse(&text).unwrap();
        let checked =
            run_checked(&parsed, seed, &data, CheckOptions { fault: None, determinism: true }).unwrap();
        assert!(checked.violations.is_empty(), "{:?}", checked.violations);
        assert_eq!(checked.ending, "settled");
    }
}
