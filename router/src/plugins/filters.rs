//! Filters: by label (the llm-d roles among them), by label selector, by utilization, and by
//! prefix-cache affinity.
//!
//! A filter gets the previous filter's survivors in order and keeps a subsequence of them.

use std::collections::BTreeMap;

use blis_kernel::Substream;
use serde::Deserialize;
use serde_json::Value;

use super::scorers::prefixed;
use super::{Built, DataKey, DataType, PluginKind};
use crate::endpoint::{Endpoint, EndpointIndex};
use crate::params::{ParamError, decode};
use crate::view::View;

/// The label llm-d's role filters read.
pub const ROLE_LABEL: &str = "llm-d.ai/role";

/// Keep endpoints whose `label` is one of `valid_values`, or lacks the label when
/// `allows_no_label` (`filter/bylabel/filter.go`).
#[derive(Clone, Debug, PartialEq)]
pub struct ByLabel {
    /// The label read.
    pub label: String,
    /// The values kept.
    pub valid_values: Vec<String>,
    /// Whether an endpoint without the label is kept.
    pub allows_no_label: bool,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct ByLabelParams {
    label: String,
    valid_values: Vec<String>,
    allows_no_label: bool,
}

impl ByLabel {
    /// The role filter `decode-filter`, `prefill-filter` or `encode-filter` (`bylabel/roles.go`).
    pub fn role(type_name: &str) -> ByLabel {
        let (values, allows_no_label): (&[&str], bool) = match type_name {
            "decode-filter" => (&["decode", "prefill-decode", "both", "encode-prefill-decode"], true),
            "prefill-filter" => {
                (&["prefill", "encode-prefill", "prefill-decode", "both", "encode-prefill-decode"], false)
            }
            _ => (&["encode", "encode-prefill", "encode-prefill-decode"], false),
        };
        ByLabel {
            label: ROLE_LABEL.to_owned(),
            valid_values: values.iter().map(|v| (*v).to_owned()).collect(),
            allows_no_label,
        }
    }

    pub(super) fn build(params: Option<&Value>) -> Result<Built, ParamError> {
        let p: ByLabelParams = decode(params).map_err(|e| prefixed(e, "by-label", "filter"))?;
        let invalid = |path: &str, why: &str| {
            ParamError::invalid(params, path, format!("invalid configuration for 'by-label' filter: {why}"))
        };
        if p.label.is_empty() {
            return Err(invalid("label", "'label' must be specified"));
        }
        if p.valid_values.is_empty() && !p.allows_no_label {
            return Err(invalid(
                "validValues",
                "either 'validValues' must be non-empty or 'allowsNoLabel' must be true",
            ));
        }
        let mut built = Built::plain(PluginKind::ByLabelFilter(ByLabel {
            label: p.label,
            valid_values: p.valid_values,
            allows_no_label: p.allows_no_label,
        }));
        built.warnings.push(
            "Deprecated: plugin type 'by-label' is deprecated, use 'label-selector-filter' for generic label \
             filtering or 'decode-filter'/'prefill-filter'/'encode-filter' for role-based filtering"
                .to_owned(),
        );
        Ok(built)
    }

    /// Whether `endpoint` passes.
    pub fn keeps(&self, endpoint: &Endpoint) -> bool {
        self.keeps_labels(&endpoint.labels)
    }

    /// Whether an endpoint with `labels` passes.
    pub fn keeps_labels(&self, labels: &BTreeMap<String, String>) -> bool {
        match labels.get(&self.label) {
            None => self.allows_no_label,
            Some(value) => self.valid_values.iter().any(|v| v == value),
        }
    }
}

/// A Kubernetes label selector (`matchLabels` and `matchExpressions`, all ANDed).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct LabelSelector {
    /// Labels that must be present with exactly these values.
    pub match_labels: BTreeMap<String, String>,
    /// Set-based requirements.
    pub match_expressions: Vec<LabelRequirement>,
}

/// One set-based requirement of a label selector.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct LabelRequirement {
    /// The label.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    /// The values `In`/`NotIn` compare with.
    pub values: Vec<String>,
}

impl LabelSelector {
    pub(super) fn build(type_name: &str, params: Option<&Value>) -> Result<Built, ParamError> {
        // Upstream names the canonical type in the decode error, for the deprecated alias too.
        let selector: LabelSelector =
            decode(params).map_err(|e| prefixed(e, "label-selector-filter", "filter"))?;
        // `metav1.LabelSelectorAsSelector` then `labels.NewRequirement`, in apimachinery's words.
        for (i, requirement) in selector.match_expressions.iter().enumerate() {
            let path = format!("matchExpressions[{i}]");
            let values = &requirement.values;
            let (field, why) = match requirement.operator.as_str() {
                "In" | "NotIn" if values.is_empty() => (
                    "values",
                    "values: Invalid value: []string(nil): for 'in', 'notin' operators, values set can't be empty"
                        .to_owned(),
                ),
                "Exists" | "DoesNotExist" if !values.is_empty() => (
                    "values",
                    format!(
                        "values: Invalid value: {}: values set must be empty for exists and does not exist",
                        go_string_slice(values)
                    ),
                ),
                "In" | "NotIn" | "Exists" | "DoesNotExist" => continue,
                other => ("operator", format!("{other:?} is not a valid label selector operator")),
            };
            return Err(ParamError::invalid(params, &format!("{path}.{field}"), why));
        }
        let mut built = Built::plain(PluginKind::LabelSelectorFilter(selector));
        if type_name == "by-label-selector" {
            built.warnings.push(
                "Deprecated: plugin type 'by-label-selector' is deprecated, use 'label-selector-filter' instead"
                    .to_owned(),
            );
        }
        Ok(built)
    }

    /// Whether `labels` satisfy the selector.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| {
                let value = labels.get(&r.key);
                match r.operator.as_str() {
                    "In" => value.is_some_and(|v| r.values.contains(v)),
                    "NotIn" => value.is_none_or(|v| !r.values.contains(v)),
                    "Exists" => value.is_some(),
                    _ => value.is_none(),
                }
            })
    }
}

/// A string list as Go's `%#v` prints it (`[]string{"a", "b"}`).
fn go_string_slice(values: &[String]) -> String {
    let items: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
    format!("[]string{{{}}}", items.join(", "))
}

/// `utilization-filter` (Alpha): drop endpoints over any configured cap
/// (`filter/utilization/filter.go`).
#[derive(Clone, Debug, PartialEq)]
pub struct Utilization {
    /// The caps, in configured order.
    pub conditions: Vec<(UtilizationMetric, f64)>,
    /// Return every input endpoint when all are dropped.
    pub fallback_on_empty: bool,
    /// The in-flight producer read for `active-requests`.
    pub producer_name: String,
    /// That producer's plugin index, resolved after loading.
    pub producer: Option<usize>,
}

/// The figures a utilization condition can cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UtilizationMetric {
    /// The router's in-flight requests on the endpoint.
    ActiveRequests,
    /// Scraped running requests.
    RunningRequests,
    /// Scraped waiting queue.
    WaitingQueue,
    /// Scraped KV-cache utilization (a fraction).
    KvCacheUtilization,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct UtilizationParams {
    conditions: Vec<ConditionParams>,
    fallback_on_empty: bool,
    in_flight_load_producer_name: String,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct ConditionParams {
    metric: String,
    max_value: Option<f64>,
}

impl Utilization {
    pub(super) fn build(params: Option<&Value>) -> Result<Built, ParamError> {
        let p: UtilizationParams = decode(params).map_err(|e| prefixed(e, "utilization-filter", "filter"))?;
        if p.conditions.is_empty() {
            return Err(ParamError::invalid(
                params,
                "conditions",
                "utilization filter requires at least one condition",
            ));
        }
        let mut conditions = Vec::new();
        for (i, c) in p.conditions.iter().enumerate() {
            let metric = match c.metric.as_str() {
                "active-requests" => UtilizationMetric::ActiveRequests,
                "running-requests" => UtilizationMetric::RunningRequests,
                "waiting-queue" => UtilizationMetric::WaitingQueue,
                "kv-cache-utilization" => UtilizationMetric::KvCacheUtilization,
                other => {
                    return Err(ParamError::invalid(
                        params,
                        &format!("conditions[{i}].metric"),
                        format!(
                            "utilization filter condition metric must be one of \"active-requests\", \
                             \"running-requests\", \"waiting-queue\", \"kv-cache-utilization\", got \"{other}\""
                        ),
                    ));
                }
            };
            let path = format!("conditions[{i}].maxValue");
            let Some(max) = c.max_value else {
                return Err(ParamError::invalid(
                    params,
                    &path,
                    format!("utilization filter condition for \"{}\" requires maxValue", c.metric),
                ));
            };
            if max < 0.0 {
                return Err(ParamError::invalid(
                    params,
                    &path,
                    format!(
                        "utilization filter condition for \"{}\" requires a non-negative maxValue, got {max}",
                        c.metric
                    ),
                ));
            }
            if metric == UtilizationMetric::KvCacheUtilization && max > 1.0 {
                return Err(ParamError::invalid(
                    params,
                    &path,
                    format!(
                        "utilization filter maxValue for \"kv-cache-utilization\" is a fraction and must be at most 1, got {max}"
                    ),
                ));
            }
            conditions.push((metric, max));
        }
        Ok(Built::plain(PluginKind::UtilizationFilter(Utilization {
            conditions,
            fallback_on_empty: p.fallback_on_empty,
            producer_name: p.in_flight_load_producer_name,
            producer: None,
        })))
    }

    /// The keys it requires: the in-flight key only when a condition caps active requests.
    pub fn keys(&self) -> Vec<DataKey> {
        if self.conditions.iter().any(|(m, _)| *m == UtilizationMetric::ActiveRequests) {
            vec![DataKey::new(DataType::InFlightLoad, &self.producer_name)]
        } else {
            Vec::new()
        }
    }

    /// Filter `input` into `out`.
    pub fn filter(&self, view: &View, input: &[EndpointIndex], out: &mut Vec<EndpointIndex>) {
        out.extend(input.iter().copied().filter(|&e| {
            let metrics = &view.endpoints[e as usize].metrics;
            self.conditions.iter().all(|&(metric, max)| {
                let value = match metric {
                    UtilizationMetric::ActiveRequests => {
                        view.in_flight(self.producer, e).map_or(0, |(r, _)| r) as f64
                    }
                    UtilizationMetric::RunningRequests => metrics.running_requests_size as f64,
                    UtilizationMetric::WaitingQueue => metrics.waiting_queue_size as f64,
                    UtilizationMetric::KvCacheUtilization => metrics.kv_cache_usage_percent,
                };
                value <= max
            })
        }));
        if out.is_empty() && self.fallback_on_empty {
            out.extend_from_slice(input);
        }
    }
}

/// `prefix-cache-affinity-filter`: narrow to endpoints holding most of the prompt, unless that
/// costs too much TTFT (`filter/prefixcacheaffinity/plugin.go`).
#[derive(Clone, Debug, PartialEq)]
pub struct PrefixCacheAffinity {
    /// Match ratio at which an endpoint is sticky (≤ 0 disables the filter).
    pub affinity_threshold: f64,
    /// Chance of returning every endpoint (exploration).
    pub exploration_probability: f64,
    /// TTFT gap (ms) above which stickiness is abandoned (0 disables the gate).
    pub max_ttft_penalty_ms: f64,
    /// Where a TTFT estimate comes from.
    pub ttft_source: TtftSource,
    /// Prefill tokens per second for the throughput estimate.
    pub peak_prefill_throughput: f64,
    /// The prefix producer read.
    pub prefix_producer_name: String,
    /// The in-flight producer read.
    pub in_flight_producer_name: String,
    /// Their plugin indexes, resolved after loading.
    pub prefix_producer: Option<usize>,
    /// See `prefix_producer`.
    pub in_flight_producer: Option<usize>,
}

/// Where the affinity filter's TTFT estimate comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TtftSource {
    /// In-flight uncached tokens over the peak prefill throughput.
    PrefillThroughput,
    /// The latency predictor (not ported; refused when the gate needs it).
    LatencyPredictor,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct AffinityParams {
    affinity_threshold: f64,
    exploration_probability: f64,
    #[serde(rename = "maxTTFTPenaltyMs")]
    max_ttft_penalty_ms: f64,
    #[serde(rename = "ttftSource")]
    ttft_source: String,
    peak_prefill_throughput: f64,
    prefix_match_info_producer_name: String,
    latency_prediction_info_producer_name: String,
    in_flight_load_producer_name: String,
}

impl Default for AffinityParams {
    fn default() -> Self {
        AffinityParams {
            affinity_threshold: 0.80,
            exploration_probability: 0.0,
            max_ttft_penalty_ms: 18_000.0,
            ttft_source: "prefillThroughput".to_owned(),
            peak_prefill_throughput: 15_928.0,
            prefix_match_info_producer_name: String::new(),
            latency_prediction_info_producer_name: String::new(),
            in_flight_load_producer_name: String::new(),
        }
    }
}

impl PrefixCacheAffinity {
    pub(super) fn build(params: Option<&Value>) -> Result<Built, ParamError> {
        let p: AffinityParams = decode(params).map_err(|mut e| {
            e.reason = format!("failed to unmarshal config: {}", e.reason);
            e
        })?;
        let invalid =
            |path: &str, why: String| ParamError::invalid(params, path, format!("invalid config: {why}"));
        if p.affinity_threshold > 1.0 {
            return Err(invalid(
                "affinityThreshold",
                format!("affinityThreshold must be <= 1.0, got {:.6}", p.affinity_threshold),
            ));
        }
        if !(0.0..=1.0).contains(&p.exploration_probability) {
            return Err(invalid(
                "explorationProbability",
                format!("explorationProbability must be in [0, 1], got {:.6}", p.exploration_probability),
            ));
        }
        if p.max_ttft_penalty_ms < 0.0 {
            return Err(invalid(
                "maxTTFTPenaltyMs",
                format!("maxTTFTPenaltyMs must be >= 0, got {:.6}", p.max_ttft_penalty_ms),
            ));
        }
        if p.peak_prefill_throughput < 0.0 {
            return Err(invalid(
                "peakPrefillThroughput",
                format!("peakPrefillThroughput must be >= 0, got {:.6}", p.peak_prefill_throughput),
            ));
        }
        let ttft_source = match p.ttft_source.as_str() {
            "prefillThroughput" => TtftSource::PrefillThroughput,
            "latencyPredictor" => TtftSource::LatencyPredictor,
            other => {
                return Err(invalid(
                    "ttftSource",
                    format!(
                        "ttftSource must be \"latencyPredictor\" or \"prefillThroughput\", got \"{other}\""
                    ),
                ));
            }
        };
        if ttft_source == TtftSource::PrefillThroughput
            && p.max_ttft_penalty_ms > 0.0
            && p.peak_prefill_throughput <= 0.0
        {
            return Err(invalid(
                "peakPrefillThroughput",
                "peakPrefillThroughput must be > 0 when ttftSource is prefillThroughput".to_owned(),
            ));
        }
        if ttft_source == TtftSource::LatencyPredictor && p.max_ttft_penalty_ms > 0.0 {
            return Err(ParamError::invalid(
                params,
                "ttftSource",
                "the latency predictor (a trained model) is not ported; use prefillThroughput or maxTTFTPenaltyMs: 0",
            ));
        }
        let mut built = Built::plain(PluginKind::PrefixCacheAffinityFilter(PrefixCacheAffinity {
            affinity_threshold: p.affinity_threshold,
            exploration_probability: p.exploration_probability,
            max_ttft_penalty_ms: p.max_ttft_penalty_ms,
            ttft_source,
            peak_prefill_throughput: p.peak_prefill_throughput,
            prefix_producer_name: p.prefix_match_info_producer_name,
            in_flight_producer_name: p.in_flight_load_producer_name,
            prefix_producer: None,
            in_flight_producer: None,
        }));
        if !p.latency_prediction_info_producer_name.is_empty() {
            built.inert.push((
                "latencyPredictionInfoProducerName".to_owned(),
                "read only with ttftSource latencyPredictor and a TTFT penalty".to_owned(),
            ));
        }
        Ok(built)
    }

    /// The keys it requires: the prefix key, and the in-flight key when the TTFT gate is on.
    pub fn keys(&self) -> Vec<DataKey> {
        let mut keys = vec![DataKey::new(DataType::PrefixCacheMatchInfo, &self.prefix_producer_name)];
        if self.max_ttft_penalty_ms > 0.0 && self.ttft_source == TtftSource::PrefillThroughput {
            keys.push(DataKey::new(DataType::InFlightLoad, &self.in_flight_producer_name));
        }
        keys
    }

    /// Filter `input` into `out`; `exploration` is drawn only when exploring is possible.
    pub fn filter(
        &self,
        view: &View,
        input: &[EndpointIndex],
        exploration: &mut Substream,
        out: &mut Vec<EndpointIndex>,
    ) {
        if input.len() <= 1 || self.affinity_threshold <= 0.0 {
            out.extend_from_slice(input);
            return;
        }
        if self.exploration_probability > 0.0 && exploration.unit() < self.exploration_probability {
            out.extend_from_slice(input);
            return;
        }
        let ratio = |e: EndpointIndex| match view.prefix_info(self.prefix_producer, e) {
            Some(info) if info.total_blocks > 0 => info.match_blocks as f64 / info.total_blocks as f64,
            _ => 0.0,
        };
        let sticky = |e: &EndpointIndex| ratio(*e) >= self.affinity_threshold;
        if !input.iter().any(sticky) {
            out.extend_from_slice(input);
            return;
        }
        if self.max_ttft_penalty_ms > 0.0 && !input.iter().all(sticky) {
            let ttft = |e: EndpointIndex| {
                let tokens = view.in_flight(self.in_flight_producer, e).map_or(0, |(_, t)| t);
                tokens as f64 / self.peak_prefill_throughput * 1000.0
            };
            let best = |want_sticky: bool| {
                input.iter().filter(|e| sticky(e) == want_sticky).map(|&e| ttft(e)).fold(f64::MAX, f64::min)
            };
            if best(true) - best(false) > self.max_ttft_penalty_ms {
                out.extend_from_slice(input);
                return;
            }
        }
        out.extend(input.iter().copied().filter(sticky));
    }
}
