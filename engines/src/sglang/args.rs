//! SGLang's server arguments as a scenario gives them (`engine.args`), and what the scenario
//! alone decides of them.
//!
//! Names are `ServerArgs`' own (`--max-running-requests` is `max_running_requests` here). Every
//! field of the release is modelled, accepted as inert, or refused by name with the reason (see
//! [`super::fields`]); a name the release does not have is refused as unknown. What the GPU and
//! the KV pool decide (the chunk, the memory fraction, the running cap) is resolved by
//! [`super::plan`].

use blis_contracts::yaml::{self, YamlValue};
use blis_contracts::{Dtype, FieldError, ModelArchitecture};
use serde::Deserialize;

use super::fields::treatment;
use super::radix_cache::EvictionPolicy;
use super::scheduler::SchedulePolicy;
use crate::fields::screen;

/// The SGLang release this build models.
pub const SGLANG_VERSION: &str = "0.5.23";

/// Largest page size the radix cache accepts.
const MAX_PAGE_SIZE: u32 = 256;

/// Server arguments as written in a scenario, all optional.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SglangArgs {
    /// GPUs per instance sharing each layer.
    pub tp_size: Option<u32>,
    /// Pipeline stages (only 1).
    pub pp_size: Option<u32>,
    /// Data-parallel workers inside the server (only 1).
    pub dp_size: Option<u32>,
    /// Longest prompt plus output; the model's maximum when unset.
    pub context_length: Option<u32>,
    /// Share of GPU memory for weights and the KV pool.
    pub mem_fraction_static: Option<f64>,
    /// Running requests at most.
    pub max_running_requests: Option<u32>,
    /// Cap on the KV pool's tokens.
    pub max_total_tokens: Option<u64>,
    /// Tokens per prefill chunk; zero or negative turns chunking off.
    pub chunked_prefill_size: Option<i64>,
    /// Prompt tokens one prefill batch takes at most.
    pub max_prefill_tokens: Option<u32>,
    /// Waiting-queue order: fcfs, lof, lpm, dfs-weight or random.
    pub schedule_policy: Option<String>,
    /// Scales the initial `new_token_ratio` (how much decode room admission reserves).
    pub schedule_conservativeness: Option<f64>,
    /// Tokens per KV page.
    pub page_size: Option<u32>,
    /// Which unlocked leaves the radix cache evicts first.
    pub radix_eviction_policy: Option<String>,
    /// Run the normal loop instead of the overlap loop.
    pub disable_overlap_schedule: Option<bool>,
    /// Let prefill batches carry the running requests' decodes.
    pub enable_mixed_chunk: Option<bool>,
    /// KV element format: `auto` or an FP8 format.
    pub kv_cache_dtype: Option<String>,
    /// Largest decode batch captured as a CUDA graph.
    pub cuda_graph_max_bs_decode: Option<u32>,
    /// No CUDA graphs at all.
    pub disable_cuda_graph: Option<bool>,
    /// No decode CUDA graphs.
    pub disable_decode_cuda_graph: Option<bool>,
    /// No prefill CUDA graphs.
    pub disable_prefill_cuda_graph: Option<bool>,
    /// Capture every decode batch size instead of padding to the next captured one.
    pub disable_cuda_graph_padding: Option<bool>,
    /// Decode steps between two updates of the scheduler's Prometheus gauges.
    pub decode_log_interval: Option<u32>,
}

/// What the scenario alone decides, before the GPU and the pool are known.
#[derive(Clone, Debug, PartialEq)]
pub struct ArgsChoice {
    /// Tensor-parallel degree.
    pub tp_size: u32,
    /// Longest prompt plus output.
    pub context_length: u32,
    /// The memory fraction, when given.
    pub mem_fraction_static: Option<f64>,
    /// The running cap, when given.
    pub max_running_requests: Option<u32>,
    /// The pool cap, when given.
    pub max_total_tokens: Option<u64>,
    /// The chunk as given: `None` unset, `Some(None)` chunking off, `Some(Some(n))` n tokens.
    pub chunked_prefill_size: Option<Option<u32>>,
    /// `max_prefill_tokens`.
    pub max_prefill_tokens: u32,
    /// Queue order.
    pub schedule_policy: SchedulePolicy,
    /// Its name as given.
    pub schedule_policy_name: String,
    /// `schedule_conservativeness`.
    pub schedule_conservativeness: f64,
    /// Tokens per page.
    pub page_size: u32,
    /// Eviction order.
    pub radix_eviction_policy: EvictionPolicy,
    /// Its name as given.
    pub radix_eviction_policy_name: String,
    /// The overlap loop.
    pub overlap: bool,
    /// Mixed chunk as asked for (it needs chunking to take effect).
    pub enable_mixed_chunk: bool,
    /// KV element format as given, and the dtype it stores.
    pub kv_cache_dtype: (String, Dtype),
    /// The decode graphs' largest batch, when given.
    pub cuda_graph_max_bs_decode: Option<u32>,
    /// Decode graphs captured.
    pub decode_graphs: bool,
    /// Prefill graphs captured.
    pub prefill_graphs: bool,
    /// Padding decode batches to captured sizes.
    pub graph_padding: bool,
    /// `decode_log_interval`.
    pub decode_log_interval: u32,
}

impl SglangArgs {
    /// Read `engine.args` found at `path`: every name is checked against SGLang 0.5.23's fields
    /// first, so a refused one is named with its reason and an inert one is dropped.
    pub fn from_yaml(value: &YamlValue, path: &str) -> Result<SglangArgs, FieldError> {
        let mut modelled = value.clone();
        screen(&mut modelled, path, &format!("an SGLang {SGLANG_VERSION}"), treatment)?;
        yaml::from_value(&modelled, path)
    }

    /// Check every given value against `model` and resolve what needs neither the GPU nor the
    /// pool; `path` is where these args sit in the scenario.
    pub fn choose(&self, model: &ModelArchitecture, path: &str) -> Result<ArgsChoice, FieldError> {
        let at = |field: &str| format!("{path}.{field}");
        for (field, value) in [("pp_size", self.pp_size), ("dp_size", self.dp_size)] {
            if let Some(v) = value.filter(|&v| v != 1) {
                return Err(FieldError::new(
                    at(field),
                    v,
                    "only 1 is modelled: this parallelism inside one server is not (use replicas or tp_size)",
                ));
            }
        }
        let tp_size = self.tp_size.unwrap_or(1);
        if tp_size == 0 || tp_size > 64 || !model.num_attention_heads.is_multiple_of(tp_size) {
            return Err(FieldError::new(
                at("tp_size"),
                tp_size,
                format!(
                    "SGLang needs the {} attention heads of {} to divide evenly over the tensor-parallel ranks (1 to 64)",
                    model.num_attention_heads, model.name
                ),
            ));
        }
        let longest = model.max_position_embeddings;
        let context_length = self.context_length.unwrap_or(longest);
        if context_length == 0 || context_length > longest {
            return Err(FieldError::new(
                at("context_length"),
                context_length,
                format!(
                    "SGLang refuses a context length above the model's derived one ({longest} tokens, max_position_embeddings) and a zero one"
                ),
            ));
        }
        if let Some(f) = self.mem_fraction_static
            && !(f > 0.0 && f < 1.0)
        {
            return Err(FieldError::new(
                at("mem_fraction_static"),
                f,
                "a share of GPU memory, above 0 and below 1",
            ));
        }
        if let Some(n) = self.max_running_requests
            && !(1..=1 << 20).contains(&n)
        {
            return Err(FieldError::new(at("max_running_requests"), n, "between 1 and 1048576 requests"));
        }
        if let Some(n) = self.max_total_tokens
            && !(1..=1 << 32).contains(&n)
        {
            return Err(FieldError::new(at("max_total_tokens"), n, "between 1 and 2^32 tokens"));
        }
        let chunked_prefill_size = match self.chunked_prefill_size {
            None => None,
            Some(n) if n <= 0 => Some(None),
            Some(n) if n <= 1 << 20 => Some(Some(n as u32)),
            Some(n) => {
                return Err(FieldError::new(
                    at("chunked_prefill_size"),
                    n,
                    "at most 1048576 tokens per chunk (zero or negative turns chunking off)",
                ));
            }
        };
        let max_prefill_tokens = self.max_prefill_tokens.unwrap_or(16_384);
        if !(1..=1 << 20).contains(&max_prefill_tokens) {
            return Err(FieldError::new(
                at("max_prefill_tokens"),
                max_prefill_tokens,
                "between 1 and 1048576 tokens",
            ));
        }
        let schedule_policy_name = self.schedule_policy.clone().unwrap_or_else(|| "fcfs".to_owned());
        let schedule_policy = match schedule_policy_name.as_str() {
            "fcfs" => SchedulePolicy::Fcfs,
            "lof" => SchedulePolicy::Lof,
            "lpm" => SchedulePolicy::Lpm,
            "dfs-weight" => SchedulePolicy::DfsWeight,
            "random" => SchedulePolicy::Random,
            "priority" | "hrrn" | "spf" | "routing-key" => {
                return Err(FieldError::new(
                    at("schedule_policy"),
                    &schedule_policy_name,
                    "an SGLang 0.5.23 policy this build does not port yet (fcfs, lof, lpm, dfs-weight and random are)",
                ));
            }
            _ => {
                return Err(FieldError::new(
                    at("schedule_policy"),
                    &schedule_policy_name,
                    "SGLang accepts fcfs, lof, lpm, dfs-weight, random, priority, hrrn, spf or routing-key",
                ));
            }
        };
        let schedule_conservativeness = self.schedule_conservativeness.unwrap_or(1.0);
        if !(0.01..=100.0).contains(&schedule_conservativeness) {
            return Err(FieldError::new(
                at("schedule_conservativeness"),
                schedule_conservativeness,
                "a factor between 0.01 and 100 on the decode room admission reserves",
            ));
        }
        let page_size = self.page_size.unwrap_or(1);
        if page_size == 0 || page_size > MAX_PAGE_SIZE {
            return Err(FieldError::new(at("page_size"), page_size, "between 1 and 256 tokens per page"));
        }
        let radix_eviction_policy_name =
            self.radix_eviction_policy.clone().unwrap_or_else(|| "lru".to_owned());
        let radix_eviction_policy = EvictionPolicy::parse(&radix_eviction_policy_name).map_err(|e| {
            FieldError::new(at("radix_eviction_policy"), &radix_eviction_policy_name, e.to_string())
        })?;
        let dtype_name = self.kv_cache_dtype.clone().unwrap_or_else(|| "auto".to_owned());
        let kv_dtype = match dtype_name.as_str() {
            "auto" => model.compute_dtype,
            "fp8_e4m3" | "fp8_e5m2" => Dtype::Fp8,
            _ => {
                return Err(FieldError::new(
                    at("kv_cache_dtype"),
                    &dtype_name,
                    "auto, fp8_e4m3 and fp8_e5m2 are modelled; other KV formats are not",
                ));
            }
        };
        if let Some(bs) = self.cuda_graph_max_bs_decode
            && !(1..=4096).contains(&bs)
        {
            return Err(FieldError::new(at("cuda_graph_max_bs_decode"), bs, "between 1 and 4096 requests"));
        }
        let decode_log_interval = self.decode_log_interval.unwrap_or(40);
        if !(1..=1_000_000).contains(&decode_log_interval) {
            return Err(FieldError::new(
                at("decode_log_interval"),
                decode_log_interval,
                "between 1 and 1000000 steps",
            ));
        }
        let no_graphs = self.disable_cuda_graph.unwrap_or(false);
        Ok(ArgsChoice {
            tp_size,
            context_length,
            mem_fraction_static: self.mem_fraction_static,
            max_running_requests: self.max_running_requests,
            max_total_tokens: self.max_total_tokens,
            chunked_prefill_size,
            max_prefill_tokens,
            schedule_policy,
            schedule_policy_name,
            schedule_conservativeness,
            page_size,
            radix_eviction_policy,
            radix_eviction_policy_name,
            overlap: !self.disable_overlap_schedule.unwrap_or(false),
            enable_mixed_chunk: self.enable_mixed_chunk.unwrap_or(false),
            kv_cache_dtype: (dtype_name, kv_dtype),
            cuda_graph_max_bs_decode: self.cuda_graph_max_bs_decode,
            decode_graphs: !no_graphs && !self.disable_decode_cuda_graph.unwrap_or(false),
            prefill_graphs: !no_graphs && !self.disable_prefill_cuda_graph.unwrap_or(false),
            graph_padding: !self.disable_cuda_graph_padding.unwrap_or(false),
            decode_log_interval,
        })
    }
}
