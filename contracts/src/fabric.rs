//! The fabric section of a scenario (`cluster.fabric`): the nodes, their GPUs and the link kinds
//! between GPU, host memory, NIC and network that carry KV transfers.
//!
//! Link kinds are catalog names; the cost model's catalog checks them and supplies their
//! bandwidths. Absent, the section means one DGX-H100-like node (see [`FabricSpec::default`]).

use serde::{Deserialize, Serialize};

use crate::bounds::check_micros;
use crate::error::FieldError;

/// Most nodes one fabric holds.
pub const MAX_FABRIC_NODES: u32 = 4_096;

/// Most GPUs one node holds (an NVL72 rack is one NVLink domain of 72).
pub const MAX_GPUS_PER_NODE: u32 = 72;

/// The nodes and links that carry KV transfers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FabricSpec {
    /// How many nodes (default 1).
    #[serde(default = "one")]
    pub nodes: u32,
    /// GPUs in each node (default 8); engine instances take GPUs in pool order.
    #[serde(default = "eight")]
    pub gpus_per_node: u32,
    /// The GPU-to-GPU link kind within a node (default `nvlink-4`); `null` for none, so GPU to
    /// GPU copies go through host memory.
    #[serde(default = "nvlink")]
    pub gpu_gpu: Option<String>,
    /// Each GPU's host link kind (default `pcie-gen5-x16`).
    #[serde(default = "pcie")]
    pub gpu_host: String,
    /// Each node's host memory kind (default `dgx-h100-ddr5`), with its capacity.
    #[serde(default = "host_memory")]
    pub host_memory: String,
    /// Each GPU's network port kind (default `connectx-7-ndr400`).
    #[serde(default = "nic")]
    pub nic: String,
    /// Latency each hop of a path adds before the bytes flow, µs (default 1).
    #[serde(default = "one_us")]
    pub hop_latency_us: u64,
}

fn one() -> u32 {
    1
}
fn eight() -> u32 {
    8
}
fn nvlink() -> Option<String> {
    Some("nvlink-4".to_owned())
}
fn pcie() -> String {
    "pcie-gen5-x16".to_owned()
}
fn host_memory() -> String {
    "dgx-h100-ddr5".to_owned()
}
fn nic() -> String {
    "connectx-7-ndr400".to_owned()
}
fn one_us() -> u64 {
    1
}

impl Default for FabricSpec {
    /// One node of 8 GPUs on NVLink 4, each on PCIe Gen5 x16 to the DGX H100's 2 TB of DDR5,
    /// each with a 400 Gb/s NIC; 1 µs per hop (assumed).
    fn default() -> FabricSpec {
        FabricSpec {
            nodes: one(),
            gpus_per_node: eight(),
            gpu_gpu: nvlink(),
            gpu_host: pcie(),
            host_memory: host_memory(),
            nic: nic(),
            hop_latency_us: one_us(),
        }
    }
}

impl FabricSpec {
    /// Refuse counts out of bounds; link kinds are the catalog's to check.
    pub fn validate(&self, path: &str) -> Result<(), FieldError> {
        if !(1..=MAX_FABRIC_NODES).contains(&self.nodes) {
            return Err(FieldError::new(
                format!("{path}.nodes"),
                self.nodes,
                format!("must be between 1 and {MAX_FABRIC_NODES}"),
            ));
        }
        if !(1..=MAX_GPUS_PER_NODE).contains(&self.gpus_per_node) {
            return Err(FieldError::new(
                format!("{path}.gpus_per_node"),
                self.gpus_per_node,
                format!(
                    "must be between 1 and {MAX_GPUS_PER_NODE} (an NVL72 rack is the largest NVLink domain)"
                ),
            ));
        }
        check_micros(&format!("{path}.hop_latency_us"), self.hop_latency_us)
    }

    /// Every GPU of the fabric.
    pub fn gpus(&self) -> u32 {
        self.nodes * self.gpus_per_node
    }
}

/// One end of a KV transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Endpoint {
    /// GPUs `first .. first + count` (fabric-wide indices) of one engine instance; each moves
    /// its share of the bytes over its own links (tensor-parallel ranks hold their own heads).
    Gpus {
        /// The first GPU.
        first: u32,
        /// How many.
        count: u32,
    },
    /// The host memory of a node.
    Host {
        /// The node.
        node: u32,
    },
}
