//! The kernel against queueing theory: the simulated mean wait of an M/M/1 queue matches
//! `ρ / (μ − λ)` within its 95% confidence interval across independent replications.

use blis_kernel::toys::mm1::{self, Mm1Config};
use blis_kernel::{Assembly, HostKind, Streams};

/// Student's t quantile t(0.975, 9).
const T_975_9_DF: f64 = 2.262_157;

fn replication_mean_wait(config: Mm1Config, seed: u64, warm_up: usize) -> f64 {
    let mut assembly = Assembly::new();
    let ids = mm1::assemble(&mut assembly, config, Streams::new(seed)).unwrap();
    let mut sim = assembly.build(HostKind::Inline).unwrap();
    sim.run().unwrap();
    let server = sim.finish().take_actor::<mm1::Server>(ids.server).unwrap();
    let waits = &server.waits_us()[warm_up..];
    waits.iter().map(|&w| w as f64).sum::<f64>() / waits.len() as f64
}

/// (mean, half-width of the 95% interval) over 10 replications.
fn estimate(config: Mm1Config) -> (f64, f64) {
    let means: Vec<f64> = (0..10).map(|seed| replication_mean_wait(config, 1_000 + seed, 2_000)).collect();
    let n = means.len() as f64;
    let mean = means.iter().sum::<f64>() / n;
    let variance = means.iter().map(|m| (m - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, T_975_9_DF * (variance / n).sqrt())
}

#[test]
fn mean_wait_matches_rho_over_mu_minus_lambda() {
    // λ = 1/1000 µs⁻¹, μ = 1/700 µs⁻¹, ρ = 0.7: Wq = 0.7 / (1/700 − 1/1000) = 1633.3 µs.
    let config = Mm1Config { mean_gap_us: 1_000.0, mean_service_us: 700.0, jobs: 60_000 };
    let analytic = config.analytic_mean_wait_us();
    assert!((analytic - 1_633.33).abs() < 0.01);
    let (mean, half_width) = estimate(config);
    eprintln!("M/M/1 at ρ = 0.7: simulated {mean:.1} ± {half_width:.1} µs, analytic {analytic:.1} µs");
    assert!(
        (mean - analytic).abs() <= half_width,
        "simulated {mean:.1} ± {half_width:.1} µs does not cover the analytic {analytic:.1} µs"
    );
    // The interval is tight enough to mean something: a 10% error would be caught.
    assert!(half_width < 0.05 * analytic, "interval ±{half_width:.1} µs is too wide");
    let wrong = Mm1Config { mean_service_us: 730.0, ..config }.analytic_mean_wait_us();
    assert!((mean - wrong).abs() > half_width, "the interval also covers a wrong model ({wrong:.1} µs)");
}
