//! Upstream's core-metrics-extractor tests (`datalayer/extractor/metrics/extractor_test.go`):
//! what one scrape does to an endpoint's metrics, and the extractor factory's engine choice.

mod common;

use blis_router::{EndpointMetrics, EngineType, Scrape};
use common::*;
use serde_json::json;

/// upstream: extractor_test.go::TestExtractorExtract ("nil data" and "empty
/// PrometheusMetricMap" update nothing; "single valid metric" updates the one figure; "multiple
/// valid metrics" updates every core figure and the cache config). LoRA info is not modelled.
#[test]
fn extractor_extract() {
    let mut metrics = EndpointMetrics::default();
    metrics.apply(&Scrape::default(), EngineType::Vllm, 1_000);
    assert_eq!(metrics, EndpointMetrics::default(), "nothing extracted, nothing stamped");
    metrics.apply(
        &Scrape { samples: vec![("vllm:num_requests_waiting".into(), 5.0)], cache_config: None },
        EngineType::Vllm,
        2_000,
    );
    assert_eq!((metrics.waiting_queue_size, metrics.update_time_us), (5, Some(2_000)));
    let full = Scrape {
        samples: vec![
            ("vllm:num_requests_waiting".into(), 5.0),
            ("vllm:num_requests_running".into(), 1.0),
            ("vllm:kv_cache_usage_perc".into(), 0.5),
        ],
        cache_config: Some((16, 1024)),
    };
    metrics.apply(&full, EngineType::Vllm, 3_000);
    assert_eq!(
        metrics,
        EndpointMetrics {
            waiting_queue_size: 5,
            running_requests_size: 1,
            kv_cache_usage_percent: 0.5,
            cache_block_size: 16,
            cache_num_blocks: 1024,
            update_time_us: Some(3_000),
        }
    );
}

/// upstream: extractor_test.go::TestCoreMetricsExtractorFactoryDefaultEngine, the vLLM cases
/// ("no params uses vllm as default", "defaultEngine vllm explicit", "empty engineConfigs uses
/// defaults", "empty engineLabelKey uses default"). Every simulated endpoint is vLLM, so the
/// other engines' cases (sglang, trtllm-serve, triton, custom engineConfigs) are refused by
/// name here.
#[test]
fn core_metrics_extractor_factory_default_engine() {
    for params in [
        None,
        Some(json!({"defaultEngine": "vllm"})),
        Some(json!({"engineConfigs": []})),
        Some(json!({"engineLabelKey": ""})),
    ] {
        build("core-metrics-extractor", params);
    }
    let e = refusal("core-metrics-extractor", json!({"defaultEngine": "sglang"}));
    assert_eq!((e.path.as_str(), e.value.as_deref()), ("defaultEngine", Some("\"sglang\"")));
    assert_eq!(e.reason, "engine `sglang` is not simulated: every endpoint is a vLLM instance");
    let e = refusal("core-metrics-extractor", json!({"engineConfigs": [{"name": "custom"}]}));
    assert_eq!(e.path, "engineConfigs");
}
