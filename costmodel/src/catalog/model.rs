//! Catalog models: a Hugging Face `config.json`'s fields with their source and rank.

use blis_contracts::{FieldError, ModelArchitecture, Rank, yaml};
use serde::Deserialize;

use super::hf::HfConfig;

/// A catalog model: its architecture with the source and rank of the config it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct CatalogModel {
    /// The architecture.
    pub architecture: ModelArchitecture,
    /// How much the config is trusted.
    pub rank: Rank,
    /// Where the config comes from.
    pub source: String,
    /// Fields read but decided elsewhere (see [`super::hf::ReadModel::notes`]).
    pub notes: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelFile {
    name: String,
    rank: Rank,
    source: String,
    config: serde_norway::Value,
}

impl CatalogModel {
    /// A catalog model file: name, rank, source and the `config.json` fields.
    pub fn parse(text: &str) -> Result<CatalogModel, FieldError> {
        let file: ModelFile = yaml::from_str(text)?;
        let config: HfConfig = yaml::from_value(&file.config, "config")?;
        let read = config.architecture(&file.name).map_err(|e| e.within("config"))?;
        Ok(CatalogModel {
            architecture: read.architecture,
            rank: file.rank,
            source: file.source,
            notes: read.notes,
        })
    }
}
