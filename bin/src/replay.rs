//! `--record` and `blis-actor replay`: a run's inputs and deliveries, and their re-run.

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
