//! The `flowControl` section, built as the release builds it when the `flowControl` gate is on
//! (`config/loader/flowcontrol.go::buildFlowControlConfig`, `flowcontrol/registry/config.go`,
//! `flowcontrol/controller/config.go`).
//!
//! Order and defaults as upstream: the default ordering and fairness policies (the instances
//! named `fcfs-ordering-policy` and `global-strict-fairness-policy`) are resolved first; then the
//! global limits (`maxBytes`, `maxRequests`: 0 or absent = unlimited, negative refused), the
//! `defaultPriorityBand` and `defaultNegativePriorityBand` templates, the `priorityBands` in order
//! (a repeated priority refused); every band without limits gets 1,000,000,000 bytes and 5,000
//! requests, without policies the defaults; band 0 always exists (from the default template when
//! not configured). Then the controller: `defaultRequestTTL` 60 s (`"0s"` = none; negative
//! refused), the usage-limit policy (`static-usage-limit-policy` by default) and
//! `enableEviction` (default off; its filter, order and pacing are built in, not configured).
//!
//! One departure: upstream decodes a band without `priority` as priority 0, silently; here it is
//! refused, since it would make that entry band 0's configuration without saying so.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::policies::{Fairness, Ordering, StaticUsageLimit};
use super::quantity;
use crate::config::{ConfigError, RawFlowControl};
use crate::params::GoDuration;
use crate::plugins::PluginKind;
use crate::view::PluginInstance;

/// `defaultPriorityBandMaxBytes`.
pub const DEFAULT_BAND_MAX_BYTES: u64 = 1_000_000_000;
/// `defaultPriorityBandMaxRequests`.
pub const DEFAULT_BAND_MAX_REQUESTS: u64 = 5000;
/// `defaultRequestTTL`, µs.
pub const DEFAULT_REQUEST_TTL_US: u64 = 60_000_000;
/// `defaultExpiryCleanupInterval`: how often finalized items are swept from the queues, µs.
pub const CLEANUP_SWEEP_INTERVAL_US: u64 = 1_000_000;
/// The dispatch ticker's period (`processor.go::Run`), µs.
pub const DISPATCH_TICK_US: u64 = 1000;
/// The largest priority accepted, in magnitude (upstream's `int`; blis-actor bounds it).
pub const MAX_PRIORITY: i64 = i32::MAX as i64;

/// One priority band's configuration, every default applied.
#[derive(Clone, Debug, PartialEq)]
pub struct BandConfig {
    /// Its priority (higher is served first).
    pub priority: i64,
    /// How its queues order their items.
    pub ordering: Ordering,
    /// The ordering policy's plugin index.
    pub ordering_plugin: usize,
    /// Which flow it serves next.
    pub fairness: Fairness,
    /// The fairness policy's plugin index.
    pub fairness_plugin: usize,
    /// Its byte limit over queued items.
    pub max_bytes: u64,
    /// Its count limit over queued items.
    pub max_requests: u64,
}

/// The flow-control layer's configuration, every default applied.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowControlConfig {
    /// Global byte limit over queued items (0: none).
    pub max_bytes: u64,
    /// Global count limit over queued items (0: none).
    pub max_requests: u64,
    /// The TTL every request gets, µs (0: none).
    pub default_request_ttl_us: u64,
    /// The configured bands and band 0, by priority.
    pub bands: BTreeMap<i64, BandConfig>,
    /// The template a band provisioned for a new priority takes.
    pub default_band: BandConfig,
    /// The template for a new negative priority, when configured.
    pub default_negative_band: Option<BandConfig>,
    /// The usage-limit policy.
    pub usage_limit: StaticUsageLimit,
    /// Its plugin index.
    pub usage_limit_plugin: usize,
    /// `enableEviction`: revoke sheddable in-flight requests when a band with demand is
    /// blocked by saturation (`eviction`).
    pub enable_eviction: bool,
}

impl FlowControlConfig {
    /// The configuration of `priority`'s band: configured, or provisioned from the template
    /// (`registry.go::provisionPriorityBandLocked`).
    pub fn band(&self, priority: i64) -> BandConfig {
        if let Some(band) = self.bands.get(&priority) {
            return band.clone();
        }
        let template = match &self.default_negative_band {
            Some(negative) if priority < 0 => negative,
            _ => &self.default_band,
        };
        BandConfig { priority, ..template.clone() }
    }
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawBand {
    priority: Option<i64>,
    max_bytes: Option<Value>,
    max_requests: Option<Value>,
    #[serde(default)]
    fairness_policy_ref: String,
    #[serde(default)]
    ordering_policy_ref: String,
}

const CONTEXT: &str = "failed to load flow control config";

/// Build the section as `buildFlowControlConfig` does, resolving policy refs among `plugins`.
pub(crate) fn build(
    raw: &RawFlowControl,
    plugins: &[PluginInstance],
) -> Result<FlowControlConfig, ConfigError> {
    let (default_ordering, default_fairness) = {
        let wrap = |e: String| {
            ConfigError::at(
                "flowControl",
                format!("{CONTEXT}: failed to resolve default flow-control policies: {e}"),
            )
        };
        let o = ordering(plugins, "fcfs-ordering-policy").map_err(wrap)?;
        let f = fairness(plugins, "global-strict-fairness-policy").map_err(wrap)?;
        (o, f)
    };
    let registry = |path: String, value: Option<String>, e: String| ConfigError {
        path,
        value,
        reason: format!("{CONTEXT}: failed to create registry config: {e}"),
    };
    let max_bytes = limit(raw.max_bytes.as_ref(), "flowControl.maxBytes", "global MaxBytes", &registry)?;
    let max_requests =
        limit(raw.max_requests.as_ref(), "flowControl.maxRequests", "global MaxRequests", &registry)?;
    let defaults = (default_ordering, default_fairness);
    let band = |value: &Value, path: &str, label: &dyn Fn(i64) -> String, needs_priority: bool| {
        let parsed: RawBand = serde_path_to_error::deserialize(value).map_err(|e| {
            let at = e.path().to_string();
            let inner = e.into_inner().to_string();
            let (at, why) = match inner.strip_prefix("unknown field `") {
                Some(rest) => {
                    let name = rest.split('`').next().unwrap_or_default().to_owned();
                    (name.clone(), format!("strict decoding error: unknown field \"{path}.{name}\""))
                }
                None => (if at == "." { String::new() } else { at }, inner),
            };
            let full = if at.is_empty() { path.to_owned() } else { format!("{path}.{at}") };
            ConfigError::at(full, format!("failed to decode configuration JSON/YAML: {why}"))
        })?;
        let priority = match parsed.priority {
            Some(p) if p.abs() > MAX_PRIORITY => {
                return Err(ConfigError {
                    path: format!("{path}.priority"),
                    value: Some(p.to_string()),
                    reason: format!("a priority is at most {MAX_PRIORITY} in magnitude"),
                });
            }
            Some(p) => p,
            None if needs_priority => {
                return Err(ConfigError::at(
                    format!("{path}.priority"),
                    "a priority band must name its priority: upstream decodes a missing priority as 0, which would \
                     silently make this entry band 0's configuration; write `priority: 0` for band 0",
                ));
            }
            None => 0,
        };
        let label = label(priority);
        let band_max_bytes = limit(
            parsed.max_bytes.as_ref(),
            &format!("{path}.maxBytes"),
            &format!("{label} MaxBytes"),
            &registry,
        )?;
        let band_max_requests = limit(
            parsed.max_requests.as_ref(),
            &format!("{path}.maxRequests"),
            &format!("{label} MaxRequests"),
            &registry,
        )?;
        let (ordering_kind, ordering_plugin) = if parsed.ordering_policy_ref.is_empty() {
            defaults.0
        } else {
            ordering(plugins, &parsed.ordering_policy_ref).map_err(|e| {
                registry(
                    format!("{path}.orderingPolicyRef"),
                    Some(format!("{:?}", parsed.ordering_policy_ref)),
                    e,
                )
            })?
        };
        let (fairness_kind, fairness_plugin) = if parsed.fairness_policy_ref.is_empty() {
            defaults.1
        } else {
            fairness(plugins, &parsed.fairness_policy_ref).map_err(|e| {
                registry(
                    format!("{path}.fairnessPolicyRef"),
                    Some(format!("{:?}", parsed.fairness_policy_ref)),
                    e,
                )
            })?
        };
        Ok(BandConfig {
            priority,
            ordering: ordering_kind,
            ordering_plugin,
            fairness: fairness_kind,
            fairness_plugin,
            max_bytes: if band_max_bytes == 0 { DEFAULT_BAND_MAX_BYTES } else { band_max_bytes },
            max_requests: if band_max_requests == 0 { DEFAULT_BAND_MAX_REQUESTS } else { band_max_requests },
        })
    };
    let empty = Value::Object(serde_json::Map::new());
    let default_band = band(
        raw.default_priority_band.as_ref().unwrap_or(&empty),
        "flowControl.defaultPriorityBand",
        &|_| "default priority band".to_owned(),
        false,
    )?;
    let default_negative_band = raw
        .default_negative_priority_band
        .as_ref()
        .map(|v| {
            band(
                v,
                "flowControl.defaultNegativePriorityBand",
                &|_| "default negative priority band".to_owned(),
                false,
            )
        })
        .transpose()?;
    let mut bands = BTreeMap::new();
    for (i, value) in raw.priority_bands.iter().enumerate() {
        let path = format!("flowControl.priorityBands[{i}]");
        let built = band(value, &path, &|p| format!("priority band {p}"), true)?;
        if bands.contains_key(&built.priority) {
            return Err(registry(
                format!("{path}.priority"),
                Some(built.priority.to_string()),
                format!("duplicate priority level {}", built.priority),
            ));
        }
        bands.insert(built.priority, built);
    }
    bands.entry(0).or_insert_with(|| BandConfig { priority: 0, ..default_band.clone() });
    let default_request_ttl_us = match &raw.default_request_ttl {
        None => DEFAULT_REQUEST_TTL_US,
        Some(value) => {
            let path = "flowControl.defaultRequestTTL";
            let text = value.as_str().ok_or_else(|| ConfigError {
                path: path.to_owned(),
                value: Some(value.to_string()),
                reason: "failed to decode configuration JSON/YAML: a duration is a string such as \"60s\""
                    .to_owned(),
            })?;
            let d = GoDuration::parse(text).map_err(|e| {
                ConfigError::value(path, text, format!("failed to decode configuration JSON/YAML: {e}"))
            })?;
            if d.micros < 0 {
                return Err(ConfigError::value(
                    path,
                    text,
                    format!(
                        "{CONTEXT}: failed to create controller config: DefaultRequestTTL cannot be negative, but got {d}"
                    ),
                ));
            }
            d.micros as u64
        }
    };
    let usage_ref = if raw.usage_limit_policy_plugin_ref.is_empty() {
        "static-usage-limit-policy"
    } else {
        raw.usage_limit_policy_plugin_ref.as_str()
    };
    let usage_limit_plugin = resolve(plugins, usage_ref, "flowcontrol.UsageLimitPolicy", |k| {
        matches!(k, PluginKind::UsageLimitPolicy(_))
    })
    .map_err(|e| {
        let path = if raw.usage_limit_policy_plugin_ref.is_empty() {
            "flowControl".to_owned()
        } else {
            "flowControl.usageLimitPolicyPluginRef".to_owned()
        };
        ConfigError {
            path,
            value: Some(format!("{usage_ref:?}")),
            reason: format!("{CONTEXT}: failed to resolve usage limit policy: {e}"),
        }
    })?;
    let PluginKind::UsageLimitPolicy(usage_limit) = plugins[usage_limit_plugin].kind else {
        unreachable!("resolved as a usage-limit policy")
    };
    Ok(FlowControlConfig {
        max_bytes,
        max_requests,
        default_request_ttl_us,
        bands,
        default_band,
        default_negative_band,
        usage_limit,
        usage_limit_plugin,
        enable_eviction: raw.enable_eviction,
    })
}

/// `resolveQuantity`: absent = 0; negative refused with upstream's words.
fn limit(
    value: Option<&Value>,
    path: &str,
    field: &str,
    registry: &dyn Fn(String, Option<String>, String) -> ConfigError,
) -> Result<u64, ConfigError> {
    let Some(value) = value else { return Ok(0) };
    let v = quantity::parse(value).map_err(|e| ConfigError {
        path: path.to_owned(),
        value: Some(value.to_string()),
        reason: format!("failed to decode configuration JSON/YAML: {e}"),
    })?;
    if v < 0 {
        return Err(registry(
            path.to_owned(),
            Some(value.to_string()),
            format!("{field} must be non-negative, got {v}"),
        ));
    }
    Ok(v as u64)
}

/// `resolvePlugin`: the instance named `name`, if it implements `interface`.
fn resolve(
    plugins: &[PluginInstance],
    name: &str,
    interface: &str,
    implements: impl Fn(&PluginKind) -> bool,
) -> Result<usize, String> {
    let at =
        plugins.iter().position(|p| p.name == name).ok_or_else(|| format!("plugin {name:?} not found"))?;
    if !implements(&plugins[at].kind) {
        return Err(format!(
            "plugin {name:?} does not implement {interface} (actual type: {})",
            plugins[at].type_name
        ));
    }
    Ok(at)
}

fn ordering(plugins: &[PluginInstance], name: &str) -> Result<(Ordering, usize), String> {
    let at =
        resolve(plugins, name, "flowcontrol.OrderingPolicy", |k| matches!(k, PluginKind::OrderingPolicy(_)))?;
    let PluginKind::OrderingPolicy(o) = plugins[at].kind else {
        unreachable!("resolved as an ordering policy")
    };
    Ok((o, at))
}

fn fairness(plugins: &[PluginInstance], name: &str) -> Result<(Fairness, usize), String> {
    let at =
        resolve(plugins, name, "flowcontrol.FairnessPolicy", |k| matches!(k, PluginKind::FairnessPolicy(_)))?;
    let PluginKind::FairnessPolicy(f) = plugins[at].kind else {
        unreachable!("resolved as a fairness policy")
    };
    Ok((f, at))
}
