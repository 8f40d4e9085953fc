//! The cost model: what the hardware costs an engine.
//!
//! A [`Catalog`] of facts about chips and models, each with its source and rank of trust; a
//! [`Registry`] of coefficients per primitive family and chip, each with its rank, source, fit
//! range and bundle; and the [`Pricer`], which implements the contracts' `Environment` for one
//! pool: memory at plan time (so an engine can apply its upstream's KV budget rule) and, at run
//! time, a price per step computed operator by operator and split by the rank of the
//! coefficients that priced it. [`CostData`] bundles a catalog and a registry with the content
//! hashes a Result records.

mod catalog;
mod data;
mod pricing;
mod registry;
mod sizes;

pub use blis_contracts::{Fact, Rank};
pub use catalog::{Catalog, CatalogModel, Chip, HfConfig, LinkClass, LinkKind};
pub use data::CostData;
pub use pricing::{Pricer, parameter_summary};
pub use registry::{CoefficientSample, EMBEDDED_REGISTRY, Entry, Family, FitRange, Registry, Resolved};
pub use sizes::{AttentionWidths, ParameterCounts, attention_widths, kv_bytes_per_token_per_gpu};
