//! Pricing a step operator by operator: the Environment of one pool.
//!
//! A step runs each layer's kernels one after another: the QKV projection, attention over the
//! prompt chunks and over the decoding requests' contexts, the output projection, an all-reduce,
//! the MLP (or the experts a batch touches), another all-reduce; then the output projection for
//! the sampled tokens only. Each operator takes the larger of its compute time (FLOPs at the
//! chip's dense peak times the registry's efficiency for that operator and batch) and its memory
//! time (bytes at HBM bandwidth times the registry's efficiency) — a maximum per operator, not
//! one maximum over the step, so a mixed batch pays for its compute-bound prefill and its
//! memory-bound decode. Communication, kernel launches and host work add on top. Every part is
//! attributed to the rank of the entry that priced it.
//!
//! Everything that does not depend on the step is computed at construction; a price is a few
//! dozen floating-point operations whatever the batch size (one `pow` for MoE expert coverage),
//! and the terms that depend only on a token count are recalled for the counts last seen.

use std::cell::Cell;

use blis_contracts::{
    Environment, MemoryFootprint, ModelArchitecture, PoolPlan, Rank, RankShares, StepGraph, StepPrice,
    StepShape,
};

use crate::catalog::Chip;
use crate::registry::{Entry, Family, Registry, Resolved};
use crate::sizes::{ParameterCounts, attention_widths, kv_bytes_per_token_per_gpu};

/// Bytes per activation element (BF16/FP16 activations).
const ACTIVATION_BYTES: f64 = 2.0;
/// Bytes per logit (vLLM computes logits in float32).
const LOGIT_BYTES: f64 = 4.0;

/// A GEMM-like operator's constants per GPU.
#[derive(Clone, Copy, Debug, Default)]
struct Linear {
    /// FLOPs per token.
    flops_per_token: f64,
    /// Weight bytes read once per step.
    weight_bytes: f64,
    /// Activation bytes read and written per token.
    activation_bytes_per_token: f64,
}

/// The efficiencies and rank of one family's entry.
#[derive(Clone, Debug)]
struct Coefficient {
    entry: Entry,
    compute_efficiency: f64,
    half_efficiency_tokens: f64,
    memory_efficiency: f64,
}

impl Coefficient {
    fn of(entry: &Entry) -> Coefficient {
        let get = |name: &str| entry.params.get(name).copied();
        Coefficient {
            compute_efficiency: get("compute_efficiency").unwrap_or(1.0),
            half_efficiency_tokens: get("half_efficiency_tokens").unwrap_or(0.0),
            memory_efficiency: get("memory_efficiency").unwrap_or(1.0),
            entry: entry.clone(),
        }
    }

    /// Compute efficiency at `tokens` tokens (the GEMM's M dimension).
    fn compute_at(&self, tokens: f64) -> f64 {
        self.compute_efficiency * tokens / (tokens + self.half_efficiency_tokens)
    }
}

/// The price of one pool's steps: an [`Environment`].
#[derive(Clone, Debug)]
pub struct Pricer {
    peak_flops: f64,
    attention_peak_flops: f64,
    bandwidth: f64,
    link_bandwidth: f64,
    capacity_bytes: u64,
    tensor_parallel: u32,
    dense_layers: f64,
    moe_layers: f64,
    qkv: Linear,
    output_projection: Linear,
    dense_mlp: Linear,
    expert: Linear,
    experts: f64,
    experts_per_token: f64,
    /// The shared experts, in units of one routed expert's width.
    shared_experts: f64,
    router: Linear,
    logits: Linear,
    attention_flops_per_pair: f64,
    kv_bytes_per_token_per_layer: f64,
    /// One KV block over all layers and GPUs, B.
    kv_block_bytes: u64,
    all_reduce_bytes_per_token: f64,
    resident_weight_bytes: f64,
    activation_bytes_per_token: f64,
    logits_bytes_per_sequence: f64,
    gemm: Coefficient,
    prefill_attention: Coefficient,
    decode_attention: Coefficient,
    logits_coefficient: Coefficient,
    all_reduce: (f64, f64, Rank),
    moe_dispatch: (f64, f64, Rank),
    /// Host time per step, per scheduled request and per sampled token, µs, and its rank.
    host: (f64, f64, f64, Rank),
    /// API-server time per request and per prompt token, µs.
    frontend: (f64, f64),
    /// Launch time per step run eagerly, as piecewise graphs, and as one full graph.
    launch: (f64, f64, f64, Rank),
    memory: (f64, f64),
    resolved: Resolved,
    /// The terms of the last steps' prices that depend only on a count of tokens.
    recent: RecentTerms,
}

/// Slots of [`RecentTerms`], each holding the terms of the counts congruent to it.
const RECENT_SLOTS: usize = 16;

/// The terms of a step's price that depend only on its padded token count (the linear layers,
/// all-reduces and MoE dispatch) or its sampled token count (the output projection), for the
/// counts last seen: a run's steps come in few sizes (its CUDA graphs' and its batch sizes),
/// and these terms are most of a price's divisions. Each is the very value the formula gives.
#[derive(Clone, Debug, Default)]
struct RecentTerms {
    padded: [Cell<Option<(u64, PaddedTerms)>>; RECENT_SLOTS],
    sampled: [Cell<Option<(u32, f64)>>; RECENT_SLOTS],
}

/// The terms of a step's price that depend only on its padded token count.
#[derive(Clone, Copy, Debug)]
struct PaddedTerms {
    gemm: f64,
    all_reduce: f64,
    dispatch: f64,
}

impl Pricer {
    /// The pricer of a pool's `plan` on `chip`, with coefficients from `registry`.
    pub fn new(chip: &Chip, plan: &PoolPlan, registry: &Registry) -> Pricer {
        let model = &plan.model;
        let tp = plan.layout.tensor;
        let t = f64::from(tp);
        let resolved = registry.resolve(&chip.name);
        let counts = ParameterCounts::of(model);
        let h = f64::from(model.hidden_size);
        let widths = attention_widths(model);
        let weight_bytes = plan.model.weight_dtype.bytes() as f64;
        // vLLM never quantizes the embedding and output projection (nor, in the checkpoints
        // that have one, the encoder): they stay in the compute format.
        let compute_bytes = plan.model.compute_dtype.bytes() as f64;
        let linear = |params: f64, input: f64, output: f64| Linear {
            flops_per_token: 2.0 * params / t,
            weight_bytes: params * weight_bytes / t,
            activation_bytes_per_token: (input + output) * ACTIVATION_BYTES,
        };
        let (experts, experts_per_token, shared_experts, expert_width) = match model.moe {
            Some(moe) => (
                f64::from(moe.experts),
                f64::from(moe.experts_per_token),
                f64::from(moe.shared_intermediate_size) / f64::from(moe.expert_intermediate_size.max(1)),
                f64::from(moe.expert_intermediate_size),
            ),
            None => (0.0, 0.0, 0.0, 0.0),
        };
        let peak_bf16 = chip.bf16_dense_flops.value;
        let peak_flops = match (plan.model.gemm_dtype, &chip.fp8_dense_flops) {
            (blis_contracts::Dtype::Fp8, Some(fp8)) => fp8.value,
            _ => peak_bf16,
        };
        let link_bandwidth = chip
            .nvlink_bandwidth
            .as_ref()
            .or(chip.pcie_bandwidth.as_ref())
            .map_or(chip.hbm_bandwidth.value, |f| f.value);
        let intermediate = f64::from(model.intermediate_size);
        let all_reduce = resolved.get(Family::AllReduce);
        let (latency, efficiency) = match tp {
            1 => (0.0, 1.0),
            2 => (all_reduce.param("latency_us_tp2"), all_reduce.param("efficiency_tp2")),
            3 | 4 => (all_reduce.param("latency_us_tp4"), all_reduce.param("efficiency_tp4")),
            _ => (all_reduce.param("latency_us_tp8"), all_reduce.param("efficiency_tp8")),
        };
        let host = resolved.get(Family::Host);
        let launch = resolved.get(Family::Launch);
        let layers = f64::from(model.num_layers);
        let graph_us = launch.param("graph_step_us");
        let launch_us = (
            launch.param("eager_layer_us") * layers,
            graph_us + launch.param("piecewise_layer_us") * layers,
            graph_us,
        );
        let memory = resolved.get(Family::Memory);
        Pricer {
            peak_flops,
            attention_peak_flops: peak_bf16,
            bandwidth: chip.hbm_bandwidth.value,
            link_bandwidth,
            capacity_bytes: chip.hbm_capacity.value as u64,
            tensor_parallel: tp,
            dense_layers: f64::from(counts.dense_layers),
            moe_layers: f64::from(counts.moe_layers),
            qkv: linear(h * (widths.query + widths.key_value), h, (widths.query + widths.key_value) / t),
            output_projection: linear(widths.output * h, widths.output / t, h),
            dense_mlp: linear(counts.dense_mlp, h, 2.0 * intermediate / t),
            expert: linear(counts.expert, h, 2.0 * expert_width / t),
            experts,
            experts_per_token,
            shared_experts,
            router: linear(h * experts, h, experts),
            logits: Linear {
                flops_per_token: 2.0 * h * f64::from(model.vocab_size) / t,
                weight_bytes: (counts.lm_head.max(if model.tie_word_embeddings {
                    counts.embedding
                } else {
                    0.0
                })) * compute_bytes
                    / t,
                activation_bytes_per_token: h * ACTIVATION_BYTES
                    + f64::from(model.vocab_size) / t * LOGIT_BYTES,
            },
            attention_flops_per_pair: 4.0 * widths.query / t,
            kv_bytes_per_token_per_layer: kv_bytes_per_token_per_gpu(model, tp, plan.kv.dtype.bytes()) as f64
                / f64::from(model.num_layers),
            kv_block_bytes: kv_bytes_per_token_per_gpu(model, tp, plan.kv.dtype.bytes())
                * u64::from(plan.kv.block_size)
                * u64::from(tp),
            all_reduce_bytes_per_token: if tp > 1 { 2.0 * (t - 1.0) / t * h * ACTIVATION_BYTES } else { 0.0 },
            resident_weight_bytes: ((counts.total() - counts.embedding - counts.lm_head) * weight_bytes
                + (counts.embedding + counts.lm_head + model.encoder_params as f64) * compute_bytes)
                / t,
            activation_bytes_per_token: (2.0 * h
                + (widths.query + widths.key_value) / t
                + 2.0 * (intermediate.max((experts_per_token + shared_experts) * expert_width)) / t)
                * ACTIVATION_BYTES,
            logits_bytes_per_sequence: f64::from(model.vocab_size) * LOGIT_BYTES,
            gemm: Coefficient::of(resolved.get(Family::Gemm)),
            prefill_attention: Coefficient::of(resolved.get(Family::PrefillAttention)),
            decode_attention: Coefficient::of(resolved.get(Family::DecodeAttention)),
            logits_coefficient: Coefficient::of(resolved.get(Family::Logits)),
            all_reduce: (
                latency,
                efficiency,
                if tp > 1 { all_reduce.rank_for_tensor_parallel(tp) } else { all_reduce.rank },
            ),
            moe_dispatch: (
                resolved.get(Family::MoeDispatch).param("latency_us"),
                resolved.get(Family::MoeDispatch).param("token_us"),
                resolved.get(Family::MoeDispatch).rank,
            ),
            host: (
                host.param("step_us") + host.param("step_us_per_peer") * (t - 1.0),
                host.param("request_us"),
                host.param("sampled_token_us"),
                host.rank,
            ),
            launch: (launch_us.0, launch_us.1, launch_us.2, launch.rank),
            frontend: (
                resolved.get(Family::Frontend).param("request_us"),
                resolved.get(Family::Frontend).param("prompt_token_us"),
            ),
            memory: (memory.param("non_torch_bytes"), memory.param("non_torch_bytes_per_peer")),
            resolved,
            recent: RecentTerms::default(),
        }
    }

    /// The entries that price this pool, one per family.
    pub fn resolved(&self) -> &Resolved {
        &self.resolved
    }

    /// Weight bytes one step reads on each GPU (all but the input embedding).
    pub fn streamed_weight_bytes(&self) -> f64 {
        self.dense_layers
            * (self.qkv.weight_bytes + self.output_projection.weight_bytes + self.dense_mlp.weight_bytes)
            + self.moe_layers
                * (self.qkv.weight_bytes
                    + self.output_projection.weight_bytes
                    + (self.experts + self.shared_experts) * self.expert.weight_bytes
                    + self.router.weight_bytes)
            + self.logits.weight_bytes
    }

    /// Time of one all-reduce of `tokens` tokens' activations, µs (zero without tensor
    /// parallelism).
    pub fn all_reduce_micros(&self, tokens: f64) -> f64 {
        if self.tensor_parallel == 1 {
            return 0.0;
        }
        let (latency, efficiency, _) = self.all_reduce;
        latency + tokens * self.all_reduce_bytes_per_token / (self.link_bandwidth * efficiency) * 1e6
    }

    /// The terms of a step's price that depend only on its padded token count: from
    /// [`RecentTerms`] when the count was seen last in its slot.
    fn padded_terms(&self, token_count: u64) -> PaddedTerms {
        let slot = &self.recent.padded[token_count as usize % RECENT_SLOTS];
        if let Some((count, terms)) = slot.get()
            && count == token_count
        {
            return terms;
        }
        let tokens = token_count as f64;
        // Linear layers of one dense layer (and the attention projections of a MoE layer).
        let projections = self.linear(&self.qkv, tokens, &self.gemm)
            + self.linear(&self.output_projection, tokens, &self.gemm);
        let dense_mlp = self.linear(&self.dense_mlp, tokens, &self.gemm);
        let moe_mlp = if self.moe_layers > 0.0 {
            // Expected distinct experts hit by `tokens` tokens under uniform routing.
            let touched =
                self.experts * (1.0 - libm::pow(1.0 - self.experts_per_token / self.experts, tokens));
            let expert = &self.expert;
            let flops = expert.flops_per_token * tokens * (self.experts_per_token + self.shared_experts)
                + self.router.flops_per_token * tokens;
            let bytes = expert.weight_bytes * (touched + self.shared_experts)
                + self.router.weight_bytes
                + (expert.activation_bytes_per_token * (self.experts_per_token + self.shared_experts)
                    + self.router.activation_bytes_per_token)
                    * tokens;
            self.operator(
                flops,
                self.peak_flops,
                self.gemm.compute_at(tokens),
                bytes,
                self.gemm.memory_efficiency,
            )
        } else {
            0.0
        };
        let gemm_time =
            self.dense_layers * (projections + dense_mlp) + self.moe_layers * (projections + moe_mlp);
        let layers = self.dense_layers + self.moe_layers;
        let (dispatch_us, dispatch_token_us, _) = self.moe_dispatch;
        let terms = PaddedTerms {
            gemm: gemm_time,
            all_reduce: 2.0 * layers * self.all_reduce_micros(tokens),
            dispatch: self.moe_layers * (dispatch_us + dispatch_token_us * tokens),
        };
        slot.set(Some((token_count, terms)));
        terms
    }

    /// The output projection's time for `sampled` sampled tokens: from [`RecentTerms`] when
    /// the count was seen last in its slot.
    fn logits_time(&self, sampled: u32) -> f64 {
        let slot = &self.recent.sampled[sampled as usize % RECENT_SLOTS];
        if let Some((count, time)) = slot.get()
            && count == sampled
        {
            return time;
        }
        let time = self.linear(&self.logits, f64::from(sampled), &self.logits_coefficient);
        slot.set(Some((sampled, time)));
        time
    }

    /// Operator time, µs: the larger of compute and memory.
    fn operator(
        &self,
        flops: f64,
        peak: f64,
        compute_efficiency: f64,
        bytes: f64,
        memory_efficiency: f64,
    ) -> f64 {
        let compute = if flops > 0.0 { flops / (peak * compute_efficiency) } else { 0.0 };
        let memory = bytes / (self.bandwidth * memory_efficiency);
        compute.max(memory) * 1e6
    }

    fn linear(&self, op: &Linear, tokens: f64, coefficient: &Coefficient) -> f64 {
        if tokens == 0.0 {
            return 0.0;
        }
        self.operator(
            op.flops_per_token * tokens,
            self.peak_flops,
            coefficient.compute_at(tokens),
            op.weight_bytes + op.activation_bytes_per_token * tokens,
            coefficient.memory_efficiency,
        )
    }
}

impl Environment for Pricer {
    /// Blocks × (K and V of every layer, every head, every GPU): what `swap_blocks` copies.
    fn transfer_bytes(&self, transfer: &blis_contracts::Transfer) -> u64 {
        transfer.gpu_blocks.saturating_mul(self.kv_block_bytes)
    }

    fn memory(&self, plan: &PoolPlan) -> MemoryFootprint {
        let activation_peak = f64::from(plan.max_num_batched_tokens) * self.activation_bytes_per_token
            + f64::from(plan.max_num_seqs) * self.logits_bytes_per_sequence;
        let (non_torch, per_peer) = self.memory;
        MemoryFootprint {
            gpu_capacity_bytes: self.capacity_bytes,
            weights_bytes: self.resident_weight_bytes.ceil() as u64,
            activation_peak_bytes: activation_peak.ceil() as u64,
            non_torch_bytes: (non_torch + per_peer * f64::from(self.tensor_parallel - 1)) as u64,
            cuda_graph_bytes: 0,
        }
    }

    fn price(&self, step: &StepShape) -> StepPrice {
        let totals = &step.totals;
        let token_count = step.padded_tokens;
        let mut by_rank = RankSums::default();

        let gemm_rank = self.gemm.entry.rank_for_tokens(token_count);
        let padded = self.padded_terms(token_count);
        by_rank.add(gemm_rank, padded.gemm);

        // Attention, per layer: prompt chunks (causal, over their cached context) and decodes.
        let layers = self.dense_layers + self.moe_layers;
        let prefill_pairs = totals.prefill_attention_pairs_x2 as f64 / 2.0;
        let prefill = if totals.prefill_requests > 0 {
            self.operator(
                prefill_pairs * self.attention_flops_per_pair,
                self.attention_peak_flops,
                self.prefill_attention.compute_efficiency,
                (totals.prefill_context_tokens + totals.prefill_tokens) as f64
                    * self.kv_bytes_per_token_per_layer,
                self.prefill_attention.memory_efficiency,
            )
        } else {
            0.0
        };
        by_rank.add(self.prefill_attention.entry.rank_for_tokens(token_count), layers * prefill);
        let decode_pairs = (totals.decode_context_tokens + u64::from(totals.decode_requests)) as f64;
        let decode = if totals.decode_requests > 0 {
            self.operator(
                decode_pairs * self.attention_flops_per_pair,
                self.attention_peak_flops,
                self.decode_attention.compute_efficiency,
                decode_pairs * self.kv_bytes_per_token_per_layer,
                self.decode_attention.memory_efficiency,
            )
        } else {
            0.0
        };
        by_rank.add(self.decode_attention.entry.rank_for_tokens(token_count), layers * decode);

        // Two all-reduces per layer under tensor parallelism; MoE routing per MoE layer.
        let (_, _, all_reduce_rank) = self.all_reduce;
        by_rank.add(all_reduce_rank, padded.all_reduce);
        let (_, _, dispatch_rank) = self.moe_dispatch;
        by_rank.add(dispatch_rank, padded.dispatch);

        // The output projection, for sampled tokens only.
        let sampled = f64::from(totals.sampled_tokens);
        by_rank.add(
            self.logits_coefficient.entry.rank_for_tokens(u64::from(totals.sampled_tokens)),
            self.logits_time(totals.sampled_tokens),
        );

        // Kernel launches and host work.
        let (eager_us, piecewise_us, full_us, launch_rank) = self.launch;
        let launch_us = match step.graph {
            StepGraph::Eager => eager_us,
            StepGraph::Piecewise => piecewise_us,
            StepGraph::Full => full_us,
        };
        by_rank.add(launch_rank, launch_us);
        let (step_us, request_us, token_us, host_rank) = self.host;
        let host_micros = step_us + request_us * f64::from(totals.requests) + token_us * sampled;
        by_rank.add(host_rank, host_micros);

        let by_rank = by_rank.shares();
        StepPrice { micros: by_rank.total(), host_micros, by_rank }
    }

    fn frontend_micros(&self, prompt_tokens: u32) -> f64 {
        let (request_us, token_us) = self.frontend;
        request_us + token_us * f64::from(prompt_tokens)
    }
}

/// A price's time by rank while it is summed: one variable per rank, so that they stay in
/// registers (an array indexed by rank lives in memory, and each addition to it waits for the
/// store of the one before). Each rank's terms are added in the same order as into
/// [`RankShares`], so the sums are the same bits.
#[derive(Clone, Copy, Default)]
struct RankSums {
    measured: f64,
    calibrated: f64,
    transferred: f64,
    literature: f64,
    vendor_spec: f64,
    roofline: f64,
    assumed: f64,
}

impl RankSums {
    /// Add `micros` priced at `rank`.
    #[inline(always)]
    fn add(&mut self, rank: Rank, micros: f64) {
        match rank {
            Rank::Measured => self.measured += micros,
            Rank::Calibrated => self.calibrated += micros,
            Rank::Transferred => self.transferred += micros,
            Rank::Literature => self.literature += micros,
            Rank::VendorSpec => self.vendor_spec += micros,
            Rank::Roofline => self.roofline += micros,
            Rank::Assumed => self.assumed += micros,
        }
    }

    /// The sums as shares indexed like [`Rank::ALL`].
    fn shares(self) -> RankShares {
        RankShares([
            self.measured,
            self.calibrated,
            self.transferred,
            self.literature,
            self.vendor_spec,
            self.roofline,
            self.assumed,
        ])
    }
}

/// Model facts a catalog listing shows: total and active parameters.
pub fn parameter_summary(model: &ModelArchitecture) -> (f64, f64) {
    let counts = ParameterCounts::of(model);
    let active = match model.moe {
        Some(moe) => counts.active(moe.experts_per_token, moe.experts, f64::from(model.hidden_size)),
        None => counts.total(),
    };
    (counts.total(), active)
}

#[cfg(test)]
mod tests {
    use blis_contracts::{
        Dtype, EngineIdentity, GraphPolicy, KvPlan, ParallelLayout, PoolPlan, Rank, StepRequest, StepShape,
    };

    use super::*;
    use crate::Catalog;

    /// Only the roofline entries (and the memory assumption): datasheet physics, with the
    /// kernel launches the registry prices by assumption set to nothing.
    fn roofline() -> Registry {
        let embedded = Registry::embedded();
        let mut entries: Vec<Entry> = embedded
            .entries()
            .iter()
            .filter(|e| e.rank == Rank::Roofline || e.family == Family::Memory)
            .cloned()
            .collect();
        let mut launch = embedded
            .entries()
            .iter()
            .find(|e| e.family == Family::Launch && e.chip == "*" && e.bundle.is_none())
            .expect("the registry prices launches")
            .clone();
        launch.params.values_mut().for_each(|v| *v = 0.0);
        entries.push(launch);
        Registry::from_entries(entries).unwrap()
    }

    fn plan(model: &str, tp: u32, weights: Option<Dtype>) -> PoolPlan {
        let mut model = Catalog::embedded().model(model, "").unwrap().architecture.clone();
        if let Some(dtype) = weights {
            model.weight_dtype = dtype;
            model.gemm_dtype = dtype;
        }
        PoolPlan {
            engine: EngineIdentity { kind: "test".into(), version: "0".into() },
            chip: "H100-SXM".into(),
            layout: ParallelLayout { tensor: tp, pipeline: 1, data: 1 },
            kv: KvPlan { block_size: 16, dtype: Dtype::Bfloat16, bytes_per_block_per_gpu: 0, num_blocks: 0 },
            max_num_batched_tokens: 8192,
            max_num_seqs: 1024,
            graphs: GraphPolicy::Eager,
            steps_in_flight: 1,
            model,
        }
    }

    fn pricer(model: &str, tp: u32, weights: Option<Dtype>, registry: &Registry) -> Pricer {
        let catalog = Catalog::embedded();
        Pricer::new(catalog.chip("H100-SXM", "").unwrap(), &plan(model, tp, weights), registry)
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
        let price = pricer("Llama-3.1-8B", 1, None, &roofline()).price(&decode_step(1, 1));
        assert!(price.micros >= 4_480.0, "{}", price.micros);
        assert!(
            price.micros < 4_485.0,
            "nothing but weights, activations and one token of KV: {}",
            price.micros
        );
        assert_eq!(price.by_rank.get(Rank::Roofline), price.micros);
        // With the embedded registry the floor still holds; calibrated efficiencies and host
        // work add to it.
        let embedded = pricer("Llama-3.1-8B", 1, None, &Registry::embedded()).price(&decode_step(1, 1));
        assert!(embedded.micros >= price.micros);
        assert!(embedded.by_rank.get(Rank::Calibrated) > 0.0);
    }

    /// Each rank's sum lands in that rank's share, and a rank's terms add in the order given.
    #[test]
    fn rank_sums_become_the_shares_of_their_ranks() {
        for (i, rank) in Rank::ALL.into_iter().enumerate() {
            let mut sums = RankSums::default();
            sums.add(rank, 0.1);
            sums.add(rank, 0.2);
            let mut expected = RankShares::default();
            expected.0[i] = 0.1 + 0.2;
            assert_eq!(sums.shares(), expected, "{rank:?}");
        }
    }

    #[test]
    fn a_price_is_the_same_whether_its_token_terms_were_recalled_or_computed() {
        // Counts 16 apart share a slot of the recent terms, so this sequence both recalls and
        // overwrites them; every price must be bit for bit a fresh pricer's.
        let shapes: Vec<StepShape> = [(1, 1), (17, 40), (1, 2), (33, 7), (17, 41), (3, 9), (19, 5), (3, 9)]
            .into_iter()
            .map(|(batch, context)| {
                let mut step = decode_step(batch, context);
                step.push(StepRequest {
                    new_tokens: 100 * batch,
                    context_tokens: 0,
                    samples: batch % 2 == 1,
                });
                step
            })
            .chain([decode_step(64, 1_024), decode_step(80, 1_024), decode_step(64, 4_096)])
            .collect();
        for (model, tp) in [("Llama-3.1-8B", 1), ("Llama-3.1-8B", 2), ("Mixtral-8x7B-v0.1", 2)] {
            let warm = pricer(model, tp, None, &Registry::embedded());
            for round in 0..3 {
                for shape in &shapes {
                    let fresh = pricer(model, tp, None, &Registry::embedded()).price(shape);
                    let recalled = warm.price(shape);
                    assert_eq!(
                        recalled.micros.to_bits(),
                        fresh.micros.to_bits(),
                        "{model} TP{tp}, round {round}"
                    );
                    assert_eq!(recalled.host_micros.to_bits(), fresh.host_micros.to_bits());
                    assert_eq!(recalled.by_rank, fresh.by_rank);
                }
            }
        }
    }

    #[test]
    fn decode_time_grows_with_batch_times_context_once_kv_reads_dominate() {
        let p = pricer("Llama-3.1-8B", 1, None, &roofline());
        let small = p.price(&decode_step(64, 1_024)).micros;
        let large = p.price(&decode_step(64, 4_096)).micros;
        let huge = p.price(&decode_step(256, 4_096)).micros;
        // costmodel-facts.md §6: 7.05 ms and 14.74 ms at 100% bandwidth, counting weights and KV
        // reads only; activations and the float32 logits add 0.25 GB (about 1%) here.
        assert!((small / 7_045.0 - 1.0).abs() < 0.015, "{small}");
        assert!((large / 14_740.0 - 1.0).abs() < 0.01, "{large}");
        // Once KV reads dominate, 4× the batch at the same context costs nearly 4× the KV time.
        let kv = |t: f64| t - 4_480.0;
        assert!((kv(huge) / kv(large) - 4.0).abs() < 0.1, "{large} → {huge}");
    }

    #[test]
    fn a_long_prefill_is_compute_bound() {
        let mut step = StepShape::default();
        step.push(StepRequest { new_tokens: 2_048, context_tokens: 0, samples: true });
        // Linear layers without the output projection: 2 × 6.980e9 × 2048 = 28.59 TFLOP; causal
        // attention 4 × 4096 × 32 × (2048 × 2049 / 2) = 1.10 TFLOP; logits for the one sampled
        // token only (1 GFLOP). 29.69 TFLOP at 989.4 TFLOP/s = 30.0 ms. (costmodel-facts.md §6
        // quotes 31.8 TFLOP because it counts logits for all 2,048 tokens.) The output
        // projection for one sampled token is its own operator, memory-bound: its 1.05 GB of
        // weights take 313 µs, which a single maximum over the step would hide.
        let micros = pricer("Llama-3.1-8B", 1, None, &roofline()).price(&step).micros;
        assert!((micros - (30_006.0 + 313.0)).abs() < 10.0, "{micros}");
    }

    #[test]
    fn a_mixed_step_pays_for_its_compute_bound_prefill_and_its_memory_bound_decode() {
        let p = pricer("Llama-3.1-8B", 1, None, &roofline());
        let mut prefill = StepShape::default();
        prefill.push(StepRequest { new_tokens: 512, context_tokens: 0, samples: true });
        let decode = decode_step(128, 8_192);
        let mut mixed = decode.clone();
        mixed.push(StepRequest { new_tokens: 512, context_tokens: 0, samples: true });
        let (p_alone, d_alone, both) =
            (p.price(&prefill).micros, p.price(&decode).micros, p.price(&mixed).micros);
        // Per operator: the mixed step's attention pays the decode's KV reads and the prefill's
        // FLOPs, so it costs more than either alone, and more than one global max would say.
        assert!(both > p_alone.max(d_alone), "{p_alone} {d_alone} {both}");
    }

    #[test]
    fn tensor_parallel_two_halves_the_weight_bytes_per_gpu_and_adds_all_reduce_time() {
        // The literature all-reduce entry (the calibrated bundle left out).
        let registry = Registry::embedded().without_bundle("vllm-0.15.1-h100");
        let (one, two) =
            (pricer("Llama-3.1-8B", 1, None, &registry), pricer("Llama-3.1-8B", 2, None, &registry));
        assert!((one.streamed_weight_bytes() / two.streamed_weight_bytes() - 2.0).abs() < 1e-12);
        assert_eq!(one.all_reduce_micros(1.0), 0.0);
        // Vidur's H100 TP2 latency floor: 7 µs per all-reduce, two per layer.
        assert!((two.all_reduce_micros(1.0) - 7.0).abs() < 0.05);
        let price = two.price(&decode_step(1, 1));
        assert!(price.by_rank.get(Rank::Literature) >= 2.0 * 32.0 * 7.0);
    }

    #[test]
    fn an_fp8_model_reads_half_the_weight_bytes_but_its_output_projection_stays_bf16() {
        let registry = roofline();
        let bf16 = pricer("Llama-3.1-8B", 1, None, &registry);
        let fp8 = pricer("Llama-3.1-8B", 1, Some(Dtype::Fp8), &registry);
        let counts =
            ParameterCounts::of(&Catalog::embedded().model("Llama-3.1-8B", "").unwrap().architecture);
        // vLLM quantizes the linear layers only: the 525 M-parameter lm_head stays in bf16.
        let lm_head_bytes = 2.0 * counts.lm_head;
        let expected = (bf16.streamed_weight_bytes() - lm_head_bytes) / 2.0 + lm_head_bytes;
        assert!((fp8.streamed_weight_bytes() - expected).abs() < 1.0, "{}", fp8.streamed_weight_bytes());
        let (slow, fast) = (bf16.price(&decode_step(1, 1)).micros, fp8.price(&decode_step(1, 1)).micros);
        let ratio = bf16.streamed_weight_bytes() / expected;
        assert!((slow / fast - ratio).abs() < 0.01, "{slow} vs {fast}, expected ×{ratio}");
    }

    #[test]
    fn weight_only_fp8_streams_fp8_bytes_but_computes_at_the_bf16_peak() {
        let registry = roofline();
        let mut w8a16 = plan("Llama-3.1-8B", 1, Some(Dtype::Fp8));
        w8a16.model.gemm_dtype = Dtype::Bfloat16;
        let chip = Catalog::embedded().chip("H100-SXM", "").unwrap().clone();
        let w8a16 = Pricer::new(&chip, &w8a16, &registry);
        let w8a8 = pricer("Llama-3.1-8B", 1, Some(Dtype::Fp8), &registry);
        assert_eq!(w8a16.streamed_weight_bytes(), w8a8.streamed_weight_bytes());
        // A large prefill is compute-bound: at the bf16 peak it takes about twice as long.
        let mut prefill = StepShape::default();
        prefill.push(StepRequest { new_tokens: 8192, context_tokens: 0, samples: true });
        let (slow, fast) = (w8a16.price(&prefill).micros, w8a8.price(&prefill).micros);
        assert!(slow / fast > 1.5, "{slow} vs {fast}");
    }

    #[test]
    fn an_moe_batch_reads_more_experts_as_it_grows() {
        let p = pricer("Mixtral-8x7B-v0.1", 2, None, &roofline());
        let one = p.price(&decode_step(1, 1)).micros;
        let many = p.price(&decode_step(64, 1)).micros;
        // At batch 1 two experts of eight are read (12.9 B active of 46.7 B); at 64 all of them.
        assert!(many / one > 2.5, "{one} → {many}");
    }

    #[test]
    fn moe_routing_costs_a_time_per_moe_layer_and_per_token() {
        let routed = |latency_us: f64, token_us: f64| {
            let entries = roofline()
                .entries()
                .iter()
                .cloned()
                .map(|mut e| {
                    if e.family == Family::MoeDispatch {
                        e.params.insert("latency_us".into(), latency_us);
                        e.params.insert("token_us".into(), token_us);
                    }
                    e
                })
                .collect();
            pricer("Mixtral-8x7B-v0.1", 2, None, &Registry::from_entries(entries).unwrap())
        };
        let (none, routed) = (routed(0.0, 0.0), routed(10.0, 0.5));
        // Mixtral has 32 MoE layers: 32 × (10 µs + 0.5 µs × tokens) more per step.
        for batch in [1u32, 8, 64] {
            let extra =
                routed.price(&decode_step(batch, 100)).micros - none.price(&decode_step(batch, 100)).micros;
            let expected = 32.0 * (10.0 + 0.5 * f64::from(batch));
            assert!((extra - expected).abs() < 1e-6, "batch {batch}: {extra} vs {expected}");
        }
    }
}
