//! `blis-actor compare-configs A.yaml B.yaml`: both configurations on common random numbers,
//! every metric judged better, worse or not distinguished for B (higher or lower for a metric
//! the registry calls better in neither direction).

use std::fmt::Write;

use blis_actors::MetricComparison;
use blis_actors::stats::compare::Verdict;
use blis_contracts::Better;

/// The comparison table.
pub fn render(a: &str, b: &str, replications: usize, comparisons: &[MetricComparison]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "A = {a}\nB = {b}\n{replications} paired replications (same seeds); 95% intervals of B − A"
    );
    let _ = writeln!(s, "{:<28} {:>14} {:>14} {:>26}  verdict for B", "metric", "A", "B", "B − A");
    for c in comparisons {
        let d = &c.comparison.difference;
        let difference = match d.half_width {
            Some(h) => format!("{:+.4} ± {:.4}", d.mean, h),
            None => format!("{:+.4}", d.mean),
        };
        let verdict = match (c.comparison.verdict, c.better) {
            (Verdict::NotDistinguished, _) => "not distinguished",
            (Verdict::Better, Better::Neither) => "lower",
            (Verdict::Worse, Better::Neither) => "higher",
            (Verdict::Better, _) => "better",
            (Verdict::Worse, _) => "worse",
        };
        let _ = writeln!(s, "{:<28} {:>14.4} {:>14.4} {:>26}  {verdict}", c.name, c.a, c.b, difference);
    }
    s
}

#[cfg(test)]
mod tests {
    use blis_actors::stats::compare::Comparison;
    use blis_actors::stats::interval::Estimate;

    use super::*;

    fn row(name: &str, verdict: Verdict, better: Better) -> MetricComparison {
        let difference = Estimate { mean: -0.1, half_width: Some(0.01), n: 4, level: 0.95 };
        MetricComparison {
            name: name.into(),
            a: 0.5,
            b: 0.4,
            comparison: Comparison { difference, verdict },
            better,
        }
    }

    #[test]
    fn a_descriptive_metric_reads_lower_or_higher_never_better_or_worse() {
        let table = render(
            "a.yaml",
            "b.yaml",
            4,
            &[
                row("kv_utilisation", Verdict::Better, Better::Neither),
                row("ttft_ms.mean", Verdict::Better, Better::Lower),
            ],
        );
        let line = |name: &str| table.lines().find(|l| l.starts_with(name)).unwrap().to_owned();
        assert!(line("kv_utilisation").ends_with("lower"), "{table}");
        assert!(line("ttft_ms.mean").ends_with("better"), "{table}");
    }
}
