//! Running a scenario end to end: parse, run every replication (replication 0 with the
//! observers, the rest on worker threads), and turn them into one Result.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use blis_contracts::{
    Arrival, BuildRecord, CALLS_SCHEMA, CallRecord, CallsHeader, ClientFrame, DataRecord, FieldError,
    FileHash, FrameRecord, METRICS, PricingRecord, RESULT_SCHEMA, Rank, RankShares, ReplicationRecord,
    RequestSpec, RunResult, Scenario, ScenarioRecord, SpreadRecord, StopRule, WarmUpRecord, Writer, bounds,
};
use blis_costmodel::CostData;
use blis_kernel::{HostKind, KernelError, Observer, SimTime};
use sha2::{Digest, Sha256};

use crate::assembly::AssemblyOptions;
use crate::calls_out::{CallSelection, CallsDigest, CallsOut};
use crate::client::call_key;
use crate::experiment::figures::{acceptance, estimates, replication_record, scalars, validity};
use crate::experiment::replication::{Accounting, ReplicationRun, replication_seed, run_replication};
use crate::message::ClusterMessage;

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
    /// Exported requests carry every prompt as the token ids the simulator sent (ids below the
    /// smallest vocabulary served), for replay against a real server.
    pub export_token_ids: bool,
    /// Overrides the frame's number of replications.
    pub replications: Option<u32>,
    /// Threads to run replications on (default: the machine's cores); never changes outputs.
    pub threads: Option<usize>,
    /// The build running the simulation, for the Result (the command line sets it).
    pub build: Option<BuildRecord>,
    /// Also run replication 0 once per uncertainty sample of the registry's fitted bundles and
    /// report how far each figure moves.
    pub coefficient_spread: bool,
    /// Which of replication 0's calls are output.
    pub calls: CallSelection,
    /// Stream replication 0's calls into this file as they settle (`calls.jsonl`); without it
    /// they are kept in [`RunOutput::calls`].
    pub calls_path: Option<PathBuf>,
    /// Whether replication 0's call records are hashed for [`RunOutput::calls_sha256`].
    pub calls_digest: CallsDigest,
    /// vLLM engines take every step in a round of their own, walk every running request every
    /// step and cache every full block as it fills (the reference path) instead of running
    /// ahead through the steps before the next event elsewhere, advancing plain decoders as a
    /// cohort and, where no prompt can hold another call's outputs, caching output blocks only
    /// when their request is preempted; the outputs are the same.
    pub faithful_steps: bool,
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
    /// The first line of `calls.jsonl`.
    pub calls_header: CallsHeader,
    /// Replication 0's call records as selected, in file order (`docs/RESULT.md`), when they
    /// were not streamed to a file.
    pub calls: Vec<CallRecord>,
    /// SHA-256 (hex) of replication 0's every call record in file order, as `calls.jsonl`
    /// holds them with `--calls all`, whatever the selection; `None` when the run skipped it
    /// ([`CallsDigest::Skipped`]).
    pub calls_sha256: Option<String>,
    /// With `export_workload`: per client of replication 0 (in scenario order, replays last),
    /// its name and the requests it released, with the times it released them.
    pub workloads: Vec<(String, Vec<RequestSpec>)>,
}

impl RunOutput {
    /// `result.json` exactly as written: pretty JSON and a final newline.
    pub fn result_json(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec_pretty(&self.result).expect("results serialise");
        bytes.push(b'\n');
        bytes
    }

    /// `calls.jsonl` exactly as written: the header, then one call record per line.
    pub fn calls_jsonl(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec(&self.calls_header).expect("headers serialise");
        bytes.push(b'\n');
        for call in &self.calls {
            serde_json::to_writer(&mut bytes, call).expect("call records serialise");
            bytes.push(b'\n');
        }
        bytes
    }

    /// SHA-256 (hex) of the comparable part of the Result: fates, metrics and the calls'
    /// digest, as JSON. Record and replay, and export and re-run, must give the same digest;
    /// none when the run skipped the calls' digest ([`CallsDigest::Skipped`]), which leaves
    /// nothing to compare the calls by.
    pub fn comparable_digest(&self) -> Option<String> {
        let calls_sha256 = self.calls_sha256.as_ref()?;
        let comparable = (&self.result.fates, &self.result.metrics, calls_sha256);
        let bytes = serde_json::to_vec(&comparable).expect("results serialise");
        Some(hex(&Sha256::digest(&bytes)))
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
    /// An output file could not be written.
    Output(String),
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Input(e) => write!(f, "{e}"),
            RunError::Kernel(e) => write!(f, "simulation failed: {e}"),
            RunError::Stalled { at_us, reason, .. } => {
                write!(f, "simulation stopped at {:.6} s: {reason}", *at_us as f64 / 1e6)
            }
            RunError::Output(reason) => write!(f, "{reason}"),
        }
    }
}

impl std::error::Error for RunError {}

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

/// [`run`] with extra observers attached (a timeline writer, a message log, a replay check) on
/// replication 0; they are handed back after the run, in the order given. Other replications
/// run on worker threads; the outputs are the same whatever the number of threads.
pub fn run_observed(
    text: &str,
    options: RunOptions,
    data: &CostData,
    observers: Observers,
    progress: &mut dyn FnMut(Progress),
) -> Result<(RunOutput, Observers), RunError> {
    let scenario = Scenario::parse(text).map_err(RunError::Input)?;
    let seed = options.seed.or(scenario.seed).unwrap_or(DEFAULT_SEED);
    let frame = &scenario.frame;
    let replications = options.replications.unwrap_or_else(|| frame.replications());
    if let Some(given) = options.replications {
        bounds::check_replications("--replications", given).map_err(RunError::Input)?;
    }
    check_held(&scenario, replications, options.replications.is_some()).map_err(RunError::Input)?;
    if options.threads == Some(0) {
        return Err(RunError::Input(FieldError::new("--threads", 0, "must be at least 1")));
    }
    let threads = options.threads.unwrap_or_else(default_threads).max(1);
    // Cores no replication takes: the first does replication 0's accounting and draws; from
    // the second on, they run its engines in lanes (on two cores the lanes measured no faster
    // than the accounting and draws alone: docs/PERFORMANCE.md, "Engines in lanes").
    let spare = threads.saturating_sub(replications as usize);
    let assembly = AssemblyOptions {
        host: options.host,
        base_dir: options.base_dir.clone().unwrap_or_default(),
        keep_released: options.export_workload,
        released_token_ids: options.export_token_ids,
        fault: None,
        draw_ahead: false,
        lane_threads: if spare >= 2 { spare } else { 1 },
        faithful_steps: options.faithful_steps,
    };
    let seeds: Vec<u64> = (0..replications).map(|r| replication_seed(seed, r)).collect();
    // Replication 0 runs here (the observers are not Send); the others on workers, each taking
    // the next index; results land in their slot, so the order never depends on timing.
    let others: Mutex<Vec<Option<Result<ReplicationRun, RunError>>>> =
        Mutex::new((1..replications).map(|_| None).collect());
    let next = AtomicU32::new(1);
    // Take the next replication not yet taken, until none is left.
    let run_rest = || {
        loop {
            let index = next.fetch_add(1, Ordering::Relaxed);
            if index >= replications {
                break;
            }
            let outcome = run_replication(
                &scenario,
                index,
                seeds[index as usize],
                data,
                &assembly,
                Vec::new(),
                None,
                Accounting::Inline,
                &mut |_| {},
            )
            .map(|(run, _)| run);
            others.lock().expect("no worker panics holding the lock")[index as usize - 1] = Some(outcome);
        }
    };
    // A core no replication takes accounts replication 0's records (`calls.jsonl`, the tally).
    let accounting = if threads > replications as usize { Accounting::Threaded } else { Accounting::Inline };
    let (first, observers, (calls_header, kept_calls), calls_sha256) = std::thread::scope(|scope| {
        for _ in 1..threads.min(replications as usize) {
            scope.spawn(run_rest);
        }
        let header = calls_header(&scenario, text, seed, &assembly.base_dir);
        let first =
            CallsOut::new(options.calls, options.calls_path.as_deref(), seed, header, options.calls_digest)
                .map_err(|e| RunError::Output(e.to_string()))
                .and_then(|mut calls| {
                    let (run, observers) = run_replication(
                        &scenario,
                        0,
                        seed,
                        data,
                        &assembly,
                        observers,
                        Some(&mut calls),
                        accounting,
                        progress,
                    )?;
                    let (header, kept, digest) =
                        calls.finish().map_err(|e| RunError::Output(e.to_string()))?;
                    Ok((run, observers, (header, kept), digest))
                });
        // With one thread (or when the workers are slow) this thread takes the rest too.
        run_rest();
        first
    })?;
    let mut runs = vec![first];
    for outcome in others.into_inner().expect("the workers are done") {
        runs.push(outcome.expect("every replication ran")?);
    }
    let (records, windows): (Vec<ReplicationRecord>, Vec<_>) =
        runs.iter().map(|run| replication_record(run, frame)).unzip();
    let (acceptance_outcomes, withheld) = acceptance(&records, frame);
    let all_withheld =
        !acceptance_outcomes.iter().all(|o| o.met || o.condition.starts_with("not overloaded"));
    let first = runs.swap_remove(0);
    let estimates =
        if all_withheld { BTreeMap::new() } else { estimates(&records, &windows[0], frame.run_kind()) };
    let clients = client_frames(&scenario);
    let result = RunResult {
        schema: RESULT_SCHEMA.to_owned(),
        blis_actor_version: env!("CARGO_PKG_VERSION").to_owned(),
        stack: blis_contracts::stack(),
        seed,
        engines: first.identities.clone(),
        scenario: ScenarioRecord { given: text.to_owned(), resolved: first.resolved.clone() },
        data: DataRecord {
            catalog_sha256: data.catalog_sha256.clone(),
            registry_sha256: data.registry_sha256.clone(),
            workload_files: workload_files(&scenario, &assembly.base_dir),
        },
        build: options.build.clone(),
        pricing: pricing_record(&first.priced),
        frame: FrameRecord {
            kind: frame.run_kind(),
            clients,
            seeds,
            initial_state: "empty: no request anywhere, every KV cache empty and its prefix cache cold",
            warm_up: WarmUpRecord {
                method: frame.warm_up(),
                discarded_before_us: records.iter().map(|r| r.warm_up_before_us).collect(),
            },
            stop_rule: StopRule { horizon_s: scenario.horizon_s, requests: first.expected_requests },
            slo: frame.slo,
            acceptance: acceptance_outcomes,
            metrics: METRICS,
        },
        validity: validity(&first.priced, &first.resolved, &data.registry),
        fates: first.fates,
        dropped_by_reason: first.tally.dropped_by_reason().clone(),
        metrics: (!all_withheld).then(|| records[0].metrics.clone()),
        estimates,
        withheld,
        coefficient_spread: if options.coefficient_spread {
            coefficient_spread(text, &options, data, &records[0].metrics)?
        } else {
            BTreeMap::new()
        },
        replications: records,
        instances: first.instances,
        simulation: first.simulation,
    };
    Ok((
        RunOutput { result, calls_header, calls: kept_calls, calls_sha256, workloads: first.workloads },
        observers,
    ))
}

/// Refuse a run whose replications would together hold more per-token latencies than
/// [`bounds::MAX_TOKEN_LATENCIES`] (synthetic clients; files are bounded by their size).
fn check_held(scenario: &Scenario, replications: u32, from_flag: bool) -> Result<(), FieldError> {
    let per_replication: u64 = scenario
        .workload
        .clients
        .iter()
        .map(|c| c.max_calls().saturating_mul(u64::from(c.output_tokens.max())))
        .fold(0, u64::saturating_add);
    if per_replication > bounds::MAX_TOKEN_LATENCIES {
        return Err(FieldError::new(
            "workload.clients",
            format!("up to {per_replication} output tokens per replication"),
            format!(
                "calls × their largest output length must stay within {} per-token latencies (8 GiB): lower requests or output_tokens.max",
                bounds::MAX_TOKEN_LATENCIES
            ),
        ));
    }
    let held = per_replication.saturating_mul(u64::from(replications));
    if held > bounds::MAX_TOKEN_LATENCIES {
        let path = if from_flag { "--replications" } else { "frame.replications" };
        let shown = if from_flag || scenario.frame.replications.is_some() {
            replications.to_string()
        } else {
            format!("{replications} (the default)")
        };
        return Err(FieldError::new(
            path,
            shown,
            format!(
                "{replications} replications of up to {per_replication} output tokens each would hold {held} per-token latencies; a run holds at most {} (8 GiB)",
                bounds::MAX_TOKEN_LATENCIES
            ),
        ));
    }
    Ok(())
}

/// The content hashes of the workload files the scenario names (already read and checked by the
/// run, so each can be read again).
/// The `calls.jsonl` header of a run of `scenario` (given as `text`) on `seed`, its pools not
/// yet filled in; the workload hash is the replayed file's when the workload is one file.
fn calls_header(scenario: &Scenario, text: &str, seed: u64, base_dir: &std::path::Path) -> CallsHeader {
    let workload = &scenario.workload;
    let one_file = match (workload.replays.as_slice(), &workload.inference_perf) {
        ([replay], None) if workload.clients.is_empty() => std::fs::read(base_dir.join(&replay.path)).ok(),
        _ => None,
    };
    let workload_sha256 = match one_file {
        Some(bytes) => hex(&Sha256::digest(bytes)),
        None => hex(&Sha256::digest(format!("{text}{seed}"))),
    };
    CallsHeader {
        calls: CALLS_SCHEMA.to_owned(),
        writer: Writer::Run,
        blis_actor_version: env!("CARGO_PKG_VERSION").to_owned(),
        server: None,
        pools: Vec::new(),
        workload_sha256,
    }
}

fn workload_files(scenario: &Scenario, base_dir: &std::path::Path) -> Vec<FileHash> {
    let workload = &scenario.workload;
    let paths =
        workload.replays.iter().map(|r| &r.path).chain(workload.inference_perf.iter().map(|i| &i.profile));
    paths
        .map(|path| FileHash {
            path: path.clone(),
            sha256: std::fs::read(base_dir.join(path))
                .map_or_else(|_| String::new(), |bytes| hex(&Sha256::digest(bytes))),
        })
        .collect()
}

/// Lower-case hex of `bytes`.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Replication 0 run once per uncertainty sample of the registry: each figure's nominal value
/// and its range over the samples.
fn coefficient_spread(
    text: &str,
    options: &RunOptions,
    data: &CostData,
    nominal: &blis_contracts::Metrics,
) -> Result<BTreeMap<String, SpreadRecord>, RunError> {
    let samples = data.registry.uncertainty();
    let mut spread: BTreeMap<String, SpreadRecord> = BTreeMap::new();
    for (name, value) in scalars(nominal) {
        if let Some(value) = value {
            spread.insert(name, SpreadRecord { nominal: value, min: value, max: value, samples: 0 });
        }
    }
    for sample in samples {
        let registry = data.registry.with_sample(sample).map_err(RunError::Input)?;
        let sampled = data.with_registry(registry);
        let single = RunOptions {
            replications: Some(1),
            coefficient_spread: false,
            calls: CallSelection::None,
            calls_path: None,
            ..options.clone()
        };
        let (output, _) = run_observed(text, single, &sampled, Vec::new(), &mut |_| {})?;
        for (name, value) in scalars(&output.result.replications[0].metrics) {
            if let (Some(value), Some(record)) = (value, spread.get_mut(&name)) {
                record.min = record.min.min(value);
                record.max = record.max.max(value);
                record.samples += 1;
            }
        }
    }
    spread.retain(|_, r| r.samples > 0);
    Ok(spread)
}

/// Threads to run replications on: the machine's cores.
fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// Each client's frame entry.
fn client_frames(scenario: &Scenario) -> Vec<ClientFrame> {
    let workload = &scenario.workload;
    let synthetic = workload.clients.iter().map(|c| ClientFrame {
        name: c.name.clone(),
        source: "synthetic".into(),
        pacing: if matches!(c.arrival, Arrival::Closed { .. }) { "closed" } else { "open" }.into(),
        requests: (!matches!(c.arrival, Arrival::Staged { .. })).then_some(c.requests),
    });
    let replays = workload.replays.iter().map(|r| ClientFrame {
        name: r.name.clone(),
        source: format!("{} file {}", r.format.as_str(), r.path),
        pacing: "open".into(),
        requests: None,
    });
    let imports = workload.inference_perf.iter().map(|i| ClientFrame {
        name: i.name.clone(),
        source: format!(
            "inference-perf {} profile {}",
            serde_json::json!(i.emulate).as_str().unwrap_or(""),
            i.profile
        ),
        pacing: "stages after completion".into(),
        requests: None,
    });
    synthetic.chain(replays).chain(imports).collect()
}
