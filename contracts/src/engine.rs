//! The engine contract: where an engine port and the cost model meet (DESIGN.md §5).
//!
//! An engine port knows its upstream; the cost model knows the hardware. They meet in three
//! objects, all in physical units:
//!
//! - [`PoolPlan`], fixed for a pool's life: hardware, model, parallel layout, KV budget, graph
//!   policy, steps in flight;
//! - [`StepShape`], one step, already padded as the upstream pads it, with its mode and, per
//!   request, its new tokens and context length (and running totals so pricing need not walk the
//!   batch);
//! - a transfer of KV between instances (added with disaggregation).
//!
//! Construction has two phases joined by an [`Environment`]: *plan* — the engine lowers its
//! model into a `PoolPlan` with an empty KV budget, asks for the [`MemoryFootprint`] and applies
//! its upstream's budget rule; *run* — the engine forms each step's `StepShape` and asks for its
//! [`StepPrice`].

use serde::{Deserialize, Serialize};

use crate::model::{Dtype, ModelArchitecture};
use crate::rank::RankShares;

/// Which upstream engine, at which release, a pool models.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct EngineIdentity {
    /// Engine name, e.g. `vllm`.
    pub kind: String,
    /// Upstream release, e.g. `0.15.1`.
    pub version: String,
}

/// How a pool's model is split over accelerators.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParallelLayout {
    /// Tensor-parallel degree: GPUs sharing every layer.
    pub tensor: u32,
    /// Pipeline-parallel degree: stages of consecutive layers.
    pub pipeline: u32,
    /// Data-parallel degree: lockstep replicas inside one instance.
    pub data: u32,
}

impl ParallelLayout {
    /// GPUs one instance occupies.
    pub fn gpus(self) -> u32 {
        self.tensor * self.pipeline * self.data
    }
}

/// The KV cache of one instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvPlan {
    /// Tokens per block (vLLM) or page (SGLang).
    pub block_size: u32,
    /// Element format.
    pub dtype: Dtype,
    /// Bytes one block takes on each GPU, over all layers.
    pub bytes_per_block_per_gpu: u64,
    /// Blocks in the cache; zero in the plan phase, before the budget rule runs.
    pub num_blocks: u64,
}

/// One KV move between an instance's GPU blocks and a tier below them (DESIGN.md §5.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transfer {
    /// GPU blocks moved (each the instance's block over all its layers and GPUs).
    pub gpu_blocks: u64,
}

/// What CUDA graphs an instance captures.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum GraphPolicy {
    /// No graphs: every step runs eagerly at its exact size.
    Eager,
    /// Graphs captured at these token counts (ascending); a step up to the largest is padded
    /// to the next one and replays a graph, a larger step runs eagerly.
    Captured {
        /// The capture sizes, in tokens.
        capture_sizes: Vec<u32>,
    },
}

/// How one step runs on the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StepGraph {
    /// Every kernel launched one by one, at the exact token count.
    #[default]
    Eager,
    /// Graph replays for everything but attention, which launches eagerly per layer.
    Piecewise,
    /// One graph replay for the whole step.
    Full,
}

/// Everything about a pool that stays fixed for its life.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PoolPlan {
    /// The upstream engine modelled.
    pub engine: EngineIdentity,
    /// Chip name from the catalog.
    pub chip: String,
    /// The served model.
    pub model: ModelArchitecture,
    /// How the model is split over GPUs.
    pub layout: ParallelLayout,
    /// The KV cache.
    pub kv: KvPlan,
    /// Largest number of tokens in one step; sizes the activation memory.
    pub max_num_batched_tokens: u32,
    /// Largest number of requests in one step.
    pub max_num_seqs: u32,
    /// CUDA-graph capture.
    pub graphs: GraphPolicy,
    /// Steps that may be in flight at once (1: synchronous; 2: the next step is scheduled
    /// while the current one runs).
    pub steps_in_flight: u32,
}

/// Memory a pool's fixed parts take on each GPU, from the Environment, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryFootprint {
    /// Memory the device reports as its total.
    pub gpu_capacity_bytes: u64,
    /// Resident weights.
    pub weights_bytes: u64,
    /// Peak activation memory of the largest step (the upstream's profiling run).
    pub activation_peak_bytes: u64,
    /// Allocations outside the framework's allocator (communication buffers, CUDA context).
    pub non_torch_bytes: u64,
    /// CUDA-graph memory pools.
    pub cuda_graph_bytes: u64,
}

/// What kind of step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StepMode {
    /// Decodes and prefill chunks together under one token budget.
    Mixed,
    /// Every request decodes one token.
    DecodeOnly,
}

/// One request's part of a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepRequest {
    /// Tokens computed this step (1 for a decode, the chunk for a prefill).
    pub new_tokens: u32,
    /// Tokens already in its KV cache before this step.
    pub context_tokens: u32,
    /// Whether this step samples a token for it (a decode, or the last chunk of a prompt).
    pub samples: bool,
}

/// Running totals of a step, kept as requests are added, so pricing is O(1) in the batch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepTotals {
    /// Requests in the step.
    pub requests: u32,
    /// Tokens computed (sum of `new_tokens`), before padding.
    pub new_tokens: u64,
    /// Tokens sampled (rows of the logits).
    pub sampled_tokens: u32,
    /// Requests computing exactly one token over a non-empty context.
    pub decode_requests: u32,
    /// Sum of those requests' context lengths.
    pub decode_context_tokens: u64,
    /// Requests computing a chunk of their prompt (or a recomputation).
    pub prefill_requests: u32,
    /// Tokens in those chunks.
    pub prefill_tokens: u64,
    /// Sum of those chunks' context lengths (KV read from the cache).
    pub prefill_context_tokens: u64,
    /// Twice the causal query-key pairs of the chunks: `Σ q·(2c + q + 1)`.
    pub prefill_attention_pairs_x2: u64,
}

/// One step of one instance, as the cost model prices it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepShape {
    /// Per request, in the order the engine scheduled them; decoding requests an engine
    /// advances as a cohort are in `totals` only (see [`StepShape::push_decodes`]).
    pub requests: Vec<StepRequest>,
    /// Totals over `requests`.
    pub totals: StepTotals,
    /// Token count the step runs at after the upstream's padding (equal to
    /// `totals.new_tokens` when it runs eagerly).
    pub padded_tokens: u64,
    /// How the step is launched.
    pub graph: StepGraph,
}

impl StepShape {
    /// Empty the step, keeping its allocation.
    pub fn clear(&mut self) {
        self.requests.clear();
        self.totals = StepTotals::default();
        self.padded_tokens = 0;
        self.graph = StepGraph::Eager;
    }

    /// Add one request's part and update the totals (inlined: engines push every scheduled
    /// request of every step).
    #[inline]
    pub fn push(&mut self, request: StepRequest) {
        let t = &mut self.totals;
        let (q, c) = (u64::from(request.new_tokens), u64::from(request.context_tokens));
        t.requests += 1;
        t.new_tokens += q;
        t.sampled_tokens += u32::from(request.samples);
        if q == 1 && c > 0 {
            t.decode_requests += 1;
            t.decode_context_tokens += c;
        } else {
            t.prefill_requests += 1;
            t.prefill_tokens += q;
            t.prefill_context_tokens += c;
            t.prefill_attention_pairs_x2 += q * (2 * c + q + 1);
        }
        self.padded_tokens = t.new_tokens;
        self.requests.push(request);
    }

    /// Add `requests` requests decoding one token each (each sampling it) over contexts of
    /// `context_tokens` in all, known only by their totals: an engine that advances its plain
    /// decoders as a cohort does not list them in `requests`.
    pub fn push_decodes(&mut self, requests: u32, context_tokens: u64) {
        let t = &mut self.totals;
        t.requests += requests;
        t.new_tokens += u64::from(requests);
        t.sampled_tokens += requests;
        t.decode_requests += requests;
        t.decode_context_tokens += context_tokens;
        self.padded_tokens = t.new_tokens;
    }

    /// Decode-only when every request decodes one token; mixed otherwise.
    pub fn mode(&self) -> StepMode {
        if self.totals.prefill_requests == 0 { StepMode::DecodeOnly } else { StepMode::Mixed }
    }
}

/// The price of one step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StepPrice {
    /// Wall time of the step on the device, in microseconds (not yet rounded; the engine host
    /// applies the one rounding rule).
    pub micros: f64,
    /// The part of `micros` spent on the host CPU (scheduling, input preparation, output
    /// processing), which asynchronous scheduling overlaps with the previous step's device time.
    pub host_micros: f64,
    /// The same time split by the rank of the coefficients that priced each part.
    pub by_rank: RankShares,
}

/// What an engine port asks of the hardware: memory at plan time, a price per step at run time.
pub trait Environment: Send {
    /// The memory the plan's fixed parts take on each GPU.
    fn memory(&self, plan: &PoolPlan) -> MemoryFootprint;

    /// The bytes one KV move carries, over all the instance's GPUs (the fabric splits them
    /// over each GPU's own links).
    fn transfer_bytes(&self, transfer: &Transfer) -> u64;

    /// The time one step takes.
    fn price(&self, step: &StepShape) -> StepPrice;

    /// The API server's time for a request of `prompt_tokens` before the engine sees it, µs.
    fn frontend_micros(&self, prompt_tokens: u32) -> f64 {
        let _ = prompt_tokens;
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_follow_the_requests_added() {
        let mut step = StepShape::default();
        step.push(StepRequest { new_tokens: 1, context_tokens: 100, samples: true });
        assert_eq!(step.mode(), StepMode::DecodeOnly);
        step.push(StepRequest { new_tokens: 3, context_tokens: 10, samples: false });
        assert_eq!(step.mode(), StepMode::Mixed);
        let t = step.totals;
        assert_eq!((t.requests, t.new_tokens, t.sampled_tokens), (2, 4, 1));
        assert_eq!((t.decode_requests, t.decode_context_tokens), (1, 100));
        assert_eq!((t.prefill_requests, t.prefill_tokens, t.prefill_context_tokens), (1, 3, 10));
        // Causal pairs of a 3-token chunk over 10 cached tokens: 11 + 12 + 13 = 36.
        assert_eq!(t.prefill_attention_pairs_x2, 72);
        step.clear();
        assert_eq!(step.totals, StepTotals::default());
    }

    #[test]
    fn decodes_given_by_their_totals_count_as_the_same_decodes_listed() {
        let contexts = [100u32, 37, 512];
        let mut listed = StepShape::default();
        listed.push(StepRequest { new_tokens: 5, context_tokens: 0, samples: true });
        let mut totals_only = listed.clone();
        for context_tokens in contexts {
            listed.push(StepRequest { new_tokens: 1, context_tokens, samples: true });
        }
        totals_only.push_decodes(3, contexts.iter().map(|&c| u64::from(c)).sum());
        assert_eq!(totals_only.totals, listed.totals);
        assert_eq!(totals_only.padded_tokens, listed.padded_tokens);
        assert_eq!(totals_only.mode(), StepMode::Mixed);
        assert_eq!(totals_only.requests.len(), 1);
    }
}
