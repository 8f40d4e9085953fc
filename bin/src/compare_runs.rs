//! `blis-actor compare NAME=a.jsonl NAME=b.jsonl …` and `draw`'s inputs: runs named on the
//! command line, read as `calls.jsonl` files or (the reference only) an inference-perf
//! summary, and the comparison as a table.

use std::fmt::Write;
use std::path::Path;

use blis_actors::calls_comparison::{AggregateReference, Comparison, Run, is_inference_perf_summary};
use blis_contracts::{CallsFile, FieldError};

/// The runs named `NAME=PATH`, in order; refuses a malformed or repeated name and an unreadable
/// file, naming it.
pub fn read_runs(specs: &[String]) -> Result<Vec<(String, Run)>, FieldError> {
    let mut runs: Vec<(String, Run)> = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let Some((name, path)) = spec.split_once('=').filter(|(n, p)| !n.is_empty() && !p.is_empty()) else {
            return Err(FieldError::new(format!("runs[{i}]"), spec, "expected NAME=PATH"));
        };
        if runs.iter().any(|(n, _)| n == name) {
            return Err(FieldError::new(
                format!("runs[{i}]"),
                spec,
                format!("the name `{name}` is given twice"),
            ));
        }
        let text = std::fs::read_to_string(Path::new(path))
            .map_err(|e| FieldError::new(format!("runs[{i}]"), spec, format!("cannot read {path}: {e}")))?;
        let source = format!("{name}={path}");
        let summary = (!path.ends_with(".jsonl"))
            .then(|| serde_json::from_str::<serde_json::Value>(&text).ok())
            .flatten()
            .filter(is_inference_perf_summary);
        let run = match summary {
            Some(_) => Run::Aggregate(AggregateReference::parse(&source, &text)?),
            None => Run::Calls(CallsFile::parse(&source, &text)?),
        };
        runs.push((name.to_owned(), run));
    }
    Ok(runs)
}

/// The comparison as a table: one row per metric and statistic, one column per run (with its
/// signed relative error against the reference), then the paired errors.
pub fn render(comparison: &Comparison) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "reference: {}", comparison.runs[0]);
    let _ = write!(s, "{:<26} {:>12}", "metric", "unit");
    for run in &comparison.runs {
        let _ = write!(s, " {:>24}", run);
    }
    let _ = writeln!(s);
    for row in &comparison.rows {
        let _ = write!(s, "{:<26} {:>12}", format!("{}.{}", row.metric, row.statistic), row.unit);
        for (value, error) in &row.values {
            let cell = match (value, error) {
                (None, _) => "—".to_owned(),
                (Some(v), None) => format!("{v:.4}"),
                (Some(v), Some(e)) => format!("{v:.4} ({:+.1}%)", e * 100.0),
            };
            let _ = write!(s, " {cell:>24}");
        }
        let _ = writeln!(s);
    }
    if !comparison.paired.is_empty() {
        let _ = writeln!(s, "\npaired per call, run − reference (MAE and bias in the metric's unit)");
        let _ = writeln!(
            s,
            "{:<12} {:<20} {:>8} {:>12} {:>12} {:>10} {:>10}",
            "run", "metric", "pairs", "MAE", "bias", "MAPE", "WAPE"
        );
        let percent = |v: Option<f64>| v.map_or_else(|| "—".to_owned(), |v| format!("{v:.2}%"));
        for p in &comparison.paired {
            let _ = writeln!(
                s,
                "{:<12} {:<20} {:>8} {:>12.4} {:>+12.4} {:>10} {:>10}",
                p.run,
                p.metric,
                p.pairs,
                p.mae,
                p.bias,
                percent(p.mape_percent),
                percent(p.wape_percent)
            );
        }
    }
    for note in &comparison.notes {
        let _ = writeln!(s, "note: {note}");
    }
    s
}
