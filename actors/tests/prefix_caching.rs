//! End to end with a shared-prefix workload: the prefix-cache hits an instance reports under
//! vLLM's metric names are the cached tokens counted in the calls, and turning prefix caching on
//! lowers time to first token.

mod common;

use blis_actors::{RunOptions, RunOutput, run};

fn shared_prefix() -> String {
    common::one_pool(
        Some(5),
        None,
        1,
        "enable_prefix_caching: CACHING",
        r#"
  clients:
    - name: agents
      requests: 200
      arrival: { process: poisson, rate_per_s: 4 }
      shared_prefix: { groups: 4, tokens: 2000 }
      input_tokens: { dist: uniform, min: 20, max: 200 }
      output_tokens: { dist: uniform, min: 20, max: 100 }
"#,
    )
}

fn run_with(caching: bool) -> RunOutput {
    let text = shared_prefix().replace("CACHING", &caching.to_string());
    run(&text, RunOptions::default(), &mut |_| {}).unwrap()
}

#[test]
fn reported_hits_are_the_calls_cached_tokens_and_caching_lowers_ttft() {
    let cached = run_with(true);
    let uncached = run_with(false);
    for output in [&cached, &uncached] {
        assert_eq!(output.result.fates.completed, 200);
    }

    // At this load every request is admitted at its first lookup and none is preempted, so the
    // instance's counters (one lookup per admission attempt) equal the calls' own counts.
    let instance = &cached.result.instances[0];
    assert_eq!(instance.preemptions, 0);
    let prompt_tokens: u64 = cached.calls.iter().map(|c| u64::from(c.input_tokens)).sum();
    let cached_tokens: u64 = cached.calls.iter().map(|c| u64::from(c.cached_tokens)).sum();
    assert_eq!(instance.prefix_cache_queries, prompt_tokens);
    assert_eq!(instance.prefix_cache_hits, cached_tokens);
    // Whole 16-token blocks of the 2,000-token system prompts hit after each group's first
    // request: 1,984 or 2,000 tokens (the prompt's own tokens never match another's).
    let hits_per_call: Vec<u32> = cached.calls.iter().map(|c| c.cached_tokens).collect();
    assert!(hits_per_call.iter().all(|&h| h == 0 || h == 1_984 || h == 2_000), "{hits_per_call:?}");
    assert!(hits_per_call.iter().filter(|&&h| h == 0).count() >= 4, "each group's first request misses");
    let rate = instance.prefix_cache_hits as f64 / instance.prefix_cache_queries as f64;
    assert!(rate > 0.85, "hit rate {rate}");

    let off = &uncached.result.instances[0];
    assert_eq!((off.prefix_cache_queries, off.prefix_cache_hits), (0, 0), "no lookups with caching off");
    assert!(uncached.calls.iter().all(|c| c.cached_tokens == 0));

    // Same requests (same seed), so the comparison is paired: skipping 2,000 of ~2,110 prompt
    // tokens must cut the time to first token.
    let ttft = |o: &RunOutput| o.result.metrics.as_ref().unwrap().ttft_ms.unwrap();
    let (on, off) = (ttft(&cached), ttft(&uncached));
    assert!(on.mean < 0.7 * off.mean, "TTFT mean {} ms with caching, {} ms without", on.mean, off.mean);
    assert!(on.p50 < off.p50, "TTFT p50 {} vs {}", on.p50, off.p50);
}
