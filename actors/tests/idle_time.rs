//! Simulated idle time is free: the run jumps to the next event, and progress is reported per
//! amount of work done, never per simulated second.

use blis_actors::{RunOptions, run};

mod common;

#[test]
fn a_run_with_weeks_between_requests_reports_progress_per_work_not_per_simulated_second() {
    // 20 requests about 11.6 simulated days apart: some 2·10⁷ simulated seconds, almost all idle.
    let workload = "\n  clients:\n    - name: a\n      requests: 20\n      arrival: { process: poisson, rate_per_s: 1e-6 }\n      input_tokens: { dist: constant, value: 100 }\n      output_tokens: { dist: constant, value: 10 }\nframe: { replications: 1 }\n";
    let text = common::one_pool(Some(3), None, 1, "", workload);
    let mut reports = 0u64;
    let output = run(&text, RunOptions::default(), &mut |_| reports += 1).unwrap();
    let end_s = output.result.simulation.end_time_us as f64 / 1e6;
    assert!(end_s > 5e6, "the run spans {end_s} simulated seconds");
    assert_eq!(output.result.fates.completed, 20);
    // A few hundred rounds of work: at most one report per 4096 rounds.
    let rounds = output.result.simulation.rounds;
    assert!(reports <= rounds / 4096 + 1, "{reports} progress reports for {rounds} rounds over {end_s} s");
}
