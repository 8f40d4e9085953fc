//! The Result document, `result.json` (schema `blis-actor/result/v0`).

use serde::{Deserialize, Serialize};

use crate::engine::EngineIdentity;

/// The schema identifier written in every Result.
pub const RESULT_SCHEMA: &str = "blis-actor/result/v0";

/// A run's result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// Always [`RESULT_SCHEMA`].
    pub schema: String,
    /// The blis-actor release that produced it.
    pub blis_actor_version: String,
    /// The run seed.
    pub seed: u64,
    /// Upstream engines modelled, one entry per distinct engine and release.
    pub engines: Vec<EngineIdentity>,
    /// The scenario as given and as resolved.
    pub scenario: ScenarioRecord,
    /// Content hashes of the cost model's data.
    pub data: DataRecord,
    /// How much of the priced time each rank of coefficient priced.
    pub pricing: PricingRecord,
    /// How every request ended.
    pub fates: FateCounts,
    /// Latency and throughput over the completed requests.
    pub metrics: Metrics,
    /// Each engine instance's own counters, as its `/metrics` reports them at the end.
    pub instances: Vec<InstanceRecord>,
    /// What the simulation did.
    pub simulation: SimulationRecord,
}

/// One engine instance's counters at the end of a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct InstanceRecord {
    /// The instance, `engine/<pool>-<i>`.
    pub name: String,
    /// Steps that ran at least one token.
    pub steps: u64,
    /// Preemptions (`vllm:num_preemptions`).
    pub preemptions: u64,
    /// Prompt tokens looked up in the prefix cache by requests never preempted, one lookup per
    /// admission attempt (`vllm:prefix_cache_queries`).
    pub prefix_cache_queries: u64,
    /// Those found cached (`vllm:prefix_cache_hits`).
    pub prefix_cache_hits: u64,
}

/// The scenario behind a result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScenarioRecord {
    /// The scenario's text, exactly as given.
    pub given: String,
    /// Every default filled in, every engine argument resolved, the facts used.
    pub resolved: serde_json::Value,
}

/// Content hashes (SHA-256, hex) of the data a run used; equal data gives equal hashes however
/// it was loaded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataRecord {
    /// The catalog (chips, models, added model configs).
    pub catalog_sha256: String,
    /// The coefficient registry.
    pub registry_sha256: String,
}

/// Priced engine time, split by the rank of the coefficients that priced it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PricingRecord {
    /// All priced step time over all engines, µs.
    pub priced_us: f64,
    /// Priced time per rank, µs (ranks that priced nothing are left out).
    pub by_rank_us: std::collections::BTreeMap<String, f64>,
    /// Share of the priced time per rank, 0–1 (same keys).
    pub share_by_rank: std::collections::BTreeMap<String, f64>,
}

/// Requests by fate. `arrivals` always equals the sum of the others.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FateCounts {
    /// LLM calls of the requests that arrived (every node of an arrived request counts, sent
    /// or not).
    pub arrivals: u64,
    /// Completed.
    pub completed: u64,
    /// Dropped without service.
    pub dropped: u64,
    /// Aborted by their client's timeout.
    pub timed_out: u64,
    /// In flight at the horizon.
    pub in_flight_at_horizon: u64,
    /// Queued at the horizon.
    pub queued_at_horizon: u64,
    /// Never sent (a node they depend on failed or was unfinished at the end).
    pub not_started: u64,
}

impl FateCounts {
    /// Whether every arrival has exactly one fate.
    pub fn conserved(&self) -> bool {
        self.arrivals
            == self.completed
                + self.dropped
                + self.timed_out
                + self.in_flight_at_horizon
                + self.queued_at_horizon
                + self.not_started
    }

    /// Count one call's fate (and its arrival).
    pub fn count(&mut self, fate: &crate::Fate) {
        use crate::Fate;
        self.arrivals += 1;
        match fate {
            Fate::Completed => self.completed += 1,
            Fate::Dropped { .. } => self.dropped += 1,
            Fate::TimedOut => self.timed_out += 1,
            Fate::InFlightAtHorizon => self.in_flight_at_horizon += 1,
            Fate::QueuedAtHorizon => self.queued_at_horizon += 1,
            Fate::NotStarted => self.not_started += 1,
        }
    }
}

/// Summary statistics of one latency metric, in milliseconds.
///
/// Percentiles are nearest-rank: `pX` is the smallest sample with at least X% of the samples
/// at or below it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    /// Samples summarised.
    pub count: u64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
}

/// The run's metrics. Latencies cover completed requests only; requests unfinished at a horizon
/// are counted in the fates and excluded here.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// Time to first token: arrival at the client's send to the first token back, per request.
    pub ttft_ms: LatencySummary,
    /// Time per output token: `(e2e − ttft) / (output − 1)`, per request with ≥ 2 output tokens.
    pub tpot_ms: LatencySummary,
    /// Inter-token latency: every gap between consecutive tokens, pooled over requests.
    pub itl_ms: LatencySummary,
    /// End to end: send to last token, per request.
    pub e2e_ms: LatencySummary,
    /// Output tokens of completed requests per second of the measured span.
    pub output_tokens_per_s: f64,
    /// Completed requests per second of the measured span.
    pub requests_per_s: f64,
    /// The measured span: first arrival to last completion, seconds.
    pub span_s: f64,
}

/// Counts from the kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimulationRecord {
    /// Simulated time of the last event, µs.
    pub end_time_us: u64,
    /// Engine steps run, over all instances.
    pub engine_steps: u64,
    /// Kernel rounds.
    pub rounds: u64,
    /// Messages delivered.
    pub messages: u64,
}
