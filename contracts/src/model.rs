//! A model's architecture, in the terms of its Hugging Face `config.json`.
//!
//! The cost model's catalog produces it; engine ports read it to lay out their KV cache and to
//! refuse attention types they cannot lower yet.

use serde::{Deserialize, Serialize};

/// Numeric formats of weights and KV-cache elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// 32-bit float.
    Float32,
    /// bfloat16.
    Bfloat16,
    /// IEEE half.
    Float16,
    /// 8-bit float (E4M3).
    Fp8,
}

impl Dtype {
    /// Bytes per element.
    pub fn bytes(self) -> u64 {
        match self {
            Dtype::Float32 => 4,
            Dtype::Bfloat16 | Dtype::Float16 => 2,
            Dtype::Fp8 => 1,
        }
    }
}

/// How a model's attention layers treat context.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AttentionKind {
    /// Every token attends to all earlier tokens (multi-head or grouped-query).
    Full,
    /// Every token attends to the last `window` tokens only.
    SlidingWindow {
        /// Tokens in the window.
        window: u32,
    },
    /// Multi-head latent attention (DeepSeek): keys and values are cached as one compressed
    /// latent plus a decoupled RoPE key per token.
    MultiHeadLatent {
        /// Width of the compressed key/value latent.
        kv_lora_rank: u32,
        /// Width of the compressed query (absent: queries are not compressed).
        q_lora_rank: Option<u32>,
        /// Per-head query/key width without RoPE.
        qk_nope_head_dim: u32,
        /// Per-head query/key width with RoPE (also the cached RoPE key's width).
        qk_rope_head_dim: u32,
        /// Per-head value width.
        v_head_dim: u32,
    },
}

/// Mixture-of-experts layout of the MLP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoeLayout {
    /// Routed experts per MoE layer.
    pub experts: u32,
    /// Routed experts each token visits.
    pub experts_per_token: u32,
    /// Intermediate size of one expert.
    pub expert_intermediate_size: u32,
    /// Total intermediate width of the shared experts every token visits besides the routed
    /// ones (DeepSeek: `n_shared_experts × moe_intermediate_size`; Qwen2-MoE:
    /// `shared_expert_intermediate_size`); zero when there are none.
    pub shared_intermediate_size: u32,
    /// Layers that keep a dense MLP of `intermediate_size` instead of experts (leading ones,
    /// interleaved ones or both: pricing needs only their number).
    pub dense_layers: u32,
}

/// The facts of a model that serving depends on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelArchitecture {
    /// Catalog name.
    pub name: String,
    /// Transformer layers.
    pub num_layers: u32,
    /// Residual stream width.
    pub hidden_size: u32,
    /// Query heads.
    pub num_attention_heads: u32,
    /// Key/value heads (fewer than query heads under grouped-query attention).
    pub num_kv_heads: u32,
    /// Width of one head.
    pub head_dim: u32,
    /// Width of the (dense) MLP's intermediate layer.
    pub intermediate_size: u32,
    /// Vocabulary size.
    pub vocab_size: u32,
    /// Longest sequence the model supports.
    pub max_position_embeddings: u32,
    /// Whether the output projection shares the input embedding's weights.
    pub tie_word_embeddings: bool,
    /// Format of the stored weights (FP8 for a checkpoint quantized to it).
    pub weight_dtype: Dtype,
    /// Format of activations, of the embedding and output projection (vLLM never quantizes
    /// them), and of the KV cache unless the engine says otherwise (`torch_dtype`).
    pub compute_dtype: Dtype,
    /// Format the linear layers' GEMMs run in: FP8 when weights and activations are both
    /// quantized to it (W8A8), else the compute format (weight-only quantization dequantizes).
    pub gemm_dtype: Dtype,
    /// Parameters outside the text model that the server loads but text requests never run
    /// (a multimodal checkpoint's vision or audio encoder): they take memory, not step time.
    pub encoder_params: u64,
    /// Attention type.
    pub attention: AttentionKind,
    /// Present for mixture-of-experts models.
    pub moe: Option<MoeLayout>,
}
