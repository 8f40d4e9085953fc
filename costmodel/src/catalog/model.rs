//! Models, read from Hugging Face `config.json` fields.

use blis_contracts::{AttentionKind, Dtype, FieldError, ModelArchitecture, MoeLayout, yaml};
use serde::Deserialize;

use blis_contracts::Rank;

/// The fields of a Hugging Face `config.json` that serving depends on. It is an external
/// format with many more fields, so unknown fields are ignored here, not refused.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct HfConfig {
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
    /// MLP (or per-expert) intermediate width.
    pub intermediate_size: Option<u32>,
    /// Vocabulary.
    pub vocab_size: Option<u32>,
    /// Longest sequence.
    pub max_position_embeddings: Option<u32>,
    /// Shared input/output embedding (default false).
    pub tie_word_embeddings: Option<bool>,
    /// Weight format.
    pub torch_dtype: Option<String>,
    /// Sliding-window attention span, if any.
    pub sliding_window: Option<u32>,
    /// Whether the sliding window is used (Qwen2-style configs set it false).
    pub use_sliding_window: Option<bool>,
    /// Routed experts (Mixtral style).
    pub num_local_experts: Option<u32>,
    /// Routed experts each token visits.
    pub num_experts_per_tok: Option<u32>,
    /// Routed experts (DeepSeek style).
    pub n_routed_experts: Option<u32>,
    /// Shared experts every token visits (DeepSeek style).
    pub n_shared_experts: Option<u32>,
    /// Width of one expert (DeepSeek style; Mixtral uses `intermediate_size`).
    pub moe_intermediate_size: Option<u32>,
    /// Leading layers with a dense MLP (DeepSeek style).
    pub first_k_dense_replace: Option<u32>,
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
}

/// The part of a `quantization_config` that decides the weight format.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct QuantizationConfig {
    /// The method, e.g. `fp8`.
    pub quant_method: Option<String>,
}

/// A catalog model: its architecture with the source and rank of the config it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct CatalogModel {
    /// The architecture.
    pub architecture: ModelArchitecture,
    /// How much the config is trusted.
    pub rank: Rank,
    /// Where the config comes from.
    pub source: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelFile {
    name: String,
    rank: Rank,
    source: String,
    config: serde_norway::Value,
}

impl CatalogModel {
    /// A catalog model file: name, rank, source and the `config.json` fields.
    pub fn parse(text: &str) -> Result<CatalogModel, FieldError> {
        let file: ModelFile = yaml::from_str(text)?;
        let config: HfConfig = yaml::from_value(&file.config, "config")?;
        let architecture = config.architecture(&file.name).map_err(|e| e.within("config"))?;
        Ok(CatalogModel { architecture, rank: file.rank, source: file.source })
    }
}

impl HfConfig {
    /// The architecture these fields describe, named `name`; refuses missing or zero fields.
    pub fn architecture(&self, name: &str) -> Result<ModelArchitecture, FieldError> {
        let required = |value: Option<u32>, field: &str| match value {
            Some(0) => Err(FieldError::new(field, 0, "must be positive")),
            Some(v) => Ok(v),
            None => Err(FieldError::at(field, "missing from the model config")),
        };
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
        let compute_dtype = match self.torch_dtype.as_deref() {
            Some("bfloat16") => Dtype::Bfloat16,
            Some("float16") => Dtype::Float16,
            Some("float32") => Dtype::Float32,
            Some(other) => {
                return Err(FieldError::new("torch_dtype", other, "not a weight format the catalog knows"));
            }
            None => return Err(FieldError::at("torch_dtype", "missing from the model config")),
        };
        let weight_dtype = match self.quantization_config.as_ref().and_then(|q| q.quant_method.as_deref()) {
            None => compute_dtype,
            Some("fp8") => Dtype::Fp8,
            Some(other) => {
                return Err(FieldError::new(
                    "quantization_config.quant_method",
                    other,
                    "a quantization the catalog does not know (fp8 is known)",
                ));
            }
        };
        let attention = match (self.kv_lora_rank, self.sliding_window, self.use_sliding_window) {
            (Some(kv_lora_rank), ..) => AttentionKind::MultiHeadLatent {
                kv_lora_rank,
                q_lora_rank: self.q_lora_rank,
                qk_nope_head_dim: required(self.qk_nope_head_dim, "qk_nope_head_dim")?,
                qk_rope_head_dim: required(self.qk_rope_head_dim, "qk_rope_head_dim")?,
                v_head_dim: required(self.v_head_dim, "v_head_dim")?,
            },
            (None, Some(window), None | Some(true)) => AttentionKind::SlidingWindow { window },
            _ => AttentionKind::Full,
        };
        let intermediate_size = required(self.intermediate_size, "intermediate_size")?;
        let experts = self.num_local_experts.or(self.n_routed_experts);
        let moe = match (experts, self.num_experts_per_tok) {
            (Some(experts), Some(per_token)) if experts > 0 && per_token > 0 && per_token <= experts => {
                Some(MoeLayout {
                    experts,
                    experts_per_token: per_token,
                    expert_intermediate_size: self.moe_intermediate_size.unwrap_or(intermediate_size),
                    shared_experts: self.n_shared_experts.unwrap_or(0),
                    dense_layers: self.first_k_dense_replace.unwrap_or(0),
                })
            }
            (None, _) => None,
            (experts, per_token) => {
                return Err(FieldError::at(
                    "num_experts_per_tok",
                    format!(
                        "the routed experts ({experts:?}) and experts per token ({per_token:?}) must both be set, positive, and per-token at most the total"
                    ),
                ));
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
            tie_word_embeddings: self.tie_word_embeddings.unwrap_or(false),
            weight_dtype,
            compute_dtype,
            attention,
            moe,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_field_is_named() {
        let config = HfConfig { hidden_size: Some(8), ..HfConfig::default() };
        let e = config.architecture("x").unwrap_err();
        assert_eq!(e.path, "num_hidden_layers");
    }

    #[test]
    fn sliding_window_and_experts_are_recognised() {
        let config = HfConfig {
            num_hidden_layers: Some(32),
            hidden_size: Some(4096),
            num_attention_heads: Some(32),
            num_key_value_heads: Some(8),
            intermediate_size: Some(14336),
            vocab_size: Some(32000),
            max_position_embeddings: Some(32768),
            torch_dtype: Some("bfloat16".into()),
            sliding_window: Some(4096),
            num_local_experts: Some(8),
            num_experts_per_tok: Some(2),
            ..HfConfig::default()
        };
        let arch = config.architecture("m").unwrap();
        assert_eq!(arch.attention, AttentionKind::SlidingWindow { window: 4096 });
        assert_eq!(arch.moe.unwrap().experts, 8);
        assert_eq!(arch.head_dim, 128);
    }
}
