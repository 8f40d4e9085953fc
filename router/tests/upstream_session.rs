//! Upstream's session-affinity tests: the scorer and filter (`scheduling/scorer/sessionaffinity/`,
//! `scheduling/filter/sessionaffinity/`), their shared `session_id` implementation
//! (`scheduling/util/sessionaffinity/session_id_test.go`) and the session-id producer
//! (`requestcontrol/dataproducer/sessionid/producer_test.go`). Upstream's Go-map request headers
//! are the request's header list; `NamespacedName{Name: "pod-a"}` is the pod id `pod-a`.

mod common;

use std::sync::Arc;

use blis_router::plugins::PluginKind;
use blis_router::plugins::session::{SessionAffinity, SessionIdProducer, encode_base64};
use blis_router::view::{Attributes, View};
use blis_router::{Endpoint, RoutingRequest};
use common::*;
use serde_json::{Value, json};

fn affinity(type_name: &str, params: Value) -> SessionAffinity {
    match build(type_name, Some(params)) {
        PluginKind::SessionAffinity(s) => *s,
        other => panic!("not session affinity: {other:?}"),
    }
}

fn session_id(type_name: &str) -> SessionAffinity {
    // newTestScorerStrategy / newTestFilterStrategy: the session id read from `x-session-token`.
    affinity(
        type_name,
        json!({"strategy": "session_id", "sessionIdConfig": {"sources": [{"header": "x-session-token"}],
               "evictionTtlSeconds": 300, "evictionSweepSeconds": 10}}),
    )
}

fn pods(names: &[&str]) -> Vec<Endpoint> {
    names.iter().map(|n| endpoint(n, &[])).collect()
}

/// Request headers as the router reads them.
type Headers = Vec<(String, String)>;

fn headers(pairs: &[(&str, &str)]) -> Headers {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

fn with_request<R>(headers: &[(String, String)], f: impl FnOnce(RoutingRequest) -> R) -> R {
    let prompt: [u32; 0] = [];
    f(RoutingRequest { headers, ..request(1, &prompt) })
}

/// Run `f` over a view of `endpoints` for a request with `headers` at `now_us`.
fn in_view<R>(
    endpoints: &[Endpoint],
    headers: &[(String, String)],
    now_us: u64,
    f: impl FnOnce(&View) -> R,
) -> R {
    let attributes = Attributes::default();
    with_request(headers, |req| {
        let view = View { now_us, endpoints, request: &req, attributes: &attributes, plugins: &[] };
        f(&view)
    })
}

fn scores_of(s: &SessionAffinity, endpoints: &[Endpoint], headers: &[(String, String)]) -> Vec<f64> {
    in_view(endpoints, headers, 0, |view| {
        let mut out = vec![None; endpoints.len()];
        s.score(view, &all(endpoints.len()), &mut out);
        out.into_iter().map(|s| s.expect("scored")).collect()
    })
}

fn filtered(
    s: &SessionAffinity,
    endpoints: &[Endpoint],
    input: &[u32],
    headers: &[(String, String)],
) -> Vec<String> {
    in_view(endpoints, headers, 0, |view| {
        let mut out = Vec::new();
        s.filter(view, input, &mut out);
        out.iter().map(|&e| endpoints[e as usize].name.to_string()).collect()
    })
}

/// The session-id strategy's pre-request hook for session `session` (in `x-session-token`)
/// picking `pod` at `now_us`.
fn bind(s: &mut SessionAffinity, session: &str, pod: &str, now_us: u64) {
    let h = headers(&[("x-session-token", session)]);
    let attributes = Attributes::default();
    with_request(&h, |req| s.pre_request(&req, &attributes, now_us, Some(&Arc::from(pod))));
}

/// One request of session `session`: the choice over `input`, then the pre-request hook with
/// `picked`.
fn choose_then_bind(
    s: &mut SessionAffinity,
    endpoints: &[Endpoint],
    input: &[u32],
    session: &str,
    picked: &str,
) {
    s.begin_request();
    let h = headers(&[("x-session-token", session)]);
    filtered(s, endpoints, input, &h);
    let attributes = Attributes::default();
    with_request(&h, |req| s.pre_request(&req, &attributes, 0, Some(&Arc::from(picked))));
}

/// upstream: scorer/sessionaffinity/session_affinity_test.go::TestSessionAffinity_Score (6 cases).
#[test]
fn session_affinity_score() {
    let endpoints = pods(&["pod-a", "pod-b"]);
    let token_b = encode_base64(b"pod-b");
    let default = affinity("session-affinity-scorer", json!({}));
    let custom = affinity(
        "session-affinity-scorer",
        json!({"encodedEndpointHeaderConfig": {"header": "x-custom-session"}}),
    );
    let cases: [(&SessionAffinity, Headers, [f64; 2]); 5] = [
        (&default, headers(&[("x-session-token", &token_b)]), [0.0, 1.0]),
        (&custom, headers(&[("x-custom-session", &token_b)]), [0.0, 1.0]),
        (&custom, headers(&[("x-session-token", &token_b)]), [0.0, 0.0]),
        (&default, headers(&[]), [0.0, 0.0]),
        (&default, headers(&[("x-session-token", "garbage-token")]), [0.0, 0.0]),
    ];
    for (scorer, h, want) in cases {
        assert_eq!(scores_of(scorer, &endpoints, &h), want, "{h:?}");
    }
    // "no endpoints available": an empty score map.
    assert!(scores_of(&default, &[], &headers(&[])).is_empty());
}

/// upstream: scorer/sessionaffinity/session_affinity_test.go::TestSessionAffinity_ResponseHeader
/// and filter/sessionaffinity/session_affinity_test.go::TestSessionAffinity_ResponseHeader: the
/// token is `base64(<pod id>)` under the configured header; no target writes nothing. (The
/// `profileName` cases run through the router in `session_affinity_response_header_of_a_profile`;
/// "nil response" has no counterpart.)
#[test]
fn session_affinity_response_header() {
    for type_name in ["session-affinity-scorer", "session-affinity-filter"] {
        let default = affinity(type_name, json!({}));
        let want = ("x-session-token".to_owned(), "ZGVmYXVsdC9wb2Qx".to_owned());
        assert_eq!(default.response_header(Some("default/pod1")), Some(want));
        let custom =
            affinity(type_name, json!({"encodedEndpointHeaderConfig": {"header": "x-custom-session"}}));
        assert_eq!(
            custom.response_header(Some("default/pod1")),
            Some(("x-custom-session".to_owned(), encode_base64(b"default/pod1")))
        );
        assert_eq!(default.response_header(None), None, "nil targetPod should do nothing");
    }
}

/// upstream: the `profileName` cases of both TestSessionAffinity_ResponseHeader: the named
/// profile's target is written; a profile absent from the result writes no header.
#[test]
fn session_affinity_response_header_of_a_profile() {
    let config = |profile: &str| {
        load_yaml(
            &format!(
                "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: session-affinity-scorer\n  \
                 parameters: {{profileName: {profile}, encodedEndpointHeaderConfig: {{header: x-session-token-prefill}}}}\n\
                 - type: queue-scorer\nschedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: session-affinity-scorer\n  \
                 - pluginRef: queue-scorer\n"
            ),
            blis_router::LoadOptions { allow_experimental_plugins: true },
        )
        .unwrap()
    };
    for (profile, want) in [("default", Some(encode_base64(b"pod-b"))), ("prefill", None)] {
        let mut router = blis_router::Router::new(
            config(profile),
            vec![loaded("pod-a", 3, 0, 0.0), loaded("pod-b", 0, 0, 0.0)],
        );
        assert!(matches!(
            router.route(&request(7, &[]), &[0, 1], 0, &mut rng(1)),
            blis_router::Decision::Routed { endpoint: 1, .. }
        ));
        let mut out = Vec::new();
        router.response_header(7, &mut out);
        assert_eq!(
            out,
            want.map(|t| ("x-session-token-prefill".to_owned(), t)).into_iter().collect::<Vec<_>>(),
            "{profile}"
        );
    }
}

/// upstream: scorer/sessionaffinity/session_affinity_test.go::TestSessionAffinity_FactoryValidation
/// (11 cases), for the scorer and the filter (the same parameters).
#[test]
fn session_affinity_factory_validation() {
    let cases: [(Value, bool); 11] = [
        (Value::Null, true),
        (json!({"strategy": "encoded_endpoint_header"}), true),
        (json!({"strategy": "session_id"}), true),
        (
            json!({"strategy": "session_id", "sessionIdConfig": {"sources": [{"attribute": "agent-identity"}]}}),
            true,
        ),
        (
            json!({"strategy": "session_id", "sessionIdConfig": {"sources": [{"header": "x-session-id"}, {"attribute": "agent-identity"}]}}),
            true,
        ),
        (json!({"strategy": "session_id", "sessionIdConfig": {"sources": []}}), true),
        (json!({"strategy": "session_id", "sessionIdConfig": {"evictionTtlSeconds": 0}}), true),
        (json!({"strategy": "bogus"}), false),
        (
            json!({"strategy": "session_id", "sessionIdConfig": {"sources": [{"header": "h", "attribute": "a"}]}}),
            false,
        ),
        (json!({"strategy": "session_id", "sessionIdConfig": {"evictionTtlSeconds": -1}}), false),
        (json!({"strategy": "session_id", "sessionIdConfig": {"evictionSweepSeconds": -1}}), false),
    ];
    for type_name in ["session-affinity-scorer", "session-affinity-filter"] {
        for (params, ok) in &cases {
            let built = blis_router::plugins::build(type_name, Some(params)).expect("modelled");
            assert_eq!(built.is_ok(), *ok, "{type_name} {params}");
        }
    }
    let e = refusal("session-affinity-filter", json!({"strategy": "bogus"}));
    assert_eq!((e.path.as_str(), e.value.as_deref()), ("strategy", Some("\"bogus\"")));
    assert_eq!(
        e.reason,
        "invalid parameters of the 'session-affinity-filter' filter - strategy must be \"encoded_endpoint_header\" or \
         \"session_id\", got \"bogus\""
    );
}

/// upstream: filter/sessionaffinity/session_affinity_test.go::TestSessionAffinity_Filter (7 cases).
#[test]
fn session_affinity_filter() {
    let endpoints = pods(&["pod-a", "pod-b"]);
    let token_b = encode_base64(b"pod-b");
    let missing = encode_base64(b"pod-missing");
    let default = affinity("session-affinity-filter", json!({}));
    let custom = affinity(
        "session-affinity-filter",
        json!({"encodedEndpointHeaderConfig": {"header": "x-custom-session"}}),
    );
    let both = ["pod-a", "pod-b"].map(String::from).to_vec();
    let cases: [(&SessionAffinity, Headers, Vec<String>); 6] = [
        (&default, headers(&[("x-session-token", &token_b)]), vec!["pod-b".to_owned()]),
        (&custom, headers(&[("x-custom-session", &token_b)]), vec!["pod-b".to_owned()]),
        (&custom, headers(&[("x-session-token", &token_b)]), both.clone()),
        (&default, headers(&[]), both.clone()),
        (&default, headers(&[("x-session-token", "garbage-token")]), both.clone()),
        (&default, headers(&[("x-session-token", &missing)]), both),
    ];
    for (filter, h, want) in cases {
        assert_eq!(filtered(filter, &endpoints, &[0, 1], &h), want, "{h:?}");
    }
    assert!(filtered(&default, &endpoints, &[], &headers(&[("x-session-token", &token_b)])).is_empty());
}

/// upstream: scorer/sessionaffinity/session_id_header_test.go::TestSessionIDHeaderScorer_ScoresBoundPod,
/// `…_NoSessionAbstains`, `…_UnboundAbstains`.
#[test]
fn session_id_scorer_scores_the_bound_pod_and_otherwise_abstains() {
    let endpoints = pods(&["pod-a", "pod-b"]);
    let mut s = session_id("session-affinity-scorer");
    bind(&mut s, "s1", "pod-b", 0);
    assert_eq!(scores_of(&s, &endpoints, &headers(&[("x-session-token", "s1")])), [0.0, 1.0]);
    let mut s = session_id("session-affinity-scorer");
    bind(&mut s, "s1", "pod-a", 0);
    assert_eq!(scores_of(&s, &endpoints, &headers(&[])), [0.0, 0.0], "no session");
    assert_eq!(scores_of(&s, &endpoints, &headers(&[("x-session-token", "s2")])), [0.0, 0.0], "unbound");
}

/// upstream: filter/sessionaffinity/session_id_header_test.go::TestSessionIDHeaderFilter_BoundPresentReturnsAlone,
/// `…_NoSessionReturnsAll`, `…_UnboundReturnsAll`, `…_MigratesOnAbsence`, `…_NeverNarrowsToEmpty`.
#[test]
fn session_id_filter() {
    let endpoints = pods(&["pod-a", "pod-b"]);
    let s1 = headers(&[("x-session-token", "s1")]);
    let mut s = session_id("session-affinity-filter");
    bind(&mut s, "s1", "pod-b", 0);
    assert_eq!(filtered(&s, &endpoints, &[0, 1], &s1), ["pod-b"]);
    assert_eq!(filtered(&s, &endpoints, &[0, 1], &headers(&[])), ["pod-a", "pod-b"]);
    let mut s = session_id("session-affinity-filter");
    bind(&mut s, "s1", "pod-a", 0);
    assert_eq!(filtered(&s, &endpoints, &[0, 1], &headers(&[("x-session-token", "s2")])), ["pod-a", "pod-b"]);
    // Migrates on absence: s1 is pinned to pod-a; a request seeing only pod-b migrates it.
    choose_then_bind(&mut s, &endpoints, &[1], "s1", "pod-b");
    assert_eq!(filtered(&s, &endpoints, &[0, 1], &s1), ["pod-b"]);
    // Never narrows to empty.
    let mut s = session_id("session-affinity-filter");
    bind(&mut s, "s1", "pod-gone", 0);
    bind(&mut s, "s3", "pod-a", 0);
    for session in [None, Some("s2"), Some("s1"), Some("s3")] {
        let h = session.map_or_else(Vec::new, |id| headers(&[("x-session-token", id)]));
        assert!(!filtered(&s, &endpoints, &[0, 1], &h).is_empty(), "{session:?}");
    }
    assert!(filtered(&s, &endpoints, &[], &headers(&[("x-session-token", "s3")])).is_empty());
}

/// upstream: util/sessionaffinity/session_id_test.go::TestSessionIDHeader_PreRequest_FirstBind,
/// `…_MigratesOnGenuineAbsence`, `…_HoldsPinWhenPresentButOutvoted`,
/// `…_FirstBindRaceKeepsSingleBinding` (sequentially: a second first-bind to another pod with no
/// presence record holds the first), and the Choose cases (`…_Choose_BoundSessionPresent`,
/// `…_UnboundAbstains`, `…_NoEndpoints`, `…_NoSessionAbstains`).
#[test]
fn session_id_binding_rules() {
    let endpoints = pods(&["pod-a", "pod-b"]);
    let mut s = session_id("session-affinity-scorer");
    bind(&mut s, "s1", "pod-a", 0);
    assert_eq!(&*s.binding("s1", 0).unwrap().pod, "pod-a", "first bind");
    choose_then_bind(&mut s, &endpoints, &[1], "s1", "pod-b");
    assert_eq!(&*s.binding("s1", 0).unwrap().pod, "pod-b", "migrates on genuine absence");
    choose_then_bind(&mut s, &endpoints, &[0, 1], "s1", "pod-a");
    assert_eq!(&*s.binding("s1", 0).unwrap().pod, "pod-b", "holds the pin when present but outvoted");
    s.begin_request();
    bind(&mut s, "s1", "pod-a", 0);
    assert_eq!(&*s.binding("s1", 0).unwrap().pod, "pod-b", "no presence record never migrates");
    // Choose: bound and present → that pod; unbound, no endpoints, no session → no preference.
    let s1 = headers(&[("x-session-token", "s1")]);
    assert_eq!(filtered(&s, &endpoints, &[0, 1], &s1), ["pod-b"]);
    assert_eq!(scores_of(&s, &endpoints, &headers(&[("x-session-token", "s9")])), [0.0, 0.0]);
    assert!(filtered(&s, &endpoints, &[], &s1).is_empty());
    assert_eq!(scores_of(&s, &endpoints, &headers(&[])), [0.0, 0.0]);
}

/// upstream: util/sessionaffinity/session_id_test.go::TestSessionIDHeader_Expired,
/// `…_RunEvictionDropsExpiredBinding`, `…_RunEvictionSparesRefreshedBinding`, in simulated time:
/// TTL 60 s, sweeps every 10 s from the plugin's start. A binding last seen at 5 s expires after
/// 65 s and is dropped by the sweep at 70 s; refreshed at 50 s it survives that sweep.
#[test]
fn session_id_eviction_in_simulated_time() {
    let mut s = affinity(
        "session-affinity-scorer",
        json!({"strategy": "session_id", "sessionIdConfig": {"evictionTtlSeconds": 60, "evictionSweepSeconds": 10}}),
    );
    let sec = 1_000_000;
    let bind_at = |s: &mut SessionAffinity, at| {
        let h = headers(&[("x-session-id", "s1")]);
        with_request(&h, |req| s.pre_request(&req, &Attributes::default(), at, Some(&Arc::from("pod-a"))));
    };
    bind_at(&mut s, 5 * sec);
    assert!(s.binding("s1", 5 * sec).is_some(), "just seen");
    assert!(s.binding("s1", 70 * sec - 1).is_some(), "expired but not yet swept");
    assert!(s.binding("s1", 70 * sec).is_none(), "dropped by the sweep at 70 s");
    let mut s2 = s.clone();
    bind_at(&mut s2, 50 * sec);
    assert!(s2.binding("s1", 70 * sec).is_some(), "the refreshed binding is spared");
    assert!(s2.binding("s1", 120 * sec - 1).is_some());
    assert!(
        s2.binding("s1", 120 * sec).is_none(),
        "50 s + 60 s = 110 s; the sweep at 120 s finds it expired"
    );
    // Unused for exactly the TTL is not expired (`now − lastSeen > ttl`): seen at 10 s, the sweep
    // at 70 s spares it and the one at 80 s drops it.
    let mut s3 = s.clone();
    bind_at(&mut s3, 10 * sec);
    assert!(s3.binding("s1", 70 * sec).is_some());
    assert!(s3.binding("s1", 80 * sec).is_none());
}

/// upstream: util/sessionaffinity/session_id_test.go::TestResolveSessionID (the header and
/// attribute cases; attributes here are session ids the session-id producer wrote) and
/// TestSessionIDHeader_ResponseHeader_IsNoOp, through a router.
#[test]
fn resolve_session_id_through_header_and_attribute_sources() {
    let yaml = |sources: &str| {
        format!(
            "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: session-id-producer\n  \
             parameters: {{headerName: x-user}}\n- type: session-affinity-filter\n  parameters: {{strategy: session_id, \
             sessionIdConfig: {{sources: {sources}}}}}\n- type: queue-scorer\nschedulingProfiles:\n- name: default\n  \
             plugins:\n  - pluginRef: session-affinity-filter\n  - pluginRef: queue-scorer\n"
        )
    };
    let allow = blis_router::LoadOptions { allow_experimental_plugins: true };
    let sources = "[{header: x-session-id}, {attribute: SessionIDDataKey/session-id-producer}]";
    let mut router = blis_router::Router::new(
        load_yaml(&yaml(sources), allow).unwrap(),
        vec![loaded("pod-a", 0, 0, 0.0), loaded("pod-b", 5, 0, 0.0)],
    );
    // Bind "from-attr" (read through the producer's attribute) to pod-a, the emptier pod.
    let route = |router: &mut blis_router::Router, key, h: &[(String, String)]| {
        let prompt: [u32; 0] = [];
        let req = RoutingRequest { headers: h, ..request(key, &prompt) };
        match router.route(&req, &[0, 1], 0, &mut rng(1)) {
            blis_router::Decision::Routed { endpoint, .. } => endpoint,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(route(&mut router, 1, &headers(&[("x-user", "from-attr")])), 0);
    // pod-a fills up; the attribute-bound session still goes there, a header one does not.
    router.record_scrape(0, &scrape(9, 0, 0.0), 1);
    assert_eq!(route(&mut router, 2, &headers(&[("x-user", "from-attr")])), 0, "attribute source");
    assert_eq!(
        route(&mut router, 3, &headers(&[("x-session-id", "from-header"), ("x-user", "from-attr")])),
        1,
        "header wins"
    );
    assert_eq!(
        route(&mut router, 4, &headers(&[("x-session-id", "   "), ("x-user", "from-attr")])),
        0,
        "whitespace is empty"
    );
    let mut out = Vec::new();
    router.response_header(4, &mut out);
    assert!(out.is_empty(), "the session_id strategy writes no response header");
}

/// upstream: requestcontrol/dataproducer/sessionid/producer_test.go::TestFactory_Validation (10
/// cases; "invalid json" cannot reach a factory here), TestProduce_HeaderMode, TestProduce_CookieMode.
#[test]
fn session_id_producer() {
    let producer = |params: Value| match build("session-id-producer", Some(params)) {
        PluginKind::SessionIdProducer(p) => p,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        producer(json!({"headerName": "x-session-id"})),
        SessionIdProducer::Header("x-session-id".to_owned())
    );
    assert_eq!(
        producer(json!({"cookieName": "llm-d-session"})),
        SessionIdProducer::Cookie("llm-d-session".to_owned())
    );
    assert_eq!(
        producer(json!({"headerName": " X-Session-ID "})),
        SessionIdProducer::Header("x-session-id".to_owned())
    );
    let exactly_one = "'session-id-producer' requires exactly one of headerName or cookieName to be set";
    for params in [json!({}), json!({"headerName": "", "cookieName": ""}), Value::Null] {
        assert_eq!(
            blis_router::plugins::build("session-id-producer", Some(&params)).unwrap().err().unwrap().reason,
            exactly_one
        );
    }
    assert!(
        refusal("session-id-producer", json!({"headerName": "x", "cookieName": "y"}))
            .reason
            .ends_with("not both")
    );
    let e = refusal("session-id-producer", json!({"headerName": "x", "other": "y"}));
    assert!(
        e.reason.starts_with(
            "failed to parse the parameters of the 'session-id-producer' producer: json: unknown field"
        ),
        "{e}"
    );
    // Header mode.
    let header = producer(json!({"headerName": "x-session-id"}));
    for (value, want) in [
        (Some("abc123"), Some("abc123")),
        (Some("  abc123  "), Some("abc123")),
        (None, None),
        (Some(""), None),
    ] {
        assert_eq!(header.extract(|h| if h == "x-session-id" { value } else { None }), want);
    }
    // Cookie mode.
    let cookie = producer(json!({"cookieName": "llm-d-session"}));
    for (value, want) in [
        ("llm-d-session=abc123", Some("abc123")),
        ("csrf=xyz; llm-d-session=abc123; theme=dark", Some("abc123")),
        ("csrf=xyz; theme=dark", None),
        ("", None),
        ("no-equals; llm-d-session=abc", Some("abc")),
        ("llm-d-session=", None),
        ("llm-d-session= abc123 ; other=v", Some("abc123")),
    ] {
        assert_eq!(cookie.extract(|h| (h == "cookie").then_some(value)), want, "{value:?}");
    }
}
