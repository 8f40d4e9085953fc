//! Sizes derived from a model's architecture: parameters per layer, and KV bytes per token.
//!
//! Counts follow `../shared/reference/costmodel-facts.md` §2–3: the MLP is gated (three
//! matrices: gate, up, down); q/o projections use `heads × head_dim`, never `hidden_size`; a step
//! reads every weight but the input embedding (it gathers only the rows it needs). Norm weights
//! are counted; biases are not (under 0.1% of any catalog model).

use blis_contracts::{AttentionKind, ModelArchitecture};

/// Parameter counts of one model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ParameterCounts {
    /// The input embedding table.
    pub embedding: f64,
    /// Attention projections of one layer.
    pub attention_per_layer: f64,
    /// MLP of one dense layer.
    pub dense_mlp: f64,
    /// One routed expert (zero for dense models).
    pub expert: f64,
    /// The shared experts of one MoE layer (zero without them).
    pub shared_experts: f64,
    /// Router, shared experts and all routed experts of one MoE layer (zero for dense models).
    pub moe_layer: f64,
    /// Norm weights of one layer.
    pub norms_per_layer: f64,
    /// The output projection (zero when tied to the embedding).
    pub lm_head: f64,
    /// The final norm.
    pub final_norm: f64,
    /// Layers with a dense MLP.
    pub dense_layers: u32,
    /// Layers with experts.
    pub moe_layers: u32,
}

/// Width of the attention's queries, keys and values as the projections produce them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionWidths {
    /// Total query width (all heads).
    pub query: f64,
    /// Total key plus value width produced per token (all heads; MLA: the latent and RoPE key).
    pub key_value: f64,
    /// Width entering the output projection (all heads).
    pub output: f64,
}

/// The widths of `model`'s attention.
pub fn attention_widths(model: &ModelArchitecture) -> AttentionWidths {
    let heads = f64::from(model.num_attention_heads);
    match model.attention {
        AttentionKind::MultiHeadLatent {
            kv_lora_rank,
            qk_nope_head_dim,
            qk_rope_head_dim,
            v_head_dim,
            ..
        } => AttentionWidths {
            query: heads * f64::from(qk_nope_head_dim + qk_rope_head_dim),
            key_value: f64::from(kv_lora_rank + qk_rope_head_dim),
            output: heads * f64::from(v_head_dim),
        },
        AttentionKind::Full | AttentionKind::SlidingWindow { .. } => {
            let d = f64::from(model.head_dim);
            AttentionWidths {
                query: heads * d,
                key_value: 2.0 * f64::from(model.num_kv_heads) * d,
                output: heads * d,
            }
        }
    }
}

impl ParameterCounts {
    /// The counts of `model`.
    pub fn of(model: &ModelArchitecture) -> ParameterCounts {
        let h = f64::from(model.hidden_size);
        let heads = f64::from(model.num_attention_heads);
        let attention_per_layer = match model.attention {
            AttentionKind::MultiHeadLatent {
                kv_lora_rank,
                q_lora_rank,
                qk_nope_head_dim,
                qk_rope_head_dim,
                v_head_dim,
            } => {
                let qk = f64::from(qk_nope_head_dim + qk_rope_head_dim);
                let query = match q_lora_rank {
                    Some(r) => h * f64::from(r) + f64::from(r) + f64::from(r) * heads * qk,
                    None => h * heads * qk,
                };
                let kv_lora = f64::from(kv_lora_rank);
                let key_value = h * (kv_lora + f64::from(qk_rope_head_dim))
                    + kv_lora
                    + kv_lora * heads * f64::from(qk_nope_head_dim + v_head_dim);
                query + key_value + heads * f64::from(v_head_dim) * h
            }
            AttentionKind::Full | AttentionKind::SlidingWindow { .. } => {
                let widths = attention_widths(model);
                h * widths.query + h * widths.key_value + widths.output * h
            }
        };
        let dense_mlp = 3.0 * h * f64::from(model.intermediate_size);
        let (expert, shared_experts, moe_layer, dense_layers, moe_layers) = match model.moe {
            None => (0.0, 0.0, 0.0, model.num_layers, 0),
            Some(moe) => {
                let expert = 3.0 * h * f64::from(moe.expert_intermediate_size);
                let shared = 3.0 * h * f64::from(moe.shared_intermediate_size);
                let layer = expert * f64::from(moe.experts) + shared + h * f64::from(moe.experts);
                let dense = moe.dense_layers.min(model.num_layers);
                (expert, shared, layer, dense, model.num_layers - dense)
            }
        };
        let vocab = f64::from(model.vocab_size);
        ParameterCounts {
            embedding: vocab * h,
            attention_per_layer,
            dense_mlp,
            expert,
            shared_experts,
            moe_layer,
            norms_per_layer: 2.0 * h,
            lm_head: if model.tie_word_embeddings { 0.0 } else { vocab * h },
            final_norm: h,
            dense_layers,
            moe_layers,
        }
    }

    /// Every parameter.
    pub fn total(&self) -> f64 {
        let layers = f64::from(self.dense_layers + self.moe_layers);
        self.embedding
            + layers * (self.attention_per_layer + self.norms_per_layer)
            + f64::from(self.dense_layers) * self.dense_mlp
            + f64::from(self.moe_layers) * self.moe_layer
            + self.final_norm
            + self.lm_head
    }

    /// Parameters one token passes through (MoE: its routed and shared experts only).
    pub fn active(&self, experts_per_token: u32, experts: u32, hidden: f64) -> f64 {
        let layers = f64::from(self.dense_layers + self.moe_layers);
        let moe_active =
            self.expert * f64::from(experts_per_token) + self.shared_experts + hidden * f64::from(experts);
        self.embedding
            + layers * (self.attention_per_layer + self.norms_per_layer)
            + f64::from(self.dense_layers) * self.dense_mlp
            + f64::from(self.moe_layers) * moe_active
            + self.final_norm
            + self.lm_head
    }
}

/// KV-cache bytes one token takes on each GPU over all layers: keys and values per KV head,
/// heads split over the tensor-parallel ranks (replicated when there are fewer heads than
/// ranks); for multi-head latent attention one latent plus one RoPE key, replicated.
pub fn kv_bytes_per_token_per_gpu(
    model: &ModelArchitecture,
    tensor_parallel: u32,
    element_bytes: u64,
) -> u64 {
    let per_layer = match model.attention {
        AttentionKind::MultiHeadLatent { kv_lora_rank, qk_rope_head_dim, .. } => {
            u64::from(kv_lora_rank + qk_rope_head_dim)
        }
        AttentionKind::Full | AttentionKind::SlidingWindow { .. } => {
            let heads_per_gpu = (u64::from(model.num_kv_heads) / u64::from(tensor_parallel)).max(1);
            2 * heads_per_gpu * u64::from(model.head_dim)
        }
    };
    u64::from(model.num_layers) * per_layer * element_bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Catalog;

    fn counts(name: &str) -> ParameterCounts {
        ParameterCounts::of(&Catalog::embedded().model(name, "").unwrap().architecture)
    }

    #[test]
    fn parameter_counts_match_the_published_sizes() {
        // costmodel-facts.md §2: 8.030, 70.55, 405.85, 7.62 (with QKV bias), 72.71, 32.76,
        // 7.24, 46.70 billion; Llama-2-70B 68.98; DeepSeek-V3 671 without its MTP module.
        for (name, billions, tolerance) in [
            ("Llama-3.1-8B", 8.030, 0.001),
            ("Llama-3.1-70B", 70.55, 0.01),
            ("Llama-3.1-405B", 405.85, 0.05),
            ("Llama-2-70B", 68.98, 0.01),
            ("Qwen2.5-7B", 7.616, 0.01),
            ("Qwen2.5-72B", 72.71, 0.05),
            ("Qwen3-32B", 32.76, 0.01),
            ("Mistral-7B-v0.1", 7.242, 0.001),
            ("Mixtral-8x7B-v0.1", 46.70, 0.01),
            ("DeepSeek-V3", 671.0, 1.0),
        ] {
            let total = counts(name).total() / 1e9;
            assert!((total - billions).abs() <= tolerance, "{name}: {total} billion");
        }
        let llama = counts("Llama-3.1-8B");
        assert!(((llama.total() - llama.embedding) / 1e9 - 7.505).abs() < 0.001, "streamed per step");
        let mixtral = counts("Mixtral-8x7B-v0.1");
        assert!((mixtral.active(2, 8, 4096.0) / 1e9 - 12.88).abs() < 0.01, "Mixtral active");
        // DeepSeek-V3's 37 B active include its shared expert in each of the 58 MoE layers.
        let deepseek = counts("DeepSeek-V3");
        let active = deepseek.active(8, 256, 7168.0) / 1e9;
        assert!((active - 37.0).abs() < 1.0, "DeepSeek-V3 active: {active}");
        assert!(deepseek.shared_experts > 0.0);
    }

    #[test]
    fn kv_bytes_per_token_follow_the_heads() {
        let catalog = Catalog::embedded();
        let llama8 = &catalog.model("Llama-3.1-8B", "").unwrap().architecture;
        assert_eq!(kv_bytes_per_token_per_gpu(llama8, 1, 2), 131_072);
        assert_eq!(kv_bytes_per_token_per_gpu(llama8, 2, 2), 65_536);
        // 8 KV heads over 16 ranks: each rank keeps a whole head.
        assert_eq!(kv_bytes_per_token_per_gpu(llama8, 16, 2), 16_384);
        let deepseek = &catalog.model("DeepSeek-V3", "").unwrap().architecture;
        // costmodel-facts.md §2: (512 + 64) × 2 B = 1,152 B per layer, 70,272 B per token.
        assert_eq!(kv_bytes_per_token_per_gpu(deepseek, 8, 2), 70_272);
    }
}
