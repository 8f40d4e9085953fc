//! Endpoints as the router sees them: identity, labels, the model served, and the metrics last
//! scraped from them.
//!
//! The router never reads an engine's state. What it knows of an endpoint arrives by scrape, on
//! its own interval, and is as old as the last scrape (`update_time_us`); before the first scrape
//! every figure is zero and the endpoint has never been updated, as upstream's fresh endpoint is.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// An endpoint's stable index in the router's table (endpoints in name order).
pub type EndpointIndex = u32;

/// One model-server endpoint behind the router.
#[derive(Clone, Debug, PartialEq)]
pub struct Endpoint {
    /// The endpoint's pod id (upstream's `namespace/name`; here the engine instance's name).
    pub name: Arc<str>,
    /// Kubernetes-style labels (e.g. `llm-d.ai/role: decode`).
    pub labels: BTreeMap<String, String>,
    /// The model the endpoint serves.
    pub model: Arc<str>,
    /// The figures scraped from it most recently.
    pub metrics: EndpointMetrics,
}

/// The pod label that names an endpoint's engine (`core-metrics-extractor`'s engine selection).
pub const ENGINE_TYPE_LABEL: &str = "llm-d.ai/engine-type";

/// The label read when [`ENGINE_TYPE_LABEL`] is absent.
pub const ENGINE_TYPE_FALLBACK_LABEL: &str = "inference.networking.k8s.io/engine-type";

/// Which built-in metric names the extractor reads from an endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineType {
    /// vLLM's names (upstream's `defaultEngine`).
    Vllm,
    /// SGLang's names.
    Sglang,
}

impl EngineType {
    /// The Prometheus names of the waiting, running and KV-usage gauges.
    fn names(self) -> [&'static str; 3] {
        match self {
            EngineType::Vllm => {
                ["vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc"]
            }
            EngineType::Sglang => ["sglang:num_queue_reqs", "sglang:num_running_reqs", "sglang:token_usage"],
        }
    }
}

impl Endpoint {
    /// The engine its labels name (`llm-d.ai/engine-type`, else
    /// `inference.networking.k8s.io/engine-type`); vLLM when neither names SGLang.
    pub fn engine_type(&self) -> EngineType {
        let named =
            self.labels.get(ENGINE_TYPE_LABEL).or_else(|| self.labels.get(ENGINE_TYPE_FALLBACK_LABEL));
        match named.map(String::as_str) {
            Some("sglang") => EngineType::Sglang,
            _ => EngineType::Vllm,
        }
    }
}

/// The core metrics upstream's `core-metrics-extractor` keeps for an endpoint (vLLM names in
/// brackets).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EndpointMetrics {
    /// `WaitingQueueSize` (`vllm:num_requests_waiting`).
    pub waiting_queue_size: u64,
    /// `RunningRequestsSize` (`vllm:num_requests_running`).
    pub running_requests_size: u64,
    /// `KVCacheUsagePercent` (`vllm:kv_cache_usage_perc`, a fraction in 0..1).
    pub kv_cache_usage_percent: f64,
    /// `CacheBlockSize` (`vllm:cache_config_info{block_size}`), 0 before the first scrape.
    pub cache_block_size: u64,
    /// `CacheNumBlocks` (`vllm:cache_config_info{num_gpu_blocks}`), 0 before the first scrape.
    pub cache_num_blocks: u64,
    /// When these figures were stamped, µs of simulated time; `None` before the first scrape.
    pub update_time_us: Option<u64>,
}

/// One scrape's reading of an endpoint, as Prometheus samples by name.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Scrape {
    /// Gauges and counters by Prometheus name (first sample of each family, as upstream reads
    /// vLLM's untimestamped text).
    pub samples: Vec<(Cow<'static, str>, f64)>,
    /// `vllm:cache_config_info` labels `block_size` and `num_gpu_blocks`, when exported.
    pub cache_config: Option<(u64, u64)>,
}

impl EndpointMetrics {
    /// Apply one scrape of an `engine` endpoint taken in at `now_us` as upstream's extractor
    /// does: a metric present in the scrape replaces the old value, a missing one keeps it, and
    /// the update time is stamped only if anything was extracted. The cache figures come from
    /// `vllm:cache_config_info{block_size, num_gpu_blocks}` or
    /// `sglang:cache_config_info{page_size, num_pages}`.
    pub fn apply(&mut self, scrape: &Scrape, engine: EngineType, now_us: u64) {
        let [waiting, running, usage] = engine.names();
        let mut extracted = false;
        for (name, value) in &scrape.samples {
            let value = *value;
            let name = name.as_ref();
            if name == waiting {
                self.waiting_queue_size = gauge_count(value);
            } else if name == running {
                self.running_requests_size = gauge_count(value);
            } else if name == usage {
                self.kv_cache_usage_percent = value;
            } else {
                continue;
            }
            extracted = true;
        }
        if let Some((block_size, num_blocks)) = scrape.cache_config {
            self.cache_block_size = block_size;
            self.cache_num_blocks = num_blocks;
            extracted = true;
        }
        if extracted {
            self.update_time_us = Some(now_us);
        }
    }
}

/// A gauge read as a count, as upstream converts Prometheus floats to integers (truncation).
fn gauge_count(value: f64) -> u64 {
    if value.is_finite() && value > 0.0 { value as u64 } else { 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scrape_replaces_what_it_carries_and_keeps_the_rest() {
        let mut metrics = EndpointMetrics::default();
        let first = Scrape {
            samples: vec![
                ("vllm:num_requests_waiting".into(), 3.0),
                ("vllm:kv_cache_usage_perc".into(), 0.25),
            ],
            cache_config: Some((16, 1000)),
        };
        metrics.apply(&first, EngineType::Vllm, 50_000);
        assert_eq!(metrics.waiting_queue_size, 3);
        assert_eq!(metrics.cache_block_size, 16);
        assert_eq!(metrics.update_time_us, Some(50_000));
        let partial = Scrape { samples: vec![("vllm:num_requests_running".into(), 7.0)], cache_config: None };
        metrics.apply(&partial, EngineType::Vllm, 100_000);
        assert_eq!((metrics.waiting_queue_size, metrics.running_requests_size), (3, 7));
        assert_eq!(metrics.update_time_us, Some(100_000));
        // Nothing extracted: the old figures keep their old time.
        metrics.apply(&Scrape::default(), EngineType::Vllm, 150_000);
        assert_eq!(metrics.update_time_us, Some(100_000));
    }

    #[test]
    fn an_sglang_endpoint_is_read_by_sglang_names_only() {
        let mut metrics = EndpointMetrics::default();
        let scrape = Scrape {
            samples: vec![
                ("vllm:num_requests_waiting".into(), 9.0),
                ("sglang:num_queue_reqs".into(), 4.0),
                ("sglang:num_running_reqs".into(), 2.0),
                ("sglang:token_usage".into(), 0.31),
            ],
            cache_config: Some((1, 5000)),
        };
        metrics.apply(&scrape, EngineType::Sglang, 10);
        assert_eq!((metrics.waiting_queue_size, metrics.running_requests_size), (4, 2));
        assert_eq!(metrics.kv_cache_usage_percent, 0.31);
        assert_eq!((metrics.cache_block_size, metrics.cache_num_blocks), (1, 5000));
        let mut as_vllm = EndpointMetrics::default();
        as_vllm.apply(&scrape, EngineType::Vllm, 10);
        assert_eq!((as_vllm.waiting_queue_size, as_vllm.running_requests_size), (9, 0));
    }
}
