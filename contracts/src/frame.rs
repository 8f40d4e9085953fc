//! The experimental frame: how a scenario is turned into figures — terminating or steady-state,
//! replications, warm-up, service-level objectives, acceptance conditions — as the scenario asks
//! for it (`frame:`) and as the Result records it.

use serde::{Deserialize, Serialize};

use crate::bounds::{MAX_SIMULATED_S, check_replications, check_seconds};
use crate::error::{FieldError, number};
use crate::metric::MetricDefinition;

/// The `frame:` section of a scenario (all optional).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FrameSpec {
    /// Terminating (the default: every request runs to its end, estimates over replications)
    /// or steady state (one long run cut at the horizon, a warm-up discarded, batch means).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<RunKind>,
    /// Independent replications (default 5 for terminating runs, 1 for steady state).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replications: Option<u32>,
    /// The warm-up to discard (default none for terminating runs, MSER-5 for steady state).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm_up: Option<WarmUp>,
    /// Service-level objectives a call must meet to count towards goodput.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo: Option<Slo>,
    /// Conditions a run must meet for its figures to be reported.
    #[serde(default)]
    pub acceptance: Acceptance,
}

/// Terminating or steady-state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunKind {
    /// The run ends when its requests end (or at the horizon); estimates come from independent
    /// replications.
    Terminating,
    /// One long run; a warm-up is discarded and intervals come from batch means.
    SteadyState,
}

/// How the warm-up is chosen.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, tag = "method", rename_all = "kebab-case")]
pub enum WarmUp {
    /// Nothing is discarded.
    None,
    /// A fixed time from the start is discarded.
    Fixed {
        /// Seconds of simulated time.
        seconds: f64,
    },
    /// MSER-5 (White 1997) on the calls' TTFT in send order: the truncation minimising the
    /// marginal standard error of batch means of 5.
    Mser5,
}

/// Service-level objectives.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Slo {
    /// Largest acceptable time to first token, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    /// Largest acceptable time per output token, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot_ms: Option<f64>,
}

/// Conditions for reporting figures.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Acceptance {
    /// Smallest share of calls that must complete (default 0: any).
    #[serde(default)]
    pub min_completed_fraction: f64,
    /// Whether an overloaded run (a backlog that keeps growing) may still report latencies
    /// (default false: its latency figures are suppressed).
    #[serde(default)]
    pub allow_overload: bool,
}

impl Default for Acceptance {
    fn default() -> Acceptance {
        Acceptance { min_completed_fraction: 0.0, allow_overload: false }
    }
}

impl FrameSpec {
    /// The run kind, terminating unless asked.
    pub fn run_kind(&self) -> RunKind {
        self.kind.unwrap_or(RunKind::Terminating)
    }

    /// The warm-up, by default none for terminating runs and MSER-5 for steady state.
    pub fn warm_up(&self) -> WarmUp {
        self.warm_up.unwrap_or(match self.run_kind() {
            RunKind::Terminating => WarmUp::None,
            RunKind::SteadyState => WarmUp::Mser5,
        })
    }

    /// The number of replications, by default 5 for terminating runs and 1 for steady state.
    pub fn replications(&self) -> u32 {
        self.replications.unwrap_or(match self.run_kind() {
            RunKind::Terminating => 5,
            RunKind::SteadyState => 1,
        })
    }

    /// Refuse impossible values; `horizon_s` is the scenario's.
    pub fn validate(&self, horizon_s: Option<f64>) -> Result<(), FieldError> {
        if let Some(replications) = self.replications {
            check_replications("frame.replications", replications)?;
        }
        if self.run_kind() == RunKind::SteadyState && horizon_s.is_none() {
            return Err(FieldError::at("frame.kind", "a steady-state run needs a horizon_s to stop at"));
        }
        if let Some(WarmUp::Fixed { seconds }) = self.warm_up {
            if !(seconds.is_finite() && seconds >= 0.0) {
                return Err(FieldError::new(
                    "frame.warm_up.seconds",
                    number(seconds),
                    "must be a number of seconds ≥ 0",
                ));
            }
            check_seconds("frame.warm_up.seconds", seconds)?;
        }
        if let Some(slo) = self.slo {
            for (field, value) in [("ttft_ms", slo.ttft_ms), ("tpot_ms", slo.tpot_ms)] {
                if let Some(v) = value
                    && !(v.is_finite() && v > 0.0 && v <= MAX_SIMULATED_S * 1e3)
                {
                    return Err(FieldError::new(
                        format!("frame.slo.{field}"),
                        number(v),
                        format!(
                            "must be a positive number of ms, at most {:e} (the longest simulated span)",
                            MAX_SIMULATED_S * 1e3
                        ),
                    ));
                }
            }
        }
        let fraction = self.acceptance.min_completed_fraction;
        if !(0.0..=1.0).contains(&fraction) {
            return Err(FieldError::new(
                "frame.acceptance.min_completed_fraction",
                fraction,
                "must be in [0, 1]",
            ));
        }
        Ok(())
    }
}

/// The frame as a Result records it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FrameRecord {
    /// Terminating or steady state.
    pub kind: RunKind,
    /// The generator: each client's name, source and stop rule.
    pub clients: Vec<ClientFrame>,
    /// The scenario seed and each replication's seed (replication 0 runs on the scenario seed).
    pub seeds: Vec<u64>,
    /// The state the cluster starts in.
    pub initial_state: &'static str,
    /// The warm-up method and, per replication, the simulated time before which calls were
    /// discarded, µs.
    pub warm_up: WarmUpRecord,
    /// When a run stops.
    pub stop_rule: StopRule,
    /// Service-level objectives for goodput.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slo: Option<Slo>,
    /// The acceptance conditions and how each replication fared.
    pub acceptance: Vec<AcceptanceOutcome>,
    /// Every metric's definition.
    pub metrics: &'static [MetricDefinition],
}

/// One client in the frame.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ClientFrame {
    /// Its name.
    pub name: String,
    /// `synthetic` or the replayed file's format and path.
    pub source: String,
    /// How it releases requests (`open`, `closed`, `stages`).
    pub pacing: String,
    /// Requests it sends, when known in advance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests: Option<u64>,
}

/// The warm-up actually applied.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WarmUpRecord {
    /// How it was chosen.
    pub method: WarmUp,
    /// Per replication, calls sent before this time were discarded, µs.
    pub discarded_before_us: Vec<u64>,
}

/// When runs stop.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct StopRule {
    /// The horizon, if any, seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub horizon_s: Option<f64>,
    /// Requests the clients send in all, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests: Option<u64>,
}

/// One acceptance condition's outcome.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AcceptanceOutcome {
    /// The condition.
    pub condition: String,
    /// Whether every replication met it.
    pub met: bool,
    /// What was measured, per replication or overall.
    pub detail: String,
}
