//! `blis-actor compare-configs A.yaml B.yaml`: both configurations on common random numbers,
//! every metric judged better, worse or not distinguished for B.

use std::fmt::Write;

use blis_actors::MetricComparison;
use blis_actors::stats::compare::Verdict;

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
        let verdict = match c.comparison.verdict {
            Verdict::Better => "better",
            Verdict::Worse => "worse",
            Verdict::NotDistinguished => "not distinguished",
        };
        let _ = writeln!(s, "{:<28} {:>14.4} {:>14.4} {:>26}  {verdict}", c.name, c.a, c.b, difference);
    }
    s
}
