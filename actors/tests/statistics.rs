//! The experimental frame in whole runs: replications independent of the thread count,
//! intervals over replications, a steady-state run's warm-up and batch means, overload that
//! withholds latency figures, acceptance conditions that withhold everything, and comparisons
//! of two configurations on common random numbers.

use blis_actors::stats::compare::Verdict;
use blis_actors::{CallSelection, CallsDigest, Configuration, RunOptions, RunOutput, compare_configs, run};
use blis_contracts::{Better, RunKind};
use blis_costmodel::CostData;

fn scenario(frame: &str, horizon: &str, replicas: u32, rate: f64, requests: u64) -> String {
    format!(
        r#"
seed: 4
{horizon}
frame: {{ {frame} }}
cluster:
  router: {{ policy: round-robin }}
  pools:
    - name: p
      replicas: {replicas}
      hardware: {{ chip: H100-SXM }}
      model: Llama-3.1-8B
      engine: {{ kind: vllm, version: "0.15.1", args: {{ max_model_len: 8192 }} }}
workload:
  clients:
    - name: a
      requests: {requests}
      arrival: {{ process: poisson, rate_per_s: {rate} }}
      input_tokens: {{ dist: uniform, min: 100, max: 3000 }}
      output_tokens: {{ dist: uniform, min: 20, max: 400 }}
"#
    )
}

fn run_with(text: &str, threads: usize) -> RunOutput {
    run(text, RunOptions { threads: Some(threads), ..RunOptions::default() }, &mut |_| {}).unwrap()
}

#[test]
fn replications_are_identical_whatever_the_thread_count_and_give_intervals() {
    let text = scenario("replications: 4", "", 1, 4.0, 150);
    let (one, two) = (run_with(&text, 1), run_with(&text, 2));
    assert_eq!(one.result_json(), two.result_json());
    assert_eq!(one.calls_jsonl(), two.calls_jsonl());
    let result = &one.result;
    assert_eq!(result.replications.len(), 4);
    assert_eq!(result.frame.seeds[0], 4, "replication 0 runs on the scenario seed");
    let seeds = &result.frame.seeds;
    assert!(seeds.windows(2).all(|w| w[0] != w[1]));
    let ttft = result.estimates["ttft_ms.mean"];
    assert_eq!(ttft.n, 4);
    let half = ttft.half_width.expect("four replications give an interval");
    // The interval is the t interval of the four replication means.
    let means: Vec<f64> = result.replications.iter().map(|r| r.metrics.ttft_ms.unwrap().mean).collect();
    let mean = means.iter().sum::<f64>() / 4.0;
    let sd = (means.iter().map(|m| (m - mean).powi(2)).sum::<f64>() / 3.0).sqrt();
    assert!((ttft.mean - mean).abs() < 1e-9);
    assert!((half - 3.182_446_305 * sd / 2.0).abs() < 1e-6 * half.max(1.0), "{half}");
    // Replication 0's own figures are the Result's metrics.
    assert_eq!(result.metrics.as_ref().unwrap(), &result.replications[0].metrics);
}

#[test]
fn a_steady_state_run_discards_a_warm_up_and_uses_batch_means() {
    let text = scenario("kind: steady-state", "horizon_s: 600", 1, 6.0, 100_000);
    let output = run_with(&text, 2);
    let result = &output.result;
    assert_eq!(result.frame.kind, RunKind::SteadyState);
    assert_eq!(result.replications.len(), 1);
    let ttft = result.estimates["ttft_ms.mean"];
    assert_eq!(ttft.n, 20, "twenty batch means");
    assert!(ttft.half_width.is_some());
    assert!(!result.replications[0].overload.overloaded);
    let cut = result.replications[0].warm_up_before_us;
    assert_eq!(result.frame.warm_up.discarded_before_us, vec![cut]);
    assert!(cut < 300_000_000, "the warm-up is a small part of the run: {cut} µs");
}

#[test]
fn an_overloaded_run_reports_throughput_but_withholds_latencies() {
    // One instance offered ~4x what it can serve, cut at a horizon.
    let text = scenario("replications: 2", "horizon_s: 120", 1, 60.0, 100_000);
    let output = run_with(&text, 2);
    let result = &output.result;
    assert!(
        result.replications.iter().all(|r| r.overload.overloaded),
        "{:?}",
        result.replications[0].overload
    );
    let metrics = result.metrics.as_ref().unwrap();
    assert!(metrics.ttft_ms.is_none() && metrics.e2e_ms.is_none());
    assert!(metrics.output_tokens_per_s > 0.0);
    assert!(
        !result.estimates.contains_key("ttft_ms.mean")
            && result.estimates.contains_key("output_tokens_per_s")
    );
    assert!(
        result.withheld.iter().any(|w| w.starts_with("latency figures: overloaded")),
        "{:?}",
        result.withheld
    );
    // Without overload (a tenth of the load) nothing is withheld.
    let calm = run_with(&scenario("replications: 2", "horizon_s: 120", 1, 6.0, 100_000), 2);
    assert!(calm.result.withheld.is_empty() && calm.result.estimates.contains_key("ttft_ms.p99"));
}

#[test]
fn a_failed_acceptance_condition_withholds_every_figure() {
    // A 60 s horizon on 2,000 requests at 20/s leaves most unfinished.
    let text = scenario(
        "replications: 2, acceptance: { min_completed_fraction: 0.99, allow_overload: true }",
        "horizon_s: 60",
        1,
        20.0,
        2_000,
    );
    let result = run_with(&text, 2).result;
    assert!(result.metrics.is_none() && result.estimates.is_empty());
    assert!(result.withheld[0].starts_with("all figures: only"), "{:?}", result.withheld);
    let condition =
        result.frame.acceptance.iter().find(|a| a.condition.contains("of calls complete")).unwrap();
    assert!(!condition.met);
}

#[test]
fn one_replication_with_shared_prefixes_is_identical_whatever_the_thread_count() {
    // With a core to spare, the client's drawing thread keys each prompt's blocks ahead and the
    // engines copy those keys (debug builds check each copied key against its hash); the hits
    // they find must be the ones hashing finds.
    let text = scenario("replications: 1", "", 2, 6.0, 200).replace(
        "      input_tokens:",
        "      shared_prefix: { groups: 3, tokens: 700 }\n      input_tokens:",
    );
    let (one, two) = (run_with(&text, 1), run_with(&text, 2));
    assert_eq!(one.result_json(), two.result_json());
    assert_eq!(one.calls_jsonl(), two.calls_jsonl());
    let cached: u64 = one.calls.iter().map(|c| u64::from(c.cached_tokens)).sum();
    assert!(cached > 100 * 700, "the shared prefixes hit: {cached} cached tokens");
}

#[test]
fn two_configurations_are_judged_on_paired_replications() {
    let one = scenario("replications: 4", "", 1, 5.0, 150);
    let two = scenario("replications: 4", "", 2, 5.0, 150);
    let options = RunOptions { threads: Some(2), ..RunOptions::default() };
    let data = CostData::embedded();
    fn side(text: &str) -> Configuration<'_> {
        Configuration { text, base_dir: None }
    }
    let (_, _, same) = compare_configs(&side(&one), &side(&one), &options, &data, &mut |_, _| {}).unwrap();
    assert!(same.iter().all(|c| c.comparison.verdict == Verdict::NotDistinguished));
    let (_, _, scaled) = compare_configs(&side(&one), &side(&two), &options, &data, &mut |_, _| {}).unwrap();
    let verdict = |name: &str| scaled.iter().find(|c| c.name == name).unwrap().comparison.verdict;
    assert_eq!(verdict("ttft_ms.mean"), Verdict::Better, "a second instance cuts the queueing");
    assert_eq!(verdict("e2e_ms.p99"), Verdict::Better);
    // Two instances share the load, so each holds less KV: lower, which is neither better nor
    // worse (the registry says so).
    let kv = scaled.iter().find(|c| c.name == "kv_utilisation").unwrap();
    assert_eq!(kv.better, Better::Neither);
    assert!(kv.b < kv.a, "{kv:?}");
}

/// One H100 pool serving Llama-3.1-8B with the client `client` (YAML lines under `clients:`).
fn one_client(frame: &str, client: &str) -> String {
    format!(
        "seed: 1\nframe: {{ {frame} }}\ncluster:\n  router: {{ policy: round-robin }}\n  pools:\n    - name: p\n      replicas: 1\n      hardware: {{ chip: H100-SXM }}\n      model: Llama-3.1-8B\n      engine: {{ kind: vllm, version: \"0.15.1\", args: {{}} }}\nworkload:\n  clients:\n    - name: a\n{client}"
    )
}

#[test]
fn long_sessions_on_an_idle_engine_are_not_overloaded() {
    // Sessions of 10-20 turns 30 s apart outlive the 50 s in which they start: the calls in
    // progress ramp up over the whole offered load, while the engine sits at a few % of its KV
    // cache with a flat TTFT. Counting calls in progress called this overloaded.
    let client = "      requests: 100\n      arrival: { process: poisson, rate_per_s: 2 }\n      input_tokens: { dist: uniform, min: 50, max: 200 }\n      output_tokens: { dist: uniform, min: 10, max: 100 }\n      session: { turns: { dist: uniform, min: 10, max: 20 }, think_time_s: { dist: exponential, mean: 30 } }\n";
    let result = run_with(&one_client("replications: 2", client), 2).result;
    for record in &result.replications {
        assert!(!record.overload.overloaded, "{:?}", record.overload);
        assert!(record.fates.completed == record.fates.arrivals);
    }
    assert!(result.instances[0].kv_usage_peak < 0.1, "{:?}", result.instances[0]);
    assert!(result.withheld.is_empty(), "{:?}", result.withheld);
    assert!(result.estimates.contains_key("ttft_ms.p99"));
}

#[test]
fn a_backlog_capped_by_timeouts_is_overloaded_and_says_how_to_report_anyway() {
    // 400 requests/s on one H100 with a 2 s timeout: nearly every call times out, so the
    // outstanding calls stay near rate × timeout instead of growing.
    let client = "      requests: 12000\n      arrival: { process: poisson, rate_per_s: 400 }\n      input_tokens: { dist: uniform, min: 50, max: 500 }\n      output_tokens: { dist: uniform, min: 10, max: 100 }\n      timeout_s: 2\n";
    let result = run_with(&one_client("replications: 1", client), 1).result;
    let overload = &result.replications[0].overload;
    assert!(result.fates.timed_out * 2 > result.fates.arrivals, "{:?}", result.fates);
    assert!(overload.overloaded, "{overload:?}");
    assert!(overload.abandoned_share.is_some_and(|s| s >= 0.5), "{overload:?}");
    let withheld = result.withheld.join("; ");
    assert!(withheld.contains("timed out") && withheld.contains("allow_overload"), "{withheld}");
}

#[test]
fn an_overloaded_run_is_stopped_once_its_backlog_is_large() {
    // 1000 requests/s for a minute on one H100: the backlog grows by hundreds of calls a
    // second; the stop rule ends the run instead of queueing all 60,000.
    let client = "      requests: 60000\n      arrival: { process: poisson, rate_per_s: 1000 }\n      input_tokens: { dist: uniform, min: 50, max: 500 }\n      output_tokens: { dist: uniform, min: 10, max: 100 }\n";
    let result = run_with(&one_client("replications: 1", client), 1).result;
    let overload = &result.replications[0].overload;
    let stopped = overload.stopped_at_us.expect("the stop rule ends the run");
    assert!(overload.overloaded, "{overload:?}");
    assert_eq!(result.simulation.end_time_us, stopped);
    assert!(result.fates.arrivals < 60_000 && result.fates.queued_at_horizon >= 10_000, "{:?}", result.fates);
    assert!(result.withheld.join("; ").contains("stopped at"), "{:?}", result.withheld);
}

#[test]
fn calls_streamed_to_a_file_are_the_calls_kept_in_memory_and_in_end_order() {
    let text = scenario("replications: 2", "", 2, 8.0, 120);
    let kept = run_with(&text, 1);
    let dir = tempfile::Builder::new().prefix("blis-actor-streamed-").tempdir().unwrap();
    let path = dir.path().join("calls.jsonl");
    let options = RunOptions { threads: Some(2), calls_path: Some(path.clone()), ..RunOptions::default() };
    let streamed = run(&text, options, &mut |_| {}).unwrap();
    let written = std::fs::read(&path).unwrap();
    assert!(streamed.calls.is_empty(), "streamed calls are not also kept");
    assert_eq!(written, kept.calls_jsonl());
    assert_eq!(streamed.result_json(), kept.result_json());
    assert!(streamed.comparable_digest().is_some(), "the calls' digest is computed by default");
    assert_eq!(streamed.comparable_digest(), kept.comparable_digest());
    // Requests of one call each are written as they end: by settle time.
    let settled: Vec<u64> = kept.calls.iter().map(|c| c.settled_us.unwrap()).collect();
    assert!(settled.windows(2).all(|w| w[0] <= w[1]), "{settled:?}");
    assert_eq!(kept.calls.len(), 120);
}

#[test]
fn skipping_the_calls_digest_changes_no_written_byte_and_no_kept_call() {
    let text = scenario("replications: 2", "", 2, 8.0, 60);
    let digested = run_with(&text, 1);
    let dir = tempfile::Builder::new().prefix("blis-actor-undigested-").tempdir().unwrap();
    let path = dir.path().join("calls.jsonl");
    let streamed = RunOptions {
        threads: Some(1),
        calls_path: Some(path.clone()),
        calls_digest: CallsDigest::Skipped,
        ..RunOptions::default()
    };
    let undigested = run(&text, streamed, &mut |_| {}).unwrap();
    let written = std::fs::read(&path).unwrap();
    assert_eq!(written, digested.calls_jsonl());
    assert_eq!(undigested.result_json(), digested.result_json());
    assert_eq!(undigested.calls_sha256, None);
    assert_eq!(digested.calls_sha256.as_deref().map(str::len), Some(64));
    let in_memory =
        RunOptions { threads: Some(1), calls_digest: CallsDigest::Skipped, ..RunOptions::default() };
    let kept = run(&text, in_memory, &mut |_| {}).unwrap();
    assert_eq!(kept.calls_jsonl(), digested.calls_jsonl());
}

#[test]
fn one_replication_accounted_on_a_second_thread_writes_the_same_bytes() {
    // With one replication and two threads the second thread tallies and writes replication
    // 0's records; with one thread the simulation does. Every selection: streamed in full, a
    // sample (whose displaced records come back to be freed), none, and kept in memory.
    let text = scenario("replications: 1", "", 2, 8.0, 400);
    let dir = tempfile::Builder::new().prefix("blis-actor-accounted-").tempdir().unwrap();
    let path = |tag: &str| dir.path().join(format!("{tag}.jsonl"));
    for (tag, calls) in
        [("all", CallSelection::All), ("sample", CallSelection::Sample(50)), ("none", CallSelection::None)]
    {
        let with = |threads: usize| {
            let file = path(&format!("{tag}-{threads}"));
            let options = RunOptions {
                threads: Some(threads),
                calls,
                calls_path: Some(file.clone()),
                ..RunOptions::default()
            };
            let out = run(&text, options, &mut |_| {}).unwrap();
            let written = std::fs::read(&file).ok();
            (out.result_json(), written, out.comparable_digest())
        };
        let one = with(1);
        assert!(one == with(2), "{tag}: one thread against two");
        assert!(one == with(3), "{tag}: one thread against three");
    }
    assert_eq!(run_with(&text, 1).calls_jsonl(), run_with(&text, 2).calls_jsonl(), "kept in memory");
}

#[cfg(target_os = "linux")]
#[test]
fn a_calls_file_that_cannot_be_written_fails_the_run_with_its_own_error_on_any_thread_count() {
    let text = scenario("replications: 1", "", 2, 8.0, 400);
    for threads in [1, 2] {
        let options = RunOptions {
            threads: Some(threads),
            calls_path: Some("/dev/full".into()),
            ..RunOptions::default()
        };
        match run(&text, options, &mut |_| {}) {
            Err(blis_actors::RunError::Output(message)) => {
                assert!(message.contains("/dev/full") && message.contains("No space left"), "{message}")
            }
            Err(other) => panic!("{threads} threads: expected the write's error, got {other}"),
            Ok(_) => panic!("{threads} threads: a run whose calls cannot be written succeeded"),
        }
    }
}
