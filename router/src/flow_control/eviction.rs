//! In-flight eviction (`flowControl.enableEviction`, llm-d-router v0.10.0, #2093): when a band
//! with queued demand is blocked by saturation, dispatched requests of a strictly lower, negative
//! priority are revoked to reclaim capacity (`flowcontrol/eviction/`,
//! `controller/internal/reclamation.go`, `processor.go::maybeReclaim`).
//!
//! Three pieces, as upstream: [`EvictionQueue`] tracks every dispatched request and keeps the
//! evictable ones (the `sheddable-eviction-filter`: priority < 0) in victim order (the
//! `priority-then-time-eviction-order-policy`: lowest priority first, among equals the most
//! recently dispatched first); [`RequestEvictor`] revokes from it and reports, once per revoked
//! request, that its stream ended (the confirmation); [`Reclamation`] sizes each decision
//! (`max(1, ⌈(saturation − ceiling − pending) / (saturation / in-flight)⌉)`, at most
//! [`MAX_REVOCATIONS_PER_DECISION`]) and paces them: a new decision only once every earlier
//! revocation is confirmed (or timed out after [`CONFIRMATION_TIMEOUT_US`]) and the confirmation
//! grace has passed since. Upstream breaks ties between two leases of equal priority and dispatch
//! time by heap position; here the one tracked later goes first.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

/// `defaultMaxRevocationsPerDecision`.
pub const MAX_REVOCATIONS_PER_DECISION: usize = 2;
/// `defaultEvictionConfirmationTimeout`, µs.
pub const CONFIRMATION_TIMEOUT_US: u64 = 10_000_000;
/// `evictionLeadingSensorGrace`: the grace with the concurrency detector, µs.
pub const LEADING_SENSOR_GRACE_US: u64 = 10_000;
/// `evictionEngineReclaimBudget`: engine abort and KV collection before a scrape shows it, µs.
pub const ENGINE_RECLAIM_BUDGET_US: u64 = 250_000;
/// `--metrics-staleness-threshold`'s default (the flag blis-actor does not expose), µs.
pub const METRICS_STALENESS_THRESHOLD_FLAG_US: u64 = 2_000_000;

/// `deriveEvictionConfirmationGrace`: 10 ms for the concurrency detector (its counters drop as
/// the stream ends), else `--refresh-metrics-interval` + `--metrics-staleness-threshold` +
/// 250 ms (the freed capacity shows only in a later, fresh scrape).
pub fn confirmation_grace_us(concurrency_detector: bool, refresh_metrics_interval_us: u64) -> u64 {
    if concurrency_detector {
        LEADING_SENSOR_GRACE_US
    } else {
        refresh_metrics_interval_us
            .saturating_add(METRICS_STALENESS_THRESHOLD_FLAG_US)
            .saturating_add(ENGINE_RECLAIM_BUDGET_US)
    }
}

/// The reclamation controller's tuning (`ReclamationConfig`); none of it is user-facing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReclamationConfig {
    /// The most revocations one decision issues.
    pub max_revocations_per_decision: usize,
    /// The wait after a confirmation before the next decision, µs.
    pub confirmation_grace_us: u64,
    /// How long an unconfirmed revocation holds the gate shut, µs.
    pub confirmation_timeout_us: u64,
}

impl ReclamationConfig {
    /// Upstream's values, with the grace derived from the detector.
    pub fn derived(concurrency_detector: bool, refresh_metrics_interval_us: u64) -> ReclamationConfig {
        ReclamationConfig {
            max_revocations_per_decision: MAX_REVOCATIONS_PER_DECISION,
            confirmation_grace_us: confirmation_grace_us(concurrency_detector, refresh_metrics_interval_us),
            confirmation_timeout_us: CONFIRMATION_TIMEOUT_US,
        }
    }
}

/// A dispatched request as eviction sees it (`EvictionItem`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The request's key.
    pub key: u64,
    /// Its priority.
    pub priority: i64,
    /// When it was dispatched (its pre-request hook ran), µs.
    pub dispatch_us: u64,
}

/// `sheddable-eviction-filter`: only sheddable requests (priority < 0) may be evicted.
pub fn sheddable(lease: &Lease) -> bool {
    lease.priority < 0
}

/// `priority-then-time-eviction-order-policy`'s `Less`: whether `a` is evicted before `b`.
pub fn evicted_before(a: &Lease, b: &Lease) -> bool {
    if a.priority != b.priority {
        return a.priority < b.priority;
    }
    a.dispatch_us > b.dispatch_us
}

/// Victim order: priority up, dispatch time down, tracking sequence down.
type VictimKey = (i64, Reverse<u64>, Reverse<u64>, u64);

/// `EvictionQueue`: every tracked in-flight request, and the evictable ones in victim order.
#[derive(Clone, Debug, Default)]
pub struct EvictionQueue {
    in_flight: BTreeMap<u64, (Lease, u64)>,
    evictable: BTreeSet<VictimKey>,
    sequence: u64,
}

impl EvictionQueue {
    /// `Track`: register `lease` (replacing one of the same key); evictable ones enter the heap.
    pub fn track(&mut self, lease: Lease) {
        self.untrack(lease.key);
        let sequence = self.sequence;
        self.sequence += 1;
        if sheddable(&lease) {
            self.evictable.insert(victim_key(&lease, sequence));
        }
        self.in_flight.insert(lease.key, (lease, sequence));
    }

    /// `Untrack`: forget `key` (nothing if unknown).
    pub fn untrack(&mut self, key: u64) {
        if let Some((lease, sequence)) = self.in_flight.remove(&key) {
            self.evictable.remove(&victim_key(&lease, sequence));
        }
    }

    /// `PopN(1)`: take the first victim off (out of tracking altogether).
    pub fn pop(&mut self) -> Option<Lease> {
        let (.., key) = self.evictable.pop_first()?;
        self.in_flight.remove(&key).map(|(lease, _)| lease)
    }

    /// `Peek`: the first victim.
    pub fn peek(&self) -> Option<Lease> {
        self.evictable.first().map(|&(.., key)| self.in_flight[&key].0)
    }

    /// `EvictableLen`.
    pub fn evictable_len(&self) -> usize {
        self.evictable.len()
    }

    /// `InFlightLen`.
    pub fn in_flight_len(&self) -> usize {
        self.in_flight.len()
    }
}

fn victim_key(lease: &Lease, sequence: u64) -> VictimKey {
    (lease.priority, Reverse(lease.dispatch_us), Reverse(sequence), lease.key)
}

/// What the reclamation controller needs of the evictor (`InFlightEvictor`).
pub trait InFlightEvictor {
    /// `EvictN`: revoke up to `n` victims in order, stopping at the first whose priority is not
    /// strictly below `priority_bound`; the revoked keys are appended to `out`.
    fn evict_n(&mut self, n: usize, priority_bound: i64, out: &mut Vec<u64>);
    /// `Stats`: (tracked in flight, evictable).
    fn stats(&self) -> (usize, usize);
    /// `PeekVictimPriority`.
    fn peek_victim_priority(&self) -> Option<i64>;
}

/// `RequestEvictor`: the tracking queue, and the revoked requests whose stream has not ended.
#[derive(Clone, Debug, Default)]
pub struct RequestEvictor {
    queue: EvictionQueue,
    pending: BTreeSet<u64>,
}

impl RequestEvictor {
    /// `PreRequest`: track a dispatched request.
    pub fn track(&mut self, lease: Lease) {
        self.queue.track(lease);
    }

    /// `cleanupRequest`: `key`'s stream ended (completed, failed, cancelled or evicted); whether
    /// it had been revoked — the confirmation, given at most once.
    pub fn stream_ended(&mut self, key: u64) -> bool {
        self.queue.untrack(key);
        self.pending.remove(&key)
    }
}

impl InFlightEvictor for RequestEvictor {
    fn evict_n(&mut self, n: usize, priority_bound: i64, out: &mut Vec<u64>) {
        for _ in 0..n {
            let Some(lease) = self.queue.pop() else { break };
            if lease.priority >= priority_bound {
                self.queue.track(lease);
                break;
            }
            self.pending.insert(lease.key);
            out.push(lease.key);
        }
    }

    fn stats(&self) -> (usize, usize) {
        (self.queue.in_flight_len(), self.queue.evictable_len())
    }

    fn peek_victim_priority(&self) -> Option<i64> {
        self.queue.peek().map(|l| l.priority)
    }
}

#[derive(Clone, Copy, Debug)]
struct Revocation {
    credit: f64,
    issued_us: u64,
}

#[derive(Clone, Copy, Debug)]
struct CoolingDebit {
    credit: f64,
    expires_us: u64,
}

/// `ReclamationController`: sizes and paces the decisions.
#[derive(Clone, Debug)]
pub struct Reclamation {
    config: ReclamationConfig,
    outstanding: BTreeMap<u64, Revocation>,
    cooling: Vec<CoolingDebit>,
    pending_reclaim: f64,
}

impl Reclamation {
    /// A controller with nothing outstanding.
    pub fn new(config: ReclamationConfig) -> Reclamation {
        Reclamation { config, outstanding: BTreeMap::new(), cooling: Vec::new(), pending_reclaim: 0.0 }
    }

    /// `GateOpen`: retire timed-out revocations and expired debits; whether a decision may run
    /// (nothing outstanding, nothing cooling).
    pub fn gate_open(&mut self, now_us: u64) -> bool {
        let timeout = self.config.confirmation_timeout_us;
        let timed_out: Vec<u64> = self
            .outstanding
            .iter()
            .filter(|(_, r)| now_us.saturating_sub(r.issued_us) >= timeout)
            .map(|(&k, _)| k)
            .collect();
        for key in timed_out {
            let r = self.outstanding.remove(&key).expect("listed");
            self.start_cooling(r, now_us);
        }
        let before = self.cooling.len();
        let mut released = 0.0;
        self.cooling.retain(|d| {
            let keep = now_us < d.expires_us;
            if !keep {
                released += d.credit;
            }
            keep
        });
        if self.cooling.len() != before {
            self.pending_reclaim = (self.pending_reclaim - released).max(0.0);
        }
        self.outstanding.is_empty() && self.cooling.is_empty()
    }

    /// `Reclaim`: one sizing decision against `ceiling` for demand at `demand_priority`; the
    /// revoked keys are appended to `out`.
    pub fn reclaim<E: InFlightEvictor>(
        &mut self,
        evictor: &mut E,
        now_us: u64,
        saturation: f64,
        ceiling: f64,
        demand_priority: i64,
        out: &mut Vec<u64>,
    ) {
        let (in_flight, evictable) = evictor.stats();
        if in_flight == 0 || evictable == 0 {
            return;
        }
        let credit = saturation / in_flight as f64;
        if credit <= 0.0 || !credit.is_finite() {
            return;
        }
        let net_target = saturation - ceiling - self.pending_reclaim;
        if net_target < 0.0 || (net_target == 0.0 && self.pending_reclaim > 0.0) {
            return;
        }
        let n = ((net_target / credit).ceil() as usize)
            .max(1)
            .min(self.config.max_revocations_per_decision)
            .min(evictable);
        let from = out.len();
        evictor.evict_n(n, demand_priority, out);
        for &key in &out[from..] {
            self.outstanding.insert(key, Revocation { credit, issued_us: now_us });
            self.pending_reclaim += credit;
        }
    }

    /// `Confirm`: revoked `key`'s stream ended at `now_us`; unknown keys (timed out) are ignored.
    pub fn confirm(&mut self, key: u64, now_us: u64) {
        if let Some(r) = self.outstanding.remove(&key) {
            self.start_cooling(r, now_us);
        }
    }

    fn start_cooling(&mut self, r: Revocation, now_us: u64) {
        let expires_us = now_us.saturating_add(self.config.confirmation_grace_us);
        self.cooling.push(CoolingDebit { credit: r.credit, expires_us });
    }
}

/// One band as `maybeReclaim` scans it, in the cycle's order (highest priority first).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BandDemand {
    /// The band's priority.
    pub priority: i64,
    /// Its ceiling this cycle.
    pub ceiling: f64,
    /// Whether any of its queues holds an item.
    pub queued: bool,
}

/// A pool's in-flight eviction: its evictor and its reclamation controller.
#[derive(Clone, Debug)]
pub struct Eviction {
    /// The tracking queue and the revocations awaiting their stream's end.
    pub evictor: RequestEvictor,
    /// The sizing and pacing.
    pub reclamation: Reclamation,
}

impl Eviction {
    /// Nothing tracked, nothing outstanding.
    pub fn new(config: ReclamationConfig) -> Eviction {
        Eviction { evictor: RequestEvictor::default(), reclamation: Reclamation::new(config) }
    }

    /// `maybeReclaim` on a head-of-line break at `bands[break_at]`: with the gate open and a
    /// victim, the first band from the break on whose priority is strictly above the victim's,
    /// whose ceiling is positive and reached, and which holds queued items, gets one decision.
    /// The revoked keys are appended to `out`.
    pub fn maybe_reclaim(
        &mut self,
        now_us: u64,
        saturation: f64,
        bands: &[BandDemand],
        break_at: usize,
        out: &mut Vec<u64>,
    ) {
        if !self.reclamation.gate_open(now_us) {
            return;
        }
        let Some(victim_priority) = self.evictor.peek_victim_priority() else { return };
        for band in &bands[break_at..] {
            if band.priority <= victim_priority {
                return;
            }
            if band.ceiling <= 0.0 || saturation < band.ceiling || !band.queued {
                continue;
            }
            self.reclamation.reclaim(&mut self.evictor, now_us, saturation, band.ceiling, band.priority, out);
            return;
        }
    }

    /// A dispatched request's stream ended at `now_us`; a revoked one is confirmed.
    pub fn stream_ended(&mut self, key: u64, now_us: u64) {
        if self.evictor.stream_ended(key) {
            self.reclamation.confirm(key, now_us);
        }
    }
}
