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
