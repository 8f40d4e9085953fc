//! `sweep`, `merge` and `capacity`: many runs of one base scenario, their table, the best of
//! them, and the smallest deployment meeting SLOs.

use std::fmt::Write;
use std::path::{Path, PathBuf};

use blis_actors::experiment::capacity::{CapacityReport, CapacitySpec, Verdict, search};
use blis_actors::experiment::sweep::best::{BestReport, Goal, best};
use blis_actors::experiment::sweep::evaluate::{PointOptions, Simulator};
use blis_actors::experiment::sweep::figure::figure;
use blis_actors::experiment::sweep::output::{SweepHeader, json_bytes, merge, shard_header};
use blis_actors::experiment::sweep::record::{PointRecord, PointStatus};
use blis_actors::experiment::sweep::shard::Shard;
use blis_actors::experiment::sweep::spec::SweepSpec;
use blis_actors::experiment::sweep::{SweepProgress, sweep};
use blis_actors::{Progress, RunError};
use blis_contracts::FieldError;
use blis_costmodel::CostData;

use crate::progress::Reporter;

/// What `--best` asks.
pub struct BestArgs {
    /// The figure.
    pub metric: String,
    /// The direction chosen, if any.
    pub goal: Option<Goal>,
    /// The false-winner chance allowed.
    pub alpha: f64,
}

/// A refusal (exit 2) or a failure (exit 1), as its message.
pub enum Failure {
    /// Bad input.
    Refused(String),
    /// The run could not go on.
    Failed(String),
}

impl From<RunError> for Failure {
    fn from(error: RunError) -> Failure {
        match error {
            RunError::Input(e) => Failure::Refused(e.to_string()),
            other => Failure::Failed(other.to_string()),
        }
    }
}

impl From<FieldError> for Failure {
    fn from(error: FieldError) -> Failure {
        Failure::Refused(error.to_string())
    }
}

/// The shard to run: `--shard I/N`, else a job array's index (with `--shards N`).
pub fn shard(flag: Option<&str>, shards: Option<u32>) -> Result<Option<Shard>, FieldError> {
    match (flag, shards) {
        (Some(flag), None) => Shard::parse(flag).map(Some),
        (Some(flag), Some(_)) => {
            Err(FieldError::new("--shards", flag, "give --shard I/N or --shards N, not both"))
        }
        (None, shards) => Shard::from_environment(&|name| std::env::var(name).ok(), shards),
    }
}

/// The figure and direction `--best` names, checked before anything runs.
fn best_target(args: &BestArgs) -> Result<(String, Goal), FieldError> {
    let figure = figure(&args.metric, "--best")?;
    let goal = Goal::for_figure(&figure, args.goal)?;
    if !(args.alpha > 0.0 && args.alpha <= 0.5) {
        return Err(FieldError::new("--alpha", args.alpha, "must be above 0 and at most 0.5"));
    }
    Ok((figure.name, goal))
}

/// Run a sweep (or its shard) into `out`; print its table, and with `best` its best point.
pub fn run_sweep(
    spec_path: &Path,
    out: &Path,
    shard: Option<Shard>,
    best_args: Option<&BestArgs>,
    options: PointOptions,
    data: &CostData,
    quiet: bool,
) -> Result<String, Failure> {
    let target = best_args.map(best_target).transpose()?;
    if let (Some(shard), Some(_)) = (shard, &target) {
        return Err(Failure::Refused(format!(
            "--best = {}: a shard ({shard}) holds only part of the points; rank them at `merge --best`",
            best_args.map_or("", |b| b.metric.as_str())
        )));
    }
    let spec = SweepSpec::load(spec_path, data)?;
    let mut reporter = Reporter::new(quiet);
    let outcome = sweep(&spec, shard, out, data, &options, &mut |p: SweepProgress| {
        reporter.update(&format!("point {}/{} ({:04})", p.done + 1, p.total, p.point), p.run);
    });
    reporter.finish();
    let Some(rows) = outcome? else {
        let shard = shard.expect("a sweep without tables is a shard");
        let mine = spec.points.iter().filter(|p| shard.owns(p.index)).count();
        return Ok(format!(
            "shard {shard}: {mine} of {} points written to {}\n",
            spec.points.len(),
            out.display()
        ));
    };
    let header = SweepHeader::of(&spec);
    picture(&header, &rows, target.as_ref(), out)?;
    let mut text = table(&header, &rows);
    if let (Some((metric, goal)), Some(args)) = (target, best_args) {
        let report = rank(&spec, &rows, &metric, goal, args.alpha, out, options, data, quiet)?;
        text.push_str(&render_best(&report));
    }
    Ok(text)
}

/// Merge shard folders into `out`; with `best`, rank the merged points (re-running the best
/// from `spec`).
#[allow(clippy::too_many_arguments)]
pub fn run_merge(
    dirs: &[PathBuf],
    out: &Path,
    best_args: Option<&BestArgs>,
    spec_path: Option<&Path>,
    options: PointOptions,
    data: &CostData,
    quiet: bool,
) -> Result<String, Failure> {
    let target = best_args.map(best_target).transpose()?;
    let spec = match (&target, spec_path) {
        (Some(_), Some(path)) => Some(SweepSpec::load(path, data)?),
        (Some(_), None) => {
            return Err(Failure::Refused(
                "--spec: missing: --best re-runs the winner and needs the sweep's spec".into(),
            ));
        }
        (None, _) => None,
    };
    // A wrong spec is refused before anything is written.
    if let (Some(spec), Some(first)) = (&spec, dirs.first()) {
        let ran = shard_header(first)?.digest;
        if spec.digest != ran {
            return Err(Failure::Refused(format!(
                "--spec = {}: not the spec these shards ran (digest {}, the shards' {ran})",
                spec_path.map_or(String::new(), |p| p.display().to_string()),
                spec.digest,
            )));
        }
    }
    let (header, rows) = merge(dirs, out)?;
    picture(&header, &rows, target.as_ref(), out)?;
    let mut text = table(&header, &rows);
    if let (Some((metric, goal)), Some(args), Some(spec)) = (target, best_args, spec) {
        let report = rank(&spec, &rows, &metric, goal, args.alpha, out, options, data, quiet)?;
        text.push_str(&render_best(&report));
    }
    Ok(text)
}

/// The sweep's trade-off picture, `tradeoff.svg` and `tradeoff.png`, on `--best`'s figure
/// (p99 TTFT without it).
fn picture(
    header: &SweepHeader,
    rows: &[PointRecord],
    target: Option<&(String, Goal)>,
    out: &Path,
) -> Result<(), Failure> {
    let figure = target.map_or("ttft_ms.p99", |(metric, _)| metric.as_str());
    crate::tradeoff::write(&crate::tradeoff::sweep_figure(&header.axes, rows, figure), out, "tradeoff")
        .map_err(Failure::Failed)
}

/// Select the best point on `metric`, re-run it on fresh seeds, write `best.json`.
#[allow(clippy::too_many_arguments)]
fn rank(
    spec: &SweepSpec,
    rows: &[PointRecord],
    metric: &str,
    goal: Goal,
    alpha: f64,
    out: &Path,
    options: PointOptions,
    data: &CostData,
    quiet: bool,
) -> Result<BestReport, Failure> {
    let mut reporter = Reporter::new(quiet);
    let mut progress = |point: usize, p: Progress| reporter.update(&format!("fresh seeds ({point:04})"), p);
    let mut simulator =
        Simulator { base: &spec.base, points: &spec.points, data, options, progress: &mut progress };
    let report = best(rows, metric, goal, alpha, spec.base.seed, &mut simulator);
    reporter.finish();
    let report = report?;
    std::fs::write(out.join("best.json"), json_bytes(&report))
        .map_err(|e| Failure::Failed(format!("{}: {e}", out.join("best.json").display())))?;
    Ok(report)
}

/// The printed table: each point's values, status and headline figures.
fn table(header: &SweepHeader, rows: &[PointRecord]) -> String {
    let mut text = String::new();
    let _ = writeln!(text, "sweep of {} ({} points, seed {})", header.base, header.points, header.seed);
    for row in rows {
        let values: Vec<String> = row.values.iter().map(|v| format!("{}={}", v.path, v.value)).collect();
        let state = match row.status {
            PointStatus::Ran if row.overloaded => "overloaded".to_owned(),
            PointStatus::Ran => "ran".to_owned(),
            PointStatus::Refused => format!("refused: {}", row.reason.as_deref().unwrap_or("")),
            PointStatus::Failed => format!("failed: {}", row.reason.as_deref().unwrap_or("")),
        };
        let figure = |name: &str| {
            row.estimates.get(name).map_or("-".to_owned(), |e| match e.half_width {
                Some(h) => format!("{:.1} ± {:.1}", e.mean, h),
                None => format!("{:.1}", e.mean),
            })
        };
        let _ = writeln!(
            text,
            "  {} {}: {state}; ttft p99 {} ms, tokens/s {}",
            row.id,
            values.join(" "),
            figure("ttft_ms.p99"),
            figure("output_tokens_per_s")
        );
    }
    text
}

fn render_best(report: &BestReport) -> String {
    let selection = &report.selection;
    let mut text = String::new();
    let e = selection.in_sample;
    let _ = writeln!(
        text,
        "best on {} ({:?}, false-winner chance at most {}):",
        report.figure, report.goal, report.alpha
    );
    if selection.winner {
        let _ = writeln!(text, "  winner: point {:04}, distinguished from every other point", selection.best);
    } else {
        let contenders: Vec<String> = selection.contenders.iter().map(|c| format!("{c:04}")).collect();
        let _ = writeln!(
            text,
            "  no winner named: points {} are not distinguished (best mean: {:04})",
            contenders.join(", "),
            selection.best
        );
    }
    let _ = writeln!(
        text,
        "  in sample: {:.3} ± {:.3} (biased toward the good side)",
        e.mean,
        e.half_width.unwrap_or(f64::NAN)
    );
    match report.fresh.estimate {
        Some(f) => {
            let _ = writeln!(
                text,
                "  fresh seeds (seed {}, {} replications): {:.3} ± {:.3}",
                report.fresh.seed,
                report.fresh.replications,
                f.mean,
                f.half_width.unwrap_or(f64::NAN)
            );
        }
        None => {
            let _ = writeln!(
                text,
                "  fresh seeds (seed {}): no estimate (overloaded: {})",
                report.fresh.seed, report.fresh.overloaded
            );
        }
    }
    for excluded in &selection.excluded {
        let _ = writeln!(text, "  not ranked: {:04}: {}", excluded.point, excluded.reason);
    }
    text
}

/// Run a capacity search; write `capacity.json` into `out` when given; the printed report.
pub fn run_capacity(
    spec_path: &Path,
    out: Option<&Path>,
    options: PointOptions,
    data: &CostData,
    quiet: bool,
) -> Result<String, Failure> {
    let spec = CapacitySpec::load(spec_path, data)?;
    let mut reporter = Reporter::new(quiet);
    let mut progress = |point: usize, p: Progress| reporter.update(&format!("point {point:04}"), p);
    let mut simulator =
        Simulator { base: &spec.base, points: &spec.points, data, options, progress: &mut progress };
    let report = search(&spec.plan, &mut simulator);
    reporter.finish();
    let report = report?;
    if let Some(out) = out {
        std::fs::create_dir_all(out).map_err(|e| Failure::Failed(format!("{}: {e}", out.display())))?;
        std::fs::write(out.join("capacity.json"), json_bytes(&report))
            .map_err(|e| Failure::Failed(format!("{}: {e}", out.join("capacity.json").display())))?;
        crate::tradeoff::write(&crate::tradeoff::capacity_figure(&report), out, "capacity")
            .map_err(Failure::Failed)?;
    }
    Ok(render_capacity(&report))
}

/// The capacity report for a person.
pub fn render_capacity(report: &CapacityReport) -> String {
    let mut text = String::new();
    let describe = |j: &blis_actors::experiment::capacity::Judged| {
        let values: Vec<String> = j.info.values.iter().map(|v| format!("{}={}", v.path, v.value)).collect();
        format!(
            "point {:04} ({}; {} instances, {} GPUs)",
            j.point,
            values.join(" "),
            j.info.instances,
            j.info.gpus
        )
    };
    let figures = |j: &blis_actors::experiment::capacity::Judged| {
        j.judgements
            .iter()
            .map(|g| match g.estimate {
                Some(e) => format!(
                    "{} {:.1} [{:.1}, {:.1}] vs {} ({})",
                    g.figure,
                    e.mean,
                    e.mean - e.half_width.unwrap_or(f64::INFINITY),
                    e.mean + e.half_width.unwrap_or(f64::INFINITY),
                    g.target,
                    g.side
                ),
                None => format!("{} {}", g.figure, g.side),
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    match report.answer.and_then(|a| report.judged.iter().find(|j| j.point == a)) {
        Some(answer) => {
            let _ = writeln!(text, "answer: {}", describe(answer));
        }
        None => {
            let _ = writeln!(text, "answer: none of the points meets the SLOs");
        }
    }
    let _ = writeln!(text, "procedure: {}", report.procedure);
    let _ = writeln!(text, "points judged:");
    for j in &report.judged {
        let verdict = match j.verdict {
            Verdict::Meets => "meets",
            Verdict::Fails => "fails",
            Verdict::Undecided => "undecided",
        };
        let _ =
            writeln!(text, "  {}: {verdict} on {} replications: {}", describe(j), j.replications, figures(j));
        for reason in &j.reasons {
            let _ = writeln!(text, "    rejected: {reason}");
        }
    }
    if let Some(fresh) = &report.fresh {
        let confirmed = match fresh.verdict {
            Verdict::Meets => "confirmed: every interval on the right side",
            Verdict::Fails => "NOT confirmed: an interval is on the wrong side",
            Verdict::Undecided => "not confirmed: an interval holds its target",
        };
        let _ = writeln!(
            text,
            "fresh seeds, {} replications, 95% intervals: {} — {confirmed}",
            fresh.replications,
            figures(fresh)
        );
    }
    text
}
