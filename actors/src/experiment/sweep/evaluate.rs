//! Running a point: its scenario through [`run_observed`], its Result and figures kept; and
//! the [`Evaluate`] interface the searches use, which tests give a stub of known truth.

use blis_contracts::BuildRecord;
use blis_contracts::yaml::YamlValue;
use blis_costmodel::CostData;
use sha2::{Digest, Sha256};

use super::path::ScenarioPath;
use super::record::{AxisValue, PointRecord, PointStatus};
use super::spec::{Base, Point};
use crate::{CallSelection, CallsDigest, Progress, RunError, RunOptions, RunOutput, run_observed};

/// How points run.
#[derive(Clone, Debug, Default)]
pub struct PointOptions {
    /// Threads for each point's replications (default: the machine's cores); never changes
    /// outputs.
    pub threads: Option<usize>,
    /// The build running them, for the Results.
    pub build: Option<BuildRecord>,
}

/// The seed of the fresh re-run of a search's answer: the first 8 bytes (little-endian) of
/// SHA-256("blis-actor/search/fresh/v1" ‖ seed), seed as little-endian u64 — a named stream
/// apart from the replications the search judged by.
pub fn fresh_seed(seed: u64) -> u64 {
    let mut hasher = Sha256::new();
    hasher.update(b"blis-actor/search/fresh/v1");
    hasher.update(seed.to_le_bytes());
    let digest = hasher.finalize();
    u64::from_le_bytes(digest[..8].try_into().expect("a digest has 8 bytes"))
}

/// A point's values as its record lists them.
pub fn axis_values(point: &Point) -> Vec<AxisValue> {
    point
        .settings
        .iter()
        .map(|(path, value)| AxisValue {
            path: path.as_str().to_owned(),
            value: blis_contracts::yaml::to_json(value, path.as_str()).unwrap_or(serde_json::Value::Null),
        })
        .collect()
}

/// Run `point` as the scenario `text` (its own, or with a seed or replications set by a
/// search): its record, and its run when it ran. A refusal at run time (the upstream would not
/// start it) and a stalled engine are recorded, never ranked; other errors stop the sweep.
pub fn run_point(
    base: &Base,
    point: &Point,
    text: &str,
    data: &CostData,
    options: &PointOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<(PointRecord, Option<RunOutput>), RunError> {
    let values = axis_values(point);
    if let Some(reason) = &point.refused {
        return Ok((PointRecord::not_run(point.index, values, PointStatus::Refused, reason.clone()), None));
    }
    let run_options = RunOptions {
        base_dir: Some(base.dir.clone()),
        threads: options.threads,
        build: options.build.clone(),
        calls: CallSelection::None,
        calls_digest: CallsDigest::Skipped,
        ..RunOptions::default()
    };
    match run_observed(text, run_options, data, Vec::new(), progress) {
        Ok((output, _)) => Ok((PointRecord::ran(point.index, values, &output), Some(output))),
        Err(RunError::Input(error)) => {
            Ok((PointRecord::not_run(point.index, values, PointStatus::Refused, error.to_string()), None))
        }
        Err(error @ RunError::Stalled { .. }) => {
            Ok((PointRecord::not_run(point.index, values, PointStatus::Failed, error.to_string()), None))
        }
        Err(error) => Err(error),
    }
}

/// What a search asks of a point: run it on `replications` replications seeded from `seed`
/// (replication r on the run seed's r-th replication seed, so points are paired by seed).
pub trait Evaluate {
    /// Point `index` run on `replications` replications from `seed`.
    fn evaluate(&mut self, index: usize, seed: u64, replications: u32) -> Result<PointRecord, RunError>;
}

/// The simulator as a search's evaluator: each evaluation runs the point's scenario with the
/// seed and replications set.
pub struct Simulator<'a> {
    /// The base scenario.
    pub base: &'a Base,
    /// The points.
    pub points: &'a [Point],
    /// The cost model's data.
    pub data: &'a CostData,
    /// How points run.
    pub options: PointOptions,
    /// Hears every run's progress, with the point's index.
    pub progress: &'a mut dyn FnMut(usize, Progress),
}

impl Simulator<'_> {
    /// Point `index`'s scenario text on `seed` and `replications`.
    pub fn text(&self, index: usize, seed: u64, replications: u32) -> Result<String, RunError> {
        let point = &self.points[index];
        let mut settings = point.settings.clone();
        settings.push((ScenarioPath::parse("seed").expect("a valid path"), YamlValue::from(seed)));
        settings.push((
            ScenarioPath::parse("frame.replications").expect("a valid path"),
            YamlValue::from(replications),
        ));
        self.base.text_with(&settings).map_err(|(_, cause)| RunError::Output(cause))
    }

    /// Run point `index` on `seed` and `replications`: its scenario text, record and run.
    pub fn run(
        &mut self,
        index: usize,
        seed: u64,
        replications: u32,
    ) -> Result<(String, PointRecord, Option<RunOutput>), RunError> {
        let text = self.text(index, seed, replications)?;
        let progress = &mut *self.progress;
        let (record, output) =
            run_point(self.base, &self.points[index], &text, self.data, &self.options, &mut |p| {
                progress(index, p)
            })?;
        Ok((text, record, output))
    }
}

impl Evaluate for Simulator<'_> {
    fn evaluate(&mut self, index: usize, seed: u64, replications: u32) -> Result<PointRecord, RunError> {
        self.run(index, seed, replications).map(|(_, record, _)| record)
    }
}
