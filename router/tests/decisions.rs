//! Our own decision tests of the router crate, expected outputs written out: tie-breaking under
//! a fixed seed, the defaults the loader injects, each loader refusal with its path, value and
//! upstream's message, and `null` read as Go reads it.

mod common;

use blis_router::cycle::RouterRng;
use blis_router::plugins::PluginKind;
use blis_router::{Decision, LoadOptions, Router, RoutingRequest};
use common::*;

const HEAD: &str = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n";

/// The endpoints picked for `n` requests over four identical endpoints (the default config, all
/// scraped alike, so every request is a four-way tie) under run seed `seed`.
fn tie_picks(seed: u64, n: u64) -> Vec<u32> {
    let mut router = Router::new(
        blis_router::load(None, LoadOptions::default()).unwrap(),
        (0..4).map(|i| endpoint(&format!("e{i}"), &[])).collect(),
    );
    for e in 0..4 {
        router.record_scrape(e, &scrape(1, 1, 0.5), 0);
    }
    let mut r = rng(seed);
    (0..n)
        .map(|key| match router.route(&request(key, &[]), &[0, 1, 2, 3], 0, &mut r) {
            Decision::Routed { endpoint, score, .. } => {
                // queue 1.0 × 2 + kv 0.5 × 2 + prefix 0 × 3
                assert_eq!(score, 0.0 + 1.0 * 2.0 + 0.5 * 2.0 + 0.0 * 3.0);
                endpoint
            }
            other => panic!("{other:?}"),
        })
        .collect()
}

/// Ties are broken from the run's `router`/`tie-break` substream: the same seed gives the same
/// picks (written out for seed 42), another seed another sequence, and every endpoint wins
/// some of 400 ties.
#[test]
fn tie_breaking_follows_the_seed() {
    let picks = tie_picks(42, 400);
    assert_eq!(picks, tie_picks(42, 400));
    assert_eq!(picks[..16], SEED_42_PICKS, "{:?}", &picks[..16]);
    assert_ne!(picks, tie_picks(43, 400));
    for e in 0..4 {
        let wins = picks.iter().filter(|&&p| p == e).count();
        assert!((60..=140).contains(&wins), "endpoint {e} won {wins} of 400");
    }
}

/// The first 16 tie-break picks under seed 42 (a golden: it changes only if the substream or
/// the shuffle changes).
const SEED_42_PICKS: [u32; 16] = [1, 0, 2, 0, 1, 2, 1, 2, 2, 1, 3, 2, 1, 3, 1, 0];

/// The built-in default config, everything injected, in order: the five configured plugins,
/// the single-profile handler and max-score picker, the three flow-control policies, the three
/// parsers, the utilization detector, then the producers the prefix scorer requires (approx
/// prefix, whose token requirement adds the token producer). Producers run token → approx.
#[test]
fn the_default_config_injects_upstreams_defaults() {
    let config = blis_router::load(None, LoadOptions::default()).unwrap();
    let plugins: Vec<(&str, &str)> =
        config.plugins.iter().map(|p| (p.name.as_str(), p.type_name.as_str())).collect();
    let expected = [
        "queue-scorer",
        "kv-cache-utilization-scorer",
        "prefix-cache-scorer",
        "metrics-data-source",
        "core-metrics-extractor",
        "single-profile-handler",
        "max-score-picker",
        "fcfs-ordering-policy",
        "global-strict-fairness-policy",
        "static-usage-limit-policy",
        "openai-parser",
        "anthropic-parser",
        "vllmhttp-parser",
        "utilization-detector",
        "approx-prefix-cache-producer",
        "token-producer",
    ];
    assert_eq!(plugins, expected.map(|n| (n, n)));
    let at = |name: &str| expected.iter().position(|n| *n == name).unwrap();
    assert_eq!(config.handler, at("single-profile-handler"));
    assert_eq!(config.profiles[0].picker, at("max-score-picker"));
    assert_eq!(config.saturation_detector, at("utilization-detector"));
    assert_eq!(config.parsers, [at("openai-parser"), at("anthropic-parser"), at("vllmhttp-parser")]);
    assert_eq!(config.producers, [at("token-producer"), at("approx-prefix-cache-producer")]);
    let PluginKind::UtilizationDetector(d) = &config.plugins[config.saturation_detector].kind else {
        unreachable!()
    };
    assert_eq!(
        (d.queue_depth_threshold, d.kv_cache_util_threshold, d.metrics_staleness_threshold_us),
        (5, 0.8, 200_000)
    );
    let PluginKind::Picker(p) = &config.plugins[config.profiles[0].picker].kind else { unreachable!() };
    assert_eq!(p.max_endpoints, 1);
    // The default approx producer's block size (16) is under upstream's floor, as upstream logs.
    assert_eq!(
        config.warnings,
        [
            "approx-prefix-cache-producer: WARNING: configured blockSizeTokens is below the recommended minimum, \
          overriding it. (blockSizeTokens: 16, minimum: 64, issue: https://github.com/llm-d/llm-d-router/issues/1158)"
        ]
    );
    assert!(config.inert.is_empty(), "{:?}", config.inert);
}

/// A profile listing only a scorer gets weight 1 and the injected picker; a consumer of the
/// in-flight key gets the default in-flight producer, which brings the token producer.
#[test]
fn consumers_get_their_default_producers_and_scorers_weight_one() {
    let config = load_yaml(
        &format!("{HEAD}plugins:\n- type: active-request-scorer\nschedulingProfiles:\n- name: default\n  plugins: [{{pluginRef: active-request-scorer}}]\n"),
        LoadOptions::default(),
    )
    .unwrap();
    assert_eq!(config.profiles[0].scorers, [(0, 1.0)]);
    let names: Vec<&str> = config.producers.iter().map(|&i| config.plugins[i].name.as_str()).collect();
    assert_eq!(names, ["token-producer", "inflight-load-producer"]);
    let PluginKind::ActiveRequestScorer(s) = &config.plugins[0].kind else { unreachable!() };
    assert_eq!(
        s.producer,
        Some(config.plugins.iter().position(|p| p.name == "inflight-load-producer").unwrap())
    );
}

/// Upstream's [Q]: an approx producer renamed `my-approx` while the scorer stays on the default
/// key leaves that key unproduced, so a second producer named `approx-prefix-cache-producer` is
/// created, and the scorer reads that one, not `my-approx`.
#[test]
fn a_renamed_approx_producer_leads_to_a_second_default_one() {
    let config = load_yaml(
        &format!(
            "{HEAD}plugins:\n- {{name: my-approx, type: approx-prefix-cache-producer}}\n- type: prefix-cache-scorer\n\
             schedulingProfiles:\n- name: default\n  plugins: [{{pluginRef: prefix-cache-scorer}}]\n"
        ),
        LoadOptions::default(),
    )
    .unwrap();
    let approx: Vec<&str> = config
        .plugins
        .iter()
        .filter(|p| p.type_name == "approx-prefix-cache-producer")
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(approx, ["my-approx", "approx-prefix-cache-producer"]);
    let second = config.plugins.iter().position(|p| p.name == "approx-prefix-cache-producer").unwrap();
    let PluginKind::PrefixCacheScorer(s) = &config.plugins[1].kind else { unreachable!() };
    assert_eq!(s.producer, Some(second));
    // Pointing the scorer at the renamed producer avoids the duplicate.
    let config = load_yaml(
        &format!(
            "{HEAD}plugins:\n- {{name: my-approx, type: approx-prefix-cache-producer}}\n\
             - {{type: prefix-cache-scorer, parameters: {{prefixMatchInfoProducerName: my-approx}}}}\n"
        ),
        LoadOptions::default(),
    )
    .unwrap();
    assert_eq!(config.plugins.iter().filter(|p| p.type_name == "approx-prefix-cache-producer").count(), 1);
}

fn refused(yaml: &str, options: LoadOptions) -> (String, Option<String>, String) {
    let e = load_yaml(&format!("{HEAD}{yaml}"), options).expect_err(yaml);
    (e.path, e.value, e.reason)
}

fn owned(path: &str, value: Option<&str>, reason: &str) -> (String, Option<String>, String) {
    (path.to_owned(), value.map(str::to_owned), reason.to_owned())
}

/// Each loader refusal names its path and value and gives upstream's message (ours where
/// upstream has none: a type it registers but this build does not model, a priority band
/// without its priority).
#[test]
fn loader_refusals_name_path_value_and_reason() {
    let off = LoadOptions::default();
    assert_eq!(
        refused("plugins:\n- type: lora-affinity-scorer\n", off),
        owned(
            "plugins[0].type",
            Some("\"lora-affinity-scorer\""),
            "plugin type `lora-affinity-scorer` is not modelled yet (LoRA adapters are not simulated)"
        )
    );
    assert_eq!(
        refused(
            "plugins:\n- {name: a, type: queue-scorer}\n- {name: a, type: kv-cache-utilization-scorer}\n",
            off
        ),
        owned("plugins[1].name", Some("\"a\""), "duplicate plugin name 'a'")
    );
    assert_eq!(
        refused("plugins:\n- type: queue-scorerr\n", off),
        owned("plugins[0].type", Some("\"queue-scorerr\""), "plugin type 'queue-scorerr' is not registered")
    );
    assert_eq!(
        refused("plugins: []\nbogus: 1\n", off),
        owned(
            "bogus",
            None,
            "failed to decode configuration JSON/YAML: strict decoding error: unknown field \"bogus\""
        )
    );
    assert_eq!(
        refused(
            "plugins:\n- type: queue-scorer\n- type: prefix-cache-scorer\n\
             - {type: approx-prefix-cache-producer, parameters: {blockSizeTokenz: 4}}\n",
            off
        ),
        owned(
            "plugins[2].parameters.blockSizeTokenz",
            None,
            "failed to create plugin 'approx-prefix-cache-producer' (type: approx-prefix-cache-producer): failed to \
             unmarshal prefix cache parameters: json: unknown field \"blockSizeTokenz\""
        )
    );
    assert_eq!(
        refused(
            "plugins:\n- {type: label-selector-filter, parameters: {matchExpressions: [{key: a, operator: Exists, vals: [b]}]}}\n",
            off
        ),
        owned(
            "plugins[0].parameters.matchExpressions[0].vals",
            None,
            "failed to create plugin 'label-selector-filter' (type: label-selector-filter): failed to parse the \
             parameters of the 'label-selector-filter' filter - json: unknown field \"vals\""
        )
    );
    assert_eq!(
        refused("featureGates: [flowControl=true]\nflowControl:\n  priorityBands: [{maxRequests: 5}]\n", off),
        owned(
            "flowControl.priorityBands[0].priority",
            None,
            "a priority band must name its priority: upstream decodes a missing priority as 0, which would silently \
             make this entry band 0's configuration; write `priority: 0` for band 0"
        )
    );
    assert_eq!(
        refused("featureGates: [\"flowControl=maybe\"]\n", off),
        owned(
            "featureGates[0]",
            Some("\"flowControl=maybe\""),
            "feature gate validation failed: maybe is not a valid value for the feature gate flowControl (error: \
             strconv.ParseBool: parsing \"maybe\": invalid syntax)"
        )
    );
    assert_eq!(
        refused(
            "plugins:\n- {name: f, type: utilization-filter, parameters: {conditions: [{metric: waiting-queue, maxValue: 1}]}}\n",
            off
        ),
        owned(
            "plugins[0].type",
            Some("\"utilization-filter\""),
            "plugin 'f' (type: 'utilization-filter') has Alpha stability level, but command line flag \
             --allow-experimental-plugins is not set (cluster.router.allow_experimental_plugins)"
        )
    );
    assert_eq!(
        refused(
            "plugins:\n- {name: m, type: max-score-picker}\n- {name: w, type: weighted-random-picker}\n\
             schedulingProfiles:\n- name: default\n  plugins: [{pluginRef: m}, {pluginRef: w}]\n",
            off
        ),
        owned(
            "schedulingProfiles[0].plugins[1].pluginRef",
            Some("\"w\""),
            "failed to add plugin 'w' to profile 'default': failed to set 'w/weighted-random-picker' as picker, already \
             have a registered picker plugin 'm/max-score-picker'"
        )
    );
    assert_eq!(
        refused(
            "plugins:\n- type: queue-scorer\nschedulingProfiles:\n- name: a\n  plugins: [{pluginRef: queue-scorer}]\n\
             - name: b\n  plugins: [{pluginRef: queue-scorer}]\n- name: c\n  plugins: []\n",
            off
        ),
        owned("schedulingProfiles", None, "no profile handler configured")
    );
    assert_eq!(
        refused(
            "plugins:\n- type: single-profile-handler\n- type: queue-scorer\nschedulingProfiles:\n\
             - name: a\n  plugins: [{pluginRef: queue-scorer}]\n- name: b\n  plugins: [{pluginRef: queue-scorer}]\n",
            off
        ),
        owned("schedulingProfiles", None, "SingleProfileHandler cannot support multiple scheduling profiles")
    );
}

/// `null` is read as Go reads it: a null key is as if absent, at the top level and inside
/// parameters (an empty `parameters:` in YAML is null; a null threshold keeps 128).
#[test]
fn null_values_are_absent() {
    let config = load_yaml(
        &format!(
            "{HEAD}featureGates:\nplugins:\n- type: queue-scorer\n  parameters:\n\
             - type: load-aware-scorer\n  parameters: {{threshold: null}}\nschedulingProfiles:\ndataLayer:\n  sources:\n"
        ),
        LoadOptions::default(),
    )
    .unwrap();
    let PluginKind::LoadAwareScorer(s) = &config.plugins[1].kind else { unreachable!() };
    assert_eq!(s.threshold, 128);
    assert_eq!(config.profiles[0].scorers.len(), 2, "the default profile holds both scorers");
    assert_eq!(config.data_sources.len(), 1);
    assert!(config.warnings.is_empty(), "{:?}", config.warnings);
}

/// Upstream keeps plugin instances in a map by name, so a default injected under a name a
/// configured plugin already has replaces it: a scorer named `max-score-picker` in a config
/// without a picker becomes the injected max-score picker (and is reported inert).
#[test]
fn an_injected_default_replaces_a_configured_plugin_of_its_name() {
    let config = load_yaml(
        &format!(
            "{HEAD}plugins:\n- {{name: max-score-picker, type: queue-scorer}}\n- type: kv-cache-utilization-scorer\n\
             schedulingProfiles:\n- name: default\n  plugins: [{{pluginRef: max-score-picker}}, {{pluginRef: kv-cache-utilization-scorer}}]\n"
        ),
        LoadOptions::default(),
    )
    .unwrap();
    assert_eq!(config.plugins[0].type_name, "max-score-picker");
    assert_eq!(config.profiles[0].picker, 0);
    assert_eq!(config.profiles[0].scorers, [(1, 1.0)]);
    assert_eq!(config.inert[0].path, "plugins[0]");
    let mut router = Router::new(config, vec![endpoint("e0", &[])]);
    assert!(matches!(
        router.route(&request(1, &[]), &[0], 0, &mut rng(1)),
        Decision::Routed { endpoint: 0, .. }
    ));
}

/// A consumer of a non-default key with no producer is refused in upstream's words.
#[test]
fn a_key_without_a_default_producer_is_refused() {
    let e = load_yaml(
        &format!(
            "{HEAD}plugins:\n- {{type: prefix-cache-scorer, parameters: {{prefixMatchInfoProducerName: ghost}}}}\n"
        ),
        LoadOptions::default(),
    )
    .unwrap_err();
    assert_eq!((e.path.as_str(), e.value.as_deref()), ("plugins", Some("\"PrefixCacheMatchInfo/ghost\"")));
    assert_eq!(
        e.reason,
        "no default producer found for missing data key PrefixCacheMatchInfo/ghost, consumed by prefix-cache-scorer"
    );
}

/// A prompt's block digests made ahead for the router's plan stand for its ids in the default
/// config's approximate prefix producer: the prompt sent again with its own digests matches the
/// endpoint it went to (queue 1.0 × 2 + kv 0.5 × 2 + prefix 1.0 × 3), as when the ids are
/// hashed; another prompt carrying those digests matches there too, so they are what is read;
/// digests made for another cap are ignored (read, their one block would match), and that
/// prompt then matches nothing.
#[test]
fn digests_made_ahead_stand_for_the_prompt_when_made_for_the_plan() {
    let twin = || {
        let mut router = Router::new(
            blis_router::load(None, LoadOptions::default()).unwrap(),
            (0..4).map(|i| endpoint(&format!("e{i}"), &[])).collect(),
        );
        for e in 0..4 {
            let scraped = blis_router::Scrape { cache_config: Some((16, 1000)), ..scrape(1, 1, 0.5) };
            router.record_scrape(e, &scraped, 0);
        }
        router
    };
    let (mut router, mut hashing) = (twin(), twin());
    let plan = router.prompt_digest_plan(Some(16));
    assert_eq!(plan, Some((64, 131_072 / 64)), "the 64-token floor, the token cap in blocks");
    let (size, cap) = plan.unwrap();
    let sent: Vec<u32> = (0..256).map(|i| i * 3 + 1).collect();
    let other: Vec<u32> = (0..256).map(|i| i * 5 + 2).collect();
    let ahead = blis_router::approx_prefix::PromptDigests::of(&sent, size, cap);
    let capped = blis_router::approx_prefix::PromptDigests::of(&sent, size, 1);
    let (mut r, mut r_hashing) = (rng(7), rng(7));
    let routed = |router: &mut Router, r: &mut RouterRng, key, prompt, digests| {
        let request = RoutingRequest { prompt_digests: digests, ..request(key, prompt) };
        match router.route(&request, &[0, 1, 2, 3], 0, r) {
            Decision::Routed { endpoint, score, .. } => (endpoint, score),
            other => panic!("{other:?}"),
        }
    };
    let first = routed(&mut router, &mut r, 1, &sent, Some(&ahead));
    assert_eq!(first, routed(&mut hashing, &mut r_hashing, 1, &sent, None));
    assert_eq!(first.1, 3.0, "nothing sent before");
    let again = routed(&mut router, &mut r, 2, &sent, Some(&ahead));
    assert_eq!(again, routed(&mut hashing, &mut r_hashing, 2, &sent, None));
    assert_eq!(again, (first.0, 6.0));
    assert_eq!(routed(&mut router, &mut r, 3, &other, Some(&ahead)), (first.0, 6.0));
    assert_eq!(routed(&mut router, &mut r, 4, &other, Some(&capped)).1, 3.0);
}
