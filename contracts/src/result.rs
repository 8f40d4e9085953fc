//! The Result document, `result.json` (schema `blis-actor/result/v1`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::engine::EngineIdentity;
use crate::frame::FrameRecord;

/// The schema identifier written in every Result.
pub const RESULT_SCHEMA: &str = "blis-actor/result/v1";

/// A run's result: replication 0's own figures, estimates over all replications, each
/// replication's summary and mergeable histograms, and the frame that produced them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunResult {
    /// Always [`RESULT_SCHEMA`].
    pub schema: String,
    /// The blis-actor release that produced it.
    pub blis_actor_version: String,
    /// Every upstream release this build models (`stack.json`), by name.
    pub stack: BTreeMap<String, String>,
    /// The run seed.
    pub seed: u64,
    /// Upstream engines modelled, one entry per distinct engine and release.
    pub engines: Vec<EngineIdentity>,
    /// The scenario as given and as resolved.
    pub scenario: ScenarioRecord,
    /// Content hashes of the cost model's data and the workload files.
    pub data: DataRecord,
    /// The build that ran, recorded when it was compiled (absent when run as a library); outside
    /// the comparable part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<BuildRecord>,
    /// How much of the priced time each rank of coefficient priced.
    pub pricing: PricingRecord,
    /// The experimental frame.
    pub frame: FrameRecord,
    /// Whether the model, chip, layout and load lie where the cost model's data is trusted.
    pub validity: ValidityRecord,
    /// How every call of replication 0 ended.
    pub fates: FateCounts,
    /// Replication 0's dropped calls by reason (absent when none was dropped).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub dropped_by_reason: BTreeMap<String, u64>,
    /// Replication 0's figures over its measured window; absent when the acceptance conditions
    /// failed (see `withheld`).
    pub metrics: Option<Metrics>,
    /// Per metric statistic (`ttft_ms.p99`, `output_tokens_per_s`, …): the estimate with its
    /// interval over replications (over batch means for a steady-state run); empty when
    /// figures are withheld.
    pub estimates: BTreeMap<String, EstimateRecord>,
    /// What was withheld and why (a failed acceptance condition, an overload).
    pub withheld: Vec<String>,
    /// How far each figure of replication 0 moves across the calibrated coefficients'
    /// uncertainty samples (asked for with `--coefficient-spread`; empty otherwise): the same
    /// seed run once per sample, separately from the workload-randomness intervals.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub coefficient_spread: BTreeMap<String, SpreadRecord>,
    /// Each replication's seed, fates, figures, histograms and overload assessment.
    pub replications: Vec<ReplicationRecord>,
    /// Replication 0's engine instances' own counters at the end.
    pub instances: Vec<InstanceRecord>,
    /// What replication 0's simulation did.
    pub simulation: SimulationRecord,
}

/// One estimate with its confidence interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct EstimateRecord {
    /// The point estimate (mean over replications or batches).
    pub mean: f64,
    /// Half the interval's width (absent with one value).
    pub half_width: Option<f64>,
    /// Values it rests on.
    pub n: u64,
    /// The interval's confidence level.
    pub level: f64,
}

/// A figure's range across coefficient samples.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpreadRecord {
    /// With the fitted coefficients.
    pub nominal: f64,
    /// Smallest over the samples.
    pub min: f64,
    /// Largest over the samples.
    pub max: f64,
    /// Samples run.
    pub samples: u32,
}

/// One replication's summary.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReplicationRecord {
    /// Its seed.
    pub seed: u64,
    /// How its calls ended.
    pub fates: FateCounts,
    /// Its figures (latency summaries absent when it was overloaded).
    pub metrics: Metrics,
    /// Calls sent before this time were discarded as warm-up, µs.
    pub warm_up_before_us: u64,
    /// Whether its backlog kept growing, and the evidence.
    pub overload: OverloadRecord,
    /// Mergeable latency histograms of its measured window, µs: `ttft`, `tpot`, `itl`, `e2e`
    /// (the form is in `docs/RESULT.md`).
    pub histograms: serde_json::Value,
    /// Simulated time of its last event, µs.
    pub end_time_us: u64,
    /// Engine steps it ran.
    pub engine_steps: u64,
}

/// The overload assessment of one replication.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct OverloadRecord {
    /// Whether the run is overloaded by the rule of `docs/METRICS.md`: a growing backlog, at
    /// least half the calls abandoned, or stopped by the stop rule.
    pub overloaded: bool,
    /// Least-squares growth of the backlog (calls sent and waiting for their first token) over
    /// the second half of the offered load, calls per second (absent when the run was too short
    /// to judge).
    pub backlog_growth_per_s: Option<f64>,
    /// The backlog at the end of the offered load, calls.
    pub final_backlog: f64,
    /// Of the calls sent in the second half of the offered load and answered or abandoned, the
    /// share that timed out (absent when none did).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abandoned_share: Option<f64>,
    /// When the stop rule stopped the run, µs of simulated time (absent: it was not stopped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_at_us: Option<u64>,
}

/// Where the run lies against the data the cost model trusts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ValidityRecord {
    /// Whether the run lies where the calibrated coefficients were fitted (models, TP degrees)
    /// and at most 5% of its step time comes from coefficients no run fitted.
    pub in_domain: bool,
    /// Why not, one reason per line.
    pub reasons: Vec<String>,
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
    /// Time average of the KV-cache usage over the run, 0–1.
    pub kv_usage_mean: f64,
    /// Highest KV-cache usage seen, 0–1.
    pub kv_usage_peak: f64,
    /// The CPU tier, when the instance offloads KV blocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offload: Option<OffloadRecord>,
    /// Prefill/decode disaggregation, when the instance runs NixlConnector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disaggregation: Option<DisaggregationRecord>,
    /// The SGLang scheduler's counters, when the instance is SGLang.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sglang: Option<SglangRecord>,
}

/// What an SGLang instance's scheduler did over a run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SglangRecord {
    /// Prefill (extend) batches run.
    pub extend_batches: u64,
    /// Decode batches run.
    pub decode_batches: u64,
    /// Mixed batches run (`enable_mixed_chunk`).
    pub mixed_batches: u64,
    /// Requests retracted when a decode step did not fit (`sglang:num_retracted_requests_total`).
    pub retractions: u64,
    /// Requests aborted because the last running one did not fit a decode step.
    pub out_of_memory_aborts: u64,
}

/// What a NixlConnector instance did for prefill/decode disaggregation over a run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DisaggregationRecord {
    /// Prefill legs it answered (as a prefill instance), with their transfer parameters or a
    /// refusal.
    pub prefill_legs: u64,
    /// Calls its sidecar ran with a prefill leg elsewhere and then decoded here.
    pub decoded: u64,
    /// KV reads it completed from prefill instances (as a decode instance), and their bytes.
    pub reads: u64,
    /// Bytes of those reads.
    pub bytes_read: u64,
    /// Holds of its blocks released by `VLLM_NIXL_ABORT_REQUEST_TIMEOUT` (480 s) because no
    /// decode instance read them (as a prefill instance).
    pub holds_expired: u64,
    /// Disaggregated calls aborted here (their client gave up) before their read started,
    /// during it, and after it.
    pub aborts_by_phase: [u64; 3],
}

/// What an instance's CPU KV tier did over a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OffloadRecord {
    /// CPU blocks the tier holds at most.
    pub cpu_blocks: u64,
    /// Prompt tokens looked up by the connector at admission, requests never preempted
    /// (`vllm:external_prefix_cache_queries`).
    pub external_prefix_cache_queries: u64,
    /// Those loaded from the CPU tier (`vllm:external_prefix_cache_hits`): hits on medium CPU.
    pub external_prefix_cache_hits: u64,
    /// Blocks stored to the CPU tier (CPU `BlockStored`).
    pub cpu_blocks_stored: u64,
    /// Blocks evicted from it (CPU `BlockRemoved`).
    pub cpu_blocks_evicted: u64,
    /// Copy jobs GPU → CPU, and their bytes.
    pub store_jobs: u64,
    /// Bytes stored.
    pub store_bytes: u64,
    /// Copy jobs CPU → GPU, and their bytes.
    pub load_jobs: u64,
    /// Bytes loaded.
    pub load_bytes: u64,
    /// Stores refused because the tier was full of blocks it could not evict.
    pub refused_stores: u64,
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
    /// Every workload file the clients read (replays and profiles), by the path the scenario gives.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workload_files: Vec<FileHash>,
}

/// Where the running binary came from, as recorded when it was built: two builds of one commit
/// with one profile and compiler write the same record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildRecord {
    /// The commit it was built from, `-dirty` when tracked files differed (absent when the
    /// build could not tell, e.g. without git).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The Cargo profile (`release`, `debug`).
    pub profile: String,
    /// The compiler's `--version` line.
    pub rustc: String,
    /// Versions of the crates whose behaviour reaches the outputs (math, random streams, seeds,
    /// parser, JSON writer), by name.
    pub crates: BTreeMap<String, String>,
}

/// A file and its content hash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileHash {
    /// The path as given.
    pub path: String,
    /// SHA-256 of its bytes, hex.
    pub sha256: String,
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

/// One replication's figures, as `contracts::METRICS` defines them. Latencies cover completed
/// calls only; calls unfinished at a horizon are counted in the fates and excluded here. The
/// latency summaries are absent when the run was overloaded (their values would only measure
/// how long the run lasted).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// Time to first token.
    pub ttft_ms: Option<LatencySummary>,
    /// Time per output token.
    pub tpot_ms: Option<LatencySummary>,
    /// Inter-token latency.
    pub itl_ms: Option<LatencySummary>,
    /// End to end, per call.
    pub e2e_ms: Option<LatencySummary>,
    /// End to end over output tokens, per call.
    pub normalized_e2e_ms: Option<LatencySummary>,
    /// End to end, per request (a DAG's whole time).
    pub request_e2e_ms: Option<LatencySummary>,
    /// First send to last completion, seconds.
    pub makespan_s: f64,
    /// Output tokens of completed calls per second of the measured span.
    pub output_tokens_per_s: f64,
    /// Completed calls per second of the measured span.
    pub requests_per_s: f64,
    /// Completed calls meeting the SLOs per second of the measured span (absent without SLOs).
    pub goodput_requests_per_s: Option<f64>,
    /// Prefix-cache hits over lookups (absent without lookups).
    pub prefix_cache_hit_rate: Option<f64>,
    /// Preemptions over all instances.
    pub preemptions: u64,
    /// Time-averaged KV-cache usage, averaged over instances.
    pub kv_utilisation: f64,
    /// The measured span: first send to last completion in the window, seconds.
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
