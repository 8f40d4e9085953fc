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
//! recomputing from the first bad block. [`Connector`] is that interface; the offloading
//! connector ([`OffloadingScheduler`], over the CPU tier [`LruManager`]) is its one
//! implementation, and [`OffloadWorker`] is the worker-side bookkeeping that turns planned copies
//! into jobs and reports them back.

mod config;
mod lru;
mod offloading;
mod worker;

pub use config::{KvConnectorKind, KvTransferConfig, OffloadConfig, cpu_blocks};
pub use lru::{CpuEvent, LruManager};
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

/// The scheduler's connector.
#[derive(Clone, Debug)]
pub enum Connector {
    /// `OffloadingConnector`: a CPU tier below GPU memory.
    Offloading(OffloadingScheduler),
}

impl Connector {
    /// The connector's name, as vLLM's registry knows it.
    pub fn name(&self) -> &'static str {
        match self {
            Connector::Offloading(_) => "OffloadingConnector",
        }
    }

    /// See [`OffloadingScheduler::get_num_new_matched_tokens`].
    pub fn get_num_new_matched_tokens(
        &mut self,
        gpu_keys: &[BlockKey],
        num_tokens: u32,
        num_computed: u32,
    ) -> (Option<u32>, bool) {
        match self {
            Connector::Offloading(c) => c.get_num_new_matched_tokens(gpu_keys, num_tokens, num_computed),
        }
    }

    /// See [`OffloadingScheduler::update_state_after_alloc`].
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
        }
    }

    /// See [`OffloadingScheduler::build_connector_meta`].
    pub fn build_connector_meta<'a>(
        &mut self,
        scheduled: impl Iterator<Item = ScheduledRequest<'a>>,
        preempted: &[u64],
    ) -> OffloadMeta {
        match self {
            Connector::Offloading(c) => c.build_connector_meta(scheduled, preempted),
        }
    }

    /// See [`OffloadingScheduler::update_connector_output`].
    pub fn update_connector_output(&mut self, output: &ConnectorOutput) {
        match self {
            Connector::Offloading(c) => {
                c.update_connector_output(&output.finished_sending, &output.finished_recving)
            }
        }
    }

    /// Whether the request's blocks are held after it finished (see
    /// [`OffloadingScheduler::request_finished`]).
    pub fn request_finished(&mut self, key: u64) -> bool {
        match self {
            Connector::Offloading(c) => c.request_finished(key),
        }
    }

    /// The connector's KV events since the last call.
    pub fn take_events(&mut self) -> Vec<ConnectorEvent> {
        match self {
            Connector::Offloading(c) => c.take_events(),
        }
    }

    /// The offloading connector, if that is what this is.
    pub fn offloading(&self) -> Option<&OffloadingScheduler> {
        match self {
            Connector::Offloading(c) => Some(c),
        }
    }
}
