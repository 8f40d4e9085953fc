//! vLLM 0.15.1's `NixlConnector`, scheduler side (`NixlConnectorScheduler`,
//! `distributed/kv_transfer/kv_connector/v1/nixl_connector.py`): prefill/decode disaggregation.
//!
//! A prefill instance (P) runs a request carrying `do_remote_decode`; when it ends length-capped
//! (its one output token) the connector keeps its blocks and returns the `kv_transfer_params` a
//! decode instance (D) needs to read them: P's block ids, engine id and request id. D's request
//! carries those params with `do_remote_prefill`: its whole uncomputed prompt is external and
//! loads asynchronously, so it parks holding fresh blocks; the step's metadata asks the worker to
//! read P's last blocks into D's unhashed ones, and the flag is cleared so a preempted D request
//! never reads twice. P frees its blocks when D's worker notifies that the read is done, or when
//! `VLLM_NIXL_ABORT_REQUEST_TIMEOUT` (480 s) has passed at a step of P. A D request aborted
//! before it was ever admitted still notifies P, so P frees at once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::vllm::block_pool::BlockId;

/// `VLLM_NIXL_ABORT_REQUEST_TIMEOUT`'s default, µs: how long P holds blocks nobody read.
pub const ABORT_REQUEST_TIMEOUT_US: u64 = 480_000_000;

/// A request's `kv_transfer_params` as NIXL (connector version 2) reads and returns them.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KvTransferParams {
    /// D side: the prompt's KV is on a remote P, to be read.
    pub do_remote_prefill: bool,
    /// P side: a D instance will read this request's KV.
    pub do_remote_decode: bool,
    /// P's block ids for the request (all of them), which D reads from.
    pub remote_block_ids: Vec<u32>,
    /// P's `engine_id`.
    pub remote_engine_id: Option<Arc<str>>,
    /// P's request (vLLM's `remote_request_id`), by key.
    pub remote_request_key: Option<u64>,
    /// Whether `remote_host` and `remote_port` are present (P's side channel).
    pub remote_address: bool,
    /// P's tensor-parallel size.
    pub tp_size: u32,
}

impl KvTransferParams {
    /// What the decode sidecar sends with the prefill leg: `{"do_remote_decode": true}`.
    pub fn prefill_leg() -> KvTransferParams {
        KvTransferParams { do_remote_decode: true, tp_size: 1, ..KvTransferParams::default() }
    }

    /// Whether D can read with these: block ids and all four remote keys present.
    fn complete(&self) -> bool {
        !self.remote_block_ids.is_empty()
            && self.remote_engine_id.is_some()
            && self.remote_request_key.is_some()
            && self.remote_address
    }
}

/// One read D's worker is to start: into its `local_blocks`, from the last as many of P's blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NixlRecv {
    /// D's request.
    pub key: u64,
    /// D's blocks to fill (empty: nothing to read, only notify P that it may free).
    pub local_blocks: Vec<BlockId>,
    /// P's blocks for the request, all of them.
    pub remote_block_ids: Vec<u32>,
    /// P's engine id.
    pub remote_engine_id: Arc<str>,
    /// P's request key.
    pub remote_request_key: u64,
    /// P's tensor-parallel size.
    pub tp_size: u32,
}

/// A step's `NixlConnectorMetadata`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NixlMeta {
    /// Reads to start, in the order they were queued.
    pub reqs_to_recv: Vec<NixlRecv>,
    /// P requests now held for a reader, with the time their hold expires, µs.
    pub reqs_to_send: Vec<(u64, u64)>,
    /// P requests admitted this step that a D will read.
    pub reqs_in_batch: Vec<u64>,
    /// P requests that ended without params (aborted or stopped): nothing will read them.
    pub reqs_not_processed: Vec<u64>,
}

/// The NIXL connector's scheduler-side state.
#[derive(Clone, Debug)]
pub struct NixlScheduler {
    engine_id: Arc<str>,
    tp_size: u32,
    params: BTreeMap<u64, KvTransferParams>,
    reqs_need_recv: Vec<NixlRecv>,
    reqs_need_send: Vec<(u64, u64)>,
    reqs_in_batch: BTreeSet<u64>,
    reqs_not_processed: BTreeSet<u64>,
}

impl NixlScheduler {
    /// The connector of an instance with `engine_id` and tensor-parallel size `tp_size`.
    pub fn new(engine_id: Arc<str>, tp_size: u32) -> NixlScheduler {
        NixlScheduler {
            engine_id,
            tp_size,
            params: BTreeMap::new(),
            reqs_need_recv: Vec::new(),
            reqs_need_send: Vec::new(),
            reqs_in_batch: BTreeSet::new(),
            reqs_not_processed: BTreeSet::new(),
        }
    }

    /// The instance's engine id.
    pub fn engine_id(&self) -> &Arc<str> {
        &self.engine_id
    }

    /// Rename the instance (before its first request).
    pub fn set_engine_id(&mut self, engine_id: Arc<str>) {
        self.engine_id = engine_id;
    }

    /// A request arrived with `params` (vLLM reads them from `sampling_params.extra_args`).
    pub fn register(&mut self, key: u64, params: KvTransferParams) {
        self.params.insert(key, params);
    }

    /// `get_num_new_matched_tokens`: a D request still to read gets its whole uncomputed prompt
    /// as external tokens, loaded asynchronously; anything else gets none.
    pub fn get_num_new_matched_tokens(
        &self,
        key: u64,
        num_prompt_tokens: u32,
        num_computed: u32,
    ) -> (u32, bool) {
        match self.params.get(&key) {
            Some(p) if p.do_remote_prefill && num_prompt_tokens > num_computed => {
                (num_prompt_tokens - num_computed, true)
            }
            _ => (0, false),
        }
    }

    /// `update_state_after_alloc`: a P request joins the step's batch; a D request with
    /// complete params queues its read into its unhashed blocks (those after the local hit),
    /// and with incomplete ones stays parked unread, as upstream does. The read flag is cleared.
    pub fn update_state_after_alloc(
        &mut self,
        key: u64,
        blocks: &[BlockId],
        num_hashed_blocks: usize,
        num_external: u32,
    ) {
        let Some(params) = self.params.get_mut(&key) else { return };
        if params.do_remote_decode {
            self.reqs_in_batch.insert(key);
        }
        if params.do_remote_prefill {
            if params.complete() {
                let local_blocks =
                    if num_external > 0 { blocks[num_hashed_blocks..].to_vec() } else { Vec::new() };
                queue_recv(&mut self.reqs_need_recv, recv_of(key, params, local_blocks));
            }
            params.do_remote_prefill = false;
        }
    }

    /// `build_connector_meta`: the step's reads, holds, batch and unprocessed requests, handed
    /// over and reset.
    pub fn build_connector_meta(&mut self) -> NixlMeta {
        NixlMeta {
            reqs_to_recv: std::mem::take(&mut self.reqs_need_recv),
            reqs_to_send: std::mem::take(&mut self.reqs_need_send),
            reqs_in_batch: std::mem::take(&mut self.reqs_in_batch).into_iter().collect(),
            reqs_not_processed: std::mem::take(&mut self.reqs_not_processed).into_iter().collect(),
        }
    }

    /// `request_finished` at `now_us`, with the request's `blocks`: whether its blocks are held
    /// for a reader, and the params to return (a P request that ended length-capped holding
    /// blocks). A D request that never read notifies P through an empty read.
    pub fn request_finished(
        &mut self,
        key: u64,
        length_capped: bool,
        blocks: &[BlockId],
        now_us: u64,
    ) -> (bool, Option<KvTransferParams>) {
        let Some(params) = self.params.remove(&key) else { return (false, None) };
        if params.do_remote_prefill {
            if params.complete() {
                queue_recv(&mut self.reqs_need_recv, recv_of(key, &params, Vec::new()));
            }
            return (false, None);
        }
        if !params.do_remote_decode {
            return (false, None);
        }
        if !length_capped {
            self.reqs_not_processed.insert(key);
            return (false, None);
        }
        let delay = !blocks.is_empty();
        if delay {
            self.reqs_need_send.push((key, now_us.saturating_add(ABORT_REQUEST_TIMEOUT_US)));
        }
        let returned = KvTransferParams {
            do_remote_prefill: true,
            do_remote_decode: false,
            remote_block_ids: blocks.to_vec(),
            remote_engine_id: Some(self.engine_id.clone()),
            remote_request_key: Some(key),
            remote_address: true,
            tp_size: self.tp_size,
        };
        (delay, Some(returned))
    }

    /// Requests whose params it still holds (not yet finished).
    pub fn tracked(&self) -> usize {
        self.params.len()
    }
}

fn recv_of(key: u64, params: &KvTransferParams, local_blocks: Vec<BlockId>) -> NixlRecv {
    NixlRecv {
        key,
        local_blocks,
        remote_block_ids: params.remote_block_ids.clone(),
        remote_engine_id: params.remote_engine_id.clone().unwrap_or_else(|| Arc::from("")),
        remote_request_key: params.remote_request_key.unwrap_or(key),
        tp_size: params.tp_size,
    }
}

/// `_reqs_need_recv[key] = …`: a dict, so a second entry for a key replaces the first in place.
fn queue_recv(queue: &mut Vec<NixlRecv>, recv: NixlRecv) {
    match queue.iter_mut().find(|r| r.key == recv.key) {
        Some(slot) => *slot = recv,
        None => queue.push(recv),
    }
}
