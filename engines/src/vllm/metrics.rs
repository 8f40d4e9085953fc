//! The metrics a vLLM instance exports on `/metrics`, under vLLM's Prometheus names, as a router
//! scraping it would read them.

use serde::Serialize;

use super::scheduler::SchedulerStats;

/// The fields of `vllm:cache_config_info` a router reads.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CacheConfigInfo {
    /// Tokens per block.
    pub block_size: u32,
    /// Blocks in the cache, the null block included.
    pub num_gpu_blocks: u64,
    /// Whether prefix caching is on.
    pub enable_prefix_caching: bool,
    /// The KV element format as configured.
    pub cache_dtype: String,
    /// The share of GPU memory the instance may use.
    pub gpu_memory_utilization: f64,
}

/// One instance's metrics after its latest update.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MetricsSnapshot {
    /// `vllm:num_requests_running`.
    pub num_requests_running: u32,
    /// `vllm:num_requests_waiting`.
    pub num_requests_waiting: u32,
    /// `vllm:kv_cache_usage_perc` (a fraction, 1 = full, as vLLM exports it).
    pub kv_cache_usage_perc: f64,
    /// `vllm:prefix_cache_queries` (a counter of prompt tokens looked up by requests never
    /// preempted).
    pub prefix_cache_queries: u64,
    /// `vllm:prefix_cache_hits` (a counter of those tokens found cached).
    pub prefix_cache_hits: u64,
    /// `vllm:num_preemptions` (a counter).
    pub num_preemptions: u64,
    /// `vllm:external_prefix_cache_queries` (a counter of prompt tokens a connector looked up at
    /// admission, requests never preempted).
    pub external_prefix_cache_queries: u64,
    /// `vllm:external_prefix_cache_hits` (those its connector supplied).
    pub external_prefix_cache_hits: u64,
    /// `vllm:cache_config_info`.
    pub cache_config: CacheConfigInfo,
}

impl MetricsSnapshot {
    /// An idle instance's metrics.
    pub fn new(cache_config: CacheConfigInfo) -> MetricsSnapshot {
        MetricsSnapshot {
            num_requests_running: 0,
            num_requests_waiting: 0,
            kv_cache_usage_perc: 0.0,
            prefix_cache_queries: 0,
            prefix_cache_hits: 0,
            num_preemptions: 0,
            external_prefix_cache_queries: 0,
            external_prefix_cache_hits: 0,
            cache_config,
        }
    }

    /// Take in the statistics of one update and the preemptions counted so far.
    pub fn record(&mut self, stats: &SchedulerStats, preemptions: u64) {
        self.num_requests_running = stats.num_running;
        self.num_requests_waiting = stats.num_waiting;
        self.kv_cache_usage_perc = stats.kv_cache_usage;
        self.prefix_cache_queries += stats.prefix_cache.queries;
        self.prefix_cache_hits += stats.prefix_cache.hits;
        self.num_preemptions = preemptions;
        self.external_prefix_cache_queries += stats.connector_prefix_cache.queries;
        // A negative step count (see `ConnectorPrefixCacheStats`) adds nothing: vLLM increments
        // a prometheus_client Counter, which refuses a negative amount.
        self.external_prefix_cache_hits += stats.connector_prefix_cache.hits.max(0).unsigned_abs();
    }

    /// The numeric series under their Prometheus names.
    pub fn samples(&self) -> [(&'static str, f64); 6] {
        [
            ("vllm:num_requests_running", f64::from(self.num_requests_running)),
            ("vllm:num_requests_waiting", f64::from(self.num_requests_waiting)),
            ("vllm:kv_cache_usage_perc", self.kv_cache_usage_perc),
            ("vllm:prefix_cache_queries", self.prefix_cache_queries as f64),
            ("vllm:prefix_cache_hits", self.prefix_cache_hits as f64),
            ("vllm:num_preemptions", self.num_preemptions as f64),
        ]
    }

    /// Hits over queries so far (zero before the first query).
    pub fn prefix_cache_hit_rate(&self) -> f64 {
        if self.prefix_cache_queries == 0 {
            0.0
        } else {
            self.prefix_cache_hits as f64 / self.prefix_cache_queries as f64
        }
    }
}
