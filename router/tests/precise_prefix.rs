//! The precise prefix cache through the loader and the cycle: the release's sample config, the
//! deprecated `precise-prefix-cache-scorer` in both of its modes (ported from
//! `scheduling/scorer/preciseprefixcache/precise_prefix_cache_test.go`), the refusals with path,
//! value and cause, and a routing decision made on KV events, expected outputs written out.

mod common;

use std::sync::Arc;

use blis_router::plugins::PluginKind;
use blis_router::precise_prefix::KvEventBatch;
use blis_router::{ConfigError, Decision, LoadOptions, Router};
use common::*;

const HEAD: &str = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n";

/// `deploy/config/epp-precise-prefix-cache-config.yaml` at v0.10.0, with the token producer on
/// its default backend (blis-actor's requests carry token ids) and no decode filter.
const SAMPLE: &str = "\
plugins:
  - type: token-producer
  - type: endpoint-notification-source
  - type: metrics-data-source
  - type: core-metrics-extractor
  - type: single-profile-handler
  - type: precise-prefix-cache-producer
    parameters:
      tokenProcessorConfig:
        blockSize: 4
      indexerConfig:
        kvBlockIndexConfig:
          enableMetrics: true
  - type: prefix-cache-scorer
    parameters:
      prefixMatchInfoProducerName: precise-prefix-cache-producer
  - type: kv-cache-utilization-scorer
  - type: queue-scorer
  - type: max-score-picker
dataLayer:
  sources:
    - pluginRef: metrics-data-source
      extractors:
        - pluginRef: core-metrics-extractor
    - pluginRef: endpoint-notification-source
      extractors:
        - pluginRef: precise-prefix-cache-producer
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: prefix-cache-scorer
        weight: 2.0
      - pluginRef: kv-cache-utilization-scorer
        weight: 1.0
      - pluginRef: queue-scorer
        weight: 1.0
      - pluginRef: max-score-picker
";

fn load(yaml: &str) -> Result<blis_router::RouterConfig, ConfigError> {
    load_yaml(&format!("{HEAD}{yaml}"), LoadOptions::default())
}

fn stored(hashes: &[u64], tokens: &[u32]) -> KvEventBatch {
    let mut batch = KvEventBatch::new(0);
    batch.push_stored(hashes, None, tokens, 4, Some(Arc::from("GPU")));
    batch
}

fn route(router: &mut Router, prompt: &[u32]) -> (u32, f64) {
    match router.route(&request(1, prompt), &[0, 1, 2], 0, &mut rng(7)) {
        Decision::Routed { endpoint, score, .. } => (endpoint, score),
        other => panic!("{other:?}"),
    }
}

/// The sample loads: the producer is subscribed through the notification source, the scorer
/// reads it, no approx producer is created, and the settings without effect are reported.
#[test]
fn the_release_sample_loads_and_routes_on_kv_events() {
    let config = load(SAMPLE).unwrap();
    assert!(!config.plugins.iter().any(|p| p.type_name == "approx-prefix-cache-producer"));
    let order: Vec<&str> = config.producers.iter().map(|&p| config.plugins[p].name.as_str()).collect();
    assert_eq!(order, ["token-producer", "precise-prefix-cache-producer"]);
    assert!(
        config.inert.iter().any(|s| s.path.ends_with("kvBlockIndexConfig.enableMetrics")),
        "{:?}",
        config.inert
    );
    let mut router = Router::new(config, (0..3).map(|i| endpoint(&format!("e{i}"), &[])).collect());
    assert!(router.wants_kv_events());
    for e in 0..3 {
        router.record_scrape(e, &scrape(0, 0, 0.0), 0);
    }
    let prompt: Vec<u32> = (1..=10).collect();
    // Endpoint 2 caches the first two 4-token blocks, endpoint 1 the first.
    router.record_kv_events(2, "m", &stored(&[21, 22], &prompt[..8]));
    router.record_kv_events(1, "m", &stored(&[11], &prompt[..4]));
    // Prefix: 2 of 2 blocks (the 2-token tail is not keyed) → 1.0 × 2, plus queue 1 and kv 1.
    assert_eq!(route(&mut router, &prompt), (2, 2.0 + 1.0 + 1.0));
    // Endpoint 2 evicts its first block: its chain breaks at block 0, endpoint 1 wins (0.5 × 2).
    let mut evict = KvEventBatch::new(0);
    evict.push_removed(&[21], Some(Arc::from("GPU")));
    router.record_kv_events(2, "m", &evict);
    assert_eq!(route(&mut router, &prompt), (1, 0.5 * 2.0 + 1.0 + 1.0));
}

/// Without the notification wiring (and no global socket) upstream subscribes to nothing: the
/// engines are not asked for events, and the loader says why.
#[test]
fn an_unwired_producer_hears_nothing_and_is_warned_of() {
    let config = load(
        "plugins:\n- type: precise-prefix-cache-producer\n- type: prefix-cache-scorer\n  parameters: \
         {prefixMatchInfoProducerName: precise-prefix-cache-producer}\n",
    )
    .unwrap();
    assert!(
        config.warnings.iter().any(|w| w.contains("no KV events will reach it")),
        "{:?}",
        config.warnings
    );
    let router = Router::new(config, vec![endpoint("e0", &[])]);
    assert!(!router.wants_kv_events());
    let global = load(
        "plugins:\n- type: precise-prefix-cache-producer\n  parameters: {kvEventsConfig: {zmqEndpoint: \
         'tcp://*:5557'}}\n- type: prefix-cache-scorer\n  parameters: {prefixMatchInfoProducerName: \
         precise-prefix-cache-producer}\n",
    )
    .unwrap();
    assert!(Router::new(global, vec![endpoint("e0", &[])]).wants_kv_events(), "global-socket mode");
}

/// `precise_prefix_cache_test.go::TestPluginFactory_DefersToExistingProducer`: with a producer
/// configured, the deprecated scorer is a plain prefix scorer reading it (its own parameters,
/// here `speculativeIndexing`, ignored) and is no producer.
#[test]
fn plugin_factory_defers_to_existing_producer() {
    let config = load(
        "plugins:\n- {name: my-precise, type: precise-prefix-cache-producer}\n- {name: test, type: \
         precise-prefix-cache-scorer, parameters: {speculativeIndexing: true}}\n",
    )
    .unwrap();
    let test = config.plugins.iter().find(|p| p.name == "test").unwrap();
    let PluginKind::PrefixCacheScorer(scorer) = &test.kind else { panic!("{:?}", test.kind) };
    assert_eq!(scorer.key().to_string(), "PrefixCacheMatchInfo/my-precise");
    assert!(test.kind.produces("test").is_empty(), "defer mode is not a producer");
    assert!(config.warnings.iter().any(|w| w.contains("deferring precise-prefix-cache-scorer")));
}

/// `precise_prefix_cache_test.go::TestPluginFactory_RejectsMultipleExistingProducers`.
#[test]
fn plugin_factory_rejects_multiple_existing_producers() {
    let e = load(
        "plugins:\n- {name: first, type: precise-prefix-cache-producer}\n- {name: second, type: \
         precise-prefix-cache-producer}\n- {name: test, type: precise-prefix-cache-scorer}\n",
    )
    .unwrap_err();
    assert_eq!(e.path, "plugins[2].parameters");
    assert!(e.reason.contains("multiple precise-prefix-cache-producer instances"), "{e}");
}

/// `precise_prefix_cache_test.go::TestPluginFactory_SelfHostInterfaces` and
/// `::TestPluginFactory_InnerScorerConsumesProducerKeys`: alone, the deprecated scorer is a
/// scorer and a producer whose requirements include its own key; it routes on KV events.
#[test]
fn plugin_factory_self_hosts_a_producer() {
    let config = load(
        "plugins:\n- type: endpoint-notification-source\n- type: precise-prefix-cache-scorer\n  parameters: \
         {tokenProcessorConfig: {blockSizeTokens: 4}}\ndataLayer:\n  sources:\n  - pluginRef: \
         endpoint-notification-source\n    extractors: [{pluginRef: precise-prefix-cache-scorer}]\n",
    )
    .unwrap();
    let wrapper = config.plugins.iter().find(|p| p.type_name == "precise-prefix-cache-scorer").unwrap();
    assert!(wrapper.kind.is_scorer());
    let produced = wrapper.kind.produces(&wrapper.name);
    assert_eq!(produced[0].to_string(), "PrefixCacheMatchInfo/precise-prefix-cache-scorer");
    assert!(wrapper.kind.requires().contains(&produced[0]));
    assert!(!config.plugins.iter().any(|p| p.type_name == "approx-prefix-cache-producer"));
    let mut router = Router::new(config, (0..3).map(|i| endpoint(&format!("e{i}"), &[])).collect());
    let prompt: Vec<u32> = (1..=8).collect();
    router.record_kv_events(0, "m", &stored(&[1, 2], &prompt));
    // The default profile holds the wrapper alone (weight 1): 2 of 2 blocks.
    assert_eq!(route(&mut router, &prompt), (0, 1.0));
}

/// Bad parameters are refused with the path below the plugin, the value and upstream's words.
#[test]
fn bad_parameters_are_refused_with_path_value_and_cause() {
    let refuse = |params: &str| {
        let e = load(&format!(
            "plugins:\n- {{name: p, type: precise-prefix-cache-producer, parameters: {params}}}\n"
        ))
        .unwrap_err();
        (e.path, e.value, e.reason)
    };
    let wrap = "failed to create plugin 'p' (type: precise-prefix-cache-producer): ";
    assert_eq!(
        refuse("{tokenProcessorConfig: {blockSizeTokens: -1}}"),
        (
            "plugins[0].parameters.tokenProcessorConfig.blockSizeTokens".to_owned(),
            Some("-1".to_owned()),
            format!(
                "{wrap}failed to create precise-prefix-cache-producer plugin: failed to create token processor: \
                 blockSizeTokens must be greater than 0, got -1"
            )
        )
    );
    assert_eq!(
        refuse("{indexerConfig: {kvBlockIndexConfig: {inMemoryConfig: {size: 0}}}}"),
        (
            "plugins[0].parameters.indexerConfig.kvBlockIndexConfig.inMemoryConfig.size".to_owned(),
            Some("0".to_owned()),
            format!(
                "{wrap}failed to create precise-prefix-cache-producer plugin: failed to create kvcache.Indexer: \
                 failed to create RedisKVBlockIndexer: failed to create in-memory index: failed to initialize \
                 in-memory index: must provide a positive size"
            )
        )
    );
    assert_eq!(
        refuse("{indexerConfig: {tokenizersPoolConfig: {modelName: x}}}"),
        (
            "plugins[0].parameters.indexerConfig.tokenizersPoolConfig".to_owned(),
            None,
            format!("{wrap}tokenizersPoolConfig is not supported; configure a token-producer plugin instead")
        )
    );
    assert_eq!(
        refuse("{kvEventsConfig: {topicFiltr: x}}"),
        (
            "plugins[0].parameters.kvEventsConfig.topicFiltr".to_owned(),
            None,
            format!(
                "{wrap}failed to parse precise-prefix-cache-producer plugin config: json: unknown field \"topicFiltr\""
            )
        )
    );
    let (path, value, reason) = refuse("{kvEventsConfig: {concurrency: 0}}");
    assert_eq!(
        (path.as_str(), value.as_deref()),
        ("plugins[0].parameters.kvEventsConfig.concurrency", Some("0"))
    );
    assert!(reason.contains("panics at 0"), "{reason}");
    let (path, _, reason) = refuse("{speculativeIndexing: true}");
    assert_eq!(path, "plugins[0].parameters.speculativeIndexing");
    assert!(reason.contains("not modelled"), "{reason}");
    let (path, _, reason) = refuse("{indexerConfig: {kvBlockIndexConfig: {redisConfig: {address: x}}}}");
    assert_eq!(path, "plugins[0].parameters.indexerConfig.kvBlockIndexConfig.redisConfig");
    assert!(reason.contains("only the in-memory"), "{reason}");
    let (path, value, _) = refuse("{kvEventsConfig: {engineType: sglang}}");
    assert_eq!(
        (path.as_str(), value.as_deref()),
        ("plugins[0].parameters.kvEventsConfig.engineType", Some("\"sglang\""))
    );
}

/// An `endpoint-notification-source` takes only endpoint extractors, each type once
/// (`datalayer/runtime.go::validateSourceExtractors`); a deferring deprecated scorer is a plain
/// scorer, so it is none.
#[test]
fn an_endpoint_source_takes_only_endpoint_extractors() {
    let source = |plugins: &str, extractors: &str| {
        load(&format!(
            "plugins:\n- type: endpoint-notification-source\n- type: precise-prefix-cache-producer\n- type: \
             queue-scorer\n{plugins}dataLayer:\n  sources:\n  - pluginRef: endpoint-notification-source\n    \
             extractors: {extractors}\n"
        ))
    };
    let e = source("", "[{pluginRef: queue-scorer}]").unwrap_err();
    assert_eq!(
        (e.path.as_str(), e.value.as_deref(), e.reason.as_str()),
        (
            "dataLayer.sources[0].extractors[0].pluginRef",
            Some("\"queue-scorer\""),
            "endpoint source endpoint-notification-source/endpoint-notification-source requires an EndpointExtractor; \
             extractor queue-scorer/queue-scorer does not implement it"
        )
    );
    let e =
        source("- {name: legacy, type: precise-prefix-cache-scorer}\n", "[{pluginRef: legacy}]").unwrap_err();
    assert!(e.reason.contains("extractor legacy/precise-prefix-cache-scorer does not implement it"), "{e}");
    let e = source(
        "- {name: p2, type: precise-prefix-cache-producer}\n",
        "[{pluginRef: precise-prefix-cache-producer}, {pluginRef: p2}]",
    )
    .unwrap_err();
    assert_eq!(e.path, "dataLayer.sources[0].extractors[1].pluginRef");
    assert!(e.reason.starts_with("duplicate extractor type configured for the same source"), "{e}");
    assert!(source("", "[{pluginRef: precise-prefix-cache-producer}]").is_ok());
}
