//! The `swarm` and `fuzz` subcommands: many seeded checked runs (or fuzzed inputs), one line
//! per failure that reproduces it, and the totals. Each seed's wall time is bounded here (the
//! second of the project's documented wall-clock exceptions, with `progress.rs`): it decides
//! nothing in a simulation, only whether a seed took too long.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use blis_actors::Fault;
use blis_actors::swarm::fuzz::{FuzzOutcome, fuzz_one};
use blis_actors::swarm::{CheckOptions, SwarmSummary, reproduction, run_seed};
use blis_costmodel::CostData;

/// The wall time a swarm seed or a fuzzed input may take before it counts as a hang.
const WALL_BOUND: Duration = Duration::from_secs(60);

/// Run swarm seeds `seed .. seed + count`; exit 1 if any breaks an invariant.
#[allow(clippy::disallowed_methods, reason = "wall time bounds a seed's run; it decides nothing in it")]
pub fn swarm(seed: u64, count: u64, fault: Option<Fault>, determinism: bool, data: &CostData) -> ExitCode {
    let options = CheckOptions { fault, determinism };
    let started = Instant::now();
    let mut summary = SwarmSummary::default();
    let mut slow = Vec::new();
    for s in seed..seed.saturating_add(count) {
        let at = Instant::now();
        let outcome = run_seed(s, data, options);
        if let Some(first) = outcome.run.violations.first() {
            println!("FAIL {}  # {first}", reproduction(s, fault));
        }
        if at.elapsed() > WALL_BOUND {
            println!(
                "SLOW {}  # over the {} s wall-time bound",
                reproduction(s, fault),
                WALL_BOUND.as_secs()
            );
            slow.push(s);
        }
        summary.add(&outcome, fault);
        if summary.seeds.is_multiple_of(1000) {
            eprintln!(
                "{} seeds, {} failures, {:.0} s",
                summary.seeds,
                summary.failures.len(),
                started.elapsed().as_secs_f64()
            );
        }
    }
    println!(
        "swarm seeds {seed}..{}: {} seeds, {} instants checked, {} calls, endings {:?}, violations: {}, over the wall-time bound: {}, {:.1} s",
        seed.saturating_add(count),
        summary.seeds,
        summary.instants,
        summary.calls,
        summary.endings,
        summary.failures.len(),
        slow.len(),
        started.elapsed().as_secs_f64()
    );
    if summary.failures.is_empty() && slow.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) }
}

/// Fuzz inputs `seed .. seed + count`; exit 1 on any panic, unnamed refusal or hang.
#[allow(clippy::disallowed_methods, reason = "wall time bounds an input's run; it decides nothing in it")]
pub fn fuzz(seed: u64, count: u64, show: bool, data: &CostData) -> ExitCode {
    if show {
        for s in seed..seed.saturating_add(count) {
            let (kind, scenario, file) = blis_actors::swarm::fuzz::input(s);
            println!("# fuzz seed {s}: {kind}\n{scenario}");
            if let Some((name, content)) = file {
                println!("# {name}\n{content}");
            }
        }
        return ExitCode::SUCCESS;
    }
    let dir = std::env::temp_dir().join(format!("blis-actor-fuzz-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("error: cannot create {}: {e}", dir.display());
        return ExitCode::from(2);
    }
    let started = Instant::now();
    let (mut refused, mut simulated, mut cut, mut failures) = (0u64, 0u64, 0u64, 0u64);
    for s in seed..seed.saturating_add(count) {
        let at = Instant::now();
        match fuzz_one(s, data, &dir) {
            FuzzOutcome::Refused => refused += 1,
            FuzzOutcome::Simulated => simulated += 1,
            FuzzOutcome::Cut => cut += 1,
            FuzzOutcome::Panicked(message) | FuzzOutcome::Unnamed(message) => {
                failures += 1;
                println!("FAIL blis-actor fuzz --seed {s} --count 1  # {message}");
            }
        }
        if at.elapsed() > WALL_BOUND {
            failures += 1;
            println!(
                "HANG blis-actor fuzz --seed {s} --count 1  # over the {} s wall-time bound",
                WALL_BOUND.as_secs()
            );
        }
        if (s - seed + 1).is_multiple_of(10_000) {
            eprintln!(
                "{} inputs, {failures} failures, {:.0} s",
                s - seed + 1,
                started.elapsed().as_secs_f64()
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "fuzz seeds {seed}..{}: {count} inputs, {refused} refused, {simulated} simulated, {cut} cut at the round budget, panics/aborts/hangs: {failures}, {:.1} s",
        seed.saturating_add(count),
        started.elapsed().as_secs_f64()
    );
    if failures == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) }
}
