//! `blis-actor draw --output FILE NAME=a.jsonl NAME=b.jsonl …`: the runs on one figure —
//! latency CDFs (the default view), a paired scatter against the reference with the y = x line,
//! or throughput and cumulative output over time; one panel per metric, PNG, SVG or PDF by the
//! file's extension.

use std::path::Path;

use blis_actors::calls_comparison::series::{self, LATENCIES, OVER_TIME};
use blis_actors::calls_comparison::{Run, check_runs, pairs};
use blis_contracts::{CallRecord, FieldError, metric};
use blis_plots::{Figure, Format, Panel, Series, Style};
use clap::ValueEnum;

/// What a figure shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum View {
    /// Each metric's empirical CDF, one line per run.
    Cdf,
    /// Each metric per call, a run's value against the reference's, with the y = x line.
    Scatter,
    /// Throughput per time bin, or cumulative output tokens, over time since the first send.
    Timeseries,
}

impl View {
    /// The panels drawn when `--metrics` names none.
    fn default_metrics(self) -> &'static [&'static str] {
        match self {
            View::Cdf | View::Scatter => &["ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"],
            View::Timeseries => &["output_tokens_per_s", "output_tokens"],
        }
    }

    /// The metrics it can draw.
    fn allowed(self) -> &'static [&'static str] {
        match self {
            View::Cdf | View::Scatter => &LATENCIES,
            View::Timeseries => &OVER_TIME,
        }
    }
}

/// Draw `runs` (the first the reference) as `view` of `metrics` (the view's defaults when
/// empty) into `output`.
pub fn draw(runs: &[(String, Run)], view: View, metrics: &[String], output: &Path) -> Result<(), String> {
    let format = Format::from_path(output).ok_or_else(|| {
        FieldError::new("--output", output.display(), "must end in .png, .svg or .pdf (the format)")
            .to_string()
    })?;
    let metrics: Vec<&str> = if metrics.is_empty() {
        view.default_metrics().to_vec()
    } else {
        metrics.iter().map(String::as_str).collect()
    };
    for (i, id) in metrics.iter().enumerate() {
        if !view.allowed().contains(id) {
            return Err(FieldError::new(
                format!("--metrics[{i}]"),
                id,
                format!("the {view:?} view draws {}", view.allowed().join(", ")).to_lowercase(),
            )
            .to_string());
        }
    }
    check_runs(runs).map_err(|e| e.to_string())?;
    let mut calls: Vec<(&str, &[CallRecord])> = Vec::new();
    for (name, run) in runs {
        match run {
            Run::Calls(file) => calls.push((name, &file.calls)),
            Run::Aggregate(_) => {
                return Err(FieldError::at(
                    name.as_str(),
                    "an inference-perf summary holds no calls to draw",
                )
                .to_string());
            }
        }
    }
    if view == View::Scatter && calls.len() < 2 {
        return Err(FieldError::at("runs", "a scatter needs a reference and at least one run").to_string());
    }
    let panels = metrics.iter().map(|id| panel(view, id, &calls)).collect();
    let bytes = blis_plots::render(&Figure { panels }, format).map_err(|e| e.to_string())?;
    std::fs::write(output, bytes).map_err(|e| format!("{}: cannot write the figure: {e}", output.display()))
}

/// The axis label of a metric: its registry name and unit.
fn label(id: &str) -> String {
    match (id, metric(id)) {
        ("output_tokens", _) => "cumulative output tokens (tokens)".to_owned(),
        (_, Some(m)) => format!("{} ({})", short(m.name), m.unit),
        (_, None) => id.to_owned(),
    }
}

/// A registry name without its parenthesised explanation.
fn short(name: &str) -> &str {
    name.split(" (").next().unwrap_or(name)
}

fn panel(view: View, id: &str, calls: &[(&str, &[CallRecord])]) -> Panel {
    match view {
        View::Cdf => Panel {
            title: format!("{} — CDF", short(metric(id).map_or(id, |m| m.name))),
            x_label: label(id),
            y_label: match id {
                "itl_ms" => "fraction of token gaps",
                "request_e2e_ms" => "fraction of requests",
                _ => "fraction of calls",
            }
            .to_owned(),
            style: Style::Lines,
            series: calls
                .iter()
                .map(|(name, c)| Series {
                    name: (*name).to_owned(),
                    points: series::cdf(&series::latencies(c, id)),
                })
                .collect(),
        },
        View::Scatter => {
            let (reference, ref_calls) = calls[0];
            Panel {
                title: format!("{} — per call, paired", short(metric(id).map_or(id, |m| m.name))),
                x_label: format!("{reference}: {}", label(id)),
                y_label: match &calls[1..] {
                    [(only, _)] => format!("{only}: {}", label(id)),
                    _ => format!("each run: {}", label(id)),
                },
                style: Style::Points { diagonal: true },
                series: calls[1..]
                    .iter()
                    .map(|(name, c)| Series {
                        name: (*name).to_owned(),
                        points: series::thin(pairs(id, ref_calls, c)),
                    })
                    .collect(),
            }
        }
        View::Timeseries => {
            let origin = calls.iter().flat_map(|(_, c)| c.iter().map(|r| r.arrival_us)).min().unwrap_or(0);
            let end_s = calls
                .iter()
                .flat_map(|(_, c)| c.iter().filter_map(|r| r.e2e_us().map(|e| r.arrival_us + e)))
                .max()
                .map_or(0.0, |end| end.saturating_sub(origin) as f64 / 1e6);
            let bin = series::bin_width_s(end_s);
            let title = match id {
                "output_tokens" => "cumulative output over time".to_owned(),
                _ => format!("{} over time ({} s bins)", short(metric(id).map_or(id, |m| m.name)), bin),
            };
            Panel {
                title,
                x_label: "time since the first send (s)".to_owned(),
                y_label: label(id),
                style: Style::Lines,
                series: calls
                    .iter()
                    .map(|(name, c)| Series {
                        name: (*name).to_owned(),
                        points: series::over_time(c, id, origin, bin),
                    })
                    .collect(),
            }
        }
    }
}
