//! vLLM's engine arguments as a scenario gives them, and their resolution to a configuration.
//!
//! Names are vLLM's own (`vllm serve --max-num-seqs` is `max_num_seqs` here). Every argument of
//! the release is modelled, accepted as inert, or refused by name with the reason (see
//! [`super::fields`]); a name the release does not have is refused as unknown. Unset arguments
//! resolve as vLLM 0.15.1's `vllm serve` resolves them.

use blis_contracts::yaml::{self, YamlValue};
use blis_contracts::{FieldError, ModelArchitecture};
use serde::{Deserialize, Serialize};

use super::connector::{KvConnectorKind, KvTransferConfig, NixlConfig, OffloadConfig};
use super::fields::treatment;
use crate::fields::screen;

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
    /// Reuse KV blocks of identical prompt prefixes (on by default).
    pub enable_prefix_caching: Option<bool>,
    /// Schedule the next step while the current one runs (on by default).
    pub async_scheduling: Option<bool>,
    /// Run every step eagerly, without CUDA graphs (off by default).
    pub enforce_eager: Option<bool>,
    /// `fcfs` (the default) or `priority`.
    pub scheduling_policy: Option<String>,
    /// KV-cache element format: `auto` (the model's dtype) or an FP8 format.
    pub kv_cache_dtype: Option<String>,
    /// Weight quantization applied at load (`fp8`).
    pub quantization: Option<String>,
    /// Prompts prefilled concurrently; above 1 it turns on the long-prefill threshold.
    pub max_num_partial_prefills: Option<u32>,
    /// Long prompts prefilled concurrently (at most `max_num_partial_prefills`).
    pub max_long_partial_prefills: Option<u32>,
    /// Token counts to capture CUDA graphs at, replacing the default list.
    pub cudagraph_capture_sizes: Option<Vec<u32>>,
    /// Largest CUDA-graph capture size of the default list.
    pub max_cudagraph_capture_size: Option<u32>,
    /// KV-cache bytes per GPU, replacing the memory-utilization rule.
    pub kv_cache_memory_bytes: Option<u64>,
    /// Hash function of prefix-cache blocks.
    pub prefix_caching_hash_algo: Option<String>,
    /// The KV connector (vLLM's `--kv-transfer-config`).
    pub kv_transfer_config: Option<KvTransferConfig>,
    /// CPU KV tier size in GiB, the shorthand for the offloading connector.
    pub kv_offloading_size: Option<f64>,
    /// `native` (the offloading connector) or `lmcache`.
    pub kv_offloading_backend: Option<String>,
    /// Whether `kv_events_config` was given (an inert argument that still turns the hybrid
    /// KV-cache manager off).
    #[serde(skip)]
    pub kv_events_config_given: bool,
    /// `disable_hybrid_kv_cache_manager` as given (inert otherwise; it decides whether a
    /// connector is accepted).
    #[serde(skip)]
    pub disable_hybrid_kv_cache_manager: Option<bool>,
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
    /// Prefix caching.
    pub enable_prefix_caching: bool,
    /// Asynchronous scheduling (two steps in flight).
    pub async_scheduling: bool,
    /// Eager execution.
    pub enforce_eager: bool,
    /// Token counts CUDA graphs are captured at, ascending (empty when eager).
    pub cudagraph_capture_sizes: Vec<u32>,
    /// KV-cache bytes per GPU fixed by the user instead of by the utilization rule.
    pub kv_cache_memory_bytes: Option<u64>,
    /// Prefix-cache block hash function as configured.
    pub prefix_caching_hash_algo: String,
    /// Scheduling policy.
    pub scheduling_policy: String,
    /// KV-cache element format as given (`auto`, `fp8`, `fp8_e4m3`, `fp8_e5m2`).
    pub kv_cache_dtype: String,
    /// Weight quantization applied at load, if any.
    pub quantization: Option<String>,
    /// The offloading connector's settings, when one is configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offload: Option<OffloadConfig>,
    /// NIXL's settings (prefill/decode disaggregation), when that connector is configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nixl: Option<NixlConfig>,
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
    /// Read `engine.args` found at `path`: every name is checked against vLLM 0.15.1's
    /// arguments first, so a refused one is named with its reason and an inert one is dropped.
    pub fn from_yaml(value: &YamlValue, path: &str) -> Result<VllmArgs, FieldError> {
        let mut modelled = value.clone();
        let mapping = value.as_mapping();
        let kv_events_config_given =
            mapping.and_then(|m| m.get("kv_events_config")).is_some_and(|v| !v.is_null());
        let disable_hybrid =
            mapping.and_then(|m| m.get("disable_hybrid_kv_cache_manager")).and_then(|v| v.as_bool());
        screen(&mut modelled, path, &format!("a vLLM {VLLM_VERSION}"), treatment)?;
        let mut args: VllmArgs = yaml::from_value(&modelled, path)?;
        // Read only with a connector: alone, both stay inert.
        if args.kv_transfer_config.is_some() || args.kv_offloading_size.is_some() {
            args.kv_events_config_given = kv_events_config_given;
            args.disable_hybrid_kv_cache_manager = disable_hybrid;
        }
        Ok(args)
    }

    /// Resolve against the model and device; `path` is where these args sit in the scenario.
    pub fn resolve(
        &self,
        model: &ModelArchitecture,
        device: DeviceClass<'_>,
        path: &str,
    ) -> Result<VllmConfig, FieldError> {
        let at = |field: &str| format!("{path}.{field}");
        if let Some(pp) = self.pipeline_parallel_size.filter(|&pp| pp != 1) {
            return Err(FieldError::new(
                at("pipeline_parallel_size"),
                pp,
                "pipeline parallelism is not modelled yet; only 1 is accepted",
            ));
        }
        let policy = self.scheduling_policy.clone().unwrap_or_else(|| "fcfs".to_owned());
        if policy != "fcfs" && policy != "priority" {
            return Err(FieldError::new(at("scheduling_policy"), &policy, "vLLM accepts fcfs or priority"));
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
        let derived_max_len = model.max_position_embeddings;
        let max_model_len = positive(self.max_model_len.unwrap_or(derived_max_len), &at("max_model_len"))?;
        let enable_chunked_prefill = self.enable_chunked_prefill.unwrap_or(true);
        let given_seqs = self.max_num_seqs.map(|seqs| positive(seqs, &at("max_num_seqs"))).transpose()?;
        let max_num_batched_tokens = match self.max_num_batched_tokens {
            Some(tokens) => positive(tokens, &at("max_num_batched_tokens"))?,
            // Defaulted: at least one whole prompt without chunking, and never more than the
            // sequences could use.
            None => {
                let tokens =
                    if enable_chunked_prefill { default_tokens } else { default_tokens.max(max_model_len) };
                let seqs = u64::from(given_seqs.unwrap_or(default_seqs));
                u64::from(tokens).min(seqs * u64::from(max_model_len)) as u32
            }
        };
        // A defaulted max_num_seqs never exceeds the token budget.
        let max_num_seqs = given_seqs.unwrap_or(default_seqs.min(max_num_batched_tokens));
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
        if !enable_chunked_prefill && max_num_batched_tokens < max_model_len {
            return Err(FieldError::new(
                at("max_num_batched_tokens"),
                max_num_batched_tokens,
                format!(
                    "max_num_batched_tokens ({max_num_batched_tokens}) is smaller than max_model_len ({max_model_len}). This effectively limits the maximum sequence length to max_num_batched_tokens and makes vLLM reject longer sequences. Please increase max_num_batched_tokens or decrease max_model_len."
                ),
            ));
        }
        let max_num_partial_prefills =
            positive(self.max_num_partial_prefills.unwrap_or(1), &at("max_num_partial_prefills"))?;
        let max_long_partial_prefills =
            positive(self.max_long_partial_prefills.unwrap_or(1), &at("max_long_partial_prefills"))?;
        let mut long_prefill_token_threshold = self.long_prefill_token_threshold.unwrap_or(0);
        if max_num_partial_prefills > 1 {
            if !enable_chunked_prefill {
                return Err(FieldError::new(
                    at("max_num_partial_prefills"),
                    max_num_partial_prefills,
                    "Chunked prefill must be enabled to set max_num_partial_prefills > 1.",
                ));
            }
            if long_prefill_token_threshold == 0 {
                long_prefill_token_threshold = (f64::from(max_model_len) * 0.04) as u32;
            }
            if long_prefill_token_threshold > max_model_len {
                return Err(FieldError::new(
                    at("long_prefill_token_threshold"),
                    long_prefill_token_threshold,
                    format!(
                        "long_prefill_token_threshold ({long_prefill_token_threshold}) cannot be greater than the max_model_len ({max_model_len})."
                    ),
                ));
            }
        }
        if max_long_partial_prefills > max_num_partial_prefills {
            return Err(FieldError::new(
                at("max_long_partial_prefills"),
                max_long_partial_prefills,
                format!(
                    "self.max_long_partial_prefills={max_long_partial_prefills} must be less than or equal to self.max_num_partial_prefills={max_num_partial_prefills}."
                ),
            ));
        }
        let prefix_caching_hash_algo =
            self.prefix_caching_hash_algo.clone().unwrap_or_else(|| "sha256".to_owned());
        if !["sha256", "sha256_cbor", "xxhash", "xxhash_cbor"].contains(&prefix_caching_hash_algo.as_str()) {
            return Err(FieldError::new(
                at("prefix_caching_hash_algo"),
                &prefix_caching_hash_algo,
                "vLLM accepts sha256, sha256_cbor, xxhash or xxhash_cbor",
            ));
        }
        if let Some(0) = self.kv_cache_memory_bytes {
            return Err(FieldError::new(at("kv_cache_memory_bytes"), 0, "must be at least one block"));
        }
        let connector = KvTransferConfig::resolve(
            self.kv_transfer_config.as_ref(),
            self.kv_offloading_size,
            self.kv_offloading_backend.as_deref(),
            block_size,
            self.kv_events_config_given,
            self.disable_hybrid_kv_cache_manager,
            path,
        )?;
        let (offload, nixl) = match connector {
            Some(KvConnectorKind::Offloading(o)) => (Some(o), None),
            Some(KvConnectorKind::Nixl(n)) => (None, Some(n)),
            None => (None, None),
        };
        let enforce_eager = self.enforce_eager.unwrap_or(false);
        let cudagraph_capture_sizes = if enforce_eager {
            Vec::new()
        } else {
            self.resolve_capture_sizes(max_num_seqs, max_num_batched_tokens, &at)?
        };
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
            long_prefill_token_threshold,
            enable_prefix_caching: self.enable_prefix_caching.unwrap_or(true),
            async_scheduling: self.async_scheduling.unwrap_or(true),
            enforce_eager,
            cudagraph_capture_sizes,
            kv_cache_memory_bytes: self.kv_cache_memory_bytes,
            prefix_caching_hash_algo,
            scheduling_policy: policy,
            kv_cache_dtype,
            quantization: self.quantization.clone(),
            offload,
            nixl,
        })
    }
}

impl VllmArgs {
    /// The capture sizes as `VllmConfig._set_cudagraph_sizes` settles them.
    fn resolve_capture_sizes(
        &self,
        max_num_seqs: u32,
        max_num_batched_tokens: u32,
        at: &dyn Fn(&str) -> String,
    ) -> Result<Vec<u32>, FieldError> {
        let largest = self
            .max_cudagraph_capture_size
            .unwrap_or(max_num_seqs.saturating_mul(2).min(512))
            .min(max_num_batched_tokens);
        let sizes = match &self.cudagraph_capture_sizes {
            Some(given) => {
                if given.is_empty() {
                    return Err(FieldError::new(
                        at("cudagraph_capture_sizes"),
                        "[]",
                        "cudagraph_capture_sizes should contain at least one element when using cuda graph.",
                    ));
                }
                if let Some(i) = given.iter().position(|&size| size == 0) {
                    return Err(FieldError::new(
                        format!("{}[{i}]", at("cudagraph_capture_sizes")),
                        0,
                        "a capture size is a batch size of at least 1 token",
                    ));
                }
                let mut sizes: Vec<u32> =
                    given.iter().copied().filter(|&size| size <= max_num_batched_tokens).collect();
                sizes.sort_unstable();
                sizes.dedup();
                sizes
            }
            None => default_capture_sizes(largest),
        };
        if let (Some(given), Some(&last)) = (self.max_cudagraph_capture_size, sizes.last())
            && self.cudagraph_capture_sizes.is_some()
            && given != last
        {
            return Err(FieldError::new(
                at("max_cudagraph_capture_size"),
                given,
                format!(
                    "customized max_cudagraph_capture_size(={given}) should be consistent with the max value of cudagraph_capture_sizes(={last})"
                ),
            ));
        }
        if largest == 0 || sizes.first() == Some(&0) {
            return Err(FieldError::new(
                at("max_cudagraph_capture_size"),
                largest,
                "Maximum cudagraph size should be greater than or equal to 1 when using cuda graph.",
            ));
        }
        Ok(sizes)
    }
}

fn positive(value: u32, path: &str) -> Result<u32, FieldError> {
    if value == 0 { Err(FieldError::new(path, 0, "must be at least 1")) } else { Ok(value) }
}

/// vLLM's default CUDA-graph capture sizes: 1, 2, 4, then every 8 below 256, then every 16,
/// up to `min(2 × max_num_seqs, 512, max_num_batched_tokens)`.
pub fn capture_sizes(max_num_seqs: u32, max_num_batched_tokens: u32) -> Vec<u32> {
    default_capture_sizes(max_num_seqs.saturating_mul(2).min(512).min(max_num_batched_tokens))
}

/// 1, 2, 4, then every 8 below 256, then every 16, up to `largest`.
fn default_capture_sizes(largest: u32) -> Vec<u32> {
    let mut sizes: Vec<u32> = [1, 2, 4].into_iter().filter(|&size| size <= largest).collect();
    sizes.extend((8..(largest + 1).min(256)).step_by(8));
    if largest >= 256 {
        sizes.extend((256..=largest).step_by(16));
    }
    sizes
}
