//! Draws from the workload's distributions: arrival gaps, token counts and durations, each from
//! a named substream.

use blis_contracts::{Duration, LengthDist};
use blis_kernel::Substream;

/// Gaps between arrivals of a renewal process with a given rate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum GapLaw {
    /// Exponential with mean `1/rate`.
    Exponential {
        /// Mean gap, µs.
        mean_us: f64,
    },
    /// Gamma with a shape and scale giving the requested mean and coefficient of variation.
    Gamma {
        /// `1/cv²`.
        shape: f64,
        /// Mean gap over shape, µs.
        scale_us: f64,
    },
    /// Weibull with a shape giving the requested coefficient of variation.
    Weibull {
        /// Solved from the coefficient of variation.
        shape: f64,
        /// Mean gap over `Γ(1 + 1/shape)`, µs.
        scale_us: f64,
    },
    /// Always the mean.
    Constant {
        /// The gap, µs.
        gap_us: f64,
    },
}

impl GapLaw {
    /// Exponential gaps at `rate` per second.
    pub fn poisson(rate_per_s: f64) -> GapLaw {
        GapLaw::Exponential { mean_us: 1e6 / rate_per_s }
    }

    /// Gamma gaps at `rate` per second with coefficient of variation `cv`.
    pub fn gamma(rate_per_s: f64, cv: f64) -> GapLaw {
        let shape = 1.0 / (cv * cv);
        GapLaw::Gamma { shape, scale_us: 1e6 / rate_per_s / shape }
    }

    /// Weibull gaps at `rate` per second with coefficient of variation `cv`.
    pub fn weibull(rate_per_s: f64, cv: f64) -> GapLaw {
        let shape = weibull_shape_for_cv(cv);
        GapLaw::Weibull { shape, scale_us: 1e6 / rate_per_s / libm::tgamma(1.0 + 1.0 / shape) }
    }

    /// Even gaps at `rate` per second.
    pub fn constant(rate_per_s: f64) -> GapLaw {
        GapLaw::Constant { gap_us: 1e6 / rate_per_s }
    }

    /// One gap, µs (not rounded).
    pub fn draw(&self, stream: &mut Substream) -> f64 {
        match *self {
            GapLaw::Exponential { mean_us } => stream.exponential(mean_us),
            GapLaw::Gamma { shape, scale_us } => stream.gamma(shape, scale_us),
            GapLaw::Weibull { shape, scale_us } => stream.weibull(shape, scale_us),
            GapLaw::Constant { gap_us } => gap_us,
        }
    }
}

/// The coefficient of variation of Weibull variables of shape `k`:
/// `cv² = Γ(1 + 2/k) / Γ(1 + 1/k)² − 1`, decreasing in `k`.
pub fn weibull_cv(k: f64) -> f64 {
    let g1 = libm::tgamma(1.0 + 1.0 / k);
    libm::sqrt(libm::tgamma(1.0 + 2.0 / k) / (g1 * g1) - 1.0)
}

/// The Weibull shape `k` whose coefficient of variation is `cv` ([`weibull_cv`] inverted by
/// bisection on `ln k`).
pub fn weibull_shape_for_cv(cv: f64) -> f64 {
    let (mut low, mut high) = (libm::log(0.02), libm::log(50.0));
    for _ in 0..200 {
        let mid = 0.5 * (low + high);
        if weibull_cv(libm::exp(mid)) > cv {
            low = mid;
        } else {
            high = mid;
        }
    }
    libm::exp(0.5 * (low + high))
}

/// One token count from `dist`.
pub fn draw_length(dist: &LengthDist, stream: &mut Substream) -> u32 {
    let clamp = |x: f64, min: u32, max: u32| (libm::round(x).max(f64::from(min))).min(f64::from(max)) as u32;
    match dist {
        LengthDist::Constant { value } => *value,
        LengthDist::Uniform { min, max } => min + stream.below(u64::from(max - min) + 1) as u32,
        LengthDist::Normal { mean, std, min, max } => {
            clamp(mean + std * stream.standard_normal(), *min, *max)
        }
        LengthDist::Lognormal { mean, std, min, max } => {
            // The underlying normal's parameters from the length's own mean and deviation.
            let sigma2 = libm::log(1.0 + (std * std) / (mean * mean));
            let mu = libm::log(*mean) - 0.5 * sigma2;
            clamp(libm::exp(mu + libm::sqrt(sigma2) * stream.standard_normal()), *min, *max)
        }
        LengthDist::Exponential { mean, min, max } => clamp(stream.exponential(*mean), *min, *max),
        LengthDist::Empirical { values, weights } => {
            let total: f64 = weights.iter().sum();
            let mut target = stream.unit() * total;
            for (value, weight) in values.iter().zip(weights) {
                if target < *weight {
                    return *value;
                }
                target -= weight;
            }
            // Rounding left the target at the very top: the last value with a positive weight.
            values.iter().zip(weights).rev().find(|(_, w)| **w > 0.0).map_or(values[0], |(v, _)| *v)
        }
    }
}

/// One duration from `dist`, µs (rounded up).
pub fn draw_duration_us(dist: &Duration, stream: &mut Substream) -> u64 {
    let seconds = match *dist {
        Duration::Constant { value } => value,
        Duration::Uniform { min, max } => min + (max - min) * stream.unit(),
        Duration::Exponential { mean } => stream.exponential(mean),
    };
    libm::ceil(seconds * 1e6) as u64
}

#[cfg(test)]
mod tests {
    use blis_kernel::Streams;

    use super::*;

    fn stream(name: &str) -> Substream {
        Streams::new(7).stream("test", name, "")
    }

    /// Mean and coefficient of variation of `n` draws.
    fn moments(n: usize, mut draw: impl FnMut() -> f64) -> (f64, f64) {
        let samples: Vec<f64> = (0..n).map(|_| draw()).collect();
        let mean = samples.iter().sum::<f64>() / n as f64;
        let var = samples.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1) as f64;
        (mean, libm::sqrt(var) / mean)
    }

    fn close(value: f64, expected: f64, tolerance: f64) -> bool {
        (value - expected).abs() <= tolerance * expected.abs()
    }

    #[test]
    fn each_arrival_process_has_its_rate_and_cv() {
        let cases = [
            ("poisson", GapLaw::poisson(20.0), 1.0),
            ("gamma-bursty", GapLaw::gamma(20.0, 3.0), 3.0),
            ("gamma-regular", GapLaw::gamma(20.0, 0.5), 0.5),
            ("weibull-bursty", GapLaw::weibull(20.0, 2.0), 2.0),
            ("weibull-regular", GapLaw::weibull(20.0, 0.3), 0.3),
        ];
        for (name, law, cv) in cases {
            let mut s = stream(name);
            let (mean, got_cv) = moments(400_000, || law.draw(&mut s));
            assert!(close(mean, 50_000.0, 0.02), "{name}: mean gap {mean} µs");
            assert!(close(got_cv, cv, 0.04), "{name}: cv {got_cv}, wanted {cv}");
        }
        let mut s = stream("constant");
        assert_eq!(GapLaw::constant(20.0).draw(&mut s), 50_000.0);
    }

    #[test]
    fn weibull_shape_solves_its_cv() {
        // Shape 1 is the exponential (cv 1); shape 2 has cv √(4/π − 1) = 0.5227.
        assert!((weibull_shape_for_cv(1.0) - 1.0).abs() < 1e-9);
        assert!((weibull_shape_for_cv(0.522_723_200_877_2) - 2.0).abs() < 1e-6);
    }

    #[test]
    fn each_length_distribution_has_its_mean_and_spread() {
        let n = 200_000;
        let cases: Vec<(&str, LengthDist, f64, f64)> = vec![
            ("uniform", LengthDist::Uniform { min: 100, max: 300 }, 200.0, 58.02 / 200.0),
            ("normal", LengthDist::Normal { mean: 500.0, std: 100.0, min: 1, max: 10_000 }, 500.0, 0.2),
            (
                "lognormal",
                LengthDist::Lognormal { mean: 800.0, std: 600.0, min: 1, max: 1_000_000 },
                800.0,
                0.75,
            ),
            ("exponential", LengthDist::Exponential { mean: 300.0, min: 1, max: 1_000_000 }, 300.0, 1.0),
        ];
        for (name, dist, mean, cv) in cases {
            let mut s = stream(name);
            let (got_mean, got_cv) = moments(n, || f64::from(draw_length(&dist, &mut s)));
            assert!(close(got_mean, mean, 0.02), "{name}: mean {got_mean}");
            assert!(close(got_cv, cv, 0.05), "{name}: cv {got_cv}, wanted {cv}");
        }
        let mut s = stream("clamped");
        let clamped = LengthDist::Normal { mean: 100.0, std: 500.0, min: 50, max: 150 };
        assert!((0..10_000).all(|_| (50..=150).contains(&draw_length(&clamped, &mut s))));
        let empirical = LengthDist::Empirical { values: vec![10, 20, 30], weights: vec![1.0, 0.0, 3.0] };
        let mut s = stream("empirical");
        let draws: Vec<u32> = (0..40_000).map(|_| draw_length(&empirical, &mut s)).collect();
        let tens = draws.iter().filter(|&&v| v == 10).count() as f64 / draws.len() as f64;
        assert!(!draws.contains(&20) && close(tens, 0.25, 0.03), "share of 10s {tens}");
    }

    #[test]
    fn durations_are_seconds_in_microseconds() {
        let mut s = stream("durations");
        assert_eq!(draw_duration_us(&Duration::Constant { value: 1.5 }, &mut s), 1_500_000);
        let (mean, cv) =
            moments(200_000, || draw_duration_us(&Duration::Exponential { mean: 2.0 }, &mut s) as f64);
        assert!(close(mean, 2e6, 0.02) && close(cv, 1.0, 0.03), "{mean} {cv}");
    }
}
