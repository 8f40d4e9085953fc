//! A checked run: one replication of a scenario with every invariant checked after every
//! instant (the [`Checker`] and the actors' own checks), the end-of-run checks of request
//! conservation and progress, and a rerun that must give the same outputs.

use std::any::Any;

use blis_contracts::{CallRecord, Fate, Scenario};
use blis_costmodel::CostData;
use blis_kernel::{HostKind, KernelError};

use super::checker::{Checker, CheckerReport};
use crate::assembly::{AssemblyOptions, Fault};
use crate::calls_out::{CallSelection, CallsDigest, CallsOut};
use crate::experiment::replication::{Accounting, ReplicationRun, run_replication};
use crate::run::RunError;

/// How to run a checked run.
#[derive(Clone, Copy, Debug, Default)]
pub struct CheckOptions {
    /// A fault to inject, to show a check catches it.
    pub fault: Option<Fault>,
    /// Whether to rerun unchecked (on the task host for every fourth seed, walking every vLLM
    /// request every step for every odd one) and compare (I10).
    pub determinism: bool,
}

/// What a checked run found.
#[derive(Clone, Debug, Default)]
pub struct CheckedRun {
    /// Distinct instants checked.
    pub instants: u64,
    /// Calls that arrived.
    pub calls: u64,
    /// How the run ended: `settled`, `horizon`, `overloaded` or `stopped` (at a violation).
    pub ending: &'static str,
    /// Broken invariants, each starting with its number.
    pub violations: Vec<String>,
}

/// The header of a swarm run's calls, which are kept in memory and never written.
fn swarm_header() -> blis_contracts::CallsHeader {
    blis_contracts::CallsHeader {
        calls: blis_contracts::CALLS_SCHEMA.to_owned(),
        writer: blis_contracts::Writer::Run,
        blis_actor_version: env!("CARGO_PKG_VERSION").to_owned(),
        server: None,
        pools: Vec::new(),
        workload_sha256: String::new(),
    }
}

/// Run `scenario` once with seed `seed`, every invariant checked.
pub fn run_checked(
    scenario: &Scenario,
    seed: u64,
    data: &CostData,
    options: CheckOptions,
) -> Result<CheckedRun, blis_contracts::FieldError> {
    let assembly = AssemblyOptions {
        host: HostKind::Inline,
        base_dir: ".".into(),
        keep_released: false,
        released_token_ids: false,
        fault: options.fault,
        draw_ahead: false,
        lane_threads: 1,
        faithful_steps: false,
    };
    // Every call record, kept in memory in file order (no file is written).
    let mut calls_out = CallsOut::new(CallSelection::All, None, seed, swarm_header(), CallsDigest::Computed)
        .expect("no file to open");
    let checker: crate::run::Observers = vec![Box::new(Checker::for_run())];
    let outcome = run_replication(
        scenario,
        0,
        seed,
        data,
        &assembly,
        checker,
        Some(&mut calls_out),
        Accounting::Inline,
        &mut |_| {},
    );
    let (run, observers) = match outcome {
        Ok(done) => done,
        Err(RunError::Input(error)) => return Err(error),
        Err(RunError::Stalled { instance, at_us, reason }) => {
            return Ok(failed(format!("I9 {instance} stalled at {:.6} s: {reason}", at_us as f64 / 1e6)));
        }
        Err(RunError::Kernel(error @ KernelError::RoundLimit { .. })) => {
            return Ok(failed(format!("I3 {error}")));
        }
        Err(RunError::Kernel(error)) => return Ok(failed(format!("I1 the kernel failed: {error}"))),
        Err(RunError::Output(error)) => {
            return Ok(failed(format!("I8 the call records could not be kept: {error}")));
        }
    };
    let (_, calls, calls_digest) = calls_out.finish().expect("records kept in memory");
    let report = observers
        .into_iter()
        .next()
        .and_then(|o| (o as Box<dyn Any>).downcast::<Checker>().ok())
        .map(|c| c.report().clone())
        .expect("the checker is the first observer");
    let mut checked = CheckedRun {
        instants: report.instants,
        calls: calls.len() as u64,
        ending: ending(scenario, &run),
        violations: report.violations.clone(),
    };
    if !checked.violations.is_empty() {
        checked.ending = "stopped";
        return Ok(checked);
    }
    end_checks(scenario, &run, &calls, &report, &mut checked.violations);
    if options.determinism && checked.violations.is_empty() {
        let host = if seed.is_multiple_of(4) { HostKind::Tasks } else { HostKind::Inline };
        let faithful_steps = !seed.is_multiple_of(2);
        let again = AssemblyOptions { host, faithful_steps, ..assembly };
        let path = if faithful_steps { "walking every vLLM request" } else { "with the decode cohort" };
        let mut rerun_calls =
            CallsOut::new(CallSelection::None, None, seed, swarm_header(), CallsDigest::Computed)
                .expect("no file to open");
        let rerun = run_replication(
            scenario,
            0,
            seed,
            data,
            &again,
            Vec::new(),
            Some(&mut rerun_calls),
            Accounting::Inline,
            &mut |_| {},
        );
        let rerun_digest = rerun_calls.finish().ok().and_then(|(_, _, digest)| digest);
        match rerun {
            Ok((rerun, _))
                if rerun.fates == run.fates && rerun_digest.is_some() && rerun_digest == calls_digest => {}
            Ok(_) => checked
                .violations
                .push(format!("I10 an unchecked rerun on the {host:?} host {path} gave other outputs")),
            Err(error) => checked
                .violations
                .push(format!("I10 an unchecked rerun on the {host:?} host {path} failed: {error}")),
        }
    }
    Ok(checked)
}

/// A run that ended at a violation the run itself reported.
fn failed(violation: String) -> CheckedRun {
    CheckedRun { ending: "stopped", violations: vec![violation], ..CheckedRun::default() }
}

/// How the run ended.
fn ending(scenario: &Scenario, run: &ReplicationRun) -> &'static str {
    if run.stopped_overloaded_us.is_some() {
        "overloaded"
    } else if scenario.horizon_s.is_some() && run.fates.in_flight_at_horizon + run.fates.queued_at_horizon > 0
    {
        "horizon"
    } else {
        "settled"
    }
}

/// I8 and I9, once the run is over.
fn end_checks(
    scenario: &Scenario,
    run: &ReplicationRun,
    calls: &[CallRecord],
    report: &CheckerReport,
    violations: &mut Vec<String>,
) {
    let f = &run.fates;
    if !f.conserved() || f.arrivals != calls.len() as u64 {
        violations.push(format!("I8 {} calls arrived but their fates are {f:?}", calls.len()));
    }
    let mut names: Vec<&str> = calls.iter().map(|c| c.request_id.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    if names.len() != calls.len() {
        violations.push(format!("I8 {} call records name only {} calls", calls.len(), names.len()));
    }
    let never_sent = calls.iter().filter(|c| c.fate == Fate::NotStarted).count() as u64;
    // A call sent in the last instant before a horizon may not have reached the router.
    let settled = f.in_flight_at_horizon + f.queued_at_horizon == 0;
    if report.sent + never_sent > f.arrivals || (settled && report.sent + never_sent != f.arrivals) {
        violations.push(format!(
            "I8 {} calls were sent and {never_sent} never started, but {} arrived",
            report.sent, f.arrivals
        ));
    }
    if report.answered < f.completed + f.dropped || report.answered > f.completed + f.dropped + f.timed_out {
        violations.push(format!(
            "I8 clients received {} answers for {} completed, {} dropped and {} timed-out calls",
            report.answered, f.completed, f.dropped, f.timed_out
        ));
    }
    if scenario.horizon_s.is_none()
        && run.stopped_overloaded_us.is_none()
        && f.in_flight_at_horizon + f.queued_at_horizon > 0
    {
        violations.push(format!(
            "I9 the run ended with no horizon and {} calls in flight and {} queued: a deadlock",
            f.in_flight_at_horizon, f.queued_at_horizon
        ));
    }
}
