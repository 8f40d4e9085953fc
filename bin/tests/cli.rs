//! The command line: exit codes, the refusal message, the files written.

use std::process::{Command, Output};

use tempfile::TempDir;

fn blis_actor(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_blis-actor")).args(args).output().expect("the binary runs")
}

fn fixture(name: &str) -> String {
    format!("{}/../fixtures/tests/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// A fresh folder for `test`, removed when dropped, even when the test fails.
fn scratch(test: &str) -> TempDir {
    tempfile::Builder::new().prefix(&format!("blis-actor-cli-{test}-")).tempdir().unwrap()
}

#[test]
fn a_bad_scenario_exits_2_with_one_message_naming_the_field() {
    let output =
        blis_actor(&["run", &fixture("negative-rate.yaml"), "--quiet", "--out", "/nonexistent/never"]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(
        errors[0].contains("negative-rate.yaml: workload.clients[0].arrival.rate_per_s = -1:"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty());
}

#[test]
fn a_missing_scenario_file_exits_2() {
    let output = blis_actor(&["run", "/no/such/scenario.yaml", "--quiet"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8(output.stderr).unwrap().contains("cannot read the scenario"));
}

#[test]
fn a_run_writes_its_result_and_calls_and_prints_a_summary() {
    let dir = scratch("run");
    let out = dir.path().join("out");
    let output = blis_actor(&[
        "run",
        &fixture("small.yaml"),
        "--seed",
        "3",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(stdout.contains("fates (replication 0): 50 calls = 50 completed"), "{stdout}");
    for metric in ["TTFT", "TPOT", "ITL", "E2E", "throughput"] {
        assert!(stdout.contains(metric), "{stdout}");
    }
    let result: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("result.json")).unwrap()).unwrap();
    assert_eq!(result["schema"], "blis-actor/result/v1");
    assert_eq!(result["seed"], 3);
    let calls = std::fs::read_to_string(out.join("calls.jsonl")).unwrap();
    assert_eq!(calls.lines().count(), 51, "the header and 50 calls");
    let header: serde_json::Value = serde_json::from_str(calls.lines().next().unwrap()).unwrap();
    assert_eq!(
        (&header["calls"], &header["writer"]),
        (&"blis-actor/calls/v1".into(), &"blis-actor run".into())
    );
    assert_eq!(header["pools"][0]["serving"]["max_num_seqs"], 1024, "{header}");
    // Calls are written as they settle; request a-0's record is among them.
    let first: serde_json::Value = calls
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|c| c["request_id"] == "a-0")
        .expect("a-0 is recorded");
    assert_eq!(
        first["token_latency_us"].as_array().unwrap().len() as u64,
        first["output_tokens"].as_u64().unwrap()
    );
}

#[test]
fn a_traced_and_recorded_run_checks_and_replays_and_a_broken_trace_fails_the_check() {
    let dir = scratch("trace");
    let out = dir.path();
    let trace = out.join("trace.json");
    let record = out.join("run.log");
    let output = blis_actor(&[
        "run",
        &fixture("small.yaml"),
        "--quiet",
        "--out",
        out.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
        "--record",
        record.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let stderr = String::from_utf8_lossy(&output.stderr);
    for written in [&trace, &record] {
        assert!(stderr.contains(&format!("wrote {}", written.display())), "{stderr}");
    }
    // The header carries the run's seed (small.yaml gives none: the default, 1).
    let header: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    assert_eq!(header["otherData"]["seed"], "1", "{}", header["otherData"]);
    let check = blis_actor(&["trace-check", trace.to_str().unwrap()]);
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stdout));
    let replay = blis_actor(&["replay", record.to_str().unwrap(), "--host", "tasks"]);
    assert!(replay.status.success(), "{}", String::from_utf8_lossy(&replay.stdout));
    assert!(String::from_utf8_lossy(&replay.stdout).contains("replay matched all"));

    let text = std::fs::read_to_string(&trace).unwrap();
    let broken = out.join("broken.json");
    std::fs::write(&broken, text.replacen("\"dur\":", "\"duration\":", 1)).unwrap();
    let check = blis_actor(&["trace-check", broken.to_str().unwrap()]);
    assert_eq!(check.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&check.stdout).contains("complete slice without dur"));
}

#[test]
fn a_bad_trace_filter_is_refused_naming_it() {
    let output = blis_actor(&[
        "run",
        &fixture("small.yaml"),
        "--quiet",
        "--trace",
        "/tmp/never.json",
        "--trace-filter",
        "requests=a-999",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("requests=a-999: no such request"));
}

#[test]
fn the_catalog_lists_chips_models_and_entries_with_ranks() {
    let output = blis_actor(&["catalog"]);
    assert!(output.status.success());
    let stdout = String::from_utf8(output.stdout).unwrap();
    for needle in
        ["H100-SXM", "MI300X", "Llama-3.1-8B", "DeepSeek-V3", "all_reduce", "literature", "registry sha256"]
    {
        assert!(stdout.contains(needle), "{needle} missing");
    }
}

#[test]
fn an_ambiguous_registry_is_refused_naming_both_entries() {
    let dir = scratch("registry");
    let path = dir.path().join("registry.yaml");
    let embedded = blis_costmodel::EMBEDDED_REGISTRY;
    let twin = "  - family: host\n    chip: \"*\"\n    rank: literature\n    source: \"a second opinion\"\n    params: { step_us: 1, step_us_per_peer: 0, request_us: 0, sampled_token_us: 0 }\n";
    // The twin goes at the end of the entries (before the uncertainty section, if any).
    let end = embedded.find("\nuncertainty:").map_or(embedded.len(), |i| i + 1);
    std::fs::write(&path, format!("{}{twin}{}", &embedded[..end], &embedded[end..])).unwrap();
    let output =
        blis_actor(&["run", &fixture("small.yaml"), "--quiet", "--registry", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.contains("ambiguous") && stderr.contains("a second opinion") && stderr.contains("lower ends"),
        "{stderr}"
    );
}

fn workload_fixture(name: &str) -> String {
    format!("{}/../fixtures/workloads/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn fit_workload_prints_every_candidate_and_writes_a_spec_that_runs() {
    let dir = scratch("fit");
    let spec = dir.path().join("spec.yaml");
    let output = blis_actor(&[
        "fit-workload",
        &workload_fixture("azure-code.csv"),
        "--format",
        "azure-csv",
        "--out",
        spec.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(stdout.contains("12 requests, 11 gaps, 12 LLM calls"), "{stdout}");
    for (quantity, family) in [
        ("arrival gaps", "exponential"),
        ("arrival gaps", "gamma"),
        ("arrival gaps", "weibull"),
        ("input tokens", "normal"),
        ("input tokens", "lognormal"),
        ("input tokens", "empirical"),
        ("output tokens", "exponential"),
    ] {
        assert!(
            stdout.lines().any(|l| l.contains(quantity)
                && l.contains(family)
                && l.contains("clamped") == (quantity != "arrival gaps" && family != "empirical")),
            "{quantity} {family} missing:\n{stdout}"
        );
    }
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with('*')).count(),
        3,
        "one choice per quantity:\n{stdout}"
    );
    // The spec is a scenario's workload section: put a cluster before it and run it.
    let workload = std::fs::read_to_string(&spec).unwrap();
    assert!(workload.contains("name: azure-code") && workload.contains("requests: 12"), "{workload}");
    let small = std::fs::read_to_string(fixture("small.yaml")).unwrap();
    let cluster = &small[..small.find("workload:").unwrap()];
    let scenario = dir.path().join("scenario.yaml");
    std::fs::write(&scenario, format!("{cluster}{workload}")).unwrap();
    let run = blis_actor(&[
        "run",
        scenario.to_str().unwrap(),
        "--quiet",
        "--out",
        dir.path().join("out").to_str().unwrap(),
    ]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    assert!(
        String::from_utf8_lossy(&run.stdout).contains("fates (replication 0): 12 calls"),
        "{}",
        String::from_utf8_lossy(&run.stdout)
    );
}

#[test]
fn fit_workload_refuses_a_bad_line_by_file_line_and_field() {
    let dir = scratch("fit-bad");
    let trace = dir.path().join("bad.csv");
    std::fs::write(&trace, "TIMESTAMP,ContextTokens,GeneratedTokens\n0.0,10,2\n0.5,10,0\n").unwrap();
    let output = blis_actor(&["fit-workload", trace.to_str().unwrap(), "--format", "azure-csv"]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(errors[0].contains("bad.csv:3.GeneratedTokens = 0: must be at least 1 token"), "{stderr}");
    assert!(output.stdout.is_empty());
}

#[test]
fn validate_real_prints_every_stage_and_metric_with_its_signed_error() {
    // The smallest reference experiment (Llama-2-70B codegen, 5/s then 10/s), stages cut to 20 s.
    let dir = format!(
        "{}/../fixtures/reference-data/real-vllm-h100/20260217-203421-llama-2-70b-hf-tp4-codegen",
        env!("CARGO_MANIFEST_DIR")
    );
    let output = blis_actor(&["validate-real", &dir, "--replications", "2", "--stage-cap-s", "20"]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    // Not a terminal: progress comes as lines on stderr, one at least per replication.
    let stderr = String::from_utf8_lossy(&output.stderr);
    for replication in ["replication 1/2: ", "replication 2/2: "] {
        assert!(stderr.lines().any(|l| l.contains(replication) && l.contains("calls answered")), "{stderr}");
    }
    let stdout = String::from_utf8(output.stdout).unwrap();
    let metrics = [
        "ttft_mean",
        "ttft_p50",
        "ttft_p90",
        "ttft_p99",
        "e2e_mean",
        "e2e_p50",
        "e2e_p90",
        "e2e_p99",
        "per_token",
    ];
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .filter(|l| l.starts_with("20260217-203421"))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 2 * metrics.len(), "two stages of nine metrics:\n{stdout}");
    assert!(
        stdout.lines().any(|l| l.contains("not modelled:") && l.contains("cold start")),
        "the first stage's cold-start tail is said to be unmodelled:\n{stdout}"
    );
    // A model and TP degree the embedded bundle was fitted on lie in its domain: the terms it
    // holds fixed (graph launch, sampler) price under 5% of the steps.
    assert!(stdout.lines().any(|l| l.ends_with("validity: in domain")), "{stdout}");
    let results = format!("{dir}/results");
    for (i, row) in rows.iter().enumerate() {
        let (stage, metric) = (i / metrics.len(), metrics[i % metrics.len()]);
        assert_eq!((row[1], row[2]), (stage.to_string().as_str(), metric), "{row:?}");
        // The real value is the stage file's.
        let json: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(format!("{results}/stage_{stage}_lifecycle_metrics.json")).unwrap(),
        )
        .unwrap();
        let latency = &json["successes"]["latency"];
        let pick = |m: &str, s: &str| latency[m][s].as_f64().unwrap();
        let real = match metric {
            "ttft_mean" => pick("time_to_first_token", "mean"),
            "ttft_p50" => pick("time_to_first_token", "median"),
            "ttft_p90" => pick("time_to_first_token", "p90"),
            "ttft_p99" => pick("time_to_first_token", "p99"),
            "e2e_mean" => pick("request_latency", "mean"),
            "e2e_p50" => pick("request_latency", "median"),
            "e2e_p90" => pick("request_latency", "p90"),
            "e2e_p99" => pick("request_latency", "p99"),
            _ => (pick("request_latency", "mean") - pick("time_to_first_token", "mean")) / 246.0,
        };
        let printed_real: f64 = row[3].parse().unwrap();
        assert!((printed_real - real).abs() < 5e-7, "{metric}: {printed_real} vs {real}");
        // simulated ± half width, then the signed error, (sim − real) / real in percent.
        let simulated: f64 = row[4].parse().unwrap();
        assert_eq!(row[5], "±");
        let error: f64 = row[7].trim_end_matches('%').parse().unwrap();
        let expected = (simulated - printed_real) / printed_real * 100.0;
        assert!((error - expected).abs() < 0.06, "{metric}: printed {error}%, recomputed {expected}%");
    }
    assert!(stdout.contains("median absolute error over scored stages:"));
}

#[test]
fn validate_real_leaving_the_model_out_prices_with_its_fold_and_flags_the_run_out_of_domain() {
    let dir = format!(
        "{}/../fixtures/reference-data/real-vllm-h100/20260217-203421-llama-2-70b-hf-tp4-codegen",
        env!("CARGO_MANIFEST_DIR")
    );
    let args = ["validate-real", &dir, "--replications", "1", "--stage-cap-s", "10"];
    let run = |extra: &[&str]| {
        let output = blis_actor(&[&args[..], extra].concat());
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8(output.stdout).unwrap()
    };
    let (joint, fold) = (run(&[]), run(&["--leave-one-out"]));
    let flag = |stdout: &str| stdout.lines().find(|l| l.contains("validity:")).unwrap_or_default().to_owned();
    assert!(flag(&joint).ends_with("validity: in domain"), "{joint}");
    let held_out = flag(&fold);
    assert!(
        held_out.contains("OUT OF DOMAIN")
            && held_out.contains("held out")
            && held_out.contains("without model Llama-2-70B"),
        "{held_out}"
    );
    let means = |stdout: &str| -> Vec<String> {
        stdout
            .lines()
            .filter(|l| l.starts_with("2026") && l.contains(" ttft_mean "))
            .map(|l| l.split_whitespace().nth(4).unwrap().to_owned())
            .collect()
    };
    assert_ne!(means(&joint), means(&fold), "the fold's coefficients price differently");
}

#[test]
fn validate_real_and_calibrate_refuse_bad_numbers_naming_the_flag() {
    let dir = format!(
        "{}/../fixtures/reference-data/real-vllm-h100/20260217-203421-llama-2-70b-hf-tp4-codegen",
        env!("CARGO_MANIFEST_DIR")
    );
    let never = scratch("never");
    let out = never.path().join("never.yaml");
    let out = out.to_str().unwrap();
    let cases: [(&[&str], &str); 8] = [
        (&["validate-real", &dir, "--replications", "0"], "--replications = 0: must be at least 1"),
        (&["validate-real", &dir, "--stage-cap-s", "0"], "--stage-cap-s = 0"),
        (&["validate-real", &dir, "--stage-cap-s", "NaN"], "--stage-cap-s = NaN"),
        (&["calibrate", &dir, "--out", out, "--evaluations", "5"], "--evaluations = 5: must be at least 27"),
        (
            &["calibrate", &dir, "--out", out, "--fold-evaluations", "5"],
            "--fold-evaluations = 5: must be at least 9",
        ),
        (
            &["calibrate", &dir, "--out", out, "--evaluations", "100000000000"],
            "--evaluations = 100000000000: must be at most 100000",
        ),
        (
            &["calibrate", &dir, "--out", out, "--fold-evaluations", "100001"],
            "--fold-evaluations = 100001: must be at most 100000",
        ),
        (
            &["calibrate", &dir, "--out", out, "--hold-out", "model"],
            "--hold-out = model: needs runs of at least two models",
        ),
    ];
    for (args, expected) in cases {
        let output = blis_actor(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "one message: {stderr}");
    }
    assert!(!std::path::Path::new(out).exists(), "nothing written");
}

#[test]
fn calls_are_streamed_all_sampled_or_none_and_a_bad_selection_is_refused() {
    let run = |test: &str, calls: &[&str]| {
        let folder = scratch(test);
        let out = folder.path().join("out");
        let scenario = fixture("small.yaml");
        let mut args = vec!["run", &scenario, "--seed", "3", "--quiet", "--replications", "1"];
        let dir = out.to_str().unwrap().to_owned();
        args.extend(["--out", dir.as_str()]);
        args.extend(calls);
        let output = blis_actor(&args);
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        (
            std::fs::read_to_string(out.join("result.json")).unwrap(),
            std::fs::read(out.join("calls.jsonl")).ok(),
        )
    };
    let (result, all) = run("calls-all", &[]);
    let all = String::from_utf8(all.expect("all is the default")).unwrap();
    let lines: Vec<&str> = all.lines().collect();
    assert_eq!(lines.len(), 51, "the header and 50 calls");
    let (sampled_result, sample) = run("calls-sample", &["--calls", "sample", "7"]);
    let sample = String::from_utf8(sample.unwrap()).unwrap();
    let sampled: Vec<&str> = sample.lines().collect();
    assert_eq!(sampled.len(), 8, "the header and 7 calls");
    // A sample keeps the file's order and its lines are the full file's lines.
    let positions: Vec<usize> = sampled.iter().map(|l| lines.iter().position(|a| a == l).unwrap()).collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");
    let (none_result, none) = run("calls-none", &["--calls", "none"]);
    assert!(none.is_none(), "--calls none writes no file");
    // The selection changes nothing in the Result.
    assert_eq!(result, sampled_result);
    assert_eq!(result, none_result);
    for bad in [&["--calls", "sample", "0"][..], &["--calls", "some"][..]] {
        let scenario = fixture("small.yaml");
        let mut args = vec!["run", &scenario, "--quiet", "--out", "/nonexistent/never"];
        args.extend(bad);
        let output = blis_actor(&args);
        assert_eq!(output.status.code(), Some(2));
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert!(stderr.contains("--calls: "), "{stderr}");
    }
}
