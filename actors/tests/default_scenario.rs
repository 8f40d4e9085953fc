//! The default scenario end to end: byte-identical outputs run after run and on both hosts,
//! another seed changes them, and every request has exactly one fate.

use blis_actors::{RunOptions, RunOutput, run};
use blis_kernel::HostKind;

const DEFAULT: &str = include_str!("../../fixtures/scenarios/default.yaml");

/// `result.json` and `calls.jsonl` exactly as the command line writes them.
fn bytes(output: &RunOutput) -> (Vec<u8>, Vec<u8>) {
    (output.result_json(), output.calls_jsonl())
}

fn run_default(seed: Option<u64>, host: HostKind) -> RunOutput {
    run(
        DEFAULT,
        RunOptions {
            seed,
            host,
            base_dir: None,
            export_workload: false,
            replications: Some(1),
            threads: None,
            build: None,
            coefficient_spread: false,
            ..RunOptions::default()
        },
        &mut |_| {},
    )
    .expect("the default scenario runs")
}

#[test]
fn the_default_scenario_is_byte_identical_across_runs_and_hosts_and_moves_with_the_seed() {
    let first = run_default(None, HostKind::Inline);
    let reference = bytes(&first);
    assert_eq!(bytes(&run_default(None, HostKind::Inline)), reference, "run twice");
    assert_eq!(bytes(&run_default(None, HostKind::Tasks)), reference, "inline vs tasks host");
    let other = bytes(&run_default(Some(2), HostKind::Inline));
    assert_ne!(other.0, reference.0, "another seed must change result.json");
    assert_ne!(other.1, reference.1, "another seed must change calls.jsonl");

    let fates = first.result.fates;
    assert_eq!(fates.arrivals, 3_000);
    assert!(fates.conserved());
    assert_eq!(fates.completed, 3_000, "the default load is served in full");
    assert_eq!(first.calls.len(), 3_000);
    assert_eq!(first.result.engines.len(), 1);
    assert_eq!(first.result.engines[0].version, "0.15.1");
}
