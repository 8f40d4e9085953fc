//! SGLang 0.5.23's GPU-derived defaults and CUDA-graph rules, against the numbers the release
//! gives (`../shared/reference/sglang.md` §H and §M, checked in `arg_groups/memory_hook.py` and
//! `cuda_graph_hook.py`).

use blis_engines::sglang::defaults::{
    GpuDefaults, MemoryReserve, decode_graph_batch_sizes, decode_graph_for, gpu_defaults,
    max_running_requests, mem_fraction_static, prefill_graph_for, prefill_graph_max_tokens,
    prefill_graph_token_buckets,
};

#[test]
fn the_gpu_memory_table_sets_the_chunk_and_the_decode_graphs() {
    let d = |chunked_prefill_size, decode_max_bs| GpuDefaults { chunked_prefill_size, decode_max_bs };
    assert_eq!(gpu_defaults(Some(15_360), 1, None), d(2048, 8)); // T4
    assert_eq!(gpu_defaults(Some(24_564), 1, None), d(4096, 48)); // 4090
    assert_eq!(gpu_defaults(Some(24_564), 4, None), d(4096, 160));
    assert_eq!(gpu_defaults(Some(40_960), 1, None), d(4096, 32)); // A100-40G
    assert_eq!(gpu_defaults(Some(81_559), 1, None), d(8192, 256)); // H100
    assert_eq!(gpu_defaults(Some(81_559), 8, None), d(8192, 512));
    assert_eq!(gpu_defaults(Some(143_771), 1, None), d(8192, 256)); // H200
    assert_eq!(gpu_defaults(Some(183_359), 1, None), d(16384, 512)); // B200
    assert_eq!(gpu_defaults(None, 1, None), d(4096, 160));
    // An explicit max_running_requests below the default max_bs lowers it; above, it does not.
    assert_eq!(gpu_defaults(Some(81_559), 1, Some(64)).decode_max_bs, 64);
    assert_eq!(gpu_defaults(Some(81_559), 1, Some(1000)).decode_max_bs, 256);
}

#[test]
fn decode_graphs_step_by_8_16_and_32_and_always_include_max_bs() {
    let h100 = decode_graph_batch_sizes(256, false);
    assert_eq!(&h100[..8], &[1, 2, 4, 8, 12, 16, 24, 32]);
    assert_eq!(h100.len(), 5 + 31);
    assert_eq!(*h100.last().expect("sizes"), 256);
    let wide = decode_graph_batch_sizes(512, false);
    assert_eq!(
        &wide[36..],
        &[272, 288, 304, 320, 336, 352, 368, 384, 400, 416, 432, 448, 464, 480, 496, 512]
    );
    assert_eq!(decode_graph_batch_sizes(48, false), vec![1, 2, 4, 8, 12, 16, 24, 32, 40, 48]);
    assert_eq!(decode_graph_batch_sizes(20, false), vec![1, 2, 4, 8, 12, 16, 20]);
    assert_eq!(decode_graph_batch_sizes(5, true), vec![1, 2, 3, 4, 5]);
    // A batch runs the smallest captured size at least as large; above max_bs it runs eager.
    assert_eq!(decode_graph_for(13, &h100), Some(16));
    assert_eq!(decode_graph_for(256, &h100), Some(256));
    assert_eq!(decode_graph_for(257, &h100), None);
}

#[test]
fn prefill_graph_buckets_count_42_50_58_and_74_and_replay_within_twice_the_tokens() {
    for (max, count) in [(2048, 42), (4096, 50), (8192, 58), (16384, 74)] {
        assert_eq!(prefill_graph_token_buckets(max).len(), count, "max {max}");
    }
    let buckets = prefill_graph_token_buckets(8192);
    assert_eq!(prefill_graph_for(5, &buckets), Some(8));
    // One token would pad to 4, more than twice itself: eager. Two pad to 4: replayed.
    assert_eq!(prefill_graph_for(1, &buckets), None);
    assert_eq!(prefill_graph_for(2, &buckets), Some(4));
    assert_eq!(prefill_graph_for(8192, &buckets), Some(8192));
    assert_eq!(prefill_graph_for(8193, &buckets), None);
    assert_eq!(prefill_graph_max_tokens(8192, false, None, "meta-llama/Llama-2-7b-hf"), 4096);
    assert_eq!(prefill_graph_max_tokens(16384, true, None, "deepseek-ai/DeepSeek-V3"), 8192);
    assert_eq!(prefill_graph_max_tokens(8192, false, Some(6000), "Qwen/Qwen3-8B"), 6000);
}

#[test]
fn mem_fraction_static_matches_the_releases_worked_numbers() {
    let reserve = |gpu_mib, chunk, max_bs, buckets| MemoryReserve {
        gpu_mib,
        tp: 1,
        pp: 1,
        chunked_prefill_size: Some(chunk),
        max_prefill_tokens: 16_384,
        decode_graph_max_bs: Some(max_bs),
        prefill_graph_buckets: Some(buckets),
        mla: false,
    };
    // H100 80 GB: 512 + 12288 + 128 + 512 + 464 = 13904 MiB reserved.
    assert_eq!(mem_fraction_static(reserve(81_559, 8192, 256, 58)), 0.830);
    assert_eq!(mem_fraction_static(reserve(143_771, 8192, 256, 58)), 0.903);
    // A100-40G: 512 + 6144 + 128 + 64 + 400 = 7248 MiB, no 10 GiB floor below 60 GiB.
    assert_eq!(mem_fraction_static(reserve(40_960, 4096, 32, 50)), 0.823);
}

#[test]
fn max_running_requests_follows_capacity_with_its_clamp() {
    // 512 requests per context length of KV, clamped to 2048..4096, at most half the tokens.
    assert_eq!(max_running_requests(400_000, 8192, None, 1), 4096);
    assert_eq!(max_running_requests(20_000, 8192, None, 1), 2048);
    assert_eq!(max_running_requests(2_000, 8192, None, 1), 1000);
    assert_eq!(max_running_requests(400_000, 8192, Some(256), 1), 256);
    assert_eq!(max_running_requests(400_000, 8192, Some(256), 4), 64);
    assert_eq!(max_running_requests(100, 8192, Some(256), 1), 50);
}
