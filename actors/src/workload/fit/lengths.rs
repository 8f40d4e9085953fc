//! Prompt and output lengths: normal, log-normal and exponential laws fitted by maximum
//! likelihood to the recorded lengths, and the empirical table that stands in when none fits.
//!
//! Each law is clamped to the trace's smallest and largest length and tested as the simulator
//! draws it: rounded to the nearest whole token, then clamped.

use blis_contracts::LengthDist;

use super::special::normal_cdf;
use super::{Candidate, EMPIRICAL_VALUES, FALLBACK_P, KsTest, QuantityFit, ks_grid, significant, split};

/// Mean and standard deviation (maximum likelihood: divided by n).
fn mean_std(xs: &[f64]) -> (f64, f64) {
    let mean = xs.iter().sum::<f64>() / xs.len() as f64;
    (mean, libm::sqrt(xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / xs.len() as f64))
}

/// P(length ≤ k) for a length drawn from `dist` as the simulator draws it (rounded to the nearest
/// whole token, then clamped).
fn length_cdf(dist: &LengthDist, k: u64) -> f64 {
    let k = u32::try_from(k).unwrap_or(u32::MAX);
    let clamped = |min: u32, max: u32, continuous: &dyn Fn(f64) -> f64| {
        if k < min {
            0.0
        } else if k >= max {
            1.0
        } else {
            continuous(f64::from(k) + 0.5)
        }
    };
    match dist {
        LengthDist::Constant { value } => f64::from(u8::from(k >= *value)),
        LengthDist::Uniform { min, max } => {
            clamped(*min, *max, &|x| (x - 0.5 - f64::from(*min) + 1.0) / f64::from(max - min + 1))
        }
        LengthDist::Normal { mean, std, min, max } => clamped(*min, *max, &|x| normal_cdf((x - mean) / std)),
        LengthDist::Lognormal { mean, std, min, max } => {
            let sigma2 = libm::log(1.0 + (std * std) / (mean * mean));
            let mu = libm::log(*mean) - 0.5 * sigma2;
            clamped(*min, *max, &|x| normal_cdf((libm::log(x) - mu) / libm::sqrt(sigma2)))
        }
        LengthDist::Exponential { mean, min, max } => clamped(*min, *max, &|x| 1.0 - libm::exp(-x / mean)),
        LengthDist::Empirical { values, weights } => {
            let total: f64 = weights.iter().sum();
            values.iter().zip(weights).filter(|(v, _)| **v <= k).map(|(_, w)| w).sum::<f64>() / total
        }
    }
}

/// The empirical table of `sorted`: each distinct value with its count, or, beyond
/// [`EMPIRICAL_VALUES`] distinct values, that many equally likely quantiles.
fn empirical(sorted: &[u32]) -> LengthDist {
    let mut table: Vec<(u32, f64)> = Vec::new();
    let mut add = |value: u32| match table.last_mut() {
        Some((last, weight)) if *last == value => *weight += 1.0,
        _ => table.push((value, 1.0)),
    };
    let mut distinct = sorted.to_vec();
    distinct.dedup();
    if distinct.len() <= EMPIRICAL_VALUES {
        sorted.iter().for_each(|&v| add(v));
    } else {
        let n = sorted.len();
        (0..EMPIRICAL_VALUES).for_each(|i| add(sorted[(2 * i + 1) * n / (2 * EMPIRICAL_VALUES)]));
    }
    let (values, weights) = table.into_iter().unzip();
    LengthDist::Empirical { values, weights }
}

/// The candidates of the lengths `lengths` (≥ 1), tested and chosen.
pub fn fit_lengths(lengths: &[u32]) -> QuantityFit<LengthDist> {
    let min = lengths.iter().copied().min().unwrap_or(1);
    let max = lengths.iter().copied().max().unwrap_or(1);
    if min == max {
        return QuantityFit {
            candidates: Vec::new(),
            chosen: "constant",
            law: LengthDist::Constant { value: min },
        };
    }
    let (kept, held) = split(lengths);
    let mut held: Vec<u64> = held.into_iter().map(u64::from).collect();
    held.sort_unstable();
    let mut sorted_kept = kept.clone();
    sorted_kept.sort_unstable();
    let xs: Vec<f64> = kept.iter().map(|&x| f64::from(x)).collect();
    let logs: Vec<f64> = xs.iter().map(|&x| libm::log(x)).collect();
    let varies = |std: f64| if std > 0.0 { Ok(()) } else { Err("the kept lengths do not vary".to_owned()) };
    let normal = {
        let (mean, std) = mean_std(&xs);
        varies(std).map(|()| LengthDist::Normal { mean: significant(mean), std: significant(std), min, max })
    };
    let lognormal = {
        let (mu, sigma) = mean_std(&logs);
        varies(sigma).map(|()| {
            let mean = libm::exp(mu + 0.5 * sigma * sigma);
            let std = mean * libm::sqrt(libm::expm1(sigma * sigma));
            LengthDist::Lognormal { mean: significant(mean), std: significant(std), min, max }
        })
    };
    let exponential = Ok(LengthDist::Exponential { mean: significant(mean_std(&xs).0), min, max });
    let fits = [
        ("normal", normal),
        ("lognormal", lognormal),
        ("exponential", exponential),
        ("empirical", Ok(empirical(&sorted_kept))),
    ];
    let candidates: Vec<Candidate<LengthDist>> = fits
        .into_iter()
        .map(|(family, law)| {
            let test = law
                .as_ref()
                .ok()
                .map(|law| KsTest::new(ks_grid(&held, 1, |k| length_cdf(law, k)), held.len()));
            Candidate { family, law, test, unusable: None }
        })
        .collect();
    let best = candidates
        .iter()
        .filter(|c| c.family != "empirical")
        .filter_map(|c| Some((c, c.law.as_ref().ok()?, c.test?)))
        .min_by(|a, b| a.2.d.total_cmp(&b.2.d))
        .filter(|(_, _, test)| test.p >= FALLBACK_P);
    let (chosen, law) = match best {
        Some((candidate, law, _)) => (candidate.family, law.clone()),
        None => ("empirical", empirical(&sorted_kept)),
    };
    QuantityFit { candidates, chosen, law }
}

#[cfg(test)]
mod tests {
    use blis_kernel::Streams;

    use super::*;
    use crate::workload::sampling::draw_length;

    #[test]
    fn the_cdf_is_that_of_the_simulators_draws() {
        let dists = [
            LengthDist::Normal { mean: 100.0, std: 40.0, min: 50, max: 170 },
            LengthDist::Lognormal { mean: 30.0, std: 25.0, min: 2, max: 90 },
            LengthDist::Exponential { mean: 12.0, min: 1, max: 40 },
            LengthDist::Uniform { min: 3, max: 9 },
            LengthDist::Empirical { values: vec![4, 8], weights: vec![3.0, 1.0] },
        ];
        for (i, dist) in dists.iter().enumerate() {
            let mut stream = Streams::new(9).stream("fit-test", "length-cdf", &i.to_string());
            let draws: Vec<u32> = (0..100_000).map(|_| draw_length(dist, &mut stream)).collect();
            for k in [0, 1, 4, 8, 20, 49, 50, 51, 100, 169, 170] {
                let share = draws.iter().filter(|&&d| d <= k).count() as f64 / draws.len() as f64;
                let cdf = length_cdf(dist, u64::from(k));
                assert!((share - cdf).abs() < 0.005, "{dist:?} at {k}: drawn {share}, cdf {cdf}");
            }
        }
    }

    #[test]
    fn an_empirical_table_counts_values_or_keeps_equally_likely_quantiles() {
        assert_eq!(
            empirical(&[3, 3, 5]),
            LengthDist::Empirical { values: vec![3, 5], weights: vec![2.0, 1.0] }
        );
        let many: Vec<u32> = (1..=1_000).collect();
        let LengthDist::Empirical { values, weights } = empirical(&many) else { panic!() };
        assert_eq!((values.len(), values[0], values[199]), (EMPIRICAL_VALUES, 3, 998));
        assert!(weights.iter().all(|&w| w == 1.0));
    }
}
