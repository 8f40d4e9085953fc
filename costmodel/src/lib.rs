//! The cost model: what the hardware costs an engine.
//!
//! A [`Catalog`] of facts about chips and models, each with its source and [`Rank`] of trust, and
//! the pricing of engine steps behind the contracts' `Environment`: memory at plan time (so an
//! engine can apply its upstream's KV budget rule) and a price per step at run time. The first
//! price is a [`Roofline`] over weights, KV traffic and FLOPs; it respects the physical floor of
//! streaming every weight once per step.

mod catalog;
mod roofline;
mod sizes;

pub use catalog::{Catalog, CatalogModel, Chip, Fact, HfConfig, Rank};
pub use roofline::Roofline;
pub use sizes::{ParameterCounts, kv_bytes_per_token_per_gpu};
