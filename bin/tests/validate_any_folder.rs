//! `validate-real` on a folder outside `reference-data/`: a model the catalog does not know,
//! read from the folder's own `model-config/config.json`; a tokenizer whose drift the client
//! emulation does not know, falling back to exact lengths and saying so; a results file that
//! publishes only some statistics; and the refusals of folders without what validation needs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tempfile::TempDir;

fn blis_actor(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_blis-actor")).args(args).output().expect("the binary runs")
}

/// A small Llama-like model nobody fitted: 16 layers of 2048, GQA 32/8.
const CONFIG: &str = r#"{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 16,
  "hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 8192,
  "vocab_size": 128256, "max_position_embeddings": 8192, "torch_dtype": "bfloat16", "tie_word_embeddings": true}"#;

/// One stage's results as inference-perf writes them, with only mean, p90 and p99 (no median).
fn stage(sent: u32, ttft: f64, e2e: f64) -> String {
    let stats = |mean: f64| format!(r#"{{"mean": {mean}, "p90": {}, "p99": {}}}"#, mean * 1.2, mean * 1.5);
    format!(
        r#"{{"load_summary": {{"count": {sent}}}, "successes": {{"count": {sent}, "latency": {{
            "time_to_first_token": {}, "request_latency": {}}}}}, "failures": {{"count": 0}}}}"#,
        stats(ttft),
        stats(e2e)
    )
}

/// An experiment folder under a fresh root (removed when dropped), laid out like reference-data.
fn experiment(test: &str, stage_file: Option<String>) -> (TempDir, PathBuf) {
    let root = tempfile::Builder::new().prefix(&format!("blis-validate-{test}-")).tempdir().unwrap();
    let dir = root.path().join("real-runs").join("20261201-000000-tiny-llama-tp1");
    std::fs::create_dir_all(dir.join("results")).unwrap();
    std::fs::create_dir_all(dir.join("model-config")).unwrap();
    std::fs::write(dir.join("model-config/config.json"), CONFIG).unwrap();
    std::fs::write(
        dir.join("exp-config.yaml"),
        "model: example-org/Tiny-Llama-2B\ntensor_parallelism: 1\nmax_model_len: 4096\nmax_num_batched_tokens: 2048\nmax_num_seqs: 128\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("profile.yaml"),
        r#"{"api": {"streaming": true, "type": "completion"},
            "data": {"shared_prefix": {"num_groups": 2, "num_prompts_per_group": 5, "output_len": 64, "question_len": 200, "system_prompt_len": 100}, "type": "shared_prefix"},
            "load": {"stages": [{"duration": 20, "rate": 2}], "type": "constant"},
            "server": {"ignore_eos": true, "model_name": "example-org/Tiny-Llama-2B", "type": "vllm"},
            "tokenizer": {"pretrained_model_name_or_path": "example-org/Tiny-Llama-2B"}}"#,
    )
    .unwrap();
    std::fs::write(
        dir.join("results/stage_0_lifecycle_metrics.json"),
        stage_file.unwrap_or_else(|| stage(40, 0.05, 0.6)),
    )
    .unwrap();
    (root, dir)
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn an_unknown_model_and_tokenizer_are_validated_from_the_folders_own_config() {
    let (_root, dir) = experiment("unknown", None);
    let json = dir.parent().unwrap().join("validation.json");
    let output = blis_actor(&["validate-real", path(&dir), "--replications", "2", "--json", path(&json)]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let name = "20261201-000000-tiny-llama-tp1";
    assert!(
        stdout.contains(&format!(
            "  {name}: model example-org/Tiny-Llama-2B from {}",
            dir.join("model-config/config.json").display()
        )),
        "{stdout}"
    );
    // Only the published statistics are compared; the medians are named as skipped.
    let rows: Vec<&str> = stdout.lines().filter(|l| l.starts_with(name)).collect();
    let metrics: Vec<&str> = rows.iter().map(|l| l.split_whitespace().nth(2).unwrap()).collect();
    assert_eq!(metrics, ["ttft_mean", "ttft_p90", "ttft_p99", "e2e_mean", "e2e_p90", "e2e_p99", "per_token"]);
    assert!(
        stdout
            .contains(&format!("  {name}: not published, not compared: stage 0: ttft_p50, stage 0: e2e_p50")),
        "{stdout}"
    );
    // The tokenizer's drift is unknown: exact lengths, said in the validity flag.
    let validity =
        stdout.lines().find(|l| l.starts_with(&format!("  {name}: validity: "))).expect("a validity line");
    assert!(validity.contains("OUT OF DOMAIN"), "{validity}");
    assert!(
        validity
            .contains("drift for the tokenizer example-org/Tiny-Llama-2B is not known: exact prompt lengths"),
        "{validity}"
    );
    assert!(
        validity.contains(
            "pool h100 serves example-org/Tiny-Llama-2B; the calibrated coefficients were fitted on"
        ),
        "{validity}"
    );
    let written: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let record = &written["experiments"][0];
    assert_eq!(record["tokenizer"], "exact");
    assert_eq!(record["rows"].as_array().unwrap().len(), 7);
    assert_eq!(record["validity"]["in_domain"], false);
    assert!(record["rows"][0]["relative_error"].is_f64() && record["rows"][0]["half_width"].is_f64());
    // --tokenizer overrides the fallback.
    let output = blis_actor(&["validate-real", path(&dir), "--replications", "1", "--tokenizer", "llama2"]);
    assert!(output.status.success());
    assert!(!String::from_utf8_lossy(&output.stdout).contains("drift for the tokenizer"));
}

#[test]
fn folders_without_what_validation_needs_are_refused_naming_the_file_and_key() {
    let no_summary = stage(40, 0.05, 0.6).replace(r#""load_summary": {"count": 40}, "#, "");
    let (_root, dir) = experiment("no-summary", Some(no_summary));
    let output = blis_actor(&["validate-real", path(&dir)]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "20261201-000000-tiny-llama-tp1/results/stage_0_lifecycle_metrics.json.load_summary.count"
        ),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");

    let (_root, dir) = experiment("no-config", None);
    std::fs::remove_dir_all(dir.join("model-config")).unwrap();
    let output = blis_actor(&["validate-real", path(&dir)]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("exp-config.yaml.model = example-org/Tiny-Llama-2B"), "{stderr}");
    assert!(stderr.contains("give --model-config example-org/Tiny-Llama-2B=PATH"), "{stderr}");
    // …and --model-config with that name supplies it.
    let config = dir.parent().unwrap().join("tiny.json");
    std::fs::write(&config, CONFIG).unwrap();
    let spec = format!("example-org/Tiny-Llama-2B={}", config.display());
    let output = blis_actor(&["validate-real", path(&dir), "--replications", "1", "--model-config", &spec]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("model example-org/Tiny-Llama-2B from the catalog")
    );
}
