//! llm-d's approximate prefix cache: the `approx-prefix-cache-producer` and the
//! `prefix-cache-scorer` that reads what it produces.
//!
//! Upstream (llm-d-router v0.10.0, `pkg/epp/framework/plugins/`):
//! `requestcontrol/dataproducer/approximateprefix/{types,plugin,indexer}.go`,
//! `requestcontrol/dataproducer/prefixhash/hashing.go` and `scheduling/scorer/prefix/plugin.go`.
//! This first slice holds the producer's parameters and the block hashing.

mod config;
mod hashing;

pub use config::{
    APPROX_PREFIX_PRODUCER_TYPE, ApproxPrefixConfig, DEFAULT_BLOCK_SIZE_TOKENS,
    DEFAULT_LRU_CAPACITY_PER_SERVER, DEFAULT_MAX_PREFIX_BLOCKS, DEFAULT_MAX_PREFIX_TOKENS,
    INACTIVE_ENDPOINT_SWEEP_MICROS, MIN_BLOCK_SIZE_TOKENS,
};
pub use hashing::{append_block_hashes, block_digest, blocks, chain_link, chain_seed};
