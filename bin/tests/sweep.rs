//! `sweep`, `merge` and `capacity` from the command line: shards merged into the bytes one
//! process writes, a point's Result equal to a plain run of its scenario, refused points never
//! ranked, and bad specs refused by path, value and cause.

use std::path::Path;
use std::process::{Command, Output};

use tempfile::TempDir;

fn blis_actor(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_blis-actor"))
        .args(args)
        .env_remove("SLURM_ARRAY_TASK_ID")
        .env_remove("JOB_COMPLETION_INDEX")
        .output()
        .expect("the binary runs")
}

fn fixture(name: &str) -> String {
    format!("{}/../fixtures/sweep/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// A fresh folder for `test`, removed when dropped, even when the test fails.
fn scratch(test: &str) -> TempDir {
    tempfile::Builder::new().prefix(&format!("blis-actor-sweep-{test}-")).tempdir().unwrap()
}

fn ok(output: &Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    String::from_utf8(output.stdout.clone()).unwrap()
}

/// Every file under `dir`, by relative path, with its bytes, in path order.
fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let name = path.strip_prefix(dir).unwrap().display().to_string();
                files.push((name, std::fs::read(&path).unwrap()));
            }
        }
    }
    files.sort();
    files
}

#[test]
fn four_shards_merged_equal_the_one_process_sweep_and_a_point_equals_a_plain_run() {
    let dir = scratch("shards");
    let spec = fixture("shards.yaml");
    let whole = dir.path().join("whole");
    ok(&blis_actor(&["sweep", &spec, "--out", whole.to_str().unwrap(), "--quiet"]));
    let mut shards = Vec::new();
    for i in 0..4 {
        let out = dir.path().join(format!("shard-{i}"));
        let printed = ok(&blis_actor(&[
            "sweep",
            &spec,
            "--out",
            out.to_str().unwrap(),
            "--shard",
            &format!("{i}/4"),
            "--quiet",
        ]));
        assert!(printed.starts_with(&format!("shard {i}/4: ")), "{printed}");
        assert!(!out.join("sweep.csv").exists(), "a shard writes no table");
        shards.push(out.to_str().unwrap().to_owned());
    }
    // A job array's task finds its shard in the environment.
    let slurm = dir.path().join("slurm-2");
    let output = Command::new(env!("CARGO_BIN_EXE_blis-actor"))
        .args(["sweep", &spec, "--out", slurm.to_str().unwrap(), "--quiet"])
        .env("SLURM_ARRAY_TASK_ID", "2")
        .env("SLURM_ARRAY_TASK_MIN", "0")
        .env("SLURM_ARRAY_TASK_COUNT", "4")
        .output()
        .unwrap();
    ok(&output);
    assert_eq!(tree(&slurm), tree(Path::new(&shards[2])));
    let merged = dir.path().join("merged");
    let mut args = vec!["merge"];
    // Any order of the folders.
    args.extend(shards.iter().rev().map(String::as_str));
    args.extend(["--out", merged.to_str().unwrap(), "--quiet"]);
    ok(&blis_actor(&args));
    let (a, b) = (tree(&whole), tree(&merged));
    assert_eq!(a.iter().map(|f| &f.0).collect::<Vec<_>>(), b.iter().map(|f| &f.0).collect::<Vec<_>>());
    assert!(a == b, "the merged sweep differs from the one-process sweep");
    assert_eq!(a.iter().filter(|(name, _)| name.ends_with("result.json")).count(), 6);
    // The trade-off picture, drawn from the rows: the same bytes either way.
    let file = |name: &str| &a.iter().find(|(n, _)| n == name).expect("the picture is written").1;
    assert!(file("tradeoff.png").starts_with(b"\x89PNG"));
    assert!(String::from_utf8_lossy(file("tradeoff.svg")).contains("<svg"));
    // Point 0004's Result is a plain run of its scenario.
    let plain = dir.path().join("plain");
    let scenario = whole.join("points/0004/scenario.yaml");
    ok(&blis_actor(&[
        "run",
        scenario.to_str().unwrap(),
        "--out",
        plain.to_str().unwrap(),
        "--calls",
        "none",
        "--quiet",
    ]));
    assert!(
        std::fs::read(plain.join("result.json")).unwrap()
            == std::fs::read(whole.join("points/0004/result.json")).unwrap(),
        "point 0004's Result differs from a plain run of its scenario"
    );
    // The table holds every axis value and every figure's estimate and interval.
    let csv = std::fs::read_to_string(whole.join("sweep.csv")).unwrap();
    let head = csv.lines().next().unwrap();
    assert!(head.starts_with("point,cluster.pools[0].replicas,workload.clients[0].arrival.rate_per_s,status,reason,overloaded,in_domain,"), "{head}");
    assert!(head.contains("ttft_ms.p99.mean,ttft_ms.p99.half_width"), "{head}");
    assert_eq!(csv.lines().count(), 7);
    assert!(csv.lines().nth(5).unwrap().starts_with("4,2,20,ran,,false,"), "{csv}");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(whole.join("sweep.json")).unwrap()).unwrap();
    assert_eq!(json["schema"], "blis-actor/sweep/v1");
    assert_eq!(json["rows"][4]["values"][0]["value"], 2);
    assert_eq!(json["rows"][4]["estimates"]["ttft_ms.p99"]["n"], 2);
    // Ranked at the merge: the spec it names must be the one the shards ran.
    let output = blis_actor(&[
        "merge",
        &shards[0],
        &shards[1],
        &shards[2],
        &shards[3],
        "--out",
        dir.path().join("m1").to_str().unwrap(),
        "--best",
        "ttft_p99_ms",
        "--spec",
        &fixture("grid.yaml"),
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("not the spec these shards ran"));
    assert!(!dir.path().join("m1").exists(), "nothing is written for a wrong spec");
    let ranked = dir.path().join("ranked");
    let printed = ok(&blis_actor(&[
        "merge",
        &shards[0],
        &shards[1],
        &shards[2],
        &shards[3],
        "--out",
        ranked.to_str().unwrap(),
        "--best",
        "ttft_p99_ms",
        "--spec",
        &spec,
        "--quiet",
    ]));
    assert!(
        printed.contains("best on ttft_ms.p99 (Minimize, false-winner chance at most 0.05):"),
        "{printed}"
    );
    let best: serde_json::Value =
        serde_json::from_slice(&std::fs::read(ranked.join("best.json")).unwrap()).unwrap();
    assert_eq!(best["fresh"]["replications"], 2);
    // A shard missing, or given twice, is refused.
    let output = blis_actor(&[
        "merge",
        &shards[0],
        &shards[1],
        &shards[2],
        "--out",
        dir.path().join("m2").to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("shard 3/4 is missing"));
    let output =
        blis_actor(&["merge", &shards[0], &shards[0], "--out", dir.path().join("m3").to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("shard 0/4 again"));
}

#[test]
fn a_point_the_upstream_refuses_is_reported_and_never_ranked() {
    let dir = scratch("refused");
    let out = dir.path().join("out");
    let printed = ok(&blis_actor(&[
        "sweep",
        &fixture("tensor-parallel.yaml"),
        "--out",
        out.to_str().unwrap(),
        "--best",
        "ttft_ms.p99",
        "--quiet",
    ]));
    assert!(
        printed.contains("0001 cluster.pools[0].engine.args.tensor_parallel_size=3: refused: "),
        "{printed}"
    );
    assert!(printed.contains("not ranked: 0001: refused: "), "{printed}");
    assert!(!out.join("points/0001/result.json").exists());
    let best: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("best.json")).unwrap()).unwrap();
    assert_eq!(best["goal"], "minimize");
    assert_ne!(best["fresh"]["seed"], 3, "the fresh re-run has its own seed");
    assert_eq!(best["fresh"]["replications"], 2);
    assert!(best["fresh"]["estimate"]["half_width"].as_f64().unwrap() > 0.0);
    assert!([0, 2].contains(&best["selection"]["best"].as_u64().unwrap()));
    let csv = std::fs::read_to_string(out.join("sweep.csv")).unwrap();
    assert!(csv.lines().nth(2).unwrap().starts_with("1,3,refused,"), "{csv}");
}

/// Run `command` on a spec of `body` (its base the fixture's) and return the one error line.
fn refusal(command: &str, body: &str, extra: &[&str]) -> String {
    let dir = scratch(&format!("bad-{:x}", body.len() * 31 + extra.len()));
    let spec = dir.path().join("spec.yaml");
    std::fs::write(&spec, format!("base: {}\n{body}", fixture("base.yaml"))).unwrap();
    let mut args = vec![command, spec.to_str().unwrap()];
    let out = dir.path().join("out");
    if command == "sweep" {
        args.extend(["--out", out.to_str().unwrap()]);
    }
    args.extend(extra);
    args.push("--quiet");
    let output = blis_actor(&args);
    assert_eq!(output.status.code(), Some(2), "{body}: {}", String::from_utf8_lossy(&output.stderr));
    assert!(output.stdout.is_empty());
    assert!(!out.join("points").exists(), "nothing runs before the spec is checked");
    let stderr = String::from_utf8(output.stderr).unwrap();
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    errors[0].to_owned()
}

#[test]
fn bad_specs_are_refused_by_path_value_and_cause() {
    let e = refusal("sweep", "axes:\n  cluster.pools[0].replicaz: [1, 2]\n", &[]);
    assert!(e.starts_with("error: axes.cluster.pools[0].replicaz[0] = 1: cluster.pools[0].replicaz: unknown field `replicaz`"), "{e}");
    let e = refusal("sweep", "axes:\n  cluster.pools[0].engine.args.max_num_seqz: [8]\n", &[]);
    assert!(e.starts_with("error: axes.cluster.pools[0].engine.args.max_num_seqz[0] = 8: cluster.pools[0].engine.args.max_num_seqz: unknown field `max_num_seqz`"), "{e}");
    let e = refusal("sweep", "axes:\n  cluster.pools[3].replicas: [1]\n", &[]);
    assert_eq!(
        e,
        "error: axes.cluster.pools[3].replicas[0] = 1: `cluster.pools` has 1 item in the base scenario, so no item [3]"
    );
    let e = refusal("sweep", "axes:\n  cluster.pools[0].replicas: []\n", &[]);
    assert_eq!(e, "error: axes.cluster.pools[0].replicas = []: an axis needs at least one value");
    let e = refusal("sweep", "axes:\n  cluster.pools[0].replicas: [2, two]\n", &[]);
    assert!(e.starts_with("error: axes.cluster.pools[0].replicas[1] = two: cluster.pools[0].replicas: invalid type: string \"two\", expected u32"), "{e}");
    let e = refusal("sweep", "points:\n  - workload.clients[0].arrival.rate_per_s: fast\n", &[]);
    assert!(e.starts_with("error: points[0].workload.clients[0].arrival.rate_per_s = fast: "), "{e}");
    let e = refusal("sweep", "axes:\n  cluster.pools[0].replicas: [1]\n", &["--shard", "4/4"]);
    assert_eq!(e, "error: --shard = 4/4: the shard index must be 0 to 3 (below the count)");
    let e = refusal("sweep", "axes:\n  cluster.pools[0].replicas: [1]\n", &["--best", "ttfb_ms.p99"]);
    assert!(
        e.starts_with("error: --best = ttfb_ms.p99: the metric registry has no such figure; known: "),
        "{e}"
    );
    let e = refusal(
        "capacity",
        "search: smallest\naxis:\n  cluster.pools[0].replicas: [1, 2]\nslo: {ttfb_p99_ms: 500}\n",
        &[],
    );
    assert!(
        e.starts_with(
            "error: slo.ttfb_p99_ms = ttfb_p99_ms: the metric registry has no such figure; known: "
        ),
        "{e}"
    );
    let e = refusal(
        "capacity",
        "search: smallest\naxis:\n  cluster.pools[0].replicas: [1, 2]\nslo: {ttft_p99_ms: -5}\n",
        &[],
    );
    assert_eq!(e, "error: slo.ttft_p99_ms = -5: a target is a positive number");
    let e = refusal(
        "capacity",
        "search: smallest\naxis:\n  cluster.pools[0].replicas: [1, 2]\n  workload.clients[0].arrival.rate_per_s: [1]\nslo: {ttft_p99_ms: 5}\n",
        &[],
    );
    assert!(e.contains("error: axis = ") && e.contains("capacity searches one ordered axis"), "{e}");
}

#[test]
fn capacity_answers_with_the_points_tried_and_why_each_was_rejected() {
    let dir = scratch("capacity");
    let printed = ok(&blis_actor(&[
        "capacity",
        &fixture("capacity.yaml"),
        "--out",
        dir.path().to_str().unwrap(),
        "--quiet",
    ]));
    assert!(printed.starts_with("answer: point "), "{printed}");
    assert!(printed.contains("points judged:"), "{printed}");
    assert!(printed.contains("fresh seeds, "), "{printed}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("capacity.json")).unwrap()).unwrap();
    let answer = report["answer"].as_u64().expect("an answer");
    for judged in report["judged"].as_array().unwrap() {
        let meets = judged["verdict"] == "meets";
        assert_eq!(meets, judged["point"].as_u64().unwrap() >= answer, "{judged}");
        assert_eq!(judged["reasons"].as_array().unwrap().is_empty(), meets, "{judged}");
    }
    assert_eq!(report["fresh"]["verdict"], "meets", "{report}");
    assert!(std::fs::read(dir.path().join("capacity.png")).unwrap().starts_with(b"\x89PNG"));
    let svg = std::fs::read_to_string(dir.path().join("capacity.svg")).unwrap();
    assert!(svg.contains("target 60"), "the SLO line is drawn and named");
}

#[test]
fn router_weights_are_axes_of_an_inline_router_config() {
    let dir = scratch("router");
    let out = dir.path().join("out");
    ok(&blis_actor(&["sweep", &fixture("router-weights.yaml"), "--out", out.to_str().unwrap(), "--quiet"]));
    let result = |id: &str| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(out.join(format!("points/{id}/result.json"))).unwrap()).unwrap()
    };
    // Point 0001 sets the queue scorer's weight to 0 and the KV-utilisation scorer's to 4: the
    // router resolved them so.
    let scorers = &result("0001")["scenario"]["resolved"]["router"]["profiles"][0]["scorers"];
    assert_eq!(
        (scorers[0]["weight"].as_f64(), scorers[1]["weight"].as_f64()),
        (Some(0.0), Some(4.0)),
        "{scorers}"
    );
    // Without the queue scorer the router picks otherwise: the calls differ.
    assert_ne!(
        result("0000")["replications"][0]["histograms"],
        result("0002")["replications"][0]["histograms"]
    );
    let e = refusal_of(
        &fixture("llmd-base.yaml"),
        "axes:\n  cluster.router.config.schedulingProfiles[0].plugins[1].wieght: [1]\n",
    );
    assert!(
        e.starts_with("error: axes.cluster.router.config.schedulingProfiles[0].plugins[1].wieght[0] = 1: "),
        "{e}"
    );
    assert!(e.contains("unknown field \"wieght\""), "{e}");
}

/// The one error line of `sweep` on a spec of `body` over `base`.
fn refusal_of(base: &str, body: &str) -> String {
    let dir = scratch("router-bad");
    let spec = dir.path().join("spec.yaml");
    std::fs::write(&spec, format!("base: {base}\n{body}")).unwrap();
    let output = blis_actor(&[
        "sweep",
        spec.to_str().unwrap(),
        "--out",
        dir.path().join("out").to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(output.status.code(), Some(2));
    String::from_utf8(output.stderr).unwrap().lines().find(|l| l.starts_with("error:")).unwrap().to_owned()
}
