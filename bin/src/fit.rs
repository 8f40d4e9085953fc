//! `fit-workload`: a synthetic workload fitted to a trace.
//!
//! The trace is read through the same source a replay uses (so it is refused by file, line and
//! field as a replay would be), its gaps and lengths are fitted
//! ([`blis_actors::workload::fit`]), every candidate family is printed with its parameters and
//! its Kolmogorov–Smirnov test on the held-out samples, and the chosen laws are written as the
//! `workload:` section of a scenario.

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use blis_actors::workload::fit::{FALLBACK_P, HOLD_OUT, KsTest, QuantityFit, TraceSample, WorkloadFit};
use blis_actors::workload::replay_file;
use blis_actors::workload::sampling::{GapLaw, weibull_cv};
use blis_contracts::{LengthDist, ReplayFormat, Workload, yaml};
use clap::ValueEnum;
use serde::Serialize;

use super::fail;

/// Formats `fit-workload` reads (those of `workload.replays[i].format`).
#[derive(Clone, Copy, ValueEnum)]
pub enum TraceFormat {
    /// One request DAG per line, as `--export-workload` writes.
    Jsonl,
    /// The Azure LLM inference trace CSV.
    AzureCsv,
    /// Mooncake's JSONL trace.
    Mooncake,
}

impl TraceFormat {
    fn replay_format(self) -> ReplayFormat {
        match self {
            TraceFormat::Jsonl => ReplayFormat::Jsonl,
            TraceFormat::AzureCsv => ReplayFormat::AzureCsv,
            TraceFormat::Mooncake => ReplayFormat::Mooncake,
        }
    }

    fn name(self) -> &'static str {
        match self {
            TraceFormat::Jsonl => "jsonl",
            TraceFormat::AzureCsv => "azure-csv",
            TraceFormat::Mooncake => "mooncake",
        }
    }
}

/// The document written: a scenario's `workload:` section.
#[derive(Serialize)]
struct WorkloadSection<'a> {
    workload: &'a Workload,
}

/// Fit `trace` read as `format`; print the table and write the spec to `out` (stdout without).
pub fn fit_workload(trace: &Path, format: TraceFormat, out: Option<&Path>) -> ExitCode {
    let label = trace.display().to_string();
    let client = client_name(trace);
    let sample = replay_file(format.replay_format(), trace, &label, &client)
        .and_then(|(mut source, _)| TraceSample::collect(source.as_mut()));
    let sample = match sample {
        Ok(sample) => sample,
        Err(error) => return fail(2, error),
    };
    let fit = match WorkloadFit::new(&sample) {
        Ok(fit) => fit,
        Err(error) => return fail(2, format_args!("{label}: {error}")),
    };
    print!("{}", table(&label, format, &sample, &fit));
    let workload = fit.workload(&client);
    let yaml = match yaml::to_string(&WorkloadSection { workload: &workload }) {
        Ok(yaml) => yaml,
        Err(error) => return fail(1, format_args!("cannot write the workload spec: {error}")),
    };
    let spec = format!(
        "# Fitted by `blis-actor fit-workload` to {label} ({}): \
         arrivals {}, input tokens {}, output tokens {}.\n{yaml}",
        format.name(),
        fit.gaps.chosen,
        fit.input_tokens.chosen,
        fit.output_tokens.chosen
    );
    match out {
        Some(path) => {
            if let Err(error) = std::fs::write(path, spec) {
                return fail(1, format_args!("{}: cannot write the workload spec: {error}", path.display()));
            }
            eprintln!("wrote {}", path.display());
        }
        None => print!("\n{spec}"),
    }
    ExitCode::SUCCESS
}

/// The fitted client's name: the trace's file stem with characters names do not allow replaced.
fn client_name(trace: &Path) -> String {
    let stem = trace.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let name: String = stem
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '-' })
        .collect();
    if name.is_empty() { "trace".to_owned() } else { name }
}

/// Every candidate of every quantity with its parameters and test, the chosen ones starred.
fn table(label: &str, format: TraceFormat, sample: &TraceSample, fit: &WorkloadFit) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{label} ({}): {} requests, {} gaps, {} LLM calls; \
         every {HOLD_OUT}th sample held out to test the fits",
        format.name(),
        sample.requests,
        sample.gaps_us.len(),
        sample.input_tokens.len()
    );
    let _ = writeln!(
        out,
        "time resolution {} µs: {} of {} gaps within one step, counted only as shorter than {} µs\n",
        fit.resolution_us,
        fit.censored_gaps,
        sample.gaps_us.len(),
        1.5 * fit.resolution_us as f64
    );
    let _ = writeln!(
        out,
        "  {:<14} {:<12} {:<60} {:>7} {:>9} {:>5}",
        "quantity", "family", "parameters", "KS D", "p", "n"
    );
    rows(&mut out, "arrival gaps", &fit.gaps, describe_gaps);
    rows(&mut out, "input tokens", &fit.input_tokens, describe_lengths);
    rows(&mut out, "output tokens", &fit.output_tokens, describe_lengths);
    let _ = writeln!(out, "\nthe starred family of each quantity is written to the spec");
    for (name, quantity) in [("input tokens", &fit.input_tokens), ("output tokens", &fit.output_tokens)] {
        if quantity.chosen == "empirical" {
            let _ = writeln!(
                out,
                "note: no family fits the {name} at p ≥ {FALLBACK_P} on the held-out samples; \
                 written as an empirical table"
            );
        }
    }
    if sample.multi_node_requests > 0 {
        let _ = writeln!(
            out,
            "note: {} requests have more than one node; the fitted client sends one call per request \
             (DAG shapes, tools and intervals are not fitted)",
            sample.multi_node_requests
        );
    }
    if sample.calls_with_shared_blocks > 0 {
        let _ = writeln!(
            out,
            "note: {} calls' prompts hold shared blocks; the fitted client's prompts are its own tokens \
             (shared prefixes are not fitted)",
            sample.calls_with_shared_blocks
        );
    }
    out
}

/// The rows of one quantity.
fn rows<L>(out: &mut String, quantity: &str, fit: &QuantityFit<L>, describe: fn(&L) -> String) {
    if fit.candidates.is_empty() {
        let _ = writeln!(out, "* {quantity:<14} {:<12} {}", fit.chosen, describe(&fit.law));
        return;
    }
    for candidate in &fit.candidates {
        let mark = if candidate.family == fit.chosen { '*' } else { ' ' };
        let parameters = match (&candidate.law, &candidate.unusable) {
            (Ok(law), None) => describe(law),
            (Ok(law), Some(why)) => format!("{} (unusable: {why})", describe(law)),
            (Err(why), _) => format!("not fitted: {why}"),
        };
        let test = candidate.test.map_or_else(String::new, |KsTest { d, p, n }| {
            let p = if p < 1e-4 { format!("{p:.1e}") } else { format!("{p:.4}") };
            format!("{d:>7.4} {p:>9} {n:>5}")
        });
        let _ = writeln!(out, "{mark} {quantity:<14} {:<12} {parameters:<60} {test}", candidate.family);
    }
}

fn describe_gaps(law: &GapLaw) -> String {
    match *law {
        GapLaw::Exponential { mean_us } => format!("rate {:.4}/s", 1e6 / mean_us),
        GapLaw::Gamma { shape, scale_us } => format!(
            "rate {:.4}/s, cv {:.4} (shape {shape:.4}, scale {:.4} ms)",
            1e6 / (shape * scale_us),
            1.0 / libm::sqrt(shape),
            scale_us / 1e3
        ),
        GapLaw::Weibull { shape, scale_us } => format!(
            "rate {:.4}/s, cv {:.4} (shape {shape:.4}, scale {:.4} ms)",
            1e6 / (scale_us * libm::tgamma(1.0 + 1.0 / shape)),
            weibull_cv(shape),
            scale_us / 1e3
        ),
        GapLaw::Constant { gap_us } => format!("rate {:.4}/s", 1e6 / gap_us),
    }
}

fn describe_lengths(dist: &LengthDist) -> String {
    match dist {
        LengthDist::Constant { value } => format!("{value} tokens"),
        LengthDist::Uniform { min, max } => format!("{min} to {max}"),
        LengthDist::Normal { mean, std, min, max } | LengthDist::Lognormal { mean, std, min, max } => {
            format!("mean {mean}, std {std}, clamped to [{min}, {max}]")
        }
        LengthDist::Exponential { mean, min, max } => format!("mean {mean}, clamped to [{min}, {max}]"),
        LengthDist::Empirical { values, .. } => format!("{} values", values.len()),
    }
}
