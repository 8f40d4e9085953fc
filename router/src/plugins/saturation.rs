//! Saturation detectors: how full the pool is, for admission, and the filters they double as
//! (`flowcontrol/saturationdetector/`).

use serde::Deserialize;
use serde_json::Value;

use super::{Built, DataKey, DataType, PluginKind};
use crate::endpoint::EndpointIndex;
use crate::params::{GoDuration, ParamError, decode};
use crate::view::View;

/// `utilization-detector` (the default): scraped queue depth and KV use against thresholds, with
/// stale or missing metrics counted as saturated.
#[derive(Clone, Debug, PartialEq)]
pub struct UtilizationDetector {
    /// Waiting requests that count as full.
    pub queue_depth_threshold: u64,
    /// KV-cache use that counts as full.
    pub kv_cache_util_threshold: f64,
    /// Metrics older than this count as saturated, µs.
    pub metrics_staleness_threshold_us: u64,
    /// Burst headroom the filter allows over the thresholds.
    pub headroom: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct UtilizationParams {
    queue_depth_threshold: i64,
    kv_cache_util_threshold: f64,
    metrics_staleness_threshold: GoDuration,
    headroom: f64,
}

impl Default for UtilizationParams {
    fn default() -> Self {
        UtilizationParams {
            queue_depth_threshold: 5,
            kv_cache_util_threshold: 0.8,
            metrics_staleness_threshold: GoDuration::from_micros(200_000),
            headroom: 0.0,
        }
    }
}

impl UtilizationDetector {
    pub(super) fn build(params: Option<&Value>) -> Result<Built, ParamError> {
        let p: UtilizationParams = decode(params).map_err(|mut e| {
            e.reason = format!("failed to unmarshal utilization detector config: {}", e.reason);
            e
        })?;
        let mut problems = Vec::new();
        if p.queue_depth_threshold <= 0 {
            problems.push((
                "queueDepthThreshold",
                format!("queueDepthThreshold must be strictly positive, got {}", p.queue_depth_threshold),
            ));
        }
        if !(p.kv_cache_util_threshold > 0.0 && p.kv_cache_util_threshold <= 1.0) {
            problems.push((
                "kvCacheUtilThreshold",
                format!("kvCacheUtilThreshold must be in (0.0, 1.0], got {:.6}", p.kv_cache_util_threshold),
            ));
        }
        if p.metrics_staleness_threshold.micros <= 0 {
            problems.push((
                "metricsStalenessThreshold",
                format!(
                    "metricsStalenessThreshold must be strictly positive, got {}",
                    p.metrics_staleness_threshold
                ),
            ));
        }
        if p.headroom < 0.0 || p.headroom.is_nan() {
            problems
                .push(("headroom", format!("headroom must be a non-negative value, got {:.6}", p.headroom)));
        }
        refuse_joined(params, "invalid utilization detector configuration", problems)?;
        let mut built = Built::plain(PluginKind::UtilizationDetector(UtilizationDetector {
            queue_depth_threshold: p.queue_depth_threshold as u64,
            kv_cache_util_threshold: p.kv_cache_util_threshold,
            metrics_staleness_threshold_us: p.metrics_staleness_threshold.micros as u64,
            headroom: p.headroom,
        }));
        built.warnings.extend(high_headroom(p.headroom));
        Ok(built)
    }

    fn fresh(&self, view: &View, endpoint: EndpointIndex) -> bool {
        view.endpoints[endpoint as usize]
            .metrics
            .update_time_us
            .is_some_and(|at| view.now_us.saturating_sub(at) <= self.metrics_staleness_threshold_us)
    }

    /// The pool's saturation over `candidates`: the mean of each endpoint's
    /// `max(queue/Q, kv/KV)`, 1 for a stale or never-scraped one, 1 for no endpoints.
    pub fn saturation(&self, view: &View, candidates: &[EndpointIndex]) -> f64 {
        if candidates.is_empty() {
            return 1.0;
        }
        let total: f64 = candidates
            .iter()
            .map(|&e| {
                if !self.fresh(view, e) {
                    return 1.0;
                }
                let m = &view.endpoints[e as usize].metrics;
                (m.waiting_queue_size as f64 / self.queue_depth_threshold as f64)
                    .max(m.kv_cache_usage_percent / self.kv_cache_util_threshold)
            })
            .sum();
        total / candidates.len() as f64
    }

    /// Keep fresh endpoints under both thresholds (with headroom); all of them if none is.
    pub fn filter(&self, view: &View, input: &[EndpointIndex], out: &mut Vec<EndpointIndex>) {
        let queue_cap = self.queue_depth_threshold as f64 * (1.0 + self.headroom);
        let kv_cap = self.kv_cache_util_threshold * (1.0 + self.headroom);
        out.extend(input.iter().copied().filter(|&e| {
            let m = &view.endpoints[e as usize].metrics;
            self.fresh(view, e)
                && (m.waiting_queue_size as f64) < queue_cap
                && m.kv_cache_usage_percent < kv_cap
        }));
        if out.is_empty() {
            out.extend_from_slice(input);
        }
    }
}

/// Upstream's `errors.Join` of every failed check, under `context`, placed at the first
/// failing field.
fn refuse_joined(
    params: Option<&Value>,
    context: &str,
    problems: Vec<(&str, String)>,
) -> Result<(), ParamError> {
    let Some((path, _)) = problems.first() else { return Ok(()) };
    let joined: Vec<&str> = problems.iter().map(|(_, why)| why.as_str()).collect();
    Err(ParamError::invalid(params, path, format!("{context}: {}", joined.join("\n"))))
}

/// The line both detectors log for a headroom above 1 (likely a percentage).
fn high_headroom(headroom: f64) -> Option<String> {
    (headroom > 1.0).then(|| {
        format!(
            "Unusually high headroom configured; verify value is a fraction, not a percentage (headroom {headroom}, \
             effectiveBurst {:.0}%)",
            headroom * 100.0
        )
    })
}

/// `concurrency-detector`: the router's own in-flight counts against per-endpoint caps.
#[derive(Clone, Debug, PartialEq)]
pub struct ConcurrencyDetector {
    /// What is counted.
    pub mode: ConcurrencyMode,
    /// Requests per endpoint that count as full.
    pub max_concurrency: u64,
    /// Tokens per endpoint that count as full.
    pub max_token_concurrency: u64,
    /// Burst headroom the filter allows.
    pub headroom: f64,
    /// The in-flight producer read.
    pub producer_name: String,
    /// That producer's plugin index, resolved after loading.
    pub producer: Option<usize>,
}

/// What the concurrency detector counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConcurrencyMode {
    /// In-flight requests.
    Requests,
    /// In-flight tokens.
    Tokens,
    /// Both: the larger share.
    Hybrid,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct ConcurrencyParams {
    concurrency_mode: String,
    max_concurrency: i64,
    max_token_concurrency: i64,
    headroom: f64,
    in_flight_load_producer_name: String,
}

impl Default for ConcurrencyParams {
    fn default() -> Self {
        ConcurrencyParams {
            concurrency_mode: "requests".to_owned(),
            max_concurrency: 100,
            max_token_concurrency: 1_000_000,
            headroom: 0.0,
            in_flight_load_producer_name: String::new(),
        }
    }
}

impl ConcurrencyDetector {
    pub(super) fn build(params: Option<&Value>) -> Result<Built, ParamError> {
        let p: ConcurrencyParams = decode(params).map_err(|mut e| {
            e.reason = format!("failed to unmarshal concurrency detector config: {}", e.reason);
            e
        })?;
        let mut problems = Vec::new();
        if p.max_concurrency <= 0 {
            problems.push((
                "maxConcurrency",
                format!("maxConcurrency must be strictly positive, got {}", p.max_concurrency),
            ));
        }
        if p.headroom < 0.0 || p.headroom.is_nan() {
            problems
                .push(("headroom", format!("headroom must be a non-negative value, got {:.6}", p.headroom)));
        }
        if p.max_token_concurrency <= 0 {
            problems.push((
                "maxTokenConcurrency",
                format!("maxTokenConcurrency must be strictly positive, got {}", p.max_token_concurrency),
            ));
        }
        let mode = match p.concurrency_mode.as_str() {
            "requests" => ConcurrencyMode::Requests,
            "tokens" => ConcurrencyMode::Tokens,
            "hybrid" => ConcurrencyMode::Hybrid,
            other => {
                problems.push(("concurrencyMode", format!("unsupported concurrencyMode: {other:?}")));
                ConcurrencyMode::Requests
            }
        };
        refuse_joined(params, "invalid concurrency detector configuration", problems)?;
        let headroom_warning = high_headroom(p.headroom);
        let mut built = Built::plain(PluginKind::ConcurrencyDetector(ConcurrencyDetector {
            mode,
            max_concurrency: p.max_concurrency as u64,
            max_token_concurrency: p.max_token_concurrency as u64,
            headroom: p.headroom,
            producer_name: p.in_flight_load_producer_name,
            producer: None,
        }));
        built.warnings.extend(headroom_warning);
        Ok(built)
    }

    /// The key it requires.
    pub fn key(&self) -> DataKey {
        DataKey::new(DataType::InFlightLoad, &self.producer_name)
    }

    /// Saturation over `candidates` (1 for none).
    pub fn saturation(&self, view: &View, candidates: &[EndpointIndex]) -> f64 {
        if candidates.is_empty() {
            return 1.0;
        }
        let load = |e| view.in_flight(self.producer, e).unwrap_or((0, 0));
        let n = candidates.len() as f64;
        match self.mode {
            ConcurrencyMode::Requests => {
                candidates.iter().map(|&e| load(e).0).sum::<u64>() as f64 / (n * self.max_concurrency as f64)
            }
            ConcurrencyMode::Tokens => {
                candidates.iter().map(|&e| load(e).1).sum::<u64>() as f64
                    / (n * self.max_token_concurrency as f64)
            }
            ConcurrencyMode::Hybrid => {
                candidates
                    .iter()
                    .map(|&e| {
                        let (r, t) = load(e);
                        (r as f64 / self.max_concurrency as f64)
                            .max(t as f64 / self.max_token_concurrency as f64)
                    })
                    .sum::<f64>()
                    / n
            }
        }
    }

    /// Keep endpoints under the cap(s) with headroom; no fail-open.
    pub fn filter(&self, view: &View, input: &[EndpointIndex], out: &mut Vec<EndpointIndex>) {
        let request_cap = (self.max_concurrency as f64 * (1.0 + self.headroom)).floor() as u64;
        let token_cap = (self.max_token_concurrency as f64 * (1.0 + self.headroom)).floor() as u64;
        out.extend(input.iter().copied().filter(|&e| {
            let (r, t) = view.in_flight(self.producer, e).unwrap_or((0, 0));
            match self.mode {
                ConcurrencyMode::Requests => r < request_cap,
                ConcurrencyMode::Tokens => t < token_cap,
                ConcurrencyMode::Hybrid => r < request_cap && t < token_cap,
            }
        }));
    }
}
