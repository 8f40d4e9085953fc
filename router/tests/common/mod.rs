//! Fixtures shared by the ported upstream tests: endpoints, scrapes, views over plugin state,
//! and the routing loop, all built through the crate's public API.

// Each test binary includes this module and uses a subset of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;

use blis_kernel::Streams;
use blis_router::cycle::RouterRng;
use blis_router::plugins::inflight::InFlightLoad;
use blis_router::plugins::{self, PluginKind};
use blis_router::view::{Attributes, PluginInstance, View};
use blis_router::{Endpoint, EndpointMetrics, LoadOptions, RouterConfig, RoutingRequest, Scrape};
use serde_json::Value;

/// An endpoint named `name` serving model `m`, with `labels`.
pub fn endpoint(name: &str, labels: &[(&str, &str)]) -> Endpoint {
    Endpoint {
        name: Arc::from(name),
        labels: labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect::<BTreeMap<_, _>>(),
        model: Arc::from("m"),
        metrics: EndpointMetrics::default(),
    }
}

/// An endpoint with scraped waiting queue `q`, running requests `r` and KV use `kv`, stamped at 0.
pub fn loaded(name: &str, q: u64, r: u64, kv: f64) -> Endpoint {
    let mut e = endpoint(name, &[]);
    e.metrics.apply(&scrape(q, r, kv), blis_router::EngineType::Vllm, 0);
    e
}

/// A scrape carrying the three core gauges.
pub fn scrape(q: u64, r: u64, kv: f64) -> Scrape {
    Scrape {
        samples: vec![
            ("vllm:num_requests_waiting".into(), q as f64),
            ("vllm:num_requests_running".into(), r as f64),
            ("vllm:kv_cache_usage_perc".into(), kv),
        ],
        cache_config: None,
    }
}

/// A request with key `key` and prompt `prompt` for model `m`, priority 0.
pub fn request(key: u64, prompt: &[u32]) -> RoutingRequest<'_> {
    RoutingRequest {
        key,
        model: "m",
        prompt_token_ids: prompt,
        priority: 0,
        cache_salt: b"",
        max_tokens: None,
        headers: &[],
        prompt_digests: None,
    }
}

/// The router's substreams for run seed `seed`.
pub fn rng(seed: u64) -> RouterRng {
    let streams = Streams::new(seed);
    RouterRng {
        tie_break: streams.stream("router", "tie-break", ""),
        exploration: streams.stream("router", "exploration", ""),
    }
}

/// Load a config written as YAML.
pub fn load_yaml(yaml: &str, options: LoadOptions) -> Result<RouterConfig, blis_router::ConfigError> {
    let document: Value = serde_norway::from_str(yaml).expect("test YAML parses");
    blis_router::load(Some(&document), options)
}

/// Load a config given as JSON, without the experimental flag.
pub fn load_json(document: Value) -> Result<RouterConfig, blis_router::ConfigError> {
    blis_router::load(Some(&document), LoadOptions::default())
}

/// Build a modelled plugin from `params`, panicking on refusal.
pub fn build(type_name: &str, params: Option<Value>) -> PluginKind {
    match plugins::build(type_name, params.as_ref()) {
        Some(Ok(built)) => built.kind,
        Some(Err(e)) => panic!("{type_name} refused {params:?}: {e}"),
        None => panic!("{type_name} is not modelled"),
    }
}

/// The refusal of a modelled plugin built from `params`, as `path: reason`.
pub fn refusal(type_name: &str, params: Value) -> blis_router::params::ParamError {
    match plugins::build(type_name, Some(&params)) {
        Some(Ok(_)) => panic!("{type_name} accepted {params}"),
        Some(Err(e)) => e,
        None => panic!("{type_name} is not modelled"),
    }
}

/// A plugin instance named after its type.
pub fn instance(type_name: &str, kind: PluginKind) -> PluginInstance {
    PluginInstance { name: type_name.to_owned(), type_name: type_name.to_owned(), kind }
}

/// An in-flight producer over `endpoints` endpoints holding `(requests, tokens)` on each (the
/// counters raised through the producer's own `add`, one request key per unit).
pub fn in_flight(loads: &[(u64, u64)]) -> PluginInstance {
    let mut producer = InFlightLoad::new();
    producer.register_endpoints(loads.len());
    let mut key = 1_000_000;
    for (e, &(requests, tokens)) in loads.iter().enumerate() {
        for i in 0..requests {
            let t = if i == 0 { tokens } else { 0 };
            producer.add(key, &[(e as u32, false, t)]);
            key += 1;
        }
        if requests == 0 && tokens > 0 {
            panic!("tokens in flight without a request cannot be raised through the producer");
        }
    }
    instance("inflight-load-producer", PluginKind::InFlightLoadProducer(producer))
}

/// Call `f` with a view over `endpoints`, `attributes` and `plugins` at `now_us`.
pub fn with_view<R>(
    endpoints: &[Endpoint],
    attributes: &Attributes,
    plugins: &[PluginInstance],
    now_us: u64,
    f: impl FnOnce(&View) -> R,
) -> R {
    let prompt: [u32; 0] = [];
    let req = request(0, &prompt);
    let view = View { now_us, endpoints, request: &req, attributes, plugins };
    f(&view)
}

/// The candidate list `0..n`.
pub fn all(n: usize) -> Vec<u32> {
    (0..n as u32).collect()
}

/// Scores of a scorer over `candidates`, as the cycle dispatches them (unclamped).
pub fn scores(view: &View, kind: &PluginKind, candidates: &[u32]) -> Vec<Option<f64>> {
    use blis_router::plugins::scorers;
    let mut out = vec![None; candidates.len()];
    match kind {
        PluginKind::QueueScorer => scorers::queue(view, candidates, &mut out),
        PluginKind::KvCacheUtilizationScorer => scorers::kv_cache_utilization(view, candidates, &mut out),
        PluginKind::RunningRequestsSizeScorer => scorers::running(view, candidates, &mut out),
        PluginKind::LoadAwareScorer(s) => s.score(view, candidates, &mut out),
        PluginKind::TokenLoadScorer(s) => s.score(view, candidates, &mut out),
        PluginKind::ActiveRequestScorer(s) => s.score(view, candidates, &mut out),
        PluginKind::NoHitLruScorer(s) => {
            let cold = s.is_cold(view, candidates);
            s.score(view, candidates, cold, &mut out)
        }
        PluginKind::PrefixCacheScorer(s) => {
            for (slot, &e) in out.iter_mut().zip(candidates) {
                *slot = Some(s.score(view.prefix_info(s.producer, e).as_ref()));
            }
        }
        other => panic!("not a scorer: {other:?}"),
    }
    out
}

/// `scores` with every endpoint scored, unwrapped.
pub fn scored(view: &View, kind: &PluginKind, candidates: &[u32]) -> Vec<f64> {
    scores(view, kind, candidates).into_iter().map(|s| s.expect("every candidate scored")).collect()
}

/// Assert each value is within `tolerance` of its expectation.
pub fn assert_near(actual: &[f64], expected: &[f64], tolerance: f64) {
    assert_eq!(actual.len(), expected.len(), "{actual:?} vs {expected:?}");
    for (a, e) in actual.iter().zip(expected) {
        assert!((a - e).abs() <= tolerance, "{actual:?} vs {expected:?} (±{tolerance})");
    }
}

/// The in-flight (requests, tokens) of `endpoint` in the first in-flight producer of `plugins`.
pub fn in_flight_of(plugins: &[PluginInstance], endpoint: u32) -> (u64, u64) {
    plugins
        .iter()
        .find_map(|p| match &p.kind {
            PluginKind::InFlightLoadProducer(producer) => Some(producer.load(endpoint)),
            _ => None,
        })
        .expect("an in-flight producer")
}
