//! `blis-actor`: the command line of the simulator.
//!
//! Parse the arguments, load the scenario, run it, write the outputs. Deterministic outputs go
//! to files and stdout; progress and logs go to stderr.

mod bench;
mod calibrate;
mod compare;
mod compare_runs;
mod draw;
mod fit;
mod listing;
mod logging;
mod progress;
mod replay;
mod summary;
mod swarm;
mod sweep;
mod trace;
mod tradeoff;
mod validate;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use blis_actors::{
    CallSelection, CallsDigest, ClusterMessage, Observers, Progress, RunError, RunOptions, RunOutput,
    run_observed,
};
use blis_costmodel::CostData;
use blis_kernel::record::{MessageLog, RecordedRun, ReplayCheck};
use blis_kernel::{HostKind, Observer, SimTime};
use clap::{Parser, Subcommand, ValueEnum};

/// The process's allocator: mimalloc's small allocations are cheaper than the system
/// allocator's, and it frees a block allocated on another thread (token draws, accounting)
/// without taking that thread's arena lock.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `--version`: this build and every upstream release it models (`stack.json`, embedded).
const VERSION: &str =
    concat!(env!("CARGO_PKG_VERSION"), "\nmodels (stack.json): ", include_str!("../../stack.json"));

/// The default scenario, compiled in.
const DEFAULT_SCENARIO: &str = include_str!("../../fixtures/scenarios/default.yaml");

#[derive(Parser)]
#[command(name = "blis-actor", version = VERSION, about = "Simulate LLM serving clusters in seconds")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a scenario (the embedded default scenario when none is given).
    Run {
        /// Scenario file (YAML). Without it, the default scenario runs.
        scenario: Option<PathBuf>,
        /// Run seed; overrides the scenario's.
        #[arg(long)]
        seed: Option<u64>,
        /// Independent replications (default: the frame's, 5 for terminating runs).
        #[arg(long)]
        replications: Option<u32>,
        /// Threads to run replications on (default: every core; the first thread no replication
        /// takes writes replication 0's calls and draws its clients' token ids ahead, the others
        /// run its engines in lanes where they can); outputs never depend on it.
        #[arg(long)]
        threads: Option<usize>,
        /// Also run once per uncertainty sample of the calibrated coefficients and report how far
        /// each figure moves.
        #[arg(long)]
        coefficient_spread: bool,
        /// Take every vLLM step in a round of its own, walk every running request of it and
        /// cache every full block as it fills, the reference path, instead of running ahead
        /// through the steps before the next event elsewhere, advancing plain decoders as a
        /// cohort and caching output blocks only when their request is preempted (where no
        /// prompt can hold another call's outputs); outputs are the same, only slower.
        #[arg(long)]
        faithful_steps: bool,
        /// Directory for result.json and calls.jsonl.
        #[arg(long, default_value = "out")]
        out: PathBuf,
        /// Which calls calls.jsonl holds: `all`, `sample N` (a uniform sample of N) or `none`.
        #[arg(long, num_args = 1..=2, value_names = ["MODE", "N"], default_value = "all")]
        calls: Vec<String>,
        /// Kernel host: inline calls (fast) or one tokio task per actor (parity check).
        #[arg(long, value_enum, default_value_t = Host::Inline)]
        host: Host,
        /// Write a Perfetto timeline (Chrome trace-event JSON, simulated time) to this file.
        #[arg(long)]
        trace: Option<PathBuf>,
        /// Keep part of the timeline: `from=S,to=S,components=A;B,requests=ID;ID` (seconds).
        #[arg(long, requires = "trace")]
        trace_filter: Option<String>,
        /// Record the run's inputs and every delivered message to this file, for `replay`.
        #[arg(long)]
        record: Option<PathBuf>,
        /// Write every request each client released, as released, to `DIR/<client>.jsonl`;
        /// replaying those files (`workload.replays`) gives the same calls and metrics.
        #[arg(long, value_name = "DIR")]
        export_workload: Option<PathBuf>,
        /// Export every prompt as the token ids the simulator sent (one `token_ids` part per
        /// call, ids below the model's vocabulary size), for `baseline` to replay.
        #[arg(long, requires = "export_workload")]
        token_ids: bool,
        #[command(flatten)]
        data: DataArgs,
        /// No progress bar.
        #[arg(long)]
        quiet: bool,
    },
    /// List the catalog's chips and models and the registry's coefficients, with ranks and
    /// sources.
    Catalog {
        #[command(flatten)]
        data: DataArgs,
    },
    /// Check that a trace file is what Perfetto needs.
    TraceCheck {
        /// The trace file.
        file: PathBuf,
    },
    /// Fit a synthetic workload to a trace: gaps between arrivals and prompt and output lengths,
    /// each candidate family tested on held-out samples; prints the fits and writes the spec.
    FitWorkload {
        /// The trace file.
        trace: PathBuf,
        /// Its format.
        #[arg(long, value_enum, default_value_t = fit::TraceFormat::Jsonl)]
        format: fit::TraceFormat,
        /// Write the workload spec (YAML, a scenario's `workload:` section) here instead of
        /// stdout.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Compare two scenarios on common random numbers: both run the same replications with
    /// the same seeds, and each metric is judged better, worse or not distinguished for B.
    CompareConfigs {
        /// The first scenario (A).
        a: PathBuf,
        /// The second scenario (B).
        b: PathBuf,
        /// Seed of both (default: A's).
        #[arg(long)]
        seed: Option<u64>,
        /// Paired replications (default: A's frame; at least 2).
        #[arg(long)]
        replications: Option<u32>,
        /// Threads to run replications on; outputs never depend on it.
        #[arg(long)]
        threads: Option<usize>,
        #[command(flatten)]
        data: DataArgs,
    },
    /// Replay a workload against a real OpenAI-compatible server (vLLM) and record what its
    /// client saw, in the calls.jsonl format (docs/VALIDATION.md).
    Baseline {
        /// The server: URL, model, chip and serving settings (TOML).
        #[arg(long)]
        config: PathBuf,
        /// The workload (JSONL; one LLM call per request, prompts as token ids: `run
        /// --export-workload DIR --token-ids` writes it).
        #[arg(long)]
        workload: PathBuf,
        /// Where to write the calls; must not exist.
        #[arg(long)]
        output_jsonl: PathBuf,
    },
    /// Put runs side by side: `calls.jsonl` files (real or simulated) of the same work, the
    /// first the reference (or an inference-perf summary as the reference); per metric the mean
    /// and percentiles with their relative error, and paired per-call errors.
    Compare {
        /// Runs as NAME=PATH, the reference first.
        #[arg(required = true, num_args = 2.., value_name = "NAME=PATH")]
        runs: Vec<String>,
        /// Percentiles to report, e.g. 50,95,99.
        #[arg(long, value_delimiter = ',', default_values_t = blis_actors::calls_comparison::DEFAULT_PERCENTILES)]
        percentiles: Vec<f64>,
        /// Print the comparison as JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Draw runs on one figure: latency CDFs (default), a paired scatter against the first run
    /// with the y = x line, or throughput and cumulative output over time; PNG, SVG or PDF by
    /// the output's extension.
    Draw {
        /// The figure (.png, .svg or .pdf).
        #[arg(long)]
        output: PathBuf,
        /// Runs as NAME=PATH (calls.jsonl files of the same work), the reference first.
        #[arg(required = true, num_args = 1.., value_name = "NAME=PATH")]
        runs: Vec<String>,
        /// What to draw.
        #[arg(long, value_enum, default_value_t = draw::View::Cdf)]
        view: draw::View,
        /// One panel per metric, e.g. ttft_ms,e2e_ms (cdf and scatter: ttft_ms, tpot_ms, itl_ms,
        /// e2e_ms, normalized_e2e_ms, request_e2e_ms; timeseries: output_tokens_per_s,
        /// requests_per_s, output_tokens).
        #[arg(long, value_delimiter = ',')]
        metrics: Vec<String>,
    },
    /// Run seeded random scenarios with every invariant checked after every instant
    /// (docs/INVARIANTS.md); each failure is printed as the line that reproduces it.
    Swarm {
        /// The first swarm seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// How many seeds, from `--seed` on.
        #[arg(long, default_value_t = 100)]
        count: u64,
        /// Inject a fault, to see a check catch it.
        #[arg(long, value_enum)]
        fault: Option<FaultArg>,
        /// Skip the rerun that checks determinism (I10).
        #[arg(long)]
        no_determinism: bool,
    },
    /// Fuzz the parsers with mutated fixtures (scenario YAML, workload JSONL, traces); every
    /// accepted input is simulated; never in CI.
    Fuzz {
        /// The first fuzz seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// How many inputs.
        #[arg(long, default_value_t = 10_000)]
        count: u64,
        /// Print the inputs instead of running them.
        #[arg(long)]
        show: bool,
    },
    /// Re-run real experiments (reference-data folders) as they ran and compare, stage by
    /// stage, with what their client measured.
    ValidateReal {
        /// Experiment folders (each with exp-config.yaml, profile.yaml and results/).
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// Replications per experiment.
        #[arg(long, default_value_t = 3)]
        replications: u32,
        /// Shorten every stage to at most this many seconds (same rates).
        #[arg(long)]
        stage_cap_s: Option<f64>,
        /// Validate each experiment with the registry's uncertainty sample fitted without its
        /// model (leave-one-model-out; without the experiment itself when the calibration saw one
        /// model), instead of the full fit.
        #[arg(long)]
        leave_one_out: bool,
        /// Emulate this tokenizer's prompt-length drift instead of the client's own (whose
        /// drift, when not known, falls back to exact lengths).
        #[arg(long, value_enum)]
        tokenizer: Option<TokenizerArg>,
        /// Also write every experiment's per-stage figures, errors, overload verdicts and
        /// validity flag to this JSON file.
        #[arg(long)]
        json: Option<PathBuf>,
        #[command(flatten)]
        data: DataArgs,
    },
    /// Fit the registry's calibrated bundle on real experiments (simulator in the loop), with
    /// the fits leaving one experiment out as its uncertainty; writes a registry `--registry`
    /// loads.
    Calibrate {
        /// Experiment folders (each with exp-config.yaml, profile.yaml and results/).
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// Where to write the registry.
        #[arg(long)]
        out: PathBuf,
        /// Stages shortened to this many seconds in every evaluation.
        #[arg(long, default_value_t = 150.0)]
        stage_cap_s: f64,
        /// Objective evaluations of the full fit (a third of it for each leave-one-out fit).
        #[arg(long, default_value_t = 220)]
        evaluations: usize,
        /// Skip measuring which terms the runs identify (the objective's curvature at the fit).
        #[arg(long)]
        no_identification: bool,
        /// What each held-out fit leaves out: every run of one model (the default when the runs
        /// serve more than one model), or one experiment.
        #[arg(long, value_enum)]
        hold_out: Option<calibrate::HoldOut>,
        /// Objective evaluations of each held-out fit (a third of `--evaluations` by default).
        #[arg(long)]
        fold_evaluations: Option<usize>,
        #[command(flatten)]
        data: DataArgs,
    },
    /// Run the performance targets' bench cases (all when none is named) and print each one's
    /// wall time and peak resident memory (`docs/PERFORMANCE.md`).
    Bench {
        /// Cases to run: reference-10, reference-10k, reference-100k,
        /// reference-100k-no-caching, reference-1m, cluster-8x-100k, cluster-8x-1m,
        /// cluster-8x-100k-llmd, cluster-8x-1m-llmd, reference-100k-sglang, reference-1m-sglang.
        cases: Vec<String>,
        /// Print the cases' scenarios instead of running them.
        #[arg(long)]
        print_scenario: bool,
        /// Directory for each case's result.json and calls.jsonl (`DIR/<case>/`).
        #[arg(long, default_value = "bench-out")]
        out: PathBuf,
    },
    /// Re-run a recorded run and check every delivered message against the recording.
    Replay {
        /// The recording (from `run --record`).
        file: PathBuf,
        /// Kernel host for the re-run.
        #[arg(long, value_enum, default_value_t = Host::Inline)]
        host: Host,
        #[command(flatten)]
        data: DataArgs,
    },
    /// Run many configurations of one base scenario (a spec's axes or points), each on the
    /// same seeds; one Result per point and sweep.csv, sweep.json (docs/SWEEP.md).
    Sweep {
        /// The sweep spec (YAML).
        spec: PathBuf,
        /// Directory for points/, sweep.csv and sweep.json (a shard's points and shard.json).
        #[arg(long)]
        out: PathBuf,
        /// Run only shard I of N (I from 0); without it, a job array's index is used
        /// (SLURM_ARRAY_TASK_ID, or JOB_COMPLETION_INDEX with --shards).
        #[arg(long, value_name = "I/N")]
        shard: Option<String>,
        /// Shards of a Kubernetes Indexed Job (its completions), with JOB_COMPLETION_INDEX.
        #[arg(long)]
        shards: Option<u32>,
        #[command(flatten)]
        best: BestFlags,
        /// Threads to run each point's replications on; outputs never depend on it.
        #[arg(long)]
        threads: Option<usize>,
        #[command(flatten)]
        data: DataArgs,
        /// No progress bar.
        #[arg(long)]
        quiet: bool,
    },
    /// Fold a sharded sweep's folders into one, byte for byte what one process writes.
    Merge {
        /// The shards' folders.
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// Directory for the merged sweep.
        #[arg(long)]
        out: PathBuf,
        /// The sweep's spec (needed by --best to re-run the winner).
        #[arg(long)]
        spec: Option<PathBuf>,
        #[command(flatten)]
        best: BestFlags,
        /// Threads to run the re-run's replications on.
        #[arg(long)]
        threads: Option<usize>,
        #[command(flatten)]
        data: DataArgs,
        /// No progress bar.
        #[arg(long)]
        quiet: bool,
    },
    /// Find the smallest deployment that meets SLOs (or the highest rate sustained) along an
    /// ordered axis, every verdict's error controlled, the answer re-run on fresh seeds.
    Capacity {
        /// The capacity spec (YAML).
        spec: PathBuf,
        /// Also write capacity.json here.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Threads to run each point's replications on; outputs never depend on it.
        #[arg(long)]
        threads: Option<usize>,
        #[command(flatten)]
        data: DataArgs,
        /// No progress bar.
        #[arg(long)]
        quiet: bool,
    },
}

/// `--best METRIC [--minimize|--maximize] [--alpha A]`.
#[derive(clap::Args)]
struct BestFlags {
    /// Name the best point on this figure (`ttft_ms.p99`, `output_tokens_per_s`, ...), the
    /// chance of a false winner at most --alpha, and re-run it on fresh seeds.
    #[arg(long, value_name = "METRIC")]
    best: Option<String>,
    /// Smaller is better (default: the metric registry's direction).
    #[arg(long, requires = "best", conflicts_with = "maximize")]
    minimize: bool,
    /// Larger is better.
    #[arg(long, requires = "best")]
    maximize: bool,
    /// The chance of naming a false winner allowed.
    #[arg(long, requires = "best", default_value_t = 0.05)]
    alpha: f64,
}

impl BestFlags {
    fn args(&self) -> Option<sweep::BestArgs> {
        let goal = if self.minimize {
            Some(blis_actors::experiment::sweep::best::Goal::Minimize)
        } else if self.maximize {
            Some(blis_actors::experiment::sweep::best::Goal::Maximize)
        } else {
            None
        };
        self.best.clone().map(|metric| sweep::BestArgs { metric, goal, alpha: self.alpha })
    }
}

/// Where the cost model's data comes from (embedded unless replaced).
#[derive(clap::Args)]
struct DataArgs {
    /// Replace the embedded catalog with a folder laid out like costmodel/data (chips.yaml,
    /// links.yaml, models/*.yaml).
    #[arg(long)]
    catalog: Option<PathBuf>,
    /// Replace the embedded coefficient registry with this YAML file.
    #[arg(long)]
    registry: Option<PathBuf>,
    /// Add a model from a Hugging Face config.json, as NAME=PATH (repeatable).
    #[arg(long = "model-config", value_name = "NAME=PATH")]
    model_configs: Vec<String>,
}

impl DataArgs {
    fn load(&self) -> Result<CostData, String> {
        let mut models = Vec::new();
        for spec in &self.model_configs {
            let (name, path) =
                spec.split_once('=').ok_or_else(|| format!("--model-config {spec}: expected NAME=PATH"))?;
            models.push((name.to_owned(), Path::new(path)));
        }
        CostData::load(self.catalog.as_deref(), self.registry.as_deref(), &models).map_err(|e| e.to_string())
    }
}

/// A tokenizer whose prompt-length drift `validate-real` emulates.
#[derive(Clone, Copy, ValueEnum)]
enum TokenizerArg {
    /// Llama-2's sentencepiece tokenizer.
    Llama2,
    /// Mixtral's (Mistral v0.1).
    Mixtral,
    /// No drift: exact prompt lengths.
    Exact,
}

impl TokenizerArg {
    fn tokenizer(self) -> blis_contracts::PromptTokenizer {
        match self {
            TokenizerArg::Llama2 => blis_contracts::PromptTokenizer::Llama2,
            TokenizerArg::Mixtral => blis_contracts::PromptTokenizer::Mixtral,
            TokenizerArg::Exact => blis_contracts::PromptTokenizer::Exact,
        }
    }
}

/// A fault the swarm can inject.
#[derive(Clone, Copy, ValueEnum)]
enum FaultArg {
    /// Every engine leaks one KV block before the run (breaks I5).
    LeakKvBlock,
}

#[derive(Clone, Copy, ValueEnum)]
enum Host {
    Inline,
    Tasks,
}

impl Host {
    fn kind(self) -> HostKind {
        match self {
            Host::Inline => HostKind::Inline,
            Host::Tasks => HostKind::Tasks,
        }
    }
}

fn main() -> ExitCode {
    logging::init();
    match Cli::parse().command {
        Command::Run {
            scenario,
            seed,
            replications,
            threads,
            coefficient_spread,
            faithful_steps,
            out,
            calls,
            host,
            trace,
            trace_filter,
            record,
            export_workload,
            token_ids,
            data,
            quiet,
        } => {
            let data = match data.load() {
                Ok(data) => data,
                Err(message) => return fail(2, message),
            };
            let export = export_workload.is_some();
            let calls: CallSelection = match calls.join(" ").parse() {
                Ok(calls) => calls,
                Err(message) => return fail(2, format_args!("--calls: {message}")),
            };
            let calls_path = out.join("calls.jsonl");
            // Only a recording's trailer reads the calls' digest.
            let calls_digest = if record.is_some() { CallsDigest::Computed } else { CallsDigest::Skipped };
            let outputs = Outputs { out, trace, trace_filter, record, export_workload };
            // Workload files named in a scenario are found next to it.
            let base_dir = scenario.as_deref().and_then(Path::parent).map(Path::to_path_buf);
            run(
                scenario.as_deref(),
                RunOptions {
                    seed,
                    host: host.kind(),
                    base_dir,
                    export_workload: export,
                    export_token_ids: token_ids,
                    replications,
                    threads,
                    build: Some(build_record()),
                    coefficient_spread,
                    calls,
                    calls_path: Some(calls_path),
                    calls_digest,
                    faithful_steps,
                },
                &data,
                &outputs,
                quiet,
            )
        }
        Command::Catalog { data } => match data.load() {
            Ok(data) => {
                print!("{}", listing::render(&data));
                ExitCode::SUCCESS
            }
            Err(message) => fail(2, message),
        },
        Command::TraceCheck { file } => trace_check(&file),
        Command::CompareConfigs { a, b, seed, replications, threads, data } => match data.load() {
            Ok(data) => compare_configs(
                &a,
                &b,
                RunOptions { seed, replications, threads, ..RunOptions::default() },
                &data,
            ),
            Err(message) => fail(2, message),
        },
        Command::Baseline { config, workload, output_jsonl } => baseline(&config, &workload, &output_jsonl),
        Command::Draw { output, runs, view, metrics } => {
            match compare_runs::read_runs(&runs)
                .map_err(|e| e.to_string())
                .and_then(|runs| draw::draw(&runs, view, &metrics, &output))
            {
                Ok(()) => {
                    eprintln!("wrote {}", output.display());
                    ExitCode::SUCCESS
                }
                Err(message) => fail(2, message),
            }
        }
        Command::Compare { runs, percentiles, json } => compare_runs(&runs, &percentiles, json),
        Command::Bench { cases, print_scenario, out } => bench::bench(&cases, print_scenario, &out),
        Command::FitWorkload { trace, format, out } => fit::fit_workload(&trace, format, out.as_deref()),
        Command::Swarm { seed, count, fault, no_determinism } => {
            let fault = fault.map(|FaultArg::LeakKvBlock| blis_actors::Fault::LeakKvBlock);
            swarm::swarm(seed, count, fault, !no_determinism, &CostData::embedded())
        }
        Command::Fuzz { seed, count, show } => swarm::fuzz(seed, count, show, &CostData::embedded()),
        Command::ValidateReal { dirs, replications, stage_cap_s, leave_one_out, tokenizer, json, data } => {
            match data.load() {
                Ok(data) => match validate::validate(
                    &dirs,
                    &validate::ValidateOptions {
                        replications,
                        stage_cap_s,
                        leave_one_out,
                        tokenizer: tokenizer.map(TokenizerArg::tokenizer),
                        json: json.as_deref(),
                    },
                    &data,
                ) {
                    Ok((table, _)) => {
                        print!("{table}");
                        ExitCode::SUCCESS
                    }
                    Err(message) => fail(2, message),
                },
                Err(message) => fail(2, message),
            }
        }
        Command::Calibrate {
            dirs,
            out,
            stage_cap_s,
            evaluations,
            no_identification,
            hold_out,
            fold_evaluations,
            data,
        } => match data.load() {
            Ok(data) => {
                let options = blis_actors::experiment::calibration::CalibrationOptions {
                    stage_cap_s,
                    evaluations,
                    identification: !no_identification,
                };
                let folds = calibrate::Folds { hold_out, evaluations: fold_evaluations };
                match calibrate::calibrate(&dirs, &out, &options, &folds, &data) {
                    Ok(report) => {
                        print!("{report}");
                        ExitCode::SUCCESS
                    }
                    Err(message) => fail(2, message),
                }
            }
            Err(message) => fail(2, message),
        },
        Command::Sweep { spec, out, shard, shards, best, threads, data, quiet } => {
            let data = match data.load() {
                Ok(data) => data,
                Err(message) => return fail(2, message),
            };
            let shard = match sweep::shard(shard.as_deref(), shards) {
                Ok(shard) => shard,
                Err(error) => return fail(2, error),
            };
            let options = blis_actors::experiment::sweep::evaluate::PointOptions {
                threads,
                build: Some(build_record()),
            };
            report(sweep::run_sweep(&spec, &out, shard, best.args().as_ref(), options, &data, quiet))
        }
        Command::Merge { dirs, out, spec, best, threads, data, quiet } => {
            let data = match data.load() {
                Ok(data) => data,
                Err(message) => return fail(2, message),
            };
            let options = blis_actors::experiment::sweep::evaluate::PointOptions {
                threads,
                build: Some(build_record()),
            };
            report(sweep::run_merge(
                &dirs,
                &out,
                best.args().as_ref(),
                spec.as_deref(),
                options,
                &data,
                quiet,
            ))
        }
        Command::Capacity { spec, out, threads, data, quiet } => {
            let data = match data.load() {
                Ok(data) => data,
                Err(message) => return fail(2, message),
            };
            let options = blis_actors::experiment::sweep::evaluate::PointOptions {
                threads,
                build: Some(build_record()),
            };
            report(sweep::run_capacity(&spec, out.as_deref(), options, &data, quiet))
        }
        Command::Replay { file, host, data } => match data.load() {
            Ok(data) => replay(&file, host.kind(), &data),
            Err(message) => fail(2, message),
        },
    }
}

/// Where a run writes.
struct Outputs {
    out: PathBuf,
    trace: Option<PathBuf>,
    trace_filter: Option<String>,
    record: Option<PathBuf>,
    export_workload: Option<PathBuf>,
}

/// This binary's provenance, as `build.rs` recorded it at compile time.
fn build_record() -> blis_contracts::BuildRecord {
    let commit = env!("BLIS_BUILD_COMMIT");
    blis_contracts::BuildRecord {
        commit: (!commit.is_empty()).then(|| commit.to_owned()),
        profile: env!("BLIS_BUILD_PROFILE").to_owned(),
        rustc: env!("BLIS_BUILD_RUSTC").to_owned(),
        crates: env!("BLIS_BUILD_CRATES")
            .split(',')
            .filter_map(|pair| pair.split_once('='))
            .map(|(name, version)| (name.to_owned(), version.to_owned()))
            .collect(),
    }
}

/// A sweep command's outcome: its report on stdout, or its refusal or failure.
fn report(outcome: Result<String, sweep::Failure>) -> ExitCode {
    match outcome {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(sweep::Failure::Refused(message)) => fail(2, message),
        Err(sweep::Failure::Failed(message)) => fail(1, message),
    }
}

fn fail(code: u8, message: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(code)
}

fn run(
    scenario: Option<&Path>,
    options: RunOptions,
    data: &CostData,
    outputs: &Outputs,
    quiet: bool,
) -> ExitCode {
    let (source, text) = match scenario {
        None => ("default scenario".to_owned(), DEFAULT_SCENARIO.to_owned()),
        Some(path) => match std::fs::read_to_string(path) {
            Ok(text) => (path.display().to_string(), text),
            Err(error) => {
                return fail(2, format_args!("{}: cannot read the scenario: {error}", path.display()));
            }
        },
    };
    let mut observers: Observers = Vec::new();
    if let Some(path) = &outputs.trace {
        let filter = match trace::parse_filter(outputs.trace_filter.as_deref().unwrap_or(""), &text) {
            Ok(filter) => filter,
            Err(message) => return fail(2, message),
        };
        // The run's seed as the run will take it: the flag, else the scenario's, else the default.
        let scenario_seed = blis_contracts::Scenario::parse(&text).ok().and_then(|s| s.seed);
        let seed = options.seed.or(scenario_seed).unwrap_or(blis_actors::DEFAULT_SEED);
        match trace::writer(path, filter, seed) {
            Ok(writer) => observers.push(Box::new(writer)),
            Err(error) => {
                return fail(1, format_args!("{}: cannot write the trace: {error}", path.display()));
            }
        }
    }
    if let Some(path) = &outputs.record {
        let inputs = replay::Inputs {
            blis_actor_version: env!("CARGO_PKG_VERSION").to_owned(),
            scenario: text.clone(),
            seed: options.seed,
            replications: options.replications,
            catalog_sha256: data.catalog_sha256.clone(),
            registry_sha256: data.registry_sha256.clone(),
            files: replay::carry(&text, &options.base_dir.clone().unwrap_or_default()),
        };
        match File::create(path) {
            Ok(file) => observers.push(Box::new(MessageLog::new(BufWriter::new(file), &inputs.to_text()))),
            Err(error) => {
                return fail(1, format_args!("{}: cannot write the recording: {error}", path.display()));
            }
        }
    }
    let created_out = !outputs.out.exists();
    if let Err(error) = std::fs::create_dir_all(&outputs.out) {
        return fail(1, format_args!("{}: cannot write the outputs: {error}", outputs.out.display()));
    }
    let calls_written = options.calls != CallSelection::None;
    tracing::info!(scenario = %source, "running");
    let (output, observers) = match run_with_progress(&text, options, data, observers, quiet) {
        Ok(done) => done,
        Err(RunError::Input(error)) => {
            // A refused run writes nothing: take back the calls file streaming opened (and the
            // folder, when this run made it).
            let _ = std::fs::remove_file(outputs.out.join("calls.jsonl"));
            if created_out {
                let _ = std::fs::remove_dir(&outputs.out);
            }
            return fail(2, format_args!("{source}: {error}"));
        }
        Err(error @ (RunError::Kernel(_) | RunError::Stalled { .. } | RunError::Output(_))) => {
            return fail(1, format_args!("{source}: {error}"));
        }
    };
    let end = SimTime::from_micros(output.result.simulation.end_time_us);
    let mut observers = observers.into_iter();
    if let Some(path) = &outputs.trace {
        let writer = downcast::<trace::Writer>(observers.next());
        if let Err(error) = writer.finish(end) {
            return fail(1, format_args!("{}: cannot write the trace: {error}", path.display()));
        }
        eprintln!("wrote {}", path.display());
    }
    if let Some(path) = &outputs.record {
        let log = downcast::<MessageLog<BufWriter<File>>>(observers.next());
        if let Err(error) = log.finish(&replay::trailer(
            &output.comparable_digest().expect("a recorded run computes the calls' digest"),
        )) {
            return fail(1, format_args!("{}: cannot write the recording: {error}", path.display()));
        }
        eprintln!("wrote {}", path.display());
    }
    if let Err(error) = write_outputs(&output, &outputs.out) {
        return fail(1, format_args!("{}: cannot write the outputs: {error}", outputs.out.display()));
    }
    if let Some(dir) = &outputs.export_workload
        && let Err(error) = export_workload(&output, dir)
    {
        return fail(1, format_args!("{}: cannot write the workload: {error}", dir.display()));
    }
    print!("{}", summary::render(&output));
    let _ = std::io::stdout().flush();
    for line in summary::router_notes(&output, quiet) {
        eprintln!("{line}");
    }
    if calls_written {
        eprintln!(
            "wrote {} and {}",
            outputs.out.join("result.json").display(),
            outputs.out.join("calls.jsonl").display()
        );
    } else {
        eprintln!("wrote {} (no calls.jsonl: --calls none)", outputs.out.join("result.json").display());
    }
    ExitCode::SUCCESS
}

/// An observer handed back by the run, as the type it was attached as.
fn downcast<T: Observer<ClusterMessage>>(observer: Option<Box<dyn Observer<ClusterMessage>>>) -> T {
    let observer: Box<dyn std::any::Any> = observer.expect("every attached observer comes back");
    *observer.downcast::<T>().expect("observers come back in the order attached")
}

fn run_with_progress(
    text: &str,
    options: RunOptions,
    data: &CostData,
    observers: Observers,
    quiet: bool,
) -> Result<(RunOutput, Observers), RunError> {
    let mut reporter = progress::Reporter::new(quiet);
    let outcome = run_observed(text, options, data, observers, &mut |p: Progress| reporter.update("run", p));
    reporter.finish();
    outcome
}

/// `result.json` (the calls were streamed into `calls.jsonl` during the run).
fn write_outputs(output: &RunOutput, out: &Path) -> std::io::Result<()> {
    std::fs::write(out.join("result.json"), output.result_json())
}

/// One JSONL file per client.
fn export_workload(output: &RunOutput, dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (client, requests) in &output.workloads {
        let mut file = BufWriter::new(File::create(dir.join(format!("{client}.jsonl")))?);
        for request in requests {
            serde_json::to_writer(&mut file, request)?;
            file.write_all(b"\n")?;
        }
        file.flush()?;
        eprintln!("wrote {}", dir.join(format!("{client}.jsonl")).display());
    }
    Ok(())
}

fn compare_configs(a: &Path, b: &Path, options: RunOptions, data: &CostData) -> ExitCode {
    let read = |path: &Path| {
        std::fs::read_to_string(path)
            .map_err(|e| format!("{}: cannot read the scenario: {e}", path.display()))
    };
    let (text_a, text_b) = match (read(a), read(b)) {
        (Ok(text_a), Ok(text_b)) => (text_a, text_b),
        (Err(message), _) | (_, Err(message)) => return fail(2, message),
    };
    // Each scenario's files are found next to it.
    let side_a = blis_actors::Configuration { text: &text_a, base_dir: a.parent().map(Path::to_path_buf) };
    let side_b = blis_actors::Configuration { text: &text_b, base_dir: b.parent().map(Path::to_path_buf) };
    let mut reporter = progress::Reporter::new(false);
    let outcome = blis_actors::compare_configs(&side_a, &side_b, &options, data, &mut |side, p| {
        reporter.update(side, p)
    });
    reporter.finish();
    match outcome {
        Ok((output_a, _, comparisons)) => {
            let replications = output_a.result.replications.len();
            print!(
                "{}",
                compare::render(
                    &a.display().to_string(),
                    &b.display().to_string(),
                    replications,
                    &comparisons
                )
            );
            ExitCode::SUCCESS
        }
        Err(RunError::Input(error)) => fail(2, error),
        Err(error) => fail(1, error),
    }
}

fn baseline(config: &Path, workload: &Path, output: &Path) -> ExitCode {
    let source = config.display().to_string();
    let config = match std::fs::read_to_string(config) {
        Ok(text) => match blis_baseline::BaselineConfig::parse(&source, &text) {
            Ok(config) => config,
            Err(error) => return fail(2, error),
        },
        Err(error) => return fail(2, format_args!("{source}: cannot read the config: {error}")),
    };
    eprintln!("replaying {} against {} in real time", workload.display(), config.url);
    match blis_baseline::run_baseline(&config, workload, output) {
        Ok(summary) => {
            println!(
                "sent {} calls: {} completed, {} timed out, {} dropped; the latest send was {:.1} ms after its scheduled arrival",
                summary.sent,
                summary.completed,
                summary.timed_out,
                summary.dropped,
                summary.max_send_lag_us as f64 / 1e3
            );
            eprintln!("wrote {}", output.display());
            ExitCode::SUCCESS
        }
        Err(error @ blis_baseline::BaselineError::Input(_)) => fail(2, error),
        Err(error) => fail(1, error),
    }
}

fn compare_runs(specs: &[String], percentiles: &[f64], json: bool) -> ExitCode {
    let comparison = compare_runs::read_runs(specs)
        .and_then(|runs| blis_actors::calls_comparison::compare_runs(&runs, percentiles));
    match comparison {
        Ok(comparison) if json => {
            println!("{}", serde_json::to_string_pretty(&comparison).expect("comparisons serialise"));
            ExitCode::SUCCESS
        }
        Ok(comparison) => {
            print!("{}", compare_runs::render(&comparison));
            ExitCode::SUCCESS
        }
        Err(error) => fail(2, error),
    }
}

fn trace_check(file: &Path) -> ExitCode {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(error) => return fail(2, format_args!("{}: cannot read the trace: {error}", file.display())),
    };
    let violations = blis_kernel::timeline::check(&text);
    if violations.is_empty() {
        println!("{}: ok", file.display());
        return ExitCode::SUCCESS;
    }
    for violation in violations.iter().take(50) {
        println!("{}: {violation}", file.display());
    }
    if violations.len() > 50 {
        println!("{}: … {} more", file.display(), violations.len() - 50);
    }
    ExitCode::FAILURE
}

fn replay(file: &Path, host: HostKind, data: &CostData) -> ExitCode {
    let recorded = match File::open(file)
        .map_err(|e| e.to_string())
        .and_then(|f| RecordedRun::read(f).map_err(|e| e.to_string()))
    {
        Ok(recorded) => recorded,
        Err(error) => return fail(2, format_args!("{}: {error}", file.display())),
    };
    let inputs: replay::Inputs = match serde_json::from_str(&recorded.inputs) {
        Ok(inputs) => inputs,
        Err(error) => {
            return fail(
                2,
                format_args!("{}: the recorded inputs are not readable: {error}", file.display()),
            );
        }
    };
    if inputs.blis_actor_version != env!("CARGO_PKG_VERSION") {
        return fail(
            2,
            format_args!(
                "{}: recorded by blis-actor {}, this is {}: a replay would not be comparable",
                file.display(),
                inputs.blis_actor_version,
                env!("CARGO_PKG_VERSION")
            ),
        );
    }
    if (&inputs.catalog_sha256, &inputs.registry_sha256) != (&data.catalog_sha256, &data.registry_sha256) {
        return fail(
            2,
            format_args!(
                "{}: recorded with other cost-model data (catalog {}, registry {}); give the same --catalog, --registry and --model-config",
                file.display(),
                inputs.catalog_sha256,
                inputs.registry_sha256
            ),
        );
    }
    // The re-run reads the workload files the recording carries, laid out in a folder of its
    // own; a recording without files reads them beside itself.
    let carried = std::env::temp_dir().join(format!("blis-actor-replay-{}", std::process::id()));
    let base_dir = if inputs.files.is_empty() {
        file.parent().map(Path::to_path_buf)
    } else {
        if let Err(message) = replay::materialise(&inputs.files, &carried) {
            let _ = std::fs::remove_dir_all(&carried);
            return fail(2, format_args!("{}: {message}", file.display()));
        }
        Some(carried.clone())
    };
    let recorded_count = recorded.deliveries.len();
    let check: Box<dyn Observer<ClusterMessage>> =
        Box::new(ReplayCheck::<ClusterMessage>::new(recorded.deliveries));
    let options = RunOptions {
        seed: inputs.seed,
        host,
        base_dir,
        export_workload: false,
        export_token_ids: false,
        replications: inputs.replications,
        threads: None,
        build: None,
        coefficient_spread: false,
        calls: CallSelection::None,
        calls_path: None,
        calls_digest: CallsDigest::Computed,
        faithful_steps: false,
    };
    let outcome = run_observed(&inputs.scenario, options, data, vec![check], &mut |_| {});
    let _ = std::fs::remove_dir_all(&carried);
    let (output, observers) = match outcome {
        Ok(done) => done,
        Err(error) => {
            return fail(1, format_args!("{}: the recorded run does not run: {error}", file.display()));
        }
    };
    let check = downcast::<ReplayCheck<ClusterMessage>>(observers.into_iter().next());
    if let Some(d) = check.outcome() {
        println!("replay diverged at delivery {} (instant {}, actor {}):", d.index, d.instant, d.actor);
        println!("  recorded: {}", d.recorded);
        println!("  replayed: {}", d.replayed);
        return ExitCode::FAILURE;
    }
    let digest = replay::trailer(&output.comparable_digest().expect("a replay computes the calls' digest"));
    match recorded.trailer {
        Some(trailer) if trailer == digest => {
            println!("replay matched all {recorded_count} deliveries and the comparable result ({digest})");
            ExitCode::SUCCESS
        }
        Some(trailer) => {
            println!("replay matched all {recorded_count} deliveries but the comparable result differs:");
            println!("  recorded: {trailer}");
            println!("  replayed: {digest}");
            ExitCode::FAILURE
        }
        None => fail(2, format_args!("{}: the recording has no trailer (it did not finish)", file.display())),
    }
}
