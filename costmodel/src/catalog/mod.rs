//! The catalog: facts of hardware and models, each with its source and rank.
//!
//! The data is embedded in the binary (`costmodel/data/`); lookups refuse unknown names with the
//! field path of the scenario that asked and the names that are known.

mod chip;
pub mod hf;
mod model;

pub use chip::Chip;
pub use hf::HfConfig;
pub use model::CatalogModel;

use blis_contracts::{FieldError, yaml};
use serde::Deserialize;

const CHIPS: &str = include_str!("../../data/chips.yaml");
const MODELS: &[(&str, &str)] = &[
    ("deepseek-v3.yaml", include_str!("../../data/models/deepseek-v3.yaml")),
    ("llama-2-70b.yaml", include_str!("../../data/models/llama-2-70b.yaml")),
    ("llama-3.1-405b.yaml", include_str!("../../data/models/llama-3.1-405b.yaml")),
    ("llama-3.1-70b.yaml", include_str!("../../data/models/llama-3.1-70b.yaml")),
    ("llama-3.1-8b.yaml", include_str!("../../data/models/llama-3.1-8b.yaml")),
    ("mistral-7b-v0.1.yaml", include_str!("../../data/models/mistral-7b-v0.1.yaml")),
    ("mixtral-8x7b-v0.1.yaml", include_str!("../../data/models/mixtral-8x7b-v0.1.yaml")),
    ("qwen2.5-72b.yaml", include_str!("../../data/models/qwen2.5-72b.yaml")),
    ("qwen2.5-7b.yaml", include_str!("../../data/models/qwen2.5-7b.yaml")),
    ("qwen3-32b.yaml", include_str!("../../data/models/qwen3-32b.yaml")),
];

/// All chips and models known to a run.
#[derive(Clone, Debug)]
pub struct Catalog {
    chips: Vec<Chip>,
    models: Vec<CatalogModel>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ChipFile {
    chips: Vec<Chip>,
}

/// The embedded catalog's files, named as in `costmodel/data` (`chips.yaml`, `models/…`).
pub(crate) fn embedded_files() -> Vec<(String, &'static str)> {
    let mut files = vec![("chips.yaml".to_owned(), CHIPS)];
    files.extend(MODELS.iter().map(|(name, text)| (format!("models/{name}"), *text)));
    files
}

impl Catalog {
    /// The catalog compiled into this binary.
    pub fn embedded() -> Catalog {
        Catalog::from_texts(CHIPS, MODELS).expect("the embedded catalog is valid (checked by its tests)")
    }

    /// A catalog from a chips file and named model files; refusals name the file and field.
    pub fn from_texts(chips: &str, models: &[(&str, &str)]) -> Result<Catalog, FieldError> {
        let chips = yaml::from_str::<ChipFile>(chips).map_err(|e| e.within("chips.yaml"))?.chips;
        for (i, chip) in chips.iter().enumerate() {
            chip.validate().map_err(|e| e.within(&format!("chips.yaml.chips[{i}]")))?;
        }
        let mut loaded = Vec::with_capacity(models.len());
        for (file, text) in models {
            loaded.push(CatalogModel::parse(text).map_err(|e| e.within(file))?);
        }
        for (i, chip) in chips.iter().enumerate() {
            if chips[..i].iter().any(|c| c.name == chip.name) {
                return Err(FieldError::new(
                    format!("chips.yaml.chips[{i}].name"),
                    &chip.name,
                    "listed twice",
                ));
            }
        }
        for (i, model) in loaded.iter().enumerate() {
            if loaded[..i].iter().any(|m| m.architecture.name == model.architecture.name) {
                return Err(FieldError::new(models[i].0, &model.architecture.name, "model listed twice"));
            }
        }
        Ok(Catalog { chips, models: loaded })
    }

    /// Add a model named `name` from a Hugging Face `config.json` text found at `source`.
    pub fn add_hf_config(&mut self, name: &str, json: &str, source: &str) -> Result<(), FieldError> {
        if self.models.iter().any(|m| m.architecture.name == name) {
            return Err(FieldError::new("name", name, "a model of this name is already in the catalog"));
        }
        let config: HfConfig = serde_json::from_str(json)
            .map_err(|e| FieldError::at("config.json", format!("not a readable config: {e}")))?;
        let read = config.architecture(name)?;
        self.models.push(CatalogModel {
            architecture: read.architecture,
            rank: blis_contracts::Rank::VendorSpec,
            source: format!("Hugging Face config.json at {source}"),
            notes: read.notes,
        });
        Ok(())
    }

    /// Every chip, in catalog order.
    pub fn chips(&self) -> &[Chip] {
        &self.chips
    }

    /// Every model, in catalog order.
    pub fn models(&self) -> &[CatalogModel] {
        &self.models
    }

    /// The chip called `name`, asked for at `path`.
    pub fn chip(&self, name: &str, path: &str) -> Result<&Chip, FieldError> {
        self.chips.iter().find(|c| c.name == name).ok_or_else(|| {
            let known: Vec<&str> = self.chips.iter().map(|c| c.name.as_str()).collect();
            FieldError::new(path, name, format!("not in the catalog (known chips: {})", known.join(", ")))
        })
    }

    /// The model called `name`, asked for at `path`.
    pub fn model(&self, name: &str, path: &str) -> Result<&CatalogModel, FieldError> {
        self.models.iter().find(|m| m.architecture.name == name).ok_or_else(|| {
            let known: Vec<&str> = self.models.iter().map(|m| m.architecture.name.as_str()).collect();
            FieldError::new(path, name, format!("not in the catalog (known models: {})", known.join(", ")))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_catalog_loads_and_finds_what_it_lists() {
        let catalog = Catalog::embedded();
        assert_eq!(catalog.chip("H100-SXM", "x").unwrap().bf16_dense_flops.value, 989.4e12);
        let llama = &catalog.model("Llama-3.1-8B", "x").unwrap().architecture;
        assert_eq!((llama.num_layers, llama.num_kv_heads, llama.head_dim), (32, 8, 128));
        assert_eq!(catalog.model("Llama-2-70B", "x").unwrap().architecture.max_position_embeddings, 4096);
    }

    #[test]
    fn unknown_names_are_refused_with_the_known_ones() {
        let catalog = Catalog::embedded();
        let e = catalog.chip("H101", "cluster.pools[0].hardware.chip").unwrap_err();
        assert_eq!(e.path, "cluster.pools[0].hardware.chip");
        assert_eq!(e.value.as_deref(), Some("H101"));
        assert!(e.cause.contains("H100-SXM"), "{e}");
        let e = catalog.model("GPT-5", "cluster.pools[0].model").unwrap_err();
        assert!(e.cause.contains("Llama-3.1-8B"), "{e}");
    }

    #[test]
    fn duplicate_entries_are_refused() {
        let e = Catalog::from_texts(CHIPS, &[MODELS[0], MODELS[0]]).unwrap_err();
        assert!(e.cause.contains("twice"), "{e}");
    }
}
