//! One InferencePool's flow controller: priority bands of per-flow queues, the capacity check at
//! enqueue, the dispatch cycle, TTL expiry and cancellation, and the sweep of finalized items
//! (`flowcontrol/controller/controller.go`, `controller/internal/processor.go`,
//! `flowcontrol/registry/`).
//!
//! A flow is `(fairness id, priority)`; each priority is a band. Upstream finalizes an item that
//! expires or whose client leaves at once (the client is answered then) but leaves it in its
//! queue until the next cleanup sweep (every second) or until a dispatch cycle takes it from the
//! head — so until then it still counts against the capacity limits, and a cycle that takes it
//! dispatches nothing else. Both are kept here. Time is whatever the caller says it is; the
//! caller runs [`FlowController::dispatch_cycle`] after every enqueue and on every 1 ms tick,
//! [`FlowController::expire`] at deadlines and [`FlowController::sweep`] on every 1 s tick.
//! With `enableEviction` the controller also holds the pool's in-flight eviction
//! ([`super::eviction`]): the caller reports each dispatched request scheduled to an endpoint
//! and each such request's end, and runs [`FlowController::reclaim`] after a cycle that
//! dispatched nothing (it acts only when that cycle stopped at a head-of-line break).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound::{Excluded, Unbounded};
use std::sync::Arc;

use super::config::{BandConfig, FlowControlConfig};
use super::eviction::{BandDemand, Eviction, Lease, ReclamationConfig};
use super::outcome::{Cause, QueueOutcome};
use super::policies::{Fairness, ItemTimes};

/// A request offered to flow control.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ticket {
    /// The request's key, unique in the run.
    pub key: u64,
    /// Its priority (its band).
    pub priority: i64,
    /// Its fairness id (its flow within the band).
    pub fairness_id: Arc<str>,
    /// Its body size, bytes.
    pub byte_size: u64,
    /// When the router received it, µs.
    pub received_us: u64,
    /// Its `x-llm-d-slo-ttft-ms` header, ms, when it carries one.
    pub slo_ttft_ms: Option<u64>,
}

/// A request flow control finished with other than by dispatch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Finished {
    /// The request's key.
    pub key: u64,
    /// How it ended.
    pub outcome: QueueOutcome,
    /// Why.
    pub cause: Cause,
}

/// Queued items against limits (globally, or in one band); a capacity of 0 is no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Occupancy {
    /// The byte limit.
    pub capacity_bytes: u64,
    /// Bytes queued.
    pub bytes: u64,
    /// The count limit.
    pub capacity_requests: u64,
    /// Items queued (finalized ones not yet swept included).
    pub len: u64,
}

/// `hasCapacity`: whether one more item of `item_bytes` fits both the global and the band's
/// limits.
pub fn has_capacity(global: &Occupancy, band: &Occupancy, item_bytes: u64) -> bool {
    let fits = |o: &Occupancy| {
        (o.capacity_bytes == 0 || o.bytes.saturating_add(item_bytes) <= o.capacity_bytes)
            && (o.capacity_requests == 0 || o.len < o.capacity_requests)
    };
    fits(global) && fits(band)
}

/// The fairness id a request without the header (and without `agent-identity`) gets.
pub const DEFAULT_FAIRNESS_ID: &str = "default-flow";

#[derive(Clone, Debug)]
struct Item {
    key: u64,
    byte_size: u64,
    /// Finalized (expired or cancelled) but still in its queue until swept or taken.
    finalized: bool,
}

#[derive(Clone, Debug, Default)]
struct Flow {
    /// Items by the band's ordering key.
    items: BTreeMap<(u64, u64, u64), Item>,
}

#[derive(Clone, Debug)]
struct Band {
    config: BandConfig,
    /// Flows by fairness id (the key order round-robin uses), only those holding items. Upstream
    /// collects an idle flow 5 min after it empties (`registry/gc.go`); an empty flow takes no
    /// part in either policy's pick, so dropping it at once changes no decision and bounds the
    /// map by the queued items rather than by every fairness id ever seen.
    flows: BTreeMap<Arc<str>, Flow>,
    len: u64,
    bytes: u64,
    /// Round-robin's cursor: the flow served last.
    last_served: Option<Arc<str>>,
}

/// Where a queued item is.
#[derive(Clone, Debug)]
struct Place {
    priority: i64,
    flow: Arc<str>,
    order: (u64, u64, u64),
    deadline_us: Option<u64>,
}

/// One pool's flow controller.
#[derive(Clone, Debug)]
pub struct FlowController {
    config: Arc<FlowControlConfig>,
    /// Bands by priority (visited highest first).
    bands: BTreeMap<i64, Band>,
    places: BTreeMap<u64, Place>,
    deadlines: BTreeSet<(u64, u64)>,
    total_len: u64,
    total_bytes: u64,
    finalized: u64,
    sequence: u64,
    /// Whether the last dispatch cycle saw no endpoints.
    pool_empty: bool,
    /// In-flight eviction, when `enableEviction` is on.
    eviction: Option<Eviction>,
    /// The last cycle's head-of-line break: the blocked band's rank and the saturation.
    blocked: Option<(usize, f64)>,
    /// Scratch for the bands a reclamation decision scans.
    demand: Vec<BandDemand>,
}

impl FlowController {
    /// A controller with the configured bands (and band 0), all empty.
    pub fn new(config: Arc<FlowControlConfig>) -> FlowController {
        let bands = config.bands.values().map(|b| (b.priority, Band::new(b.clone()))).collect();
        FlowController {
            config,
            bands,
            places: BTreeMap::new(),
            deadlines: BTreeSet::new(),
            total_len: 0,
            total_bytes: 0,
            finalized: 0,
            sequence: 0,
            pool_empty: false,
            eviction: None,
            blocked: None,
            demand: Vec::new(),
        }
    }

    /// Turn on in-flight eviction with `reclamation`'s tuning (the host derives its grace from
    /// the saturation detector and the scrape interval).
    pub fn enable_eviction(&mut self, reclamation: ReclamationConfig) {
        self.eviction = Some(Eviction::new(reclamation));
    }

    /// Eviction's state, when on.
    pub fn eviction(&self) -> Option<&Eviction> {
        self.eviction.as_ref()
    }

    /// A request of `priority` was dispatched and scheduled to an endpoint at `now_us`: eviction
    /// tracks it (the evictor's pre-request hook).
    pub fn track_in_flight(&mut self, key: u64, priority: i64, now_us: u64) {
        if let Some(eviction) = &mut self.eviction {
            eviction.evictor.track(Lease { key, priority, dispatch_us: now_us });
        }
    }

    /// A dispatched request's stream ended at `now_us` (answered, cancelled or revoked): it is
    /// untracked, and a revoked one confirmed.
    pub fn stream_ended(&mut self, key: u64, now_us: u64) {
        if let Some(eviction) = &mut self.eviction {
            eviction.stream_ended(key, now_us);
        }
    }

    /// `maybeReclaim` for the last dispatch cycle, when it stopped at a head-of-line break and
    /// eviction is on: the requests to revoke, appended to `out`. The caller carries each out
    /// (aborts it at its engine, answers its client) and reports its stream's end.
    pub fn reclaim(&mut self, now_us: u64, out: &mut Vec<u64>) {
        let (Some(eviction), Some((break_at, saturation))) = (&mut self.eviction, self.blocked.take()) else {
            return;
        };
        if !eviction.reclamation.gate_open(now_us) {
            return;
        }
        let usage_limit = self.config.usage_limit;
        self.demand.clear();
        self.demand.extend(self.bands.values().rev().enumerate().map(|(rank, band)| BandDemand {
            priority: band.config.priority,
            ceiling: usage_limit.ceiling(saturation, rank),
            queued: band.len > 0,
        }));
        eviction.maybe_reclaim(now_us, saturation, &self.demand, break_at, out);
    }

    /// How many flows hold queued items, over every band.
    pub fn flow_count(&self) -> usize {
        self.bands.values().map(|b| b.flows.len()).sum()
    }

    /// Items in the queues, finalized ones not yet swept included.
    pub fn len(&self) -> u64 {
        self.total_len
    }

    /// Whether the queues hold nothing.
    pub fn is_empty(&self) -> bool {
        self.total_len == 0
    }

    /// Whether some finalized item awaits the sweep.
    pub fn has_finalized(&self) -> bool {
        self.finalized > 0
    }

    /// Whether `key` waits in a queue (not finalized).
    pub fn holds(&self, key: u64) -> bool {
        self.item(key).is_some_and(|i| !i.finalized)
    }

    /// Queued items (finalized ones included) of `priority`'s band.
    pub fn band_len(&self, priority: i64) -> u64 {
        self.bands.get(&priority).map_or(0, |b| b.len)
    }

    /// The priorities of the bands that exist, highest first.
    pub fn priorities(&self) -> Vec<i64> {
        self.bands.keys().rev().copied().collect()
    }

    /// The earliest TTL deadline of a waiting item.
    pub fn next_deadline_us(&self) -> Option<u64> {
        self.deadlines.first().map(|&(at, _)| at)
    }

    /// `enqueue`: take `ticket` in at `now_us`, or refuse it (capacity, or capacity with no
    /// endpoints at the last cycle). A priority without a band gets one provisioned from the
    /// templates (its inference objective exists: the request's priority came from it).
    pub fn enqueue(&mut self, ticket: Ticket, now_us: u64) -> Result<(), Finished> {
        let config = &self.config;
        let band =
            self.bands.entry(ticket.priority).or_insert_with(|| Band::new(config.band(ticket.priority)));
        let global = Occupancy {
            capacity_bytes: self.config.max_bytes,
            bytes: self.total_bytes,
            capacity_requests: self.config.max_requests,
            len: self.total_len,
        };
        let in_band = Occupancy {
            capacity_bytes: band.config.max_bytes,
            bytes: band.bytes,
            capacity_requests: band.config.max_requests,
            len: band.len,
        };
        if !has_capacity(&global, &in_band, ticket.byte_size) {
            let (outcome, cause) = if self.pool_empty {
                (QueueOutcome::RejectedNoEndpoints, Cause::NoEndpoints)
            } else {
                (QueueOutcome::RejectedCapacity, Cause::QueueAtCapacity)
            };
            return Err(Finished { key: ticket.key, outcome, cause });
        }
        let ttl_us = self.config.default_request_ttl_us;
        let times = ItemTimes {
            enqueue_us: now_us,
            ttl_us,
            received_us: ticket.received_us,
            slo_ttft_ms: ticket.slo_ttft_ms,
            sequence: self.sequence,
        };
        self.sequence += 1;
        let order = band.config.ordering.key(&times);
        let flow = band.flows.entry(ticket.fairness_id.clone()).or_default();
        flow.items.insert(order, Item { key: ticket.key, byte_size: ticket.byte_size, finalized: false });
        band.len += 1;
        band.bytes += ticket.byte_size;
        self.total_len += 1;
        self.total_bytes += ticket.byte_size;
        let deadline_us = (ttl_us > 0).then(|| now_us.saturating_add(ttl_us));
        if let Some(at) = deadline_us {
            self.deadlines.insert((at, ticket.key));
        }
        self.places.insert(
            ticket.key,
            Place { priority: ticket.priority, flow: ticket.fairness_id, order, deadline_us },
        );
        Ok(())
    }

    /// `dispatchCycle`: with the pool at `saturation` (`pool_empty` when it has no endpoints),
    /// visit the bands highest priority first; a band whose ceiling the saturation reaches stops
    /// the cycle (head-of-line blocking of every lower band too); otherwise its fairness policy
    /// picks a queue and its head leaves — the cycle ends after one. Returns the dispatched
    /// request, `None` when nothing left or the head was an already finalized item.
    pub fn dispatch_cycle(&mut self, saturation: f64, pool_empty: bool) -> Option<u64> {
        self.pool_empty = pool_empty;
        self.blocked = None;
        let usage_limit = self.config.usage_limit;
        for (rank, band) in self.bands.values_mut().rev().enumerate() {
            if saturation >= usage_limit.ceiling(saturation, rank) {
                self.blocked = Some((rank, saturation));
                return None;
            }
            let Some(flow_id) = band.pick() else { continue };
            let flow = band.flows.get_mut(&flow_id).expect("picked among the band's flows");
            let (_, item) = flow.items.pop_first().expect("a picked queue is not empty");
            if flow.items.is_empty() {
                band.flows.remove(&flow_id);
            }
            band.len -= 1;
            band.bytes -= item.byte_size;
            self.total_len -= 1;
            self.total_bytes -= item.byte_size;
            let place = self.places.remove(&item.key).expect("a queued item has a place");
            if item.finalized {
                self.finalized -= 1;
                return None;
            }
            if let Some(at) = place.deadline_us {
                self.deadlines.remove(&(at, item.key));
            }
            return Some(item.key);
        }
        None
    }

    /// The context deadline: every waiting item whose TTL ran out by `now_us` is finalized as
    /// `EvictedTTL` (it stays queued until swept), appended to `out`.
    pub fn expire(&mut self, now_us: u64, out: &mut Vec<Finished>) {
        while let Some(&(at, key)) = self.deadlines.first()
            && at <= now_us
        {
            self.deadlines.pop_first();
            self.finalize(key);
            out.push(Finished { key, outcome: QueueOutcome::EvictedTtl, cause: Cause::TtlExpired });
        }
    }

    /// The client went away: a waiting `key` is finalized as `EvictedContextCancelled` (it
    /// stays queued until swept). `None` when `key` is not waiting here.
    pub fn cancel(&mut self, key: u64) -> Option<Finished> {
        if !self.holds(key) {
            return None;
        }
        if let Some(at) = self.places[&key].deadline_us {
            self.deadlines.remove(&(at, key));
        }
        self.finalize(key);
        Some(Finished { key, outcome: QueueOutcome::EvictedContextCancelled, cause: Cause::ContextCancelled })
    }

    /// `sweepFinalizedItems`: drop every finalized item from its queue, releasing its capacity.
    pub fn sweep(&mut self) {
        if self.finalized == 0 {
            return;
        }
        for band in self.bands.values_mut() {
            band.flows.retain(|_, flow| {
                flow.items.retain(|_, item| {
                    if item.finalized {
                        band.len -= 1;
                        band.bytes -= item.byte_size;
                        self.total_len -= 1;
                        self.total_bytes -= item.byte_size;
                        self.places.remove(&item.key);
                    }
                    !item.finalized
                });
                !flow.items.is_empty()
            });
        }
        self.finalized = 0;
    }

    fn item(&self, key: u64) -> Option<&Item> {
        let place = self.places.get(&key)?;
        self.bands.get(&place.priority)?.flows.get(&place.flow)?.items.get(&place.order)
    }

    fn finalize(&mut self, key: u64) {
        let place = &self.places[&key];
        let item = self
            .bands
            .get_mut(&place.priority)
            .and_then(|b| b.flows.get_mut(&place.flow))
            .and_then(|f| f.items.get_mut(&place.order))
            .expect("a placed item is queued");
        if !item.finalized {
            item.finalized = true;
            self.finalized += 1;
        }
        self.places.get_mut(&key).expect("placed").deadline_us = None;
    }
}

impl Band {
    fn new(config: BandConfig) -> Band {
        Band { config, flows: BTreeMap::new(), len: 0, bytes: 0, last_served: None }
    }

    /// The fairness policy's pick among the band's queues (all of them hold items).
    fn pick(&mut self) -> Option<Arc<str>> {
        match self.config.fairness {
            Fairness::GlobalStrict => self
                .flows
                .iter()
                .filter_map(|(id, flow)| flow.items.first_key_value().map(|(order, _)| (*order, id)))
                .min()
                .map(|(_, id)| id.clone()),
            Fairness::RoundRobin => {
                // Every flow in the map holds items. The cursor is a position in key order: the
                // flow served last may have emptied and left the map since.
                let after_last = self
                    .last_served
                    .as_deref()
                    .and_then(|last| self.flows.range::<str, _>((Excluded(last), Unbounded)).next());
                let picked = after_last.or_else(|| self.flows.iter().next()).map(|(id, _)| id.clone());
                self.last_served = picked.clone();
                picked
            }
        }
    }
}
