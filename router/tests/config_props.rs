//! Property: `load` never panics on a generated config built from the real vocabulary (every
//! registered type and some unregistered names, real parameter names with values of any JSON
//! type and extreme sizes, random profiles, references, weights, feature gates and dataLayer /
//! flowControl / requestHandler sections), and whenever it accepts one, routing requests over a
//! few endpoints with random scrapes never panics and returns a target among the candidates or
//! a refusal, and the same again from the same state and seed.

mod common;

use blis_router::registry::{PLUGIN_TYPES, Support};
use blis_router::{Decision, Endpoint, LoadOptions, Router, RoutingRequest, Scrape};
use common::*;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// Plugin names used for both definitions and references, so references often resolve.
const NAMES: &[&str] =
    &["a", "b", "c", "queue-scorer", "max-score-picker", "utilization-detector", "openai-parser"];

/// Parameter names the modelled factories read, and a few they do not.
const PARAMS: &[&str] = &[
    "threshold",
    "queueThresholdTokens",
    "inFlightLoadProducerName",
    "idleThreshold",
    "maxBusyScore",
    "requestTimeout",
    "lruSize",
    "prefixMatchInfoProducerName",
    "prefixPluginType",
    "maxNumOfEndpoints",
    "autoTune",
    "blockSizeTokens",
    "blockSize",
    "maxPrefixBlocksToMatch",
    "maxPrefixTokensToMatch",
    "lruCapacityPerServer",
    "matchLengthWeight",
    "matchLengthScaleTokens",
    "affinityThreshold",
    "explorationProbability",
    "maxTTFTPenaltyMs",
    "ttftSource",
    "peakPrefillThroughput",
    "conditions",
    "metric",
    "maxValue",
    "fallbackOnEmpty",
    "matchLabels",
    "matchExpressions",
    "key",
    "operator",
    "values",
    "label",
    "validValues",
    "allowsNoLabel",
    "queueDepthThreshold",
    "kvCacheUtilThreshold",
    "metricsStalenessThreshold",
    "headroom",
    "concurrencyMode",
    "maxConcurrency",
    "maxTokenConcurrency",
    "addEstimatedOutputTokens",
    "outputRatio",
    "maxEstimatedOutputTokens",
    "syncCrossReplicaState",
    "scheme",
    "path",
    "port",
    "interval",
    "insecureSkipVerify",
    "defaultEngine",
    "engineConfigs",
    "estimate",
    "vllm",
    "modelName",
    "image",
    "mode",
    "bogus",
    "Threshold",
];

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        prop_oneof![
            Just(0i64),
            Just(1),
            Just(-1),
            Just(16),
            Just(64),
            Just(i64::MAX),
            Just(i64::MIN),
            -100i64..100_000
        ]
        .prop_map(Value::from),
        Just(json!(u64::MAX)),
        prop_oneof![
            Just(0.5f64),
            Just(-0.5),
            Just(1.5),
            Just(1e308),
            Just(-1e308),
            Just(1e-300),
            Just(0.0),
            -2.0f64..2.0
        ]
        .prop_map(Value::from),
        prop::sample::select(vec![
            "",
            "1s",
            "0s",
            "-5ms",
            "200ms",
            "99999999999h",
            "NaN",
            "Infinity",
            "abc",
            "prefillThroughput",
            "latencyPredictor",
            "In",
            "NotIn",
            "Exists",
            "DoesNotExist",
            "active-requests",
            "waiting-queue",
            "kv-cache-utilization",
            "running-requests",
            "requests",
            "tokens",
            "hybrid",
            "http",
            "https",
            "vllm",
            "static",
            "dynamic",
            "llm-d.ai/role",
            "decode",
        ])
        .prop_map(Value::from),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(PARAMS), inner), 0..4)
                .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
        ]
    })
}

fn type_name() -> impl Strategy<Value = String> {
    let registered: Vec<&'static str> = PLUGIN_TYPES.iter().map(|t| t.name).collect();
    let modelled: Vec<&'static str> =
        PLUGIN_TYPES.iter().filter(|t| t.support == Support::Modelled).map(|t| t.name).collect();
    prop_oneof![
        12 => prop::sample::select(modelled).prop_map(str::to_owned),
        2 => prop::sample::select(registered).prop_map(str::to_owned),
        1 => prop::sample::select(vec!["", "queue-scorerr", "test-scorer", "active-request-filter"]).prop_map(str::to_owned),
    ]
}

fn plugin() -> impl Strategy<Value = Value> {
    (prop::option::of(prop::sample::select(NAMES)), type_name(), prop::option::of(json_value())).prop_map(
        |(name, type_name, params)| {
            let mut m = Map::new();
            if let Some(n) = name {
                m.insert("name".into(), n.into());
            }
            m.insert("type".into(), type_name.into());
            if let Some(p) = params {
                m.insert("parameters".into(), p);
            }
            Value::Object(m)
        },
    )
}

fn reference() -> impl Strategy<Value = Value> {
    prop::sample::select(NAMES).prop_map(|n| json!({"pluginRef": n}))
}

fn profile_entry() -> impl Strategy<Value = Value> {
    let weight = prop_oneof![
        Just(None),
        Just(Some(json!(1))),
        Just(Some(json!(-3.5))),
        Just(Some(json!(1e308))),
        Just(Some(json!(0))),
        Just(Some(json!("NaN"))),
        Just(Some(Value::Null))
    ];
    (reference(), weight).prop_map(|(mut r, w)| {
        if let Some(w) = w {
            r["weight"] = w;
        }
        r
    })
}

fn section() -> impl Strategy<Value = (String, Value)> {
    prop_oneof![
        4 => prop::collection::vec(
            prop::sample::select(vec!["flowControl=false", "flowControl=0", "haPopulateNonLeaderDatastore=true",
                "haPopulateNonLeaderDatastore", "haPopulateNonLeaderDatastore=F", "flowControl=false",
                "flowControl", "bogus", "flowControl=xx", "=", ""]),
            0..3
        )
        .prop_map(|g| ("featureGates".to_owned(), json!(g))),
        4 => (prop::option::of(any::<bool>()), prop::collection::vec((reference(), prop::collection::vec(reference(), 0..3)), 0..3))
            .prop_map(|(inject, sources)| {
                let mut m = Map::new();
                if let Some(i) = inject {
                    m.insert("injectDefaults".into(), i.into());
                }
                let sources: Vec<Value> =
                    sources.into_iter().map(|(s, e)| json!({"pluginRef": s["pluginRef"], "extractors": e})).collect();
                m.insert("sources".into(), sources.into());
                ("dataLayer".to_owned(), Value::Object(m))
            }),
        4 => (prop::option::of(reference()), prop::option::of(scalar()))
            .prop_map(|(d, max)| {
                let mut m = Map::new();
                if let Some(d) = d {
                    m.insert("saturationDetector".into(), d);
                }
                if let Some(v) = max {
                    m.insert("maxBytes".into(), v);
                }
                ("flowControl".to_owned(), Value::Object(m))
            }),
        4 => prop::collection::vec(reference(), 0..3).prop_map(|p| ("requestHandler".to_owned(), json!({"parsers": p}))),
        2 => reference().prop_map(|r| ("saturationDetector".to_owned(), r)),
        1 => json_value().prop_map(|v| ("unknownTopLevel".to_owned(), v)),
    ]
}

fn document() -> impl Strategy<Value = Value> {
    (
        prop::collection::vec(plugin(), 0..6),
        prop::option::of(prop::collection::vec(
            (prop::sample::select(vec!["default", "p2", ""]), prop::collection::vec(profile_entry(), 0..4)),
            0..3,
        )),
        prop::collection::vec(section(), 0..3),
        prop_oneof![
            16 => Just("llm-d.ai/v1alpha1"),
            2 => Just("inference.networking.x-k8s.io/v1alpha1"),
            1 => Just("v2"),
        ],
    )
        .prop_map(|(plugins, profiles, sections, api)| {
            let mut m = Map::new();
            m.insert("apiVersion".into(), api.into());
            m.insert("kind".into(), "EndpointPickerConfig".into());
            m.insert("plugins".into(), plugins.into());
            if let Some(profiles) = profiles {
                let profiles: Vec<Value> =
                    profiles.into_iter().map(|(n, p)| json!({"name": n, "plugins": p})).collect();
                m.insert("schedulingProfiles".into(), profiles.into());
            }
            for (k, v) in sections {
                m.insert(k, v);
            }
            Value::Object(m)
        })
}

/// A scrape of (queue, running, kv, cache config).
fn scrape_strategy() -> impl Strategy<Value = Scrape> {
    (
        prop_oneof![Just(0.0f64), Just(3.0), Just(1e12), Just(-1.0), Just(f64::NAN), 0.0f64..50.0],
        prop_oneof![Just(0.0f64), Just(7.0), Just(f64::INFINITY), 0.0f64..50.0],
        prop_oneof![Just(0.0f64), Just(1.0), Just(1.5), Just(-0.5), Just(f64::NAN), 0.0f64..1.0],
        prop::option::of((
            prop_oneof![Just(0u64), Just(16), Just(128), Just(1 << 40)],
            prop_oneof![Just(0u64), Just(8), Just(1000)],
        )),
    )
        .prop_map(|(q, r, kv, cache)| Scrape {
            samples: vec![
                ("vllm:num_requests_waiting".into(), q),
                ("vllm:num_requests_running".into(), r),
                ("vllm:kv_cache_usage_perc".into(), kv),
            ],
            cache_config: cache,
        })
}

/// One request: (prompt length, priority, candidate mask, max tokens, then first chunk?, end?).
type Step = (usize, i64, u8, Option<u64>, bool, bool);

fn step() -> impl Strategy<Value = Step> {
    (0usize..300, -1i64..=1, any::<u8>(), prop::option::of(0u64..1000), any::<bool>(), any::<bool>())
}

/// Route `steps`, checking each decision; the decisions in order.
fn routes(
    router: &mut Router,
    endpoints: usize,
    steps: &[Step],
    seed: u64,
) -> Result<Vec<Decision>, TestCaseError> {
    let mut r = rng(seed);
    let mut decisions = Vec::new();
    for (key, &(len, priority, mask, max_tokens, chunk, end)) in steps.iter().enumerate() {
        let candidates: Vec<u32> = (0..endpoints as u32).filter(|e| mask & (1 << e) != 0).collect();
        let prompt: Vec<u32> = (0..len as u32).map(|t| t % 97).collect();
        let request = RoutingRequest {
            key: key as u64,
            model: "m",
            prompt_token_ids: &prompt,
            priority,
            cache_salt: b"",
            max_tokens,
            headers: &[],
            prompt_digests: None,
        };
        let decision = router.route(&request, &candidates, 1_000 * key as u64, &mut r);
        match &decision {
            Decision::Routed { endpoint, targets, .. } => {
                prop_assert!(candidates.contains(endpoint), "{endpoint} not in {candidates:?}");
                prop_assert_eq!(targets.first(), Some(endpoint));
                prop_assert!(targets.iter().all(|t| candidates.contains(t)));
            }
            Decision::Refused { status, reason } => {
                prop_assert!(matches!(status, 429 | 503), "{status} {reason}");
            }
        }
        decisions.push(decision);
        if chunk {
            router.first_chunk(key as u64);
        }
        if end {
            router.end(key as u64);
        }
    }
    Ok(decisions)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 384, ..ProptestConfig::default() })]

    #[test]
    fn generated_configs_load_or_refuse_and_route_without_panicking(
        doc in document(),
        experimental in any::<bool>(),
        endpoints in 1usize..5,
        roles in prop::collection::vec(prop::option::of(prop::sample::select(vec!["decode", "prefill", "encode", "both"])), 4),
        scrapes in prop::collection::vec((0u32..4, scrape_strategy()), 0..6),
        steps in prop::collection::vec(step(), 1..6),
        seed in any::<u64>(),
    ) {
        let Ok(config) = blis_router::load(Some(&doc), LoadOptions { allow_experimental_plugins: experimental }) else {
            return Ok(());
        };
        let table: Vec<Endpoint> = (0..endpoints)
            .map(|i| match roles[i] {
                Some(role) => endpoint(&format!("e{i}"), &[("llm-d.ai/role", role)]),
                None => endpoint(&format!("e{i}"), &[]),
            })
            .collect();
        let mut router = Router::new(config, table);
        for (e, s) in &scrapes {
            if (*e as usize) < endpoints {
                router.record_scrape(*e, s, 500);
            }
        }
        // Deterministic: the same router state and seed decide the same way.
        let mut twin = router.clone();
        let decisions = routes(&mut router, endpoints, &steps, seed)?;
        prop_assert_eq!(format!("{decisions:?}"), format!("{:?}", routes(&mut twin, endpoints, &steps, seed)?));
    }

    /// The accepted configs are not only the trivial ones: the default config routes.
    #[test]
    fn the_default_config_routes_any_traffic(
        scrapes in prop::collection::vec((0u32..3, scrape_strategy()), 0..6),
        steps in prop::collection::vec(step(), 1..8),
        seed in any::<u64>(),
    ) {
        let mut router = Router::new(
            blis_router::load(None, LoadOptions::default()).unwrap(),
            (0..3).map(|i| endpoint(&format!("e{i}"), &[])).collect(),
        );
        for (e, s) in &scrapes {
            router.record_scrape(*e, s, 500);
        }
        routes(&mut router, 3, &steps, seed)?;
    }
}
