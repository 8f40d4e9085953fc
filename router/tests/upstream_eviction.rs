//! Upstream's in-flight eviction tests, through the crate's public API: the eviction queue
//! (`flowcontrol/eviction/queue_test.go`), the request evictor
//! (`flowcontrol/eviction/request_evictor_test.go`), the filter and order plugins
//! (`framework/plugins/flowcontrol/eviction/{filtering/sheddable,ordering/priority_time}_test.go`),
//! the reclamation controller and its trigger in the dispatch cycle
//! (`flowcontrol/controller/internal/reclamation_test.go`), and the grace derivation
//! (`cmd/epp/runner/runner.go::deriveEvictionConfirmationGrace`).
//!
//! Upstream's queue tests plug in an accept-all filter; the queue here always applies the
//! sheddable filter (the only one the release wires), so those cases use negative priorities
//! with the same relative order. The reclamation tests drive a fake evictor as upstream's do;
//! the dispatch-cycle tests use a real [`FlowController`] with tracked leases in place of the
//! fake's counts. Go's concurrency and failing-evictor cases have no counterpart (one thread;
//! revocation cannot fail in the simulator).

mod common;

use std::sync::Arc;

use blis_router::LoadOptions;
use blis_router::flow_control::eviction::{
    BandDemand, CONFIRMATION_TIMEOUT_US, Eviction, EvictionQueue, InFlightEvictor, Lease, Reclamation,
    ReclamationConfig, RequestEvictor, confirmation_grace_us, evicted_before, sheddable,
};
use blis_router::flow_control::{DEFAULT_FAIRNESS_ID, FlowController, Ticket};
use common::*;

fn lease(key: u64, priority: i64, dispatch_us: u64) -> Lease {
    Lease { key, priority, dispatch_us }
}

fn popped(queue: &mut EvictionQueue) -> Vec<u64> {
    std::iter::from_fn(|| queue.pop().map(|l| l.key)).collect()
}

/// upstream: queue_test.go::TestEvictionQueue_TrackAndUntrack (every case; accept-all cases
/// shifted to negative priorities). Each case: tracked, untracked, (in flight, evictable),
/// pop order, (in flight, evictable) after popping.
#[test]
fn eviction_queue_track_and_untrack() {
    type Case = (&'static str, Vec<Lease>, Vec<u64>, (usize, usize), Vec<u64>, (usize, usize));
    let cases: Vec<Case> = vec![
        ("track evictable and untrack", vec![lease(1, -1, 0)], vec![1], (0, 0), vec![], (0, 0)),
        ("track non-evictable goes to inflight only", vec![lease(1, 5, 0)], vec![], (1, 0), vec![], (1, 0)),
        (
            "mixed evictable and non-evictable",
            vec![lease(1, -1, 0), lease(2, 5, 0)],
            vec![],
            (2, 1),
            vec![1],
            (1, 0),
        ),
        ("untrack non-evictable cleans inflight", vec![lease(1, 5, 0)], vec![1], (0, 0), vec![], (0, 0)),
        ("untrack non-existent is no-op", vec![lease(1, -1, 0)], vec![99], (1, 1), vec![1], (0, 0)),
        (
            "untrack evictable removes from heap",
            vec![lease(1, -1, 0), lease(2, -2, 0), lease(3, -3, 0)],
            vec![3],
            (2, 2),
            vec![2, 1],
            (0, 0),
        ),
        (
            "duplicate track replaces not doubles",
            vec![lease(1, -1, 0), lease(1, -1, 0)],
            vec![],
            (1, 1),
            vec![1],
            (0, 0),
        ),
        (
            "re-track with different priority updates heap",
            vec![lease(1, 5, 0), lease(1, -10, 0), lease(2, -5, 0)],
            vec![],
            (2, 2),
            vec![1, 2],
            (0, 0),
        ),
        (
            "pop order across many priorities (shifted by -10)",
            vec![lease(5, -5, 0), lease(1, -9, 0), lease(3, -7, 0), lease(11, -11, 0), lease(0, -10, 0)],
            vec![],
            (5, 5),
            vec![11, 0, 1, 3, 5],
            (0, 0),
        ),
    ];
    for (name, tracked, untracked, before, order, after) in cases {
        let mut queue = EvictionQueue::default();
        tracked.into_iter().for_each(|l| queue.track(l));
        untracked.into_iter().for_each(|k| queue.untrack(k));
        assert_eq!((queue.in_flight_len(), queue.evictable_len()), before, "{name}");
        assert_eq!(popped(&mut queue), order, "{name}");
        assert_eq!((queue.in_flight_len(), queue.evictable_len()), after, "{name}");
    }
}

/// upstream: queue_test.go::TestEvictionQueue_PopN_TiebreakByDispatchTime (priority -1 for 0):
/// among equal priorities the most recently dispatched goes first.
#[test]
fn eviction_queue_tiebreak_by_dispatch_time() {
    let mut queue = EvictionQueue::default();
    let (newer, oldest, middle) = (1, 2, 3);
    queue.track(lease(newer, -1, 200_000));
    queue.track(lease(oldest, -1, 0));
    queue.track(lease(middle, -1, 100_000));
    assert_eq!(popped(&mut queue), vec![newer, middle, oldest]);
}

/// upstream: queue_test.go::TestEvictionQueue_PopN_Bounds and ::TestEvictionQueue_Peek.
#[test]
fn eviction_queue_bounds_and_peek() {
    let mut queue = EvictionQueue::default();
    assert_eq!(queue.pop(), None, "pop on an empty queue");
    assert_eq!(queue.peek(), None, "peek on an empty queue");
    queue.track(lease(1, -1, 0));
    queue.track(lease(2, -1, 1000));
    assert_eq!(popped(&mut queue), vec![2, 1]);
    assert_eq!((queue.in_flight_len(), queue.evictable_len()), (0, 0), "popping untracks");

    queue.track(lease(10, 5, 0));
    queue.track(lease(11, -1, 0));
    queue.track(lease(12, 2, 0));
    assert_eq!(queue.peek().map(|l| l.key), Some(11), "peek returns the most evictable");
    assert_eq!(queue.evictable_len(), 1, "peek removes nothing (and only the sheddable one is evictable)");
}

/// upstream: sheddable_test.go::TestSheddableFilter_Accept (every case).
#[test]
fn sheddable_filter_accept() {
    for (priority, want) in [(-1, true), (-100, true), (0, false), (1, false), (100, false)] {
        assert_eq!(sheddable(&lease(0, priority, 0)), want, "priority {priority}");
    }
}

/// upstream: priority_time_test.go::TestPriorityThenTimeOrdering_Less (every case).
#[test]
fn priority_then_time_ordering_less() {
    let now = 1_000_000;
    let low_old = lease(0, -2, now - 1_000_000);
    let low_new = lease(0, -2, now);
    let mid = lease(0, 0, now);
    let high = lease(0, 5, now);
    assert!(evicted_before(&low_old, &mid), "lower priority evicted first");
    assert!(!evicted_before(&high, &mid), "higher priority not evicted first");
    assert!(evicted_before(&low_new, &low_old), "same priority newer evicted first");
    assert!(!evicted_before(&low_old, &low_new), "same priority older not evicted first");
    assert!(!evicted_before(&mid, &mid), "same item no preference");
}

/// upstream: request_evictor_test.go::TestRequestEvictor_EvictionTerminatedListener_NotifiedOncePerEvictedRequest,
/// ::TestRequestEvictor_PeekVictimPriority, ::TestRequestEvictor_EvictN_PriorityBound,
/// ::TestRequestEvictor_RaceBetweenEvictAndCompletion (sequentially: evictions interleaved with
/// completions keep in-flight ≥ evictable ≥ 0).
#[test]
fn request_evictor() {
    let mut evictor = RequestEvictor::default();
    assert_eq!(evictor.peek_victim_priority(), None, "no victims when nothing is tracked");
    evictor.track(lease(1, -2, 0));
    assert_eq!(evictor.peek_victim_priority(), Some(-2));

    // Notified once per evicted request; a natural completion does not notify.
    let mut evictor = RequestEvictor::default();
    evictor.track(lease(1, -1, 0));
    evictor.track(lease(2, -1, 0));
    let mut out = Vec::new();
    evictor.evict_n(1, 0, &mut out);
    assert_eq!(out.len(), 1);
    let (evicted, natural) = (out[0], 3 - out[0]);
    assert!(evictor.stream_ended(evicted), "the evicted request's stream end confirms");
    assert!(!evictor.stream_ended(evicted), "the idempotent second cleanup does not");
    assert!(!evictor.stream_ended(natural), "a natural completion does not");

    // The bound: only victims strictly below it.
    let mut evictor = RequestEvictor::default();
    evictor.track(lease(1, -5, 0));
    evictor.track(lease(2, -1, 0));
    let mut out = Vec::new();
    evictor.evict_n(2, -1, &mut out);
    assert_eq!(out, vec![1], "only victims strictly below the bound");
    assert_eq!(evictor.stats(), (1, 1), "the at-bound victim stays tracked and evictable");

    // Evictions interleaved with completions.
    let mut evictor = RequestEvictor::default();
    (0..10).for_each(|k| evictor.track(lease(k, -1, k)));
    for k in 0..10 {
        if k < 5 {
            evictor.evict_n(1, 0, &mut Vec::new());
        }
        evictor.stream_ended(k);
        let (in_flight, evictable) = evictor.stats();
        assert!(in_flight >= evictable, "{k}");
    }
    assert_eq!(evictor.stats(), (0, 0));
}

/// upstream's `fakeInFlightEvictor`: counts, a victim priority, and the calls it got.
#[derive(Default)]
struct FakeEvictor {
    in_flight: usize,
    evictable: usize,
    victim: Option<i64>,
    calls: Vec<usize>,
    bounds: Vec<i64>,
    next: u64,
}

impl InFlightEvictor for FakeEvictor {
    fn evict_n(&mut self, n: usize, priority_bound: i64, out: &mut Vec<u64>) {
        self.calls.push(n);
        self.bounds.push(priority_bound);
        let n = n.min(self.evictable);
        for _ in 0..n {
            out.push(self.next);
            self.next += 1;
        }
        self.evictable -= n;
        self.in_flight -= n;
    }
    fn stats(&self) -> (usize, usize) {
        (self.in_flight, self.evictable)
    }
    fn peek_victim_priority(&self) -> Option<i64> {
        self.victim
    }
}

/// upstream's `testReclamationConfig`.
const CONFIG: ReclamationConfig = ReclamationConfig {
    max_revocations_per_decision: 2,
    confirmation_grace_us: 100_000,
    confirmation_timeout_us: 5_000_000,
};

fn fake(in_flight: usize, evictable: usize) -> FakeEvictor {
    FakeEvictor { in_flight, evictable, ..FakeEvictor::default() }
}

/// upstream: reclamation_test.go::TestReclamationController_Sizing (every case).
#[test]
fn reclamation_sizing() {
    /// name, in flight, evictable, saturation, ceiling, the `evict_n` calls expected.
    type Case = (&'static str, usize, usize, f64, f64, Vec<usize>);
    let cases: [Case; 6] = [
        ("SmallDeficit_EvictsOne", 6, 6, 1.2, 1.0, vec![1]),
        ("DeepOverload_CappedByMaxPerDecision", 4, 4, 2.0, 1.0, vec![2]),
        ("CappedByEvictable", 4, 1, 2.0, 1.0, vec![1]),
        ("NoDeficit_NoEviction", 6, 6, 0.9, 1.0, vec![]),
        ("ExactBoundary_EvictsOne", 10, 10, 1.0, 1.0, vec![1]),
        ("ZeroLeases_NoEviction", 0, 0, 1.5, 1.0, vec![]),
    ];
    for (name, in_flight, evictable, saturation, ceiling, expected) in cases {
        let mut evictor = fake(in_flight, evictable);
        Reclamation::new(CONFIG).reclaim(&mut evictor, 0, saturation, ceiling, 0, &mut Vec::new());
        assert_eq!(evictor.calls, expected, "{name}");
    }
}

/// upstream: reclamation_test.go::TestReclamationController_GateLifecycle.
#[test]
fn reclamation_gate_lifecycle() {
    let mut evictor = fake(4, 4);
    let mut rc = Reclamation::new(CONFIG);
    assert!(rc.gate_open(0), "open initially");
    let mut out = Vec::new();
    rc.reclaim(&mut evictor, 0, 2.0, 1.0, 0, &mut out);
    assert_eq!(evictor.calls, vec![2]);
    assert!(!rc.gate_open(0), "closed while revocations are outstanding");
    rc.confirm(out[0], 0);
    assert!(!rc.gate_open(0), "closed until all revocations confirm");
    rc.confirm(out[1], 0);
    assert!(!rc.gate_open(0), "closed during the grace window");
    assert!(rc.gate_open(CONFIG.confirmation_grace_us + 1000), "open after all confirmations plus grace");
}

/// upstream: reclamation_test.go::TestReclamationController_ConfirmUnknownID_Ignored and
/// ::TestReclamationController_ConfirmationTimeout_ReopensGate.
#[test]
fn reclamation_confirmation_timeout_and_unknown_ids() {
    let mut rc = Reclamation::new(CONFIG);
    rc.confirm(12345, 0);
    assert!(rc.gate_open(0), "an unknown confirmation does not perturb the gate");

    let mut evictor = fake(4, 4);
    let mut out = Vec::new();
    rc.reclaim(&mut evictor, 0, 2.0, 1.0, 0, &mut out);
    assert!(!rc.gate_open(0));
    let retired = CONFIG.confirmation_timeout_us + 1000;
    assert!(!rc.gate_open(retired), "the first check after the timeout retires, grace restarts");
    let reopened = retired + CONFIG.confirmation_grace_us + 1000;
    assert!(rc.gate_open(reopened), "open after timeout retirement plus grace");
    rc.confirm(out[0], reopened);
    assert!(rc.gate_open(reopened), "a late confirmation does not re-close the gate");
}

/// upstream: reclamation_test.go::TestReclamationController_PendingDebit_SuppressesRepeatDecision
/// and ::TestReclaim_PassesDemandPriorityAsVictimBound.
#[test]
fn reclamation_pending_debit_and_victim_bound() {
    let mut evictor = fake(4, 4);
    let mut rc = Reclamation::new(CONFIG);
    rc.reclaim(&mut evictor, 0, 2.0, 1.0, 0, &mut Vec::new());
    rc.reclaim(&mut evictor, 0, 2.0, 1.0, 0, &mut Vec::new());
    assert_eq!(evictor.calls, vec![2], "the pending debit covers the deficit of the same signal");

    let mut evictor = fake(4, 4);
    Reclamation::new(CONFIG).reclaim(&mut evictor, 0, 2.0, 1.0, -1, &mut Vec::new());
    assert_eq!(evictor.bounds, vec![-1], "the demand band's priority is the victim bound");
}

/// A controller with band 10 (upstream's `testFlow`) and band 0, eviction on with the test
/// tuning; `leases` tracked.
fn processor(leases: &[(u64, i64)]) -> FlowController {
    let yaml = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nfeatureGates: [flowControl]\n\
                flowControl:\n  enableEviction: true\n  priorityBands: [{priority: 10}]\n";
    let config = load_yaml(yaml, LoadOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let flow = config.flow_control.expect("the gate is on");
    assert!(flow.enable_eviction);
    let mut controller = FlowController::new(flow);
    controller.enable_eviction(CONFIG);
    for &(key, priority) in leases {
        controller.track_in_flight(key, priority, key);
    }
    controller
}

fn blocked_item(controller: &mut FlowController, priority: i64) {
    let ticket = Ticket {
        key: 1000,
        priority,
        fairness_id: Arc::from(DEFAULT_FAIRNESS_ID),
        byte_size: 10,
        received_us: 0,
        slo_ttft_ms: None,
    };
    controller.enqueue(ticket, 0).unwrap();
}

/// Six in flight, three of them sheddable at -1 (the fake's counts).
const SIX: [(u64, i64); 6] = [(1, 0), (2, 0), (3, 0), (4, -1), (5, -1), (6, -1)];

/// upstream: reclamation_test.go::TestDispatchCycle_HoLBlock_TriggersReclamation,
/// ::TestDispatchCycle_NoQueuedDemand_NoReclamation, ::TestDispatchCycle_VictimNotStrictlyLower_NoReclamation,
/// ::TestDispatchCycle_NoVictims_NoReclamation, ::TestDispatchCycle_GateClosed_SkipsDemandScan.
#[test]
fn dispatch_cycle_triggers_reclamation() {
    let cycle = |controller: &mut FlowController, now_us: u64| {
        assert_eq!(controller.dispatch_cycle(1.2, false), None, "a saturated cycle does not dispatch");
        let mut out = Vec::new();
        controller.reclaim(now_us, &mut out);
        out
    };
    // credit 1.2/6 = 0.2, deficit 0.2: one revocation, the most recent sheddable lease.
    let mut controller = processor(&SIX);
    blocked_item(&mut controller, 10);
    assert_eq!(cycle(&mut controller, 0), vec![6], "HoL blocking with eligible demand revokes");
    // The gate stays shut on repeated cycles against the same gauge.
    for ms in 1..=10 {
        assert_eq!(cycle(&mut controller, ms * 1000), Vec::<u64>::new(), "gate closed at {ms} ms");
    }

    let mut controller = processor(&SIX);
    assert_eq!(cycle(&mut controller, 0), Vec::<u64>::new(), "no queued demand, nothing to reclaim for");

    let mut controller = processor(&[(1, 0), (2, 10), (3, 10)]);
    blocked_item(&mut controller, 10);
    assert_eq!(cycle(&mut controller, 0), Vec::<u64>::new(), "no sheddable lease, no victim");

    let mut controller = processor(&[]);
    blocked_item(&mut controller, 10);
    assert_eq!(cycle(&mut controller, 0), Vec::<u64>::new(), "nothing in flight, no decision");
}

/// upstream: reclamation_test.go::TestDispatchCycle_VictimNotStrictlyLower_NoReclamation with a
/// real sheddable band: demand at -1 never evicts a -1 lease (no same-band churn).
#[test]
fn victim_not_strictly_lower_no_reclamation() {
    let mut controller = processor(&[(1, -1), (2, -1)]);
    blocked_item(&mut controller, -1);
    assert_eq!(controller.dispatch_cycle(1.2, false), None);
    let mut out = Vec::new();
    controller.reclaim(0, &mut out);
    assert!(out.is_empty(), "{out:?}");
}

/// upstream: runner.go::deriveEvictionConfirmationGrace — 10 ms for the concurrency detector,
/// 50 ms + 2 s + 250 ms = 2.3 s for scraped ones at the default interval; the 10 s timeout.
#[test]
fn confirmation_grace_derivation() {
    assert_eq!(confirmation_grace_us(true, 50_000), 10_000);
    assert_eq!(confirmation_grace_us(false, 50_000), 2_300_000);
    assert_eq!(CONFIRMATION_TIMEOUT_US, 10_000_000);
    assert_eq!(ReclamationConfig::derived(false, 50_000).max_revocations_per_decision, 2);
}

/// upstream: reclamation_test.go::TestMaybeReclaim_ZeroCeilingBand_NotEligibleDemand: a band
/// whose ceiling is 0 can never be unblocked, so its queue is no demand; an attainable ceiling is.
#[test]
fn maybe_reclaim_zero_ceiling_band_is_no_demand() {
    let mut eviction = Eviction::new(CONFIG);
    for &(key, priority) in &SIX {
        eviction.evictor.track(lease(key, priority, key));
    }
    let band = |ceiling| [BandDemand { priority: 10, ceiling, queued: true }];
    let mut out = Vec::new();
    eviction.maybe_reclaim(0, 1.0, &band(0.0), 0, &mut out);
    assert!(out.is_empty(), "a zero-ceiling band does not trigger reclamation");
    eviction.maybe_reclaim(0, 1.0, &band(0.9), 0, &mut out);
    assert_eq!(out.len(), 1, "an attainable blocked ceiling reclaims");
}
