//! Nanoseconds per step price at batch 1, 64 and 256 (decodes over 1,024 tokens of context plus
//! one 512-token prompt chunk), for a dense model and an MoE. Figures in `docs/PERFORMANCE.md`.

use std::hint::black_box;

use blis_contracts::{
    EngineIdentity, Environment, GraphPolicy, KvPlan, ParallelLayout, PoolPlan, StepRequest, StepShape,
};
use blis_costmodel::{CostData, Pricer};
use criterion::{Criterion, criterion_group, criterion_main};

fn plan(data: &CostData, model: &str, tp: u32) -> PoolPlan {
    let model = data.catalog.model(model, "").unwrap().architecture.clone();
    PoolPlan {
        engine: EngineIdentity { kind: "bench".into(), version: "0".into() },
        chip: "H100-SXM".into(),
        layout: ParallelLayout { tensor: tp, pipeline: 1, data: 1 },
        kv: KvPlan { block_size: 16, dtype: model.compute_dtype, bytes_per_block_per_gpu: 0, num_blocks: 0 },
        max_num_batched_tokens: 8192,
        max_num_seqs: 1024,
        graphs: GraphPolicy::Eager,
        steps_in_flight: 1,
        model,
    }
}

fn step(batch: u32) -> StepShape {
    let mut step = StepShape::default();
    for _ in 0..batch - 1 {
        step.push(StepRequest { new_tokens: 1, context_tokens: 1_024, samples: true });
    }
    step.push(StepRequest { new_tokens: 512, context_tokens: 0, samples: true });
    step
}

fn pricing(c: &mut Criterion) {
    let data = CostData::embedded();
    let chip = data.catalog.chip("H100-SXM", "").unwrap();
    for (model, tp) in [("Llama-3.1-8B", 1), ("Mixtral-8x7B-v0.1", 2)] {
        let pricer = Pricer::new(chip, &plan(&data, model, tp), &data.registry);
        let mut group = c.benchmark_group(format!("price/{model}"));
        for batch in [1, 64, 256] {
            let shape = step(batch);
            group.bench_function(format!("batch-{batch}"), |b| {
                b.iter(|| black_box(pricer.price(black_box(&shape))))
            });
        }
        group.finish();
    }
}

criterion_group!(benches, pricing);
criterion_main!(benches);
