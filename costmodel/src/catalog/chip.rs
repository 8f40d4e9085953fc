//! Accelerators.

use serde::{Deserialize, Serialize};

use super::rank::Fact;

/// One accelerator's facts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Chip {
    /// Catalog name, e.g. `H100-SXM`.
    pub name: String,
    /// Dense BF16 tensor-core peak, FLOP/s.
    pub bf16_dense_flops: Fact,
    /// HBM bandwidth, B/s.
    pub hbm_bandwidth: Fact,
    /// Memory the device reports as its total, B.
    pub hbm_capacity: Fact,
}
