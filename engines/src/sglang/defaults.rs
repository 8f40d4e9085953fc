//! The server arguments SGLang 0.5.23 derives from the GPU when they are unset, and the CUDA
//! graphs it captures and replays.
//!
//! Ported from `arg_groups/memory_hook.py` (`handle_gpu_memory_settings`, `reserve_for_graph_mb`),
//! `arg_groups/cuda_graph_hook.py` (`generate_decode_cuda_graph_batch_sizes`,
//! `generate_prefill_cuda_graph_batch_sizes`), `mem_cache/kv_cache_configurator.py`
//! (`resolve_max_num_reqs`) and the graph runners' replay rules, for a plain model on CUDA
//! without prefill/decode disaggregation, DP attention or DeepEP.

/// What the GPU's memory decides when the user leaves them unset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuDefaults {
    /// `chunked_prefill_size`.
    pub chunked_prefill_size: usize,
    /// The decode CUDA graphs' largest batch (`cuda_graph_config.decode.max_bs`).
    pub decode_max_bs: usize,
}

/// `handle_gpu_memory_settings`' table: by the GPU's memory in MiB (`None` when unknown) and the
/// tensor-parallel degree; an explicit `max_running_requests` below the default `max_bs` lowers
/// it.
pub fn gpu_defaults(gpu_mib: Option<u64>, tp: u32, max_running_requests: Option<usize>) -> GpuDefaults {
    const GIB: u64 = 1024;
    let wide = tp >= 4;
    let (chunked_prefill_size, decode_max_bs) = match gpu_mib {
        None => (4096, 160),
        Some(m) if m < 20 * GIB => (2048, 8),
        Some(m) if m < 35 * GIB => (4096, if wide { 160 } else { 48 }),
        Some(m) if m < 60 * GIB => (4096, if wide { 160 } else { 32 }),
        Some(m) if m < 160 * GIB => (8192, if wide { 512 } else { 256 }),
        Some(_) => (16384, 512),
    };
    let decode_max_bs = match max_running_requests {
        Some(cap) if cap < decode_max_bs => cap,
        _ => decode_max_bs,
    };
    GpuDefaults { chunked_prefill_size, decode_max_bs }
}

/// The decode batch sizes captured as CUDA graphs up to `max_bs` (no speculative decoding).
pub fn decode_graph_batch_sizes(max_bs: usize, padding_disabled: bool) -> Vec<usize> {
    let mut sizes: Vec<usize> = if padding_disabled {
        (1..=max_bs).collect()
    } else {
        [1, 2, 4, 8, 12]
            .into_iter()
            .chain((16..=256).step_by(8))
            .chain((272..512).step_by(16))
            .chain((512..=max_bs.max(512)).step_by(32))
            .filter(|&b| b <= max_bs)
            .collect()
    };
    if !sizes.contains(&max_bs) {
        sizes.push(max_bs);
    }
    sizes
}

/// The token counts captured as (breakable) prefill CUDA graphs, up to `max_tokens`.
pub fn prefill_graph_token_buckets(max_tokens: usize) -> Vec<usize> {
    (4..=32)
        .step_by(4)
        .chain((48..=256).step_by(16))
        .chain((288..=512).step_by(32))
        .chain((576..=1024).step_by(64))
        .chain((1280..=4096).step_by(256))
        .chain((4608..=max_tokens.max(4608)).step_by(512))
        .filter(|&t| t <= max_tokens)
        .collect()
}

/// The largest prefill graph: the chunk (at most 8192 for MLA), at most `--max-total-tokens`,
/// and at most 4096 for a model whose path names Llama 2 (upstream's own special case).
pub fn prefill_graph_max_tokens(
    chunked_prefill_size: usize,
    mla: bool,
    max_total_tokens: Option<usize>,
    model_path: &str,
) -> usize {
    let mut max = if mla { chunked_prefill_size.min(8192) } else { chunked_prefill_size };
    if let Some(total) = max_total_tokens {
        max = max.min(total);
    }
    if model_path.to_lowercase().contains("llama-2") {
        max = max.min(4096);
    }
    max
}

/// What `mem_fraction_static`'s default is computed from.
#[derive(Clone, Copy, Debug)]
pub struct MemoryReserve {
    /// GPU memory in MiB.
    pub gpu_mib: u64,
    /// Tensor- and pipeline-parallel degrees.
    pub tp: u32,
    /// Pipeline stages.
    pub pp: u32,
    /// `chunked_prefill_size`, or `None` when chunking is off.
    pub chunked_prefill_size: Option<usize>,
    /// `max_prefill_tokens` (the activations' size when chunking is off).
    pub max_prefill_tokens: usize,
    /// Decode graphs' largest batch, or `None` when decode graphs are disabled.
    pub decode_graph_max_bs: Option<usize>,
    /// Prefill graph buckets captured, or `None` when prefill graphs are disabled.
    pub prefill_graph_buckets: Option<usize>,
    /// Whether attention is MLA (a flat prefill-graph reserve).
    pub mla: bool,
}

/// `mem_fraction_static` when unset: the GPU less activations (1.5 MiB per token of the chunk,
/// at least 2048 tokens), 512 MiB, 128 MiB per tensor-parallel rank and the graphs' buffers,
/// at least 10 GiB on GPUs above 60 GiB, rounded to three decimals as Python's `round` does.
pub fn mem_fraction_static(m: MemoryReserve) -> f64 {
    let activation_tokens = m.chunked_prefill_size.unwrap_or(m.max_prefill_tokens).max(2048) as f64;
    let mut graphs = 0.0;
    if let Some(max_bs) = m.decode_graph_max_bs {
        graphs += max_bs as f64 * 2.0;
    }
    if let Some(buckets) = m.prefill_graph_buckets {
        graphs += if m.mla { 1.5 * 1024.0 } else { buckets as f64 * 8.0 };
    }
    let mut reserved = 512.0;
    reserved += activation_tokens * 1.5;
    reserved += f64::from(m.tp) * f64::from(m.pp) / 8.0 * 1024.0;
    reserved += graphs;
    if m.gpu_mib > 60 * 1024 {
        reserved = reserved.max(10.0 * 1024.0);
    }
    let gpu = m.gpu_mib as f64;
    round_to_thousandths((gpu - reserved) / gpu)
}

/// Python's `round(x, 3)`: the decimal nearest to the exact binary value.
fn round_to_thousandths(x: f64) -> f64 {
    format!("{x:.3}").parse().expect("a formatted float parses")
}

/// `max_running_requests` per DP worker (`resolve_max_num_reqs`): unset, 512 requests per
/// context length of KV capacity, clamped to 2048–4096; either way at most half the tokens.
pub fn max_running_requests(
    token_capacity: usize,
    context_len: usize,
    set: Option<usize>,
    attn_dp: usize,
) -> usize {
    match set {
        Some(value) => (value / attn_dp.max(1)).max(1).min(token_capacity / 2),
        None => {
            let estimated = (token_capacity as f64 / context_len as f64 * 512.0) as usize;
            estimated.clamp(2048, 4096).min(token_capacity / 2)
        }
    }
}

/// The decode graph a batch of `batch` requests replays: the smallest captured size at least as
/// large (its rows padded), or `None` (eager) above the largest.
pub fn decode_graph_for(batch: usize, sizes: &[usize]) -> Option<usize> {
    sizes.iter().copied().filter(|&s| s >= batch).min()
}

/// The prefill graph a plain extend of `tokens` replays (`can_replay_locally`): the smallest
/// bucket at least as large, unless none is or it would more than double the tokens
/// (`_MAX_PREFILL_CUDA_GRAPH_PADDING_FACTOR`), then eager. Not modelled here: the eager cases
/// of mixed batches, input embeddings, LoRA, target-verify and logprobs, and the chunked-prefix
/// variants upstream captures for prefix attention.
pub fn prefill_graph_for(tokens: usize, buckets: &[usize]) -> Option<usize> {
    let bucket = buckets.iter().copied().filter(|&b| b >= tokens).min()?;
    (bucket <= 2 * tokens).then_some(bucket)
}
