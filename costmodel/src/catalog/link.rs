//! Link kinds of the fabric that carries KV transfers: GPU-to-GPU, PCIe, host memory and NICs.

use serde::{Deserialize, Serialize};

use blis_contracts::{Fact, FieldError};

/// Where a link kind sits in a node, which fixes which fabric field may name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkClass {
    /// A GPU's port into its node's GPU-to-GPU switch (NVLink/NVSwitch).
    GpuGpu,
    /// A GPU's host link (PCIe).
    Pcie,
    /// A node's DRAM, shared by every copy to or from host memory.
    HostMemory,
    /// A GPU's network port.
    Nic,
}

impl LinkClass {
    /// The name used in documents.
    pub fn as_str(self) -> &'static str {
        match self {
            LinkClass::GpuGpu => "gpu_gpu",
            LinkClass::Pcie => "pcie",
            LinkClass::HostMemory => "host_memory",
            LinkClass::Nic => "nic",
        }
    }
}

/// One link kind's facts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkKind {
    /// Catalog name, e.g. `pcie-gen5-x16`.
    pub name: String,
    /// Where it sits in a node.
    pub class: LinkClass,
    /// Bandwidth per direction (host memory: both directions together), B/s.
    pub bandwidth: Fact,
    /// Capacity, B (host memory only: what the CPU KV tier may use at most).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<Fact>,
}

impl LinkKind {
    /// Refuse facts that are not finite or lie outside what any link has (a host memory of
    /// 1 GiB to 32 TiB), and a capacity on a class that has none (or none on host memory).
    pub fn validate(&self) -> Result<(), FieldError> {
        const CAPACITY: (f64, f64) = (1_073_741_824.0, 35_184_372_088_832.0);
        super::check_fact("bandwidth", Some(&self.bandwidth), super::BANDWIDTH, "B/s", "links")?;
        super::check_fact("capacity", self.capacity.as_ref(), CAPACITY, "B", "links")?;
        match (self.class, &self.capacity) {
            (LinkClass::HostMemory, None) => {
                Err(FieldError::at("capacity", "a host_memory link kind needs its capacity in bytes"))
            }
            (class, Some(_)) if class != LinkClass::HostMemory => Err(FieldError::new(
                "capacity",
                class.as_str(),
                "only host_memory link kinds have a capacity",
            )),
            _ => Ok(()),
        }
    }
}
