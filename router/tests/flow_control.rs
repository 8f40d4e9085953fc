//! Our own flow-control tests: a burst into a saturated pool, driven as the router host drives
//! the controller (expiries, then the 1 s sweep, then arrivals each followed by a dispatch
//! cycle, then the 1 ms tick's cycle), with every request's fate written out; the loader's
//! refusals of bad `flowControl` sections, each with its path, value and cause.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use blis_router::flow_control::{DEFAULT_FAIRNESS_ID, FlowController, QueueOutcome, Ticket, translate};
use blis_router::{ConfigError, LoadOptions};
use common::*;

const HEAD: &str = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nfeatureGates: [flowControl]\n";

/// What became of one request.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Fate {
    /// Dispatched to scheduling at this time (ms).
    Dispatched(u64),
    /// Answered with this status and dropped-reason header at this time (ms).
    Dropped(u16, &'static str, u64),
}

/// Drive `controller` from 0 to `end_ms` with `arrivals` (key, priority, ms) and the pool's
/// saturation given by `saturation(ms, dispatched so far)`.
fn drive(
    controller: &mut FlowController,
    arrivals: &[(u64, i64, u64)],
    end_ms: u64,
    saturation: impl Fn(u64, usize) -> f64,
) -> BTreeMap<u64, Fate> {
    let mut fates = BTreeMap::new();
    let mut expired = Vec::new();
    for ms in 0..=end_ms {
        let us = ms * 1000;
        controller.expire(us, &mut expired);
        if us > 0 && us.is_multiple_of(1_000_000) {
            controller.sweep();
        }
        for f in expired.drain(..) {
            let r = translate(f.outcome, Some(f.cause), false).unwrap();
            fates.insert(f.key, Fate::Dropped(r.status, r.dropped_reason.unwrap(), ms));
        }
        let cycle = |controller: &mut FlowController, fates: &mut BTreeMap<u64, Fate>| {
            let dispatched = fates.values().filter(|f| matches!(f, Fate::Dispatched(_))).count();
            if let Some(key) = controller.dispatch_cycle(saturation(ms, dispatched), false) {
                fates.insert(key, Fate::Dispatched(ms));
            }
        };
        for &(key, priority, _) in arrivals.iter().filter(|a| a.2 == ms) {
            let ticket = Ticket {
                key,
                priority,
                fairness_id: Arc::from(DEFAULT_FAIRNESS_ID),
                byte_size: 100,
                received_us: us,
            };
            if let Err(f) = controller.enqueue(ticket, us) {
                let r = translate(f.outcome, Some(f.cause), false).unwrap();
                fates.insert(f.key, Fate::Dropped(r.status, r.dropped_reason.unwrap(), ms));
            }
            cycle(controller, &mut fates);
        }
        if ms > 0 {
            cycle(controller, &mut fates);
        }
    }
    fates
}

/// A burst into a saturated pool: bands 1, 0 (3 requests at most) and the negative template
/// (2 at most), TTL 100 ms. Saturated (1.2) until 50 ms; then 0.5 plus 0.2 per request
/// dispatched, so three leave and the pool is saturated again. Written out per request:
/// capacity rejections at arrival, the three dispatches highest band first, TTL expiries
/// (429) of the rest — and the expired items still holding the negative band's capacity until
/// the 1 s sweep, so a sheddable request at 200 ms is refused and one at 1001 ms is queued
/// (and expires in turn).
#[test]
fn a_burst_queues_by_band_sheds_at_capacity_and_expires_by_ttl() {
    let config = load_yaml(
        &format!(
            "{HEAD}flowControl:\n  defaultRequestTTL: 100ms\n  priorityBands: [{{priority: 1}}, {{priority: 0, maxRequests: 3}}]\n  \
             defaultNegativePriorityBand: {{maxRequests: 2}}\n"
        ),
        LoadOptions::default(),
    )
    .unwrap();
    let mut controller = FlowController::new(config.flow_control.unwrap());
    let arrivals = [
        (1, 0, 0),
        (2, -1, 0),
        (3, -1, 1),
        (4, -1, 2),
        (5, 1, 3),
        (6, 0, 4),
        (7, 0, 5),
        (8, 0, 6),
        (9, -1, 200),
        (10, -1, 1001),
    ];
    let fates =
        drive(
            &mut controller,
            &arrivals,
            1200,
            |ms, dispatched| {
                if ms < 50 { 1.2 } else { 0.5 + 0.2 * dispatched as f64 }
            },
        );
    use Fate::*;
    let expected = BTreeMap::from([
        (1, Dispatched(51)),
        (2, Dropped(429, "rejected-ttl-expired", 100)),
        (3, Dropped(429, "rejected-ttl-expired", 101)),
        (4, Dropped(429, "rejected-saturated", 2)),
        (5, Dispatched(50)),
        (6, Dispatched(52)),
        (7, Dropped(429, "rejected-ttl-expired", 105)),
        (8, Dropped(429, "rejected-saturated", 6)),
        (9, Dropped(429, "rejected-saturated", 200)),
        (10, Dropped(429, "rejected-ttl-expired", 1101)),
    ]);
    assert_eq!(fates, expected);
    assert_eq!(fates.len(), arrivals.len(), "every request has a fate");
    assert_eq!(controller.len(), 1, "request 10 expired and awaits the next sweep");
}

/// Without a TTL (`0s`) nothing expires: a saturated pool holds the burst until it drains, and
/// the negative band's small capacity is the only fast failure (the release note's advice).
#[test]
fn without_a_ttl_requests_wait_until_the_pool_drains() {
    let config = load_yaml(
        &format!(
            "{HEAD}flowControl:\n  defaultRequestTTL: 0s\n  defaultNegativePriorityBand: {{maxRequests: 1}}\n"
        ),
        LoadOptions::default(),
    )
    .unwrap();
    let mut controller = FlowController::new(config.flow_control.unwrap());
    let arrivals = [(1, -1, 0), (2, -1, 1), (3, 2, 2), (4, 0, 3)];
    let fates = drive(&mut controller, &arrivals, 3000, |ms, _| if ms < 2500 { 1.0 } else { 0.0 });
    use Fate::*;
    assert_eq!(
        fates,
        BTreeMap::from([
            (1, Dispatched(2502)),
            (2, Dropped(429, "rejected-saturated", 1)),
            (3, Dispatched(2500)),
            (4, Dispatched(2501)),
        ])
    );
}

/// A usage-limit threshold below 1 gates dispatch earlier: at saturation 0.6 a 0.5 ceiling
/// holds every band.
#[test]
fn the_usage_limit_threshold_is_the_ceiling() {
    let config = load_yaml(
        &format!(
            "{HEAD}plugins:\n- {{name: half, type: static-usage-limit-policy, parameters: {{threshold: 0.5}}}}\n\
             flowControl:\n  usageLimitPolicyPluginRef: half\n"
        ),
        LoadOptions::default(),
    )
    .unwrap();
    let mut controller = FlowController::new(config.flow_control.unwrap());
    let fates = drive(&mut controller, &[(1, 0, 0)], 20, |ms, _| if ms < 10 { 0.6 } else { 0.49 });
    assert_eq!(fates, BTreeMap::from([(1, Fate::Dispatched(10))]));
}

fn refused(yaml: &str) -> ConfigError {
    load_yaml(&format!("{HEAD}{yaml}"), LoadOptions::default()).expect_err(yaml)
}

/// Every bad `flowControl` section is refused with its path, value and cause.
#[test]
fn bad_flow_control_sections_are_refused_by_path_value_and_cause() {
    let cases: &[(&str, &str, Option<&str>, &str)] = &[
        (
            "flowControl:\n  priorityBands: [{priority: 1}, {maxBytes: 5}]\n",
            "flowControl.priorityBands[1].priority",
            None,
            "a priority band must name its priority",
        ),
        (
            "flowControl:\n  saturationDetector: {pluginRef: nowhere}\n",
            "flowControl.saturationDetector.pluginRef",
            Some("\"nowhere\""),
            "saturation detector references undefined plugin 'nowhere'",
        ),
        (
            "plugins:\n- {type: queue-scorer}\nflowControl:\n  saturationDetector: {pluginRef: queue-scorer}\n",
            "flowControl.saturationDetector.pluginRef",
            Some("\"queue-scorer\""),
            "plugin 'queue-scorer' is not a fwkfc.SaturationDetector",
        ),
        (
            "flowControl:\n  priorityBands: [{priority: 3}, {priority: 3}]\n",
            "flowControl.priorityBands[1].priority",
            Some("3"),
            "duplicate priority level 3",
        ),
        (
            "flowControl:\n  priorityBands: [{priority: 3, fairnessPolicyRef: fcfs-ordering-policy}]\n",
            "flowControl.priorityBands[0].fairnessPolicyRef",
            Some("\"fcfs-ordering-policy\""),
            "plugin \"fcfs-ordering-policy\" does not implement flowcontrol.FairnessPolicy",
        ),
        (
            "flowControl:\n  priorityBands: [{priority: 3, weight: 2}]\n",
            "flowControl.priorityBands[0].weight",
            None,
            "strict decoding error: unknown field \"flowControl.priorityBands[0].weight\"",
        ),
        (
            "flowControl:\n  maxBytes: lots\n",
            "flowControl.maxBytes",
            Some("\"lots\""),
            "quantities must match",
        ),
        (
            "flowControl:\n  maxRequests: -3\n",
            "flowControl.maxRequests",
            Some("-3"),
            "global MaxRequests must be non-negative, got -3",
        ),
        (
            "flowControl:\n  maxBytes: 1e30\n",
            "flowControl.maxBytes",
            Some("1e+30"),
            "at most 9007199254740992",
        ),
        (
            "flowControl:\n  defaultRequestTTL: soon\n",
            "flowControl.defaultRequestTTL",
            Some("\"soon\""),
            "time: invalid duration",
        ),
        (
            "flowControl:\n  defaultRequestTTL: -5s\n",
            "flowControl.defaultRequestTTL",
            Some("\"-5s\""),
            "DefaultRequestTTL cannot be negative, but got -5s",
        ),
        (
            "flowControl:\n  priorityBands: [{priority: 99999999999}]\n",
            "flowControl.priorityBands[0].priority",
            Some("99999999999"),
            "at most 2147483647",
        ),
        (
            "flowControl:\n  usageLimitPolicyPluginRef: queue\n",
            "flowControl.usageLimitPolicyPluginRef",
            Some("\"queue\""),
            "plugin \"queue\" not found",
        ),
        (
            "plugins:\n- {type: static-usage-limit-policy, parameters: {ceiling: 2}}\n",
            "plugins[0].parameters.ceiling",
            None,
            "failed to parse static usage limit policy config: json: unknown field \"ceiling\"",
        ),
        (
            "flowControl:\n  enableEviction: true\n",
            "flowControl.enableEviction",
            Some("\"true\""),
            "in-flight eviction is not modelled yet",
        ),
        (
            "plugins:\n- {type: priority-holdback-policy}\nflowControl:\n  usageLimitPolicyPluginRef: priority-holdback-policy\n",
            "plugins[0].type",
            Some("\"priority-holdback-policy\""),
            "is not modelled yet",
        ),
    ];
    for &(yaml, path, value, words) in cases {
        let e = refused(yaml);
        assert_eq!(e.path, path, "{yaml}: {e}");
        assert_eq!(e.value.as_deref(), value, "{yaml}: {e}");
        assert!(e.reason.contains(words), "{yaml}: {e}");
    }
}

/// The gate off keeps every setting inert (upstream's warning) and builds no flow control;
/// band fates are as upstream's outcome mapping says, whatever the band.
#[test]
fn the_gate_off_builds_no_flow_control() {
    let config = load_yaml(
        "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nflowControl:\n  priorityBands: [{priority: 1}]\n",
        LoadOptions::default(),
    )
    .unwrap();
    assert!(config.flow_control.is_none());
    assert!(config.inert.iter().any(|i| i.path == "flowControl.priorityBands"));
    assert_eq!(translate(QueueOutcome::RejectedCapacity, None, false).map(|r| r.status), Some(429));
}
