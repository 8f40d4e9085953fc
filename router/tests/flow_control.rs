//! Our own flow-control tests: a burst into a saturated pool, driven as the router host drives
//! the controller (expiries, then the 1 s sweep, then arrivals each followed by a dispatch
//! cycle, then the 1 ms tick's cycle), with every request's fate written out; in-flight eviction
//! decision by decision (victims, order, the cap, the grace); the loader's
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
                slo_ttft_ms: None,
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
            "flowControl:\n  enableEviction: \"yes\"\n",
            "flowControl.enableEviction",
            None,
            "expected a boolean",
        ),
        ("flowControl:\n  enableEviction: 1\n", "flowControl.enableEviction", None, "expected a boolean"),
        (
            "flowControl:\n  enableEviction: true\n  maxRevocationsPerDecision: 3\n",
            "flowControl.maxRevocationsPerDecision",
            None,
            "strict decoding error: unknown field \"maxRevocationsPerDecision\"",
        ),
        (
            "plugins:\n- {type: sheddable-eviction-filter}\n",
            "plugins[0].type",
            Some("\"sheddable-eviction-filter\""),
            "never consults a configured instance",
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

mod properties {
    use super::*;
    use proptest::prelude::*;

    /// One step of a random run.
    #[derive(Clone, Debug)]
    enum Op {
        /// A request of this priority band index (into `BANDS`) and flow arrives.
        Arrive(usize, u8),
        /// A dispatch cycle at this saturation.
        Cycle(f64),
        /// Time passes (ms), then expiries.
        Wait(u64),
        /// The client of the n-th request so far gives up.
        Cancel(usize),
        /// The cleanup sweep.
        Sweep,
    }

    const BANDS: [i64; 4] = [2, 0, -1, -3];

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..BANDS.len(), 0u8..3).prop_map(|(b, f)| Op::Arrive(b, f)),
            4 => prop_oneof![Just(0.0), Just(0.5), Just(0.99), Just(1.0), Just(1.7)].prop_map(Op::Cycle),
            2 => (0u64..80).prop_map(Op::Wait),
            1 => (0usize..64).prop_map(Op::Cancel),
            1 => Just(Op::Sweep),
        ]
    }

    proptest! {
        /// Over random arrivals, cycles, waits, cancellations and sweeps: every request ends at
        /// most once (dispatched, refused, expired or cancelled) and is otherwise still waiting;
        /// the limits are never exceeded; a saturated cycle dispatches nothing; a dispatch
        /// comes from the highest band holding anything; within one flow, requests leave in
        /// arrival order (FCFS, under global-strict fairness in band 2 and the negative bands, round-robin
        /// in band 0); the controller's counts match what is waiting; and no band keeps a flow
        /// without items (the map is bounded by what is queued, not by the fairness ids seen).
        #[test]
        fn the_controller_keeps_its_invariants(ops in prop::collection::vec(op(), 1..200)) {
            let config = load_yaml(
                &format!(
                    "{HEAD}plugins:\n- {{name: rr, type: round-robin-fairness-policy}}\n\
                     flowControl:\n  defaultRequestTTL: 50ms\n  maxRequests: 12\n  \
                     priorityBands: [{{priority: 2, maxRequests: 4}}, {{priority: 0, maxRequests: 6, fairnessPolicyRef: rr}}]\n  \
                     defaultNegativePriorityBand: {{maxRequests: 3}}\n"
                ),
                LoadOptions::default(),
            )
            .unwrap();
            let mut fc = FlowController::new(config.flow_control.unwrap());
            let mut now_us = 0u64;
            let mut sent: Vec<(u64, i64, u8)> = Vec::new();
            let mut ended: BTreeMap<u64, &'static str> = BTreeMap::new();
            let mut last_left: BTreeMap<(i64, u8), u64> = BTreeMap::new();
            let mut expired = Vec::new();
            for op in ops {
                match op {
                    Op::Arrive(b, f) => {
                        let key = sent.len() as u64;
                        let priority = BANDS[b];
                        sent.push((key, priority, f));
                        let flow: Arc<str> = Arc::from(format!("flow-{f}"));
                        let ticket = Ticket { key, priority, fairness_id: flow, byte_size: 10, received_us: now_us, slo_ttft_ms: None };
                        if let Err(refusal) = fc.enqueue(ticket, now_us) {
                            prop_assert_eq!(refusal.outcome, QueueOutcome::RejectedCapacity);
                            prop_assert!(ended.insert(key, "refused").is_none());
                        }
                    }
                    Op::Cycle(saturation) => {
                        let before: Vec<u64> = BANDS.iter().map(|&p| fc.band_len(p)).collect();
                        match fc.dispatch_cycle(saturation, false) {
                            Some(key) => {
                                prop_assert!(saturation < 1.0);
                                let (_, priority, f) = sent[key as usize];
                                let band = BANDS.iter().position(|&p| p == priority).unwrap();
                                prop_assert!(before[..band].iter().all(|&n| n == 0), "a higher band held items");
                                if let Some(&previous) = last_left.get(&(priority, f)) {
                                    prop_assert!(previous < key, "FCFS within a flow");
                                }
                                last_left.insert((priority, f), key);
                                prop_assert!(ended.insert(key, "dispatched").is_none());
                            }
                            None if saturation >= 1.0 => {
                                let after: Vec<u64> = BANDS.iter().map(|&p| fc.band_len(p)).collect();
                                prop_assert_eq!(before, after, "a saturated cycle changes nothing");
                            }
                            None => {}
                        }
                    }
                    Op::Wait(ms) => {
                        now_us += ms * 1000;
                        fc.expire(now_us, &mut expired);
                        for f in expired.drain(..) {
                            prop_assert_eq!(f.outcome, QueueOutcome::EvictedTtl);
                            prop_assert!(ended.insert(f.key, "expired").is_none());
                        }
                    }
                    Op::Cancel(n) => {
                        if let Some(&(key, _, _)) = sent.get(n) {
                            let waiting = fc.holds(key);
                            let cancelled = fc.cancel(key);
                            prop_assert_eq!(waiting, cancelled.is_some());
                            if cancelled.is_some() {
                                prop_assert!(ended.insert(key, "cancelled").is_none());
                            }
                        }
                    }
                    Op::Sweep => fc.sweep(),
                }
                prop_assert!(fc.len() <= 12);
                prop_assert!(fc.band_len(2) <= 4 && fc.band_len(0) <= 6);
                prop_assert!(fc.band_len(-1) <= 3 && fc.band_len(-3) <= 3);
                let waiting = sent.iter().filter(|(k, _, _)| fc.holds(*k)).count();
                prop_assert_eq!(waiting + ended.len(), sent.len(), "every request ended once or waits");
                prop_assert!(fc.len() as usize >= waiting, "finalized items may linger, never the reverse");
                prop_assert!(fc.flow_count() as u64 <= fc.len(), "an emptied flow leaves its band");
            }
            fc.sweep();
            let waiting = sent.iter().filter(|(k, _, _)| fc.holds(*k)).count() as u64;
            prop_assert_eq!(fc.len(), waiting, "after a sweep only waiting requests remain");
        }
    }
}

/// In-flight eviction, decision by decision: a pool of capacity 8 (saturation = in flight /
/// capacity, as the concurrency detector counts) takes six sheddable requests and one standard
/// one; at 10 ms its capacity halves (to 4: saturation 7/4 = 1.75) and two critical requests
/// arrive and wait behind it. With the concurrency detector's 10 ms grace, the reclamation
/// controller decides at 10, 20, 30 and 40 ms and never in between: at 10 ms the deficit
/// (0.75 against a credit of 1.75/7 = 0.25) asks for 3 revocations, capped at 2 — the
/// priority −2 request first (lowest priority, though dispatched first), then the most recent
/// −1 one (key 5); then one per decision, most recent first (4, 3, 2). Critical 10 leaves at
/// 31 ms (after the third revocation brings saturation under 1), critical 11 at 41 ms. The
/// standard request (priority 0) and the oldest sheddable one (key 1) are never touched.
/// Every request's fate is written out; each evicted one is answered 429 `evicted`.
#[test]
fn a_critical_request_behind_saturation_evicts_sheddable_requests_in_flight() {
    use blis_router::flow_control::evicted_in_flight;
    use blis_router::flow_control::eviction::ReclamationConfig;

    let yaml = format!("{HEAD}flowControl:\n  enableEviction: true\n");
    let config = load_yaml(&yaml, LoadOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let mut controller = FlowController::new(config.flow_control.expect("the gate is on"));
    let reclamation = ReclamationConfig::derived(true, 50_000);
    assert_eq!(reclamation.confirmation_grace_us, 10_000);
    controller.enable_eviction(reclamation);

    let arrivals: [(u64, i64, u64); 9] = [
        (6, -2, 0),
        (1, -1, 1),
        (2, -1, 2),
        (3, -1, 3),
        (4, -1, 4),
        (5, -1, 5),
        (7, 0, 6),
        (10, 2, 10),
        (11, 2, 10),
    ];
    #[derive(Debug, PartialEq)]
    enum Fate {
        InFlight { dispatched_ms: u64 },
        Evicted { dispatched_ms: u64, evicted_ms: u64 },
    }
    let mut fates: BTreeMap<u64, Fate> = BTreeMap::new();
    let mut decisions: Vec<(u64, Vec<u64>)> = Vec::new();
    let mut revoked = Vec::new();
    let priority = |key: u64| arrivals.iter().find(|a| a.0 == key).unwrap().1;
    for ms in 0..=60u64 {
        let us = ms * 1000;
        let capacity = if ms < 10 { 8.0 } else { 4.0 };
        let mut cycle = |controller: &mut FlowController, fates: &mut BTreeMap<u64, Fate>| {
            let in_flight = fates.values().filter(|f| matches!(f, Fate::InFlight { .. })).count();
            match controller.dispatch_cycle(in_flight as f64 / capacity, false) {
                Some(key) => {
                    controller.track_in_flight(key, priority(key), us);
                    fates.insert(key, Fate::InFlight { dispatched_ms: ms });
                }
                None => {
                    controller.reclaim(us, &mut revoked);
                    if !revoked.is_empty() {
                        decisions.push((ms, revoked.clone()));
                    }
                    for key in revoked.drain(..) {
                        // The host answers the client and aborts the engine; the stream ends.
                        controller.stream_ended(key, us);
                        let Some(Fate::InFlight { dispatched_ms }) = fates.remove(&key) else {
                            panic!("{key} revoked while not in flight")
                        };
                        fates.insert(key, Fate::Evicted { dispatched_ms, evicted_ms: ms });
                    }
                }
            }
        };
        for &(key, priority, _) in arrivals.iter().filter(|a| a.2 == ms) {
            let ticket = Ticket {
                key,
                priority,
                fairness_id: Arc::from(DEFAULT_FAIRNESS_ID),
                byte_size: 100,
                received_us: us,
                slo_ttft_ms: None,
            };
            controller.enqueue(ticket, us).expect("room in the queues");
            cycle(&mut controller, &mut fates);
        }
        if ms > 0 && !controller.is_empty() {
            cycle(&mut controller, &mut fates);
        }
    }
    assert_eq!(decisions, vec![(10, vec![6, 5]), (20, vec![4]), (30, vec![3]), (40, vec![2])]);
    let expected = BTreeMap::from([
        (1, Fate::InFlight { dispatched_ms: 1 }),
        (2, Fate::Evicted { dispatched_ms: 2, evicted_ms: 40 }),
        (3, Fate::Evicted { dispatched_ms: 3, evicted_ms: 30 }),
        (4, Fate::Evicted { dispatched_ms: 4, evicted_ms: 20 }),
        (5, Fate::Evicted { dispatched_ms: 5, evicted_ms: 10 }),
        (6, Fate::Evicted { dispatched_ms: 0, evicted_ms: 10 }),
        (7, Fate::InFlight { dispatched_ms: 6 }),
        (10, Fate::InFlight { dispatched_ms: 31 }),
        (11, Fate::InFlight { dispatched_ms: 41 }),
    ]);
    assert_eq!(fates, expected);
    assert!(controller.is_empty(), "every queued request left");
    let eviction = controller.eviction().expect("on");
    use blis_router::flow_control::eviction::InFlightEvictor;
    assert_eq!(eviction.evictor.stats(), (4, 1), "1, 7, 10 and 11 in flight; only 1 evictable");
    let refusal = evicted_in_flight();
    assert_eq!(
        (refusal.status, refusal.reason()),
        (429, "evicted: request evicted by flow control".to_owned())
    );
}
