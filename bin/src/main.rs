//! `blis-actor`: the command line of the simulator.
//!
//! Until the first cluster slice lands, `run` runs the kernel's worked example, an M/M/1 queue,
//! and compares its mean wait with queueing theory.

use blis_kernel::toys::mm1::{self, Mm1Config};
use blis_kernel::{Assembly, HostKind, Streams};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "blis-actor", version, about = "Simulate LLM serving clusters")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the M/M/1 example (λ = 1/ms, μ = 1/0.7 ms, 100,000 jobs).
    Run {
        /// The run seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run { seed } => {
            let config = Mm1Config { mean_gap_us: 1_000.0, mean_service_us: 700.0, jobs: 100_000 };
            let mut assembly = Assembly::new();
            let ids = match mm1::assemble(&mut assembly, config, Streams::new(seed)) {
                Ok(ids) => ids,
                Err(error) => {
                    eprintln!("error: {error}");
                    return std::process::ExitCode::FAILURE;
                }
            };
            let outcome = assembly.build(HostKind::Inline).map_err(|e| e.to_string()).and_then(|mut sim| {
                sim.run().map_err(|e| e.to_string())?;
                Ok(sim.finish())
            });
            match outcome {
                Ok(mut finished) => {
                    let server =
                        finished.take_actor::<mm1::Server>(ids.server).expect("the server is an mm1::Server");
                    let waits = server.waits_us();
                    let mean = waits.iter().map(|&w| w as f64).sum::<f64>() / waits.len() as f64;
                    println!(
                        "M/M/1, {} jobs: mean wait {:.1} µs (analytic ρ/(μ−λ) = {:.1} µs)",
                        waits.len(),
                        mean,
                        config.analytic_mean_wait_us()
                    );
                    std::process::ExitCode::SUCCESS
                }
                Err(error) => {
                    eprintln!("error: {error}");
                    std::process::ExitCode::FAILURE
                }
            }
        }
    }
}
