//! A Llama-3.1-8B shape and an Environment with fixed memory figures that prices a step at one
//! microsecond per padded token, for the engine tests (they look at shapes and order, not at
//! prices).

use blis_contracts::{
    AttentionKind, Dtype, Environment, MemoryFootprint, ModelArchitecture, PoolPlan, StepPrice, StepShape,
};

pub const GIB: u64 = 1 << 30;

/// Llama-3.1-8B's shape.
pub fn model() -> ModelArchitecture {
    ModelArchitecture {
        name: "llama-3.1-8b".to_owned(),
        num_layers: 32,
        hidden_size: 4096,
        num_attention_heads: 32,
        num_kv_heads: 8,
        head_dim: 128,
        intermediate_size: 14336,
        vocab_size: 128_256,
        max_position_embeddings: 131_072,
        tie_word_embeddings: false,
        weight_dtype: Dtype::Bfloat16,
        compute_dtype: Dtype::Bfloat16,
        gemm_dtype: Dtype::Bfloat16,
        encoder_params: 0,
        attention: AttentionKind::Full,
        moe: None,
    }
}

/// 16 GiB of weights, 1 GiB each of activations and other memory; one microsecond per padded
/// token, none of it host time.
pub struct Flat {
    pub capacity_bytes: u64,
}

impl Environment for Flat {
    fn transfer_bytes(&self, transfer: &blis_contracts::Transfer) -> u64 {
        transfer.gpu_blocks
    }

    fn memory(&self, _plan: &PoolPlan) -> MemoryFootprint {
        MemoryFootprint {
            gpu_capacity_bytes: self.capacity_bytes,
            weights_bytes: 16 * GIB,
            activation_peak_bytes: GIB,
            non_torch_bytes: GIB,
            cuda_graph_bytes: 0,
        }
    }

    fn price(&self, step: &StepShape) -> StepPrice {
        StepPrice { micros: step.padded_tokens as f64, ..StepPrice::default() }
    }
}
