//! Our decision tests for P/D selection and session affinity, through `load` and
//! `Router::route`: the prefix-based decider's threshold just below, at and above the uncached
//! tokens at the decode winner, the `promptTokens` gate, the prefill-first stage order, a session
//! that sticks to its endpoint across turns through the response-header hook (and moves when a
//! filter drops that endpoint), and the loader's refusals with path, value and cause.

mod common;

use blis_router::plugins::session::encode_base64;
use blis_router::{Decision, LoadOptions, Router, RouterConfig, RoutingRequest};
use common::*;
use serde_json::{Value, json};

const ALLOW: LoadOptions = LoadOptions { allow_experimental_plugins: true };

/// decode-0 (role decode) and prefill-0 (role prefill).
fn pd_pods() -> Vec<blis_router::Endpoint> {
    vec![
        endpoint("decode-0", &[("llm-d.ai/role", "decode")]),
        endpoint("prefill-0", &[("llm-d.ai/role", "prefill")]),
    ]
}

fn pd_config(handler: Value, decider: Value) -> RouterConfig {
    load_json(json!({
        "apiVersion": "llm-d.ai/v1alpha1", "kind": "EndpointPickerConfig",
        "plugins": [
            {"name": "pd", "type": "prefix-based-pd-decider", "parameters": decider},
            {"type": "decode-filter"}, {"type": "prefill-filter"}, {"type": "queue-scorer"},
            {"type": "disagg-profile-handler", "parameters": handler},
        ],
        "schedulingProfiles": [
            {"name": "decode", "plugins": [{"pluginRef": "decode-filter"}, {"pluginRef": "queue-scorer"}]},
            {"name": "prefill", "plugins": [{"pluginRef": "prefill-filter"}, {"pluginRef": "queue-scorer"}]},
        ],
    }))
    .unwrap()
}

/// What a routed request got: its decode endpoint and the sidecar's prefill header, if any.
fn pd_route(
    router: &mut Router,
    key: u64,
    prompt: &[u32],
    candidates: &[u32],
) -> Result<(u32, Option<String>), String> {
    match router.route(&request(key, prompt), candidates, 0, &mut rng(1)) {
        Decision::Routed { endpoint, .. } => {
            let header = router.result().headers.iter().find(|(h, _)| *h == "x-prefiller-host-port");
            Ok((endpoint, header.map(|(_, v)| v.clone())))
        }
        Decision::Refused { status, reason } => Err(format!("{status} {reason}")),
    }
}

/// The decider's threshold on the tokens not cached at the decode winner. The approximate index
/// hashes 64-token blocks (the floor upstream applies). Turn 1 sends 128 tokens; decode-0 is
/// then known to hold its 2 blocks, so turn 2 (those 128 tokens and 128 more) has 256 − 128 =
/// 128 tokens uncached at decode-0:
///
/// | nonCachedTokens | turn 1 (128 uncached) | turn 2 (128 uncached of 256) |
/// |---:|---|---|
/// | 127 (just below) | P/D: prefill-0 | P/D: prefill-0 |
/// | 128 (at)         | P/D: prefill-0 | P/D: prefill-0 (equality disaggregates) |
/// | 129 (just above) | decode only (input 128 < 129) | decode only (128 < 129 uncached) |
#[test]
fn the_deciders_threshold_just_below_at_and_above() {
    let turn1: Vec<u32> = (0..128).collect();
    let turn2: Vec<u32> = (0..256).collect();
    let pd = Some("prefill-0:8000".to_owned());
    for (n, first, second) in
        [(127, pd.clone(), pd.clone()), (128, pd.clone(), pd.clone()), (129, None, None)]
    {
        let config = pd_config(json!({"deciders": {"prefill": "pd"}}), json!({"nonCachedTokens": n}));
        let mut router = Router::new(config, pd_pods());
        assert_eq!(pd_route(&mut router, 1, &turn1, &[0, 1]), Ok((0, first)), "N={n}, turn 1");
        assert_eq!(pd_route(&mut router, 2, &turn2, &[0, 1]), Ok((0, second)), "N={n}, turn 2");
        let result = router.result();
        assert_eq!(result.prefill.is_some(), n < 129);
        assert_eq!(
            result.profiles.len(),
            if n < 129 { 2 } else { 1 },
            "the prefill profile is in the result only when it ran"
        );
    }
}

/// The `promptTokens` gate: with nonCachedTokens 1, a 256-token prompt disaggregates when
/// promptTokens is 256 (at) and not when it is 257 (the prompt is shorter).
#[test]
fn the_prompt_tokens_gate() {
    let prompt: Vec<u32> = (0..256).collect();
    for (p, want) in
        [(255, Some("prefill-0:8000".to_owned())), (256, Some("prefill-0:8000".to_owned())), (257, None)]
    {
        let config = pd_config(
            json!({"deciders": {"prefill": "pd"}}),
            json!({"nonCachedTokens": 1, "promptTokens": p}),
        );
        let mut router = Router::new(config, pd_pods());
        assert_eq!(pd_route(&mut router, 1, &prompt, &[0, 1]), Ok((0, want)), "promptTokens {p}");
    }
}

/// The stage orders, written out. decode-first with the decider off: decode only, and when the
/// decode profile finds no endpoint the request fails without running prefill. prefill-first
/// (no decider allowed): prefill runs first for every request, then decode; a failed prefill
/// still leaves a decode-only result, a failed decode fails the request.
#[test]
fn the_prefill_first_stage_order() {
    let prompt: Vec<u32> = (0..64).collect();
    let off = json!({"nonCachedTokens": 0});
    let decode_first =
        || Router::new(pd_config(json!({"deciders": {"prefill": "pd"}}), off.clone()), pd_pods());
    let prefill_first =
        || Router::new(pd_config(json!({"stageOrder": "prefill-first"}), off.clone()), pd_pods());
    let no_decode =
        Err("429 failed to find target endpoint: failed to find available decode workers".to_owned());
    assert_eq!(pd_route(&mut decode_first(), 1, &prompt, &[0, 1]), Ok((0, None)));
    assert_eq!(pd_route(&mut decode_first(), 1, &prompt, &[1]), no_decode);
    let mut router = prefill_first();
    assert_eq!(pd_route(&mut router, 1, &prompt, &[0, 1]), Ok((0, Some("prefill-0:8000".to_owned()))));
    let order: Vec<usize> = router.result().profiles.iter().map(|(p, _)| *p).collect();
    assert_eq!(order, [0, 1], "decode is primary, prefill beside it");
    assert_eq!(
        pd_route(&mut prefill_first(), 1, &prompt, &[0]),
        Ok((0, None)),
        "prefill failed: decode only"
    );
    assert_eq!(pd_route(&mut prefill_first(), 1, &prompt, &[1]), no_decode);
}

fn session_config(strategy: Value) -> RouterConfig {
    load_yaml(
        &format!(
            "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: utilization-detector\n- type: \
             session-affinity-scorer\n  parameters: {strategy}\n- type: queue-scorer\nschedulingProfiles:\n- name: default\n  \
             plugins:\n  - pluginRef: utilization-detector\n  - {{pluginRef: session-affinity-scorer, weight: 10}}\n  - \
             pluginRef: queue-scorer\n"
        ),
        ALLOW,
    )
    .unwrap()
}

/// One turn of session `session` at `now_us` with waiting queues `queues` on pod-a and pod-b,
/// carrying the session tokens `echo` (as the client echoes them); returns the pick and the
/// tokens written on its response.
fn turn(
    router: &mut Router,
    key: u64,
    now_us: u64,
    queues: [u64; 2],
    echo: &[(String, String)],
) -> (u32, Vec<(String, String)>) {
    for (e, q) in queues.iter().enumerate() {
        router.record_scrape(e as u32, &scrape(*q, 0, 0.0), now_us);
    }
    let mut headers = vec![("x-session-id".to_owned(), "chat-1".to_owned())];
    headers.extend_from_slice(echo);
    let prompt: [u32; 0] = [];
    let req = RoutingRequest { headers: &headers, ..request(key, &prompt) };
    let Decision::Routed { endpoint, .. } = router.route(&req, &[0, 1], now_us, &mut rng(key)) else {
        panic!()
    };
    let mut written = Vec::new();
    router.response_header(key, &mut written);
    router.end(key);
    (endpoint, written)
}

/// A session sticks to its endpoint across turns through the response hook, and moves when a
/// filter drops that endpoint. Affinity weighs 10, the queue scorer 1, and the utilization
/// detector (as a filter) drops a pod with 5 or more waiting:
///
/// | turn | queues a, b | token sent | pick | token written |
/// |---|---|---|---|---|
/// | 1 | 0, 3 | none | a (emptier) | base64("pod-a") |
/// | 2 | 4, 0 | pod-a | a (affinity outweighs the queue) | base64("pod-a") |
/// | 3 | 7, 0 | pod-a | b (a is filtered out; the scorer has no pod to prefer) | base64("pod-b") |
/// | 4 | 0, 2 | pod-b | b (the session moved) | base64("pod-b") |
#[test]
fn a_session_sticks_across_turns_and_moves_when_its_endpoint_is_filtered_out() {
    let mut router =
        Router::new(session_config(json!({})), vec![endpoint("pod-a", &[]), endpoint("pod-b", &[])]);
    let token = |pod: &str| vec![("x-session-token".to_owned(), encode_base64(pod.as_bytes()))];
    let (pick, written) = turn(&mut router, 1, 1_000, [0, 3], &[]);
    assert_eq!((pick, written.clone()), (0, token("pod-a")));
    let (pick, written) = turn(&mut router, 2, 2_000, [4, 0], &written);
    assert_eq!((pick, written.clone()), (0, token("pod-a")));
    let (pick, written) = turn(&mut router, 3, 3_000, [7, 0], &written);
    assert_eq!((pick, written.clone()), (1, token("pod-b")));
    let (pick, written) = turn(&mut router, 4, 4_000, [0, 2], &written);
    assert_eq!((pick, written), (1, token("pod-b")));
}

/// The same four turns under the `session_id` strategy (the binding lives in the router, keyed
/// by `x-session-id`; nothing is written on the response): the binding migrates at turn 3
/// because this request's own choice found pod-a absent, and holds at turn 4.
#[test]
fn a_session_id_binding_migrates_when_its_endpoint_is_filtered_out() {
    let mut router = Router::new(
        session_config(json!({"strategy": "session_id"})),
        vec![endpoint("pod-a", &[]), endpoint("pod-b", &[])],
    );
    let picks: Vec<u32> = [(1, [0, 3]), (2, [4, 0]), (3, [7, 0]), (4, [0, 2])]
        .into_iter()
        .map(|(key, queues)| {
            let (pick, written) = turn(&mut router, key, key * 1_000, queues, &[]);
            assert!(written.is_empty());
            pick
        })
        .collect();
    assert_eq!(picks, [0, 0, 1, 1]);
}

fn refusal_of(document: Value, options: LoadOptions) -> blis_router::ConfigError {
    blis_router::load(Some(&document), options).expect_err("refused")
}

fn doc(plugins: Value, profiles: Value) -> Value {
    json!({"apiVersion": "llm-d.ai/v1alpha1", "kind": "EndpointPickerConfig", "plugins": plugins, "schedulingProfiles": profiles})
}

/// Bad configs for these plugins, refused with path, value and upstream's cause.
#[test]
fn bad_configs_are_refused_with_path_value_and_cause() {
    let profiles = json!([{"name": "decode", "plugins": [{"pluginRef": "queue-scorer"}]}]);
    let with_handler = |decider: Value, handler: Value| {
        doc(
            json!([{"name": "pd", "type": "prefix-based-pd-decider", "parameters": decider}, {"type": "queue-scorer"},
                   {"name": "h", "type": "disagg-profile-handler", "parameters": handler}]),
            profiles.clone(),
        )
    };
    // A threshold of the wrong type.
    let e = refusal_of(with_handler(json!({"nonCachedTokens": "512"}), json!({})), LoadOptions::default());
    assert_eq!(
        (e.path.as_str(), e.value.as_deref()),
        ("plugins[0].parameters.nonCachedTokens", Some("\"512\""))
    );
    assert_eq!(
        e.reason,
        "failed to create plugin 'pd' (type: prefix-based-pd-decider): failed to parse prefix-based-pd-decider plugin \
         config: json: invalid type: string \"512\", expected i64"
    );
    let e = refusal_of(with_handler(json!({"nonCachedTokens": -1}), json!({})), LoadOptions::default());
    assert_eq!((e.path.as_str(), e.value.as_deref()), ("plugins[0].parameters.nonCachedTokens", Some("-1")));
    assert!(
        e.reason.ends_with("nonCachedTokens parameter of prefix disaggregation decider cannot be negative"),
        "{e}"
    );
    let e = refusal_of(with_handler(json!({"promptTokens": 1.5}), json!({})), LoadOptions::default());
    assert_eq!(e.path, "plugins[0].parameters.promptTokens");
    // The handler's references, checked before any plugin is built (`buildPluginDAG`).
    let e =
        refusal_of(with_handler(json!({}), json!({"deciders": {"prefill": "nope"}})), LoadOptions::default());
    assert_eq!(
        (e.path.as_str(), e.value.as_deref()),
        ("plugins[2].parameters.deciders.prefill", Some("\"nope\""))
    );
    assert_eq!(e.reason, "a plugin has a dependency on the unregistered plugin nope");
    let e = refusal_of(
        with_handler(json!({}), json!({"deciders": {"prefill": "queue-scorer"}})),
        LoadOptions::default(),
    );
    assert_eq!(e.path, "plugins[2].parameters.deciders.prefill");
    assert_eq!(
        e.reason,
        "failed to create plugin 'h' (type: disagg-profile-handler): plugin queue-scorer does not implement \
         prefillDeciderPlugin"
    );
    let e = refusal_of(
        with_handler(json!({}), json!({"profiles": {"decode": "d"}, "prefillProfile": "p"})),
        LoadOptions::default(),
    );
    assert_eq!(e.path, "plugins[2].parameters.prefillProfile");
    assert_eq!(
        e.reason,
        "failed to build plugin dependency graph: failed to parse plugin parameters for h (type: disagg-profile-handler): \
         failed to parse parameters of the disagg-profile-handler: nested schema error: json: unknown field \
         \"prefillProfile\"; legacy schema error: json: unknown field \"profiles\" (use one format exclusively: either \
         nested profiles/deciders or the deprecated flat fields)"
    );
    let e = refusal_of(
        with_handler(json!({}), json!({"stageOrder": "prefill-first", "deciders": {"prefill": "pd"}})),
        LoadOptions::default(),
    );
    assert_eq!(e.path, "plugins[2].parameters.deciders.prefill");
    assert!(e.reason.ends_with("prefill decider is not supported in prefill-first stage order"), "{e}");
    let e = refusal_of(with_handler(json!({}), json!({"stageOrder": "sideways"})), LoadOptions::default());
    assert_eq!(
        (e.path.as_str(), e.value.as_deref()),
        ("plugins[2].parameters.stageOrder", Some("\"sideways\""))
    );
    assert!(
        e.reason.ends_with("invalid stage order \"sideways\", must be \"decode-first\" or \"prefill-first\""),
        "{e}"
    );
    // Session affinity is Alpha.
    let session = doc(
        json!([{"type": "session-affinity-scorer"}]),
        json!([{"name": "default", "plugins": [{"pluginRef": "session-affinity-scorer"}]}]),
    );
    let e = refusal_of(session.clone(), LoadOptions::default());
    assert_eq!(
        (e.path.as_str(), e.value.as_deref()),
        ("plugins[0].type", Some("\"session-affinity-scorer\""))
    );
    assert_eq!(
        e.reason,
        "plugin 'session-affinity-scorer' (type: 'session-affinity-scorer') has Alpha stability level, but command line \
         flag --allow-experimental-plugins is not set (cluster.router.allow_experimental_plugins)"
    );
    assert!(blis_router::load(Some(&session), ALLOW).is_ok());
    let filter = |params: Value| {
        doc(
            json!([{"type": "session-affinity-filter", "parameters": params}]),
            json!([{"name": "default", "plugins": [{"pluginRef": "session-affinity-filter"}]}]),
        )
    };
    let e = refusal_of(
        filter(json!({"strategy": "session_id", "sessionIdConfig": {"evictionTtlSeconds": -1}})),
        ALLOW,
    );
    assert_eq!(
        (e.path.as_str(), e.value.as_deref()),
        ("plugins[0].parameters.sessionIdConfig.evictionTtlSeconds", Some("-1"))
    );
    assert_eq!(
        e.reason,
        "failed to create plugin 'session-affinity-filter' (type: session-affinity-filter): invalid parameters of the \
         'session-affinity-filter' filter - evictionTtlSeconds must be > 0, got -1"
    );
    let e = refusal_of(
        filter(json!({"strategy": "session_id", "sessionIdConfig": {"evictionSweepSeconds": 1e12}})),
        ALLOW,
    );
    assert_eq!(e.path, "plugins[0].parameters.sessionIdConfig.evictionSweepSeconds");
    assert!(e.reason.contains("at most 315360000"), "{e}");
    let e = refusal_of(
        filter(
            json!({"strategy": "session_id", "sessionIdConfig": {"sources": [{"header": "h", "attribute": "a"}]}}),
        ),
        ALLOW,
    );
    assert_eq!(e.path, "plugins[0].parameters.sessionIdConfig.sources[0]");
    assert!(e.reason.ends_with("sources[0]: exactly one of header or attribute must be set"), "{e}");
    let e = refusal_of(filter(json!({"encodedEndpointHeaderConfig": {"header": 5}})), ALLOW);
    assert_eq!(
        (e.path.as_str(), e.value.as_deref()),
        ("plugins[0].parameters.encodedEndpointHeaderConfig.header", Some("5"))
    );
    assert!(
        e.reason.contains(
            "failed to parse the parameters of the 'session-affinity-filter' filter - json: invalid type"
        ),
        "{e}"
    );
    let e = refusal_of(
        doc(json!([{"type": "session-id-producer"}, {"type": "queue-scorer"}]), profiles),
        LoadOptions::default(),
    );
    assert_eq!(e.path, "plugins[0].parameters");
    assert!(
        e.reason
            .ends_with("'session-id-producer' requires exactly one of headerName or cookieName to be set"),
        "{e}"
    );
}
