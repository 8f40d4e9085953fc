//! Scorers on scraped metrics and on the router's own in-flight counters.
//!
//! Each scores the profile's surviving endpoints in 0..1 (`None` where upstream's scorer leaves
//! an endpoint out); the cycle clamps, weights and sums.

use serde::Deserialize;
use serde_json::Value;

use super::{Built, DataKey, DataType, PluginKind};
use crate::endpoint::EndpointIndex;
use crate::params::{ParamError, decode};
use crate::view::View;

/// `queue-scorer`: min-max over waiting queues; all equal → 1 (`scorer/queuedepth/queue.go`).
pub fn queue(view: &View, candidates: &[EndpointIndex], out: &mut [Option<f64>]) {
    min_max(candidates, out, |e| view.endpoints[e as usize].metrics.waiting_queue_size);
}

/// `running-requests-size-scorer`: the same on running requests.
pub fn running(view: &View, candidates: &[EndpointIndex], out: &mut [Option<f64>]) {
    min_max(candidates, out, |e| view.endpoints[e as usize].metrics.running_requests_size);
}

/// `kv-cache-utilization-scorer`: `1 − usage`.
pub fn kv_cache_utilization(view: &View, candidates: &[EndpointIndex], out: &mut [Option<f64>]) {
    for (slot, &e) in out.iter_mut().zip(candidates) {
        *slot = Some(1.0 - view.endpoints[e as usize].metrics.kv_cache_usage_percent);
    }
}

fn min_max(candidates: &[EndpointIndex], out: &mut [Option<f64>], value: impl Fn(EndpointIndex) -> u64) {
    let (min, max) =
        candidates.iter().map(|&e| value(e)).fold((u64::MAX, 0), |(lo, hi), v| (lo.min(v), hi.max(v)));
    for (slot, &e) in out.iter_mut().zip(candidates) {
        *slot = Some(if max == min { 1.0 } else { (max - value(e)) as f64 / (max - min) as f64 });
    }
}

/// `load-aware-scorer`: half credit for an empty queue, less as it fills to the threshold.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadAware {
    /// Queue length at which the score reaches 0.
    pub threshold: i64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct LoadAwareParams {
    threshold: i64,
}

impl Default for LoadAwareParams {
    fn default() -> Self {
        LoadAwareParams { threshold: 128 }
    }
}

impl LoadAware {
    pub(super) fn build(params: Option<&Value>) -> Result<Built, ParamError> {
        let p: LoadAwareParams = decode(params).map_err(|e| prefixed(e, "load-aware-scorer", "scorer"))?;
        let mut warnings = Vec::new();
        let threshold = if p.threshold <= 0 {
            warnings.push(format!("load-aware-scorer: threshold {} is not positive; using 128", p.threshold));
            128
        } else {
            p.threshold
        };
        Ok(Built { kind: PluginKind::LoadAwareScorer(LoadAware { threshold }), inert: Vec::new(), warnings })
    }

    /// Score the candidates (`load_aware.go::Score`).
    pub fn score(&self, view: &View, candidates: &[EndpointIndex], out: &mut [Option<f64>]) {
        let threshold = self.threshold as f64;
        for (slot, &e) in out.iter_mut().zip(candidates) {
            let q = view.endpoints[e as usize].metrics.waiting_queue_size;
            *slot = Some(if q == 0 { 0.5 } else { 0.5 * (1.0 - (q as f64).min(threshold) / threshold) });
        }
    }
}

/// The decode-error wording most scorers and filters share:
/// `failed to parse the parameters of the '<type>' <role> - <json err>`.
pub(super) fn prefixed(mut e: ParamError, type_name: &str, role: &str) -> ParamError {
    e.reason = format!("failed to parse the parameters of the '{type_name}' {role} - {}", e.reason);
    e
}

/// `token-load-scorer`: in-flight plus this request's uncached tokens against a queue threshold.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLoad {
    /// Tokens at which the score reaches 0.
    pub queue_threshold_tokens: i64,
    /// The in-flight producer read.
    pub producer_name: String,
    /// That producer's plugin index, resolved after loading.
    pub producer: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct TokenLoadParams {
    queue_threshold_tokens: i64,
    in_flight_load_producer_name: String,
}

impl Default for TokenLoadParams {
    fn default() -> Self {
        TokenLoadParams { queue_threshold_tokens: 4_194_304, in_flight_load_producer_name: String::new() }
    }
}

impl TokenLoad {
    pub(super) fn build(params: Option<&Value>) -> Result<Built, ParamError> {
        let p: TokenLoadParams = decode(params).map_err(|mut e| {
            e.reason = format!("failed to unmarshal token load scorer config: {}", e.reason);
            e
        })?;
        let queue_threshold_tokens =
            if p.queue_threshold_tokens <= 0 { 4_194_304 } else { p.queue_threshold_tokens };
        Ok(Built::plain(PluginKind::TokenLoadScorer(TokenLoad {
            queue_threshold_tokens,
            producer_name: p.in_flight_load_producer_name,
            producer: None,
        })))
    }

    /// The keys it requires.
    pub fn keys(&self) -> Vec<DataKey> {
        vec![
            DataKey::new(DataType::InFlightLoad, &self.producer_name),
            DataKey::new(DataType::UncachedRequestTokens, &self.producer_name),
        ]
    }

    /// Score the candidates (`token_load.go::Score`).
    pub fn score(&self, view: &View, candidates: &[EndpointIndex], out: &mut [Option<f64>]) {
        let q = self.queue_threshold_tokens as f64;
        for (slot, &e) in out.iter_mut().zip(candidates) {
            let in_flight = view.in_flight(self.producer, e).map_or(0, |(_, tokens)| tokens);
            let own = view.uncached_tokens(self.producer, e).unwrap_or(0);
            let t = in_flight + own;
            *slot = Some(if t == 0 { 1.0 } else { 1.0 - (t as f64).min(q) / q });
        }
    }
}

/// `active-request-scorer`: fewer in-flight requests score higher; idle endpoints score 1.
#[derive(Clone, Debug, PartialEq)]
pub struct ActiveRequest {
    /// Requests at or below which an endpoint counts as idle.
    pub idle_threshold: i64,
    /// The score scale for busy endpoints.
    pub max_busy_score: f64,
    /// The in-flight producer read.
    pub producer_name: String,
    /// That producer's plugin index, resolved after loading.
    pub producer: Option<usize>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct ActiveRequestParams {
    request_timeout: Option<String>,
    idle_threshold: i64,
    max_busy_score: Option<f64>,
    in_flight_load_producer_name: String,
}

impl ActiveRequest {
    pub(super) fn build(params: Option<&Value>) -> Result<Built, ParamError> {
        let p: ActiveRequestParams =
            decode(params).map_err(|e| prefixed(e, "active-request-scorer", "scorer"))?;
        let mut built = Built::plain(PluginKind::QueueScorer);
        if p.request_timeout.is_some() {
            built.warnings.push(
                "DEPRECATED: requestTimeout is deprecated and ignored; inflight tracking is handled by \
                 inflight-load-producer"
                    .to_owned(),
            );
            built
                .inert
                .push(("requestTimeout".to_owned(), "deprecated and ignored by the release".to_owned()));
        }
        let max_busy_score = match p.max_busy_score {
            Some(v) if (0.0..=1.0).contains(&v) => v,
            Some(v) => {
                built.warnings.push(format!("Ignoring out-of-range maxBusyScore {v}; using default 1.0"));
                1.0
            }
            None => 1.0,
        };
        built.kind = PluginKind::ActiveRequestScorer(ActiveRequest {
            idle_threshold: p.idle_threshold.max(0),
            max_busy_score,
            producer_name: p.in_flight_load_producer_name,
            producer: None,
        });
        Ok(built)
    }

    /// The key it requires.
    pub fn key(&self) -> DataKey {
        DataKey::new(DataType::InFlightLoad, &self.producer_name)
    }

    /// Score the candidates (`active_request.go::Score`).
    pub fn score(&self, view: &View, candidates: &[EndpointIndex], out: &mut [Option<f64>]) {
        let count =
            |e: EndpointIndex| view.in_flight(self.producer, e).map_or(0, |(requests, _)| requests) as i64;
        let max = candidates.iter().map(|&e| count(e)).max().unwrap_or(0).max(0);
        for (slot, &e) in out.iter_mut().zip(candidates) {
            let c = count(e);
            *slot = Some(if c <= self.idle_threshold {
                1.0
            } else {
                (max - c) as f64 / max as f64 * self.max_busy_score
            });
        }
    }
}

/// `no-hit-lru-scorer`: on a request no endpoint has cached, prefer endpoints least recently
/// given such a request.
#[derive(Clone, Debug, PartialEq)]
pub struct NoHitLru {
    /// Endpoint names, least recently used first.
    lru: Vec<String>,
    /// Its capacity.
    pub lru_size: usize,
    /// The prefix producer read.
    pub producer_name: String,
    /// That producer's plugin index, resolved after loading.
    pub producer: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct NoHitLruParams {
    prefix_plugin_type: String,
    prefix_plugin_name: String,
    lru_size: i64,
    prefix_match_info_producer_name: String,
}

impl Default for NoHitLruParams {
    fn default() -> Self {
        NoHitLruParams {
            prefix_plugin_type: String::new(),
            prefix_plugin_name: String::new(),
            lru_size: 1024,
            prefix_match_info_producer_name: String::new(),
        }
    }
}

impl NoHitLru {
    /// An empty scorer of capacity `lru_size` reading the default prefix key.
    pub fn new(lru_size: usize) -> NoHitLru {
        NoHitLru { lru: Vec::new(), lru_size, producer_name: String::new(), producer: None }
    }

    pub(super) fn build(params: Option<&Value>) -> Result<Built, ParamError> {
        let p: NoHitLruParams = decode(params).map_err(|e| prefixed(e, "no-hit-lru-scorer", "scorer"))?;
        let mut scorer = NoHitLru::new(if p.lru_size <= 0 { 1024 } else { p.lru_size as usize });
        scorer.producer_name = p.prefix_match_info_producer_name;
        let mut built = Built::plain(PluginKind::QueueScorer);
        for (field, value) in
            [("prefixPluginType", &p.prefix_plugin_type), ("prefixPluginName", &p.prefix_plugin_name)]
        {
            if !value.is_empty() {
                built.inert.push((field.to_owned(), "accepted and unused by the release".to_owned()));
            }
        }
        built.kind = PluginKind::NoHitLruScorer(scorer);
        Ok(built)
    }

    /// The key it requires.
    pub fn key(&self) -> DataKey {
        DataKey::new(DataType::PrefixCacheMatchInfo, &self.producer_name)
    }

    /// Whether no candidate has any prefix match (a cold request).
    pub fn is_cold(&self, view: &View, candidates: &[EndpointIndex]) -> bool {
        !candidates.iter().any(|&e| view.prefix_info(self.producer, e).is_some_and(|i| i.match_blocks > 0))
    }

    /// Score the candidates (`no_hit_lru.go::Score`); `cold` from [`NoHitLru::is_cold`].
    pub fn score(&self, view: &View, candidates: &[EndpointIndex], cold: bool, out: &mut [Option<f64>]) {
        let n = candidates.len();
        if n == 0 {
            return;
        }
        if !cold {
            out.iter_mut().for_each(|s| *s = Some(0.5));
            return;
        }
        if n == 1 {
            out[0] = Some(1.0);
            return;
        }
        let span = (n - 1) as f64;
        let position = |e: EndpointIndex| {
            let name = &*view.endpoints[e as usize].name;
            self.lru.iter().position(|k| k == name)
        };
        let never_used = candidates.iter().filter(|&&e| position(e).is_none()).count();
        let mut fresh = 0;
        for (slot, &e) in out.iter_mut().zip(candidates) {
            *slot = Some(match position(e) {
                None => {
                    let score = 1.0 - fresh as f64 / span;
                    fresh += 1;
                    score
                }
                Some(at) => (1.0 - (never_used + at) as f64 / span).max(0.0),
            });
        }
    }

    /// Mark `endpoint` most recently used (after a cold request was routed there).
    pub fn touch(&mut self, endpoint: &str) {
        if let Some(at) = self.lru.iter().position(|k| k == endpoint) {
            let name = self.lru.remove(at);
            self.lru.push(name);
            return;
        }
        if self.lru.len() == self.lru_size {
            self.lru.remove(0);
        }
        self.lru.push(endpoint.to_owned());
    }
}
