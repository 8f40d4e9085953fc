//! A mergeable latency histogram with a fixed relative precision (HDR-style, log-linear).
//!
//! Values are `u64` microseconds. Every power-of-two range `[2^e, 2^(e+1))` with `e ≥ 11` is cut
//! into 1,024 equal buckets, and values below 2,048 get a bucket each, so a bucket's width is
//! never more than 1/1024 (< 0.1 %) of the values in it: three significant decimal digits over
//! the whole `u64` range, from 1 µs past an hour (3.6e9 µs) to 584,000 years. A value `v` with
//! `s = max(0, bit_length(v) − 11)` has bucket index `1024·s + (v >> s)`, 56,320 buckets in all.
//! Counts live in a vector that grows to the highest bucket used (64 KB for values up to
//! 131 ms, 188 KB up to 1.2 hours).
//!
//! Count, sum, minimum and maximum are kept exactly, so the mean is exact. Percentiles are
//! nearest-rank: the value at percentile `p` is the smallest recorded value with at least `p` %
//! of the samples at or below it, i.e. the `⌈p·n/100⌉`-th smallest (at least the first). It is
//! reported as the highest value of that sample's bucket, capped at the maximum, so it never
//! under-states the exact nearest-rank value `x` and over-states it by less than `x/1024`
//! (values below 2,048 µs are exact). Merging adds counts bucket by bucket and is exact:
//! recording two halves of a sample and merging gives the same histogram as recording it whole.
//!
//! The serialized form is deterministic and lists only non-empty buckets, in index order:
//!
//! ```json
//! {"sub_buckets":2048,"sum":5006,"min":3,"max":5000,"buckets":[[3,2],[3298,1]]}
//! ```
//!
//! `sub_buckets` names the bucket scheme (values below it are exact) and must be 2048;
//! `buckets` holds `[index, count]` pairs; `min`/`max` are `null` for an empty histogram. The
//! total count is the sum of the bucket counts. Deserializing checks the form's consistency.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Values below this are recorded exactly; above, each power of two has half as many buckets.
pub const SUB_BUCKETS: u64 = 2048;

/// Largest relative error of a reported percentile: a bucket's width over its lowest value.
pub const RELATIVE_PRECISION: f64 = 1.0 / 1024.0;

/// Buckets per power of two above [`SUB_BUCKETS`].
const HALF: u64 = SUB_BUCKETS / 2;

/// The index of the bucket holding `u64::MAX`.
const LAST_INDEX: usize = 56_319;

/// A histogram of microsecond latencies with three significant digits, exactly mergeable.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "HistogramForm", try_from = "HistogramForm")]
pub struct LatencyHistogram {
    /// Samples per bucket, up to the highest non-empty bucket (empty when there are none).
    counts: Vec<u64>,
    /// Samples recorded.
    count: u64,
    /// Sum of the samples.
    sum: u128,
    /// Smallest and largest sample, once there is one.
    range: Option<(u64, u64)>,
}

impl LatencyHistogram {
    /// An empty histogram.
    pub fn new() -> LatencyHistogram {
        LatencyHistogram::default()
    }

    /// Record one sample of `value` µs.
    pub fn record(&mut self, value: u64) {
        let index = bucket_index(value);
        if index >= self.counts.len() {
            self.counts.resize(index + 1, 0);
        }
        self.counts[index] += 1;
        self.count += 1;
        self.sum += u128::from(value);
        self.range = Some(self.range.map_or((value, value), |(min, max)| (min.min(value), max.max(value))));
    }

    /// Record one sample of each of `values` µs: the same histogram as recording them one by
    /// one, with the count, sum and range updated once (a call's token gaps come in a run).
    pub fn record_all(&mut self, values: &[u64]) {
        let Some(&first) = values.first() else { return };
        let (lowest, highest) =
            values.iter().fold((first, first), |(low, high), &v| (low.min(v), high.max(v)));
        let top = bucket_index(highest);
        if top >= self.counts.len() {
            self.counts.resize(top + 1, 0);
        }
        let mut sum = 0u128;
        for &value in values {
            self.counts[bucket_index(value)] += 1;
            sum += u128::from(value);
        }
        self.count += values.len() as u64;
        self.sum += sum;
        self.range =
            Some(self.range.map_or((lowest, highest), |(min, max)| (min.min(lowest), max.max(highest))));
    }

    /// Add every sample of `other` to this histogram.
    pub fn merge(&mut self, other: &LatencyHistogram) {
        if other.counts.len() > self.counts.len() {
            self.counts.resize(other.counts.len(), 0);
        }
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
        self.count += other.count;
        self.sum += other.sum;
        self.range = match (self.range, other.range) {
            (Some((a_min, a_max)), Some((b_min, b_max))) => Some((a_min.min(b_min), a_max.max(b_max))),
            (mine, theirs) => mine.or(theirs),
        };
    }

    /// Samples recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Whether no sample has been recorded.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The smallest sample, exactly.
    pub fn min(&self) -> Option<u64> {
        self.range.map(|(min, _)| min)
    }

    /// The largest sample, exactly.
    pub fn max(&self) -> Option<u64> {
        self.range.map(|(_, max)| max)
    }

    /// The sum of the samples, exactly.
    pub fn sum(&self) -> u128 {
        self.sum
    }

    /// The mean of the samples (exact up to the final division).
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum as f64 / self.count as f64)
    }

    /// The nearest-rank value at percentile `p` (0 to 100), as its bucket's highest value capped
    /// at the maximum: at least the exact value `x`, and less than `x/1024` above it.
    ///
    /// # Panics
    ///
    /// If `p` is not within `[0, 100]`.
    pub fn value_at_percentile(&self, p: f64) -> Option<u64> {
        assert!((0.0..=100.0).contains(&p), "a percentile is within [0, 100], got {p}");
        let (_, max) = self.range?;
        let rank = nearest_rank(p, self.count);
        let mut below = 0;
        let index = self.counts.iter().position(|&c| {
            below += c;
            below >= rank
        })?;
        Some(highest_in_bucket(index).min(max))
    }
}

/// The 1-based rank of the nearest-rank percentile `p` among `count > 0` samples,
/// `⌈p·count/100⌉` at least 1 (multiplying first, so that e.g. 99.9 % of 1,000 is exactly 999).
fn nearest_rank(p: f64, count: u64) -> u64 {
    ((p * count as f64 / 100.0).ceil() as u64).clamp(1, count)
}

/// The bucket of `value`: `1024·s + (value >> s)` with `s = max(0, bit_length − 11)`.
fn bucket_index(value: u64) -> usize {
    let shift = (u64::BITS - value.leading_zeros()).saturating_sub(SUB_BUCKETS.trailing_zeros());
    (HALF * u64::from(shift) + (value >> shift)) as usize
}

/// The smallest value in bucket `index`.
fn lowest_in_bucket(index: usize) -> u64 {
    let index = index as u64;
    if index < SUB_BUCKETS {
        return index;
    }
    let shift = index / HALF - 1;
    (index - HALF * shift) << shift
}

/// The largest value in bucket `index`.
fn highest_in_bucket(index: usize) -> u64 {
    let index_u64 = index as u64;
    let width_minus_one = if index_u64 < SUB_BUCKETS { 0 } else { (1u64 << (index_u64 / HALF - 1)) - 1 };
    lowest_in_bucket(index) + width_minus_one
}

/// The serialized form of a [`LatencyHistogram`], described in the module documentation.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct HistogramForm {
    sub_buckets: u64,
    sum: u128,
    min: Option<u64>,
    max: Option<u64>,
    buckets: Vec<(usize, u64)>,
}

impl From<LatencyHistogram> for HistogramForm {
    fn from(histogram: LatencyHistogram) -> HistogramForm {
        HistogramForm {
            sub_buckets: SUB_BUCKETS,
            sum: histogram.sum,
            min: histogram.min(),
            max: histogram.max(),
            buckets: histogram.counts.iter().copied().enumerate().filter(|&(_, c)| c > 0).collect(),
        }
    }
}

/// Why a serialized histogram was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HistogramFormError {
    /// The form uses another bucket scheme.
    SubBuckets(u64),
    /// The bucket at this position of the list is out of range, out of order or empty.
    Bucket {
        /// Its position in the list.
        position: usize,
    },
    /// The counts add up to more than `u64::MAX`.
    CountOverflow,
    /// `min` and `max` are missing, present without buckets, or not in the first and last
    /// buckets.
    Range,
    /// `sum` is impossible for samples in the listed buckets.
    Sum,
}

impl fmt::Display for HistogramFormError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HistogramFormError::SubBuckets(n) => {
                write!(f, "histogram has {n} sub-buckets; only {SUB_BUCKETS} are understood")
            }
            HistogramFormError::Bucket { position } => {
                write!(f, "histogram bucket {position} is out of range, out of order or empty")
            }
            HistogramFormError::CountOverflow => write!(f, "histogram counts overflow"),
            HistogramFormError::Range => write!(f, "histogram min/max do not match its buckets"),
            HistogramFormError::Sum => write!(f, "histogram sum is impossible for its buckets"),
        }
    }
}

impl std::error::Error for HistogramFormError {}

impl TryFrom<HistogramForm> for LatencyHistogram {
    type Error = HistogramFormError;

    fn try_from(form: HistogramForm) -> Result<LatencyHistogram, HistogramFormError> {
        if form.sub_buckets != SUB_BUCKETS {
            return Err(HistogramFormError::SubBuckets(form.sub_buckets));
        }
        let mut counts = Vec::new();
        let (mut count, mut least_sum, mut most_sum) = (0u64, 0u128, 0u128);
        for (position, &(index, bucket_count)) in form.buckets.iter().enumerate() {
            if index > LAST_INDEX || index < counts.len() || bucket_count == 0 {
                return Err(HistogramFormError::Bucket { position });
            }
            counts.resize(index + 1, 0);
            counts[index] = bucket_count;
            count = count.checked_add(bucket_count).ok_or(HistogramFormError::CountOverflow)?;
            least_sum += u128::from(bucket_count) * u128::from(lowest_in_bucket(index));
            most_sum += u128::from(bucket_count) * u128::from(highest_in_bucket(index));
        }
        let range = match (form.min, form.max, form.buckets.first(), form.buckets.last()) {
            (None, None, None, None) => None,
            (Some(min), Some(max), Some(&(first, _)), Some(&(last, _)))
                if min <= max && bucket_index(min) == first && bucket_index(max) == last =>
            {
                Some((min, max))
            }
            _ => return Err(HistogramFormError::Range),
        };
        if !(least_sum..=most_sum).contains(&form.sum) {
            return Err(HistogramFormError::Sum);
        }
        Ok(LatencyHistogram { counts, count, sum: form.sum, range })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blis_kernel::Streams;

    /// Log-uniform samples from 1 µs to an hour, so every scale is exercised.
    fn samples(seed: u64, n: usize) -> Vec<u64> {
        let mut stream = Streams::new(seed).stream("test", "x", "");
        (0..n).map(|_| libm::exp(stream.unit() * libm::log(3.6e9)) as u64).collect()
    }

    fn histogram_of(values: &[u64]) -> LatencyHistogram {
        let mut histogram = LatencyHistogram::new();
        values.iter().for_each(|&v| histogram.record(v));
        histogram
    }

    #[test]
    fn recording_a_run_at_once_gives_the_histogram_of_recording_it_value_by_value() {
        let values = samples(11, 300);
        for cut in [0, 1, 7, 150, 299, 300] {
            let mut one_by_one = histogram_of(&values[..40]);
            values[40..40 + cut.min(260)].iter().for_each(|&v| one_by_one.record(v));
            let mut at_once = histogram_of(&values[..40]);
            at_once.record_all(&values[40..40 + cut.min(260)]);
            assert_eq!(at_once, one_by_one, "after {cut} values at once");
        }
        let mut empty = LatencyHistogram::new();
        empty.record_all(&[]);
        assert_eq!(empty, LatencyHistogram::new());
        empty.record_all(&[5_000, 3]);
        assert_eq!(empty, histogram_of(&[5_000, 3]));
    }

    #[test]
    fn buckets_tile_the_whole_range_with_the_stated_precision() {
        assert_eq!((lowest_in_bucket(0), highest_in_bucket(LAST_INDEX)), (0, u64::MAX));
        assert_eq!(bucket_index(u64::MAX), LAST_INDEX);
        for index in 0..LAST_INDEX {
            assert_eq!(highest_in_bucket(index) + 1, lowest_in_bucket(index + 1), "after bucket {index}");
            let width = highest_in_bucket(index) - lowest_in_bucket(index) + 1;
            assert!(width == 1 || width as f64 <= RELATIVE_PRECISION * lowest_in_bucket(index) as f64);
        }
    }

    #[test]
    fn every_value_falls_in_the_bucket_that_bounds_it() {
        let edges = (0..64).flat_map(|e| {
            let p = 1u64 << e;
            [p - 1, p, p + 1, p + p / 3]
        });
        for value in (0..5_000).chain(edges).chain([3_600_000_000, u64::MAX - 1, u64::MAX]) {
            let index = bucket_index(value);
            assert!(lowest_in_bucket(index) <= value && value <= highest_in_bucket(index), "{value}");
        }
        assert_eq!((bucket_index(2047), bucket_index(2048), bucket_index(2049)), (2047, 2048, 2048));
        assert_eq!((bucket_index(5_000), bucket_index(4_096), bucket_index(4_095)), (3298, 3072, 3071));
    }

    #[test]
    fn percentiles_are_within_the_stated_precision_of_exact_nearest_rank() {
        let mut values = samples(1, 20_000);
        let histogram = histogram_of(&values);
        values.sort_unstable();
        for p in [0.0, 0.01, 0.1, 1.0, 10.0, 25.0, 50.0, 75.0, 90.0, 99.0, 99.9, 99.99, 100.0] {
            let exact = values[nearest_rank(p, values.len() as u64) as usize - 1];
            let reported = histogram.value_at_percentile(p).unwrap();
            assert!(exact <= reported, "p{p}: {reported} below {exact}");
            assert!(
                (reported - exact) as f64 <= exact as f64 * RELATIVE_PRECISION,
                "p{p}: {reported} vs {exact}"
            );
        }
        assert_eq!(histogram.value_at_percentile(100.0), values.last().copied());
        assert_eq!(
            (histogram.min(), histogram.max(), histogram.count()),
            (Some(values[0]), values.last().copied(), 20_000)
        );
        let sum: u128 = values.iter().map(|&v| u128::from(v)).sum();
        assert_eq!((histogram.sum(), histogram.mean()), (sum, Some(sum as f64 / 20_000.0)));
    }

    #[test]
    fn small_values_are_exact() {
        let values: Vec<u64> = (1..=2_000).rev().collect();
        let histogram = histogram_of(&values);
        assert_eq!(histogram.value_at_percentile(50.0), Some(1_000));
        assert_eq!(histogram.value_at_percentile(99.95), Some(1_999));
        assert_eq!(histogram.value_at_percentile(0.0), Some(1));
    }

    #[test]
    fn nearest_rank_is_the_smallest_rank_covering_p_percent() {
        assert_eq!(nearest_rank(50.0, 4), 2);
        assert_eq!(nearest_rank(50.1, 4), 3);
        assert_eq!(nearest_rank(25.0, 5), 2);
        assert_eq!(nearest_rank(99.9, 1_000), 999);
        assert_eq!(nearest_rank(99.0, 100), 99);
        assert_eq!((nearest_rank(0.0, 7), nearest_rank(100.0, 7)), (1, 7));
    }

    #[test]
    fn merging_two_halves_gives_the_whole() {
        let values = samples(2, 10_000);
        let whole = histogram_of(&values);
        let (first, second) = values.split_at(3_000);
        let mut merged = histogram_of(second);
        merged.merge(&histogram_of(first));
        assert_eq!(merged, whole);
        assert_eq!(serde_json::to_string(&merged).unwrap(), serde_json::to_string(&whole).unwrap());
        let mut with_empty = whole.clone();
        with_empty.merge(&LatencyHistogram::new());
        assert_eq!(with_empty, whole);
        let mut from_empty = LatencyHistogram::new();
        from_empty.merge(&whole);
        assert_eq!(from_empty, whole);
    }

    #[test]
    fn the_serialized_form_is_compact_and_round_trips() {
        let small = histogram_of(&[3, 5_000, 3]);
        let json = serde_json::to_string(&small).unwrap();
        assert_eq!(json, r#"{"sub_buckets":2048,"sum":5006,"min":3,"max":5000,"buckets":[[3,2],[3298,1]]}"#);
        let large = histogram_of(&samples(3, 5_000));
        for histogram in [small, large, histogram_of(&[u64::MAX, 0]), LatencyHistogram::new()] {
            let json = serde_json::to_string(&histogram).unwrap();
            let back: LatencyHistogram = serde_json::from_str(&json).unwrap();
            assert_eq!(back, histogram);
            assert_eq!(serde_json::to_string(&back).unwrap(), json);
        }
    }

    #[test]
    fn an_empty_histogram_has_no_statistics() {
        let empty = LatencyHistogram::new();
        assert_eq!((empty.count(), empty.min(), empty.mean()), (0, None, None));
        assert!(empty.is_empty() && empty.value_at_percentile(50.0).is_none());
        let json = serde_json::to_string(&empty).unwrap();
        assert_eq!(json, r#"{"sub_buckets":2048,"sum":0,"min":null,"max":null,"buckets":[]}"#);
    }

    #[test]
    fn inconsistent_forms_are_refused() {
        use HistogramFormError::*;
        let refused = [
            (r#"{"sub_buckets":1024,"sum":3,"min":3,"max":3,"buckets":[[3,1]]}"#, SubBuckets(1024)),
            (
                r#"{"sub_buckets":2048,"sum":6,"min":3,"max":3,"buckets":[[3,1],[3,1]]}"#,
                Bucket { position: 1 },
            ),
            (
                r#"{"sub_buckets":2048,"sum":3,"min":3,"max":3,"buckets":[[3,1],[4,0]]}"#,
                Bucket { position: 1 },
            ),
            (r#"{"sub_buckets":2048,"sum":3,"min":3,"max":3,"buckets":[[56320,1]]}"#, Bucket { position: 0 }),
            (
                r#"{"sub_buckets":2048,"sum":0,"min":0,"max":0,"buckets":[[0,18446744073709551615],[1,1]]}"#,
                CountOverflow,
            ),
            (r#"{"sub_buckets":2048,"sum":3,"min":2,"max":3,"buckets":[[3,1]]}"#, Range),
            (r#"{"sub_buckets":2048,"sum":0,"min":null,"max":null,"buckets":[[3,1]]}"#, Range),
            (r#"{"sub_buckets":2048,"sum":0,"min":3,"max":3,"buckets":[]}"#, Range),
            (r#"{"sub_buckets":2048,"sum":4,"min":3,"max":3,"buckets":[[3,1]]}"#, Sum),
            (r#"{"sub_buckets":2048,"sum":5000,"min":3,"max":5000,"buckets":[[3,1],[3298,1]]}"#, Sum),
        ];
        for (json, expected) in refused {
            let form: HistogramForm = serde_json::from_str(json).unwrap();
            assert_eq!(LatencyHistogram::try_from(form), Err(expected), "{json}");
            let error = serde_json::from_str::<LatencyHistogram>(json).unwrap_err().to_string();
            assert!(error.starts_with(&expected.to_string()), "{json}: {error}");
        }
        let extra_field = r#"{"sub_buckets":2048,"sum":3,"min":3,"max":3,"buckets":[[3,1]],"count":1}"#;
        let error = serde_json::from_str::<LatencyHistogram>(extra_field).unwrap_err().to_string();
        assert!(error.contains("unknown field"), "{error}");
    }

    #[test]
    #[should_panic(expected = "within [0, 100]")]
    fn a_percentile_above_100_is_refused() {
        histogram_of(&[1]).value_at_percentile(100.5);
    }
}
