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
    /// Refuse values pricing cannot use: non-positive or non-finite peaks, bandwidths and
    /// capacity.
    pub fn validate(&self) -> Result<(), blis_contracts::FieldError> {
        let facts = [
            ("bf16_dense_flops", Some(&self.bf16_dense_flops)),
            ("hbm_bandwidth", Some(&self.hbm_bandwidth)),
            ("hbm_capacity", Some(&self.hbm_capacity)),
            ("fp8_dense_flops", self.fp8_dense_flops.as_ref()),
            ("nvlink_bandwidth", self.nvlink_bandwidth.as_ref()),
            ("pcie_bandwidth", self.pcie_bandwidth.as_ref()),
        ];
        for (field, fact) in facts {
            if let Some(fact) = fact
                && !(fact.value.is_finite() && fact.value > 0.0)
            {
                return Err(blis_contracts::FieldError::new(
                    format!("{field}.value"),
                    fact.value,
                    "must be a positive number",
                ));
            }
        }
        Ok(())
    }
}
