//! Sizes derived from a model's architecture: parameters, weight bytes, FLOPs per token.
//!
//! Counts follow `../shared/reference/costmodel-facts.md` §2–3: the MLP is gated (three
//! matrices: gate, up, down); q/o projections use `heads × head_dim`, never `hidden_size`; a step
//! reads every weight but the input embedding (it gathers only the rows it needs).

use blis_contracts::ModelArchitecture;

/// Parameter counts of one model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ParameterCounts {
    /// The input embedding table.
    pub embedding: f64,
    /// Linear layers of one transformer layer (attention projections and MLP, all experts).
    pub linear_per_layer: f64,
    /// Linear parameters one token passes through in one layer (MoE: its experts only).
    pub active_linear_per_layer: f64,
    /// Norm weights of one layer.
    pub norms_per_layer: f64,
    /// The output projection (zero when tied to the embedding).
    pub lm_head: f64,
    /// The final norm.
    pub final_norm: f64,
}

impl ParameterCounts {
    /// The counts of `model`.
    pub fn of(model: &ModelArchitecture) -> ParameterCounts {
        let h = f64::from(model.hidden_size);
        let q_width = f64::from(model.num_attention_heads) * f64::from(model.head_dim);
        let kv_width = f64::from(model.num_kv_heads) * f64::from(model.head_dim);
        let attention = h * q_width + 2.0 * h * kv_width + q_width * h;
        let (mlp, active_mlp) = match model.moe {
            None => {
                let dense = 3.0 * h * f64::from(model.intermediate_size);
                (dense, dense)
            }
            Some(moe) => {
                let expert = 3.0 * h * f64::from(moe.expert_intermediate_size);
                let router = h * f64::from(moe.experts);
                (expert * f64::from(moe.experts) + router, expert * f64::from(moe.experts_per_token) + router)
            }
        };
        let vocab = f64::from(model.vocab_size);
        ParameterCounts {
            embedding: vocab * h,
            linear_per_layer: attention + mlp,
            active_linear_per_layer: attention + active_mlp,
            norms_per_layer: 2.0 * h,
            lm_head: if model.tie_word_embeddings { 0.0 } else { vocab * h },
            final_norm: h,
        }
    }

    /// Every parameter.
    pub fn total(&self, layers: u32) -> f64 {
        self.embedding
            + f64::from(layers) * (self.linear_per_layer + self.norms_per_layer)
            + self.final_norm
            + self.lm_head
    }

    /// Parameters a step streams from memory: all but the input embedding (tied weights are
    /// read once, as the output projection).
    pub fn streamed(&self, layers: u32, tied: bool) -> f64 {
        let lm_head = if tied { self.embedding } else { self.lm_head };
        f64::from(layers) * (self.linear_per_layer + self.norms_per_layer) + self.final_norm + lm_head
    }
}

/// KV-cache bytes one token takes on each GPU over all layers, with KV heads split over the
/// tensor-parallel ranks (replicated when there are fewer heads than ranks).
pub fn kv_bytes_per_token_per_gpu(
    model: &ModelArchitecture,
    tensor_parallel: u32,
    element_bytes: u64,
) -> u64 {
    let heads_per_gpu = (u64::from(model.num_kv_heads) / u64::from(tensor_parallel)).max(1);
    2 * u64::from(model.num_layers) * heads_per_gpu * u64::from(model.head_dim) * element_bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Catalog;

    #[test]
    fn parameter_counts_match_the_published_sizes() {
        let catalog = Catalog::embedded();
        let llama8 = &catalog.model("Llama-3.1-8B", "").unwrap().architecture;
        let counts = ParameterCounts::of(llama8);
        assert!((counts.total(32) / 1e9 - 8.030).abs() < 0.001, "{}", counts.total(32));
        assert!((counts.streamed(32, false) / 1e9 - 7.505).abs() < 0.001);
        let llama70 = &catalog.model("Llama-2-70B", "").unwrap().architecture;
        assert!((ParameterCounts::of(llama70).total(80) / 1e9 - 68.98).abs() < 0.01);
    }

    #[test]
    fn kv_bytes_per_token_follow_the_heads() {
        let catalog = Catalog::embedded();
        let llama8 = &catalog.model("Llama-3.1-8B", "").unwrap().architecture;
        assert_eq!(kv_bytes_per_token_per_gpu(llama8, 1, 2), 131_072);
        assert_eq!(kv_bytes_per_token_per_gpu(llama8, 2, 2), 65_536);
        // 8 KV heads over 16 ranks: each rank keeps a whole head.
        assert_eq!(kv_bytes_per_token_per_gpu(llama8, 16, 2), 16_384);
    }
}
