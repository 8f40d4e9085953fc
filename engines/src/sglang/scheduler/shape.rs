//! The step a formed batch runs, as the cost model prices it: per row its new tokens, context
//! and whether it samples, padded as the release's CUDA graphs pad it.

use blis_contracts::{StepGraph, StepRequest, StepShape};

use super::*;
use crate::sglang::defaults::{decode_graph_for, prefill_graph_for};

/// The CUDA graphs an instance captured (`cuda_graph_config`): decode batch sizes and prefill
/// token buckets, each empty when that phase's graphs are disabled.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GraphPolicy {
    /// Captured decode batch sizes (full graphs).
    pub decode_sizes: Vec<usize>,
    /// Captured prefill token buckets (breakable graphs).
    pub prefill_buckets: Vec<usize>,
}

impl Scheduler {
    /// Write into `shape` the step `batch` runs; call it right after [`Scheduler::next_batch`]
    /// formed the batch. A decode replays the smallest captured batch size at least as large
    /// (full graph) or runs eager; a prefill replays its token bucket (breakable graph, priced as
    /// piecewise) or runs eager; a mixed batch runs eager (whether upstream's runner replays it
    /// depends on a runner flag this port does not know; unverified).
    pub fn step_shape(&self, batch: &Batch, graphs: &GraphPolicy, shape: &mut StepShape) {
        shape.clear();
        for &id in &batch.requests {
            let r = &self.requests[id];
            let decode_row = batch.kind == BatchKind::Decode || batch.decoding.contains(&id);
            shape.push(if decode_row {
                // prepare_for_decode already took the slot of the token this step writes.
                StepRequest { new_tokens: 1, context_tokens: (r.kv_committed - 1) as u32, samples: true }
            } else {
                StepRequest {
                    new_tokens: (r.extend_end - r.prefix_len) as u32,
                    context_tokens: r.prefix_len as u32,
                    samples: self.chunked != Some(id),
                }
            });
        }
        let (graph, padded) = match batch.kind {
            BatchKind::Decode => match decode_graph_for(batch.requests.len(), &graphs.decode_sizes) {
                Some(size) => (StepGraph::Full, size as u64),
                None => (StepGraph::Eager, shape.totals.new_tokens),
            },
            BatchKind::Extend => {
                match prefill_graph_for(shape.totals.new_tokens as usize, &graphs.prefill_buckets) {
                    Some(bucket) => (StepGraph::Piecewise, bucket as u64),
                    None => (StepGraph::Eager, shape.totals.new_tokens),
                }
            }
            BatchKind::Mixed => (StepGraph::Eager, shape.totals.new_tokens),
        };
        shape.graph = graph;
        shape.padded_tokens = padded;
    }
}
