//! The fabric's links, resolved from a scenario's `cluster.fabric` and the catalog, and the path
//! each part of a transfer takes.
//!
//! Links, each one direction (host memory: both together): per GPU its PCIe up and down, its NIC
//! out and in, and (with a GPU-to-GPU kind) its switch port out and in; per node its DRAM.
//! Paths: GPU → host memory of its node is PCIe up then DRAM; host → GPU is DRAM then PCIe
//! down; GPU → GPU within a node is switch out then switch in (or through host memory without
//! a switch); across nodes, PCIe up, NIC out, the peer's NIC in and PCIe down (GPUDirect RDMA,
//! rail-optimised: a GPU's NIC reaches the same-index GPU's NIC of every node).

use blis_contracts::{Endpoint, FabricSpec, FieldError};
use blis_costmodel::{Catalog, LinkClass};

use super::flows::LinkId;

/// One part of a transfer: the links it crosses and its bytes.
pub type Part = (Vec<LinkId>, u64);

/// The resolved fabric: its links (name and capacity) and how GPUs sit in nodes.
#[derive(Clone, Debug)]
pub struct Topology {
    gpus_per_node: u32,
    gpus: u32,
    nodes: u32,
    has_switch: bool,
    names: Vec<String>,
    capacity_bytes_per_us: Vec<f64>,
    host_memory_bytes: f64,
    hop_latency_us: u64,
}

/// Per-GPU link slots, in index order within a GPU's block.
const PCIE_UP: usize = 0;
const PCIE_DOWN: usize = 1;
const NIC_OUT: usize = 2;
const NIC_IN: usize = 3;
const SWITCH_OUT: usize = 4;
const SWITCH_IN: usize = 5;

impl Topology {
    /// Resolve `spec` (found at `path`) against the catalog: every link kind must be there, of
    /// the class its field needs.
    pub fn resolve(spec: &FabricSpec, catalog: &Catalog, path: &str) -> Result<Topology, FieldError> {
        spec.validate(path)?;
        let pcie = catalog.link(&spec.gpu_host, LinkClass::Pcie, &format!("{path}.gpu_host"))?;
        let dram = catalog.link(&spec.host_memory, LinkClass::HostMemory, &format!("{path}.host_memory"))?;
        let nic = catalog.link(&spec.nic, LinkClass::Nic, &format!("{path}.nic"))?;
        let switch = match &spec.gpu_gpu {
            Some(name) => Some(catalog.link(name, LinkClass::GpuGpu, &format!("{path}.gpu_gpu"))?),
            None => None,
        };
        let per_us = |bytes_per_s: f64| bytes_per_s / 1e6;
        let gpus = spec.gpus();
        let per_gpu = if switch.is_some() { 6 } else { 4 };
        let mut names = Vec::new();
        let mut capacity = Vec::new();
        for g in 0..gpus {
            let mut add = |what: &str, bw: f64| {
                names.push(format!("gpu{g}.{what}"));
                capacity.push(per_us(bw));
            };
            add("pcie-up", pcie.bandwidth.value);
            add("pcie-down", pcie.bandwidth.value);
            add("nic-out", nic.bandwidth.value);
            add("nic-in", nic.bandwidth.value);
            if let Some(switch) = switch {
                add("switch-out", switch.bandwidth.value);
                add("switch-in", switch.bandwidth.value);
            }
            debug_assert_eq!(names.len(), (g as usize + 1) * per_gpu);
        }
        for n in 0..spec.nodes {
            names.push(format!("node{n}.dram"));
            capacity.push(per_us(dram.bandwidth.value));
        }
        Ok(Topology {
            gpus_per_node: spec.gpus_per_node,
            gpus,
            nodes: spec.nodes,
            has_switch: switch.is_some(),
            names,
            capacity_bytes_per_us: capacity,
            host_memory_bytes: dram.capacity.as_ref().map_or(0.0, |c| c.value),
            hop_latency_us: spec.hop_latency_us,
        })
    }

    /// Every link's capacity, bytes per µs, by link id.
    pub fn capacities(&self) -> Vec<f64> {
        self.capacity_bytes_per_us.clone()
    }

    /// A link's name, e.g. `gpu3.pcie-up`.
    pub fn link_name(&self, link: LinkId) -> &str {
        &self.names[link]
    }

    /// Every GPU of the fabric.
    pub fn gpus(&self) -> u32 {
        self.gpus
    }

    /// Each node's host memory, B (the catalog's capacity of its host memory kind).
    pub fn host_memory_bytes(&self) -> f64 {
        self.host_memory_bytes
    }

    /// The node a GPU sits in.
    pub fn node_of(&self, gpu: u32) -> u32 {
        gpu / self.gpus_per_node
    }

    fn gpu_link(&self, gpu: u32, slot: usize) -> LinkId {
        let per_gpu = if self.has_switch { 6 } else { 4 };
        gpu as usize * per_gpu + slot
    }

    fn dram(&self, node: u32) -> LinkId {
        let per_gpu = if self.has_switch { 6 } else { 4 };
        self.gpus as usize * per_gpu + node as usize
    }

    /// The GPU of `node` on the same rail as `gpu`.
    fn rail_peer(&self, gpu: u32, node: u32) -> u32 {
        node * self.gpus_per_node + gpu % self.gpus_per_node
    }

    /// The path of one part from a single place to another; `None` when both are the same.
    fn path(&self, from: Place, to: Place) -> Option<Vec<LinkId>> {
        use Place::{Gpu, Host};
        let path = match (from, to) {
            (Gpu(a), Gpu(b)) if a == b => return None,
            (Host(a), Host(b)) if a == b => return None,
            (Gpu(g), Host(n)) if self.node_of(g) == n => vec![self.gpu_link(g, PCIE_UP), self.dram(n)],
            (Gpu(g), Host(n)) => {
                let peer = self.rail_peer(g, n);
                vec![
                    self.gpu_link(g, PCIE_UP),
                    self.gpu_link(g, NIC_OUT),
                    self.gpu_link(peer, NIC_IN),
                    self.dram(n),
                ]
            }
            (Host(n), Gpu(g)) if self.node_of(g) == n => vec![self.dram(n), self.gpu_link(g, PCIE_DOWN)],
            (Host(n), Gpu(g)) => {
                let peer = self.rail_peer(g, n);
                vec![
                    self.dram(n),
                    self.gpu_link(peer, NIC_OUT),
                    self.gpu_link(g, NIC_IN),
                    self.gpu_link(g, PCIE_DOWN),
                ]
            }
            (Gpu(a), Gpu(b)) if self.node_of(a) == self.node_of(b) && self.has_switch => {
                vec![self.gpu_link(a, SWITCH_OUT), self.gpu_link(b, SWITCH_IN)]
            }
            (Gpu(a), Gpu(b)) if self.node_of(a) == self.node_of(b) => {
                vec![self.gpu_link(a, PCIE_UP), self.dram(self.node_of(a)), self.gpu_link(b, PCIE_DOWN)]
            }
            (Gpu(a), Gpu(b)) => vec![
                self.gpu_link(a, PCIE_UP),
                self.gpu_link(a, NIC_OUT),
                self.gpu_link(b, NIC_IN),
                self.gpu_link(b, PCIE_DOWN),
            ],
            (Host(a), Host(b)) => {
                let out = a * self.gpus_per_node;
                let into = self.rail_peer(out, b);
                vec![self.dram(a), self.gpu_link(out, NIC_OUT), self.gpu_link(into, NIC_IN), self.dram(b)]
            }
        };
        Some(path)
    }

    /// The parts of a transfer of `bytes` from `from` to `to`, each (path, bytes), and its
    /// latency (hops of its longest path × the per-hop latency). A multi-GPU end splits the bytes
    /// evenly over its GPUs (the first ones take the remainder), pairing ranks in order.
    pub fn parts(&self, from: Endpoint, to: Endpoint, bytes: u64) -> Result<(Vec<Part>, u64), String> {
        let a = self.places(from)?;
        let b = self.places(to)?;
        let n = a.len().max(b.len());
        let mut parts = Vec::with_capacity(n);
        for i in 0..n {
            let share = bytes / n as u64 + u64::from((i as u64) < bytes % n as u64);
            let path = self
                .path(a[i % a.len()], b[i % b.len()])
                .ok_or_else(|| format!("a transfer from {from:?} to {to:?} stays in one place"))?;
            parts.push((path, share));
        }
        let hops = parts.iter().map(|(p, _)| p.len() as u64).max().unwrap_or(0);
        Ok((parts, hops * self.hop_latency_us))
    }

    fn places(&self, end: Endpoint) -> Result<Vec<Place>, String> {
        match end {
            Endpoint::Gpus { first, count }
                if count > 0 && first.checked_add(count).is_some_and(|e| e <= self.gpus) =>
            {
                Ok((first..first + count).map(Place::Gpu).collect())
            }
            Endpoint::Host { node } if node < self.nodes => Ok(vec![Place::Host(node)]),
            other => Err(format!(
                "{other:?} is not in a fabric of {} nodes × {} GPUs",
                self.nodes, self.gpus_per_node
            )),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    Gpu(u32),
    Host(u32),
}
