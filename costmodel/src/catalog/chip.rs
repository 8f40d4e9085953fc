//! Accelerators.

use serde::{Deserialize, Serialize};

use blis_contracts::Fact;

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

impl Chip {
    /// Refuse values pricing cannot use: peaks, bandwidths and capacity that are not finite or
    /// lie outside what any accelerator has (from well below the smallest of today's to about a
    /// hundred times past the largest), so that no catalog prices a step at nothing or at ages.
    pub fn validate(&self) -> Result<(), blis_contracts::FieldError> {
        const FLOPS: (f64, f64) = (1e11, 1e17);
        const CAPACITY: (f64, f64) = (1_073_741_824.0, 4_398_046_511_104.0);
        let facts = [
            ("bf16_dense_flops", Some(&self.bf16_dense_flops), FLOPS, "FLOP/s"),
            ("hbm_bandwidth", Some(&self.hbm_bandwidth), super::BANDWIDTH, "B/s"),
            ("hbm_capacity", Some(&self.hbm_capacity), CAPACITY, "B (1 GiB to 4 TiB)"),
            ("fp8_dense_flops", self.fp8_dense_flops.as_ref(), FLOPS, "FLOP/s"),
            ("nvlink_bandwidth", self.nvlink_bandwidth.as_ref(), super::BANDWIDTH, "B/s"),
            ("pcie_bandwidth", self.pcie_bandwidth.as_ref(), super::BANDWIDTH, "B/s"),
        ];
        for (field, fact, range, unit) in facts {
            super::check_fact(field, fact, range, unit, "accelerators")?;
        }
        Ok(())
    }
}
