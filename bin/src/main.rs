//! `blis-actor`: the command line of the simulator.
//!
//! Parse the arguments, load the scenario, run it, write the outputs. Deterministic outputs go
//! to files and stdout; progress and logs go to stderr.

mod summary;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use blis_actors::{Progress, RunError, RunOptions, RunOutput};
use blis_kernel::HostKind;
use clap::{Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};

/// The default scenario, compiled in.
const DEFAULT_SCENARIO: &str = include_str!("../../fixtures/scenarios/default.yaml");

#[derive(Parser)]
#[command(name = "blis-actor", version, about = "Simulate LLM serving clusters in seconds")]
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
        /// Directory for result.json and calls.jsonl.
        #[arg(long, default_value = "out")]
        out: PathBuf,
        /// Kernel host: inline calls (fast) or one tokio task per actor (parity check).
        #[arg(long, value_enum, default_value_t = Host::Inline)]
        host: Host,
        /// No progress bar.
        #[arg(long)]
        quiet: bool,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Host {
    Inline,
    Tasks,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Run { scenario, seed, out, host, quiet } => {
            let host = match host {
                Host::Inline => HostKind::Inline,
                Host::Tasks => HostKind::Tasks,
            };
            run(scenario.as_deref(), RunOptions { seed, host }, &out, quiet)
        }
    }
}

fn run(scenario: Option<&Path>, options: RunOptions, out: &Path, quiet: bool) -> ExitCode {
    let (source, text) = match scenario {
        None => ("default scenario".to_owned(), DEFAULT_SCENARIO.to_owned()),
        Some(path) => match std::fs::read_to_string(path) {
            Ok(text) => (path.display().to_string(), text),
            Err(error) => {
                eprintln!("error: {}: cannot read the scenario: {error}", path.display());
                return ExitCode::from(2);
            }
        },
    };
    tracing::info!(scenario = %source, "running");
    let bar = if quiet { ProgressBar::hidden() } else { ProgressBar::new(0) };
    bar.set_style(
        ProgressStyle::with_template(
            "{bar:40} {pos}/{len} requests answered, {msg} simulated, {elapsed} wall",
        )
        .expect("the progress template is valid"),
    );
    let outcome = blis_actors::run(&text, options, &mut |p: Progress| {
        bar.set_length(p.total);
        bar.set_position(p.answered);
        bar.set_message(format!("{:.1} s", p.simulated.as_secs_f64()));
    });
    bar.finish_and_clear();
    match outcome {
        Ok(output) => match write_outputs(&output, out) {
            Ok(()) => {
                print!("{}", summary::render(&output));
                use std::io::Write;
                let _ = std::io::stdout().flush();
                eprintln!(
                    "wrote {} and {}",
                    out.join("result.json").display(),
                    out.join("calls.jsonl").display()
                );
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("error: {}: cannot write the outputs: {error}", out.display());
                ExitCode::FAILURE
            }
        },
        Err(RunError::Input(error)) => {
            eprintln!("error: {source}: {error}");
            ExitCode::from(2)
        }
        Err(error @ RunError::Kernel(_)) => {
            eprintln!("error: {source}: {error}");
            ExitCode::FAILURE
        }
    }
}

fn write_outputs(output: &RunOutput, out: &Path) -> std::io::Result<()> {
    use std::io::Write;
    std::fs::create_dir_all(out)?;
    let mut result = serde_json::to_vec_pretty(&output.result).map_err(std::io::Error::other)?;
    result.push(b'\n');
    std::fs::write(out.join("result.json"), result)?;
    let mut calls = std::io::BufWriter::new(std::fs::File::create(out.join("calls.jsonl"))?);
    for call in &output.calls {
        serde_json::to_writer(&mut calls, call).map_err(std::io::Error::other)?;
        calls.write_all(b"\n")?;
    }
    calls.flush()
}
