//! The KV budget of Llama-2-70B at TP 4 on H100-SXM with `gpu_memory_utilization` 0.9, derived
//! step by step as vLLM's memory-profiling rule does it, with the cost model's memory figures.
//! The engine arguments are those of the reference runs (`max_num_batched_tokens` 2048,
//! `max_num_seqs` 128, `max_model_len` 4096).

use blis_contracts::yaml;
use blis_costmodel::{CostData, Pricer};
use blis_engines::vllm::{self, DeviceClass, VllmArgs};

#[test]
fn llama_2_70b_tp4_on_h100_at_0_9_gets_30932_blocks() {
    let data = CostData::embedded();
    let chip = data.catalog.chip("H100-SXM", "").unwrap();
    let model = &data.catalog.model("Llama-2-70B", "").unwrap().architecture;
    let args: VllmArgs = yaml::from_str(
        "{tensor_parallel_size: 4, gpu_memory_utilization: 0.9, max_num_batched_tokens: 2048, max_num_seqs: 128, \
         max_model_len: 4096}",
    )
    .unwrap();
    let device = DeviceClass { name: &chip.name, capacity_bytes: chip.hbm_capacity.value as u64 };
    let (plan, _) =
        vllm::plan(&args, model, device, |p| Box::new(Pricer::new(chip, p, &data.registry)), "pool").unwrap();
    let budget = plan.budget;
    let f = budget.footprint;

    // 1. Total memory the device reports: 79.19 GiB.
    assert_eq!(f.gpu_capacity_bytes, 85_029_615_616);
    // 2. The instance may use 90% of it: ceil(0.9 × 85,029,615,616) (vLLM's request_memory
    //    rounds up).
    assert_eq!(budget.requested_bytes, 76_526_654_055);
    // 3. Weights: 262,144,000 (embedding) + 80 × (150,994,944 attention + 704,643,072 MLP
    //    + 16,384 norms) + 8,192 (final norm) + 262,144,000 (lm_head) = 68,976,648,192
    //    parameters × 2 B (float16) ÷ 4 GPUs.
    assert_eq!(f.weights_bytes, 34_488_324_096);
    // 4. Peak activations of the profiling run: 2,048 tokens × (2 × 8192 + (8192 + 2048) / 4
    //    + 2 × 28672 / 4) × 2 B = 136,314,880, plus the sampler's float32 logits for 128
    //    sequences: 128 × 32,000 × 4 B = 16,384,000.
    assert_eq!(f.activation_peak_bytes, 152_698_880);
    // 5. Outside the allocator: 512 MiB + 3 peers × 256 MiB (the registry's `memory` entry).
    assert_eq!(f.non_torch_bytes, 1_342_177_280);
    assert_eq!(f.cuda_graph_bytes, 0, "vLLM 0.15.1 captures graphs after sizing the cache");
    // 6. What is left for the KV cache.
    assert_eq!(budget.available_kv_bytes, 76_526_654_055 - 34_488_324_096 - 152_698_880 - 1_342_177_280);
    assert_eq!(budget.available_kv_bytes, 40_543_453_799);
    // 7. One block: K and V × 80 layers × 2 KV heads per GPU (8 ÷ 4) × 128 × 2 B × 16 tokens.
    assert_eq!(budget.bytes_per_block, 1_310_720);
    // 8. floor(40,543,453,799 / 1,310,720) = 30,932 blocks = 494,912 tokens.
    assert_eq!(budget.num_gpu_blocks, 30_932);
    assert_eq!(budget.kv_cache_tokens, 494_912);
    assert_eq!(plan.pool.kv.num_blocks, 30_932);
}
