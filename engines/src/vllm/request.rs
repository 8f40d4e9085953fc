//! A request as the vLLM port holds it.

use std::sync::Arc;

use super::block_hash::{BlockHash, BlockKey, KeysAhead, extend_hashes, extend_keys, extend_keys_of_halves};
use super::block_pool::BlockId;
use super::scheduler::CohortRun;

/// A request handed to an engine: its prompt and the output it will generate.
///
/// Outputs are fixed in advance (the workload draws them), so the engine "samples" the next id of
/// `output_token_ids` at each step that produces a token and stops after the last one, as vLLM
/// does with `ignore_eos` and `max_tokens = output length`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EngineRequest {
    /// The caller's key for the request.
    pub key: u64,
    /// The request id, as vLLM's priority queue compares it (as a string) to break ties.
    pub name: Arc<str>,
    /// Priority under the priority policy (lower is served first).
    pub priority: i64,
    /// Prompt token ids.
    pub prompt_token_ids: Arc<[u32]>,
    /// The ids it will generate, in order; their count is `max_tokens`.
    pub output_token_ids: Arc<[u32]>,
    /// Arrival time, µs; vLLM's `arrival_time`, which orders equal priorities.
    pub arrival_us: u64,
}

/// Block keys in a 64-byte cache line.
const KEYS_PER_CACHE_LINE: usize = 64 / std::mem::size_of::<BlockKey>();

/// Where a request stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// In the waiting queue, never scheduled.
    Waiting,
    /// In the running list.
    Running,
    /// Preempted: back in the waiting queue with its computed tokens reset.
    Preempted,
    /// In the waiting queue, holding blocks its connector is loading (vLLM's
    /// `WAITING_FOR_REMOTE_KVS`).
    WaitingForRemoteKvs,
    /// Finished, its blocks held until its connector reports its transfers done.
    Finished,
}

/// A request inside the engine.
#[derive(Clone, Debug)]
pub(crate) struct Request {
    /// The request as handed over: its prompt, then every output id it will generate (read
    /// where they are; copied only for recorded KV events); the first `num_tokens` of them are
    /// vLLM's `all_token_ids`.
    pub(crate) spec: EngineRequest,
    num_tokens: u32,
    pub(crate) num_prompt_tokens: u32,
    pub(crate) max_tokens: u32,
    pub(crate) num_computed_tokens: u32,
    pub(crate) num_output_placeholders: u32,
    pub(crate) num_cached_tokens: Option<u32>,
    pub(crate) num_external_computed_tokens: i64,
    pub(crate) num_preemptions: u32,
    pub(crate) status: Status,
    /// Prefix-cache keys of its full blocks, when they are hashed here (empty when they were
    /// made ahead).
    hashed_keys: Vec<BlockKey>,
    /// The keys of every full block of its prompt and planned outputs, when they were made
    /// ahead: its first `keyed_ahead` are its full blocks' keys, read in place.
    keys_ahead: Option<Arc<[BlockKey]>>,
    /// How many of `keys_ahead` are its full blocks' keys so far.
    keyed_ahead: u32,
    /// SHA-256 hashes of its first blocks, computed as they are cached while KV events are
    /// recorded.
    pub(crate) block_hashes: Vec<BlockHash>,
    pub(crate) blocks: Vec<BlockId>,
    pub(crate) has_table: bool,
    pub(crate) num_cached_blocks: Option<usize>,
    /// The first of its cached blocks the pool has not been told of yet, when output blocks
    /// are cached late ([`super::kv_cache_manager::KvCacheManager::set_defer_output_blocks`]).
    pub(crate) deferred_from: Option<usize>,
    pub(crate) in_prefill: bool,
    pub(crate) token_times_us: Vec<u64>,
    /// Its run in the decode cohort, while the fields above do not count all of it.
    pub(crate) cohort_run: Option<CohortRun>,
    /// Its place in the running list: a number given as it is appended, so lists of running
    /// requests can be kept in running order.
    pub(crate) running_seq: u64,
}

impl Request {
    /// The request `spec`, its prompt's blocks keyed when caching in blocks of
    /// `hash_block_size`: copied from `ahead` when it was made for that size, else hashed.
    pub(crate) fn new(
        spec: &EngineRequest,
        hash_block_size: Option<usize>,
        ahead: Option<&KeysAhead>,
        scratch: &mut Vec<u8>,
    ) -> Request {
        let num_prompt_tokens = spec.prompt_token_ids.len() as u32;
        let mut hashed_keys = Vec::new();
        let mut keys_ahead = None;
        let mut keyed_ahead = 0;
        if let Some(block_size) = hash_block_size {
            let prompt = spec.prompt_token_ids.len();
            keys_ahead = ahead
                .and_then(|ahead| ahead.keys_for(block_size, prompt + spec.output_token_ids.len()))
                .cloned();
            match &keys_ahead {
                Some(_) => keyed_ahead = (prompt / block_size) as u32,
                None => {
                    hashed_keys.reserve((prompt + spec.output_token_ids.len()) / block_size);
                    extend_keys(&mut hashed_keys, &spec.prompt_token_ids, block_size, scratch);
                }
            }
            debug_assert!(
                keys_ahead.is_none() || {
                    let mut hashed = Vec::new();
                    extend_keys_of_halves(
                        &mut hashed,
                        &spec.prompt_token_ids,
                        &spec.output_token_ids,
                        block_size,
                        scratch,
                    );
                    *hashed == **keys_ahead.as_ref().expect("checked")
                },
                "keys made ahead are the keys of the request's tokens"
            );
        }
        Request {
            num_prompt_tokens,
            max_tokens: spec.output_token_ids.len() as u32,
            spec: spec.clone(),
            num_tokens: num_prompt_tokens,
            num_computed_tokens: 0,
            num_output_placeholders: 0,
            num_cached_tokens: None,
            num_external_computed_tokens: 0,
            num_preemptions: 0,
            status: Status::Waiting,
            hashed_keys,
            keys_ahead,
            keyed_ahead,
            block_hashes: Vec::new(),
            blocks: Vec::new(),
            has_table: false,
            num_cached_blocks: None,
            deferred_from: None,
            in_prefill: true,
            token_times_us: Vec::with_capacity(spec.output_token_ids.len()),
            cohort_run: None,
            running_seq: 0,
        }
    }

    /// Start fetching its full blocks' keys when they were made ahead, on another thread: they
    /// are first read when it is admitted, a step or more later. (Keys hashed here were just
    /// written.)
    pub(crate) fn prefetch_keys(&self) {
        if self.keys_ahead.is_none() {
            return;
        }
        for key in self.block_keys().iter().step_by(KEYS_PER_CACHE_LINE) {
            mem_prefetch::prefetch_read_data::<_, 3>(key);
        }
    }

    /// Prefix-cache keys of its full blocks.
    pub(crate) fn block_keys(&self) -> &[BlockKey] {
        match &self.keys_ahead {
            Some(keys) => &keys[..self.keyed_ahead as usize],
            None => &self.hashed_keys,
        }
    }

    /// Whether the manager tracks how many of its blocks are cached (vLLM's
    /// `num_cached_block` entry: set once it had hits or cached a block, until freed).
    pub(crate) fn num_cached_blocks_known(&self) -> bool {
        self.num_cached_blocks.is_some()
    }

    /// Prompt plus tokens generated so far (vLLM's `num_tokens`).
    pub(crate) fn num_tokens(&self) -> u32 {
        self.num_tokens
    }

    /// Its first `count` tokens (of vLLM's `all_token_ids`: the prompt and the tokens generated
    /// so far), copied into `into` (cleared first).
    pub(crate) fn copy_first_tokens<'a>(&self, count: usize, into: &'a mut Vec<u32>) -> &'a [u32] {
        let prompt = &self.spec.prompt_token_ids;
        into.clear();
        into.extend_from_slice(&prompt[..count.min(prompt.len())]);
        into.extend_from_slice(&self.spec.output_token_ids[..count.saturating_sub(prompt.len())]);
        into
    }

    /// Extend its SHA-256 block hashes over every full block of its first `num_tokens` tokens,
    /// copied into `tokens` (and left there).
    pub(crate) fn extend_hashes(
        &mut self,
        num_tokens: usize,
        block_size: usize,
        tokens: &mut Vec<u32>,
        scratch: &mut Vec<u8>,
    ) {
        self.copy_first_tokens(num_tokens, tokens);
        extend_hashes(&mut self.block_hashes, tokens, block_size, scratch);
    }

    /// The next output id, the one the next sampled token is.
    pub(crate) fn next_output(&self) -> u32 {
        self.spec.output_token_ids[(self.num_tokens - self.num_prompt_tokens) as usize]
    }

    /// Tokens generated so far.
    pub(crate) fn num_output_tokens(&self) -> u32 {
        self.num_tokens() - self.num_prompt_tokens
    }

    /// Count `tokens` more as computed by a step just scheduled; whether that step samples a
    /// token for it. Under asynchronous scheduling a token sampled but not yet returned counts
    /// as an output placeholder.
    #[inline]
    pub(crate) fn advance(&mut self, tokens: u32, asynchronous: bool) -> bool {
        self.num_computed_tokens += tokens;
        let samples = if asynchronous {
            let complete = self.num_computed_tokens == self.num_tokens() + self.num_output_placeholders;
            if complete {
                self.num_output_placeholders += 1;
            }
            complete
        } else {
            self.num_computed_tokens >= self.num_tokens()
        };
        if samples {
            self.prefetch_sampled_output();
        }
        samples
    }

    /// Start fetching the output id the step just scheduled samples, which its update reads:
    /// the ids were drawn on another thread, so the first read of each cache line of them is
    /// a miss, taken here while the step runs instead of when its update waits on it.
    fn prefetch_sampled_output(&self) {
        let sampled = (self.num_output_tokens() + self.num_output_placeholders).saturating_sub(1) as usize;
        if let Some(id) = self.spec.output_token_ids.get(sampled) {
            mem_prefetch::prefetch_read_data::<_, 3>(id);
        }
    }

    /// Count the next `count` planned output tokens as generated, keying the blocks they fill
    /// (as `count` calls of [`Request::append_output`]).
    pub(crate) fn append_outputs(
        &mut self,
        count: u32,
        hash_block_size: Option<usize>,
        scratch: &mut Vec<u8>,
    ) {
        let fills_a_block = hash_block_size.is_some_and(|block_size| {
            let block_size = block_size as u32;
            (self.num_tokens + count) / block_size > self.num_tokens / block_size
        });
        if fills_a_block {
            for _ in 0..count {
                self.append_output(hash_block_size, scratch);
            }
        } else {
            self.num_tokens += count;
        }
    }

    /// Count the next planned output token as generated; keys a block it fills when caching
    /// (`block_size` a power of two, as every vLLM block size).
    pub(crate) fn append_output(&mut self, hash_block_size: Option<usize>, scratch: &mut Vec<u8>) {
        self.num_tokens += 1;
        if let Some(block_size) = hash_block_size
            && self.num_tokens as usize & (block_size - 1) == 0
        {
            self.key_full_blocks(block_size, scratch);
        }
    }

    /// Key every full block of its tokens so far not keyed yet: as each fills, or late, when
    /// its output blocks are cached late and something reads their keys.
    pub(crate) fn key_full_blocks(&mut self, block_size: usize, scratch: &mut Vec<u8>) {
        match &self.keys_ahead {
            Some(_) => self.keyed_ahead = (self.num_tokens as usize / block_size) as u32,
            None => {
                let outputs = &self.spec.output_token_ids[..self.num_output_tokens() as usize];
                extend_keys_of_halves(
                    &mut self.hashed_keys,
                    &self.spec.prompt_token_ids,
                    outputs,
                    block_size,
                    scratch,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_made_as_outputs_are_counted_are_the_keys_of_all_the_tokens_at_once() {
        // Prompts ending mid-block (a block then spans the prompt and the first outputs), on a
        // block boundary, and shorter than a block; several block sizes.
        for block_size in [8usize, 16, 32] {
            for prompt_len in [1u32, 20, 32, 33] {
                let prompt: Vec<u32> = (0..prompt_len).collect();
                let output: Vec<u32> = (100..150).collect();
                let spec = EngineRequest {
                    key: 1,
                    name: Arc::from("r1"),
                    priority: 0,
                    prompt_token_ids: prompt.clone().into(),
                    output_token_ids: output.clone().into(),
                    arrival_us: 0,
                };
                let mut scratch = Vec::new();
                // Keyed by hashing, and by copying keys made ahead for this block size; keys made
                // for another size are not used.
                let ahead = KeysAhead::of(&prompt, &output, block_size as u32);
                let elsewhere = KeysAhead::of(&prompt, &output, 2 * block_size as u32);
                for (made, copied) in [(None, false), (Some(&ahead), true), (Some(&elsewhere), false)] {
                    let mut request = Request::new(&spec, Some(block_size), made, &mut scratch);
                    let all: Vec<u32> = prompt.iter().chain(&output).copied().collect();
                    let case = format!("block size {block_size}, prompt {prompt_len}, keys copied {copied}");
                    assert_eq!(request.keys_ahead.is_some(), copied, "{case}");
                    assert_eq!(request.block_keys().len(), prompt.len() / block_size, "{case}");
                    for generated in 1..=output.len() {
                        assert_eq!(request.next_output(), output[generated - 1], "{case}");
                        request.append_output(Some(block_size), &mut scratch);
                        let mut expected = Vec::new();
                        extend_keys(
                            &mut expected,
                            &all[..prompt.len() + generated],
                            block_size,
                            &mut scratch,
                        );
                        assert_eq!(request.block_keys(), expected, "{case}, after {generated} outputs");
                    }
                    let mut tokens = Vec::new();
                    assert_eq!(request.copy_first_tokens(all.len(), &mut tokens), &all[..], "{case}");
                    assert_eq!(request.copy_first_tokens(25, &mut tokens), &all[..25], "{case}");
                }
            }
        }
    }

    #[test]
    fn keys_made_ahead_for_other_tokens_are_not_used() {
        let spec = |output: u32| EngineRequest {
            key: 1,
            name: Arc::from("r1"),
            priority: 0,
            prompt_token_ids: (0..40).collect::<Vec<u32>>().into(),
            output_token_ids: (100..100 + output).collect::<Vec<u32>>().into(),
            arrival_us: 0,
        };
        // Made for a call whose output was then cut to one token (a prefill leg): another
        // number of blocks.
        let ahead = KeysAhead::of(&spec(30).prompt_token_ids, &spec(30).output_token_ids, 16);
        let request = Request::new(&spec(1), Some(16), Some(&ahead), &mut Vec::new());
        assert!(request.keys_ahead.is_none());
        assert_eq!(request.block_keys()[..], ahead.keys_for(16, 70).unwrap()[..2]);
        // Not caching: nothing is keyed.
        let request = Request::new(&spec(30), None, Some(&ahead), &mut Vec::new());
        assert!(request.keys_ahead.is_none() && request.block_keys().is_empty());
    }
}
