//! A stub evaluator whose truth is known, for testing the searches: point i's figure is
//! `truth[i]` plus normal noise of `sigma`, drawn from a substream of (seed, point,
//! replication), so replication r of a point is the same however many are asked for.

use std::collections::BTreeMap;

use blis_contracts::EstimateRecord;
use blis_kernel::Streams;

use super::evaluate::Evaluate;
use super::record::{PointRecord, PointStatus, point_id};
use crate::RunError;
use crate::stats::interval::{DEFAULT_LEVEL, estimate};
use crate::stats::test_draws::standard_normal;

/// The figure the stub reports.
pub const FIGURE: &str = "ttft_ms.p99";

/// Known truth plus noise.
pub struct Stub {
    /// Each point's true mean.
    pub truth: Vec<f64>,
    /// The noise's standard deviation.
    pub sigma: f64,
    /// Points reported overloaded.
    pub overloaded: Vec<usize>,
    /// Every evaluation asked for: (point, seed, replications).
    pub asked: Vec<(usize, u64, u32)>,
}

impl Stub {
    /// A stub of `truth` with noise `sigma`.
    pub fn new(truth: Vec<f64>, sigma: f64) -> Stub {
        Stub { truth, sigma, overloaded: Vec::new(), asked: Vec::new() }
    }
}

impl Evaluate for Stub {
    fn evaluate(&mut self, index: usize, seed: u64, replications: u32) -> Result<PointRecord, RunError> {
        self.asked.push((index, seed, replications));
        let streams = Streams::new(seed);
        let values: Vec<f64> = (0..replications)
            .map(|r| {
                let mut stream = streams.stream("test/stub", &format!("{index}/{r}"), "");
                self.truth[index] + self.sigma * standard_normal(&mut stream)
            })
            .collect();
        let overloaded = self.overloaded.contains(&index);
        let mut estimates = BTreeMap::new();
        let mut by_figure = BTreeMap::new();
        if !overloaded {
            let e = estimate(&values, DEFAULT_LEVEL).expect("finite draws");
            estimates.insert(
                FIGURE.to_owned(),
                EstimateRecord { mean: e.mean, half_width: e.half_width, n: e.n as u64, level: e.level },
            );
            by_figure.insert(FIGURE.to_owned(), values);
        }
        Ok(PointRecord {
            index,
            id: point_id(index),
            values: Vec::new(),
            status: PointStatus::Ran,
            reason: None,
            overloaded,
            in_domain: true,
            withheld: Vec::new(),
            estimates,
            replications: by_figure,
        })
    }
}
