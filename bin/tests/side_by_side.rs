//! `compare` and `draw` on the documented side-by-side example (two simulations of the same
//! chat sessions, round-robin and llm-d's router), `--export-workload --token-ids` making a
//! workload `baseline` takes, and the commands' refusals.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tempfile::TempDir;

fn blis_actor(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_blis-actor")).args(args).output().expect("the binary runs")
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A fresh folder for `test`, removed when dropped, even when the test fails.
fn scratch(test: &str) -> TempDir {
    tempfile::Builder::new().prefix(&format!("blis-actor-side-{test}-")).tempdir().unwrap()
}

/// Both example runs' calls files as NAME=PATH, run once per test process under the target
/// folder (a static's folder is never dropped, so it is not a temporary one).
fn example_runs() -> (String, String) {
    static RUNS: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();
    RUNS.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("side-by-side-examples-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        run_examples(&dir)
    })
    .clone()
}

fn run_examples(dir: &Path) -> (String, String) {
    let mut out = Vec::new();
    for router in ["round-robin", "llm-d"] {
        let scenario = root().join(format!("fixtures/scenarios/side-by-side/chat-4-{router}.yaml"));
        let run_dir = dir.join(router);
        let output = blis_actor(&[
            "run",
            scenario.to_str().unwrap(),
            "--replications",
            "1",
            "--quiet",
            "--out",
            run_dir.to_str().unwrap(),
        ]);
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        out.push(format!("{router}={}", run_dir.join("calls.jsonl").display()));
    }
    (out.remove(0), out.remove(0))
}

fn png_size(bytes: &[u8]) -> (u32, u32) {
    let reader = png::Decoder::new(std::io::Cursor::new(bytes)).read_info().unwrap();
    let info = reader.info();
    (info.width, info.height)
}

#[test]
fn compare_and_draw_put_two_simulations_side_by_side_in_every_view_and_format() {
    let dir = scratch("views");
    let (a, b) = example_runs();
    let output = blis_actor(&["compare", &a, &b]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let table = String::from_utf8(output.stdout).unwrap();
    for needle in ["reference: round-robin", "ttft_ms.p95", "requests_per_s.value", "MAPE", "llm-d"] {
        assert!(table.contains(needle), "{needle}: {table}");
    }
    let output = blis_actor(&["compare", &a, &b, "--json", "--percentiles", "50,90"]);
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["runs"], serde_json::json!(["round-robin", "llm-d"]));
    assert_eq!(json["percentiles"], serde_json::json!([50.0, 90.0]));
    assert!(
        json["rows"].as_array().unwrap().iter().any(|r| r["metric"] == "ttft_ms" && r["statistic"] == "p90")
    );

    let fonts = blis_plots::font_database();
    for (view, metrics, size) in [
        ("cdf", None, (1120, 800)),
        ("scatter", Some("ttft_ms,e2e_ms,request_e2e_ms"), (1120, 800)),
        ("timeseries", None, (1120, 400)),
    ] {
        for format in ["png", "svg", "pdf"] {
            let file = dir.path().join(format!("{view}.{format}"));
            let mut args = vec!["draw", "--view", view, "--output", file.to_str().unwrap(), &a, &b];
            if let Some(metrics) = metrics {
                args.extend(["--metrics", metrics]);
            }
            let output = blis_actor(&args);
            assert!(output.status.success(), "{view} {format}: {}", String::from_utf8_lossy(&output.stderr));
            let bytes = std::fs::read(&file).unwrap();
            match format {
                "png" => assert_eq!(png_size(&bytes), size, "{view}"),
                "svg" => {
                    let options = svg2pdf::usvg::Options { fontdb: fonts.clone(), ..Default::default() };
                    let tree = svg2pdf::usvg::Tree::from_str(std::str::from_utf8(&bytes).unwrap(), &options)
                        .unwrap();
                    assert_eq!((tree.size().width() as u32, tree.size().height() as u32), size, "{view}");
                    let text = String::from_utf8(bytes).unwrap();
                    assert!(
                        text.contains("round-robin") && text.contains("(ms)") || view == "timeseries",
                        "{view}: legend and units"
                    );
                }
                _ => {
                    assert!(bytes.starts_with(b"%PDF-"), "{view}: a PDF header");
                    assert!(bytes.windows(5).any(|w| w == b"%%EOF"), "{view}: a PDF trailer");
                }
            }
        }
    }
    for (args, needle) in [
        (vec!["--view", "timeseries", "--metrics", "ttft_ms"], "--metrics[0] = ttft_ms"),
        (vec!["--metrics", "makespan_s"], "--metrics[0] = makespan_s"),
    ] {
        let file = dir.path().join("bad.png");
        let mut all = vec!["draw", "--output", file.to_str().unwrap(), &a, &b];
        all.extend(args);
        let output = blis_actor(&all);
        assert_eq!(output.status.code(), Some(2));
        assert!(
            String::from_utf8_lossy(&output.stderr).contains(needle),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let output = blis_actor(&["draw", "--output", dir.path().join("x.jpg").to_str().unwrap(), &a, &b]);
    assert!(String::from_utf8_lossy(&output.stderr).contains("must end in .png, .svg or .pdf"));
}

#[test]
fn other_work_or_other_settings_are_refused_with_the_first_difference() {
    let dir = scratch("refused");
    let (a, b) = example_runs();
    let b_path = b.split_once('=').unwrap().1.to_owned();
    let text = std::fs::read_to_string(&b_path).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    // Change one call's prompt length: other work.
    let mut call: serde_json::Value = serde_json::from_str(&lines[5]).unwrap();
    let id = call["request_id"].as_str().unwrap().to_owned();
    call["input_tokens"] = (call["input_tokens"].as_u64().unwrap() + 1).into();
    lines[5] = call.to_string();
    let edited = dir.path().join("edited.jsonl");
    std::fs::write(&edited, lines.join("\n") + "\n").unwrap();
    let output = blis_actor(&["compare", &a, &format!("edited={}", edited.display())]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains(&format!("edited.calls[{id}].input_tokens")), "{stderr}");
    // Change the header's serving settings: served otherwise.
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    lines[0] = lines[0].replace("\"max_num_seqs\":1024", "\"max_num_seqs\":64");
    std::fs::write(&edited, lines.join("\n") + "\n").unwrap();
    let output = blis_actor(&[
        "draw",
        "--output",
        dir.path().join("x.png").to_str().unwrap(),
        &a,
        &format!("edited={}", edited.display()),
    ]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("edited:1.pools[0].serving.max_num_seqs = 64"), "{stderr}");
    // A file written before the header existed.
    std::fs::write(&edited, text.lines().skip(1).collect::<Vec<_>>().join("\n")).unwrap();
    let output = blis_actor(&["compare", &a, &format!("old={}", edited.display())]);
    assert!(String::from_utf8_lossy(&output.stderr).contains(":1: not a calls.jsonl header"));
}

#[test]
fn an_export_with_token_ids_is_a_workload_baseline_takes_and_baseline_refuses_to_overwrite() {
    let dir = scratch("export");
    let scenario = root().join("fixtures/tests/small.yaml");
    let export = dir.path().join("wl");
    let output = blis_actor(&[
        "run",
        scenario.to_str().unwrap(),
        "--replications",
        "1",
        "--quiet",
        "--out",
        dir.path().join("out").to_str().unwrap(),
        "--export-workload",
        export.to_str().unwrap(),
        "--token-ids",
    ]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let file = std::fs::read_dir(&export).unwrap().next().unwrap().unwrap().path();
    let text = std::fs::read_to_string(&file).unwrap();
    let workload = blis_baseline::workload::replay_calls("w", &text, 1 << 20).unwrap();
    assert_eq!(workload.len(), 50);
    assert!(
        workload.iter().all(|c| c.prompt.iter().all(|&id| id < 128_256)),
        "ids in Llama-3.1-8B's vocabulary"
    );

    let config = dir.path().join("baseline.toml");
    std::fs::write(
        &config,
        "url = \"http://127.0.0.1:9\"\nmodel = \"m\"\nchip = \"H100-SXM\"\nrequest_timeout_s = 0\n",
    )
    .unwrap();
    let taken = dir.path().join("taken.jsonl");
    std::fs::write(&taken, "recorded\n").unwrap();
    let args = [
        "baseline",
        "--config",
        config.to_str().unwrap(),
        "--workload",
        file.to_str().unwrap(),
        "--output-jsonl",
        taken.to_str().unwrap(),
    ];
    let output = blis_actor(&args);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("serving"),
        "the config is checked first: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let good = include_str!("../../fixtures/baseline/baseline.toml")
        .replace("http://127.0.0.1:8000", "http://127.0.0.1:9");
    std::fs::write(&config, good).unwrap();
    let output = blis_actor(&args);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("--output-jsonl"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(std::fs::read_to_string(&taken).unwrap(), "recorded\n");
    // No server at that port: the server check fails (exit 1) before the output is created.
    let fresh = dir.path().join("fresh.jsonl");
    let output = blis_actor(&[
        "baseline",
        "--config",
        config.to_str().unwrap(),
        "--workload",
        file.to_str().unwrap(),
        "--output-jsonl",
        fresh.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(!fresh.exists());
}
