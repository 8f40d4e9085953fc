//! Every engine argument of vLLM 0.15.1 (`EngineArgs`) and what this port does with it: models
//! it, accepts it as proven inert, or refuses it by name with the reason.
//!
//! The list is checked against `engine_args_0.15.1.txt` (the dataclass fields, dumped from the
//! release) and rendered in `FIELDS.md`; the tests keep all three in step.

/// What the port does with one argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Treatment {
    /// Read by the port and simulated.
    Modelled,
    /// Accepted and ignored: it cannot change a simulated result. `sample` is a value the inert
    /// test sets (YAML) to prove it.
    Inert {
        /// Why it cannot matter.
        why: &'static str,
        /// A non-default value, as YAML.
        sample: &'static str,
    },
    /// Read and simulated at some values only; any other value is refused with `why`.
    Limited {
        /// Which values are modelled and why the others are not.
        why: &'static str,
    },
    /// Refused when set: the port does not model what it changes.
    Refused {
        /// What is not modelled.
        why: &'static str,
    },
}

use Treatment::{Inert, Limited, Modelled, Refused};

const PARALLEL: &str = "this parallelism is not modelled yet (tensor parallelism is)";
const MULTIMODAL: &str = "multimodal inputs are not modelled";
const LORA: &str = "LoRA adapters are not modelled yet";
const LOGGING: &str = "logging, tracing or metrics export only; no scheduling or timing effect";
const LOADING: &str = "model loading only; the simulated model comes from the catalog";
const NETWORK: &str = "process addresses only; no scheduling or timing effect";

/// Every `EngineArgs` field of vLLM 0.15.1, in the dataclass's order.
pub const ARGUMENTS: &[(&str, Treatment)] = &[
    ("model", Refused { why: "the pool's `model` names the served model" }),
    ("enable_return_routed_experts", Refused { why: "returning routed experts is not modelled" }),
    ("model_weights", Refused { why: "weights come from the catalog's model facts" }),
    ("served_model_name", Inert { why: "an API name only", sample: "served" }),
    ("tokenizer", Inert { why: "requests arrive as token ids", sample: "some/tokenizer" }),
    ("hf_config_path", Refused { why: "the model's facts come from the catalog (use --model-config)" }),
    ("runner", Refused { why: "only generation runners are modelled" }),
    ("convert", Refused { why: "model conversion (pooling) is not modelled" }),
    ("skip_tokenizer_init", Inert { why: "requests arrive as token ids", sample: "true" }),
    ("enable_prompt_embeds", Refused { why: "prompt embeddings are not modelled" }),
    ("tokenizer_mode", Inert { why: "requests arrive as token ids", sample: "slow" }),
    ("trust_remote_code", Inert { why: LOADING, sample: "true" }),
    ("allowed_local_media_path", Refused { why: MULTIMODAL }),
    ("allowed_media_domains", Refused { why: MULTIMODAL }),
    ("download_dir", Inert { why: LOADING, sample: "/tmp/models" }),
    ("safetensors_load_strategy", Inert { why: LOADING, sample: "eager" }),
    ("load_format", Inert { why: LOADING, sample: "safetensors" }),
    ("config_format", Inert { why: LOADING, sample: "hf" }),
    ("dtype", Refused { why: "the compute dtype comes from the catalog's model facts" }),
    ("kv_cache_dtype", Modelled),
    ("seed", Inert { why: "output tokens are drawn by the client, not sampled by the engine", sample: "7" }),
    ("max_model_len", Modelled),
    ("cudagraph_capture_sizes", Modelled),
    ("max_cudagraph_capture_size", Modelled),
    (
        "distributed_executor_backend",
        Refused { why: "executor backends (ray) change async scheduling and are not modelled" },
    ),
    (
        "pipeline_parallel_size",
        Limited {
            why: "only 1 is accepted; pipeline parallelism is not modelled yet, so any other value is refused",
        },
    ),
    ("master_addr", Inert { why: NETWORK, sample: "10.0.0.1" }),
    ("master_port", Inert { why: NETWORK, sample: "29600" }),
    ("nnodes", Refused { why: "multi-node instances are not modelled" }),
    ("node_rank", Inert { why: NETWORK, sample: "0" }),
    ("tensor_parallel_size", Modelled),
    ("prefill_context_parallel_size", Refused { why: PARALLEL }),
    ("decode_context_parallel_size", Refused { why: PARALLEL }),
    ("dcp_kv_cache_interleave_size", Refused { why: PARALLEL }),
    ("cp_kv_cache_interleave_size", Refused { why: PARALLEL }),
    (
        "data_parallel_size",
        Refused { why: "data parallelism inside one instance is not modelled; use replicas" },
    ),
    ("data_parallel_rank", Refused { why: PARALLEL }),
    ("data_parallel_start_rank", Refused { why: PARALLEL }),
    ("data_parallel_size_local", Refused { why: PARALLEL }),
    ("data_parallel_address", Refused { why: PARALLEL }),
    ("data_parallel_rpc_port", Refused { why: PARALLEL }),
    ("data_parallel_hybrid_lb", Refused { why: PARALLEL }),
    ("data_parallel_external_lb", Refused { why: PARALLEL }),
    ("data_parallel_backend", Refused { why: PARALLEL }),
    ("enable_expert_parallel", Refused { why: PARALLEL }),
    ("all2all_backend", Refused { why: PARALLEL }),
    ("enable_dbo", Refused { why: "dual-batch overlap is not modelled" }),
    ("ubatch_size", Refused { why: "micro-batching is not modelled" }),
    ("dbo_decode_token_threshold", Refused { why: "dual-batch overlap is not modelled" }),
    ("dbo_prefill_token_threshold", Refused { why: "dual-batch overlap is not modelled" }),
    ("disable_nccl_for_dp_synchronization", Refused { why: PARALLEL }),
    ("eplb_config", Refused { why: "expert load balancing is not modelled" }),
    ("enable_eplb", Refused { why: "expert load balancing is not modelled" }),
    ("expert_placement_strategy", Refused { why: PARALLEL }),
    ("_api_process_count", Refused { why: "internal to vLLM's API server" }),
    ("_api_process_rank", Refused { why: "internal to vLLM's API server" }),
    ("max_parallel_loading_workers", Inert { why: LOADING, sample: "2" }),
    ("block_size", Modelled),
    ("enable_prefix_caching", Modelled),
    ("prefix_caching_hash_algo", Modelled),
    ("disable_sliding_window", Refused { why: "sliding-window attention is not lowered yet" }),
    (
        "disable_cascade_attn",
        Inert { why: "the cost model prices attention without cascade kernels either way", sample: "true" },
    ),
    ("swap_space", Refused { why: "CPU swap space is not modelled" }),
    ("cpu_offload_gb", Refused { why: "weight offloading to CPU is not modelled" }),
    ("gpu_memory_utilization", Modelled),
    ("kv_cache_memory_bytes", Modelled),
    ("max_num_batched_tokens", Modelled),
    ("max_num_partial_prefills", Modelled),
    ("max_long_partial_prefills", Modelled),
    ("long_prefill_token_threshold", Modelled),
    ("max_num_seqs", Modelled),
    ("max_logprobs", Inert { why: "logprobs are not returned by the simulated engine", sample: "5" }),
    (
        "logprobs_mode",
        Inert { why: "logprobs are not returned by the simulated engine", sample: "processed_logprobs" },
    ),
    ("disable_log_stats", Inert { why: LOGGING, sample: "true" }),
    ("aggregate_engine_logging", Inert { why: LOGGING, sample: "true" }),
    ("revision", Inert { why: LOADING, sample: "main" }),
    ("code_revision", Inert { why: LOADING, sample: "main" }),
    ("hf_token", Inert { why: LOADING, sample: "token" }),
    ("hf_overrides", Refused { why: "model config overrides: give the model's facts with --model-config" }),
    ("tokenizer_revision", Inert { why: LOADING, sample: "main" }),
    ("quantization", Modelled),
    ("allow_deprecated_quantization", Inert { why: "a load-time permission only", sample: "true" }),
    ("enforce_eager", Modelled),
    ("disable_custom_all_reduce", Refused { why: "NCCL-only all-reduce has no coefficients yet" }),
    ("limit_mm_per_prompt", Refused { why: MULTIMODAL }),
    ("enable_mm_embeds", Refused { why: MULTIMODAL }),
    ("interleave_mm_strings", Refused { why: MULTIMODAL }),
    ("media_io_kwargs", Refused { why: MULTIMODAL }),
    ("mm_processor_kwargs", Refused { why: MULTIMODAL }),
    ("mm_processor_cache_gb", Refused { why: MULTIMODAL }),
    ("mm_processor_cache_type", Refused { why: MULTIMODAL }),
    ("mm_shm_cache_max_object_size_mb", Refused { why: MULTIMODAL }),
    ("mm_encoder_only", Refused { why: MULTIMODAL }),
    ("mm_encoder_tp_mode", Refused { why: MULTIMODAL }),
    ("mm_encoder_attn_backend", Refused { why: MULTIMODAL }),
    ("io_processor_plugin", Refused { why: "IO processor plugins are not modelled" }),
    ("skip_mm_profiling", Refused { why: MULTIMODAL }),
    ("video_pruning_rate", Refused { why: MULTIMODAL }),
    ("enable_lora", Refused { why: LORA }),
    ("max_loras", Refused { why: LORA }),
    ("max_lora_rank", Refused { why: LORA }),
    ("default_mm_loras", Refused { why: LORA }),
    ("fully_sharded_loras", Refused { why: LORA }),
    ("max_cpu_loras", Refused { why: LORA }),
    ("lora_dtype", Refused { why: LORA }),
    ("enable_tower_connector_lora", Refused { why: LORA }),
    ("ray_workers_use_nsight", Inert { why: LOGGING, sample: "true" }),
    ("num_gpu_blocks_override", Modelled),
    ("model_loader_extra_config", Inert { why: LOADING, sample: "{}" }),
    ("ignore_patterns", Inert { why: LOADING, sample: "[\"*.pt\"]" }),
    ("enable_chunked_prefill", Modelled),
    ("disable_chunked_mm_input", Refused { why: MULTIMODAL }),
    (
        "disable_hybrid_kv_cache_manager",
        Inert {
            why: "every model the port lowers has one KV-cache group, so the manager is the same",
            sample: "true",
        },
    ),
    ("structured_outputs_config", Refused { why: "structured outputs (grammar masks) are not modelled" }),
    ("reasoning_parser", Inert { why: "output parsing after generation only", sample: "deepseek_r1" }),
    ("reasoning_parser_plugin", Inert { why: "output parsing after generation only", sample: "plugin.py" }),
    ("logits_processor_pattern", Refused { why: "custom logits processors are not modelled" }),
    ("speculative_config", Refused { why: "speculative decoding is not modelled yet" }),
    ("show_hidden_metrics_for_version", Inert { why: LOGGING, sample: "0.14" }),
    ("otlp_traces_endpoint", Inert { why: LOGGING, sample: "http://collector:4317" }),
    ("collect_detailed_traces", Inert { why: LOGGING, sample: "[\"all\"]" }),
    ("kv_cache_metrics", Inert { why: LOGGING, sample: "true" }),
    ("kv_cache_metrics_sample", Inert { why: LOGGING, sample: "0.5" }),
    ("cudagraph_metrics", Inert { why: LOGGING, sample: "true" }),
    ("enable_layerwise_nvtx_tracing", Inert { why: LOGGING, sample: "true" }),
    ("enable_mfu_metrics", Inert { why: LOGGING, sample: "true" }),
    ("enable_logging_iteration_details", Inert { why: LOGGING, sample: "true" }),
    ("enable_mm_processor_stats", Inert { why: LOGGING, sample: "true" }),
    ("scheduling_policy", Modelled),
    ("scheduler_cls", Refused { why: "only vLLM's own scheduler is ported" }),
    ("pooler_config", Refused { why: "pooling models are not modelled" }),
    (
        "compilation_config",
        Refused { why: "set enforce_eager, cudagraph_capture_sizes or max_cudagraph_capture_size instead" },
    ),
    ("attention_config", Refused { why: "attention backends are not told apart by the cost model yet" }),
    ("worker_cls", Refused { why: "custom workers are not modelled" }),
    ("worker_extension_cls", Refused { why: "custom workers are not modelled" }),
    ("profiler_config", Inert { why: LOGGING, sample: "{}" }),
    (
        "kv_transfer_config",
        Limited {
            why: "OffloadingConnector (lru, CPUOffloadingSpec) is modelled; every other connector (NixlConnector, \
                  P2pNcclConnector, LMCacheConnectorV1, LMCacheMPConnector, MultiConnector, MoRIIOConnector, \
                  DecodeBenchConnector, MooncakeConnector, ExampleConnector, a kv_connector_module_path) is refused \
                  by name, and eviction_policy arc with 0.15.1's own failure",
        },
    ),
    (
        "kv_events_config",
        Inert {
            why: "the transport of KV events only; the port always produces them (its presence also turns the \
                  hybrid KV-cache manager off, which decides whether kv_offloading_size alone is accepted)",
            sample: "{}",
        },
    ),
    ("ec_transfer_config", Refused { why: "encoder-cache transfer is not modelled" }),
    (
        "generation_config",
        Inert { why: "sampling defaults only; output lengths come from the workload", sample: "vllm" },
    ),
    ("enable_sleep_mode", Inert { why: "sleeping is never requested in a simulation", sample: "true" }),
    (
        "override_generation_config",
        Inert { why: "sampling defaults only; output lengths come from the workload", sample: "{}" },
    ),
    ("model_impl", Refused { why: "model implementations are not told apart by the cost model" }),
    ("override_attention_dtype", Refused { why: "attention dtype overrides are not modelled" }),
    ("attention_backend", Refused { why: "attention backends are not told apart by the cost model yet" }),
    ("calculate_kv_scales", Refused { why: "FP8 KV scale calculation is not priced" }),
    ("mamba_cache_dtype", Refused { why: "hybrid (Mamba) models are not lowered" }),
    ("mamba_ssm_cache_dtype", Refused { why: "hybrid (Mamba) models are not lowered" }),
    ("mamba_block_size", Refused { why: "hybrid (Mamba) models are not lowered" }),
    ("mamba_cache_mode", Refused { why: "hybrid (Mamba) models are not lowered" }),
    ("additional_config", Refused { why: "platform-specific configuration is not modelled" }),
    ("use_tqdm_on_load", Inert { why: LOADING, sample: "false" }),
    ("pt_load_map_location", Inert { why: LOADING, sample: "cuda" }),
    ("logits_processors", Refused { why: "custom logits processors are not modelled" }),
    ("async_scheduling", Modelled),
    (
        "stream_interval",
        Refused { why: "streaming tokens in batches changes when the client sees them; not modelled yet" },
    ),
    ("kv_sharing_fast_prefill", Refused { why: "KV sharing across layers is not modelled" }),
    ("optimization_level", Refused { why: "compilation levels are not told apart by the cost model" }),
    ("kv_offloading_size", Modelled),
    (
        "kv_offloading_backend",
        Limited { why: "native (OffloadingConnector) is modelled; lmcache (LMCacheConnectorV1) is refused" },
    ),
    ("tokens_only", Refused { why: "the token-only API mode is not modelled" }),
];

/// The port's treatment of the argument `name`, if vLLM 0.15.1 has it.
pub fn treatment(name: &str) -> Option<Treatment> {
    ARGUMENTS.iter().find(|(argument, _)| *argument == name).map(|&(_, treatment)| treatment)
}
