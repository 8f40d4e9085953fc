//! The metric registry: one definition per metric — formula, statistic, population, window,
//! unit — shared by the run summary, the Result and `docs/METRICS.md`.

use serde::Serialize;

/// One metric's definition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct MetricDefinition {
    /// The key in `metrics` and `estimates` of the Result.
    pub id: &'static str,
    /// What it is called.
    pub name: &'static str,
    /// How one value is computed.
    pub formula: &'static str,
    /// What is reported of the values.
    pub statistic: &'static str,
    /// Which calls or requests contribute.
    pub population: &'static str,
    /// Which part of the run.
    pub window: &'static str,
    /// Unit of the reported values.
    pub unit: &'static str,
    /// Which direction is better, for comparisons.
    pub better: Better,
}

/// Which way a metric improves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    /// Lower values are better (latencies, preemptions).
    Lower,
    /// Higher values are better (throughput, cache hits).
    Higher,
    /// Neither: the metric describes the run (how full the KV cache was) and a comparison says
    /// only higher, lower or not distinguished.
    Neither,
}

const LATENCY: &str = "mean (exact), p50, p90, p99 (nearest rank: pX is the smallest value with at least X% of the values at or below it; read from the mergeable histogram, so never below it and less than 1/1024 of it above, exact below 2.048 ms, fractional µs rounded first)";
const MEASURED: &str =
    "the measured window: from the end of the warm-up (none for terminating runs) to the end of the run";

/// Every metric, in the order the Result and the summary list them.
pub const METRICS: &[MetricDefinition] = &[
    MetricDefinition {
        id: "ttft_ms",
        name: "time to first token",
        formula: "first token at the client − send",
        statistic: LATENCY,
        population: "completed calls",
        window: MEASURED,
        unit: "ms",
        better: Better::Lower,
    },
    MetricDefinition {
        id: "tpot_ms",
        name: "time per output token",
        formula: "(E2E − TTFT) / (output tokens − 1)",
        statistic: LATENCY,
        population: "completed calls with at least 2 output tokens",
        window: MEASURED,
        unit: "ms",
        better: Better::Lower,
    },
    MetricDefinition {
        id: "itl_ms",
        name: "inter-token latency",
        formula: "time between consecutive tokens at the client",
        statistic: LATENCY,
        population: "every gap of every completed call, pooled",
        window: MEASURED,
        unit: "ms",
        better: Better::Lower,
    },
    MetricDefinition {
        id: "e2e_ms",
        name: "end-to-end latency",
        formula: "last token at the client − send",
        statistic: LATENCY,
        population: "completed calls",
        window: MEASURED,
        unit: "ms",
        better: Better::Lower,
    },
    MetricDefinition {
        id: "normalized_e2e_ms",
        name: "normalized end-to-end latency",
        formula: "E2E / output tokens (inference-perf's normalized_time_per_output_token)",
        statistic: LATENCY,
        population: "completed calls",
        window: MEASURED,
        unit: "ms per token",
        better: Better::Lower,
    },
    MetricDefinition {
        id: "request_e2e_ms",
        name: "request end-to-end latency",
        formula: "end of the request's last node − the request's arrival (a DAG's whole time)",
        statistic: LATENCY,
        population: "requests all of whose nodes completed",
        window: MEASURED,
        unit: "ms",
        better: Better::Lower,
    },
    MetricDefinition {
        id: "makespan_s",
        name: "makespan",
        formula: "last completion − first send",
        statistic: "the value",
        population: "completed calls",
        window: "the whole run",
        unit: "s",
        better: Better::Lower,
    },
    MetricDefinition {
        id: "output_tokens_per_s",
        name: "output throughput",
        formula: "output tokens of completed calls / the measured span (first send → last completion in the window)",
        statistic: "the value",
        population: "completed calls",
        window: MEASURED,
        unit: "tokens/s",
        better: Better::Higher,
    },
    MetricDefinition {
        id: "requests_per_s",
        name: "call throughput (completed LLM calls, not requests: a session or DAG request has several)",
        formula: "completed calls / the measured span",
        statistic: "the value",
        population: "completed calls",
        window: MEASURED,
        unit: "calls/s",
        better: Better::Higher,
    },
    MetricDefinition {
        id: "goodput_requests_per_s",
        name: "goodput",
        formula: "completed calls meeting every SLO of the frame (TTFT and TPOT thresholds) / the measured span",
        statistic: "the value (absent without SLOs)",
        population: "completed calls",
        window: MEASURED,
        unit: "calls/s",
        better: Better::Higher,
    },
    MetricDefinition {
        id: "prefix_cache_hit_rate",
        name: "prefix-cache hit rate",
        formula: "Σ vllm:prefix_cache_hits / Σ vllm:prefix_cache_queries over instances (prompt tokens, one lookup per admission attempt)",
        statistic: "the value (absent without lookups)",
        population: "admission attempts of calls never preempted",
        window: "the whole run",
        unit: "fraction",
        better: Better::Higher,
    },
    MetricDefinition {
        id: "preemptions",
        name: "preemptions",
        formula: "Σ vllm:num_preemptions over instances",
        statistic: "the count",
        population: "all calls",
        window: "the whole run",
        unit: "count",
        better: Better::Lower,
    },
    MetricDefinition {
        id: "kv_utilisation",
        name: "KV-cache utilisation",
        formula: "time average of vllm:kv_cache_usage_perc (1 − free/(N − 1)) per instance, averaged over instances",
        statistic: "the value",
        population: "engine instances",
        window: "the whole run",
        unit: "fraction",
        better: Better::Neither,
    },
];

/// The definition of `id`.
pub fn metric(id: &str) -> Option<&'static MetricDefinition> {
    METRICS.iter().find(|m| m.id == id)
}
