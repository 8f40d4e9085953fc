//! vLLM 0.15.1's KV-connector framework, scheduler side, and its offloading connector.
//!
//! The scheduler calls its connector at fixed points (`v1/core/sched/scheduler.py`):
//! `get_num_new_matched_tokens` when a waiting request is looked up (tokens the connector can
//! supply beyond the local prefix hit, whether they load asynchronously, or "ask again next
//! step"); `update_state_after_alloc` once the request's slots are allocated;
//! `build_connector_meta` at the end of every `schedule()` (the step's loads and stores);
//! `update_connector_output` when the worker reports transfers finished; `request_finished`
//! when a request ends (free its blocks now, or hold them until the worker reports its
//! transfers done); and `take_events` (the connector's KV events, after the GPU ones). A
//! request whose external tokens load asynchronously parks in `WAITING_FOR_REMOTE_KVS` holding
//! its blocks until the load is reported; loads reported with invalid blocks fall back to
//! recomputing from the first bad block. [`Connector`] is that interface, with two
//! implementations: the offloading connector ([`OffloadingScheduler`], over the CPU tier
//! [`LruManager`], with [`OffloadWorker`] the worker-side bookkeeping that turns planned copies
//! into jobs and reports them back) and NIXL's prefill/decode disaggregation ([`NixlScheduler`]).

mod config;
mod lru;
mod nixl;
mod offloading;
mod worker;

pub use config::{KvConnectorKind, KvTransferConfig, NixlConfig, OffloadConfig, cpu_blocks};
pub use lru::{CpuEvent, LruManager};
pub use nixl::{ABORT_REQUEST_TIMEOUT_US, KvTransferParams, NixlMeta, NixlRecv, NixlScheduler};
pub use offloading::{OffloadMeta, OffloadingScheduler, ScheduledRequest, TransferSpec};
pub use worker::{Direction, Job, OffloadWorker};

use crate::vllm::block_hash::BlockKey;
use crate::vllm::block_pool::BlockId;

/// What the workers report back after a step (vLLM's `KVConnectorOutput`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnectorOutput {
    /// Requests whose held blocks may now be freed (their sends or stores are done).
    pub finished_sending: Vec<u64>,
    /// Requests whose asynchronous loads are done.
    pub finished_recving: Vec<u64>,
    /// GPU blocks whose loaded contents are invalid.
    pub invalid_block_ids: Vec<BlockId>,
}

impl ConnectorOutput {
    /// Whether it reports nothing.
    pub fn is_empty(&self) -> bool {
        self.finished_sending.is_empty()
            && self.finished_recving.is_empty()
            && self.invalid_block_ids.is_empty()
    }
}

/// A KV event of the connector's tier (medium `CPU`): blocks stored or removed, by their hashes
/// in vLLM's event form, in the tier's order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectorEvent {
    /// `BlockStored` (true) or `BlockRemoved` (false).
    pub stored: bool,
    /// The blocks' hashes.
    pub hashes: Vec<u64>,
    /// Tokens per block on the tier.
    pub block_size: u32,
}

/// A step's connector metadata (vLLM's `kv_connector_metadata`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConnectorMeta {
    /// The offloading connector's loads and stores.
    Offload(OffloadMeta),
    /// NIXL's reads, holds and batch.
    Nixl(NixlMeta),
}

impl ConnectorMeta {
    /// The offloading connector's metadata, if that is what this is.
    pub fn offload(&self) -> Option<&OffloadMeta> {
        match self {
            ConnectorMeta::Offload(m) => Some(m),
            ConnectorMeta::Nixl(_) => None,
        }
    }

    /// NIXL's metadata, if that is what this is.
    pub fn nixl(&self) -> Option<&NixlMeta> {
        match self {
            ConnectorMeta::Nixl(m) => Some(m),
            ConnectorMeta::Offload(_) => None,
        }
    }
}

/// The scheduler's connector.
#[derive(Clone, Debug)]
pub enum Connector {
    /// `OffloadingConnector`: a CPU tier below GPU memory.
    Offloading(Box<OffloadingScheduler>),
    /// `NixlConnector`: KV read from a prefill instance by a decode instance.
    Nixl(NixlScheduler),
}

impl Connector {
    /// The connector's name, as vLLM's registry knows it.
    pub fn name(&self) -> &'static str {
        match self {
            Connector::Offloading(_) => "OffloadingConnector",
            Connector::Nixl(_) => "NixlConnector",
        }
    }

    /// `get_num_new_matched_tokens` for the request `key` (its full-block keys, tokens and
    /// prompt tokens) with `num_computed` tokens hit locally: the tokens the connector supplies
    /// (`None`: ask again next step) and whether they load asynchronously.
    pub fn get_num_new_matched_tokens(
        &mut self,
        key: u64,
        gpu_keys: &[BlockKey],
        num_tokens: u32,
        num_prompt_tokens: u32,
        num_computed: u32,
    ) -> (Option<u32>, bool) {
        match self {
            Connector::Offloading(c) => c.get_num_new_matched_tokens(gpu_keys, num_tokens, num_computed),
            Connector::Nixl(c) => {
                let (external, load_async) =
                    c.get_num_new_matched_tokens(key, num_prompt_tokens, num_computed);
                (Some(external), load_async)
            }
        }
    }

    /// `update_state_after_alloc`, with all the request's blocks (the first
    /// `num_hashed_blocks` of them its local hit).
    pub fn update_state_after_alloc(
        &mut self,
        key: u64,
        gpu_keys: &[BlockKey],
        blocks: &[BlockId],
        num_hashed_blocks: usize,
        num_external: u32,
    ) {
        match self {
            Connector::Offloading(c) => {
                c.update_state_after_alloc(key, gpu_keys, blocks, num_hashed_blocks, num_external)
            }
            Connector::Nixl(c) => c.update_state_after_alloc(key, blocks, num_hashed_blocks, num_external),
        }
    }

    /// `build_connector_meta`, with the step's scheduled requests and preemptions.
    pub fn build_connector_meta<'a>(
        &mut self,
        scheduled: impl Iterator<Item = ScheduledRequest<'a>>,
        preempted: &[u64],
    ) -> ConnectorMeta {
        match self {
            Connector::Offloading(c) => ConnectorMeta::Offload(c.build_connector_meta(scheduled, preempted)),
            Connector::Nixl(c) => ConnectorMeta::Nixl(c.build_connector_meta()),
        }
    }

    /// `update_connector_output` (NIXL's scheduler side keeps nothing of it).
    pub fn update_connector_output(&mut self, output: &ConnectorOutput) {
        match self {
            Connector::Offloading(c) => {
                c.update_connector_output(&output.finished_sending, &output.finished_recving)
            }
            Connector::Nixl(_) => {}
        }
    }

    /// `request_finished` at `now_us` for a request that ended (length-capped or not) holding
    /// `blocks`: whether its blocks are held until the worker reports its transfers done, and
    /// the `kv_transfer_params` to return with its final output.
    pub fn request_finished(
        &mut self,
        key: u64,
        length_capped: bool,
        blocks: &[BlockId],
        now_us: u64,
    ) -> (bool, Option<KvTransferParams>) {
        match self {
            Connector::Offloading(c) => (c.request_finished(key), None),
            Connector::Nixl(c) => c.request_finished(key, length_capped, blocks, now_us),
        }
    }

    /// The connector's KV events since the last call (NIXL emits none).
    pub fn take_events(&mut self) -> Vec<ConnectorEvent> {
        match self {
            Connector::Offloading(c) => c.take_events(),
            Connector::Nixl(_) => Vec::new(),
        }
    }

    /// The offloading connector, if that is what this is.
    pub fn offloading(&self) -> Option<&OffloadingScheduler> {
        match self {
            Connector::Offloading(c) => Some(&**c),
            Connector::Nixl(_) => None,
        }
    }

    /// The NIXL connector, if that is what this is.
    pub fn nixl(&self) -> Option<&NixlScheduler> {
        match self {
            Connector::Nixl(c) => Some(c),
            Connector::Offloading(_) => None,
        }
    }

    /// The NIXL connector, mutably, if that is what this is.
    pub fn nixl_mut(&mut self) -> Option<&mut NixlScheduler> {
        match self {
            Connector::Nixl(c) => Some(c),
            Connector::Offloading(_) => None,
        }
    }
}
