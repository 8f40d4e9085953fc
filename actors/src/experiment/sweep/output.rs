//! A sweep's files: per point `points/<id>/` with `scenario.yaml`, `point.json` and (when it
//! ran) `result.json`; for the whole sweep `sweep.json` and `sweep.csv`, made from the points'
//! `point.json` files, so a sweep run in one process and one merged from shards write the same
//! bytes. A shard's folder holds its points and `shard.json`, which `merge` reads.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use blis_contracts::FieldError;
use serde::{Deserialize, Serialize};

use super::record::{PointRecord, point_id};
use super::shard::Shard;
use super::spec::SweepSpec;
use crate::{RunError, RunOutput};

/// The schema of `sweep.json`.
pub const SWEEP_SCHEMA: &str = "blis-actor/sweep/v1";

/// What identifies a sweep: shards of one sweep share it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepHeader {
    /// [`SWEEP_SCHEMA`].
    pub schema: String,
    /// SHA-256 of the spec and every point's scenario.
    pub digest: String,
    /// The base scenario, as the spec names it.
    pub base: String,
    /// The seed every point runs on.
    pub seed: u64,
    /// Every path a point sets.
    pub axes: Vec<String>,
    /// How many points.
    pub points: usize,
}

impl SweepHeader {
    /// The header of `spec`.
    pub fn of(spec: &SweepSpec) -> SweepHeader {
        SweepHeader {
            schema: SWEEP_SCHEMA.to_owned(),
            digest: spec.digest.clone(),
            base: spec.base.given.clone(),
            seed: spec.base.seed,
            axes: spec.axes.clone(),
            points: spec.points.len(),
        }
    }
}

/// `shard.json`: which sweep, which shard.
#[derive(Debug, Serialize, Deserialize)]
struct ShardFile {
    sweep: SweepHeader,
    shard: u32,
    shards: u32,
}

/// `sweep.json`.
#[derive(Serialize)]
struct SweepTable<'a> {
    #[serde(flatten)]
    header: &'a SweepHeader,
    rows: &'a [PointRecord],
}

/// Pretty JSON with a final newline, as every file of a sweep is written.
pub fn json_bytes<T: Serialize>(value: &T) -> Vec<u8> {
    let mut bytes = serde_json::to_vec_pretty(value).expect("sweep records serialise");
    bytes.push(b'\n');
    bytes
}

fn output_error(path: &Path, error: impl std::fmt::Display) -> RunError {
    RunError::Output(format!("{}: {error}", path.display()))
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), RunError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| output_error(parent, e))?;
    }
    std::fs::write(path, bytes).map_err(|e| output_error(path, e))
}

/// Write a point's folder under `out/points/`.
pub fn write_point(
    out: &Path,
    text: &str,
    record: &PointRecord,
    output: Option<&RunOutput>,
) -> Result<(), RunError> {
    let dir = out.join("points").join(&record.id);
    write(&dir.join("scenario.yaml"), text.as_bytes())?;
    if let Some(output) = output {
        write(&dir.join("result.json"), &output.result_json())?;
    }
    write(&dir.join("point.json"), &json_bytes(record))
}

/// Write `shard.json` into a shard's folder.
pub fn write_shard(out: &Path, header: &SweepHeader, shard: Shard) -> Result<(), RunError> {
    let file = ShardFile { sweep: header.clone(), shard: shard.index, shards: shard.count };
    write(&out.join("shard.json"), &json_bytes(&file))
}

/// Read every point's `point.json` under `out/points/` and write `sweep.json` and `sweep.csv`.
pub fn write_tables(out: &Path, header: &SweepHeader) -> Result<Vec<PointRecord>, RunError> {
    let mut rows = Vec::with_capacity(header.points);
    for index in 0..header.points {
        let path = out.join("points").join(point_id(index)).join("point.json");
        let bytes = std::fs::read(&path).map_err(|e| output_error(&path, e))?;
        let row: PointRecord = serde_json::from_slice(&bytes).map_err(|e| output_error(&path, e))?;
        rows.push(row);
    }
    write(&out.join("sweep.json"), &json_bytes(&SweepTable { header, rows: &rows }))?;
    write(&out.join("sweep.csv"), &csv_table(header, &rows)?)?;
    Ok(rows)
}

/// `sweep.csv`: one row per point — its index, every axis value (empty where the point keeps
/// the base's), status, reason, the overload and validity flags, then every figure's mean and
/// half-width.
fn csv_table(header: &SweepHeader, rows: &[PointRecord]) -> Result<Vec<u8>, RunError> {
    let figures: BTreeSet<&String> = rows.iter().flat_map(|r| r.estimates.keys()).collect();
    let mut writer = csv::Writer::from_writer(Vec::new());
    let mut head: Vec<String> = vec!["point".into()];
    head.extend(header.axes.iter().cloned());
    head.extend(["status", "reason", "overloaded", "in_domain"].map(String::from));
    for figure in &figures {
        head.push(format!("{figure}.mean"));
        head.push(format!("{figure}.half_width"));
    }
    let csv_error = |e: csv::Error| RunError::Output(format!("sweep.csv: {e}"));
    writer.write_record(&head).map_err(csv_error)?;
    for row in rows {
        let mut cells: Vec<String> = vec![row.index.to_string()];
        for axis in &header.axes {
            let value = row.values.iter().find(|v| &v.path == axis).map(|v| match &v.value {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            });
            cells.push(value.unwrap_or_default());
        }
        let status = serde_json::to_value(row.status).expect("a status serialises");
        cells.push(status.as_str().unwrap_or_default().to_owned());
        cells.push(row.reason.clone().unwrap_or_default());
        cells.push(row.overloaded.to_string());
        cells.push(row.in_domain.to_string());
        for figure in &figures {
            let estimate = row.estimates.get(*figure);
            cells.push(estimate.map(|e| e.mean.to_string()).unwrap_or_default());
            cells.push(estimate.and_then(|e| e.half_width).map(|h| h.to_string()).unwrap_or_default());
        }
        writer.write_record(&cells).map_err(csv_error)?;
    }
    writer.into_inner().map_err(|e| RunError::Output(format!("sweep.csv: {e}")))
}

/// A shard folder's `shard.json`, refused naming the folder when it is not a shard.
fn read_shard(dir: &Path) -> Result<ShardFile, RunError> {
    let path = dir.join("shard.json");
    let refuse = |cause: String| RunError::Input(FieldError::new("DIR", dir.display(), cause));
    let bytes = std::fs::read(&path)
        .map_err(|e| refuse(format!("not a shard of a sweep: {}: {e}", path.display())))?;
    serde_json::from_slice(&bytes).map_err(|e| refuse(format!("{} is not readable: {e}", path.display())))
}

/// The sweep a shard folder belongs to.
pub fn shard_header(dir: &Path) -> Result<SweepHeader, RunError> {
    read_shard(dir).map(|file| file.sweep)
}

/// Fold the shard folders `dirs` into `out`: every shard of one sweep, each once, their points'
/// files copied byte for byte, then the tables written. Refused, naming the folder, when a
/// folder is not a shard, belongs to another sweep or repeats a shard, or a shard is missing.
pub fn merge(dirs: &[PathBuf], out: &Path) -> Result<(SweepHeader, Vec<PointRecord>), RunError> {
    let mut header: Option<SweepHeader> = None;
    let mut seen: Vec<Option<&Path>> = Vec::new();
    for dir in dirs {
        let shown = dir.display().to_string();
        let refuse = |cause: String| RunError::Input(FieldError::new("DIR", &shown, cause));
        let file = read_shard(dir)?;
        match &header {
            None => {
                seen = vec![None; file.shards as usize];
                header = Some(file.sweep.clone());
            }
            Some(first) if *first != file.sweep => {
                return Err(refuse(format!(
                    "a shard of another sweep (digest {}, not {})",
                    file.sweep.digest, first.digest
                )));
            }
            Some(_) if file.shards as usize != seen.len() => {
                return Err(refuse(format!(
                    "shard {}/{} of a sweep cut into {} shards",
                    file.shard,
                    file.shards,
                    seen.len()
                )));
            }
            Some(_) => {}
        }
        let Some(slot) = seen.get_mut(file.shard as usize) else {
            return Err(refuse(format!(
                "shard index {} is out of range 0 to {}",
                file.shard,
                file.shards.saturating_sub(1)
            )));
        };
        if let Some(other) = slot {
            return Err(refuse(format!(
                "shard {}/{} again (also {})",
                file.shard,
                file.shards,
                other.display()
            )));
        }
        *slot = Some(dir);
    }
    let Some(header) = header else {
        return Err(RunError::Input(FieldError::at("DIR", "give the shards' folders")));
    };
    if let Some(missing) = seen.iter().position(Option::is_none) {
        return Err(RunError::Input(FieldError::new(
            "DIR",
            format!("{} folders", dirs.len()),
            format!("shard {missing}/{} is missing", seen.len()),
        )));
    }
    for index in 0..header.points {
        let dir = seen[index % seen.len()].expect("every shard is present");
        let id = point_id(index);
        let from = dir.join("points").join(&id);
        for name in ["scenario.yaml", "result.json", "point.json"] {
            let source = from.join(name);
            if !source.exists() && name == "result.json" {
                continue;
            }
            let bytes = std::fs::read(&source).map_err(|e| {
                RunError::Input(FieldError::new(
                    "DIR",
                    dir.display(),
                    format!("point {id} is incomplete: {}: {e}", source.display()),
                ))
            })?;
            write(&out.join("points").join(&id).join(name), &bytes)?;
        }
    }
    let rows = write_tables(out, &header)?;
    Ok((header, rows))
}
