//! The scenario document: what cluster to simulate and what traffic to send it.
//!
//! A scenario is YAML. Every struct rejects unknown fields; [`Scenario::parse`] refuses bad
//! structure and bad values alike with a [`FieldError`] naming the field path. Engine arguments
//! are kept as an unparsed section (`engine.args`): their schema belongs to the engine port.

use serde::{Deserialize, Serialize};

use crate::bounds::{MAX_INSTANCES, check_micros, check_seconds};
use crate::error::{FieldError, number};
use crate::fabric::FabricSpec;
use crate::frame::FrameSpec;
use crate::workload::Workload;
use crate::yaml::{self, YamlValue};

/// A whole scenario.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// A name for people; not used by the simulation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The run seed (default 1); `--seed` overrides it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Stop the run at this simulated time, in seconds; requests unfinished then are counted
    /// as in flight or queued at the horizon. Without it the run ends when all requests end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub horizon_s: Option<f64>,
    /// The serving cluster.
    pub cluster: Cluster,
    /// The traffic.
    pub workload: Workload,
    /// How the run becomes figures: replications, warm-up, SLOs, acceptance.
    #[serde(default)]
    pub frame: FrameSpec,
}

/// The serving side: network, router and engine pools.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cluster {
    /// One-way network delays (default zero).
    #[serde(default)]
    pub network: Network,
    /// The router in front of the engines.
    pub router: RouterSpec,
    /// Groups of identical engine instances.
    pub pools: Vec<Pool>,
    /// The nodes and links that carry KV transfers (absent: one DGX-H100-like node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric: Option<FabricSpec>,
}

/// One-way network delays, in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Network {
    /// Client to router and router to client.
    #[serde(default)]
    pub client_router_us: u64,
    /// Router to engine and engine to router.
    #[serde(default)]
    pub router_engine_us: u64,
}

/// The llm-d router release this build models (also in `stack.json`).
pub const LLMD_ROUTER_VERSION: &str = "0.10.0";

/// llm-d's `--refresh-metrics-interval` default, seconds.
pub const DEFAULT_REFRESH_METRICS_INTERVAL_S: f64 = 0.05;

/// The router: llm-d's, configured by an `EndpointPickerConfig`, or the round-robin baseline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouterSpec {
    /// The baseline policy (`round-robin`), instead of llm-d's router.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<RouterPolicy>,
    /// llm-d's `EndpointPickerConfig`, inline (`{}` for the release's built-in default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<YamlValue>,
    /// llm-d's `EndpointPickerConfig` in a file, relative to the scenario's folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_file: Option<String>,
    /// The llm-d router release (default and only value: the one this build models).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Upstream's `--allow-experimental-plugins`: let Alpha plugins load.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_experimental_plugins: bool,
    /// Upstream's `--refresh-metrics-interval`: how often each endpoint is scraped, seconds
    /// (default 0.05).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_metrics_interval_s: Option<f64>,
    /// How long after an engine step publishes its KV events the router's index applies them,
    /// beyond the network delay, seconds (default 0): vLLM's publisher thread, ZMQ and the
    /// index's worker queue. Read only by a config that indexes KV events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_events_delay_s: Option<f64>,
}

/// Endpoint-picking policies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RouterPolicy {
    /// Each request to the next engine serving its model, in name order, wrapping around.
    RoundRobin,
}

impl RouterSpec {
    /// Whether llm-d's router (rather than the baseline) runs.
    pub fn is_llmd(&self) -> bool {
        self.policy.is_none()
    }

    /// Refuse contradictory or out-of-range router settings.
    fn validate(&self) -> Result<(), FieldError> {
        let given = [self.policy.is_some(), self.config.is_some(), self.config_file.is_some()];
        match given.iter().filter(|g| **g).count() {
            0 => {
                return Err(FieldError::at(
                    "cluster.router",
                    "choose a router: `policy: round-robin`, or llm-d's with `config` (inline, `{}` for its \
                     built-in default) or `config_file`",
                ));
            }
            1 => {}
            _ if self.policy.is_some() => {
                return Err(FieldError::at(
                    "cluster.router.policy",
                    "round-robin is the baseline instead of llm-d's router; give it or a config, not both",
                ));
            }
            _ => {
                return Err(FieldError::at(
                    "cluster.router.config_file",
                    "give `config` or `config_file`, not both",
                ));
            }
        }
        if let Some(version) = &self.version
            && version != LLMD_ROUTER_VERSION
        {
            return Err(FieldError::new(
                "cluster.router.version",
                format!("{version:?}"),
                format!("this build models llm-d-router {LLMD_ROUTER_VERSION} only"),
            ));
        }
        if let Some(interval) = self.refresh_metrics_interval_s
            && !(interval.is_finite() && (1e-6..=3600.0).contains(&interval))
        {
            return Err(FieldError::new(
                "cluster.router.refresh_metrics_interval_s",
                interval,
                "must be between 1 µs and 3600 s (llm-d scrapes each endpoint on this interval)",
            ));
        }
        if let Some(delay) = self.kv_events_delay_s
            && !(delay.is_finite() && (0.0..=60.0).contains(&delay))
        {
            return Err(FieldError::new(
                "cluster.router.kv_events_delay_s",
                delay,
                "must be between 0 and 60 s (the lag from an engine step publishing its KV events to the router \
                 indexing them)",
            ));
        }
        if self.policy.is_some() {
            for (field, set) in [
                ("version", self.version.is_some()),
                ("allow_experimental_plugins", self.allow_experimental_plugins),
                ("refresh_metrics_interval_s", self.refresh_metrics_interval_s.is_some()),
                ("kv_events_delay_s", self.kv_events_delay_s.is_some()),
            ] {
                if set {
                    return Err(FieldError::at(
                        format!("cluster.router.{field}"),
                        "a setting of llm-d's router; the round-robin baseline has none",
                    ));
                }
            }
        }
        Ok(())
    }

    /// The KV-event lag beyond the network delay, µs (rounded up).
    pub fn kv_events_delay_us(&self) -> u64 {
        (self.kv_events_delay_s.unwrap_or(0.0) * 1e6).ceil() as u64
    }

    /// The scrape interval, µs.
    pub fn refresh_metrics_interval_us(&self) -> u64 {
        let s = self.refresh_metrics_interval_s.unwrap_or(DEFAULT_REFRESH_METRICS_INTERVAL_S);
        (s * 1e6).ceil() as u64
    }
}

/// A group of identical engine instances.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pool {
    /// The pool's name; instances are named `<pool>-<index>`.
    pub name: String,
    /// How many instances.
    pub replicas: u32,
    /// The accelerator each instance runs on.
    pub hardware: Hardware,
    /// The served model, by catalog name.
    pub model: String,
    /// Kubernetes-style labels of its instances, as llm-d's filters read them (e.g.
    /// `llm-d.ai/role: decode`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
    /// The engine and its arguments.
    pub engine: EngineSpec,
}

/// The accelerator of an engine instance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hardware {
    /// Chip name from the catalog, e.g. `H100-SXM`.
    pub chip: String,
}

/// Which engine runs an instance, and its arguments.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineSpec {
    /// The engine.
    pub kind: EngineKind,
    /// The upstream release it models, e.g. `"0.15.1"`.
    pub version: String,
    /// The engine's own arguments, in its upstream's names; parsed by the engine port.
    #[serde(default = "empty_mapping")]
    pub args: YamlValue,
}

fn empty_mapping() -> YamlValue {
    YamlValue::Mapping(Default::default())
}

/// Engines blis-actor can model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    /// vLLM (V1 engine).
    Vllm,
    /// SGLang.
    Sglang,
}

impl EngineKind {
    /// The name used in documents.
    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::Vllm => "vllm",
            EngineKind::Sglang => "sglang",
        }
    }
}

impl Scenario {
    /// Parse and validate a scenario.
    pub fn parse(text: &str) -> Result<Scenario, FieldError> {
        let scenario: Scenario = yaml::from_str(text)?;
        scenario.validate()?;
        Ok(scenario)
    }

    /// Refuse values the schema's types cannot: empty or duplicate names, zero counts,
    /// non-positive rates, inverted ranges.
    pub fn validate(&self) -> Result<(), FieldError> {
        if let Some(h) = self.horizon_s {
            if !(h.is_finite() && h > 0.0) {
                return Err(FieldError::new("horizon_s", number(h), "must be a positive number of seconds"));
            }
            check_seconds("horizon_s", h)?;
        }
        let network = self.cluster.network;
        check_micros("cluster.network.client_router_us", network.client_router_us)?;
        check_micros("cluster.network.router_engine_us", network.router_engine_us)?;
        let mut instances: u64 = 0;
        if self.cluster.pools.is_empty() {
            return Err(FieldError::new("cluster.pools", "[]", "at least one pool of engines is needed"));
        }
        self.cluster.router.validate()?;
        if let Some(fabric) = &self.cluster.fabric {
            fabric.validate("cluster.fabric")?;
        }
        for (i, pool) in self.cluster.pools.iter().enumerate() {
            let path = format!("cluster.pools[{i}]");
            check_name(&pool.name, &format!("{path}.name"))?;
            if self.cluster.pools[..i].iter().any(|p| p.name == pool.name) {
                return Err(FieldError::new(
                    format!("{path}.name"),
                    &pool.name,
                    "another pool has this name",
                ));
            }
            if pool.replicas == 0 {
                return Err(FieldError::new(
                    format!("{path}.replicas"),
                    0,
                    "a pool needs at least one engine",
                ));
            }
            instances += u64::from(pool.replicas);
            if instances > u64::from(MAX_INSTANCES) {
                return Err(FieldError::new(
                    format!("{path}.replicas"),
                    pool.replicas,
                    format!(
                        "the pools up to this one hold {instances} engine instances; a run holds at most {MAX_INSTANCES} (each keeps its own KV cache tables)"
                    ),
                ));
            }
            if !matches!(pool.engine.args, YamlValue::Mapping(_)) {
                return Err(FieldError::at(
                    format!("{path}.engine.args"),
                    "must be a mapping of argument names to values",
                ));
            }
        }
        self.workload.validate()?;
        self.frame.validate(self.horizon_s)
    }
}

/// Refuse names that cannot name an actor: empty, or with characters outside `[A-Za-z0-9_.-]`.
pub(crate) fn check_name(name: &str, path: &str) -> Result<(), FieldError> {
    if name.is_empty() {
        return Err(FieldError::new(path, "\"\"", "a name cannot be empty"));
    }
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) {
        return Err(FieldError::new(
            path,
            format!("{name:?}"),
            "names use only letters, digits, '-', '_' and '.'",
        ));
    }
    Ok(())
}
