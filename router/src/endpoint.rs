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
    /// Apply one scrape taken in at `now_us` as upstream's extractor does: a metric present in
    /// the scrape replaces the old value, a missing one keeps it, and the update time is stamped
    /// only if anything was extracted.
    pub fn apply(&mut self, scrape: &Scrape, now_us: u64) {
        let mut extracted = false;
        for (name, value) in &scrape.samples {
            let value = *value;
            let slot = match name.as_ref() {
                "vllm:num_requests_waiting" => {
                    self.waiting_queue_size = gauge_count(value);
                    true
                }
                "vllm:num_requests_running" => {
                    self.running_requests_size = gauge_count(value);
                    true
                }
                "vllm:kv_cache_usage_perc" => {
                    self.kv_cache_usage_percent = value;
                    true
                }
                _ => false,
            };
            extracted |= slot;
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
        metrics.apply(&first, 50_000);
        assert_eq!(metrics.waiting_queue_size, 3);
        assert_eq!(metrics.cache_block_size, 16);
        assert_eq!(metrics.update_time_us, Some(50_000));
        let partial = Scrape { samples: vec![("vllm:num_requests_running".into(), 7.0)], cache_config: None };
        metrics.apply(&partial, 100_000);
        assert_eq!((metrics.waiting_queue_size, metrics.running_requests_size), (3, 7));
        assert_eq!(metrics.update_time_us, Some(100_000));
        // Nothing extracted: the old figures keep their old time.
        metrics.apply(&Scrape::default(), 150_000);
        assert_eq!(metrics.update_time_us, Some(100_000));
    }
}
