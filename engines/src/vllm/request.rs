//! A request as the vLLM port holds it.

use std::sync::Arc;

use super::block_pool::BlockId;

/// A request handed to an engine: its prompt and the output it will generate.
///
/// Outputs are fixed in advance (the workload draws them), so the engine "samples" the next id of
/// `output_token_ids` at each step that produces a token and stops after the last one, as vLLM
/// does with `ignore_eos` and `max_tokens = output length`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EngineRequest {
    /// The caller's key for the request.
    pub key: u64,
    /// Prompt token ids.
    pub prompt_token_ids: Arc<[u32]>,
    /// The ids it will generate, in order; their count is `max_tokens`.
    pub output_token_ids: Arc<[u32]>,
    /// When it reached the engine, µs.
    pub arrival_us: u64,
}

/// Where a request stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    /// In the waiting queue, never scheduled.
    Waiting,
    /// In the running list.
    Running,
    /// Preempted: back in the waiting queue with its computed tokens reset.
    Preempted,
}

/// A request inside the engine.
#[derive(Clone, Debug)]
pub(crate) struct Request {
    pub(crate) key: u64,
    pub(crate) num_prompt_tokens: u32,
    pub(crate) max_tokens: u32,
    pub(crate) num_output_tokens: u32,
    pub(crate) num_computed_tokens: u32,
    pub(crate) blocks: Vec<BlockId>,
    pub(crate) status: Status,
    pub(crate) started: bool,
    pub(crate) in_prefill: bool,
    pub(crate) finished: bool,
    pub(crate) num_preemptions: u32,
    pub(crate) token_times_us: Vec<u64>,
}

impl Request {
    pub(crate) fn new(request: &EngineRequest) -> Request {
        Request {
            key: request.key,
            num_prompt_tokens: request.prompt_token_ids.len() as u32,
            max_tokens: request.output_token_ids.len() as u32,
            num_output_tokens: 0,
            num_computed_tokens: 0,
            blocks: Vec::new(),
            status: Status::Waiting,
            started: false,
            in_prefill: true,
            finished: false,
            num_preemptions: 0,
            token_times_us: Vec::with_capacity(request.output_token_ids.len()),
        }
    }

    /// Prompt plus tokens generated so far.
    pub(crate) fn num_tokens(&self) -> u32 {
        self.num_prompt_tokens + self.num_output_tokens
    }
}
