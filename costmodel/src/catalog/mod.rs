//! The catalog: facts of hardware and models, each with its source and rank.
//!
//! The data is embedded in the binary (`costmodel/data/`); lookups refuse unknown names with the
//! field path of the scenario that asked and the names that are known.

mod chip;
pub mod hf;
mod link;
mod model;

pub use chip::Chip;
pub use hf::HfConfig;
pub use link::{LinkClass, LinkKind};
pub use model::CatalogModel;

use blis_contracts::{Fact, FieldError, yaml};
use serde::Deserialize;

/// Link and HBM bandwidths any hardware has, B/s: 100 MB/s, well below any of today's, to
/// 100 TB/s, about a hundred times past the largest.
const BANDWIDTH: (f64, f64) = (1e8, 1e14);

/// Refuse `fact`, at `field`, unless it is a finite number within `range` (in `unit`), what
/// `hardware` has.
fn check_fact(
    field: &str,
    fact: Option<&Fact>,
    (least, most): (f64, f64),
    unit: &str,
    hardware: &str,
) -> Result<(), FieldError> {
    match fact {
        Some(fact) if !(fact.value.is_finite() && (least..=most).contains(&fact.value)) => {
            Err(FieldError::new(
                format!("{field}.value"),
                blis_contracts::number(fact.value),
                format!("must be a number from {least:e} to {most:e} {unit}, what {hardware} have"),
            ))
        }
        _ => Ok(()),
    }
}

const CHIPS: &str = include_str!("../../data/chips.yaml");
const LINKS: &str = include_str!("../../data/links.yaml");
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
    links: Vec<LinkKind>,
    models: Vec<CatalogModel>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ChipFile {
    chips: Vec<Chip>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkFile {
    links: Vec<LinkKind>,
}

/// The embedded catalog's files, named as in `costmodel/data` (`chips.yaml`, `links.yaml`,
/// `models/…`).
pub(crate) fn embedded_files() -> Vec<(String, &'static str)> {
    let mut files = vec![("chips.yaml".to_owned(), CHIPS), ("links.yaml".to_owned(), LINKS)];
    files.extend(MODELS.iter().map(|(name, text)| (format!("models/{name}"), *text)));
    files
}

impl Catalog {
    /// The catalog compiled into this binary.
    pub fn embedded() -> Catalog {
        Catalog::from_texts(CHIPS, LINKS, MODELS)
            .expect("the embedded catalog is valid (checked by its tests)")
    }

    /// A catalog from a chips file, a links file and named model files; refusals name the file
    /// and field.
    pub fn from_texts(chips: &str, links: &str, models: &[(&str, &str)]) -> Result<Catalog, FieldError> {
        let chips = yaml::from_str::<ChipFile>(chips).map_err(|e| e.within("chips.yaml"))?.chips;
        for (i, chip) in chips.iter().enumerate() {
            chip.validate().map_err(|e| e.within(&format!("chips.yaml.chips[{i}]")))?;
        }
        let links = yaml::from_str::<LinkFile>(links).map_err(|e| e.within("links.yaml"))?.links;
        for (i, link) in links.iter().enumerate() {
            link.validate().map_err(|e| e.within(&format!("links.yaml.links[{i}]")))?;
            if links[..i].iter().any(|l| l.name == link.name) {
                return Err(FieldError::new(
                    format!("links.yaml.links[{i}].name"),
                    &link.name,
                    "listed twice",
                ));
            }
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
        Ok(Catalog { chips, links, models: loaded })
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

    /// Every link kind, in catalog order.
    pub fn links(&self) -> &[LinkKind] {
        &self.links
    }

    /// The link kind called `name` of class `class`, asked for at `path`.
    pub fn link(&self, name: &str, class: LinkClass, path: &str) -> Result<&LinkKind, FieldError> {
        let known: Vec<&str> =
            self.links.iter().filter(|l| l.class == class).map(|l| l.name.as_str()).collect();
        match self.links.iter().find(|l| l.name == name) {
            Some(link) if link.class == class => Ok(link),
            Some(link) => Err(FieldError::new(
                path,
                name,
                format!(
                    "a {} link kind, not {} (known {} kinds: {})",
                    link.class.as_str(),
                    class.as_str(),
                    class.as_str(),
                    known.join(", ")
                ),
            )),
            None => Err(FieldError::new(
                path,
                name,
                format!("not in the catalog (known {} link kinds: {})", class.as_str(), known.join(", ")),
            )),
        }
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
        let e = Catalog::from_texts(CHIPS, LINKS, &[MODELS[0], MODELS[0]]).unwrap_err();
        assert!(e.cause.contains("twice"), "{e}");
    }

    #[test]
    fn link_kinds_are_found_by_class_and_refused_by_name() {
        let catalog = Catalog::embedded();
        let pcie = catalog.link("pcie-gen5-x16", LinkClass::Pcie, "x").unwrap();
        assert_eq!(pcie.bandwidth.value, 64.0e9);
        let host = catalog.link("dgx-h100-ddr5", LinkClass::HostMemory, "x").unwrap();
        assert_eq!(host.capacity.as_ref().unwrap().value, 2.0e12);
        let e = catalog.link("pcie-gen7", LinkClass::Pcie, "cluster.fabric.gpu_host").unwrap_err();
        assert_eq!((e.path.as_str(), e.value.as_deref()), ("cluster.fabric.gpu_host", Some("pcie-gen7")));
        assert!(e.cause.contains("pcie-gen4-x16"), "{e}");
        let e = catalog.link("nvlink-4", LinkClass::Pcie, "cluster.fabric.gpu_host").unwrap_err();
        assert!(e.cause.contains("a gpu_gpu link kind"), "{e}");
    }

    #[test]
    fn host_memory_without_capacity_is_refused() {
        let links = "links:\n  - name: m\n    class: host_memory\n    bandwidth: {value: 1.0e9, unit: B/s, rank: assumed, source: s}\n";
        let e = Catalog::from_texts(CHIPS, links, MODELS).unwrap_err();
        assert_eq!(e.path, "links.yaml.links[0].capacity");
    }

    #[test]
    fn facts_outside_what_hardware_has_are_refused_naming_the_field() {
        // A bandwidth of 1e-300 B/s once priced a dense model's steps as 0 × ∞ (its MoE part),
        // silently zero; a huge one prices every step at nothing.
        for (from, to, path) in [
            ("value: 3.35e12", "value: 1e-300", "chips.yaml.chips[0].hbm_bandwidth.value"),
            ("value: 3.35e12", "value: 1e30", "chips.yaml.chips[0].hbm_bandwidth.value"),
            ("value: 989.4e12", "value: 0.5", "chips.yaml.chips[0].bf16_dense_flops.value"),
        ] {
            let chips = CHIPS.replacen(from, to, 1);
            let e = Catalog::from_texts(&chips, LINKS, MODELS).unwrap_err();
            assert_eq!(e.path, path);
            assert!(e.cause.contains("what accelerators have"), "{e}");
        }
        let links = LINKS.replacen("value: 64.0e9", "value: 1e3", 1);
        let e = Catalog::from_texts(CHIPS, &links, MODELS).unwrap_err();
        assert!(e.path.ends_with("bandwidth.value") && e.cause.contains("what links have"), "{e}");
    }
}
