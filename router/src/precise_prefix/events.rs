//! vLLM's KV events as they reach the router: one batch per engine step.
//!
//! vLLM 0.15.1 (`vllm/distributed/kv_events.py`): after each step the engine core takes every
//! event its block pool recorded (then any connector's) and, if there are any, publishes one
//! `KVEventBatch(ts, events)`. The events are `BlockStored(block_hashes, parent_block_hash,
//! token_ids, block_size, lora_id, medium, lora_name)`, `BlockRemoved(block_hashes, medium)` and
//! `AllBlocksCleared()`. Hashes are the 64-bit form vLLM publishes by default
//! (`VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1`, the digest's last 8 bytes), as llm-d's adapter reads
//! them (`engineadapter/common.go::getHashAsUint64`). The fields vLLM adds for hybrid models and
//! multimodal inputs (`extra_keys`, `group_idx`, `kv_cache_spec_*`) are absent: the simulated
//! engines emit none. A batch keeps every event's hashes and tokens in two shared buffers, so a
//! batch is three allocations however many events it holds.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// A run of a batch's shared buffer: `start..start + len`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Span {
    /// First index.
    pub start: u32,
    /// How many.
    pub len: u32,
}

impl Span {
    fn of<T>(buffer: &[T], start: usize) -> Span {
        Span { start: start as u32, len: (buffer.len() - start) as u32 }
    }

    fn range(self) -> std::ops::Range<usize> {
        self.start as usize..(self.start + self.len) as usize
    }
}

/// One KV event; its hashes and tokens live in the batch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum KvEvent {
    /// Blocks were cached.
    BlockStored {
        /// `block_hashes`: the engine's hashes of the blocks, in chain order.
        hashes: Span,
        /// `parent_block_hash`: the engine's hash of the block before the first, if any.
        parent: Option<u64>,
        /// `token_ids`: the blocks' tokens, concatenated.
        tokens: Span,
        /// `block_size`: the engine's block size, tokens.
        block_size: u32,
        /// `lora_id` (deprecated upstream; none without LoRA).
        lora_id: Option<i64>,
        /// `medium`: `GPU` for the engine's own cache, e.g. `CPU` for an offloading connector.
        medium: Option<Arc<str>>,
        /// `lora_name`: the adapter the blocks belong to, if any.
        lora_name: Option<Arc<str>>,
    },
    /// Cached blocks were evicted.
    BlockRemoved {
        /// `block_hashes`.
        hashes: Span,
        /// `medium`.
        medium: Option<Arc<str>>,
    },
    /// The whole prefix cache was reset.
    AllBlocksCleared,
}

/// One `KVEventBatch`: the events of one engine step, in emission order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KvEventBatch {
    /// `ts`: when the engine published it, µs of simulated time.
    pub ts_us: u64,
    /// The events.
    pub events: Vec<KvEvent>,
    /// Every event's block hashes.
    pub hashes: Vec<u64>,
    /// Every `BlockStored`'s token ids.
    pub tokens: Vec<u32>,
}

impl KvEventBatch {
    /// An empty batch stamped `ts_us`.
    pub fn new(ts_us: u64) -> KvEventBatch {
        KvEventBatch { ts_us, ..KvEventBatch::default() }
    }

    /// An empty batch stamped `ts_us` with room for `events` events, `hashes` hashes and
    /// `tokens` tokens, so filling it allocates three times at most.
    pub fn with_capacity(ts_us: u64, events: usize, hashes: usize, tokens: usize) -> KvEventBatch {
        KvEventBatch {
            ts_us,
            events: Vec::with_capacity(events),
            hashes: Vec::with_capacity(hashes),
            tokens: Vec::with_capacity(tokens),
        }
    }

    /// Append a `BlockStored` of `hashes` (with their `tokens`) on `medium`.
    pub fn push_stored(
        &mut self,
        hashes: &[u64],
        parent: Option<u64>,
        tokens: &[u32],
        block_size: u32,
        medium: Option<Arc<str>>,
    ) {
        let (h, t) = (self.hashes.len(), self.tokens.len());
        self.hashes.extend_from_slice(hashes);
        self.tokens.extend_from_slice(tokens);
        self.events.push(KvEvent::BlockStored {
            hashes: Span::of(&self.hashes, h),
            parent,
            tokens: Span::of(&self.tokens, t),
            block_size,
            lora_id: None,
            medium,
            lora_name: None,
        });
    }

    /// Append a `BlockRemoved` of `hashes` on `medium`.
    pub fn push_removed(&mut self, hashes: &[u64], medium: Option<Arc<str>>) {
        let h = self.hashes.len();
        self.hashes.extend_from_slice(hashes);
        self.events.push(KvEvent::BlockRemoved { hashes: Span::of(&self.hashes, h), medium });
    }

    /// Append an `AllBlocksCleared`.
    pub fn push_cleared(&mut self) {
        self.events.push(KvEvent::AllBlocksCleared);
    }

    /// The hashes a span names.
    pub fn hashes_of(&self, span: Span) -> &[u64] {
        &self.hashes[span.range()]
    }

    /// The tokens a span names.
    pub fn tokens_of(&self, span: Span) -> &[u32] {
        &self.tokens[span.range()]
    }

    /// Whether it holds no event (vLLM publishes no empty batch).
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }
}
