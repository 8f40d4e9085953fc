//! The precise producer's parameters, their defaults and the factory's checks.
//!
//! Upstream: `preciseprefixcache/producer.go::PluginConfig`, `PluginFactory` and `New`;
//! `kvcache/indexer.go::NewDefaultConfig`, `kvcache/backend.go::DefaultKVCacheBackendConfig`,
//! `kvblock/index.go::DefaultIndexConfig`, `kvblock/in_memory.go::DefaultInMemoryIndexConfig`,
//! `kvblock/token_processor.go::NewChunkedTokenDatabase`, `kvevents/pool.go::DefaultConfig`,
//! `engineadapter/adapter.go::NewAdapter`. Go decodes the parameters into structs already holding
//! the defaults, so a partial `indexerConfig` or `kvEventsConfig` keeps the defaults it does not
//! name, while `tokenProcessorConfig` (a nil pointer until given) starts from zero values, which
//! `NewChunkedTokenDatabase` then resolves (0 → 16, the deprecated `blockSize` promoted).

use serde::Deserialize;
use serde_json::Value;

use crate::params::{self, ParamError};

/// The producer's registered type.
pub const PRECISE_PRODUCER_TYPE: &str = "precise-prefix-cache-producer";
/// The deprecated wrapper's registered type.
pub const PRECISE_SCORER_TYPE: &str = "precise-prefix-cache-scorer";
/// Default `blockSizeTokens` (vLLM's default block size).
pub const DEFAULT_BLOCK_SIZE_TOKENS: u32 = 16;
/// Default `inMemoryConfig.size`: keys per map.
pub const DEFAULT_INDEX_SIZE: i64 = 100_000_000;
/// Default `inMemoryConfig.podCacheSize`: entries per key.
pub const DEFAULT_POD_CACHE_SIZE: i64 = 10;
/// Largest block size accepted, tokens (beyond any model's context).
const MAX_BLOCK_SIZE_TOKENS: i64 = 1 << 20;
/// Largest index size accepted, keys (upstream's default is 1e8; slots are `u32`).
const MAX_INDEX_SIZE: i64 = 1 << 31;
/// Largest per-key entry count accepted.
const MAX_POD_CACHE_SIZE: i64 = 1 << 16;

/// One medium's weight in the longest-prefix score (`kvCacheBackendConfigs[i]`).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct Backend {
    /// The medium's name as events normalise it (`gpu`, `cpu`, …).
    pub name: String,
    /// Its weight.
    pub weight: f64,
}

impl Default for Backend {
    fn default() -> Self {
        Backend { name: String::new(), weight: 0.0 }
    }
}

/// The resolved parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct PreciseConfig {
    /// The router's block size, tokens.
    pub block_size_tokens: u32,
    /// `hashSeed`: seeds every chain (vLLM's `PYTHONHASHSEED` alignment).
    pub hash_seed: String,
    /// `inMemoryConfig.size`.
    pub index_size: usize,
    /// `inMemoryConfig.podCacheSize`.
    pub pod_cache_size: usize,
    /// `kvCacheBackendConfigs`, in order (a later duplicate name wins, as a Go map fill does).
    pub backends: Vec<Backend>,
    /// `kvEventsConfig.zmqEndpoint`: one socket the engines publish to (global mode).
    pub zmq_endpoint: String,
    /// `kvEventsConfig.discoverPods`: subscribe per endpoint (needs the producer wired as an
    /// extractor of an `endpoint-notification-source`).
    pub discover_pods: bool,
}

impl Default for PreciseConfig {
    fn default() -> Self {
        PreciseConfig {
            block_size_tokens: DEFAULT_BLOCK_SIZE_TOKENS,
            hash_seed: String::new(),
            index_size: DEFAULT_INDEX_SIZE as usize,
            pod_cache_size: DEFAULT_POD_CACHE_SIZE as usize,
            backends: default_backends(),
            zmq_endpoint: String::new(),
            discover_pods: true,
        }
    }
}

fn default_backends() -> Vec<Backend> {
    vec![Backend { name: "gpu".into(), weight: 1.0 }, Backend { name: "cpu".into(), weight: 0.8 }]
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct RawParams {
    token_processor_config: Option<RawTokenProcessor>,
    indexer_config: RawIndexer,
    kv_events_config: RawKvEvents,
    speculative_indexing: bool,
    #[serde(rename = "speculativeTTL")]
    speculative_ttl: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct RawTokenProcessor {
    block_size: i64,
    block_size_tokens: i64,
    hash_seed: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct RawIndexer {
    kv_block_index_config: RawIndexConfig,
    kv_cache_backend_configs: Vec<Backend>,
    tokenizers_pool_config: Option<Value>,
}

impl Default for RawIndexer {
    fn default() -> Self {
        RawIndexer {
            kv_block_index_config: RawIndexConfig::default(),
            kv_cache_backend_configs: default_backends(),
            tokenizers_pool_config: None,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct RawIndexConfig {
    in_memory_config: RawInMemory,
    redis_config: Option<Value>,
    cost_aware_memory_config: Option<Value>,
    enable_metrics: bool,
    metrics_logging_interval: i64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct RawInMemory {
    size: i64,
    pod_cache_size: i64,
}

impl Default for RawInMemory {
    fn default() -> Self {
        RawInMemory { size: DEFAULT_INDEX_SIZE, pod_cache_size: DEFAULT_POD_CACHE_SIZE }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct RawKvEvents {
    zmq_endpoint: String,
    topic_filter: String,
    concurrency: i64,
    engine_type: String,
    discover_pods: bool,
    pod_discovery_config: RawPodDiscovery,
}

impl Default for RawKvEvents {
    fn default() -> Self {
        RawKvEvents {
            zmq_endpoint: String::new(),
            topic_filter: "kv@".into(),
            concurrency: 4,
            engine_type: String::new(),
            discover_pods: true,
            pod_discovery_config: RawPodDiscovery::default(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct RawPodDiscovery {
    pod_label_selector: String,
    pod_namespace: String,
    socket_port: i64,
    replay_socket_port: i64,
}

impl Default for RawPodDiscovery {
    fn default() -> Self {
        RawPodDiscovery {
            pod_label_selector: "llm-d.ai/inference-serving=true".into(),
            pod_namespace: String::new(),
            socket_port: 5557,
            replay_socket_port: 0,
        }
    }
}

/// What the factory made of the parameters: the config, and the settings accepted without
/// effect here as (path, why).
pub type Parsed = (PreciseConfig, Vec<(String, String)>);

impl PreciseConfig {
    /// Build the config as the producer's factory does; `type_name` words the messages (the
    /// deprecated wrapper decodes the same shape under its own name).
    pub fn from_params(params: Option<&Value>, type_name: &str) -> Result<Parsed, ParamError> {
        let raw: RawParams = params::decode(params).map_err(|e| ParamError {
            reason: format!("failed to parse {type_name} plugin config: {}", e.reason),
            ..e
        })?;
        let create = |path: &str, why: String| {
            ParamError::invalid(
                params,
                path,
                format!("failed to create {PRECISE_PRODUCER_TYPE} plugin: {why}"),
            )
        };
        if raw.indexer_config.tokenizers_pool_config.is_some() {
            let why = if type_name == PRECISE_PRODUCER_TYPE {
                "tokenizersPoolConfig is not supported; configure a token-producer plugin instead".to_owned()
            } else {
                "the legacy tokenization pool (a UDS tokenizer sidecar) is not modelled; blis-actor's requests \
                 carry token ids, so configure a token-producer plugin instead"
                    .to_owned()
            };
            return Err(ParamError {
                path: "indexerConfig.tokenizersPoolConfig".into(),
                value: None,
                reason: why,
            });
        }
        let tp = raw.token_processor_config.unwrap_or_default();
        let block_size = match (tp.block_size_tokens, tp.block_size) {
            (0, 0) => i64::from(DEFAULT_BLOCK_SIZE_TOKENS),
            (0, b) if b > 0 => b,
            (t, _) => t,
        };
        if block_size <= 0 {
            let (path, shown) = if tp.block_size_tokens == 0 {
                ("tokenProcessorConfig.blockSize", tp.block_size)
            } else {
                ("tokenProcessorConfig.blockSizeTokens", tp.block_size_tokens)
            };
            return Err(create(
                path,
                format!(
                    "failed to create token processor: blockSizeTokens must be greater than 0, got {shown}"
                ),
            ));
        }
        if block_size > MAX_BLOCK_SIZE_TOKENS {
            return Err(ParamError::invalid(
                params,
                "tokenProcessorConfig.blockSizeTokens",
                format!("must be at most {MAX_BLOCK_SIZE_TOKENS} tokens"),
            ));
        }
        let index = &raw.indexer_config.kv_block_index_config;
        for (field, set) in [
            ("costAwareMemoryConfig", index.cost_aware_memory_config.is_some()),
            ("redisConfig", index.redis_config.is_some()),
        ] {
            if set {
                return Err(ParamError {
                    path: format!("indexerConfig.kvBlockIndexConfig.{field}"),
                    value: None,
                    reason: "only the in-memory KV-block index is modelled (upstream would use this backend instead)"
                        .into(),
                });
            }
        }
        let in_memory = &index.in_memory_config;
        if in_memory.size <= 0 {
            return Err(create(
                "indexerConfig.kvBlockIndexConfig.inMemoryConfig.size",
                "failed to create kvcache.Indexer: failed to create RedisKVBlockIndexer: failed to create in-memory \
                 index: failed to initialize in-memory index: must provide a positive size"
                    .into(),
            ));
        }
        if in_memory.size > MAX_INDEX_SIZE {
            return Err(ParamError::invalid(
                params,
                "indexerConfig.kvBlockIndexConfig.inMemoryConfig.size",
                format!("must be at most {MAX_INDEX_SIZE} keys"),
            ));
        }
        if !(1..=MAX_POD_CACHE_SIZE).contains(&in_memory.pod_cache_size) {
            return Err(ParamError::invalid(
                params,
                "indexerConfig.kvBlockIndexConfig.inMemoryConfig.podCacheSize",
                format!(
                    "must be between 1 and {MAX_POD_CACHE_SIZE}: upstream starts, but every store then fails to create \
                     its per-key LRU (must provide a positive size), so the index would stay empty"
                ),
            ));
        }
        let events = &raw.kv_events_config;
        match events.engine_type.as_str() {
            "" | "vllm" => {}
            "sglang" => {
                return Err(ParamError::invalid(
                    params,
                    "kvEventsConfig.engineType",
                    "the SGLang adapter cannot read the vLLM engines' event batches (blis-actor's engines are vLLM)",
                ));
            }
            other => {
                return Err(create(
                    "kvEventsConfig.engineType",
                    format!(
                        "failed to create KV-events engine adapter: unsupported engine type: {other:?} (supported: \
                         \"vllm\", \"sglang\")"
                    ),
                ));
            }
        }
        if events.concurrency <= 0 {
            return Err(ParamError::invalid(
                params,
                "kvEventsConfig.concurrency",
                "must be positive: upstream's pool shards events by FNV-1a mod concurrency and panics at 0 or below",
            ));
        }
        if raw.speculative_indexing {
            return Err(ParamError {
                path: "speculativeIndexing".into(),
                value: Some("true".into()),
                reason: "speculative indexing (TTL-bounded predicted entries) is not modelled yet".into(),
            });
        }
        let mut inert = Vec::new();
        let transport = "the simulated engines deliver KV events to the router as messages";
        let index_metrics = "the index's Prometheus metrics are not simulated";
        let mut note = |path: &str, set: bool, why: &str| {
            if set {
                inert.push((path.to_owned(), why.to_owned()));
            }
        };
        note("indexerConfig.kvBlockIndexConfig.enableMetrics", index.enable_metrics, index_metrics);
        note(
            "indexerConfig.kvBlockIndexConfig.metricsLoggingInterval",
            index.metrics_logging_interval != 0,
            index_metrics,
        );
        note("kvEventsConfig.topicFilter", events.topic_filter != "kv@", transport);
        note(
            "kvEventsConfig.concurrency",
            events.concurrency != 4,
            "one worker or many, each endpoint's events stay in order",
        );
        let pd = &events.pod_discovery_config;
        note(
            "kvEventsConfig.podDiscoveryConfig",
            pd.socket_port != 5557
                || pd.replay_socket_port != 0
                || !pd.pod_namespace.is_empty()
                || pd.pod_label_selector != "llm-d.ai/inference-serving=true",
            transport,
        );
        note("speculativeTTL", !raw.speculative_ttl.is_empty(), "read only with speculativeIndexing");
        let config = PreciseConfig {
            block_size_tokens: block_size as u32,
            hash_seed: tp.hash_seed,
            index_size: in_memory.size as usize,
            pod_cache_size: in_memory.pod_cache_size as usize,
            backends: raw.indexer_config.kv_cache_backend_configs,
            zmq_endpoint: events.zmq_endpoint.clone(),
            discover_pods: events.discover_pods,
        };
        Ok((config, inert))
    }

    /// The weight of medium `name` (already normalised): the last backend of that name, else 1.
    pub fn weight(&self, name: &str) -> f64 {
        self.backends.iter().rev().find(|b| b.name == name).map_or(1.0, |b| b.weight)
    }
}
