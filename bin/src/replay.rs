//! `--record` and `blis-actor replay`: a run's inputs and deliveries, and their re-run.

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Everything needed to run a recorded run again, as the log's inputs section (JSON).
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Inputs {
    /// The release that recorded it.
    pub blis_actor_version: String,
    /// The scenario text, exactly as given.
    pub scenario: String,
    /// The seed the command line gave, if any.
    pub seed: Option<u64>,
    /// The replications the command line asked for, if any.
    #[serde(default)]
    pub replications: Option<u32>,
    /// The catalog the run used (its content hash).
    pub catalog_sha256: String,
    /// The registry the run used (its content hash).
    pub registry_sha256: String,
    /// Every workload file the run read (replayed traces, inference-perf profiles), carried
    /// whole, so the recording replays anywhere.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<CarriedFile>,
}

/// A workload file carried in a recording.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CarriedFile {
    /// The path as the scenario names it.
    pub path: String,
    /// Its content.
    pub content: String,
}

/// The workload files `scenario` names (relative to `base_dir`), read for a recording; a file
/// that cannot be read is left out (the run refuses it by its field).
pub fn carry(scenario: &str, base_dir: &Path) -> Vec<CarriedFile> {
    let Ok(parsed) = blis_contracts::Scenario::parse(scenario) else { return Vec::new() };
    let workload = &parsed.workload;
    let paths =
        workload.replays.iter().map(|r| &r.path).chain(workload.inference_perf.iter().map(|i| &i.profile));
    paths
        .filter_map(|path| {
            let content = std::fs::read_to_string(base_dir.join(path)).ok()?;
            Some(CarriedFile { path: path.clone(), content })
        })
        .collect()
}

/// Lay the carried files out under `dir`, as the scenario names them, for the re-run to read;
/// a file named by an absolute path or one leaving its folder cannot be moved, so the one on
/// disk must hold the recorded content.
pub fn materialise(files: &[CarriedFile], dir: &Path) -> Result<(), String> {
    for file in files {
        let relative = Path::new(&file.path);
        let movable = relative.components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
        if !movable {
            let on_disk = std::fs::read_to_string(relative).map_err(|e| {
                format!("{}: the recorded run read this file, and it cannot be read here: {e}", file.path)
            })?;
            if on_disk != file.content {
                return Err(format!("{}: differs from the file the recorded run read", file.path));
            }
            continue;
        }
        let target: PathBuf = dir.join(relative);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        std::fs::write(&target, &file.content).map_err(|e| format!("{}: {e}", target.display()))?;
    }
    Ok(())
}

impl Inputs {
    /// The canonical text of these inputs.
    pub fn to_text(&self) -> String {
        serde_json::to_string_pretty(self).expect("inputs serialise")
    }
}

/// The trailer of a finished recording: the digest of the run's comparable result.
pub fn trailer(digest: &str) -> String {
    format!("comparable-result-sha256 {digest}")
}
