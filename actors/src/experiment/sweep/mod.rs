//! Sweeps: many configurations of one base scenario, each run with the frame's replications on
//! common random numbers (every point on the same seed, so replication r of every point sees
//! the same arrivals), one Result per point and a table of them all; `--best` names the best
//! point with the chance of a false winner controlled and re-runs it on fresh seeds; shards of
//! a sweep run apart (job arrays) and merge into the same bytes.

pub mod best;
pub mod evaluate;
pub mod figure;
pub mod output;
pub mod path;
pub mod record;
pub mod shard;
pub mod spec;

use std::path::Path;

use blis_costmodel::CostData;

use self::evaluate::{PointOptions, run_point};
use self::output::{SweepHeader, write_point, write_shard, write_tables};
use self::record::PointRecord;
use self::shard::Shard;
use self::spec::SweepSpec;
use crate::{Progress, RunError};

/// How far a sweep has got, for a progress display.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SweepProgress {
    /// The point running.
    pub point: usize,
    /// Points of this shard done before it.
    pub done: usize,
    /// Points of this shard.
    pub total: usize,
    /// The point's run.
    pub run: Progress,
}

/// Run `spec`'s points (only `shard`'s share, when given) into `out`. Without a shard the
/// tables are written and the rows returned; a shard writes its `shard.json` for `merge`.
pub fn sweep(
    spec: &SweepSpec,
    shard: Option<Shard>,
    out: &Path,
    data: &CostData,
    options: &PointOptions,
    progress: &mut dyn FnMut(SweepProgress),
) -> Result<Option<Vec<PointRecord>>, RunError> {
    let mine: Vec<_> = spec.points.iter().filter(|p| shard.is_none_or(|s| s.owns(p.index))).collect();
    let header = SweepHeader::of(spec);
    for (done, point) in mine.iter().enumerate() {
        let total = mine.len();
        let report = &mut *progress;
        let (record, output) = run_point(&spec.base, point, &point.text, data, options, &mut |run| {
            report(SweepProgress { point: point.index, done, total, run })
        })?;
        write_point(out, &point.text, &record, output.as_ref())?;
    }
    match shard {
        Some(shard) => {
            write_shard(out, &header, shard)?;
            Ok(None)
        }
        None => write_tables(out, &header).map(Some),
    }
}

#[cfg(test)]
pub(crate) mod stub;
