//! The workload section of a scenario: who sends what, when.
//!
//! A workload is a list of clients. A synthetic client describes its traffic with distributions:
//! an arrival process (open loop) or a fixed concurrency (closed loop), prompt and output lengths,
//! optional shared system prompts, multi-turn sessions, an SLO class and a timeout. Every client,
//! whatever its source, is compiled into a stream of [`crate::RequestSpec`]s — the same form a
//! workload file holds — which the client actor plays.

use serde::{Deserialize, Serialize};

use crate::bounds::{MAX_CALLS, MAX_RATE_PER_S, MAX_SIMULATED_S, MAX_TURNS, check_seconds};
use crate::error::{FieldError, number};
use crate::scenario::check_name;

/// All traffic of a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// Total request rate shared by clients that give a `rate_fraction`, requests per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_per_s: Option<f64>,
    /// The clients; each generates its own requests.
    #[serde(default)]
    pub clients: Vec<ClientSpec>,
    /// Clients that replay a workload file instead.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replays: Vec<Replay>,
    /// A client that sends what an inference-perf profile would send.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inference_perf: Option<InferencePerfImport>,
}

/// An inference-perf profile imported as a client, written
/// `{profile: path/to/profile.yaml, emulate: b505c33}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InferencePerfImport {
    /// The client's name (default `inference-perf`).
    #[serde(default = "inference_perf_name")]
    pub name: String,
    /// The profile (inference-perf's config, YAML or JSON), relative to the scenario's folder.
    pub profile: String,
    /// The inference-perf build whose behaviour to reproduce (default the newest modelled).
    #[serde(default)]
    pub emulate: InferencePerfBuild,
    /// How the server's tokenizer re-tokenizes the build's decoded random prompts (default: from
    /// the profile's tokenizer or model name for `b505c33`; exact lengths for `head`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<PromptTokenizer>,
    /// Shorten every stage to at most this many seconds (same rates), to run a long experiment
    /// quickly; absent: the profile's durations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage_duration_cap_s: Option<f64>,
    /// The model its requests name (default: the one model the cluster serves).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

fn inference_perf_name() -> String {
    "inference-perf".to_owned()
}

/// inference-perf builds the import can emulate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum InferencePerfBuild {
    /// The main-branch build between commits `b81afa49` and `ad400507` (pinned `b505c337`) that
    /// produced `reference-data/`: 10 × 10 prompts whatever the profile says, single-turn,
    /// lengths drifting through re-tokenization.
    #[serde(rename = "b505c33")]
    B505c33,
    /// v0.5.0 and later: the profile's group and prompt counts, exact lengths (multi-turn chat is
    /// not modelled yet and is refused).
    #[default]
    #[serde(rename = "head")]
    Head,
}

/// The length drift of random-token prompts through decode and re-tokenization.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PromptTokenizer {
    /// Llama-2's sentencepiece tokenizer: system part ≈ 1.047 tokens per token, question part
    /// ≈ 1.0463, spread 0.27 √tokens.
    Llama2,
    /// Mixtral's (Mistral v0.1): ≈ 1.041 and 1.040, spread 0.26 √tokens.
    Mixtral,
    /// No drift: the configured lengths exactly.
    Exact,
}

/// A client that replays a workload file, written `{name: trace, path: requests.jsonl}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Replay {
    /// The client's name (token ids of its requests are drawn from substreams named by it, so
    /// a file exported from client `chat` replays identically under the name `chat`).
    pub name: String,
    /// The file, relative to the scenario's folder.
    pub path: String,
    /// Its format.
    #[serde(default)]
    pub format: ReplayFormat,
    /// The model its requests name (default: the one model the cluster serves).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// Formats of workload files.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReplayFormat {
    /// One request DAG per line, as `--export-workload` writes.
    #[default]
    Jsonl,
    /// The Azure LLM inference trace CSV (`TIMESTAMP,ContextTokens,GeneratedTokens`): one
    /// single-call request per row.
    AzureCsv,
    /// Mooncake's JSONL trace (`timestamp` in ms, `input_length`, `output_length`, `hash_ids` of
    /// shared 512-token blocks): one single-call request per line.
    Mooncake,
}

impl ReplayFormat {
    /// The name a scenario uses for it.
    pub fn as_str(self) -> &'static str {
        match self {
            ReplayFormat::Jsonl => "jsonl",
            ReplayFormat::AzureCsv => "azure-csv",
            ReplayFormat::Mooncake => "mooncake",
        }
    }
}

/// One client: a synthetic traffic description.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientSpec {
    /// The client's name; its requests are named `<client>-<index>`.
    pub name: String,
    /// How many requests (or sessions, when `session` is set) it sends.
    pub requests: u64,
    /// When it sends them: an open-loop arrival process, or a closed loop.
    pub arrival: Arrival,
    /// Prompt length of each request (after the shared prefix), in tokens.
    pub input_tokens: LengthDist,
    /// Tokens each request generates (the engine stops at exactly this many).
    pub output_tokens: LengthDist,
    /// A system prompt shared by groups of requests, placed before the `input_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_prefix: Option<SharedPrefix>,
    /// Multi-turn sessions: each request is a conversation whose later turns carry the earlier
    /// prompts and outputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<Session>,
    /// The SLO class of its requests, which sets their engine priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo_class: Option<SloClass>,
    /// An explicit engine scheduling priority (lower runs first under the `priority` policy);
    /// not together with `slo_class`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i64>,
    /// Abort a call not answered this many seconds after it was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<f64>,
    /// The `x-llm-d-inference-fairness-id` header its requests carry: their flow within a
    /// priority band under llm-d's flow control (absent: `default-flow`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fairness_id: Option<String>,
    /// The `x-llm-d-slo-ttft-ms` header its requests carry: their TTFT target, which the
    /// `slo-deadline-ordering-policy` of llm-d's flow control orders queued requests by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo_ttft_ms: Option<u64>,
    /// The model its requests name (default: the one model the cluster serves).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

impl ClientSpec {
    /// The most LLM calls it can send: its requests times the most turns a session can have.
    pub fn max_calls(&self) -> u64 {
        let turns = self.session.as_ref().map_or(1, |s| s.turns.max().max(1));
        self.requests.saturating_mul(u64::from(turns))
    }

    /// Refuse a client whose calls would not fit a run, or whose offered load would take
    /// longer than the longest simulated span (`requests / rate`).
    fn check_size(&self, path: &str, total_rate: Option<f64>) -> Result<(), FieldError> {
        if self.max_calls() > MAX_CALLS {
            return Err(FieldError::new(
                format!("{path}.requests"),
                self.requests,
                format!(
                    "{} calls at most (requests × turns); a run holds at most {MAX_CALLS} (each call's record is kept)",
                    self.max_calls()
                ),
            ));
        }
        if let Some(rate) = self.arrival.rate().and_then(|r| r.resolve(total_rate)) {
            let span = self.requests as f64 / rate;
            if span > MAX_SIMULATED_S {
                let field = if self.arrival.rate().is_some_and(|r| r.rate_per_s.is_some()) {
                    "rate_per_s"
                } else {
                    "rate_fraction"
                };
                return Err(FieldError::new(
                    format!("{path}.arrival.{field}"),
                    number(rate),
                    format!(
                        "{} requests at {} per second take about {} s to arrive; at most {MAX_SIMULATED_S:e} s (about 31.7 years) can be simulated",
                        self.requests,
                        number(rate),
                        number(span)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The engine priority of its requests.
    pub fn engine_priority(&self) -> i64 {
        self.priority.or(self.slo_class.map(SloClass::priority)).unwrap_or(0)
    }
}

/// The longest `fairness_id` accepted, bytes.
pub const MAX_FAIRNESS_ID_BYTES: usize = 256;

/// The longest `slo_ttft_ms` accepted: a day; a time-to-first-token target beyond it is not a
/// serving objective.
pub const MAX_SLO_TTFT_MS: u64 = 86_400_000;

/// System prompts shared by groups of requests, written `{groups: 4, tokens: 512}`: each
/// request draws one of `groups` prompts of `tokens` tokens uniformly and puts it before its own
/// `input_tokens`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SharedPrefix {
    /// How many distinct system prompts.
    pub groups: u32,
    /// Tokens in each.
    pub tokens: u32,
}

/// Multi-turn sessions, written `{turns: {dist: uniform, min: 2, max: 6}, think_time_s: {dist:
/// exponential, mean: 5}}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Session {
    /// Turns per session (each turn one LLM call; turn k's prompt is turn k−1's prompt and
    /// output followed by `input_tokens` new tokens).
    pub turns: LengthDist,
    /// The user's pause between an answer and the next turn, seconds.
    pub think_time_s: Duration,
}

/// Service-level classes, mapped to engine priority as llm-d's inference objectives do (lower
/// values are scheduled first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SloClass {
    /// Priority −2.
    Critical,
    /// Priority −1.
    Standard,
    /// Priority 0.
    Sheddable,
    /// Priority 1.
    Batch,
    /// Priority 2.
    Background,
}

impl SloClass {
    /// The engine priority of the class.
    pub fn priority(self) -> i64 {
        match self {
            SloClass::Critical => -2,
            SloClass::Standard => -1,
            SloClass::Sheddable => 0,
            SloClass::Batch => 1,
            SloClass::Background => 2,
        }
    }
}

/// A rate: absolute, or a fraction of the workload's `rate_per_s`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Rate {
    /// Requests per second.
    pub rate_per_s: Option<f64>,
    /// A share of `workload.rate_per_s`.
    pub rate_fraction: Option<f64>,
}

/// Arrival processes, written `{process: poisson, rate_per_s: 20}`,
/// `{process: gamma, rate_per_s: 20, cv: 2}`, `{process: staged, stages: [...]}` or
/// `{process: closed, concurrency: 8}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, tag = "process", rename_all = "kebab-case")]
pub enum Arrival {
    /// Exponential gaps at a mean rate; the first request arrives after the first gap.
    Poisson {
        /// Requests per second.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rate_per_s: Option<f64>,
        /// A share of `workload.rate_per_s`, instead of `rate_per_s`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rate_fraction: Option<f64>,
    },
    /// Gamma-distributed gaps with a coefficient of variation (burstier than Poisson above 1).
    Gamma {
        /// Requests per second.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rate_per_s: Option<f64>,
        /// A share of `workload.rate_per_s`, instead of `rate_per_s`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rate_fraction: Option<f64>,
        /// Standard deviation over mean of the gaps, > 0.
        cv: f64,
    },
    /// Weibull-distributed gaps with a coefficient of variation.
    Weibull {
        /// Requests per second.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rate_per_s: Option<f64>,
        /// A share of `workload.rate_per_s`, instead of `rate_per_s`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rate_fraction: Option<f64>,
        /// Standard deviation over mean of the gaps, in [0.05, 20].
        cv: f64,
    },
    /// Evenly spaced, the first after one gap.
    Constant {
        /// Requests per second.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rate_per_s: Option<f64>,
        /// A share of `workload.rate_per_s`, instead of `rate_per_s`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rate_fraction: Option<f64>,
    },
    /// Piecewise-constant rates: each stage runs its own process for its duration; `requests`
    /// caps the total.
    Staged {
        /// The stages, in order.
        stages: Vec<Stage>,
    },
    /// A closed loop: this many requests outstanding at all times; each answer (after an
    /// optional think time) releases the next request.
    Closed {
        /// Requests outstanding.
        concurrency: u32,
        /// Pause after an answer before the next request, seconds (default none).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        think_time_s: Option<Duration>,
    },
}

/// One stage of a staged arrival process.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stage {
    /// Requests per second during the stage.
    pub rate_per_s: f64,
    /// How long the stage lasts, seconds.
    pub duration_s: f64,
    /// The gaps within the stage: `poisson` (default) or `constant`.
    #[serde(default)]
    pub gaps: StageGaps,
}

/// How arrivals are spaced within a stage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StageGaps {
    /// Exponential gaps.
    #[default]
    Poisson,
    /// Even gaps.
    Constant,
}

/// Distributions of a token count, written `{dist: constant, value: 256}`,
/// `{dist: uniform, min: 128, max: 2048}`, `{dist: normal, mean: 500, std: 100, min: 1, max: 4000}`,
/// `{dist: lognormal, mean: 500, std: 400, min: 1, max: 8000}`,
/// `{dist: exponential, mean: 300, min: 1, max: 4000}` or
/// `{dist: empirical, values: [128, 512, 2048], weights: [0.5, 0.3, 0.2]}`. Continuous draws are
/// rounded to the nearest integer and clamped to `[min, max]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, tag = "dist", rename_all = "kebab-case")]
pub enum LengthDist {
    /// Always this many.
    Constant {
        /// The count.
        value: u32,
    },
    /// Uniform on the integers `min..=max`.
    Uniform {
        /// Smallest value.
        min: u32,
        /// Largest value.
        max: u32,
    },
    /// Normal, clamped.
    Normal {
        /// Mean before clamping.
        mean: f64,
        /// Standard deviation before clamping.
        std: f64,
        /// Smallest value.
        min: u32,
        /// Largest value.
        max: u32,
    },
    /// Log-normal with the given mean and standard deviation of the length itself, clamped.
    Lognormal {
        /// Mean before clamping.
        mean: f64,
        /// Standard deviation before clamping.
        std: f64,
        /// Smallest value.
        min: u32,
        /// Largest value.
        max: u32,
    },
    /// Exponential with the given mean, clamped.
    Exponential {
        /// Mean before clamping.
        mean: f64,
        /// Smallest value.
        min: u32,
        /// Largest value.
        max: u32,
    },
    /// A table of values drawn with the given weights.
    Empirical {
        /// The values.
        values: Vec<u32>,
        /// Their weights (any positive scale), one per value.
        weights: Vec<f64>,
    },
}

/// Distributions of a duration in seconds, written `{dist: constant, value: 2}`,
/// `{dist: uniform, min: 1, max: 5}` or `{dist: exponential, mean: 3}`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, tag = "dist", rename_all = "kebab-case")]
pub enum Duration {
    /// Always this long.
    Constant {
        /// Seconds.
        value: f64,
    },
    /// Uniform between the bounds.
    Uniform {
        /// Shortest, seconds.
        min: f64,
        /// Longest, seconds.
        max: f64,
    },
    /// Exponential.
    Exponential {
        /// Mean, seconds.
        mean: f64,
    },
}

impl LengthDist {
    /// The largest value it can take.
    pub fn max(&self) -> u32 {
        match self {
            LengthDist::Constant { value } => *value,
            LengthDist::Uniform { max, .. }
            | LengthDist::Normal { max, .. }
            | LengthDist::Lognormal { max, .. }
            | LengthDist::Exponential { max, .. } => *max,
            LengthDist::Empirical { values, .. } => values.iter().copied().max().unwrap_or(0),
        }
    }

    /// Refuse impossible values; `unit` names what is counted (`token`, `turn`).
    fn validate(&self, path: &str, unit: &str) -> Result<(), FieldError> {
        let at = |field: &str| format!("{path}.{field}");
        let at_least_one = format!("must be at least 1 {unit}");
        let bounds = |min: u32, max: u32| {
            if min == 0 {
                Err(FieldError::new(at("min"), 0, &at_least_one))
            } else if min > max {
                Err(FieldError::new(at("max"), max, format!("must not be below min ({min})")))
            } else {
                Ok(())
            }
        };
        let positive = |field: &str, value: f64| {
            if value.is_finite() && value > 0.0 {
                Ok(())
            } else {
                Err(FieldError::new(at(field), value, "must be a positive number"))
            }
        };
        match self {
            LengthDist::Constant { value: 0 } => Err(FieldError::new(at("value"), 0, &at_least_one)),
            LengthDist::Constant { .. } => Ok(()),
            LengthDist::Uniform { min, max } => bounds(*min, *max),
            LengthDist::Normal { mean, std, min, max } | LengthDist::Lognormal { mean, std, min, max } => {
                positive("mean", *mean)?;
                positive("std", *std)?;
                bounds(*min, *max)
            }
            LengthDist::Exponential { mean, min, max } => {
                positive("mean", *mean)?;
                bounds(*min, *max)
            }
            LengthDist::Empirical { values, weights } => {
                if values.is_empty() {
                    return Err(FieldError::new(at("values"), "[]", "needs at least one value"));
                }
                if weights.len() != values.len() {
                    return Err(FieldError::new(
                        at("weights"),
                        weights.len(),
                        format!("needs one weight per value ({} values)", values.len()),
                    ));
                }
                if let Some(i) = values.iter().position(|&v| v == 0) {
                    return Err(FieldError::new(format!("{path}.values[{i}]"), 0, &at_least_one));
                }
                if let Some(i) = weights.iter().position(|w| !(w.is_finite() && *w >= 0.0)) {
                    return Err(FieldError::new(
                        format!("{path}.weights[{i}]"),
                        weights[i],
                        "must be a finite number ≥ 0",
                    ));
                }
                if weights.iter().sum::<f64>() <= 0.0 {
                    return Err(FieldError::new(
                        at("weights"),
                        "all zero",
                        "at least one weight must be positive",
                    ));
                }
                Ok(())
            }
        }
    }
}

impl Duration {
    fn validate(&self, path: &str) -> Result<(), FieldError> {
        let non_negative = |field: &str, value: f64| {
            if value.is_finite() && value >= 0.0 {
                check_seconds(&format!("{path}.{field}"), value)
            } else {
                Err(FieldError::new(format!("{path}.{field}"), value, "must be a number of seconds ≥ 0"))
            }
        };
        match *self {
            Duration::Constant { value } => non_negative("value", value),
            Duration::Uniform { min, max } => {
                non_negative("min", min)?;
                non_negative("max", max)?;
                if min > max {
                    return Err(FieldError::new(
                        format!("{path}.max"),
                        max,
                        format!("must not be below min ({min})"),
                    ));
                }
                Ok(())
            }
            Duration::Exponential { mean } => non_negative("mean", mean),
        }
    }
}

impl Rate {
    /// The rate in requests per second, given the workload's total rate.
    pub fn resolve(&self, total: Option<f64>) -> Option<f64> {
        match (self.rate_per_s, self.rate_fraction) {
            (Some(rate), None) => Some(rate),
            (None, Some(fraction)) => total.map(|t| t * fraction),
            _ => None,
        }
    }

    fn validate(&self, path: &str, total: Option<f64>) -> Result<(), FieldError> {
        match (self.rate_per_s, self.rate_fraction) {
            (Some(rate), None) if rate.is_finite() && rate > MAX_RATE_PER_S => Err(FieldError::new(
                format!("{path}.rate_per_s"),
                number(rate),
                format!(
                    "must be at most {MAX_RATE_PER_S:e} requests per second (one per microsecond, the clock's resolution)"
                ),
            )),
            (Some(rate), None) if rate.is_finite() && rate > 0.0 => Ok(()),
            (Some(rate), None) => Err(FieldError::new(
                format!("{path}.rate_per_s"),
                number(rate),
                "must be a positive number of requests per second",
            )),
            (None, Some(fraction)) if !(fraction.is_finite() && fraction > 0.0 && fraction <= 1.0) => {
                Err(FieldError::new(format!("{path}.rate_fraction"), fraction, "must be in (0, 1]"))
            }
            (None, Some(fraction)) if total.is_none() => Err(FieldError::new(
                format!("{path}.rate_fraction"),
                fraction,
                "a rate fraction needs workload.rate_per_s",
            )),
            (None, Some(_)) => Ok(()),
            (Some(_), Some(_)) => Err(FieldError::at(
                format!("{path}.rate_fraction"),
                "give rate_per_s or rate_fraction, not both",
            )),
            (None, None) => {
                Err(FieldError::at(format!("{path}.rate_per_s"), "missing: give rate_per_s or rate_fraction"))
            }
        }
    }
}

impl Arrival {
    /// The process's rate as written (none for staged and closed processes).
    pub fn rate(&self) -> Option<Rate> {
        match *self {
            Arrival::Poisson { rate_per_s, rate_fraction }
            | Arrival::Gamma { rate_per_s, rate_fraction, .. }
            | Arrival::Weibull { rate_per_s, rate_fraction, .. }
            | Arrival::Constant { rate_per_s, rate_fraction } => Some(Rate { rate_per_s, rate_fraction }),
            Arrival::Staged { .. } | Arrival::Closed { .. } => None,
        }
    }

    fn validate(&self, path: &str, total: Option<f64>) -> Result<(), FieldError> {
        let cv_in = |cv: f64, low: f64, high: f64| {
            if cv.is_finite() && cv >= low && cv <= high {
                Ok(())
            } else {
                Err(FieldError::new(format!("{path}.cv"), cv, format!("must be in [{low}, {high}]")))
            }
        };
        if let Some(rate) = self.rate() {
            rate.validate(path, total)?;
        }
        match self {
            Arrival::Poisson { .. } | Arrival::Constant { .. } => Ok(()),
            Arrival::Gamma { cv, .. } => cv_in(*cv, 0.01, 100.0),
            Arrival::Weibull { cv, .. } => cv_in(*cv, 0.05, 20.0),
            Arrival::Staged { stages } => {
                if stages.is_empty() {
                    return Err(FieldError::new(format!("{path}.stages"), "[]", "needs at least one stage"));
                }
                for (i, stage) in stages.iter().enumerate() {
                    let at = format!("{path}.stages[{i}]");
                    if !(stage.rate_per_s.is_finite()
                        && stage.rate_per_s >= 0.0
                        && stage.rate_per_s <= MAX_RATE_PER_S)
                    {
                        return Err(FieldError::new(
                            format!("{at}.rate_per_s"),
                            number(stage.rate_per_s),
                            format!("must be a number of requests per second in [0, {MAX_RATE_PER_S:e}]"),
                        ));
                    }
                    if !(stage.duration_s.is_finite() && stage.duration_s > 0.0) {
                        return Err(FieldError::new(
                            format!("{at}.duration_s"),
                            number(stage.duration_s),
                            "must be a positive number of seconds",
                        ));
                    }
                    check_seconds(&format!("{at}.duration_s"), stage.duration_s)?;
                }
                let total: f64 = stages.iter().map(|s| s.duration_s).sum();
                if total > MAX_SIMULATED_S {
                    return Err(FieldError::new(
                        format!("{path}.stages"),
                        format!("{} s in all", number(total)),
                        format!(
                            "the stages must last at most {MAX_SIMULATED_S:e} s together, the longest simulated span"
                        ),
                    ));
                }
                Ok(())
            }
            Arrival::Closed { concurrency, think_time_s } => {
                if *concurrency == 0 {
                    return Err(FieldError::new(format!("{path}.concurrency"), 0, "must be at least 1"));
                }
                think_time_s.map_or(Ok(()), |d| d.validate(&format!("{path}.think_time_s")))
            }
        }
    }
}

impl Workload {
    /// Refuse empty or duplicate client names, zero request counts, bad rates, impossible
    /// lengths and durations, and contradictory settings.
    pub fn validate(&self) -> Result<(), FieldError> {
        if self.clients.is_empty() && self.replays.is_empty() && self.inference_perf.is_none() {
            return Err(FieldError::new(
                "workload.clients",
                "[]",
                "at least one client, replay or inference_perf import is needed",
            ));
        }
        if let Some(import) = &self.inference_perf {
            check_name(&import.name, "workload.inference_perf.name")?;
            if let Some(cap) = import.stage_duration_cap_s {
                if !(cap.is_finite() && cap > 0.0) {
                    return Err(FieldError::new(
                        "workload.inference_perf.stage_duration_cap_s",
                        number(cap),
                        "must be a positive number of seconds",
                    ));
                }
                check_seconds("workload.inference_perf.stage_duration_cap_s", cap)?;
            }
            if self.clients.iter().any(|c| c.name == import.name)
                || self.replays.iter().any(|r| r.name == import.name)
            {
                return Err(FieldError::new(
                    "workload.inference_perf.name",
                    &import.name,
                    "another client has this name",
                ));
            }
        }
        for (i, replay) in self.replays.iter().enumerate() {
            let path = format!("workload.replays[{i}]");
            check_name(&replay.name, &format!("{path}.name"))?;
            let clash = self.clients.iter().any(|c| c.name == replay.name)
                || self.replays[..i].iter().any(|r| r.name == replay.name);
            if clash {
                return Err(FieldError::new(
                    format!("{path}.name"),
                    &replay.name,
                    "another client has this name",
                ));
            }
        }
        if let Some(rate) = self.rate_per_s
            && !(rate.is_finite() && rate > 0.0 && rate <= MAX_RATE_PER_S)
        {
            return Err(FieldError::new(
                "workload.rate_per_s",
                number(rate),
                format!("must be a positive number of requests per second, at most {MAX_RATE_PER_S:e}"),
            ));
        }
        let mut calls: u64 = 0;
        for (i, client) in self.clients.iter().enumerate() {
            let path = format!("workload.clients[{i}]");
            check_name(&client.name, &format!("{path}.name"))?;
            if self.clients[..i].iter().any(|c| c.name == client.name) {
                return Err(FieldError::new(
                    format!("{path}.name"),
                    &client.name,
                    "another client has this name",
                ));
            }
            if client.requests == 0 {
                return Err(FieldError::new(format!("{path}.requests"), 0, "must be at least 1"));
            }
            client.arrival.validate(&format!("{path}.arrival"), self.rate_per_s)?;
            client.input_tokens.validate(&format!("{path}.input_tokens"), "token")?;
            client.output_tokens.validate(&format!("{path}.output_tokens"), "token")?;
            if let Some(prefix) = client.shared_prefix {
                if prefix.groups == 0 {
                    return Err(FieldError::new(
                        format!("{path}.shared_prefix.groups"),
                        0,
                        "must be at least 1",
                    ));
                }
                if prefix.tokens == 0 {
                    return Err(FieldError::new(
                        format!("{path}.shared_prefix.tokens"),
                        0,
                        "must be at least 1 token",
                    ));
                }
            }
            if let Some(session) = &client.session {
                session.turns.validate(&format!("{path}.session.turns"), "turn")?;
                if session.turns.max() > MAX_TURNS {
                    return Err(FieldError::new(
                        format!("{path}.session.turns"),
                        format!("up to {}", session.turns.max()),
                        format!(
                            "a session has at most {MAX_TURNS} turns (a call's key holds its node in 16 bits)"
                        ),
                    ));
                }
                session.think_time_s.validate(&format!("{path}.session.think_time_s"))?;
            }
            client.check_size(&path, self.rate_per_s)?;
            calls = calls.saturating_add(client.max_calls());
            if calls > MAX_CALLS {
                return Err(FieldError::new(
                    format!("{path}.requests"),
                    client.requests,
                    format!(
                        "the clients up to this one send up to {calls} calls; a run holds at most {MAX_CALLS} (each call's record is kept)"
                    ),
                ));
            }
            if client.priority.is_some() && client.slo_class.is_some() {
                return Err(FieldError::at(
                    format!("{path}.priority"),
                    "give priority or slo_class, not both (the class sets the priority)",
                ));
            }
            if let Some(timeout) = client.timeout_s {
                if !(timeout.is_finite() && timeout > 0.0) {
                    return Err(FieldError::new(
                        format!("{path}.timeout_s"),
                        number(timeout),
                        "must be a positive number of seconds",
                    ));
                }
                check_seconds(&format!("{path}.timeout_s"), timeout)?;
            }
            if let Some(id) = &client.fairness_id
                && (id.is_empty() || id.len() > MAX_FAIRNESS_ID_BYTES || id.chars().any(char::is_control))
            {
                return Err(FieldError::new(
                    format!("{path}.fairness_id"),
                    format!("{id:?}"),
                    format!(
                        "a header value of 1 to {MAX_FAIRNESS_ID_BYTES} bytes without control characters"
                    ),
                ));
            }
            if let Some(ms) = client.slo_ttft_ms
                && !(1..=MAX_SLO_TTFT_MS).contains(&ms)
            {
                return Err(FieldError::new(
                    format!("{path}.slo_ttft_ms"),
                    ms,
                    format!("a TTFT target of 1 to {MAX_SLO_TTFT_MS} ms (a day)"),
                ));
            }
        }
        Ok(())
    }
}
