//! The fabric's core: transfers in progress over shared links, with max-min fair rates.
//!
//! A plain state machine, no actor: each transfer is one or more parts, each part a flow over a
//! path of links with its bytes left. Every start or end of a transfer recomputes every flow's
//! rate by progressive filling: all unfrozen flows grow at the same pace until a link is full;
//! the flows crossing that link freeze at its fair share, its capacity is taken from the other
//! links they cross, and filling goes on with the rest. That is the max-min fair allocation:
//! no flow's rate can grow without shrinking a flow whose rate is no larger. Rates stay constant
//! between events, so bytes drain linearly and the next completion is exact (rounded up to the
//! whole microsecond, the kernel's one rounding rule).

use std::collections::BTreeMap;

/// A link's index in the fabric.
pub type LinkId = usize;

/// One part of a transfer: a flow over a path.
#[derive(Clone, Debug, PartialEq)]
struct Part {
    path: Vec<LinkId>,
    bytes: u64,
    left: f64,
    rate: f64,
    finish_us: u64,
}

/// A transfer: parts that start together after the path latency and end when the last drains.
#[derive(Clone, Debug, PartialEq)]
struct Transfer {
    parts: Vec<Part>,
    active_at_us: u64,
}

/// Why a transfer cannot start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FlowError {
    /// The key is already in progress.
    Duplicate,
    /// A part has no links (both ends the same place).
    EmptyPath,
    /// A part names a link the fabric lacks.
    UnknownLink(LinkId),
}

impl std::fmt::Display for FlowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FlowError::Duplicate => write!(f, "a transfer with this key is already in progress"),
            FlowError::EmptyPath => write!(f, "a part has an empty path"),
            FlowError::UnknownLink(l) => write!(f, "link {l} is not in the fabric"),
        }
    }
}

impl std::error::Error for FlowError {}

/// Transfers in progress over links of fixed capacity, keyed by `K`.
#[derive(Clone, Debug)]
pub struct Flows<K> {
    capacity: Vec<f64>,
    transfers: BTreeMap<K, Transfer>,
    now_us: u64,
}

impl<K: Ord + Clone> Flows<K> {
    /// A fabric of links with these capacities, bytes per µs.
    pub fn new(capacity_bytes_per_us: Vec<f64>) -> Flows<K> {
        Flows { capacity: capacity_bytes_per_us, transfers: BTreeMap::new(), now_us: 0 }
    }

    /// The time the state stands at, µs.
    pub fn now_us(&self) -> u64 {
        self.now_us
    }

    /// How many transfers are in progress (waiting out their latency or draining).
    pub fn len(&self) -> usize {
        self.transfers.len()
    }

    /// Whether nothing is in progress.
    pub fn is_empty(&self) -> bool {
        self.transfers.is_empty()
    }

    /// Start a transfer at `now_us` (at or after the state's time): `parts` are (path, bytes);
    /// the bytes start to flow `latency_us` later. Completions due by `now_us` are returned
    /// first, as by [`Flows::advance`].
    pub fn start(
        &mut self,
        now_us: u64,
        key: K,
        parts: Vec<(Vec<LinkId>, u64)>,
        latency_us: u64,
    ) -> Result<Vec<K>, FlowError> {
        if self.transfers.contains_key(&key) {
            return Err(FlowError::Duplicate);
        }
        for (path, _) in &parts {
            if path.is_empty() {
                return Err(FlowError::EmptyPath);
            }
            if let Some(&l) = path.iter().find(|&&l| l >= self.capacity.len()) {
                return Err(FlowError::UnknownLink(l));
            }
        }
        let done = self.advance(now_us);
        let parts = parts
            .into_iter()
            .map(|(path, bytes)| Part { path, bytes, left: bytes as f64, rate: 0.0, finish_us: u64::MAX })
            .collect();
        self.transfers.insert(key, Transfer { parts, active_at_us: now_us.saturating_add(latency_us) });
        if latency_us == 0 {
            self.recompute();
        }
        Ok(done)
    }

    /// Drop a transfer (its requester no longer needs it); the others speed up at once.
    pub fn cancel(&mut self, now_us: u64, key: &K) -> Vec<K> {
        let done = self.advance(now_us);
        if self.transfers.remove(key).is_some() {
            self.recompute();
        }
        done
    }

    /// The next instant something changes: a transfer's bytes start to flow or a part drains.
    pub fn next_event_us(&self) -> Option<u64> {
        self.transfers
            .values()
            .flat_map(|t| {
                let pending = (t.active_at_us > self.now_us).then_some(t.active_at_us);
                let finishes = t.parts.iter().filter(|p| p.left > 0.0 && p.rate > 0.0).map(|p| p.finish_us);
                pending.into_iter().chain(finishes)
            })
            .chain(self.zero_byte_done())
            .min()
    }

    /// A transfer whose parts are all drained (zero bytes) completes when it becomes active.
    fn zero_byte_done(&self) -> Option<u64> {
        self.transfers
            .values()
            .filter(|t| t.active_at_us <= self.now_us && t.parts.iter().all(|p| p.left <= 0.0))
            .map(|_| self.now_us)
            .min()
    }

    /// Advance to `to_us`, draining bytes and recomputing rates at every event on the way;
    /// returns the transfers completed, in the order they completed (key order within one µs).
    pub fn advance(&mut self, to_us: u64) -> Vec<K> {
        let mut done = Vec::new();
        while let Some(event) = self.next_event_us().filter(|&e| e <= to_us) {
            self.drain_to(event);
            let finished: Vec<K> = self
                .transfers
                .iter()
                .filter(|(_, t)| t.active_at_us <= event && t.parts.iter().all(|p| p.left <= 0.0))
                .map(|(k, _)| k.clone())
                .collect();
            for key in &finished {
                self.transfers.remove(key);
            }
            done.extend(finished);
            self.recompute();
        }
        self.drain_to(to_us.max(self.now_us));
        done
    }

    /// Drain every active part at its rate until `to_us` (no event lies in between).
    fn drain_to(&mut self, to_us: u64) {
        let dt = to_us.saturating_sub(self.now_us);
        for t in self.transfers.values_mut() {
            for p in &mut t.parts {
                if p.rate > 0.0 {
                    p.left = if to_us >= p.finish_us { 0.0 } else { (p.left - p.rate * dt as f64).max(0.0) };
                }
            }
        }
        self.now_us = to_us;
    }

    /// Progressive filling over every active part with bytes left.
    fn recompute(&mut self) {
        let now = self.now_us;
        let mut flows: Vec<&mut Part> = self
            .transfers
            .values_mut()
            .filter(|t| t.active_at_us <= now)
            .flat_map(|t| t.parts.iter_mut())
            .filter(|p| p.left > 0.0)
            .collect();
        let mut left = self.capacity.clone();
        let mut frozen = vec![false; flows.len()];
        loop {
            let mut crossing = vec![0usize; left.len()];
            for (f, flow) in flows.iter().enumerate() {
                if !frozen[f] {
                    for &l in &flow.path {
                        crossing[l] += 1;
                    }
                }
            }
            let Some((link, share)) = (0..left.len())
                .filter(|&l| crossing[l] > 0)
                .map(|l| (l, left[l] / crossing[l] as f64))
                .min_by(|a, b| a.1.total_cmp(&b.1))
            else {
                break;
            };
            for (f, flow) in flows.iter_mut().enumerate() {
                if !frozen[f] && flow.path.contains(&link) {
                    frozen[f] = true;
                    flow.rate = share;
                    for &l in &flow.path {
                        left[l] = (left[l] - share).max(0.0);
                    }
                }
            }
        }
        for flow in &mut flows {
            flow.finish_us = now + (flow.left / flow.rate).ceil() as u64;
        }
    }

    /// Each active part's rate, bytes per µs, by transfer key and part index.
    pub fn rates(&self) -> Vec<(K, usize, f64)> {
        self.transfers
            .iter()
            .flat_map(|(k, t)| t.parts.iter().enumerate().map(move |(i, p)| (k.clone(), i, p.rate)))
            .filter(|(_, _, r)| *r > 0.0)
            .collect()
    }

    /// The summed rate of the flows crossing each link, bytes per µs.
    pub fn link_loads(&self) -> Vec<f64> {
        let mut load = vec![0.0; self.capacity.len()];
        for t in self.transfers.values() {
            for p in t.parts.iter().filter(|p| p.left > 0.0) {
                for &l in &p.path {
                    load[l] += p.rate;
                }
            }
        }
        load
    }

    /// The links' capacities, bytes per µs.
    pub fn capacities(&self) -> &[f64] {
        &self.capacity
    }

    /// Bytes left of each transfer in progress, by key.
    pub fn bytes_left(&self) -> Vec<(K, f64)> {
        self.transfers.iter().map(|(k, t)| (k.clone(), t.parts.iter().map(|p| p.left).sum())).collect()
    }

    /// Bytes each transfer in progress was started with, by key.
    pub fn bytes_total(&self) -> Vec<(K, u64)> {
        self.transfers.iter().map(|(k, t)| (k.clone(), t.parts.iter().map(|p| p.bytes).sum())).collect()
    }
}
