//! vLLM's engine arguments as a scenario gives them, and their resolution to a configuration.
//!
//! Names are vLLM's own (`vllm serve --max-num-seqs` is `max_num_seqs` here). Every argument is
//! either modelled, or refused by name with the reason; unknown names are refused by the parser.
//! Unset arguments resolve as vLLM 0.15.1's `vllm serve` resolves them.

use blis_contracts::{FieldError, ModelArchitecture};
use serde::{Deserialize, Serialize};

/// The vLLM release this build models.
pub const VLLM_VERSION: &str = "0.15.1";

/// Engine arguments as written in a scenario (`engine.args`), all optional.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VllmArgs {
    /// GPUs per instance sharing each layer.
    pub tensor_parallel_size: Option<u32>,
    /// Pipeline stages (only 1 is modelled).
    pub pipeline_parallel_size: Option<u32>,
    /// Most requests in one step.
    pub max_num_seqs: Option<u32>,
    /// Most tokens in one step.
    pub max_num_batched_tokens: Option<u32>,
    /// Longest prompt plus output.
    pub max_model_len: Option<u32>,
    /// Tokens per KV block.
    pub block_size: Option<u32>,
    /// Share of GPU memory the instance may use.
    pub gpu_memory_utilization: Option<f64>,
    /// Number of KV blocks, replacing the memory-profiling result.
    pub num_gpu_blocks_override: Option<u32>,
    /// Split long prompts over several steps.
    pub enable_chunked_prefill: Option<bool>,
    /// Cap on the tokens one request gets in one step (0: no cap).
    pub long_prefill_token_threshold: Option<u32>,
    /// Prefix caching (not modelled yet: must be set to false).
    pub enable_prefix_caching: Option<bool>,
    /// Asynchronous scheduling (not modelled yet: must be set to false).
    pub async_scheduling: Option<bool>,
    /// Eager execution without CUDA graphs (graphs not modelled yet: must be set to true).
    pub enforce_eager: Option<bool>,
    /// Scheduling policy (only `fcfs` is modelled).
    pub scheduling_policy: Option<String>,
    /// KV-cache element format: `auto` (the model's dtype) or an FP8 format.
    pub kv_cache_dtype: Option<String>,
    /// Weight quantization applied at load (`fp8`).
    pub quantization: Option<String>,
}

/// A resolved vLLM configuration: every value the simulation uses.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VllmConfig {
    /// The modelled release.
    pub version: String,
    /// Tensor-parallel degree.
    pub tensor_parallel_size: u32,
    /// Most requests in one step.
    pub max_num_seqs: u32,
    /// Most tokens in one step.
    pub max_num_batched_tokens: u32,
    /// Longest prompt plus output.
    pub max_model_len: u32,
    /// Tokens per KV block.
    pub block_size: u32,
    /// Share of GPU memory the instance may use.
    pub gpu_memory_utilization: f64,
    /// KV blocks fixed by the user instead of by profiling.
    pub num_gpu_blocks_override: Option<u32>,
    /// Whether prompts may be split over steps.
    pub enable_chunked_prefill: bool,
    /// Per-request token cap per step (0: none).
    pub long_prefill_token_threshold: u32,
    /// Prefix caching (always false in this build).
    pub enable_prefix_caching: bool,
    /// Asynchronous scheduling (always false in this build).
    pub async_scheduling: bool,
    /// Eager execution (always true in this build).
    pub enforce_eager: bool,
    /// Scheduling policy.
    pub scheduling_policy: String,
    /// KV-cache element format as given (`auto`, `fp8`, `fp8_e4m3`, `fp8_e5m2`).
    pub kv_cache_dtype: String,
    /// Weight quantization applied at load, if any.
    pub quantization: Option<String>,
}

/// What vLLM's defaults depend on about the device.
#[derive(Clone, Copy, Debug)]
pub struct DeviceClass<'a> {
    /// Catalog chip name.
    pub name: &'a str,
    /// Memory the device reports, bytes.
    pub capacity_bytes: u64,
}

impl VllmArgs {
    /// Resolve against the model and device; `path` is where these args sit in the scenario.
    pub fn resolve(
        &self,
        model: &ModelArchitecture,
        device: DeviceClass<'_>,
        path: &str,
    ) -> Result<VllmConfig, FieldError> {
        let at = |field: &str| format!("{path}.{field}");
        require_explicit(self.enable_prefix_caching, false, &at("enable_prefix_caching"), "prefix caching")?;
        require_explicit(self.async_scheduling, false, &at("async_scheduling"), "asynchronous scheduling")?;
        require_explicit(
            self.enforce_eager,
            true,
            &at("enforce_eager"),
            "CUDA graphs (enforce_eager: false)",
        )?;
        if let Some(pp) = self.pipeline_parallel_size.filter(|&pp| pp != 1) {
            return Err(FieldError::new(
                at("pipeline_parallel_size"),
                pp,
                "pipeline parallelism is not modelled yet; only 1 is accepted",
            ));
        }
        let policy = self.scheduling_policy.clone().unwrap_or_else(|| "fcfs".to_owned());
        if policy != "fcfs" {
            return Err(FieldError::new(
                at("scheduling_policy"),
                &policy,
                "only the fcfs policy is modelled yet",
            ));
        }
        let kv_cache_dtype = self.kv_cache_dtype.clone().unwrap_or_else(|| "auto".to_owned());
        if !["auto", "fp8", "fp8_e4m3", "fp8_e5m2"].contains(&kv_cache_dtype.as_str()) {
            return Err(FieldError::new(
                at("kv_cache_dtype"),
                &kv_cache_dtype,
                "the formats modelled are auto (the model's dtype), fp8, fp8_e4m3 and fp8_e5m2",
            ));
        }
        if let Some(method) = self.quantization.as_deref().filter(|&q| q != "fp8") {
            return Err(FieldError::new(
                at("quantization"),
                method,
                "only fp8 weight quantization is modelled yet",
            ));
        }
        let tensor_parallel_size =
            positive(self.tensor_parallel_size.unwrap_or(1), &at("tensor_parallel_size"))?;
        if !model.num_attention_heads.is_multiple_of(tensor_parallel_size) {
            return Err(FieldError::new(
                at("tensor_parallel_size"),
                tensor_parallel_size,
                format!(
                    "Total number of attention heads ({}) must be divisible by tensor parallel size ({tensor_parallel_size}).",
                    model.num_attention_heads
                ),
            ));
        }
        // vLLM's get_batch_defaults for `vllm serve` (OPENAI_API_SERVER usage context): GPUs
        // with at least 70 GiB that are not A100s get 8192 tokens and 1024 sequences; others
        // 2048 and 256.
        let large_device =
            device.capacity_bytes >= 70 << 30 && !device.name.to_ascii_lowercase().contains("a100");
        let (default_tokens, default_seqs) = if large_device { (8192, 1024) } else { (2048, 256) };
        let max_num_seqs = positive(self.max_num_seqs.unwrap_or(default_seqs), &at("max_num_seqs"))?;
        let max_num_batched_tokens =
            positive(self.max_num_batched_tokens.unwrap_or(default_tokens), &at("max_num_batched_tokens"))?;
        let derived_max_len = model.max_position_embeddings;
        let max_model_len = positive(self.max_model_len.unwrap_or(derived_max_len), &at("max_model_len"))?;
        if max_model_len > derived_max_len {
            return Err(FieldError::new(
                at("max_model_len"),
                max_model_len,
                format!(
                    "User-specified max_model_len ({max_model_len}) is greater than the derived max_model_len (max_position_embeddings={derived_max_len} in the model's config.json)"
                ),
            ));
        }
        let block_size = self.block_size.unwrap_or(16);
        if ![1, 8, 16, 32, 64, 128].contains(&block_size) {
            return Err(FieldError::new(
                at("block_size"),
                block_size,
                "vLLM accepts 1, 8, 16, 32, 64 or 128",
            ));
        }
        let gpu_memory_utilization = self.gpu_memory_utilization.unwrap_or(0.9);
        if !(gpu_memory_utilization > 0.0 && gpu_memory_utilization <= 1.0) {
            return Err(FieldError::new(
                at("gpu_memory_utilization"),
                gpu_memory_utilization,
                "must be in (0, 1]: the share of GPU memory the instance may use",
            ));
        }
        if let Some(blocks) = self.num_gpu_blocks_override
            && blocks < 2
        {
            return Err(FieldError::new(
                at("num_gpu_blocks_override"),
                blocks,
                "at least 2 blocks (one is the null block)",
            ));
        }
        if max_num_batched_tokens < max_num_seqs {
            return Err(FieldError::new(
                at("max_num_batched_tokens"),
                max_num_batched_tokens,
                format!(
                    "max_num_batched_tokens ({max_num_batched_tokens}) must be greater than or equal to max_num_seqs ({max_num_seqs})."
                ),
            ));
        }
        let enable_chunked_prefill = self.enable_chunked_prefill.unwrap_or(true);
        if !enable_chunked_prefill && max_num_batched_tokens < max_model_len {
            return Err(FieldError::new(
                at("max_num_batched_tokens"),
                max_num_batched_tokens,
                format!(
                    "max_num_batched_tokens ({max_num_batched_tokens}) is smaller than max_model_len ({max_model_len}). This effectively limits the maximum sequence length to max_num_batched_tokens and makes vLLM reject longer sequences. Please increase max_num_batched_tokens or decrease max_model_len."
                ),
            ));
        }
        Ok(VllmConfig {
            version: VLLM_VERSION.to_owned(),
            tensor_parallel_size,
            max_num_seqs,
            max_num_batched_tokens,
            max_model_len,
            block_size,
            gpu_memory_utilization,
            num_gpu_blocks_override: self.num_gpu_blocks_override,
            enable_chunked_prefill,
            long_prefill_token_threshold: self.long_prefill_token_threshold.unwrap_or(0),
            enable_prefix_caching: false,
            async_scheduling: false,
            enforce_eager: true,
            scheduling_policy: policy,
            kv_cache_dtype,
            quantization: self.quantization.clone(),
        })
    }
}

fn positive(value: u32, path: &str) -> Result<u32, FieldError> {
    if value == 0 { Err(FieldError::new(path, 0, "must be at least 1")) } else { Ok(value) }
}

/// A feature this build does not model yet, whose upstream default differs from what the build
/// does: the scenario must state the modelled value, so nothing degrades silently.
fn require_explicit(
    value: Option<bool>,
    modelled: bool,
    path: &str,
    feature: &str,
) -> Result<(), FieldError> {
    match value {
        Some(v) if v == modelled => Ok(()),
        Some(v) => Err(FieldError::new(
            path,
            v,
            format!("{feature} is not modelled by this build yet; set {modelled}"),
        )),
        None => Err(FieldError::at(
            path,
            format!(
                "vLLM {VLLM_VERSION} defaults to {}, which this build does not model yet ({feature}); set `{modelled}` explicitly",
                !modelled
            ),
        )),
    }
}
