//! The plan phase: resolve an SGLang pool's server arguments for the GPU and the model, lower the
//! model into a `PoolPlan` and size the KV pool by SGLang 0.5.23's rule.
//!
//! SGLang keeps `mem_fraction_static` of the GPU for weights and the KV pool and leaves the rest
//! for activations and CUDA graphs (`kv_cache_configurator.py`):
//!
//! ```text
//! budget = (total − memory taken before the weights) × mem_fraction_static − weights
//! max_total_num_tokens = floor_to_page(budget / bytes per token), at most --max-total-tokens
//! ```
//!
//! Unset arguments take the values `handle_gpu_memory_settings` derives from the GPU's memory
//! ([`super::defaults`]); the Environment supplies the weights and the other fixed memory.

use blis_contracts::{
    EngineIdentity, Environment, FieldError, GraphPolicy as CapturePolicy, KvPlan, MemoryFootprint,
    ModelArchitecture, ParallelLayout, PoolPlan,
};
use serde::Serialize;

use super::args::{SGLANG_VERSION, SglangArgs};
use super::defaults::{
    MemoryReserve, decode_graph_batch_sizes, gpu_defaults, max_running_requests, mem_fraction_static,
    prefill_graph_max_tokens, prefill_graph_token_buckets,
};
use super::scheduler::{GraphPolicy, SchedulerConfig};

const MIB: u64 = 1 << 20;
const GIB: f64 = (1u64 << 30) as f64;

/// `SGLANG_INIT_NEW_TOKEN_RATIO`.
const INIT_NEW_TOKEN_RATIO: f64 = 0.7;
/// `SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR`.
const MIN_NEW_TOKEN_RATIO_FACTOR: f64 = 0.14;
/// `SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS`.
const NEW_TOKEN_RATIO_DECAY_STEPS: f64 = 600.0;

/// A resolved SGLang configuration: every value the simulation uses, as the Result records it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SglangConfig {
    /// The modelled release.
    pub version: String,
    /// Tensor-parallel degree.
    pub tp_size: u32,
    /// Longest prompt plus output.
    pub context_length: u32,
    /// Share of GPU memory for weights and the KV pool.
    pub mem_fraction_static: f64,
    /// Running requests at most.
    pub max_running_requests: u32,
    /// Tokens per prefill chunk; `None` when chunking is off.
    pub chunked_prefill_size: Option<u32>,
    /// Prompt tokens one prefill batch takes at most.
    pub max_prefill_tokens: u32,
    /// Queue order.
    pub schedule_policy: String,
    /// `schedule_conservativeness`.
    pub schedule_conservativeness: f64,
    /// Tokens per KV page.
    pub page_size: u32,
    /// Eviction order of the radix cache.
    pub radix_eviction_policy: String,
    /// The overlap loop (the default) rather than the normal one.
    pub overlap_schedule: bool,
    /// Mixed chunk in effect (asked for, and chunking on).
    pub enable_mixed_chunk: bool,
    /// KV element format as given.
    pub kv_cache_dtype: String,
    /// Decode batch sizes captured as CUDA graphs (empty: decode runs eager).
    pub decode_graph_batch_sizes: Vec<usize>,
    /// Prefill token buckets captured as CUDA graphs (empty: prefill runs eager).
    pub prefill_graph_token_buckets: Vec<usize>,
    /// Decode steps between two updates of the Prometheus gauges.
    pub decode_log_interval: u32,
    /// `max_req_len`: prompt plus output tokens at most.
    pub max_req_len: u32,
    /// `max_req_input_len`: the longest prompt the scheduler takes.
    pub max_req_input_len: u32,
}

/// The KV pool arithmetic, kept for the Result.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct KvPoolBudget {
    /// The memory figures from the Environment.
    pub footprint: MemoryFootprint,
    /// GPU memory in MiB, as `nvidia-smi` reports it (the defaults' input).
    pub gpu_mib: u64,
    /// Bytes left for the pool, `(total − other) × mem_fraction_static − weights`.
    pub budget_bytes: i64,
    /// Bytes one token's KV takes on each GPU.
    pub bytes_per_token: u64,
    /// Tokens the memory rule gives, floored to pages.
    pub tokens_from_memory: u64,
    /// Tokens in the pool (`max_total_num_tokens`).
    pub max_total_num_tokens: u64,
}

/// A planned SGLang pool.
#[derive(Clone, Debug, PartialEq)]
pub struct SglangPlan {
    /// The resolved configuration.
    pub config: SglangConfig,
    /// The scheduler's configuration.
    pub scheduler: SchedulerConfig,
    /// The CUDA graphs the instance replays.
    pub graphs: GraphPolicy,
    /// The plan shared with the cost model.
    pub pool: PoolPlan,
    /// The KV pool arithmetic.
    pub budget: KvPoolBudget,
}

/// What SGLang's defaults depend on about the device.
#[derive(Clone, Copy, Debug)]
pub struct Device<'a> {
    /// Catalog chip name.
    pub name: &'a str,
    /// Memory the device reports, bytes.
    pub capacity_bytes: u64,
}

/// Plan a pool of `model` on `device` from the scenario's `args`; `environment` builds the
/// Environment for the lowered plan, which is asked for memory and returned for pricing.
/// `pool_path` is the pool's place in the scenario (e.g. `cluster.pools[0]`).
pub fn plan(
    args: &SglangArgs,
    model: &ModelArchitecture,
    device: Device<'_>,
    environment: impl FnOnce(&PoolPlan) -> Box<dyn Environment>,
    pool_path: &str,
) -> Result<(SglangPlan, Box<dyn Environment>), FieldError> {
    crate::fields::refuse_unlowered_attention(model, "the SGLang port", pool_path)?;
    let path = &format!("{pool_path}.engine.args");
    let at = |field: &str| format!("{path}.{field}");
    let choice = args.choose(model, path)?;
    let gpu_mib = device.capacity_bytes / MIB;
    let tp = choice.tp_size;
    let running_set = choice.max_running_requests.map(|n| n as usize);
    let gpu = gpu_defaults(Some(gpu_mib), tp, running_set);
    let chunk = match choice.chunked_prefill_size {
        None => Some(gpu.chunked_prefill_size),
        Some(given) => given.map(|n| n as usize),
    };
    let decode_max_bs = choice.cuda_graph_max_bs_decode.map_or(gpu.decode_max_bs, |n| n as usize);
    let decode_sizes = if choice.decode_graphs {
        decode_graph_batch_sizes(decode_max_bs, !choice.graph_padding)
    } else {
        Vec::new()
    };
    // Prefill graphs are captured up to the chunk; without chunking none are.
    let prefill_buckets = match (choice.prefill_graphs, chunk) {
        (true, Some(chunk)) => prefill_graph_token_buckets(prefill_graph_max_tokens(
            chunk,
            false,
            choice.max_total_tokens.map(|n| n as usize),
            &model.name,
        )),
        _ => Vec::new(),
    };
    let fraction = choice.mem_fraction_static.unwrap_or_else(|| {
        mem_fraction_static(MemoryReserve {
            gpu_mib,
            tp,
            pp: 1,
            chunked_prefill_size: chunk,
            max_prefill_tokens: choice.max_prefill_tokens as usize,
            decode_graph_max_bs: choice.decode_graphs.then_some(decode_max_bs),
            prefill_graph_buckets: (!prefill_buckets.is_empty()).then_some(prefill_buckets.len()),
            mla: false,
        })
    });
    let kv_dtype = choice.kv_cache_dtype.1;
    let heads_per_gpu = (model.num_kv_heads / tp).max(1);
    let bytes_per_token = 2
        * u64::from(model.num_layers)
        * u64::from(heads_per_gpu)
        * u64::from(model.head_dim)
        * kv_dtype.bytes();
    let page = u64::from(choice.page_size);
    let mut pool = PoolPlan {
        engine: EngineIdentity { kind: "sglang".to_owned(), version: SGLANG_VERSION.to_owned() },
        chip: device.name.to_owned(),
        model: model.clone(),
        layout: ParallelLayout { tensor: tp, pipeline: 1, data: 1 },
        kv: KvPlan {
            block_size: choice.page_size,
            dtype: kv_dtype,
            bytes_per_block_per_gpu: bytes_per_token * page,
            num_blocks: 0,
        },
        max_num_batched_tokens: chunk.unwrap_or(choice.max_prefill_tokens as usize) as u32,
        max_num_seqs: running_set.unwrap_or(decode_max_bs) as u32,
        graphs: if decode_sizes.is_empty() {
            CapturePolicy::Eager
        } else {
            CapturePolicy::Captured { capture_sizes: decode_sizes.iter().map(|&s| s as u32).collect() }
        },
        steps_in_flight: if choice.overlap { 2 } else { 1 },
    };
    let env = environment(&pool);
    let footprint = env.memory(&pool);
    let capacity = footprint.gpu_capacity_bytes;
    // Free memory is measured after the CUDA context and communication buffers exist, before
    // the weights load (`_profile_available_bytes`): the pool gets that × the fraction, less
    // the weights.
    let before_weights = capacity.saturating_sub(footprint.non_torch_bytes);
    let budget_bytes = (before_weights as f64 * fraction) as i64 - footprint.weights_bytes as i64;
    if budget_bytes <= 0 {
        return Err(FieldError::new(
            at(if choice.mem_fraction_static.is_some() { "mem_fraction_static" } else { "tp_size" }),
            if choice.mem_fraction_static.is_some() { format!("{fraction}") } else { tp.to_string() },
            format!(
                "Not enough memory. Please try to increase --mem-fraction-static. ({:.2} GiB of {} × {fraction} per GPU, after the {:.2} GiB taken before the weights, cannot hold the weights {:.2} GiB; a larger tp_size shards the weights)",
                before_weights as f64 * fraction / GIB,
                device.name,
                footprint.non_torch_bytes as f64 / GIB,
                footprint.weights_bytes as f64 / GIB,
            ),
        ));
    }
    let tokens_from_memory = budget_bytes as u64 / bytes_per_token / page * page;
    let max_total_num_tokens =
        choice.max_total_tokens.map_or(tokens_from_memory, |cap| cap.min(tokens_from_memory)) / page * page;
    let context = u64::from(choice.context_length);
    // The allocator's slot 0 is a padding dummy; a request needs its prompt and one page more.
    if max_total_num_tokens < 2 * page + 8 {
        let field = if choice.max_total_tokens.is_some_and(|cap| cap < tokens_from_memory) {
            "max_total_tokens"
        } else {
            "mem_fraction_static"
        };
        return Err(FieldError::new(
            at(field),
            if field == "max_total_tokens" {
                max_total_num_tokens.to_string()
            } else {
                format!("{fraction}")
            },
            format!(
                "a KV pool of {max_total_num_tokens} tokens ({} per page) cannot serve a request: SGLang would reject every prompt",
                choice.page_size
            ),
        ));
    }
    let max_req_len = context.saturating_sub(1).min(max_total_num_tokens - 1);
    let max_req_input_len = max_req_len.saturating_sub(5);
    let max_running =
        max_running_requests(max_total_num_tokens as usize, choice.context_length as usize, running_set, 1);
    let mixed = choice.enable_mixed_chunk && chunk.is_some();
    let ratio_init = (INIT_NEW_TOKEN_RATIO * choice.schedule_conservativeness).min(1.0);
    let ratio_min = (ratio_init * MIN_NEW_TOKEN_RATIO_FACTOR).min(1.0);
    let scheduler = SchedulerConfig {
        page_size: choice.page_size,
        pool_tokens: max_total_num_tokens as usize,
        chunked_prefill_size: chunk,
        max_prefill_tokens: choice.max_prefill_tokens as usize,
        max_running,
        req_pool_size: max_running,
        max_req_len: max_req_len as usize,
        policy: choice.schedule_policy,
        ratio_init,
        ratio_min,
        ratio_decay: (ratio_init - ratio_min) / NEW_TOKEN_RATIO_DECAY_STEPS,
        // Outputs come from the workload, which never draws this id: requests end by length,
        // as with `ignore_eos`.
        eos_token: u32::MAX,
        overlap: choice.overlap,
        mixed_chunk: mixed,
        eviction: choice.radix_eviction_policy,
    };
    pool.kv.num_blocks = max_total_num_tokens / page;
    pool.max_num_seqs = max_running as u32;
    let config = SglangConfig {
        version: SGLANG_VERSION.to_owned(),
        tp_size: tp,
        context_length: choice.context_length,
        mem_fraction_static: fraction,
        max_running_requests: max_running as u32,
        chunked_prefill_size: chunk.map(|c| c as u32),
        max_prefill_tokens: choice.max_prefill_tokens,
        schedule_policy: choice.schedule_policy_name.clone(),
        schedule_conservativeness: choice.schedule_conservativeness,
        page_size: choice.page_size,
        radix_eviction_policy: choice.radix_eviction_policy_name.clone(),
        overlap_schedule: choice.overlap,
        enable_mixed_chunk: mixed,
        kv_cache_dtype: choice.kv_cache_dtype.0.clone(),
        decode_graph_batch_sizes: decode_sizes.clone(),
        prefill_graph_token_buckets: prefill_buckets.clone(),
        decode_log_interval: choice.decode_log_interval,
        max_req_len: max_req_len as u32,
        max_req_input_len: max_req_input_len as u32,
    };
    let budget = KvPoolBudget {
        footprint,
        gpu_mib,
        budget_bytes,
        bytes_per_token,
        tokens_from_memory,
        max_total_num_tokens,
    };
    let graphs = GraphPolicy { decode_sizes, prefill_buckets };
    Ok((SglangPlan { config, scheduler, graphs, pool, budget }, env))
}
