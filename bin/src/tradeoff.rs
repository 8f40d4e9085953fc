//! Pictures of the trade-off: a sweep's figure against its first axis (one panel per value of
//! the other axes) and a capacity search's objectives against GPUs, each with its interval's
//! ends and, for capacity, the target line; written as SVG and PNG by `blis-plots`.

use std::path::Path;

use blis_actors::experiment::capacity::CapacityReport;
use blis_actors::experiment::sweep::record::{PointRecord, PointStatus};
use blis_plots::{Figure, Format, Panel, Series, Style, render};

/// Most panels a sweep's picture draws (the rest are left out, and the title says so).
const MAX_PANELS: usize = 12;

/// One point of a line: x, the mean, and its interval's half-width.
type Estimated = (f64, f64, Option<f64>);

/// Write `figure` as `<stem>.svg` and `<stem>.png` in `dir`.
pub fn write(figure: &Figure, dir: &Path, stem: &str) -> Result<(), String> {
    for (format, extension) in [(Format::Svg, "svg"), (Format::Png, "png")] {
        let path = dir.join(format!("{stem}.{extension}"));
        let bytes = render(figure, format).map_err(|e| format!("{}: {e}", path.display()))?;
        std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// The means and the ends of their intervals (at `level`, e.g. `95%`) against x, as three
/// series.
fn interval_series(points: &[Estimated], level: &str) -> Vec<Series> {
    let mut series =
        vec![Series { name: "mean".into(), points: points.iter().map(|&(x, m, _)| (x, m)).collect() }];
    if points.iter().any(|p| p.2.is_some()) {
        let ends = |sign: f64| points.iter().filter_map(|&(x, m, h)| h.map(|h| (x, m + sign * h))).collect();
        series.push(Series { name: format!("{level} upper end"), points: ends(1.0) });
        series.push(Series { name: format!("{level} lower end"), points: ends(-1.0) });
    }
    series
}

/// A sweep's trade-off on `figure`: x the first axis' value (its position in the spec when not
/// a number), one panel per combination of the other axes' values; points that did not run,
/// were overloaded or lack the figure are left out.
pub fn sweep_figure(axes: &[String], rows: &[PointRecord], figure: &str) -> Figure {
    let Some(first) = axes.first() else { return Figure { panels: Vec::new() } };
    let mut groups: Vec<(String, Vec<Estimated>)> = Vec::new();
    let mut left_out = 0;
    for (position, row) in rows.iter().enumerate() {
        let x = row
            .values
            .iter()
            .find(|v| &v.path == first)
            .and_then(|v| v.value.as_f64())
            .unwrap_or(position as f64);
        let group: Vec<String> = row
            .values
            .iter()
            .filter(|v| &v.path != first)
            .map(|v| format!("{}={}", v.path, v.value))
            .collect();
        let group = group.join(" ");
        let estimate =
            row.estimates.get(figure).filter(|_| row.status == PointStatus::Ran && !row.overloaded);
        let Some(estimate) = estimate else {
            left_out += 1;
            continue;
        };
        let entry = match groups.iter_mut().find(|(g, _)| *g == group) {
            Some(entry) => entry,
            None => {
                groups.push((group, Vec::new()));
                groups.last_mut().expect("just pushed")
            }
        };
        entry.1.push((x, estimate.mean, estimate.half_width));
    }
    let shown = groups.len().min(MAX_PANELS);
    let note = match (left_out, groups.len() - shown) {
        (0, 0) => String::new(),
        (n, 0) => format!(" ({n} points not drawn: not run, overloaded or without it)"),
        (n, m) => format!(" ({n} points not drawn; {m} panels left out)"),
    };
    let panels = groups
        .into_iter()
        .take(MAX_PANELS)
        .map(|(group, mut points)| {
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            Panel {
                title: if group.is_empty() { format!("{figure}{note}") } else { format!("{group}{note}") },
                x_label: first.clone(),
                y_label: figure.to_owned(),
                style: Style::Lines,
                series: interval_series(&points, "95%"),
            }
        })
        .collect();
    Figure { panels }
}

/// A capacity search's trade-off: each objective's estimate against GPUs over the points
/// judged, with the ends of its intervals at the search's level and the target.
pub fn capacity_figure(report: &CapacityReport) -> Figure {
    let mut judged: Vec<_> = report.judged.iter().collect();
    judged.sort_by_key(|j| (j.info.gpus, j.point));
    let Some(objectives) = judged.first().map(|j| &j.judgements) else {
        return Figure { panels: Vec::new() };
    };
    let panels = objectives
        .iter()
        .enumerate()
        .map(|(k, objective)| {
            let points: Vec<Estimated> = judged
                .iter()
                .filter_map(|j| j.judgements[k].estimate.map(|e| (j.info.gpus as f64, e.mean, e.half_width)))
                .collect();
            let xs = judged.iter().map(|j| j.info.gpus as f64);
            let (low, high) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| (a.min(x), b.max(x)));
            let level = format!("{:.2}%", report.level_each * 100.0);
            let mut series = interval_series(&points, &level);
            series.push(Series {
                name: format!("target {}", objective.target),
                points: vec![(low, objective.target), (high, objective.target)],
            });
            Panel {
                title: format!("{}, points judged (overloaded ones have none)", objective.figure),
                x_label: "GPUs".into(),
                y_label: objective.figure.clone(),
                style: Style::Lines,
                series,
            }
        })
        .collect();
    Figure { panels }
}
