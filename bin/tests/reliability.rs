//! The reproductions of issue 15, each from `fixtures/tests/small.yaml` with one value changed:
//! every one exits 2 with one message naming the field, the value and the bound, or runs
//! correctly — never an abort, a hang or a wrong result with exit 0.

use std::path::PathBuf;
use std::process::{Command, Output};

use tempfile::TempDir;

fn blis_actor(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_blis-actor")).args(args).output().expect("the binary runs")
}

fn small() -> String {
    std::fs::read_to_string(format!("{}/../fixtures/tests/small.yaml", env!("CARGO_MANIFEST_DIR")))
        .expect("the fixture is readable")
}

/// A fresh folder for `test`, removed when dropped, even when the test fails.
fn scratch(test: &str) -> TempDir {
    tempfile::Builder::new().prefix(&format!("blis-actor-reliability-{test}-")).tempdir().unwrap()
}

/// `small.yaml` with `from` replaced by `to` (which must occur), written to a scratch folder.
fn variant(test: &str, from: &str, to: &str) -> (TempDir, PathBuf) {
    let text = small();
    assert!(text.contains(from), "{from:?} is not in small.yaml");
    let dir = scratch(test);
    let path = dir.path().join("scenario.yaml");
    std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
    (dir, path)
}

/// Run `scenario` (extra flags after it) and expect exit 2 with one `error:` line containing each
/// of `needles`.
fn refused(scenario: &std::path::Path, flags: &[&str], needles: &[&str]) {
    let out = scenario.with_file_name("out");
    let mut args = vec!["run", scenario.to_str().unwrap(), "--quiet", "--out", out.to_str().unwrap()];
    args.extend_from_slice(flags);
    let output = blis_actor(&args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    for needle in needles {
        assert!(errors[0].contains(needle), "{needle:?} not in {stderr}");
    }
    assert!(!out.exists(), "a refused run writes nothing");
}

const CLIENT_TAIL: &str = "      output_tokens: { dist: uniform, min: 10, max: 100 }\n";

#[test]
fn replications_beyond_the_bound_are_refused() {
    let (_dir, path) = variant("replications-flag", "requests: 50", "requests: 50");
    refused(&path, &["--replications", "4000000000"], &["--replications = 4000000000", "at most 1000"]);
    let (_dir, path) = variant(
        "replications-frame",
        CLIENT_TAIL,
        &format!("{CLIENT_TAIL}frame: {{ replications: 4000000000 }}\n"),
    );
    refused(&path, &[], &["frame.replications = 4000000000", "at most 1000"]);
}

#[test]
fn a_block_override_beyond_the_gpu_memory_is_refused() {
    let (_dir, path) = variant("blocks", "args: {}", "args: { num_gpu_blocks_override: 4000000000 }");
    refused(
        &path,
        &[],
        &["engine.args.num_gpu_blocks_override = 4000000000", "79.19 GiB each GPU of H100-SXM"],
    );
}

#[test]
fn token_counts_beyond_every_max_model_len_are_refused() {
    let (_dir, path) = variant(
        "input",
        "input_tokens: { dist: uniform, min: 50, max: 500 }",
        "input_tokens: { dist: constant, value: 4294967295 }",
    );
    refused(&path, &[], &["workload.clients[0].input_tokens = 4294967295", "max_model_len", "131072"]);
    let (_dir, path) = variant(
        "prefix",
        CLIENT_TAIL,
        &format!("{CLIENT_TAIL}      shared_prefix: {{ groups: 2, tokens: 4000000000 }}\n"),
    );
    refused(&path, &[], &["workload.clients[0].shared_prefix.tokens = 4000000000", "131072"]);
}

#[test]
fn sessions_of_billions_of_turns_are_refused() {
    let session = "      session: { turns: { dist: constant, value: 4000000000 }, think_time_s: { dist: constant, value: 1 } }\n";
    let (_dir, path) = variant("turns", CLIENT_TAIL, &format!("{CLIENT_TAIL}{session}"));
    refused(&path, &[], &["workload.clients[0].session.turns", "at most 32768 turns"]);
}

#[test]
fn huge_timeouts_and_think_times_are_refused_not_wrapped() {
    let (_dir, path) = variant("timeout", CLIENT_TAIL, &format!("{CLIENT_TAIL}      timeout_s: 1e300\n"));
    refused(&path, &[], &["workload.clients[0].timeout_s = 1e300", "at most 1e9 s"]);
    let session = "      session: { turns: { dist: constant, value: 3 }, think_time_s: { dist: constant, value: 1e300 } }\n";
    let (_dir, path) = variant("think", CLIENT_TAIL, &format!("{CLIENT_TAIL}{session}"));
    refused(&path, &[], &["workload.clients[0].session.think_time_s.value = 1e300", "at most 1e9 s"]);
}

#[test]
fn rates_and_counts_whose_run_would_never_end_are_refused() {
    let (_dir, path) = variant("rate", "rate_per_s: 5", "rate_per_s: 1e-300");
    refused(&path, &[], &["workload.clients[0].arrival.rate_per_s = 1e-300", "at most 1e9 s"]);
    let (_dir, path) = variant("requests", "requests: 50", "requests: 10000000000000000000");
    refused(&path, &[], &["workload.clients[0].requests = 10000000000000000000", "at most 10000000"]);
}

#[test]
fn a_slow_rate_runs_to_its_end_with_every_call_completed() {
    // Fifty requests about 11.6 simulated days apart: idle time costs nothing.
    let (dir, path) = variant("slow", "rate_per_s: 5", "rate_per_s: 1e-6");
    let out = dir.path().join("out");
    let output = blis_actor(&["run", path.to_str().unwrap(), "--quiet", "--out", out.to_str().unwrap()]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(stdout.contains("50 calls = 50 completed"), "{stdout}");
    let result: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("result.json")).unwrap()).unwrap();
    let end_s = result["simulation"]["end_time_us"].as_u64().unwrap() as f64 / 1e6;
    // 50 gaps of mean 10⁶ s: the end lies within a few standard deviations (√50 · 10⁶ s) of 5·10⁷ s.
    assert!((2e7..9e7).contains(&end_s), "ended at {end_s} s");
}

#[test]
fn a_kv_cache_larger_than_the_gpu_is_refused_with_the_bound() {
    let (_dir, path) = variant("kv", "args: {}", "args: { kv_cache_memory_bytes: 10000000000000000 }");
    refused(&path, &[], &["engine.args.kv_cache_memory_bytes = 10000000000000000", "79.19 GiB each GPU"]);
}

#[test]
fn a_huge_value_gives_a_short_message() {
    let digits = "9".repeat(5_000_000);
    let (_dir, path) = variant("long", "requests: 50", &format!("requests: {digits}"));
    let out = path.with_file_name("out");
    let output = blis_actor(&["run", path.to_str().unwrap(), "--quiet", "--out", out.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stderr.len() < 2_000, "{} bytes of message", output.stderr.len());
    assert!(String::from_utf8_lossy(&output.stderr).contains("workload.clients[0].requests"));
}

#[test]
fn causes_name_what_is_wrong() {
    let session = "      session: { turns: { dist: constant, value: 0 }, think_time_s: { dist: constant, value: 1 } }\n";
    let (_dir, path) = variant("turns0", CLIENT_TAIL, &format!("{CLIENT_TAIL}{session}"));
    refused(&path, &[], &["session.turns.value = 0: must be at least 1 turn"]);
    let (_dir, path) = variant("capture", "args: {}", "args: { cudagraph_capture_sizes: [0, 8] }");
    refused(&path, &[], &["engine.args.cudagraph_capture_sizes[0] = 0"]);
    let (_dir, path) = variant("70b", "model: Llama-3.1-8B", "model: Llama-2-70B");
    refused(&path, &[], &["engine.args.tensor_parallel_size = 1", "larger tensor_parallel_size"]);
    let (_dir, path) = variant("threads", "requests: 50", "requests: 50");
    refused(&path, &["--threads", "0"], &["--threads = 0"]);
}

#[test]
fn the_result_records_build_provenance_not_a_hash_of_the_binary() {
    let (dir, path) = variant("provenance", "requests: 50", "requests: 10");
    let out = dir.path().join("out");
    let output = blis_actor(&["run", path.to_str().unwrap(), "--quiet", "--out", out.to_str().unwrap()]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let result: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("result.json")).unwrap()).unwrap();
    assert!(result["data"].get("binary_sha256").is_none(), "{}", result["data"]);
    let build = &result["build"];
    assert!(matches!(build["profile"].as_str(), Some("debug" | "release")), "{build}");
    assert!(build["rustc"].as_str().is_some_and(|r| r.starts_with("rustc ")), "{build}");
    for name in ["libm", "rand_chacha", "serde_json", "serde_norway", "sha2"] {
        assert!(build["crates"][name].as_str().is_some_and(|v| !v.is_empty()), "{name}: {build}");
    }
}

#[test]
fn a_run_where_every_call_is_dropped_reports_no_latency_and_says_why() {
    let (dir, path) = variant(
        "all-dropped",
        "input_tokens: { dist: uniform, min: 50, max: 500 }",
        "input_tokens: { dist: constant, value: 20000 }",
    );
    let text = std::fs::read_to_string(&path).unwrap().replace("args: {}", "args: { max_model_len: 8192 }");
    std::fs::write(&path, text).unwrap();
    let out = dir.path().join("out");
    let output = blis_actor(&["run", path.to_str().unwrap(), "--quiet", "--out", out.to_str().unwrap()]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(stdout.contains("50 calls = 0 completed + 50 dropped"), "{stdout}");
    assert!(stdout.contains("dropped (replication 0): 50 exceeds_max_model_len"), "{stdout}");
    assert!(stdout.contains("no call completed"), "{stdout}");
    let result: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("result.json")).unwrap()).unwrap();
    for id in ["ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "normalized_e2e_ms", "request_e2e_ms"] {
        assert!(result["metrics"][id].is_null(), "{id}: {}", result["metrics"][id]);
        assert!(result["replications"][0]["metrics"][id].is_null(), "{id}");
        assert!(result["estimates"].get(format!("{id}.mean")).is_none(), "{id}");
    }
}

/// A scenario replaying `file` (a Mooncake trace) on one H100, with `replicas` instances.
fn replaying(file: &str, replicas: u32) -> String {
    small()
        .replace("replicas: 1", &format!("replicas: {replicas}"))
        .split("workload:")
        .next()
        .unwrap()
        .to_owned()
        + &format!(
            "workload:\n  replays:\n    - {{ name: trace, path: {file}, format: mooncake }}\nframe: {{ replications: 2 }}\n"
        )
}

fn mooncake() -> String {
    std::fs::read_to_string(format!("{}/../fixtures/workloads/mooncake.jsonl", env!("CARGO_MANIFEST_DIR")))
        .unwrap()
}

#[test]
fn compare_configs_reads_each_scenarios_files_from_its_own_folder() {
    let root = scratch("compare-folders");
    let (a, b) = (root.path().join("a"), root.path().join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    // Only B's folder has B's trace, under a name A's folder does not have.
    std::fs::write(a.join("a.jsonl"), mooncake()).unwrap();
    std::fs::write(b.join("b.jsonl"), mooncake()).unwrap();
    std::fs::write(a.join("scenario.yaml"), replaying("a.jsonl", 1)).unwrap();
    std::fs::write(b.join("scenario.yaml"), replaying("b.jsonl", 2)).unwrap();
    let output = blis_actor(&[
        "compare-configs",
        a.join("scenario.yaml").to_str().unwrap(),
        b.join("scenario.yaml").to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(String::from_utf8_lossy(&output.stdout).contains("ttft_ms.mean"));
}

#[test]
fn a_recording_of_a_replaying_run_replays_elsewhere() {
    let root = scratch("carried");
    let (made, moved) = (root.path().join("made"), root.path().join("moved"));
    std::fs::create_dir_all(&made).unwrap();
    std::fs::create_dir_all(&moved).unwrap();
    std::fs::write(made.join("trace.jsonl"), mooncake()).unwrap();
    std::fs::write(made.join("scenario.yaml"), replaying("trace.jsonl", 1)).unwrap();
    let record = made.join("run.log");
    let output = blis_actor(&[
        "run",
        made.join("scenario.yaml").to_str().unwrap(),
        "--quiet",
        "--out",
        made.join("out").to_str().unwrap(),
        "--record",
        record.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    // The recording alone, in a folder without the trace.
    std::fs::rename(&record, moved.join("run.log")).unwrap();
    std::fs::remove_dir_all(&made).unwrap();
    let replay = blis_actor(&["replay", moved.join("run.log").to_str().unwrap()]);
    assert!(
        replay.status.success(),
        "{}{}",
        String::from_utf8_lossy(&replay.stdout),
        String::from_utf8_lossy(&replay.stderr)
    );
    assert!(String::from_utf8_lossy(&replay.stdout).contains("replay matched all"));
}

#[test]
fn a_bad_value_in_an_arrival_or_a_distribution_is_reported_at_its_own_line() {
    let (_dir, path) = variant("line-arrival", "rate_per_s: 5 }", "rate_per_s: x }");
    refused(&path, &[], &["workload.clients[0].arrival.rate_per_s:", "at line 17 column 48"]);
    let (_dir, path) = variant(
        "line-dist",
        "input_tokens: { dist: uniform, min: 50, max: 500 }",
        "input_tokens:\n        dist: uniform\n        min: 50\n        max: -5",
    );
    refused(&path, &[], &["workload.clients[0].input_tokens.max:", "`-5`", "at line 21 column 14"]);
}

#[test]
fn replications_whose_latencies_memory_cannot_hold_are_refused() {
    // 2·10⁶ calls of up to 1000 output tokens: 2·10⁹ per-token latencies in one replication.
    let (_dir, path) = variant("held", "requests: 50", "requests: 2000000");
    let text = std::fs::read_to_string(&path).unwrap().replace("min: 10, max: 100", "min: 10, max: 1000");
    std::fs::write(&path, text).unwrap();
    refused(&path, &[], &["workload.clients", "per-token latencies"]);
    // 4·10⁵ such calls fit one replication, not five.
    let text = std::fs::read_to_string(&path).unwrap().replace("requests: 2000000", "requests: 400000");
    std::fs::write(&path, text).unwrap();
    refused(&path, &[], &["frame.replications = 5 (the default)", "at most 1073741824"]);
}

#[test]
fn cost_data_outside_physical_bounds_is_refused_naming_the_field() {
    let data = format!("{}/../costmodel/data", env!("CARGO_MANIFEST_DIR"));
    // A host step of 1e300 µs panicked the run; one of 1e12 ran ten calls for years.
    let (dir, path) = variant("registry", "requests: 50", "requests: 50");
    let registry = std::fs::read_to_string(format!("{data}/registry.yaml")).unwrap();
    let registry_path = dir.path().join("registry.yaml");
    std::fs::write(&registry_path, registry.replacen("step_us: 1500,", "step_us: 1e300,", 1)).unwrap();
    refused(
        &path,
        &["--registry", registry_path.to_str().unwrap()],
        &["params.step_us = 1e300", "at most 1000000 µs"],
    );
    // A bandwidth of 1e-300 B/s priced a dense model's device time as zero, silently.
    let catalog = dir.path().join("catalog");
    std::fs::create_dir_all(catalog.join("models")).unwrap();
    for file in ["chips.yaml", "links.yaml"] {
        std::fs::copy(format!("{data}/{file}"), catalog.join(file)).unwrap();
    }
    for model in std::fs::read_dir(format!("{data}/models")).unwrap() {
        let model = model.unwrap().path();
        std::fs::copy(&model, catalog.join("models").join(model.file_name().unwrap())).unwrap();
    }
    let chips = std::fs::read_to_string(catalog.join("chips.yaml")).unwrap();
    std::fs::write(catalog.join("chips.yaml"), chips.replacen("value: 3.35e12", "value: 1e-300", 1)).unwrap();
    refused(
        &path,
        &["--catalog", catalog.to_str().unwrap()],
        &["chips.yaml.chips[0].hbm_bandwidth.value = 1e-300", "what accelerators have"],
    );
}

#[test]
fn an_absurdly_large_model_is_refused_as_too_large_not_wrapped_to_a_size_that_fits() {
    let (dir, path) = variant("huge-model", "model: Llama-3.1-8B", "model: huge");
    let config = std::fs::read_to_string(format!(
        "{}/../fixtures/reference-data/model-configs/Llama-2-7b-hf/config.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let mut config: serde_json::Value = serde_json::from_str(&config).unwrap();
    config["hidden_size"] = serde_json::json!(1_000_000_000u32);
    let config_path = dir.path().join("config.json");
    std::fs::write(&config_path, config.to_string()).unwrap();
    let flag = format!("huge={}", config_path.display());
    // Its weights saturate the byte count; their sum with the activations once wrapped around
    // to "needs 76294.81 GiB" beside "weights 17179869184.00 GiB".
    refused(&path, &["--model-config", &flag], &["needs 17179869184.00 GiB", "larger tensor_parallel_size"]);
}
