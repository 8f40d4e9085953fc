//! The first price of a step: a roofline over weights, KV traffic and FLOPs.
//!
//! One step reads every streamed weight once (whatever the batch), reads each request's cached
//! context and writes the new tokens' KV; it computes two FLOPs per multiply-add of every linear
//! layer for every token, the logits for sampled tokens only, and causal attention over the
//! context. Its time is the larger of compute at the chip's dense BF16 peak and traffic at its
//! HBM bandwidth. Every quantity that does not depend on the step is computed once, at
//! construction, so a price costs a handful of multiplications whatever the batch size.

use blis_contracts::{Environment, MemoryFootprint, ModelArchitecture, PoolPlan, StepPrice, StepShape};

use crate::catalog::Chip;
use crate::sizes::{ParameterCounts, kv_bytes_per_token_per_gpu};

/// Bytes per activation element (BF16/FP16 activations).
const ACTIVATION_BYTES: f64 = 2.0;
/// Bytes per logit in the sampler (vLLM computes logits in float32).
const LOGIT_BYTES: f64 = 4.0;
/// Memory outside the framework's allocator on each GPU (CUDA context, cuBLAS workspaces),
/// plus communication buffers when tensor parallel. Rank `assumed` until calibrated.
const NON_TORCH_BYTES: u64 = 512 << 20;
const NON_TORCH_BYTES_PER_PEER: u64 = 256 << 20;

/// A roofline price for one pool.
#[derive(Clone, Debug)]
pub struct Roofline {
    peak_flops: f64,
    bandwidth: f64,
    capacity_bytes: u64,
    /// Weight bytes every step reads on one GPU.
    streamed_weight_bytes: f64,
    /// Weight bytes resident on one GPU.
    resident_weight_bytes: f64,
    /// Linear-layer FLOPs per token per GPU, all layers.
    linear_flops_per_token: f64,
    /// Output-projection FLOPs per sampled token per GPU.
    logits_flops_per_sample: f64,
    /// Attention FLOPs per query-key pair per GPU, all layers (scores plus value mix).
    attention_flops_per_pair: f64,
    /// KV bytes per token per GPU, all layers.
    kv_bytes_per_token: f64,
    /// Activation bytes per token of the largest layer working set.
    activation_bytes_per_token: f64,
    /// Sampler bytes per sequence (one row of logits).
    logits_bytes_per_sequence: f64,
    tensor_parallel: u32,
}

impl Roofline {
    /// The roofline of a pool's plan on `chip`.
    pub fn for_plan(chip: &Chip, plan: &PoolPlan) -> Roofline {
        Roofline::new(chip, &plan.model, plan.layout.tensor, plan.kv.dtype.bytes())
    }

    /// The roofline of `model` on `chip`, split over `tensor_parallel` GPUs, with a KV cache of
    /// `kv_element_bytes` per element.
    pub fn new(
        chip: &Chip,
        model: &ModelArchitecture,
        tensor_parallel: u32,
        kv_element_bytes: u64,
    ) -> Roofline {
        let tp = f64::from(tensor_parallel);
        let counts = ParameterCounts::of(model);
        let weight_bytes = model.weight_dtype.bytes() as f64;
        let layers = f64::from(model.num_layers);
        let h = f64::from(model.hidden_size);
        let q_width = f64::from(model.num_attention_heads) * f64::from(model.head_dim);
        let kv_width = f64::from(model.num_kv_heads) * f64::from(model.head_dim);
        Roofline {
            peak_flops: chip.bf16_dense_flops.value,
            bandwidth: chip.hbm_bandwidth.value,
            capacity_bytes: chip.hbm_capacity.value as u64,
            streamed_weight_bytes: counts.streamed(model.num_layers, model.tie_word_embeddings)
                * weight_bytes
                / tp,
            resident_weight_bytes: counts.total(model.num_layers) * weight_bytes / tp,
            linear_flops_per_token: 2.0 * layers * counts.active_linear_per_layer / tp,
            logits_flops_per_sample: 2.0 * h * f64::from(model.vocab_size) / tp,
            attention_flops_per_pair: 4.0 * q_width * layers / tp,
            kv_bytes_per_token: kv_bytes_per_token_per_gpu(model, tensor_parallel, kv_element_bytes) as f64,
            activation_bytes_per_token: (2.0 * h
                + (q_width + 2.0 * kv_width) / tp
                + 2.0 * f64::from(model.intermediate_size) / tp)
                * ACTIVATION_BYTES,
            logits_bytes_per_sequence: f64::from(model.vocab_size) * LOGIT_BYTES,
            tensor_parallel,
        }
    }

    /// Weight bytes one step streams on each GPU.
    pub fn streamed_weight_bytes(&self) -> f64 {
        self.streamed_weight_bytes
    }
}

impl Environment for Roofline {
    fn memory(&self, plan: &PoolPlan) -> MemoryFootprint {
        let activation_peak = f64::from(plan.max_num_batched_tokens) * self.activation_bytes_per_token
            + f64::from(plan.max_num_seqs) * self.logits_bytes_per_sequence;
        MemoryFootprint {
            gpu_capacity_bytes: self.capacity_bytes,
            weights_bytes: self.resident_weight_bytes.ceil() as u64,
            activation_peak_bytes: activation_peak.ceil() as u64,
            non_torch_bytes: NON_TORCH_BYTES + NON_TORCH_BYTES_PER_PEER * u64::from(self.tensor_parallel - 1),
            cuda_graph_bytes: 0,
        }
    }

    fn price(&self, step: &StepShape) -> StepPrice {
        let t = &step.totals;
        let tokens = step.padded_tokens as f64;
        let pairs = t.prefill_attention_pairs_x2 as f64 / 2.0
            + (t.decode_context_tokens + u64::from(t.decode_requests)) as f64;
        let flops = tokens * self.linear_flops_per_token
            + f64::from(t.sampled_tokens) * self.logits_flops_per_sample
            + pairs * self.attention_flops_per_pair;
        let kv_tokens = (t.decode_context_tokens + t.prefill_context_tokens) as f64 + tokens;
        let bytes = self.streamed_weight_bytes + kv_tokens * self.kv_bytes_per_token;
        let seconds = (flops / self.peak_flops).max(bytes / self.bandwidth);
        StepPrice { micros: seconds * 1e6 }
    }
}

#[cfg(test)]
mod tests {
    use blis_contracts::StepRequest;

    use super::*;
    use crate::Catalog;

    fn llama8_on_h100(tp: u32) -> Roofline {
        let catalog = Catalog::embedded();
        let chip = catalog.chip("H100-SXM", "").unwrap();
        Roofline::new(chip, &catalog.model("Llama-3.1-8B", "").unwrap().architecture, tp, 2)
    }

    fn decode_step(batch: u32, context: u32) -> StepShape {
        let mut step = StepShape::default();
        for _ in 0..batch {
            step.push(StepRequest { new_tokens: 1, context_tokens: context, samples: true });
        }
        step
    }

    #[test]
    fn batch_one_decode_of_llama_8b_on_h100_respects_the_weight_bandwidth_floor() {
        // 7.505e9 streamed parameters × 2 B = 15.01 GB; ÷ 3.35 TB/s = 4.48 ms.
        let price = llama8_on_h100(1).price(&decode_step(1, 1));
        assert!(price.micros >= 4_480.0, "{}", price.micros);
        assert!(price.micros < 4_482.0, "nothing but weights and one token of KV: {}", price.micros);
    }

    #[test]
    fn decode_time_grows_with_batch_times_context_once_kv_reads_dominate() {
        let roofline = llama8_on_h100(1);
        let small = roofline.price(&decode_step(64, 1_024)).micros;
        let large = roofline.price(&decode_step(64, 4_096)).micros;
        // costmodel-facts.md §6: 7.05 ms and 14.74 ms at 100% bandwidth.
        assert!((small - 7_045.0).abs() < 20.0, "{small}");
        assert!((large - 14_740.0).abs() < 30.0, "{large}");
    }

    #[test]
    fn a_long_prefill_is_compute_bound() {
        let mut step = StepShape::default();
        step.push(StepRequest { new_tokens: 2_048, context_tokens: 0, samples: true });
        // Linear layers without the output projection: 2 × 6.980e9 × 2048 = 28.59 TFLOP; causal
        // attention 4 × 4096 × 32 × (2048 × 2049 / 2) = 1.10 TFLOP; logits for the one sampled
        // token only (1 GFLOP). 29.69 TFLOP at 989.4 TFLOP/s = 30.0 ms. (costmodel-facts.md §6
        // quotes 31.8 TFLOP because it counts logits for all 2,048 tokens.)
        let micros = llama8_on_h100(1).price(&step).micros;
        assert!((micros - 30_006.0).abs() < 5.0, "{micros}");
    }

    #[test]
    fn tensor_parallel_halves_the_weight_bytes_per_gpu() {
        let one = llama8_on_h100(1).streamed_weight_bytes();
        let two = llama8_on_h100(2).streamed_weight_bytes();
        assert!((one / two - 2.0).abs() < 1e-12);
    }
}
