//! Routing cost per request at 8 and 64 endpoints: llm-d's built-in default config (queue,
//! KV-utilization and prefix-cache scorers, the approximate prefix index), and the same profile
//! without the prefix scorer (what the cycle costs per endpoint, the index aside), on
//! 2,048-token prompts that share 16 system prompts of 1,024 tokens, with one endpoint scraped
//! between requests. One iteration routes one request and releases it (first chunk, end).

use std::hint::black_box;
use std::sync::Arc;

use blis_kernel::Streams;
use blis_router::{Endpoint, EndpointMetrics, LoadOptions, Router, RouterRng, RoutingRequest, Scrape, load};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

/// The default profile without the prefix-cache scorer.
const METRICS_ONLY: &str = r#"{"apiVersion": "llm-d.ai/v1alpha1", "kind": "EndpointPickerConfig",
  "plugins": [{"type": "queue-scorer"}, {"type": "kv-cache-utilization-scorer"}],
  "schedulingProfiles": [{"name": "default", "plugins": [
    {"pluginRef": "queue-scorer", "weight": 2}, {"pluginRef": "kv-cache-utilization-scorer", "weight": 2}]}]}"#;

fn router(endpoints: usize, config: Option<&serde_json::Value>) -> Router {
    let config = load(config, LoadOptions::default()).expect("the config loads");
    let table = (0..endpoints)
        .map(|i| Endpoint {
            name: Arc::from(format!("engine/p-{i:02}")),
            labels: Default::default(),
            model: Arc::from("m"),
            metrics: EndpointMetrics::default(),
        })
        .collect();
    Router::new(config, table)
}

fn prompts(count: usize, streams: Streams) -> Vec<Vec<u32>> {
    let mut draw = streams.stream("bench", "tokens", "");
    let systems: Vec<Vec<u32>> =
        (0..16).map(|_| (0..1024).map(|_| draw.below(32_000) as u32).collect()).collect();
    (0..count)
        .map(|i| {
            let mut prompt = systems[i % systems.len()].clone();
            prompt.extend((0..1024).map(|_| draw.below(32_000) as u32));
            prompt
        })
        .collect()
}

fn bench_routing(c: &mut Criterion) {
    let streams = Streams::new(7);
    let prompts = prompts(4096, streams);
    let mut group = c.benchmark_group("route");
    let metrics_only: serde_json::Value = serde_json::from_str(METRICS_ONLY).expect("the config is JSON");
    for endpoints in [8usize, 64] {
        for (name, config) in [("default-config", None), ("metrics-only", Some(&metrics_only))] {
            let mut router = router(endpoints, config);
            let candidates: Vec<u32> = (0..endpoints as u32).collect();
            let mut rng = RouterRng {
                tie_break: streams.stream("router", "tie-break", ""),
                exploration: streams.stream("router", "exploration", ""),
            };
            let mut key = 0u64;
            let mut now = 0u64;
            group.bench_function(BenchmarkId::new(name, endpoints), |b| {
                b.iter(|| {
                    let prompt = &prompts[key as usize % prompts.len()];
                    let e = (key as usize % endpoints) as u32;
                    let scrape = Scrape {
                        samples: vec![
                            ("vllm:num_requests_waiting".into(), (key % 7) as f64),
                            ("vllm:num_requests_running".into(), (key % 50) as f64),
                            ("vllm:kv_cache_usage_perc".into(), (key % 100) as f64 / 100.0),
                        ],
                        cache_config: Some((16, 30_000)),
                    };
                    router.record_scrape(e, &scrape, now);
                    let request = RoutingRequest {
                        key,
                        model: "m",
                        prompt_token_ids: prompt,
                        priority: 0,
                        cache_salt: &[],
                        max_tokens: Some(128),
                        headers: &[],
                        prompt_digests: None,
                    };
                    black_box(router.route(&request, &candidates, now, &mut rng));
                    router.first_chunk(key);
                    router.end(key);
                    key += 1;
                    now += 1_000;
                });
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench_routing);
criterion_main!(benches);
