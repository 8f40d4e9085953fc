//! Workload sources: everything a client can play, compiled to one form — a stream of
//! [`RequestSpec`]s (request DAGs with arrival times) and the pacing that releases them.
//!
//! Sources generate lazily, one request at a time, so a million-request workload streams in
//! bounded memory: synthetic clients draw from distributions, replay clients read a trace file
//! (the workload-file JSONL, the Azure LLM inference CSV or Mooncake's JSONL), an inference-perf
//! import sends what that tool would. [`fit`] goes the other way, from a trace to a synthetic
//! client. Every random draw comes from a substream named by the client and the purpose, so the
//! same scenario and seed give the same requests whatever else changes.

mod azure;
pub mod fit;
mod inference_perf;
pub(crate) use inference_perf::known_drift;
mod jsonl;
mod mooncake;
pub mod sampling;
mod synthetic;
mod trace_file;

use std::path::Path;

use blis_contracts::{Duration, FieldError, ReplayFormat, RequestSpec, Workload};
use blis_kernel::Streams;

pub use inference_perf::{InferencePerfPlan, InferencePerfSource};
pub use synthetic::Synthetic;

use azure::AzureCsv;
use jsonl::Jsonl;
use mooncake::Mooncake;
use trace_file::{LineFormat, TraceSource};

/// How a client releases the requests of its source.
#[derive(Clone, Debug, PartialEq)]
pub enum Pacing {
    /// Each request at its `arrival_us`, whatever happens to the others (open loop).
    Open,
    /// A fixed number of requests outstanding: each answer, after an optional think time,
    /// releases the next request (`arrival_us` is ignored).
    Closed {
        /// Requests outstanding.
        concurrency: u32,
        /// Pause after an answer before the next request.
        think_time_s: Option<Duration>,
    },
    /// Stages one after another, as inference-perf runs them: stage s begins at `A_s` (`A_0 =
    /// 0`); its requests arrive at their `arrival_us` after `T0 = A_s + lead_us`; the stage is
    /// seen to end at the first poll tick (`A_s + m·poll_us`) at or after its last request ended;
    /// the next stage begins `interval_us` after that tick.
    StagesAfterCompletion {
        /// From a stage's beginning to its time origin, µs.
        lead_us: u64,
        /// Period of the end-of-stage check, µs (at least 1).
        poll_us: u64,
        /// From the detected end of a stage to the beginning of the next, µs.
        interval_us: u64,
    },
}

/// One request of a source, with the stage it belongs to.
#[derive(Clone, Debug, PartialEq)]
pub struct Planned {
    /// The request.
    pub spec: RequestSpec,
    /// Its stage (always 0 unless the pacing is [`Pacing::StagesAfterCompletion`]; stages come
    /// in order).
    pub stage: u32,
}

/// A stream of requests for one client.
pub trait RequestSource: Send {
    /// How the client releases them.
    fn pacing(&self) -> Pacing;

    /// The next request, or `None` when the source is exhausted.
    fn next_request(&mut self) -> Option<Planned>;

    /// Whether every request is one call released at its own arrival time, so that no answer
    /// ever makes the client send (what lets the engines run in lanes).
    fn answers_release_nothing(&self) -> bool {
        false
    }

    /// Whether no prompt it makes can hold ids another call generated: no conversation
    /// history, and no ids given by the user, so only chance could repeat an output (what lets
    /// vLLM instances cache output blocks only when their request is preempted).
    fn prompts_hold_no_outputs(&self) -> bool {
        false
    }

    /// Why the source ended early, if it did (a file changed after it was checked).
    fn error(&self) -> Option<&FieldError> {
        None
    }
}

/// One client's name and source.
pub struct ClientSource {
    /// The client's name.
    pub name: String,
    /// Its requests.
    pub source: Box<dyn RequestSource>,
    /// How many requests it will send, when known in advance.
    pub requests: Option<u64>,
    /// The model its requests name, if the workload says.
    pub model: Option<String>,
    /// Where that model would be named in the scenario.
    pub model_path: String,
    /// The fairness-id header its requests carry, if the workload says.
    pub fairness_id: Option<String>,
    /// The SLO-TTFT header (ms) its requests carry, if the workload says.
    pub slo_ttft_ms: Option<u64>,
}

/// The sources of every client of `workload`, synthetic clients first, then replays (whose
/// files, relative to `base_dir`, are read and checked here).
pub fn sources(
    workload: &Workload,
    streams: Streams,
    base_dir: &Path,
) -> Result<Vec<ClientSource>, FieldError> {
    let mut out = Vec::with_capacity(workload.clients.len() + workload.replays.len());
    for (i, spec) in workload.clients.iter().enumerate() {
        let requests = match spec.arrival {
            blis_contracts::Arrival::Staged { .. } => None,
            _ => Some(spec.requests),
        };
        out.push(ClientSource {
            name: spec.name.clone(),
            source: Box::new(Synthetic::new(spec, workload.rate_per_s, streams)),
            requests,
            model: spec.model.clone(),
            model_path: format!("workload.clients[{i}].model"),
            fairness_id: spec.fairness_id.clone(),
            slo_ttft_ms: spec.slo_ttft_ms,
        });
    }
    for (i, replay) in workload.replays.iter().enumerate() {
        let path = base_dir.join(&replay.path);
        let label = format!("workload.replays[{i}].path ({})", replay.path);
        let (source, requests) = replay_file(replay.format, &path, &label, &replay.name)?;
        out.push(ClientSource {
            name: replay.name.clone(),
            source,
            requests: Some(requests),
            model: replay.model.clone(),
            model_path: format!("workload.replays[{i}].model"),
            fairness_id: None,
            slo_ttft_ms: None,
        });
    }
    if let Some(import) = &workload.inference_perf {
        let source = InferencePerfSource::open(import, base_dir, streams)?;
        let plan = source.plan();
        let requests = (0..plan.stages.len()).map(|s| plan.stage_requests(s)).sum();
        out.push(ClientSource {
            name: import.name.clone(),
            source: Box::new(source),
            requests: Some(requests),
            model: import.model.clone(),
            model_path: "workload.inference_perf.model".to_owned(),
            fairness_id: None,
            slo_ttft_ms: None,
        });
    }
    Ok(out)
}

/// The source of the trace file `path` in `format`, as client `client` replays it, after reading
/// it once and refusing its first bad line (`label` names the file in messages); with the number
/// of requests it holds.
pub fn replay_file(
    format: ReplayFormat,
    path: &Path,
    label: &str,
    client: &str,
) -> Result<(Box<dyn RequestSource>, u64), FieldError> {
    fn checked<F: LineFormat + 'static>(
        path: &Path,
        label: &str,
        format: impl Fn() -> F,
    ) -> Result<(Box<dyn RequestSource>, u64), FieldError> {
        let checked = TraceSource::check(path, label, format())?;
        Ok((Box::new(TraceSource::open(path, label, format())?.vouching(checked)), checked.requests))
    }
    match format {
        ReplayFormat::Jsonl => checked(path, label, Jsonl::default),
        ReplayFormat::AzureCsv => checked(path, label, || AzureCsv::new(client)),
        ReplayFormat::Mooncake => checked(path, label, || Mooncake::new(client)),
    }
}
