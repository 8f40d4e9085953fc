//! Upstream's flow-control tests, through the crate's public API: the loader's section builder
//! (`pkg/epp/config/loader/flowcontrol_test.go`), the registry and controller config defaults
//! (`flowcontrol/registry/config_test.go`, `flowcontrol/controller/config_test.go`), the
//! processor's capacity check, enqueue, dispatch cycle and sweep
//! (`flowcontrol/controller/internal/processor_test.go`), the ordering and fairness policies
//! (`framework/plugins/flowcontrol/…`), and the admission outcome mapping
//! (`requestcontrol/admission_test.go`).
//!
//! Upstream's processor tests drive a mocked registry and detector; here the same situations
//! are built in a real [`FlowController`] (queues filled by enqueue, saturation passed in), and
//! each case keeps what upstream checks. Go's "nil item" and mock-failure cases (a registry
//! lookup error, a failing policy) have no counterpart: the Rust types cannot be nil and the
//! registry cannot fail a lookup.

mod common;

use std::sync::Arc;

use blis_router::flow_control::policies::ItemTimes;
use blis_router::flow_control::{
    Cause, DEFAULT_FAIRNESS_ID, Fairness, FlowControlConfig, FlowController, Occupancy, Ordering,
    QueueOutcome, Ticket, has_capacity, translate, translate_error,
};
use blis_router::{ConfigError, LoadOptions, RouterConfig};
use common::*;

const HEAD: &str = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n\
                    plugins:\n- {name: maxScore, type: max-score-picker}\n";
const PROFILE: &str = "schedulingProfiles:\n- name: default\n  plugins: [{pluginRef: maxScore}]\n";

fn load_with(plugins: &str, rest: &str) -> Result<RouterConfig, ConfigError> {
    load_yaml(&format!("{HEAD}{plugins}{PROFILE}featureGates: [flowControl]\n{rest}"), LoadOptions::default())
}

fn flow(rest: &str) -> Arc<FlowControlConfig> {
    let config = load_with("", rest).unwrap_or_else(|e| panic!("{e}"));
    config.flow_control.expect("the gate is on")
}

fn refused(rest: &str) -> ConfigError {
    load_with("", rest).expect_err(rest)
}

/// upstream: flowcontrol_test.go::TestBuildRegistryConfig (every case: full configuration,
/// Kubernetes quantities, policy references, system defaults, band defaults for absent or zero
/// limits, the negative-band template and its fallback, and each negative limit refused with
/// upstream's words).
#[test]
fn build_registry_config() {
    let c = flow(
        "flowControl:\n  maxBytes: 100\n  priorityBands: [{priority: 1, maxBytes: 50}]\n  defaultPriorityBand: {maxBytes: 10}\n",
    );
    assert_eq!((c.max_bytes, c.bands[&1].max_bytes, c.default_band.max_bytes), (100, 50, 10));
    let c = flow("flowControl:\n  maxBytes: 1Gi\n  priorityBands: [{priority: 1, maxBytes: 500Mi}]\n");
    assert_eq!((c.max_bytes, c.bands[&1].max_bytes), (1_073_741_824, 524_288_000));
    let config = load_with(
        "- {type: edf-ordering-policy}\n- {type: round-robin-fairness-policy}\n",
        "flowControl:\n  priorityBands:\n  - {priority: 1, orderingPolicyRef: edf-ordering-policy, fairnessPolicyRef: round-robin-fairness-policy}\n",
    )
    .unwrap();
    let band = &config.flow_control.as_ref().unwrap().bands[&1];
    assert_eq!((band.ordering, band.fairness), (Ordering::Edf, Fairness::RoundRobin));
    assert_eq!(config.plugins[band.ordering_plugin].name, "edf-ordering-policy");
    let c = flow("");
    assert_eq!((c.max_bytes, c.max_requests), (0, 0), "no global limits by default");
    assert_eq!((c.default_band.max_bytes, c.default_band.max_requests), (1_000_000_000, 5000));
    let c = flow("flowControl:\n  priorityBands: [{priority: 1}, {priority: 2, maxBytes: 0}]\n");
    assert_eq!((c.bands[&1].max_bytes, c.bands[&2].max_bytes), (1_000_000_000, 1_000_000_000));
    assert_eq!(
        flow("flowControl:\n  defaultPriorityBand: {maxBytes: 0}\n").default_band.max_bytes,
        1_000_000_000
    );
    let c = flow(
        "flowControl:\n  priorityBands: [{priority: 1}, {priority: 2, maxRequests: 0}, {priority: 3, maxRequests: 250}]\n",
    );
    assert_eq!([1, 2, 3].map(|p| c.bands[&p].max_requests), [5000, 5000, 250]);
    let c = flow("flowControl:\n  defaultNegativePriorityBand: {maxRequests: 0}\n");
    assert_eq!(c.default_negative_band.as_ref().unwrap().max_requests, 5000);
    let c = flow(
        "flowControl:\n  maxBytes: 1Gi\n  maxRequests: 5000\n  priorityBands: [{priority: 100, maxBytes: 1Gi, maxRequests: 5000}]\n",
    );
    assert_eq!(
        (c.max_bytes, c.max_requests, c.bands[&100].max_bytes, c.bands[&100].max_requests),
        (1 << 30, 5000, 1 << 30, 5000)
    );
    let c = flow("flowControl:\n  maxRequests: 1000\n  priorityBands: [{priority: 1, maxRequests: 500}]\n");
    assert_eq!(
        (c.max_bytes, c.max_requests, c.bands[&1].max_bytes, c.bands[&1].max_requests),
        (0, 1000, 1_000_000_000, 500)
    );
    assert_eq!(
        flow("flowControl:\n  defaultPriorityBand: {maxRequests: 200}\n").default_band.max_requests,
        200
    );
    let c = flow("flowControl:\n  defaultNegativePriorityBand: {maxBytes: 100}\n");
    let negative = c.default_negative_band.as_ref().unwrap();
    assert_eq!(
        (negative.max_bytes, negative.ordering),
        (100, Ordering::Fcfs),
        "defaults applied to the template"
    );
    let c = flow("flowControl:\n  defaultPriorityBand: {maxBytes: 500}\n");
    assert!(c.default_negative_band.is_none());
    assert_eq!(c.default_band.max_bytes, 500);
    for (rest, path, words) in [
        ("flowControl:\n  maxBytes: -1\n", "flowControl.maxBytes", "global MaxBytes must be non-negative"),
        (
            "flowControl:\n  priorityBands: [{priority: 1, maxBytes: -100}]\n",
            "flowControl.priorityBands[0].maxBytes",
            "priority band 1 MaxBytes must be non-negative",
        ),
        (
            "flowControl:\n  defaultPriorityBand: {maxBytes: -5}\n",
            "flowControl.defaultPriorityBand.maxBytes",
            "default priority band MaxBytes must be non-negative",
        ),
        (
            "flowControl:\n  maxRequests: -1\n",
            "flowControl.maxRequests",
            "global MaxRequests must be non-negative",
        ),
        (
            "flowControl:\n  priorityBands: [{priority: 1, maxRequests: -100}]\n",
            "flowControl.priorityBands[0].maxRequests",
            "priority band 1 MaxRequests must be non-negative",
        ),
        (
            "flowControl:\n  defaultPriorityBand: {maxRequests: -5}\n",
            "flowControl.defaultPriorityBand.maxRequests",
            "default priority band MaxRequests must be non-negative",
        ),
        (
            "flowControl:\n  defaultNegativePriorityBand: {maxBytes: -1}\n",
            "flowControl.defaultNegativePriorityBand.maxBytes",
            "default negative priority band MaxBytes must be non-negative",
        ),
    ] {
        let e = refused(rest);
        assert_eq!(e.path, path, "{e}");
        assert!(e.reason.contains(words), "{e}");
        assert!(
            e.reason.starts_with("failed to load flow control config: failed to create registry config: "),
            "{e}"
        );
    }
}

/// upstream: flowcontrol_test.go::TestBuildFlowControlConfig ("Nil Config defaults",
/// "Explicit Values", "Default UsageLimitPolicy when UsageLimit is nil", "UsageLimitPolicyPluginRef
/// is resolved") and ::TestBuildFlowControlConfig_Errors ("UsageLimitPolicy plugin not found"),
/// ::TestBuildPriorityBandPolicyDefaults.
#[test]
fn build_flow_control_config() {
    let c = flow("");
    assert_eq!(c.default_request_ttl_us, 60_000_000);
    assert_eq!((c.default_band.ordering, c.default_band.fairness), (Ordering::Fcfs, Fairness::GlobalStrict));
    assert_eq!(c.usage_limit.threshold, 1.0);
    let c = flow("flowControl:\n  maxBytes: 1000\n  defaultRequestTTL: 30s\n");
    assert_eq!((c.max_bytes, c.default_request_ttl_us), (1000, 30_000_000));
    let config = load_with(
        "- {name: my-limit, type: static-usage-limit-policy, parameters: {threshold: 0.75}}\n",
        "flowControl:\n  usageLimitPolicyPluginRef: my-limit\n",
    )
    .unwrap();
    let c = config.flow_control.as_ref().unwrap();
    assert_eq!(
        (c.usage_limit.threshold, config.plugins[c.usage_limit_plugin].name.as_str()),
        (0.75, "my-limit")
    );
    let e = refused("flowControl:\n  usageLimitPolicyPluginRef: missing\n");
    assert_eq!(
        (e.path.as_str(), e.value.as_deref()),
        ("flowControl.usageLimitPolicyPluginRef", Some("\"missing\""))
    );
    assert_eq!(
        e.reason,
        "failed to load flow control config: failed to resolve usage limit policy: plugin \"missing\" not found"
    );
}

/// upstream: registry/config_test.go::TestNewConfig ("ShouldApplySystemDefaults_WhenNoOptionsProvided":
/// band 0 exists from the default template; "ShouldRespectGlobalOverrides";
/// "ShouldRespectCustomDefaultPriorityBand"; "ShouldError_WhenDuplicatePriorityLevelAdded") and
/// ::TestNewConfig_DefaultNegativePriorityBand (the template is used for provisioned negative
/// bands, the default template for positive ones).
#[test]
fn registry_config_defaults() {
    let c = flow("");
    assert_eq!(c.bands.keys().copied().collect::<Vec<_>>(), [0]);
    assert_eq!((c.bands[&0].max_bytes, c.bands[&0].max_requests), (1_000_000_000, 5000));
    let c = flow("flowControl:\n  maxBytes: 2000\n  maxRequests: 10\n");
    assert_eq!((c.max_bytes, c.max_requests), (2000, 10));
    let c = flow(
        "flowControl:\n  defaultPriorityBand: {maxRequests: 7}\n  defaultNegativePriorityBand: {maxRequests: 3}\n",
    );
    assert_eq!(c.bands[&0].max_requests, 7, "band 0 from the custom template");
    assert_eq!((c.band(5).max_requests, c.band(5).priority), (7, 5));
    assert_eq!((c.band(-1).max_requests, c.band(-1).priority), (3, -1));
    let e = refused("flowControl:\n  priorityBands: [{priority: 5}, {priority: 5}]\n");
    assert_eq!((e.path.as_str(), e.value.as_deref()), ("flowControl.priorityBands[1].priority", Some("5")));
    assert_eq!(
        e.reason,
        "failed to load flow control config: failed to create registry config: duplicate priority level 5"
    );
}

/// upstream: controller/config_test.go::TestNewConfigFromAPI ("NilConfig_ShouldReturnSystemDefaults",
/// "ValidConfig_ShouldTranslateFields", "ExplicitZeroRequestTTL_ShouldBeRespected",
/// "InvalidConfig_NegativeRequestTTL_ShouldError") and ::TestNewConfig
/// ("Defaults_ShouldBeApplied_WhenNoOptionsProvided", "ZeroDefaultRequestTTL_ShouldDisableTTL",
/// "NegativeDefaultRequestTTL_ShouldError").
#[test]
fn controller_config() {
    assert_eq!(flow("").default_request_ttl_us, 60_000_000);
    assert_eq!(flow("flowControl:\n  defaultRequestTTL: 1m\n").default_request_ttl_us, 60_000_000);
    assert_eq!(flow("flowControl:\n  defaultRequestTTL: 0s\n").default_request_ttl_us, 0);
    let e = refused("flowControl:\n  defaultRequestTTL: -1s\n");
    assert_eq!((e.path.as_str(), e.value.as_deref()), ("flowControl.defaultRequestTTL", Some("\"-1s\"")));
    assert_eq!(
        e.reason,
        "failed to load flow control config: failed to create controller config: DefaultRequestTTL cannot be negative, but got -1s"
    );
}

fn occupancy(capacity_bytes: u64, bytes: u64, capacity_requests: u64, len: u64) -> Occupancy {
    Occupancy { capacity_bytes, bytes, capacity_requests, len }
}

/// upstream: processor_test.go::TestProcessor "Unit/hasCapacity" (every case but "should deny
/// item if band stats are missing": a band here always has its stats).
#[test]
fn processor_has_capacity() {
    let o = occupancy;
    for (name, bytes, global, band, want) in [
        ("global byte capacity exceeded", 1, o(100, 100, 0, 0), o(0, 0, 0, 0), false),
        ("global request capacity exceeded", 0, o(0, 0, 10, 10), o(0, 0, 100, 0), false),
        ("band byte capacity exceeded", 1, o(200, 100, 0, 0), o(50, 50, 0, 0), false),
        ("band request capacity exceeded", 0, o(0, 0, 0, 0), o(0, 0, 5, 5), false),
        ("both have byte capacity", 10, o(200, 100, 0, 0), o(100, 50, 0, 0), true),
        ("both have request capacity", 0, o(0, 0, 10, 5), o(0, 0, 8, 3), true),
        ("zero-valued limits ignored", 0, o(0, 999, 0, 999), o(0, 999, 0, 999), true),
        ("global bytes ok, band requests exceeded", 10, o(200, 50, 100, 5), o(100, 20, 5, 5), false),
        ("global requests ok, band bytes exceeded", 10, o(200, 50, 100, 5), o(20, 20, 100, 3), false),
        ("all four pass", 10, o(200, 50, 100, 10), o(100, 20, 50, 5), true),
        ("global bytes exactly at capacity after add", 10, o(110, 100, 0, 0), o(60, 50, 0, 0), true),
        ("global bytes one over after add", 11, o(110, 100, 0, 0), o(200, 50, 0, 0), false),
        ("global requests exactly at capacity after add", 0, o(0, 0, 10, 9), o(0, 0, 10, 5), true),
        ("global requests one over after add", 0, o(0, 0, 10, 10), o(0, 0, 100, 5), false),
        ("band bytes exactly at capacity after add", 10, o(500, 100, 0, 0), o(60, 50, 0, 0), true),
        ("band bytes one over after add", 11, o(500, 100, 0, 0), o(60, 50, 0, 0), false),
        ("band requests exactly at capacity after add", 0, o(0, 0, 100, 10), o(0, 0, 6, 5), true),
        ("band requests one over after add", 0, o(0, 0, 100, 10), o(0, 0, 5, 5), false),
    ] {
        assert_eq!(has_capacity(&global, &band, bytes), want, "{name}");
    }
}

fn ticket(key: u64, priority: i64, flow: &str, bytes: u64) -> Ticket {
    Ticket {
        key,
        priority,
        fairness_id: Arc::from(flow),
        byte_size: bytes,
        received_us: 0,
        slo_ttft_ms: None,
    }
}

/// upstream: processor_test.go::TestProcessor "Unit/enqueue" ("should reject item as
/// no-endpoints when at capacity with an empty pool", "should reject item as capacity when at
/// capacity with a non-empty pool") and "Integration/should dispatch item successfully",
/// "should reject item when at capacity".
#[test]
fn processor_enqueue() {
    let config = flow("flowControl:\n  maxRequests: 1\n");
    let mut fc = FlowController::new(config.clone());
    fc.enqueue(ticket(1, 0, DEFAULT_FAIRNESS_ID, 10), 0).unwrap();
    let full = fc.enqueue(ticket(2, 0, DEFAULT_FAIRNESS_ID, 10), 0).unwrap_err();
    assert_eq!((full.outcome, full.cause), (QueueOutcome::RejectedCapacity, Cause::QueueAtCapacity));
    assert_eq!(fc.dispatch_cycle(0.0, true), Some(1), "dispatched; the cycle saw an empty pool");
    fc.enqueue(ticket(3, 0, DEFAULT_FAIRNESS_ID, 10), 0).unwrap();
    let none = fc.enqueue(ticket(4, 0, DEFAULT_FAIRNESS_ID, 10), 0).unwrap_err();
    assert_eq!((none.outcome, none.cause), (QueueOutcome::RejectedNoEndpoints, Cause::NoEndpoints));
}

/// upstream: processor_test.go::TestProcessor "Unit/dispatchCycle" ("should do nothing if no
/// items are queued", "should block dispatch on HoL saturation", "should skip band if selected
/// queue is empty") and "should guarantee strict priority by starving lower priority items"; the
/// HoL block holds back the lower band too.
#[test]
fn processor_dispatch_cycle() {
    let config = flow("flowControl:\n  priorityBands: [{priority: 10}, {priority: 20}]\n");
    let mut fc = FlowController::new(config);
    assert_eq!(fc.dispatch_cycle(0.0, false), None);
    fc.enqueue(ticket(1, 10, "f", 1), 0).unwrap();
    fc.enqueue(ticket(2, 20, "f", 1), 1).unwrap();
    fc.enqueue(ticket(3, 20, "f", 1), 2).unwrap();
    assert_eq!(fc.dispatch_cycle(1.0, false), None, "saturated: head-of-line blocked");
    assert_eq!(fc.dispatch_cycle(1.5, false), None);
    assert_eq!(fc.priorities(), [20, 10, 0]);
    assert_eq!(
        [fc.dispatch_cycle(0.99, false), fc.dispatch_cycle(0.5, false), fc.dispatch_cycle(0.0, false)],
        [Some(2), Some(3), Some(1)]
    );
    assert!(fc.is_empty());
}

/// upstream: processor_test.go::TestProcessor "Unit/dispatchItem/should not dispatch already
/// finalized item" and "Unit/cleanup/should sweep externally finalized items", "should not
/// sweep items not finalized": a finalized item keeps its place (and its capacity) until swept
/// or taken by a cycle, which then dispatches nothing.
#[test]
fn processor_finalized_items_and_sweep() {
    let config = flow("flowControl:\n  defaultRequestTTL: 1s\n  maxRequests: 2\n");
    let mut fc = FlowController::new(config);
    fc.enqueue(ticket(1, 0, "f", 1), 0).unwrap();
    fc.enqueue(ticket(2, 0, "f", 1), 500_000).unwrap();
    let mut out = Vec::new();
    fc.expire(1_000_000, &mut out);
    assert_eq!(out.iter().map(|f| (f.key, f.outcome)).collect::<Vec<_>>(), [(1, QueueOutcome::EvictedTtl)]);
    assert!(!fc.holds(1) && fc.holds(2) && fc.has_finalized());
    assert_eq!(fc.len(), 2, "the expired item still counts");
    assert!(fc.enqueue(ticket(3, 0, "f", 1), 1_000_000).is_err(), "so the queue is still full");
    assert_eq!(
        fc.dispatch_cycle(0.0, false),
        None,
        "the cycle takes the finalized head and dispatches nothing"
    );
    assert_eq!(fc.dispatch_cycle(0.0, false), Some(2));
    fc.enqueue(ticket(4, 0, "f", 1), 1_000_000).unwrap();
    assert_eq!(fc.cancel(4).map(|f| f.outcome), Some(QueueOutcome::EvictedContextCancelled));
    fc.enqueue(ticket(5, 0, "f", 1), 1_000_000).unwrap();
    fc.sweep();
    assert_eq!(fc.len(), 1, "the sweep drops the cancelled item only");
    assert!(fc.holds(5));
}

fn times(enqueue_us: u64, ttl_us: u64, sequence: u64) -> ItemTimes {
    ItemTimes { enqueue_us, ttl_us, received_us: enqueue_us, slo_ttft_ms: None, sequence }
}

/// upstream: ordering/fcfs/fcfs_test.go::TestFCFS_Less (earlier enqueue first; equal times are
/// not less, here broken by arrival sequence).
#[test]
fn fcfs_less() {
    let (a, b) = (times(10, 0, 0), times(20, 0, 1));
    assert!(Ordering::Fcfs.less(&a, &b));
    assert!(!Ordering::Fcfs.less(&b, &a));
    assert!(!Ordering::Fcfs.less(&a, &a));
}

/// upstream: ordering/edf/edf_test.go::TestEDF_Less (every non-nil case) and
/// ::TestCalculateDeadline (a TTL of 0 is no deadline).
#[test]
fn edf_less() {
    let now = 10_000_000;
    let a = times(now, 10_000_000, 0);
    let b = times(now + 1_000_000, 5_000_000, 1);
    let c = times(now - 5_000_000, 0, 2);
    let d = times(now - 1_000_000, 6_000_000, 3);
    let e = times(now - 10_000_000, 0, 4);
    let less = |x: &ItemTimes, y: &ItemTimes| Ordering::Edf.less(x, y);
    assert!(less(&b, &a) && !less(&a, &b), "earlier deadline");
    assert!(less(&a, &c) && !less(&c, &a), "deadline-bound before none");
    assert!(less(&d, &b) && !less(&b, &d), "same deadline: earlier enqueue");
    assert!(less(&e, &c) && !less(&c, &e), "no deadlines: FCFS");
    assert_eq!(Ordering::Edf.key(&times(now, 5_000_000, 0)).0, now + 5_000_000);
    assert_eq!(Ordering::Edf.key(&times(now, 0, 0)).0, u64::MAX);
}

/// upstream: ordering/slodeadline/slo_deadline_test.go::TestSLODeadline_Less (every non-nil
/// case) and ::TestCalculateSLODeadline (valid, missing and overflowing values).
#[test]
fn slo_deadline_less() {
    let now = 10_000_000;
    let item = |received_us: u64, ms: Option<u64>, sequence| ItemTimes {
        enqueue_us: received_us,
        ttl_us: 0,
        received_us,
        slo_ttft_ms: ms,
        sequence,
    };
    let a = item(now, Some(100), 0);
    let b = item(now, Some(50), 1);
    let c = item(now + 20_000, Some(50), 2);
    let d = item(now, None, 3);
    let e = item(now - 1_000_000, Some(1050), 4);
    let f = item(now, Some(i64::MAX as u64), 5);
    let less = |x: &ItemTimes, y: &ItemTimes| Ordering::SloDeadline.less(x, y);
    assert!(less(&b, &a) && !less(&a, &b));
    assert!(less(&c, &a), "received later but earlier deadline");
    assert!(less(&a, &d) && !less(&d, &a), "header before none");
    assert!(less(&e, &b) && !less(&b, &e), "same deadline: earlier receipt");
    assert!(less(&a, &f) && !less(&f, &a), "an overflowing TTFT is none");
    assert_eq!(Ordering::SloDeadline.key(&item(now, Some(200), 0)).0, now + 200_000);
    assert_eq!(Ordering::SloDeadline.key(&item(now, None, 0)).0, u64::MAX);
}

/// upstream: fairness/globalstrict/global_strict_test.go::TestGlobalStrict_Pick
/// ("BasicSelection_TwoQueues", "IgnoresEmptyQueues", "SingleNonEmptyQueue", "AllQueuesEmpty"):
/// the flow whose head the ordering ranks first is served, whatever the flow.
#[test]
fn global_strict_pick() {
    let mut fc = FlowController::new(flow(""));
    assert_eq!(fc.dispatch_cycle(0.0, false), None, "all queues empty");
    fc.enqueue(ticket(1, 0, "flow-b", 1), 100).unwrap();
    fc.enqueue(ticket(2, 0, "flow-a", 1), 200).unwrap();
    fc.enqueue(ticket(3, 0, "flow-b", 1), 300).unwrap();
    let order: Vec<_> = (0..4).map(|_| fc.dispatch_cycle(0.0, false)).collect();
    assert_eq!(order, [Some(1), Some(2), Some(3), None]);
}

/// upstream: fairness/roundrobin/roundrobin_test.go::TestRoundRobin_Pick_Logic,
/// ::TestRoundRobin_Pick_SkipsEmptyQueues and ::TestRoundRobin_Pick_HandlesDynamicFlows: flows in
/// key order, the next non-empty one after the last served, wrapping; a new flow joins the
/// rotation in key order.
#[test]
fn round_robin_pick() {
    let config = load_with(
        "- {name: rr, type: round-robin-fairness-policy}\n",
        "flowControl:\n  defaultPriorityBand: {fairnessPolicyRef: rr}\n",
    )
    .unwrap()
    .flow_control
    .unwrap();
    let mut fc = FlowController::new(config);
    for (key, flow) in [(1, "a"), (2, "a"), (3, "b"), (4, "c"), (5, "c")] {
        fc.enqueue(ticket(key, 0, flow, 1), key).unwrap();
    }
    let mut served = Vec::new();
    served.extend((0..3).map(|_| fc.dispatch_cycle(0.0, false).unwrap()));
    assert_eq!(served, [1, 3, 4], "a, b, c");
    fc.enqueue(ticket(6, 0, "b2", 1), 10).unwrap();
    served.clear();
    served.extend((0..3).map(|_| fc.dispatch_cycle(0.0, false).unwrap()));
    assert_eq!(served, [2, 6, 5], "a, then b (empty) skipped for the new b2, then c");
}

/// upstream: admission_test.go::TestTranslateFlowControlOutcome (every case) and
/// ::TestFlowControlAdmissionController_Admit (the messages: default text, wrapped error text).
#[test]
fn translate_flow_control_outcome() {
    use Cause::*;
    use QueueOutcome::*;
    assert_eq!(translate(Dispatched, None, false), None);
    for (name, outcome, cause, pool_empty, status, header) in [
        ("capacity rejection", RejectedCapacity, QueueAtCapacity, false, 429, Some("rejected-saturated")),
        ("TTL expiry with endpoints", EvictedTtl, TtlExpired, false, 429, Some("rejected-ttl-expired")),
        ("TTL expiry with empty pool", EvictedTtl, TtlExpired, true, 503, Some("rejected-no-endpoints")),
        (
            "context cancellation",
            EvictedContextCancelled,
            ContextCancelled,
            false,
            503,
            Some("rejected-context-cancelled"),
        ),
        ("shutdown eviction", EvictedOther, NotRunning, false, 503, Some("rejected-shutting-down")),
        ("shutdown rejection", RejectedOther, NotRunning, false, 503, Some("rejected-shutting-down")),
        ("pre-admission TTL rejection", RejectedOther, TtlExpired, false, 429, Some("rejected-ttl-expired")),
        (
            "pre-admission TTL rejection, empty pool",
            RejectedOther,
            TtlExpired,
            true,
            503,
            Some("rejected-no-endpoints"),
        ),
        (
            "pre-admission cancellation",
            RejectedOther,
            ContextCancelled,
            false,
            503,
            Some("rejected-context-cancelled"),
        ),
        ("other TTL eviction", EvictedOther, TtlExpired, false, 429, Some("rejected-ttl-expired")),
        (
            "other cancellation eviction",
            EvictedOther,
            ContextCancelled,
            false,
            503,
            Some("rejected-context-cancelled"),
        ),
        ("internal error", RejectedOther, Other("unexpected failure"), false, 500, None),
    ] {
        let r = translate(outcome, Some(cause), pool_empty).unwrap();
        assert_eq!((r.status, r.dropped_reason), (status, header), "{name}");
    }
    let r = translate(RejectedCapacity, None, false).unwrap();
    assert_eq!(r.message, "request rejected by flow control");
    assert_eq!(
        translate_error(EvictedTtl, Some(TtlExpired), "timeout", false).unwrap().message,
        "request timed out in queue: timeout"
    );
    assert_eq!(
        translate_error(EvictedTtl, Some(TtlExpired), "timeout", true).unwrap().message,
        "request timed out in queue and no endpoints are available: timeout"
    );
    assert_eq!(
        translate_error(EvictedOther, Some(Other("internal error")), "internal error", false)
            .unwrap()
            .message,
        "internal flow control error: internal error"
    );
    let ttl = translate(EvictedTtl, Some(TtlExpired), false).unwrap();
    assert_eq!(ttl.message, "request timed out in queue: request evicted from queue: request TTL expired");
    assert_eq!(
        ttl.reason(),
        "rejected-ttl-expired: request timed out in queue: request evicted from queue: request TTL expired"
    );
    let full = translate(RejectedCapacity, Some(QueueAtCapacity), false).unwrap();
    assert_eq!(full.message, "request rejected pre-queue: queue at capacity");
}
