//! Rank fallback: removing a registry entry makes its lookups fall back to a less trusted one;
//! the run still succeeds, and the Result's rank breakdown and registry hash say what changed.

mod common;

use blis_actors::{RunOptions, run_observed};
use blis_costmodel::{CostData, EMBEDDED_REGISTRY, Family, Registry};

fn tp2() -> String {
    common::one_pool(
        None,
        None,
        1,
        "tensor_parallel_size: 2",
        r#"
  clients:
    - name: a
      requests: 40
      arrival: { process: poisson, rate_per_s: 4 }
      input_tokens: { dist: uniform, min: 50, max: 500 }
      output_tokens: { dist: uniform, min: 20, max: 100 }
"#,
    )
}

/// The embedded registry text without the calibrated bundle's all-reduce entry (and without
/// the bundle's uncertainty samples, which name it).
fn without_h100_all_reduce() -> String {
    let start = EMBEDDED_REGISTRY
        .find("  - family: all_reduce\n    chip: H100-SXM\n    rank: calibrated")
        .expect("the entry exists");
    let end = start + EMBEDDED_REGISTRY[start..].find("\n  - family:").expect("another entry follows") + 1;
    let text = format!("{}{}", &EMBEDDED_REGISTRY[..start], &EMBEDDED_REGISTRY[end..]);
    // The bundle's uncertainty samples name the removed entry's parameters: drop them too.
    match text.find("\nuncertainty:") {
        Some(at) => text[..at + 1].to_owned(),
        None => text,
    }
}

#[test]
fn removing_an_entry_falls_back_and_the_rank_breakdown_says_so() {
    let text = without_h100_all_reduce();
    let parsed = Registry::parse(&text).unwrap();
    assert_eq!(parsed.entries().len() + 1, Registry::embedded().entries().len());
    let dir = tempfile::Builder::new().prefix("blis-registry-").tempdir().unwrap();
    let path = dir.path().join("registry.yaml");
    std::fs::write(&path, &text).unwrap();
    let reduced = CostData::load(None, Some(&path), &[]).unwrap();
    let full = CostData::embedded();

    let run = |data: &CostData| {
        run_observed(&tp2(), RunOptions::default(), data, Vec::new(), &mut |_| {}).unwrap().0
    };
    let (with, without) = (run(&full), run(&reduced));
    assert_eq!(without.result.fates.completed, 40, "the run still succeeds");
    assert_ne!(with.result.data.registry_sha256, without.result.data.registry_sha256);
    let share = |output: &blis_actors::RunOutput, rank: &str| {
        output.result.pricing.share_by_rank.get(rank).copied().unwrap_or(0.0)
    };
    // The all-reduce now falls back to the literature entry (Vidur's 7 µs at TP2 instead of the
    // calibrated latency): more literature, less calibrated, and steps faster or slower as the
    // literature's latency is below or above the calibrated one.
    assert!(share(&without, "literature") > share(&with, "literature"));
    assert!(share(&without, "calibrated") < share(&with, "calibrated"));
    let latency =
        |data: &CostData| data.registry.resolve("H100-SXM").get(Family::AllReduce).param("latency_us_tp2");
    let (calibrated, literature) = (latency(&full), latency(&reduced));
    assert_eq!(literature, 7.0);
    assert_ne!(calibrated, literature);
    let tpot = |o: &blis_actors::RunOutput| o.result.metrics.as_ref().unwrap().tpot_ms.unwrap().mean;
    assert_eq!(tpot(&without) < tpot(&with), literature < calibrated, "{calibrated} µs calibrated");
    let resolved = |output: &blis_actors::RunOutput| {
        output.result.scenario.resolved["pools"][0]["pricing"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["family"] == "all_reduce")
            .unwrap()["rank"]
            .clone()
    };
    assert_eq!(resolved(&with), "calibrated");
    assert_eq!(resolved(&without), "literature");
    let _ = std::fs::remove_file(path);
}
