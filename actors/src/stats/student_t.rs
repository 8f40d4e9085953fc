//! Quantiles of Student's t and of the standard normal distribution.
//!
//! Both are found the same way: the upper tail `P(X > x)` is evaluated accurately for `x ≥ 0`,
//! and the quantile is the root of `tail(x) = target`, by Newton's method with the density as
//! derivative, kept inside a shrinking bracket by bisection whenever a step would leave it. The
//! normal tail is `erfc(x/√2)/2` from `libm`. The t tail is half the regularized incomplete beta
//! function `I_w(ν/2, 1/2)` at `w = ν/(ν + t²)`, evaluated by its continued fraction (modified
//! Lentz) with every logarithm taken without cancellation, so tails down to 1e-300 stay
//! accurate. Above [`EXPANSION_DEGREES_OF_FREEDOM`] the continued fraction needs thousands of
//! terms and loses digits to `ν·w` near `ν`, so t comes instead from the normal quantile by
//! Fisher's asymptotic expansion in `1/ν` (Abramowitz & Stegun 26.7.5), whose omitted terms are
//! below 1e-12 relative there.

use std::f64::consts::{PI, SQRT_2};

/// Degrees of freedom from which [`t_quantile`] uses the expansion about the normal quantile.
pub const EXPANSION_DEGREES_OF_FREEDOM: f64 = 1e5;

/// The `p` quantile of Student's t distribution with `df` degrees of freedom.
///
/// Accurate to about 1e-11 relative for every `df ≥ 1` (fractional `df` allowed) while the
/// smaller tail `min(p, 1 − p)` is at least 1e-300. Of course `1 − p` itself is rounded: for
/// `p` within 1e-8 of 1 the input carries more error than the computation adds.
///
/// # Panics
///
/// If `p` is not strictly between 0 and 1, or `df` is not a positive finite number.
pub fn t_quantile(p: f64, df: f64) -> f64 {
    assert!(df > 0.0 && df.is_finite(), "t_quantile needs positive finite degrees of freedom, got {df}");
    signed_quantile(p, |tail| {
        if df >= EXPANSION_DEGREES_OF_FREEDOM {
            fisher_expansion(normal_upper_quantile(tail), df)
        } else {
            invert_upper_tail(tail, |t| t_upper_tail(t, df), |t| t_density(t, df))
        }
    })
}

/// The `p` quantile of the standard normal distribution, accurate to about 1e-14 relative.
///
/// # Panics
///
/// If `p` is not strictly between 0 and 1.
pub fn normal_quantile(p: f64) -> f64 {
    signed_quantile(p, normal_upper_quantile)
}

/// The quantile of a distribution symmetric about 0, from the inverse of its upper tail on
/// `(0, 1/2)`.
fn signed_quantile(p: f64, upper_quantile: impl Fn(f64) -> f64) -> f64 {
    assert!(p > 0.0 && p < 1.0, "a quantile needs 0 < p < 1, got {p}");
    if p == 0.5 {
        0.0
    } else if p > 0.5 {
        upper_quantile(1.0 - p)
    } else {
        -upper_quantile(p)
    }
}

/// The `z ≥ 0` with `P(Z > z) = tail` for a standard normal `Z`.
fn normal_upper_quantile(tail: f64) -> f64 {
    invert_upper_tail(
        tail,
        |z| 0.5 * libm::erfc(z / SQRT_2),
        |z| libm::exp(-0.5 * z * z) / libm::sqrt(2.0 * PI),
    )
}

/// t with `df` degrees of freedom from the normal quantile `z` of the same tail, by Fisher's
/// expansion to the fourth power of `1/df`.
fn fisher_expansion(z: f64, df: f64) -> f64 {
    let z2 = z * z;
    let g1 = z * (z2 + 1.0) / 4.0;
    let g2 = z * ((5.0 * z2 + 16.0) * z2 + 3.0) / 96.0;
    let g3 = z * (((3.0 * z2 + 19.0) * z2 + 17.0) * z2 - 15.0) / 384.0;
    let g4 = z * ((((79.0 * z2 + 776.0) * z2 + 1482.0) * z2 - 1920.0) * z2 - 945.0) / 92_160.0;
    z + (g1 + (g2 + (g3 + g4 / df) / df) / df) / df
}

/// The `x ≥ 0` where the decreasing `upper_tail` (with `upper_tail(0) = 1/2`) equals `tail`.
fn invert_upper_tail(tail: f64, upper_tail: impl Fn(f64) -> f64, density: impl Fn(f64) -> f64) -> f64 {
    let mut low = 0.0;
    let mut high = 1.0;
    while upper_tail(high) > tail {
        low = high;
        high *= 2.0;
    }
    let mut x = 0.5 * (low + high);
    for _ in 0..MAX_ROOT_STEPS {
        let excess = upper_tail(x) - tail;
        if excess > 0.0 {
            low = x;
        } else {
            high = x;
        }
        // A NaN or infinite step (a density underflowing to 0) fails this test too.
        let newton = x + excess / density(x);
        let next = if newton > low && newton < high { newton } else { 0.5 * (low + high) };
        let settled = (next - x).abs() <= 2.0 * f64::EPSILON * next;
        x = next;
        if settled || high - low <= 2.0 * f64::EPSILON * high {
            break;
        }
    }
    x
}

/// Root-finding steps allowed; bisection alone narrows any bracket to the last bit in about 110.
const MAX_ROOT_STEPS: usize = 200;

/// `P(T > t)` for `t ≥ 0` and `df` degrees of freedom.
fn t_upper_tail(t: f64, df: f64) -> f64 {
    if t == 0.0 {
        return 0.5;
    }
    let a = 0.5 * df;
    let w = beta_point(t / libm::sqrt(df));
    let log_front = a * w.ln_x + 0.5 * w.ln_complement + ln_gamma_ratio_half(a) - LN_GAMMA_HALF;
    let front = libm::exp(log_front);
    // The continued fraction converges fast for w below (a + 1)/(a + b + 2) (here b = 1/2);
    // above it, the symmetry I_w(a, b) = 1 − I_{1−w}(b, a) moves the evaluation there.
    let incomplete_beta = if w.x < (a + 1.0) / (a + 2.5) {
        front * beta_continued_fraction(w.x, a, 0.5) / a
    } else {
        1.0 - 2.0 * front * beta_continued_fraction(w.complement, 0.5, a)
    };
    0.5 * incomplete_beta
}

/// `ln Γ(1/2) = ln √π`.
const LN_GAMMA_HALF: f64 = 0.572_364_942_924_700_1;

/// The density of Student's t distribution at `t ≥ 0`.
fn t_density(t: f64, df: f64) -> f64 {
    let a = 0.5 * df;
    let w = beta_point(t / libm::sqrt(df));
    // (1 + t²/ν)^(−(ν+1)/2) = w^(a + 1/2).
    let log_norm = ln_gamma_ratio_half(a) - 0.5 * libm::log(df * PI);
    libm::exp(log_norm + (a + 0.5) * w.ln_x)
}

/// `w = 1/(1 + s²)` with `s = t/√ν`, its complement `s²/(1 + s²)` and both logarithms, each
/// formed without overflow, underflow of the logarithms, or cancellation.
struct BetaPoint {
    /// `w`.
    x: f64,
    /// `1 − w`.
    complement: f64,
    /// `ln w`.
    ln_x: f64,
    /// `ln(1 − w)`.
    ln_complement: f64,
}

/// The [`BetaPoint`] of the scaled t value `s = t/√ν > 0`.
fn beta_point(s: f64) -> BetaPoint {
    if s <= 1.0 {
        let s2 = s * s;
        let ln_one_plus = libm::log1p(s2);
        BetaPoint {
            x: 1.0 / (1.0 + s2),
            complement: s2 / (1.0 + s2),
            ln_x: -ln_one_plus,
            ln_complement: 2.0 * libm::log(s) - ln_one_plus,
        }
    } else {
        let r = 1.0 / s;
        let r2 = r * r;
        let ln_one_plus = libm::log1p(r2);
        BetaPoint {
            x: r2 / (1.0 + r2),
            complement: 1.0 / (1.0 + r2),
            ln_x: 2.0 * libm::log(r) - ln_one_plus,
            ln_complement: -ln_one_plus,
        }
    }
}

/// `ln Γ(a + 1/2) − ln Γ(a)`, without the cancellation of two large log-gammas when `a` is big.
fn ln_gamma_ratio_half(a: f64) -> f64 {
    if a < 50.0 {
        return libm::lgamma(a + 0.5) - libm::lgamma(a);
    }
    // Stirling: ln Γ(x) = (x − 1/2) ln x − x + ln √(2π) + c(x), c(x) = 1/(12x) − 1/(360x³) + …;
    // the difference of the leading parts is regrouped around ln(1 + 1/(2a)).
    let b = 0.5;
    let leading = (a - 0.5) * libm::log1p(b / a) + b * libm::log(a + b) - b;
    leading + stirling_correction(a + b) - stirling_correction(a)
}

/// The tail `c(x)` of Stirling's series for `ln Γ(x)`, to the `x⁻⁷` term (error below 1e-16 for
/// `x ≥ 50`).
fn stirling_correction(x: f64) -> f64 {
    let inverse_square = 1.0 / (x * x);
    (1.0 / 12.0 - inverse_square * (1.0 / 360.0 - inverse_square * (1.0 / 1260.0 - inverse_square / 1680.0)))
        / x
}

/// The continued fraction `1 / (1 + d₁ / (1 + d₂ / (1 + …)))` of the incomplete beta function,
/// with `d_{2m+1} = −(a+m)(a+b+m)x / ((a+2m)(a+2m+1))` and `d_{2m} = m(b−m)x / ((a+2m−1)(a+2m))`,
/// by the modified Lentz method.
fn beta_continued_fraction(x: f64, a: f64, b: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let guard = |v: f64| if v.abs() < TINY { TINY } else { v };
    let mut c = 1.0;
    let mut d = 1.0 / guard(1.0 - (a + b) * x / (a + 1.0));
    let mut value = d;
    for m in 1..MAX_FRACTION_TERMS {
        let m = m as f64;
        let even = m * (b - m) * x / ((a + 2.0 * m - 1.0) * (a + 2.0 * m));
        d = 1.0 / guard(1.0 + even * d);
        c = guard(1.0 + even / c);
        value *= d * c;
        let odd = -(a + m) * (a + b + m) * x / ((a + 2.0 * m) * (a + 2.0 * m + 1.0));
        d = 1.0 / guard(1.0 + odd * d);
        c = guard(1.0 + odd / c);
        let step = d * c;
        value *= step;
        if (step - 1.0).abs() <= f64::EPSILON {
            break;
        }
    }
    value
}

/// Terms of the continued fraction allowed; it needs about √a of them, under 1,000 below
/// [`EXPANSION_DEGREES_OF_FREEDOM`].
const MAX_FRACTION_TERMS: usize = 10_000;

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_relative(actual: f64, expected: f64, tolerance: f64) {
        let error = ((actual - expected) / expected).abs();
        assert!(error <= tolerance, "{actual} vs {expected}: relative error {error:e}");
    }

    #[test]
    fn t_quantiles_match_reference_values() {
        // (p, df, quantile), the quantiles computed with mpmath at 60 digits.
        let cases = [
            (0.975, 1.0, 12.7062047361747),
            (0.975, 2.0, 4.30265272974946),
            (0.975, 4.0, 2.77644510519779),
            (0.975, 5.0, 2.57058183563632),
            (0.975, 10.0, 2.22813885198627),
            (0.975, 30.0, 2.04227245630124),
            (0.975, 1000.0, 1.96233908082641),
            (0.975, 1e4, 1.960201239890626),
            (0.975, 99_999.0, 1.959987707771845),
            (0.975, 1e5, 1.95998770753461),
            (0.975, 1e6, 1.959966356814107),
            (0.975, 1e8, 1.959964008262767),
            (0.975, 1e12, 1.959963984542427),
            (0.995, 1.0, 63.6567411628716),
            (0.995, 5.0, 4.03214298355523),
            (0.995, 30.0, 2.74999565356723),
            (0.9, 3.0, 1.63774435369621),
            (0.99, 20.0, 2.52797700274157),
            (1e-10, 1e4, -6.367941351482803),
            (1e-10, 99_999.0, -6.362000426439517),
            (1e-10, 1e5, -6.362000419843691),
            (1e-10, 1e8, -6.361341561862985),
        ];
        for (p, df, expected) in cases {
            assert_relative(t_quantile(p, df), expected, 1e-11);
        }
    }

    #[test]
    fn normal_quantiles_match_reference_values() {
        assert_relative(normal_quantile(0.975), 1.95996398454005, 1e-14);
        assert_relative(normal_quantile(1e-10), -6.361340902404056, 1e-14);
        assert_eq!(normal_quantile(0.5), 0.0);
    }

    #[test]
    fn t_quantile_matches_closed_forms_for_one_and_two_degrees_of_freedom() {
        for p in [1e-200, 1e-12, 1e-6, 0.01, 0.3, 0.5001, 0.6, 0.9, 0.999, 1.0 - 1e-9] {
            // The closed forms in terms of the smaller tail, which is what t_quantile inverts.
            let (tail, sign) = if p > 0.5 { (1.0 - p, 1.0) } else { (p, -1.0) };
            let cauchy = sign / libm::tan(PI * tail);
            assert_relative(t_quantile(p, 1.0), cauchy, 1e-12);
            let two = sign * (1.0 - 2.0 * tail) / libm::sqrt(2.0 * tail * (1.0 - tail));
            assert_relative(t_quantile(p, 2.0), two, 1e-12);
        }
    }

    #[test]
    fn t_quantile_is_antisymmetric_and_inverts_the_tail() {
        for df in [1.0, 2.5, 7.0, 60.0, 5_000.0] {
            // Tails whose complements are exact in binary, so both signs see the same tail.
            for tail in [0.5f64.powi(27), 0.5f64.powi(10), 0.015625, 0.25, 0.375] {
                let t = t_quantile(1.0 - tail, df);
                assert_relative(-t_quantile(tail, df), t, 1e-12);
                assert_relative(t_upper_tail(t, df), tail, 1e-12);
            }
        }
        assert_eq!(t_quantile(0.5, 3.0), 0.0);
    }

    #[test]
    fn the_gamma_ratio_agrees_across_its_two_methods() {
        for a in [50.0, 80.0, 200.0] {
            let direct = libm::lgamma(a + 0.5) - libm::lgamma(a);
            assert_relative(ln_gamma_ratio_half(a), direct, 1e-13);
        }
    }

    #[test]
    #[should_panic(expected = "0 < p < 1")]
    fn t_quantile_refuses_a_probability_of_one() {
        t_quantile(1.0, 3.0);
    }
}
