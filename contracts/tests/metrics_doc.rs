//! `docs/METRICS.md` is the rendering of the metric registry, so the document, the Result and
//! the summary cannot disagree. `UPDATE_METRICS=1 cargo test -p blis-contracts --test
//! metrics_doc` rewrites it.

use std::fmt::Write;

use blis_contracts::{Better, METRICS};

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
         the fates. A latency summary with no samples (no call completed) is `null`, never zeros.\n\
         Percentiles come from the log-linear histograms the Result carries per replication\n\
         (`docs/RESULT.md`): a reported pX is at least the exact nearest-rank value and less than\n\
         1/1024 (0.1%) of it above; means are exact.\n\
         When a replication is overloaded its latency summaries are withheld, and `withheld` says\n\
         why (`frame.acceptance.allow_overload: true` reports them anyway); when an acceptance\n\
         condition fails, every figure is withheld.\n\n\
         `blis-actor compare` and `draw` (`docs/VALIDATION.md`) compute the same definitions from\n\
         a `calls.jsonl`, real or simulated, with the whole file as the window (no warm-up is\n\
         cut) and any percentile asked for (the same histogram); they report the latency\n\
         metrics, `makespan_s`, `output_tokens_per_s` and `requests_per_s`.\n\n\
         ## Overload\n\n\
         A replication is overloaded when any of these holds (`docs/RELIABILITY.md` gives the\n\
         reasons):\n\n\
         1. its backlog keeps growing: the calls sent and waiting for their first token, sampled\n   \
         at 200 points over the offered load (until the last arrival), rise over the second half\n   \
         (a least-squares line through 10 batch means, one-sided t test at 1%) to a fitted end\n   \
         above twice the first half's mean and at least one waiting call;\n\
         2. its clients abandon at least as many calls as it serves: at least half of the calls\n   \
         sent in the second half of the offered load and answered or abandoned timed out;\n\
         3. the stop rule stopped it: once the calls sent and not yet answered or abandoned reach\n   \
         10,000 (and at every doubling after) and rule 1 judges their counts so far overloaded,\n   \
         the run stops there, as at a horizon.\n\n\
         A closed-loop client's backlog is capped by its concurrency, so it is never overloaded;\n\
         calls between the turns of a session are not waiting, so long sessions are not either.\n\n",
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
            match m.better {
                Better::Lower => "lower",
                Better::Higher => "higher",
                Better::Neither => "neither (descriptive; a comparison says higher or lower)",
            }
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
