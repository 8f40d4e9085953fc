//! The flow-control policies of the release: how a band orders its queues' items (ordering),
//! which flow's queue a band serves next (fairness), and how full the pool may be before a band
//! stops dispatching (usage limit).
//!
//! Sources (`pkg/epp/framework/plugins/flowcontrol/`): `ordering/fcfs/fcfs.go`,
//! `ordering/edf/edf.go`, `ordering/slodeadline/slo_deadline.go`,
//! `fairness/globalstrict/global_strict.go`, `fairness/roundrobin/roundrobin.go`,
//! `usagelimits/usagelimitpolicy.go`.

use serde::Deserialize;
use serde_json::Value;

use crate::params::{ParamError, decode};

/// How a queue orders its items: the first item is the one a dispatch takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ordering {
    /// `fcfs-ordering-policy`: earlier enqueue first.
    Fcfs,
    /// `edf-ordering-policy`: earlier deadline (enqueue + effective TTL; none when the TTL is
    /// 0) first, then earlier enqueue.
    Edf,
    /// `slo-deadline-ordering-policy`: earlier `received + x-llm-d-slo-ttft-ms` first, then
    /// earlier receipt; a request without the header (its client sets no `slo_ttft_ms`)
    /// sorts last.
    SloDeadline,
}

/// What an ordering policy compares of one queued item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ItemTimes {
    /// When the flow controller took it in, µs.
    pub enqueue_us: u64,
    /// Its effective TTL, µs (0: none).
    pub ttl_us: u64,
    /// When the router received the request, µs.
    pub received_us: u64,
    /// The SLO TTFT header's value in ms, when the request has a valid one.
    pub slo_ttft_ms: Option<u64>,
    /// The controller's running count at enqueue: the last tie-break (upstream compares
    /// nanosecond wall-clock times, which practically never tie).
    pub sequence: u64,
}

impl Ordering {
    /// The policy for a registered type name.
    pub fn of(type_name: &str) -> Option<Ordering> {
        match type_name {
            "fcfs-ordering-policy" => Some(Ordering::Fcfs),
            "edf-ordering-policy" => Some(Ordering::Edf),
            "slo-deadline-ordering-policy" => Some(Ordering::SloDeadline),
            _ => None,
        }
    }

    /// The sort key: a smaller key is dispatched first (`Less(a, b)` ⇔ `key(a) < key(b)`).
    pub fn key(self, item: &ItemTimes) -> (u64, u64, u64) {
        match self {
            Ordering::Fcfs => (item.enqueue_us, 0, item.sequence),
            Ordering::Edf => {
                let deadline =
                    if item.ttl_us == 0 { u64::MAX } else { item.enqueue_us.saturating_add(item.ttl_us) };
                (deadline, item.enqueue_us, item.sequence)
            }
            Ordering::SloDeadline => {
                // Upstream refuses values whose nanoseconds overflow an int64.
                let deadline = item
                    .slo_ttft_ms
                    .filter(|&ms| ms <= (i64::MAX / 1_000_000) as u64)
                    .and_then(|ms| ms.checked_mul(1000))
                    .and_then(|us| item.received_us.checked_add(us))
                    .unwrap_or(u64::MAX);
                (deadline, item.received_us, item.sequence)
            }
        }
    }

    /// Upstream's `Less(a, b)`: whether `a` is dispatched before `b`.
    pub fn less(self, a: &ItemTimes, b: &ItemTimes) -> bool {
        self.key(a) < self.key(b)
    }
}

/// Which flow's queue a band serves next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fairness {
    /// `global-strict-fairness-policy`: the queue whose head the ordering ranks first.
    GlobalStrict,
    /// `round-robin-fairness-policy`: the next non-empty flow after the last one served, flows
    /// in key order.
    RoundRobin,
}

impl Fairness {
    /// The policy for a registered type name.
    pub fn of(type_name: &str) -> Option<Fairness> {
        match type_name {
            "global-strict-fairness-policy" => Some(Fairness::GlobalStrict),
            "round-robin-fairness-policy" => Some(Fairness::RoundRobin),
            _ => None,
        }
    }
}

/// `static-usage-limit-policy`: every band's ceiling is the same threshold.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StaticUsageLimit {
    /// The ceiling (default 1.0; not range-checked upstream).
    pub threshold: f64,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct StaticParams {
    threshold: Option<f64>,
}

impl StaticUsageLimit {
    /// `StaticPolicyFactory`: decodes `threshold` strictly; absent parameters give 1.0.
    pub fn build(params: Option<&Value>) -> Result<StaticUsageLimit, ParamError> {
        let p: StaticParams = decode(params).map_err(|mut e| {
            e.reason = format!("failed to parse static usage limit policy config: {}", e.reason);
            e
        })?;
        let threshold = p.threshold.unwrap_or(1.0);
        if !threshold.is_finite() {
            return Err(ParamError::invalid(params, "threshold", "the threshold must be a finite number"));
        }
        Ok(StaticUsageLimit { threshold })
    }

    /// `ComputeLimit`: the ceiling of every band, whatever the saturation.
    pub fn ceiling(&self, _saturation: f64, _band_rank: usize) -> f64 {
        self.threshold
    }
}
