//! The plan phase: lower the model into a `PoolPlan` and size the KV cache by vLLM's rule.
//!
//! vLLM profiles a dummy forward of `max_num_batched_tokens` tokens after loading the weights and
//! gives the KV cache what is left of `gpu_memory_utilization` × total memory:
//!
//! ```text
//! available = ⌈total × gpu_memory_utilization⌉ − weights − peak activations − non-torch
//! num_gpu_blocks = floor(available / bytes per block)        (or num_gpu_blocks_override)
//! ```
//!
//! `kv_cache_memory_bytes`, when given, replaces `available` (vLLM then skips the rule). vLLM
//! 0.15.1 captures CUDA graphs after sizing the cache, so their memory is not subtracted (it only
//! logs a suggested `--kv-cache-memory`). The Environment supplies the memory figures; this
//! module applies the rule and refuses to start where vLLM refuses, with vLLM's own condition.

use blis_contracts::{
    Dtype, EngineIdentity, Environment, FieldError, GraphPolicy, KvPlan, MemoryFootprint, ModelArchitecture,
    ParallelLayout, PoolPlan,
};
use serde::Serialize;

use super::args::{DeviceClass, VllmArgs, VllmConfig};

const GIB: f64 = (1u64 << 30) as f64;

/// The KV budget arithmetic, kept for the Result.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct KvBudget {
    /// The memory figures from the Environment.
    pub footprint: MemoryFootprint,
    /// `total × gpu_memory_utilization`, bytes.
    pub requested_bytes: u64,
    /// What is left for the KV cache, bytes (negative: nothing).
    pub available_kv_bytes: i64,
    /// Bytes of one block on each GPU.
    pub bytes_per_block: u64,
    /// Blocks the memory rule gives.
    pub blocks_from_memory: u64,
    /// Blocks used (the override if set).
    pub num_gpu_blocks: u64,
    /// Tokens the cache holds, `num_gpu_blocks × block_size` (vLLM's "GPU KV cache size").
    pub kv_cache_tokens: u64,
}

/// A planned vLLM pool: its configuration, its PoolPlan and how the KV cache was sized.
#[derive(Clone, Debug, PartialEq)]
pub struct VllmPlan {
    /// The resolved configuration.
    pub config: VllmConfig,
    /// The plan shared with the cost model.
    pub pool: PoolPlan,
    /// The KV budget arithmetic.
    pub budget: KvBudget,
}

/// Plan a pool of `model` on `device` from the scenario's `args`; `environment` builds the
/// Environment for the lowered plan (before the KV budget is known), which is asked for memory
/// and returned for pricing. `pool_path` is the pool's place in the scenario (e.g.
/// `cluster.pools[0]`).
pub fn plan(
    args: &VllmArgs,
    model: &ModelArchitecture,
    device: DeviceClass<'_>,
    environment: impl FnOnce(&PoolPlan) -> Box<dyn Environment>,
    pool_path: &str,
) -> Result<(VllmPlan, Box<dyn Environment>), FieldError> {
    crate::fields::refuse_unlowered_attention(model, "the vLLM port", pool_path)?;
    let path = &format!("{pool_path}.engine.args");
    let config = args.resolve(model, device, path)?;
    let tp = config.tensor_parallel_size;
    let heads_per_gpu = (model.num_kv_heads / tp).max(1);
    let kv_dtype = if config.kv_cache_dtype == "auto" { model.compute_dtype } else { Dtype::Fp8 };
    let mut model = model.clone();
    if config.quantization.is_some() {
        model.weight_dtype = Dtype::Fp8;
        model.gemm_dtype = Dtype::Fp8;
    }
    let bytes_per_block = 2
        * u64::from(model.num_layers)
        * u64::from(heads_per_gpu)
        * u64::from(model.head_dim)
        * kv_dtype.bytes()
        * u64::from(config.block_size);
    let mut pool = PoolPlan {
        engine: EngineIdentity { kind: "vllm".to_owned(), version: config.version.clone() },
        chip: device.name.to_owned(),
        model,
        layout: ParallelLayout { tensor: tp, pipeline: 1, data: 1 },
        kv: KvPlan {
            block_size: config.block_size,
            dtype: kv_dtype,
            bytes_per_block_per_gpu: bytes_per_block,
            num_blocks: 0,
        },
        max_num_batched_tokens: config.max_num_batched_tokens,
        max_num_seqs: config.max_num_seqs,
        graphs: if config.enforce_eager {
            GraphPolicy::Eager
        } else {
            GraphPolicy::Captured { capture_sizes: config.cudagraph_capture_sizes.clone() }
        },
        steps_in_flight: if config.async_scheduling { 2 } else { 1 },
    };
    let env = environment(&pool);
    let footprint = env.memory(&pool);
    let requested_bytes = (footprint.gpu_capacity_bytes as f64 * config.gpu_memory_utilization).ceil() as u64;
    // Saturating: a model of absurd size (a config's `hidden_size` of 10⁹) must be refused as
    // too large, not wrap around to a size that fits.
    let used = footprint
        .weights_bytes
        .saturating_add(footprint.activation_peak_bytes)
        .saturating_add(footprint.non_torch_bytes)
        .saturating_add(footprint.cuda_graph_bytes);
    // `kv_cache_memory_bytes` skips the profiling rule and is taken as given.
    let signed = |bytes: u64| i64::try_from(bytes).unwrap_or(i64::MAX);
    let available_kv_bytes = match config.kv_cache_memory_bytes {
        Some(bytes) => signed(bytes),
        None => signed(requested_bytes).saturating_sub(signed(used)),
    };
    let at = |field: &str| format!("{path}.{field}");
    let capacity = footprint.gpu_capacity_bytes;
    if let Some(bytes) = config.kv_cache_memory_bytes
        && bytes > capacity
    {
        return Err(FieldError::new(
            at("kv_cache_memory_bytes"),
            bytes,
            format!(
                "more than the {:.2} GiB each GPU of {} has: the cache could not be allocated",
                capacity as f64 / GIB,
                device.name
            ),
        ));
    }
    if let Some(blocks) = config.num_gpu_blocks_override
        && u64::from(blocks).saturating_mul(bytes_per_block) > capacity
    {
        return Err(FieldError::new(
            at("num_gpu_blocks_override"),
            blocks,
            format!(
                "{blocks} blocks of {bytes_per_block} bytes need {:.2} GiB per GPU, more than the {:.2} GiB each GPU of {} has",
                u64::from(blocks) as f64 * bytes_per_block as f64 / GIB,
                capacity as f64 / GIB,
                device.name
            ),
        ));
    }
    // A cache sized by hand skips the profiling rule but not the GPU: vLLM loads the weights,
    // then allocates the cache, and runs out of memory if the two do not fit.
    // Each: the argument, its value, and the cache's bytes.
    let given_cache = match (config.kv_cache_memory_bytes, config.num_gpu_blocks_override) {
        (_, Some(blocks)) => Some((
            "num_gpu_blocks_override",
            u64::from(blocks),
            u64::from(blocks).saturating_mul(bytes_per_block),
        )),
        (Some(bytes), None) => Some(("kv_cache_memory_bytes", bytes, bytes)),
        (None, None) => None,
    };
    let resident = footprint.weights_bytes.saturating_add(footprint.non_torch_bytes);
    if let Some((field, value, cache_bytes)) = given_cache
        && resident.saturating_add(cache_bytes) > capacity
    {
        let (field, value) =
            if resident >= capacity { ("tensor_parallel_size", u64::from(tp)) } else { (field, value) };
        return Err(FieldError::new(
            at(field),
            value,
            format!(
                "{}'s weights ({:.2} GiB) and other memory ({:.2} GiB) per GPU at tensor parallelism {tp} with a KV cache of {:.2} GiB need more than the {:.2} GiB each GPU of {} has: vLLM would run out of memory {}",
                pool.model.name,
                footprint.weights_bytes as f64 / GIB,
                footprint.non_torch_bytes as f64 / GIB,
                cache_bytes as f64 / GIB,
                capacity as f64 / GIB,
                device.name,
                if resident >= capacity {
                    "loading the weights; shard it over more GPUs (a larger tensor_parallel_size)"
                } else {
                    "allocating the cache; give it a smaller one"
                }
            ),
        ));
    }
    if given_cache.is_none() && used >= capacity {
        return Err(FieldError::new(
            at("tensor_parallel_size"),
            tp,
            format!(
                "{} needs {:.2} GiB per GPU at tensor parallelism {tp} before any KV cache (weights {:.2} GiB), more than the {:.2} GiB each GPU of {} has: no gpu_memory_utilization can fit it; shard it over more GPUs (a larger tensor_parallel_size)",
                pool.model.name,
                used as f64 / GIB,
                footprint.weights_bytes as f64 / GIB,
                capacity as f64 / GIB,
                device.name
            ),
        ));
    }
    if available_kv_bytes <= 0 && config.num_gpu_blocks_override.is_none() {
        return Err(FieldError::new(
            at("gpu_memory_utilization"),
            config.gpu_memory_utilization,
            format!(
                "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine. ({:.2} GiB requested; weights {:.2} GiB, activations {:.2} GiB, other {:.2} GiB per GPU)",
                requested_bytes as f64 / GIB,
                footprint.weights_bytes as f64 / GIB,
                footprint.activation_peak_bytes as f64 / GIB,
                (footprint.non_torch_bytes + footprint.cuda_graph_bytes) as f64 / GIB,
            ),
        ));
    }
    let blocks_from_memory = available_kv_bytes.max(0) as u64 / bytes_per_block;
    let kv_bytes_per_token = bytes_per_block / u64::from(config.block_size);
    let needed_bytes = u64::from(config.max_model_len) * kv_bytes_per_token;
    if config.num_gpu_blocks_override.is_none() && needed_bytes as i64 > available_kv_bytes {
        let estimated = available_kv_bytes as u64 / kv_bytes_per_token;
        return Err(FieldError::new(
            at("max_model_len"),
            config.max_model_len,
            format!(
                "To serve at least one request with the models's max seq len ({}), ({:.2} GiB KV cache is needed, which is larger than the available KV cache memory ({:.2} GiB). Based on the available memory, the estimated maximum model length is {estimated}. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
                config.max_model_len,
                needed_bytes as f64 / GIB,
                available_kv_bytes as f64 / GIB,
            ),
        ));
    }
    let num_gpu_blocks = config.num_gpu_blocks_override.map_or(blocks_from_memory, u64::from);
    let blocks_per_request = u64::from(config.max_model_len).div_ceil(u64::from(config.block_size));
    if num_gpu_blocks.saturating_sub(1) < blocks_per_request || num_gpu_blocks > u64::from(u32::MAX - 1) {
        let field = if config.num_gpu_blocks_override.is_some() {
            "num_gpu_blocks_override"
        } else {
            "max_model_len"
        };
        return Err(FieldError::new(
            at(field),
            if field == "max_model_len" { u64::from(config.max_model_len) } else { num_gpu_blocks },
            format!(
                "{num_gpu_blocks} KV blocks ({} usable besides the null block, {} tokens each) cannot hold one request of max_model_len {} tokens ({blocks_per_request} blocks): a longer request would wait forever",
                num_gpu_blocks.saturating_sub(1),
                config.block_size,
                config.max_model_len,
            ),
        ));
    }
    pool.kv.num_blocks = num_gpu_blocks;
    let budget = KvBudget {
        footprint,
        requested_bytes,
        available_kv_bytes,
        bytes_per_block,
        blocks_from_memory,
        num_gpu_blocks,
        kv_cache_tokens: num_gpu_blocks * u64::from(config.block_size),
    };
    Ok((VllmPlan { config, pool, budget }, env))
}
