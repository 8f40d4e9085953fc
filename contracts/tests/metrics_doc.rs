//! `docs/METRICS.md` is the rendering of the metric registry, so the document, the Result and
//! the summary cannot disagree. `UPDATE_METRICS=1 cargo test -p blis-contracts --test
//! metrics_doc` rewrites it.

use std::fmt::Write;

use blis_contracts::METRICS;

fn render() -> String {
    let mut out = String::from(
        "# Metrics\n\n\
         Generated from the metric registry (`contracts/src/metric.rs`) by\n\
         `contracts/tests/metrics_doc.rs`; every figure in `result.json` (`metrics`, `estimates`,\n\
         each replication's `metrics`) and in the printed summary is one of these.\n\n\
         Latency metrics are reported as `{count, mean, p50, p90, p99}` in each replication's\n\
         `metrics`, and as `<id>.<statistic>` (e.g. `ttft_ms.p99`) in `estimates`, where each\n\
         statistic is estimated over the replications: the mean of the replications' values with a\n\
         95% Student-t interval (`half_width`; absent with one replication). A steady-state run of\n\
         one replication estimates the latency means from 20 batch means of its measured window\n\
         instead. Calls unfinished at a horizon are never in a latency figure; they are counted in\n\
         the fates. Percentiles come from the log-linear histograms the Result carries per\n\
         replication (`docs/RESULT.md`): a reported pX is at least the exact nearest-rank value and\n\
         less than 1/1024 (0.1%) of it above; means are exact. When a replication is overloaded\n\
         (its backlog keeps growing) its latency summaries are withheld, and `withheld` says why;\n\
         when an acceptance condition fails, every figure is withheld.\n\n",
    );
    for m in METRICS {
        let _ = write!(
            out,
            "## `{}` — {}\n\n\
             | | |\n|---|---|\n\
             | formula | {} |\n| statistic | {} |\n| population | {} |\n| window | {} |\n| unit | {} |\n| better | {} |\n\n",
            m.id,
            m.name,
            m.formula,
            m.statistic,
            m.population,
            m.window,
            m.unit,
            if m.lower_is_better { "lower" } else { "higher" }
        );
    }
    out
}

#[test]
fn metrics_md_is_the_rendering_of_the_registry() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/METRICS.md");
    let rendered = render();
    if std::env::var_os("UPDATE_METRICS").is_some() {
        std::fs::write(&path, &rendered).unwrap();
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == rendered,
        "docs/METRICS.md is stale: run UPDATE_METRICS=1 cargo test -p blis-contracts --test metrics_doc"
    );
}

#[test]
fn every_metric_id_is_unique() {
    let mut ids: Vec<&str> = METRICS.iter().map(|m| m.id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), METRICS.len());
}
