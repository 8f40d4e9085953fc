//! Property: over random pools of decode, prefill, both-role and unlabelled endpoints, random
//! decider thresholds and stage orders, and random conversations (prompts that extend earlier
//! ones, so the approximate index has hits), the P/D cycle never panics; a routed request's
//! decode target is one the decode filter keeps; a prefill target appears exactly when the
//! sidecar header names it, is one the prefill filter keeps, and (decode-first) only when the
//! prompt reaches the decider's threshold; a refusal is a 503 for no candidates or a 429 when no
//! candidate may decode.

mod common;

use blis_router::plugins::filters::ByLabel;
use blis_router::{Decision, Endpoint, Router};
use common::*;
use proptest::prelude::*;
use serde_json::json;

const ROLES: [Option<&str>; 5] = [Some("decode"), Some("prefill"), Some("both"), Some("encode"), None];

fn config(non_cached: i64, prefill_first: bool) -> blis_router::RouterConfig {
    let handler = if prefill_first {
        json!({"stageOrder": "prefill-first"})
    } else {
        json!({"deciders": {"prefill": "pd"}})
    };
    load_json(json!({
        "apiVersion": "llm-d.ai/v1alpha1", "kind": "EndpointPickerConfig",
        "plugins": [
            {"name": "pd", "type": "prefix-based-pd-decider", "parameters": {"nonCachedTokens": non_cached}},
            {"type": "decode-filter"}, {"type": "prefill-filter"}, {"type": "queue-scorer"},
            {"type": "prefix-cache-scorer"}, {"type": "inflight-load-producer"},
            {"type": "disagg-profile-handler", "parameters": handler},
        ],
        "schedulingProfiles": [
            {"name": "decode", "plugins": [{"pluginRef": "decode-filter"}, {"pluginRef": "prefix-cache-scorer"},
                                            {"pluginRef": "queue-scorer"}]},
            {"name": "prefill", "plugins": [{"pluginRef": "prefill-filter"}, {"pluginRef": "queue-scorer"}]},
        ],
    }))
    .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn the_pd_cycle_keeps_its_invariants(
        roles in prop::collection::vec(0..ROLES.len(), 1..6),
        non_cached in prop_oneof![Just(0i64), 1i64..400],
        prefill_first in any::<bool>(),
        turns in prop::collection::vec((0usize..4, 1usize..200, any::<bool>(), 0u64..8), 1..25),
        seed in any::<u64>(),
    ) {
        let endpoints: Vec<Endpoint> = roles
            .iter()
            .enumerate()
            .map(|(i, &r)| {
                let labels: Vec<(&str, &str)> = ROLES[r].map(|role| ("llm-d.ai/role", role)).into_iter().collect();
                endpoint(&format!("pod-{i}"), &labels)
            })
            .collect();
        let decode = ByLabel::role("decode-filter");
        let prefill = ByLabel::role("prefill-filter");
        let mut router = Router::new(config(non_cached, prefill_first), endpoints.clone());
        let mut r = rng(seed);
        let mut conversations: Vec<Vec<u32>> = vec![Vec::new(); 4];
        for (key, &(conversation, extra, drop_last, queue)) in turns.iter().enumerate() {
            let prompt = &mut conversations[conversation];
            let base = 100_000 * conversation as u32 + prompt.len() as u32;
            prompt.extend((0..extra as u32).map(|t| base + t));
            let candidates: Vec<u32> =
                (0..endpoints.len() as u32).filter(|&e| !(drop_last && e + 1 == endpoints.len() as u32)).collect();
            router.record_scrape(key as u32 % endpoints.len() as u32, &scrape(queue, 0, 0.0), key as u64);
            let decision = router.route(&request(key as u64, prompt), &candidates, key as u64, &mut r);
            match decision {
                Decision::Routed { endpoint, .. } => {
                    prop_assert!(candidates.contains(&endpoint));
                    prop_assert!(decode.keeps(&endpoints[endpoint as usize]));
                    let result = router.result();
                    let header = result.headers.iter().find(|(h, _)| *h == "x-prefiller-host-port").map(|(_, v)| v.clone());
                    prop_assert_eq!(header, result.prefill.map(|p| format!("pod-{p}:8000")));
                    if let Some(p) = result.prefill {
                        prop_assert!(candidates.contains(&p) && prefill.keeps(&endpoints[p as usize]));
                        if !prefill_first {
                            prop_assert!(non_cached > 0 && prompt.len() as i64 >= non_cached);
                        }
                    } else if prefill_first {
                        prop_assert!(!candidates.iter().any(|&c| prefill.keeps(&endpoints[c as usize])));
                    }
                    router.first_chunk(key as u64);
                    router.end(key as u64);
                }
                Decision::Refused { status, .. } => {
                    prop_assert!(status == 503 || status == 429);
                    prop_assert!(!candidates.iter().any(|&c| decode.keeps(&endpoints[c as usize])) || candidates.is_empty());
                }
            }
        }
    }
}
