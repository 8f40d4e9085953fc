//! Upstream's P/D selection tests (`scheduling/profilehandler/disagg/disagg_profile_handler_test.go`,
//! `prefix_based_pd_decider_test.go`). Upstream's `mockProfile` results are written as profile
//! runs directly; its plugin handle "pre-loaded with all decider types" is a config defining
//! them. `always-disagg-multimodal-decider` is not modelled (multimodal requests are not
//! simulated): where a case names it as the encode decider, `always-disagg-pd-decider` stands
//! in, which is as valid a decider reference for the factory.

mod common;

use blis_router::approx_prefix::PrefixMatchInfo;
use blis_router::cycle::Targets;
use blis_router::plugins::PluginKind;
use blis_router::plugins::disagg::{PrefixDecider, ProfileRun, Stage, StageOrder, Stages};
use common::*;
use serde_json::{Value, json};
use smallvec::smallvec;

const DECODE: usize = 0;
const PREFILL: usize = 1;
const ENCODE: usize = 2;

fn decider(non_cached_tokens: i64, prompt_tokens: i64) -> PrefixDecider {
    PrefixDecider { non_cached_tokens, prompt_tokens, producer: None }
}

/// Match info of `cached` of `total` tokens at block size 1 (`NewPrefixCacheMatchInfo(cached,
/// total, 1)`).
fn info(cached: u64, total: u64) -> PrefixMatchInfo {
    PrefixMatchInfo {
        match_blocks: cached,
        total_blocks: total,
        block_size_tokens: 1,
        cached_block_count: cached,
    }
}

fn ran(targets: &[u32]) -> ProfileRun {
    Some(Some(targets.iter().copied().collect::<Targets>()))
}

/// The profile `stages` picks next given `runs`, with the prefix decider `d` seeing `input`
/// prompt tokens and `cached` tokens at the decode winner (and the encode decider always yes
/// when `encode_yes`).
fn pick(
    stages: Stages,
    runs: &mut [ProfileRun],
    d: &PrefixDecider,
    input: u64,
    cached: u64,
    encode_yes: bool,
) -> Option<usize> {
    stages.pick(runs, &mut |stage, _, winner| match stage {
        Stage::Prefill => d.disaggregate(input, winner, Some(info(cached, input))),
        Stage::Encode => encode_yes,
    })
}

fn pd(order: StageOrder) -> Stages {
    Stages { stage_order: order, profiles: [Some(DECODE), Some(PREFILL), None], deciders: [Some(0), None] }
}

/// upstream: prefix_based_pd_decider_test.go::TestDisaggregate (12 cases; block size 1, 10 prompt
/// tokens).
#[test]
fn disaggregate() {
    let cases: [(i64, i64, bool, u64, Option<bool>); 12] = [
        // (nonCachedTokens, promptTokens, endpoint present, cached, expected; None = refused)
        (0, 0, true, 5, Some(false)),
        (0, 0, false, 5, Some(false)),
        (5, 0, false, 5, Some(false)),
        (5, 20, true, 0, Some(false)),
        (5, -1, true, 0, None),
        (20, 0, true, 0, Some(false)),
        (5, 10, true, 5, Some(true)),
        (5, 0, true, 8, Some(false)),
        (5, 0, true, 5, Some(true)),
        (3, 0, true, 2, Some(true)),
        (1, 0, true, 10, Some(false)),
        (5, 0, true, 0, Some(true)),
    ];
    for (n, p, present, cached, want) in cases {
        let built = blis_router::plugins::build(
            "prefix-based-pd-decider",
            Some(&json!({"nonCachedTokens": n, "promptTokens": p})),
        )
        .unwrap();
        let Some(want) = want else {
            assert!(built.is_err(), "{n} {p}");
            continue;
        };
        let PluginKind::PrefixBasedPdDecider(d) = built.ok().unwrap().kind else { panic!() };
        let endpoint = present.then_some(0);
        assert_eq!(d.disaggregate(10, endpoint, Some(info(cached, 10))), want, "N={n} P={p} cached={cached}");
    }
}

/// upstream: prefix_based_pd_decider_test.go::TestDisaggregate_UsesUnweightedCachedBlockCount
/// (240 cached blocks of 16 of a 4096-token prompt, 192 once CPU-tier weights apply: the
/// decider counts the 240, leaving 256 < 512 uncached) and TestDisaggregateNoPrefixInfo.
#[test]
fn disaggregate_uses_the_cached_block_count_and_needs_match_info() {
    let d = decider(512, 0);
    let weighted = PrefixMatchInfo {
        match_blocks: 192,
        total_blocks: 256,
        block_size_tokens: 16,
        cached_block_count: 240,
    };
    assert!(!d.disaggregate(4096, Some(0), Some(weighted)), "the unweighted count decides");
    let fewer_cached = PrefixMatchInfo { cached_block_count: 192, ..weighted };
    assert!(d.disaggregate(4096, Some(0), Some(fewer_cached)));
    assert!(!decider(5, 0).disaggregate(100, Some(0), None), "no prefix info");
}

/// upstream: prefix_based_pd_decider_test.go::TestPrefixBasedPDDeciderFactory (3 of 4; "invalid
/// json" cannot reach a factory here) and TestPrefixBasedPDDeciderConfigValidation (3).
#[test]
fn prefix_based_pd_decider_factory() {
    let of = |params: Option<Value>| match build("prefix-based-pd-decider", params) {
        PluginKind::PrefixBasedPdDecider(d) => d.non_cached_tokens,
        other => panic!("{other:?}"),
    };
    assert_eq!(of(None), 0);
    assert_eq!(of(Some(json!({"nonCachedTokens": 50}))), 50);
    assert_eq!(of(Some(json!({"nonCachedTokens": 100}))), 100);
    let e = refusal("prefix-based-pd-decider", json!({"nonCachedTokens": -5}));
    assert_eq!((e.path.as_str(), e.value.as_deref()), ("nonCachedTokens", Some("-5")));
    assert_eq!(
        e.reason,
        "failed to create prefix-based-pd-decider plugin: nonCachedTokens parameter of prefix disaggregation decider \
         cannot be negative"
    );
}

/// upstream: disagg_profile_handler_test.go::TestHandler_Pick_PD (5 cases; "hello world hello
/// world hello world" is 8 tokens, nonCachedTokens 4).
#[test]
fn handler_pick_pd() {
    let d = decider(4, 0);
    let stages = pd(StageOrder::DecodeFirst);
    let cases: [(Vec<ProfileRun>, u64, Option<usize>); 5] = [
        (vec![None, None], 0, Some(DECODE)),
        (vec![Some(None), None], 0, None),
        (vec![ran(&[0]), ran(&[1])], 0, None),
        (vec![ran(&[0]), None], 2, Some(PREFILL)),
        (vec![ran(&[0]), None], 5, None),
    ];
    for (mut runs, cached, want) in cases {
        assert_eq!(pick(stages, &mut runs, &d, 8, cached, false), want, "{runs:?} cached {cached}");
    }
}

/// upstream: disagg_profile_handler_test.go::TestHandler_Pick_PD_Series: the same 6-token request
/// twice (uncached, then fully cached) disaggregates then does not; short then long (15 tokens,
/// 6 cached) disaggregates both times.
#[test]
fn handler_pick_pd_series() {
    let d = decider(2, 0);
    let stages = pd(StageOrder::DecodeFirst);
    for (input, cached, want) in
        [(6, 0, Some(PREFILL)), (6, 6, None), (6, 0, Some(PREFILL)), (15, 6, Some(PREFILL))]
    {
        let mut runs = vec![ran(&[0]), None];
        assert_eq!(pick(stages, &mut runs, &d, input, cached, false), want);
    }
}

/// upstream: disagg_profile_handler_test.go::TestHandler_ProcessResults_PD (3),
/// `…_ProcessResults_EPD` (5), `…_ProcessResults_NilDeciders` (4), `…_ProcessResults_CustomProfiles`.
#[test]
fn handler_process_results() {
    let epd = Stages { profiles: [Some(DECODE), Some(PREFILL), Some(ENCODE)], ..pd(StageOrder::DecodeFirst) };
    let failed = Err("failed to find available decode workers");
    assert_eq!(epd.process_results(&[Some(None), None, None]), failed);
    assert_eq!(epd.process_results(&[ran(&[]), None, None]), failed, "a decode result with no target");
    assert_eq!(epd.process_results(&[ran(&[0]), None, None]), Ok([Some(DECODE), None, None]));
    assert_eq!(epd.process_results(&[ran(&[0]), ran(&[1]), None]), Ok([Some(DECODE), Some(PREFILL), None]));
    assert_eq!(epd.process_results(&[ran(&[0]), None, ran(&[2])]), Ok([Some(DECODE), None, Some(ENCODE)]));
    assert_eq!(
        epd.process_results(&[ran(&[0]), Some(None), Some(None)]),
        Ok([Some(DECODE), None, None]),
        "nil omitted"
    );
    assert_eq!(
        epd.process_results(&[ran(&[0]), None, ran(&[])]),
        Ok([Some(DECODE), None, Some(ENCODE)]),
        "an encode result with no endpoints is included"
    );
    assert_eq!(
        epd.process_results(&[ran(&[0]), ran(&[1]), ran(&[2])]),
        Ok([Some(DECODE), Some(PREFILL), Some(ENCODE)])
    );
}

/// upstream: disagg_profile_handler_test.go::TestHandler_Pick_NilDeciders (6 cases) and
/// TestHandler_Pick_EPD_Full (the text-only cases): a stage without a decider never runs, and
/// a "no" is recorded so the decider is not asked again.
#[test]
fn handler_pick_nil_deciders() {
    let full = |deciders| Stages {
        stage_order: StageOrder::DecodeFirst,
        profiles: [Some(DECODE), Some(PREFILL), Some(ENCODE)],
        deciders,
    };
    let d = decider(1, 0);
    let mut runs = vec![None, None, None];
    assert_eq!(pick(full([None, None]), &mut runs, &d, 8, 0, true), Some(DECODE));
    let mut runs = vec![ran(&[0]), None, None];
    assert_eq!(pick(full([None, None]), &mut runs, &d, 8, 0, true), None);
    assert_eq!(runs, vec![ran(&[0]), Some(None), Some(None)], "both skipped stages recorded nil");
    let mut runs = vec![ran(&[0]), None, None];
    assert_eq!(
        pick(full([None, Some(1)]), &mut runs, &d, 8, 0, true),
        Some(ENCODE),
        "encode decider, multimodal"
    );
    let mut runs = vec![ran(&[0]), None, ran(&[2])];
    assert_eq!(pick(full([None, Some(1)]), &mut runs, &d, 8, 0, true), None, "encode done, no pd decider");
    let mut runs = vec![ran(&[0]), None, None];
    assert_eq!(pick(full([Some(0), None]), &mut runs, &d, 8, 0, false), Some(PREFILL), "text-only → prefill");
    let mut runs = vec![ran(&[0]), None, None];
    assert_eq!(
        pick(full([Some(0), Some(1)]), &mut runs, &d, 8, 0, false),
        Some(PREFILL),
        "skip encode, run prefill"
    );
    assert_eq!(runs[ENCODE], Some(None));
    let mut runs = vec![ran(&[0]), None, Some(None)];
    assert_eq!(
        pick(full([Some(0), Some(1)]), &mut runs, &d, 8, 0, true),
        Some(PREFILL),
        "encode failed → prefill"
    );
}

/// upstream: disagg_profile_handler_test.go::TestHandler_Pick_PrefillFirst_PD (6 cases) and
/// TestHandler_Pick_PrefillFirst_EPD_Full (6 cases).
#[test]
fn handler_pick_prefill_first() {
    let stages = Stages { deciders: [None, None], ..pd(StageOrder::PrefillFirst) };
    let d = decider(0, 0);
    let cases: [(Vec<ProfileRun>, Option<usize>); 6] = [
        (vec![None, None], Some(PREFILL)),
        (vec![None, ran(&[1])], Some(DECODE)),
        (vec![None, Some(None)], Some(DECODE)),
        (vec![ran(&[0]), ran(&[1])], None),
        (vec![Some(None), ran(&[1])], None),
        (vec![ran(&[]), ran(&[1])], None),
    ];
    for (mut runs, want) in cases {
        assert_eq!(pick(stages, &mut runs, &d, 8, 0, false), want, "{runs:?}");
    }
    let full = Stages {
        stage_order: StageOrder::PrefillFirst,
        profiles: [Some(DECODE), Some(PREFILL), Some(ENCODE)],
        deciders: [None, Some(1)],
    };
    let cases: [(Vec<ProfileRun>, bool, Option<usize>); 6] = [
        (vec![None, None, None], true, Some(PREFILL)),
        (vec![None, ran(&[1]), None], true, Some(ENCODE)),
        (vec![None, ran(&[1]), None], false, Some(DECODE)),
        (vec![None, ran(&[1]), ran(&[2])], true, Some(DECODE)),
        (vec![ran(&[0]), ran(&[1]), ran(&[2])], true, None),
        (vec![None, Some(None), None], true, Some(ENCODE)),
    ];
    for (mut runs, multimodal, want) in cases {
        assert_eq!(pick(full, &mut runs, &d, 8, 0, multimodal), want, "{runs:?} {multimodal}");
    }
}

fn handler_config(handler_params: Value) -> Result<blis_router::RouterConfig, blis_router::ConfigError> {
    load_json(json!({
        "apiVersion": "llm-d.ai/v1alpha1", "kind": "EndpointPickerConfig",
        "plugins": [
            {"type": "prefix-based-pd-decider", "parameters": {"nonCachedTokens": 4}},
            {"type": "always-disagg-pd-decider"},
            {"type": "queue-scorer"},
            {"name": "h", "type": "disagg-profile-handler", "parameters": handler_params},
        ],
        "schedulingProfiles": [
            {"name": "decode", "plugins": [{"pluginRef": "queue-scorer"}]},
            {"name": "prefill", "plugins": [{"pluginRef": "queue-scorer"}]},
        ],
    }))
}

/// upstream: disagg_profile_handler_test.go::TestHandlerFactory (9), `…_DeprecatedFlatParams`
/// (6), `…_PdProfileHandlerParams` (4), TestHandler_Factory_NilDeciders (4) and
/// TestHandler_Factory_StageOrder (11), through the loader.
#[test]
fn handler_factory() {
    let p = "prefix-based-pd-decider";
    let a = "always-disagg-pd-decider";
    let cases: Vec<(Value, bool)> = vec![
        (json!({}), true),
        (json!({"deciders": {"prefill": a}}), true),
        (
            json!({"profiles": {"decode": "my-decode", "prefill": "my-prefill"}, "deciders": {"prefill": p}}),
            true,
        ),
        (json!({"profiles": {"encode": "encode"}}), true),
        (json!({"profiles": {"encode": "encode"}, "deciders": {"encode": a}}), true),
        (
            json!({"profiles": {"prefill": "prefill", "encode": "encode"}, "deciders": {"prefill": p, "encode": a}}),
            true,
        ),
        (json!({"profiles": {"prefill": "prefill"}}), true),
        (json!({"profiles": {"prefill": "prefill"}, "deciders": {"prefill": "INVALID"}}), false),
        (json!({"deciders": {"encode": "INVALID"}}), false),
        // Deprecated flat parameters.
        (json!({"prefillDeciderPluginName": p}), true),
        (json!({"encodeDeciderPluginName": a}), true),
        (
            json!({"decodeProfile": "my-decode", "prefillProfile": "my-prefill", "encodeProfile": "my-encode",
                   "prefillDeciderPluginName": p}),
            true,
        ),
        (json!({"profiles": {"decode": "decode"}, "unknownField": "ignored"}), false),
        (json!({"decodeProfile": "my-decode", "profiles": {"decode": "other-decode"}}), false),
        (json!({"prefillDeciderPluginName": p, "deciders": {"prefill": a}}), false),
        // pd-profile-handler's parameter format.
        (json!({"decodeProfile": "decode", "prefillProfile": "prefill", "deciderPluginName": p}), true),
        (
            json!({"decodeProfile": "decode", "prefillProfile": "prefill", "deciderPluginName": p,
                   "prefixPluginType": "prefix-cache-scorer", "prefixPluginName": "prefix-cache-scorer", "primaryPort": 8080}),
            false,
        ),
        (json!({"deciderPluginName": "INVALID"}), false),
        // Stage orders.
        (json!({"stageOrder": "prefill-first"}), true),
        (json!({"stageOrder": "PrefillFirst"}), true),
        (json!({"stageOrder": "decode-first"}), true),
        (json!({"stageOrder": "DecodeFirst"}), true),
        (json!({"stageOrder": "prefill_first"}), true),
        (json!({"stageOrder": "decode"}), true),
        (json!({"stageOrder": "sideways"}), false),
        (json!({"stageOrder": "prefill-first", "decodeProfile": "decode"}), true),
        (json!({"stageOrder": "prefill-first", "deciders": {"prefill": p}}), false),
        (json!({"stageOrder": "prefill-first", "deciderPluginName": p}), false),
        (json!({"stageOrder": "prefill-first", "prefillDeciderPluginName": p}), false),
        (json!({"stageOrder": "prefill-first", "deciders": {"encode": a}}), true),
    ];
    for (params, ok) in cases {
        assert_eq!(handler_config(params.clone()).is_ok(), ok, "{params}");
    }
    let order = |params: Value| match &handler_config(params).unwrap().plugins[3].kind {
        PluginKind::DisaggProfileHandler(h) => h.stages.stage_order,
        other => panic!("{other:?}"),
    };
    assert_eq!(order(json!({})), StageOrder::DecodeFirst, "the default");
    assert_eq!(order(json!({"stageOrder": "PrefillFirst"})), StageOrder::PrefillFirst);
    assert_eq!(
        order(json!({"stageOrder": "prefill-first", "decodeProfile": "decode"})),
        StageOrder::PrefillFirst
    );
}

/// upstream: disagg_profile_handler_test.go::TestBothProfileAndHeadersHandlerPreRequest and
/// TestHandler_PreRequest_EncodeMultipleEndpoints: the prefill target becomes
/// `x-prefiller-host-port`; without a prefill result the header is absent. Through the router.
#[test]
fn handler_pre_request_writes_the_prefill_header() {
    let config = load_json(json!({
        "apiVersion": "llm-d.ai/v1alpha1", "kind": "EndpointPickerConfig",
        "plugins": [
            {"type": "always-disagg-pd-decider"},
            {"type": "decode-filter"}, {"type": "prefill-filter"},
            {"type": "disagg-profile-handler", "parameters": {"deciders": {"prefill": "always-disagg-pd-decider"}}},
        ],
        "schedulingProfiles": [
            {"name": "decode", "plugins": [{"pluginRef": "decode-filter"}]},
            {"name": "prefill", "plugins": [{"pluginRef": "prefill-filter"}]},
        ],
    }))
    .unwrap();
    let endpoints = vec![
        endpoint("decode-0", &[("llm-d.ai/role", "decode")]),
        endpoint("prefill-0", &[("llm-d.ai/role", "prefill")]),
    ];
    let mut router = blis_router::Router::new(config, endpoints);
    let decision = router.route(&request(1, &[1, 2, 3]), &[0, 1], 0, &mut rng(1));
    assert_eq!(decision, blis_router::Decision::Routed { endpoint: 0, targets: smallvec![0], score: 0.0 });
    let result = router.result();
    assert_eq!((result.primary, result.prefill), (0, Some(1)));
    assert_eq!(result.profiles, vec![(0, smallvec![0]), (1, smallvec![1])]);
    assert_eq!(result.headers, vec![("x-prefiller-host-port", "prefill-0:8000".to_owned())]);
}

/// upstream: disagg/scheduler_test.go::TestPDSchedule (7 cases), through `load` and the router:
/// prefill profile = prefill-filter + prefix-cache-scorer ×50, decode profile = decode-filter +
/// load-aware ×1 + prefix-cache-scorer ×0, decider nonCachedTokens 2. Upstream injects match
/// info (nothing cached, then everything cached for the second call); here the approximate index
/// learns it from the first call. "Long" prompts are 128 tokens, "short" 1 token.
#[test]
fn pd_schedule() {
    let config = || {
        load_json(json!({
            "apiVersion": "llm-d.ai/v1alpha1", "kind": "EndpointPickerConfig",
            "plugins": [
                {"type": "prefill-filter"}, {"type": "decode-filter"}, {"type": "prefix-cache-scorer"},
                {"type": "load-aware-scorer"},
                {"name": "decider", "type": "prefix-based-pd-decider", "parameters": {"nonCachedTokens": 2}},
                {"type": "disagg-profile-handler", "parameters": {"deciders": {"prefill": "decider"}}},
            ],
            "schedulingProfiles": [
                {"name": "prefill", "plugins": [{"pluginRef": "prefill-filter"}, {"pluginRef": "prefix-cache-scorer", "weight": 50}]},
                {"name": "decode", "plugins": [{"pluginRef": "decode-filter"}, {"pluginRef": "load-aware-scorer", "weight": 1},
                                                {"pluginRef": "prefix-cache-scorer", "weight": 0}]},
            ],
        }))
        .unwrap()
    };
    let pod = |name: &str, role: Option<&str>, queue: u64| {
        let labels: Vec<(&str, &str)> = role.map(|r| ("llm-d.ai/role", r)).into_iter().collect();
        let mut e = endpoint(name, &labels);
        e.metrics.apply(&scrape(queue, 0, 0.0), blis_router::EngineType::Vllm, 0);
        e
    };
    // 0: endpoint1 (prefill), 1: endpoint2 (decode), 2: noRoleEndpoint1 (queue 2).
    let endpoints = vec![
        pod("endpoint1", Some("prefill"), 0),
        pod("endpoint2", Some("decode"), 0),
        pod("noRoleEndpoint1", None, 2),
    ];
    let long: Vec<u32> = (0..128).collect();
    let short = [7u32];
    // (candidates, prompt, first call, second call) as (decode, prefill) or a refusal status.
    type Outcome = Result<(u32, Option<u32>), u16>;
    type Case<'a> = (&'a [u32], &'a [u32], Outcome, Option<Outcome>);
    let cases: [Case; 7] = [
        (&[], &long, Err(503), None),
        (&[1], &long, Ok((1, None)), None),
        (&[0], &long, Err(429), None),
        (&[0, 1], &long, Ok((1, Some(0))), Some(Ok((1, None)))),
        (&[0, 1], &short, Ok((1, None)), Some(Ok((1, None)))),
        (&[0, 2], &long, Ok((2, Some(0))), None),
        (&[0, 1, 2], &long, Ok((1, Some(0))), Some(Ok((1, None)))),
    ];
    for (candidates, prompt, first, second) in cases {
        let mut router = blis_router::Router::new(config(), endpoints.clone());
        let mut outcome = |key| match router.route(&request(key, prompt), candidates, 0, &mut rng(1)) {
            blis_router::Decision::Routed { endpoint, .. } => Ok((endpoint, router.result().prefill)),
            blis_router::Decision::Refused { status, .. } => Err(status),
        };
        assert_eq!(outcome(1), first, "{candidates:?} first call");
        if let Some(second) = second {
            assert_eq!(outcome(2), second, "{candidates:?} second call");
        }
    }
}
