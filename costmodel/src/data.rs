//! Loading the catalog and the registry, embedded or from files, with their content hashes.
//!
//! The data is compiled into the binary; `--catalog DIR` (a folder laid out like
//! `costmodel/data`: `chips.yaml`, `links.yaml` and `models/*.yaml`) and `--registry FILE` replace it for a
//! run, and `--model-config NAME=config.json` adds a model. Each part's hash is SHA-256 of a
//! canonical encoding of its files — for every file in name order, its name, a zero byte, its
//! length as u64 little-endian and its bytes — so embedded and path loads of the same data give
//! the same hash, which every Result records.

use std::path::Path;

use blis_contracts::FieldError;
use sha2::{Digest, Sha256};

use crate::catalog::{self, Catalog};
use crate::registry::{EMBEDDED_REGISTRY, Registry};

/// The cost model's data for one run, with the hashes of its parts.
#[derive(Clone, Debug)]
pub struct CostData {
    /// Chips and models.
    pub catalog: Catalog,
    /// Coefficients.
    pub registry: Registry,
    /// SHA-256 (hex) of the catalog's files (and any added model configs).
    pub catalog_sha256: String,
    /// SHA-256 (hex) of the registry file.
    pub registry_sha256: String,
}

/// The canonical hash of named files.
fn hash(files: &[(String, Vec<u8>)]) -> String {
    let mut sorted: Vec<&(String, Vec<u8>)> = files.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let mut hasher = Sha256::new();
    for (name, bytes) in sorted {
        hasher.update(name.as_bytes());
        hasher.update([0]);
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(bytes);
    }
    hasher.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>, FieldError> {
    std::fs::read(path).map_err(|e| FieldError::new(what, path.display(), format!("cannot read: {e}")))
}

fn text(bytes: &[u8], path: &Path, what: &str) -> Result<String, FieldError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| FieldError::new(what, path.display(), "not UTF-8 text"))
}

impl CostData {
    /// The data compiled into this binary.
    pub fn embedded() -> CostData {
        CostData::load(None, None, &[]).expect("the embedded data is valid (checked by its tests)")
    }

    /// The catalog from `catalog_dir` (or the embedded one), the registry from `registry_file`
    /// (or the embedded one), plus `models`, each a name and the path of a Hugging Face
    /// `config.json`. Refusals name the option, the file and the cause.
    pub fn load(
        catalog_dir: Option<&Path>,
        registry_file: Option<&Path>,
        models: &[(String, &Path)],
    ) -> Result<CostData, FieldError> {
        let mut files: Vec<(String, Vec<u8>)> = match catalog_dir {
            None => catalog::embedded_files().into_iter().map(|(n, t)| (n, t.as_bytes().to_vec())).collect(),
            Some(dir) => {
                let mut files = vec![
                    ("chips.yaml".to_owned(), read(&dir.join("chips.yaml"), "--catalog")?),
                    ("links.yaml".to_owned(), read(&dir.join("links.yaml"), "--catalog")?),
                ];
                let models_dir = dir.join("models");
                let entries = std::fs::read_dir(&models_dir).map_err(|e| {
                    FieldError::new(
                        "--catalog",
                        models_dir.display(),
                        format!("cannot read the models folder: {e}"),
                    )
                })?;
                let mut names: Vec<String> = entries
                    .filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.ends_with(".yaml"))
                    .collect();
                names.sort();
                for name in names {
                    files.push((format!("models/{name}"), read(&models_dir.join(&name), "--catalog")?));
                }
                files
            }
        };
        let texts: Vec<(String, String)> = files
            .iter()
            .map(|(n, b)| Ok((n.clone(), text(b, Path::new(n), "--catalog")?)))
            .collect::<Result<_, FieldError>>()?;
        let chips = &texts.iter().find(|(n, _)| n == "chips.yaml").expect("chips.yaml is always read").1;
        let model_texts: Vec<(&str, &str)> = texts
            .iter()
            .filter(|(n, _)| n.starts_with("models/"))
            .map(|(n, t)| (n.as_str(), t.as_str()))
            .collect();
        let links = &texts.iter().find(|(n, _)| n == "links.yaml").expect("links.yaml is always read").1;
        let mut catalog = Catalog::from_texts(chips, links, &model_texts)?;
        for (name, path) in models {
            let bytes = read(path, "--model-config")?;
            let json = text(&bytes, path, "--model-config")?;
            catalog
                .add_hf_config(name, &json, &path.display().to_string())
                .map_err(|e| e.within(&format!("--model-config {name}={}", path.display())))?;
            files.push((format!("extra/{name}"), bytes));
        }
        let registry_bytes = match registry_file {
            None => EMBEDDED_REGISTRY.as_bytes().to_vec(),
            Some(path) => read(path, "--registry")?,
        };
        let registry_text =
            text(&registry_bytes, registry_file.unwrap_or(Path::new("registry.yaml")), "--registry")?;
        let registry = Registry::parse(&registry_text).map_err(|e| e.within("registry"))?;
        Ok(CostData {
            catalog,
            registry,
            catalog_sha256: hash(&files),
            registry_sha256: hash(&[("registry.yaml".to_owned(), registry_bytes)]),
        })
    }
}

impl CostData {
    /// The same catalog with `registry` (its hash that of its YAML text).
    pub fn with_registry(&self, registry: Registry) -> CostData {
        let text = registry.to_yaml();
        CostData {
            catalog: self.catalog.clone(),
            registry,
            catalog_sha256: self.catalog_sha256.clone(),
            registry_sha256: hash(&[("registry.yaml".to_owned(), text.into_bytes())]),
        }
    }

    /// The same data with a model named `name` added from the Hugging Face `config.json` at
    /// `path`; the catalog's hash becomes that of its previous hash and the added file.
    pub fn with_hf_model(&self, name: &str, path: &Path) -> Result<CostData, FieldError> {
        let bytes = read(path, "model config")?;
        let json = text(&bytes, path, "model config")?;
        let mut catalog = self.catalog.clone();
        catalog
            .add_hf_config(name, &json, &path.display().to_string())
            .map_err(|e| e.within(&path.display().to_string()))?;
        let catalog_sha256 = hash(&[
            ("catalog".to_owned(), self.catalog_sha256.clone().into_bytes()),
            (format!("extra/{name}"), bytes),
        ]);
        Ok(CostData {
            catalog,
            registry: self.registry.clone(),
            catalog_sha256,
            registry_sha256: self.registry_sha256.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_and_path_loads_of_the_same_data_hash_the_same() {
        let scratch = tempfile::Builder::new().prefix("blis-costdata-").tempdir().unwrap();
        let dir = scratch.path();
        std::fs::create_dir_all(dir.join("models")).unwrap();
        for (name, text) in catalog::embedded_files() {
            std::fs::write(dir.join(&name), text).unwrap();
        }
        std::fs::write(dir.join("registry.yaml"), EMBEDDED_REGISTRY).unwrap();
        let embedded = CostData::embedded();
        let loaded = CostData::load(Some(dir), Some(&dir.join("registry.yaml")), &[]).unwrap();
        assert_eq!(loaded.catalog_sha256, embedded.catalog_sha256);
        assert_eq!(loaded.registry_sha256, embedded.registry_sha256);
        // Changing one byte changes the hash.
        let chips = std::fs::read_to_string(dir.join("chips.yaml")).unwrap();
        std::fs::write(dir.join("chips.yaml"), chips.replacen("989.4e12", "989.5e12", 1)).unwrap();
        let changed = CostData::load(Some(dir), None, &[]).unwrap();
        assert_ne!(changed.catalog_sha256, embedded.catalog_sha256);
    }

    #[test]
    fn a_hugging_face_config_adds_a_model_and_changes_the_hash() {
        let dir = tempfile::Builder::new().prefix("blis-hfconfig-").tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, std::fs::read("../../shared/reference-data/model-configs/Mixtral-8x7B-v0.1/config.json").unwrap_or_else(|_| {
            br#"{"hidden_size":4096,"intermediate_size":14336,"num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":8,"vocab_size":32000,"max_position_embeddings":32768,"torch_dtype":"bfloat16","num_local_experts":8,"num_experts_per_tok":2}"#.to_vec()
        }))
        .unwrap();
        let data = CostData::load(None, None, &[("my-mixtral".to_owned(), &path)]).unwrap();
        let model = &data.catalog.model("my-mixtral", "x").unwrap().architecture;
        assert_eq!(model.moe.unwrap().experts, 8);
        assert_ne!(data.catalog_sha256, CostData::embedded().catalog_sha256);
        let e = CostData::load(None, None, &[("Llama-3.1-8B".to_owned(), &path)]).unwrap_err();
        assert!(e.cause.contains("twice") || e.cause.contains("already"), "{e}");
    }
}
