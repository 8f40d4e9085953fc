//! The SGLang scheduler configuration the decision and property tests share: the release's
//! `new_token_ratio` defaults (`SGLANG_INIT_NEW_TOKEN_RATIO` 0.7 and
//! `SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR` 0.14, computed as upstream computes them), a request row
//! per running slot, `max_req_len` one below the pool, EOS token 2.

use blis_engines::sglang::radix_cache::EvictionPolicy;
use blis_engines::sglang::scheduler::{SchedulePolicy, SchedulerConfig};

/// What a test varies; everything else at the release's values.
pub struct Knobs {
    pub page_size: u32,
    pub pool_tokens: usize,
    pub chunked_prefill_size: Option<usize>,
    pub max_running: usize,
    pub policy: SchedulePolicy,
    pub decay_steps: f64,
    pub overlap: bool,
    pub mixed_chunk: bool,
}

pub fn config(k: Knobs) -> SchedulerConfig {
    SchedulerConfig {
        page_size: k.page_size,
        pool_tokens: k.pool_tokens,
        chunked_prefill_size: k.chunked_prefill_size,
        max_prefill_tokens: 16_384,
        max_running: k.max_running,
        req_pool_size: k.max_running,
        max_req_len: k.pool_tokens - 1,
        policy: k.policy,
        ratio_init: 0.7,
        ratio_min: 0.7 * 0.14,
        ratio_decay: (0.7 - 0.7 * 0.14) / k.decay_steps,
        eos_token: 2,
        overlap: k.overlap,
        mixed_chunk: k.mixed_chunk,
        eviction: EvictionPolicy::Lru,
    }
}
