//! Reliability at scale: the numbered invariant registry, checked runs that check every
//! invariant after every instant, a seeded scenario swarm and a structure-aware fuzzer.
//!
//! A swarm seed determines one random valid scenario ([`generator::scenario`]); a checked run
//! ([`checked::run_checked`]) simulates it with the [`checker::Checker`] attached and every
//! actor's own check on, then checks conservation, progress and determinism. A failure is
//! printed as the one line that reproduces it ([`reproduction`]).

pub mod checked;
pub mod checker;
pub mod fuzz;
pub mod generator;
pub mod registry;

use blis_contracts::Scenario;
use blis_costmodel::CostData;

pub use checked::{CheckOptions, CheckedRun, run_checked};
pub use registry::{INVARIANTS, Invariant, invariants_markdown};

use crate::assembly::Fault;

/// What one swarm seed did.
#[derive(Clone, Debug)]
pub struct SeedOutcome {
    /// The swarm seed.
    pub seed: u64,
    /// The checked run (a refused generated scenario is a violation too).
    pub run: CheckedRun,
}

impl SeedOutcome {
    /// Whether every invariant held.
    pub fn passed(&self) -> bool {
        self.run.violations.is_empty()
    }
}

/// The command that reproduces swarm seed `seed` (with `fault` injected, if any).
pub fn reproduction(seed: u64, fault: Option<Fault>) -> String {
    let fault = match fault {
        Some(Fault::LeakKvBlock) => " --fault leak-kv-block",
        None => "",
    };
    format!("blis-actor swarm --seed {seed} --count 1{fault}")
}

/// Generate and check the scenario of swarm seed `seed`.
pub fn run_seed(seed: u64, data: &CostData, options: CheckOptions) -> SeedOutcome {
    let text = generator::scenario(seed);
    let refused = |e: blis_contracts::FieldError| CheckedRun {
        ending: "refused",
        violations: vec![format!("I11 the generated scenario was refused: {e}")],
        ..CheckedRun::default()
    };
    let run = match Scenario::parse(&text) {
        Ok(scenario) => {
            let run_seed = scenario.seed.unwrap_or(crate::DEFAULT_SEED);
            run_checked(&scenario, run_seed, data, options).unwrap_or_else(refused)
        }
        Err(e) => refused(e),
    };
    SeedOutcome { seed, run }
}

/// A swarm's totals.
#[derive(Clone, Debug, Default)]
pub struct SwarmSummary {
    /// Seeds run.
    pub seeds: u64,
    /// Instants checked over all of them.
    pub instants: u64,
    /// Calls simulated.
    pub calls: u64,
    /// Seeds that broke an invariant, each with its reproduction line and first violation.
    pub failures: Vec<String>,
    /// How the runs ended: settled, horizon, overloaded.
    pub endings: std::collections::BTreeMap<&'static str, u64>,
}

impl SwarmSummary {
    /// Add one seed's outcome.
    pub fn add(&mut self, outcome: &SeedOutcome, fault: Option<Fault>) {
        self.seeds += 1;
        self.instants += outcome.run.instants;
        self.calls += outcome.run.calls;
        *self.endings.entry(outcome.run.ending).or_default() += 1;
        if let Some(first) = outcome.run.violations.first() {
            self.failures.push(format!("{}  # {first}", reproduction(outcome.seed, fault)));
        }
    }
}

/// Run swarm seeds `first .. first + count`, telling `each` about every outcome.
pub fn run_swarm(
    first: u64,
    count: u64,
    data: &CostData,
    options: CheckOptions,
    each: &mut dyn FnMut(&SeedOutcome),
) -> SwarmSummary {
    let mut summary = SwarmSummary::default();
    for seed in first..first.saturating_add(count) {
        let outcome = run_seed(seed, data, options);
        each(&outcome);
        summary.add(&outcome, options.fault);
    }
    summary
}
