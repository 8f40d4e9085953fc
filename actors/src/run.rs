//! Running a scenario end to end: parse, assemble, simulate, account for every request.

use std::cell::Cell;
use std::fmt;
use std::path::PathBuf;
use std::rc::Rc;

use blis_contracts::{
    CallRecord, DataRecord, Fate, FateCounts, FieldError, InstanceRecord, PricingRecord, RESULT_SCHEMA, Rank,
    RankShares, RequestSpec, RunResult, Scenario, ScenarioRecord, SimulationRecord,
};
use blis_costmodel::CostData;
use blis_kernel::{ActorId, Envelope, HostKind, KernelError, Observer, RunEnd, SimDuration, SimTime};
use sha2::{Digest, Sha256};

use crate::assembly::{AssemblyOptions, assemble};
use crate::client::{Client, call_key};
use crate::engine_host::EngineHost;
use crate::message::ClusterMessage;
use crate::metrics::metrics;

/// The seed used when neither the scenario nor the command line gives one.
pub const DEFAULT_SEED: u64 = 1;

/// How to run.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Overrides the scenario's seed.
    pub seed: Option<u64>,
    /// Which kernel host runs the actors.
    pub host: HostKind,
    /// Where workload files named by relative paths are (default: the working directory).
    pub base_dir: Option<PathBuf>,
    /// Keep every request each client released, as it released it, for `--export-workload`.
    pub export_workload: bool,
}

/// How far a run has got, for a progress display.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Simulated time reached.
    pub simulated: SimTime,
    /// Calls answered (completed or refused) so far.
    pub answered: u64,
    /// Calls the clients will send in all.
    pub total: u64,
}

/// What a run produces.
#[derive(Clone, Debug)]
pub struct RunOutput {
    /// The Result document.
    pub result: RunResult,
    /// One record per LLM call, clients in scenario order, calls in send order.
    pub calls: Vec<CallRecord>,
    /// With `export_workload`: per client (in scenario order, replays last), its name and the
    /// requests it released, with the times it released them.
    pub workloads: Vec<(String, Vec<RequestSpec>)>,
}

impl RunOutput {
    /// `result.json` exactly as written: pretty JSON and a final newline.
    pub fn result_json(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec_pretty(&self.result).expect("results serialise");
        bytes.push(b'\n');
        bytes
    }

    /// `calls.jsonl` exactly as written: one JSON object per line.
    pub fn calls_jsonl(&self) -> Vec<u8> {
        let mut bytes = Vec::new();
        for call in &self.calls {
            serde_json::to_writer(&mut bytes, call).expect("call records serialise");
            bytes.push(b'\n');
        }
        bytes
    }

    /// SHA-256 (hex) of the comparable part of the Result: fates, metrics and calls, as JSON.
    /// Record and replay, and export and re-run, must give the same digest.
    pub fn comparable_digest(&self) -> String {
        let comparable = (&self.result.fates, &self.result.metrics, &self.calls);
        let bytes = serde_json::to_vec(&comparable).expect("results serialise");
        Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// The Perfetto process an actor is drawn in: all clients share one, every other actor has its
/// own (each engine, the router).
pub fn timeline_group(actor: &str) -> String {
    if actor.starts_with("client/") { "clients".to_owned() } else { actor.to_owned() }
}

/// The key of the request named `request_id` (`<client>-<k>`) in `scenario`, if there is one;
/// every call of the request has this key under [`REQUEST_KEY_MASK`].
pub fn request_key(scenario: &Scenario, request_id: &str) -> Option<u64> {
    let (client, sequence) = request_id.rsplit_once('-')?;
    let sequence: u64 = sequence.parse().ok()?;
    let index = scenario.workload.clients.iter().position(|c| c.name == client)?;
    let spec = &scenario.workload.clients[index];
    (sequence < spec.requests).then_some(call_key(index as u32, sequence, 0))
}

/// The priced time split by rank, with shares.
fn pricing_record(priced: &RankShares) -> PricingRecord {
    let total = priced.total();
    let present = Rank::ALL.iter().filter(|r| priced.get(**r) > 0.0);
    PricingRecord {
        priced_us: total,
        by_rank_us: present.clone().map(|r| (r.as_str().to_owned(), priced.get(*r))).collect(),
        share_by_rank: present.map(|r| (r.as_str().to_owned(), priced.get(*r) / total)).collect(),
    }
}

/// Why a run did not produce a result.
#[derive(Clone, Debug, PartialEq)]
pub enum RunError {
    /// The scenario was refused.
    Input(FieldError),
    /// The simulation could not go on.
    Kernel(KernelError),
    /// An engine instance stopped making progress (as its upstream would), so the run cannot
    /// answer.
    Stalled {
        /// The instance.
        instance: String,
        /// When it was declared stalled, µs of simulated time.
        at_us: u64,
        /// What it did.
        reason: String,
    },
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Input(e) => write!(f, "{e}"),
            RunError::Kernel(e) => write!(f, "simulation failed: {e}"),
            RunError::Stalled { at_us, reason, .. } => {
                write!(f, "simulation stopped at {:.6} s: {reason}", *at_us as f64 / 1e6)
            }
        }
    }
}

impl std::error::Error for RunError {}

/// Counts answers reaching clients, for progress.
struct AnswerCounter {
    clients: Vec<ActorId>,
    answered: Rc<Cell<u64>>,
}

impl Observer<ClusterMessage> for AnswerCounter {
    fn on_delivery(&mut self, envelope: &Envelope<ClusterMessage>) {
        if !matches!(envelope.payload, ClusterMessage::Request(_))
            && self.clients.binary_search(&envelope.to).is_ok()
        {
            self.answered.set(self.answered.get() + 1);
        }
    }
}

/// Simulated time between progress reports.
const PROGRESS_EVERY: SimDuration = SimDuration::from_secs(1);

/// Run the scenario in `text`, reporting progress every simulated second.
pub fn run(
    text: &str,
    options: RunOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<RunOutput, RunError> {
    run_observed(text, options, &CostData::embedded(), Vec::new(), progress).map(|(output, _)| output)
}

/// Observers of a cluster run.
pub type Observers = Vec<Box<dyn Observer<ClusterMessage>>>;

/// [`run`] with extra observers attached (a timeline writer, a message log, a replay check);
/// they are handed back after the run, in the order given.
pub fn run_observed(
    text: &str,
    options: RunOptions,
    data: &CostData,
    observers: Observers,
    progress: &mut dyn FnMut(Progress),
) -> Result<(RunOutput, Observers), RunError> {
    let scenario = Scenario::parse(text).map_err(RunError::Input)?;
    let seed = options.seed.or(scenario.seed).unwrap_or(DEFAULT_SEED);
    let assembly = AssemblyOptions {
        host: options.host,
        base_dir: options.base_dir.clone().unwrap_or_default(),
        keep_released: options.export_workload,
    };
    let cluster = assemble(&scenario, seed, data, &assembly).map_err(RunError::Input)?;
    let mut simulation = cluster.simulation;
    let answered = Rc::new(Cell::new(0));
    let mut clients_sorted = cluster.clients.clone();
    clients_sorted.sort();
    simulation.observe(AnswerCounter { clients: clients_sorted, answered: answered.clone() });
    for observer in observers {
        simulation.observe_boxed(observer);
    }
    let total: u64 = cluster.expected_requests.unwrap_or(0);
    let horizon = match scenario.horizon_s {
        Some(h) => SimDuration::from_secs_ceil(h)
            .map(|d| SimTime::ZERO.saturating_add(d))
            .map_err(|e| RunError::Input(FieldError::new("horizon_s", h, e.to_string())))?,
        None => SimTime::MAX,
    };
    let mut checkpoint = SimTime::ZERO;
    let end = loop {
        checkpoint = checkpoint.saturating_add(PROGRESS_EVERY).min(horizon);
        let end = simulation.run_until(checkpoint).map_err(RunError::Kernel)?;
        progress(Progress { simulated: simulation.now().time, answered: answered.get(), total });
        match end {
            RunEnd::Horizon { at } if at < horizon => continue,
            end => break end,
        }
    };
    if let RunEnd::Halted { at, actor, reason } = &end
        && actor.as_str() != "observer"
    {
        return Err(RunError::Stalled {
            instance: actor.clone(),
            at_us: at.as_micros(),
            reason: reason.clone(),
        });
    }
    let end_time = match end {
        RunEnd::Horizon { at } => at,
        RunEnd::Quiescent { at } | RunEnd::Halted { at, .. } => at,
    };
    let kernel_stats = simulation.stats();
    let mut finished = simulation.finish();
    let observers: Observers = finished.observers.drain(1..).collect();

    let mut engine_steps = 0;
    let mut priced = RankShares::default();
    let mut started = Vec::new();
    let mut instances = Vec::new();
    for &id in &cluster.engines {
        let host = finished.take_actor::<EngineHost>(id).expect("engine ids hold engine hosts");
        let counters = host.engine().counters();
        let metrics = host.engine().metrics();
        instances.push(InstanceRecord {
            name: host.name().to_owned(),
            steps: counters.steps,
            preemptions: counters.preemptions,
            prefix_cache_queries: metrics.prefix_cache_queries,
            prefix_cache_hits: metrics.prefix_cache_hits,
        });
        engine_steps += counters.steps;
        priced.merge(host.priced());
        started.extend(host.engine().scheduler().held().filter(|&(_, s)| s).map(|(key, _)| key));
        started.extend_from_slice(host.answered());
    }
    started.sort_unstable();
    let mut calls = Vec::new();
    let mut fates = FateCounts::default();
    let mut workloads = Vec::new();
    for &id in &cluster.clients {
        let mut client = finished.take_actor::<Client>(id).expect("client ids hold clients");
        if let Some(error) = client.source_error() {
            return Err(RunError::Input(error.clone()));
        }
        if let Some(released) = client.take_released() {
            workloads.push((client.name().to_owned(), released));
        }
        calls.extend(client.records(|key| {
            if started.binary_search(&key).is_ok() { Fate::InFlightAtHorizon } else { Fate::QueuedAtHorizon }
        }));
    }
    for call in &calls {
        fates.count(&call.fate);
    }
    debug_assert!(fates.conserved());
    let result = RunResult {
        schema: RESULT_SCHEMA.to_owned(),
        blis_actor_version: env!("CARGO_PKG_VERSION").to_owned(),
        seed,
        engines: cluster.identities,
        scenario: ScenarioRecord { given: text.to_owned(), resolved: cluster.resolved },
        data: DataRecord {
            catalog_sha256: data.catalog_sha256.clone(),
            registry_sha256: data.registry_sha256.clone(),
        },
        pricing: pricing_record(&priced),
        fates,
        metrics: metrics(&calls),
        instances,
        simulation: SimulationRecord {
            end_time_us: end_time.as_micros(),
            engine_steps,
            rounds: kernel_stats.rounds,
            messages: kernel_stats.messages,
        },
    };
    Ok((RunOutput { result, calls, workloads }, observers))
}
