//! What a sweep keeps of each point (`point.json`), and what a search judges a point by.

use std::collections::BTreeMap;

use blis_contracts::EstimateRecord;
use serde::{Deserialize, Serialize};

use crate::RunOutput;
use crate::experiment::figures::scalars;

/// The name of the derived figure "share of completed calls that met the frame's SLO":
/// `goodput_requests_per_s / requests_per_s` in each replication.
pub const GOODPUT_SHARE: &str = "goodput_share";

/// Whether a point ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PointStatus {
    /// It ran and has figures (unless they were withheld).
    Ran,
    /// The upstream would refuse to start it (the reason says why); never ranked.
    Refused,
    /// It started and could not finish (an engine stalled); never ranked.
    Failed,
}

/// A value a point sets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AxisValue {
    /// The scenario path.
    pub path: String,
    /// The value there.
    pub value: serde_json::Value,
}

/// One point of a sweep: its values, whether it ran, and its figures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PointRecord {
    /// Its place in the sweep, from 0.
    pub index: usize,
    /// Its folder's name under `points/`.
    pub id: String,
    /// The values it sets.
    pub values: Vec<AxisValue>,
    /// Whether it ran.
    pub status: PointStatus,
    /// Why it was refused or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Whether any replication was overloaded (its latency figures are then withheld).
    pub overloaded: bool,
    /// Whether every step was priced inside the coefficients' validity domain.
    pub in_domain: bool,
    /// What the Result withheld and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub withheld: Vec<String>,
    /// Every figure's estimate and interval, as in the Result (plus `goodput_share` when the
    /// frame has an SLO).
    pub estimates: BTreeMap<String, EstimateRecord>,
    /// Every figure's value in each replication (paired across points by seed), for the
    /// searches; a figure missing from any replication is left out.
    pub replications: BTreeMap<String, Vec<f64>>,
}

impl PointRecord {
    /// The record of a point that did not run.
    pub fn not_run(index: usize, values: Vec<AxisValue>, status: PointStatus, reason: String) -> PointRecord {
        PointRecord {
            index,
            id: point_id(index),
            values,
            status,
            reason: Some(reason),
            overloaded: false,
            in_domain: false,
            withheld: Vec::new(),
            estimates: BTreeMap::new(),
            replications: BTreeMap::new(),
        }
    }

    /// The record of a point that ran.
    pub fn ran(index: usize, values: Vec<AxisValue>, output: &RunOutput) -> PointRecord {
        let result = &output.result;
        let replications = replication_values(output);
        let mut estimates = result.estimates.clone();
        if let Some(shares) = replications.get(GOODPUT_SHARE)
            && let Ok(e) = crate::stats::interval::estimate(shares, crate::stats::interval::DEFAULT_LEVEL)
        {
            estimates.insert(
                GOODPUT_SHARE.to_owned(),
                EstimateRecord { mean: e.mean, half_width: e.half_width, n: e.n as u64, level: e.level },
            );
        }
        PointRecord {
            index,
            id: point_id(index),
            values,
            status: PointStatus::Ran,
            reason: None,
            overloaded: result.replications.iter().any(|r| r.overload.overloaded),
            in_domain: result.validity.in_domain,
            withheld: result.withheld.clone(),
            estimates,
            replications,
        }
    }
}

/// A point's folder name: its index, zero-padded to four digits.
pub fn point_id(index: usize) -> String {
    format!("{index:04}")
}

/// Each figure's value in every replication of a run, by `metric.statistic` name; a figure
/// withheld in any replication is left out. With an SLO in the frame, `goodput_share` too.
pub fn replication_values(output: &RunOutput) -> BTreeMap<String, Vec<f64>> {
    let mut by_name: BTreeMap<String, Vec<Option<f64>>> = BTreeMap::new();
    for record in &output.result.replications {
        let mut share = None;
        let values = scalars(&record.metrics);
        let get = |name: &str| values.iter().find(|(n, _)| n == name).and_then(|(_, v)| *v);
        if let (Some(goodput), Some(rate)) = (get("goodput_requests_per_s"), get("requests_per_s"))
            && rate > 0.0
        {
            share = Some(goodput / rate);
        }
        for (name, value) in values.iter().cloned().chain([(GOODPUT_SHARE.to_owned(), share)]) {
            by_name.entry(name).or_default().push(value);
        }
    }
    by_name
        .into_iter()
        .filter_map(|(name, values)| values.into_iter().collect::<Option<Vec<f64>>>().map(|v| (name, v)))
        .filter(|(_, v)| !v.is_empty())
        .collect()
}
