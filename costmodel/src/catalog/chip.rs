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
    /// Dense FP8 tensor-core peak, FLOP/s (absent on chips without FP8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp8_dense_flops: Option<Fact>,
    /// GPU-to-GPU link bandwidth per GPU, one direction, B/s (absent without such a link).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlink_bandwidth: Option<Fact>,
    /// Host PCIe bandwidth per GPU, one direction, B/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_bandwidth: Option<Fact>,
}
