//! Hugging Face `config.json`: the fields serving depends on, read into a [`ModelArchitecture`].
//!
//! A config is an external format with many more fields, so unknown fields are ignored — but
//! every field that changes what serving costs is either priced or refused with its path and
//! why, never dropped: a multimodal wrapper's text model is read from `text_config` and its
//! encoder towers sized for memory ([`encoder`]); `quantization_config` decides the weight and
//! GEMM formats ([`quantization`]); the experts are read by their family's field names
//! ([`moe`]); attention that mixes layer kinds (interleaved sliding windows, chunked local
//! attention, cross-attention) is refused by name, since vLLM's hybrid KV-cache manager is not
//! ported. What is read but decided elsewhere is returned as a note.

pub mod encoder;
pub mod moe;
pub mod quantization;

use blis_contracts::{AttentionKind, Dtype, FieldError, ModelArchitecture};
use serde::Deserialize;

use encoder::EncoderConfig;
use quantization::{Formats, QuantizationConfig};

/// The fields of a Hugging Face `config.json` that serving depends on.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct HfConfig {
    /// The architecture family (`llama`, `qwen2_moe`, `llama4_text`, …).
    pub model_type: Option<String>,
    /// Transformer layers.
    pub num_hidden_layers: Option<u32>,
    /// Residual width.
    pub hidden_size: Option<u32>,
    /// Query heads.
    pub num_attention_heads: Option<u32>,
    /// Key/value heads (defaults to the query heads).
    pub num_key_value_heads: Option<u32>,
    /// Head width (defaults to `hidden_size / num_attention_heads`).
    pub head_dim: Option<u32>,
    /// MLP width (Mixtral and Llama 4: also each expert's).
    pub intermediate_size: Option<u32>,
    /// Vocabulary.
    pub vocab_size: Option<u32>,
    /// Longest sequence.
    pub max_position_embeddings: Option<u32>,
    /// Shared input/output embedding (default false).
    pub tie_word_embeddings: Option<bool>,
    /// Weight format (transformers before 4.56).
    pub torch_dtype: Option<String>,
    /// Weight format (transformers 4.56 and later).
    pub dtype: Option<String>,
    /// Sliding-window attention span, if any.
    pub sliding_window: Option<u32>,
    /// Whether the sliding window is used (Qwen2-style configs set it false).
    pub use_sliding_window: Option<bool>,
    /// Qwen2: layers from this index on use the sliding window (when it is used).
    pub max_window_layers: Option<u32>,
    /// Each layer's attention kind (`full_attention`, `sliding_attention`, …).
    pub layer_types: Option<Vec<String>>,
    /// Gemma 2/3: every n-th layer full, the rest sliding.
    pub sliding_window_pattern: Option<u32>,
    /// Llama 4: chunked local attention span.
    pub attention_chunk_size: Option<u32>,
    /// Mllama: layers that cross-attend to image states.
    pub cross_attention_layers: Option<Vec<u32>>,
    /// Routed experts (Mixtral, Llama 4).
    pub num_local_experts: Option<u32>,
    /// Routed experts (Qwen2-MoE, Qwen3-MoE).
    pub num_experts: Option<u32>,
    /// Routed experts (DeepSeek).
    pub n_routed_experts: Option<u32>,
    /// Routed experts each token visits.
    pub num_experts_per_tok: Option<u32>,
    /// Width of one expert (Qwen, DeepSeek).
    pub moe_intermediate_size: Option<u32>,
    /// Width of the shared expert (Qwen2-MoE).
    pub shared_expert_intermediate_size: Option<u32>,
    /// Every n-th layer is MoE (Qwen).
    pub decoder_sparse_step: Option<u32>,
    /// Layers with a dense MLP (Qwen).
    pub mlp_only_layers: Option<Vec<u32>>,
    /// Shared experts every token visits (DeepSeek).
    pub n_shared_experts: Option<u32>,
    /// Leading layers with a dense MLP (DeepSeek).
    pub first_k_dense_replace: Option<u32>,
    /// Every n-th layer after the dense ones is MoE (DeepSeek).
    pub moe_layer_freq: Option<u32>,
    /// Every n-th layer is MoE (Llama 4).
    pub interleave_moe_layer_step: Option<u32>,
    /// Width of the dense MLP of non-MoE layers (Llama 4).
    pub intermediate_size_mlp: Option<u32>,
    /// Compressed key/value width (multi-head latent attention).
    pub kv_lora_rank: Option<u32>,
    /// Compressed query width (multi-head latent attention).
    pub q_lora_rank: Option<u32>,
    /// Per-head query/key width without RoPE (multi-head latent attention).
    pub qk_nope_head_dim: Option<u32>,
    /// Per-head query/key width with RoPE (multi-head latent attention).
    pub qk_rope_head_dim: Option<u32>,
    /// Per-head value width (multi-head latent attention).
    pub v_head_dim: Option<u32>,
    /// How the checkpoint's weights are quantized, if they are.
    pub quantization_config: Option<QuantizationConfig>,
    /// A multimodal wrapper's text model.
    pub text_config: Option<Box<HfConfig>>,
    /// A multimodal wrapper's vision encoder.
    pub vision_config: Option<EncoderConfig>,
    /// A multimodal wrapper's audio encoder.
    pub audio_config: Option<EncoderConfig>,
}

/// A model read from a config, with what was read but is decided elsewhere.
#[derive(Clone, Debug, PartialEq)]
pub struct ReadModel {
    /// The architecture.
    pub architecture: ModelArchitecture,
    /// Fields read and not priced here, each with where it is decided (e.g. an FP8 KV-cache
    /// scheme the engine's `kv_cache_dtype` decides, an encoder counted in memory only).
    pub notes: Vec<String>,
}

/// Text-model fields a wrapper's top level may repeat; they must agree with `text_config`.
const REPEATED: [&str; 6] = [
    "num_hidden_layers",
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "vocab_size",
];

impl HfConfig {
    /// The architecture these fields describe, named `name`; refuses missing, zero or
    /// unpriceable fields by path.
    pub fn architecture(&self, name: &str) -> Result<ReadModel, FieldError> {
        let mut notes = Vec::new();
        let (text, prefix) = match &self.text_config {
            Some(text) => (text.as_ref(), "text_config"),
            None => (self, ""),
        };
        let within = |e: FieldError, prefix: &str| if prefix.is_empty() { e } else { e.within(prefix) };
        if let Some(text) = &self.text_config {
            if text.text_config.is_some() || text.vision_config.is_some() || text.audio_config.is_some() {
                return Err(FieldError::at(
                    "text_config",
                    "a text model cannot wrap another model or an encoder",
                ));
            }
            for field in REPEATED {
                let (top, inner) = (self.field(field), text.field(field));
                if let (Some(top), Some(inner)) = (top, inner)
                    && top != inner
                {
                    return Err(FieldError::new(
                        field,
                        top,
                        format!(
                            "differs from text_config.{field} ({inner}); which one the server uses is ambiguous"
                        ),
                    ));
                }
            }
        }
        let (dtype_path, dtype) = [
            (prefix, "torch_dtype", &text.torch_dtype),
            (prefix, "dtype", &text.dtype),
            ("", "torch_dtype", &self.torch_dtype),
            ("", "dtype", &self.dtype),
        ]
        .into_iter()
        .find_map(|(p, f, v)| v.as_deref().map(|v| (blis_contracts::join_path(p, f), v)))
        .ok_or_else(|| {
            FieldError::at(
                blis_contracts::join_path(prefix, "torch_dtype"),
                "missing from the model config (nor dtype)",
            )
        })?;
        let compute = match dtype {
            "bfloat16" => Dtype::Bfloat16,
            "float16" => Dtype::Float16,
            "float32" => Dtype::Float32,
            other => {
                return Err(FieldError::new(dtype_path, other, "not a compute format the catalog knows"));
            }
        };
        let quantization = match (&text.quantization_config, &self.quantization_config) {
            (Some(q), _) => Some((blis_contracts::join_path(prefix, "quantization_config"), q)),
            (None, Some(q)) => Some(("quantization_config".to_owned(), q)),
            (None, None) => None,
        };
        let formats = match quantization {
            Some((path, q)) => q.formats(compute, &mut notes).map_err(|e| e.within(&path))?,
            None => Formats { weight: compute, gemm: compute },
        };
        let tie = text.tie_word_embeddings.or(self.tie_word_embeddings).unwrap_or(false);
        let mut architecture = text.text_model(name, compute, formats, tie).map_err(|e| within(e, prefix))?;
        for (field, tower) in [("vision_config", &self.vision_config), ("audio_config", &self.audio_config)] {
            if let Some(tower) = tower {
                let params = tower.params().map_err(|e| e.within(field))?;
                architecture.encoder_params += params;
                notes.push(format!(
                    "{field}: an encoder of about {:.2} B parameters, counted in weight memory; text requests never run it",
                    params as f64 / 1e9
                ));
            }
        }
        Ok(ReadModel { architecture, notes })
    }

    /// A repeated text-model field, by name.
    fn field(&self, name: &str) -> Option<u32> {
        match name {
            "num_hidden_layers" => self.num_hidden_layers,
            "hidden_size" => self.hidden_size,
            "num_attention_heads" => self.num_attention_heads,
            "num_key_value_heads" => self.num_key_value_heads,
            "intermediate_size" => self.intermediate_size,
            _ => self.vocab_size,
        }
    }

    /// The text model of these fields, with its formats decided.
    fn text_model(
        &self,
        name: &str,
        compute: Dtype,
        formats: Formats,
        tie: bool,
    ) -> Result<ModelArchitecture, FieldError> {
        let num_layers = required(self.num_hidden_layers, "num_hidden_layers")?;
        let hidden_size = required(self.hidden_size, "hidden_size")?;
        let num_attention_heads = required(self.num_attention_heads, "num_attention_heads")?;
        let num_kv_heads =
            required(self.num_key_value_heads.or(Some(num_attention_heads)), "num_key_value_heads")?;
        if num_attention_heads % num_kv_heads != 0 {
            return Err(FieldError::new(
                "num_key_value_heads",
                num_kv_heads,
                format!("must divide num_attention_heads ({num_attention_heads})"),
            ));
        }
        let head_dim = match self.head_dim {
            Some(d) => required(Some(d), "head_dim")?,
            None if hidden_size % num_attention_heads == 0 => hidden_size / num_attention_heads,
            None => {
                return Err(FieldError::at(
                    "head_dim",
                    "missing, and hidden_size is not a multiple of num_attention_heads",
                ));
            }
        };
        let attention = self.attention(num_layers)?;
        let (moe, dense_width) = moe::layout(self, num_layers)?;
        let intermediate_size = match (dense_width, self.intermediate_size, moe) {
            (Some(width), ..) => width,
            (None, Some(width), _) => required(Some(width), "intermediate_size")?,
            (None, None, Some(moe)) => moe.expert_intermediate_size,
            (None, None, None) => {
                return Err(FieldError::at("intermediate_size", "missing from the model config"));
            }
        };
        Ok(ModelArchitecture {
            name: name.to_owned(),
            num_layers,
            hidden_size,
            num_attention_heads,
            num_kv_heads,
            head_dim,
            intermediate_size,
            vocab_size: required(self.vocab_size, "vocab_size")?,
            max_position_embeddings: required(self.max_position_embeddings, "max_position_embeddings")?,
            tie_word_embeddings: tie,
            weight_dtype: formats.weight,
            compute_dtype: compute,
            gemm_dtype: formats.gemm,
            encoder_params: 0,
            attention,
            moe,
        })
    }

    /// The attention kind every layer shares; refuses layers of mixed kinds by name.
    fn attention(&self, num_layers: u32) -> Result<AttentionKind, FieldError> {
        const HYBRID: &str = "vLLM's hybrid KV-cache manager (one KV layout per kind of layer) is not ported";
        if let Some(layers) = self.cross_attention_layers.as_ref().filter(|l| !l.is_empty()) {
            return Err(FieldError::new(
                "cross_attention_layers",
                format!("{} layers", layers.len()),
                format!("layers that cross-attend to image states are not modelled: {HYBRID}"),
            ));
        }
        if let Some(chunk) = self.attention_chunk_size {
            return Err(FieldError::new(
                "attention_chunk_size",
                chunk,
                format!("chunked local attention interleaved with global layers is not modelled: {HYBRID}"),
            ));
        }
        if let Some(pattern) = self.sliding_window_pattern {
            return Err(FieldError::new(
                "sliding_window_pattern",
                pattern,
                format!("sliding-window layers interleaved with full ones are not modelled: {HYBRID}"),
            ));
        }
        if let Some(kv_lora_rank) = self.kv_lora_rank {
            return Ok(AttentionKind::MultiHeadLatent {
                kv_lora_rank,
                q_lora_rank: self.q_lora_rank,
                qk_nope_head_dim: required(self.qk_nope_head_dim, "qk_nope_head_dim")?,
                qk_rope_head_dim: required(self.qk_rope_head_dim, "qk_rope_head_dim")?,
                v_head_dim: required(self.v_head_dim, "v_head_dim")?,
            });
        }
        let sliding = match &self.layer_types {
            Some(kinds) => {
                if kinds.len() != num_layers as usize {
                    return Err(FieldError::new(
                        "layer_types",
                        format!("{} entries", kinds.len()),
                        format!("must name one kind per layer ({num_layers})"),
                    ));
                }
                if let Some((i, other)) = kinds
                    .iter()
                    .enumerate()
                    .find(|(_, k)| !matches!(k.as_str(), "full_attention" | "sliding_attention"))
                {
                    return Err(FieldError::new(
                        format!("layer_types[{i}]"),
                        other,
                        "an attention kind the cost model does not price (full_attention and sliding_attention are known)",
                    ));
                }
                let sliding_layers = kinds.iter().filter(|k| *k == "sliding_attention").count();
                if sliding_layers != 0 && sliding_layers != kinds.len() {
                    return Err(FieldError::new(
                        "layer_types",
                        format!("{sliding_layers} sliding of {} layers", kinds.len()),
                        format!(
                            "sliding-window layers interleaved with full ones are not modelled: {HYBRID}"
                        ),
                    ));
                }
                sliding_layers != 0
            }
            None => self.sliding_window.is_some() && self.use_sliding_window != Some(false),
        };
        if !sliding {
            return Ok(AttentionKind::Full);
        }
        if let Some(first) = self.max_window_layers.filter(|&m| m > 0 && m < num_layers)
            && self.use_sliding_window == Some(true)
        {
            return Err(FieldError::new(
                "max_window_layers",
                first,
                format!("the sliding window applies to only some of the {num_layers} layers: {HYBRID}"),
            ));
        }
        let window = self.sliding_window.ok_or_else(|| {
            FieldError::at("sliding_window", "missing: sliding_attention layers need their window")
        })?;
        Ok(AttentionKind::SlidingWindow { window: required(Some(window), "sliding_window")? })
    }
}

/// A required positive field.
fn required(value: Option<u32>, field: &str) -> Result<u32, FieldError> {
    match value {
        Some(0) => Err(FieldError::new(field, 0, "must be positive")),
        Some(v) => Ok(v),
        None => Err(FieldError::at(field, "missing from the model config")),
    }
}

#[cfg(test)]
mod tests;
