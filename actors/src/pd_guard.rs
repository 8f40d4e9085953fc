//! Checking a prefill/decode disaggregated deployment before it runs.
//!
//! llm-d runs P/D with pools labelled `llm-d.ai/role: prefill` and `decode`, vLLM's
//! `NixlConnector` on both, and a router whose `disagg-profile-handler` picks a decode endpoint
//! and, when its decider says so, a prefill endpoint (`blis_router::plugins::disagg`); the decode
//! pod's sidecar runs the prefill leg and the decode leg (`crate::engine_host`). A deployment
//! that could not work that way is refused by name rather than run as something else:
//!
//! - a decode pool with `NixlConnector` and no prefill pool (nothing would ever prefill for it);
//! - `NixlConnector` on one side only: a pool the prefill profile can pick, or one the decode
//!   profile can pick while prefill can run, without the connector (upstream the prefill pod
//!   would never return transfer parameters, or the decode pod would ignore them and recompute
//!   the prompt while the prefill pod holds its blocks for minutes);
//! - roles the router does not filter: a prefill (or encode) pool the profile every request runs
//!   does not exclude by label, so it would be sent whole requests to decode;
//! - an encode stage (encode/prefill/decode disaggregation is not modelled).

use std::collections::BTreeMap;

use blis_contracts::{FieldError, join_path};
use blis_router::RouterConfig;
use blis_router::plugins::PluginKind;
use blis_router::plugins::disagg::StageOrder;
use blis_router::plugins::filters::ROLE_LABEL;

/// Role values of pools that only prefill (or encode) for a decode pod.
const NOT_DECODE_ROLES: [&str; 3] = ["prefill", "encode-prefill", "encode"];

/// Role values of pools that prefill for a decode pod (llm-d's prefill-filter keeps these).
const PREFILL_ROLES: [&str; 5] =
    ["prefill", "encode-prefill", "prefill-decode", "both", "encode-prefill-decode"];

/// What the check needs of a pool.
#[derive(Clone, Copy, Debug)]
pub struct PoolRole<'a> {
    /// Its labels.
    pub labels: &'a BTreeMap<String, String>,
    /// Whether it runs `NixlConnector`.
    pub nixl: bool,
}

impl PoolRole<'_> {
    fn role(&self) -> Option<&str> {
        self.labels.get(ROLE_LABEL).map(String::as_str)
    }
}

fn connector_path(i: usize) -> String {
    format!("cluster.pools[{i}].engine.args.kv_transfer_config.kv_connector")
}

/// Whether `profile` of `config` keeps a pool labelled `labels` (none of its label filters
/// excludes it).
fn keeps(config: &RouterConfig, profile: usize, labels: &BTreeMap<String, String>) -> bool {
    !config.profiles[profile].filters.iter().any(|&f| match &config.plugins[f].kind {
        PluginKind::ByLabelFilter(filter) => !filter.keeps_labels(labels),
        PluginKind::LabelSelectorFilter(selector) => !selector.matches(labels),
        _ => false,
    })
}

/// Refuse a deployment of `pools` behind `router` (llm-d's config loaded from `prefix`, or the
/// round-robin baseline when `None`) that could not run as llm-d runs P/D.
pub fn check(router: Option<(&RouterConfig, &str)>, pools: &[PoolRole]) -> Result<(), FieldError> {
    // A decode pool with NIXL needs a pool to prefill for it.
    let has_prefill_pool = pools.iter().any(|p| p.role().is_some_and(|r| PREFILL_ROLES.contains(&r)));
    if !has_prefill_pool && let Some(i) = pools.iter().position(|p| p.nixl && p.role() == Some("decode")) {
        return Err(FieldError::new(
            connector_path(i),
            "NixlConnector",
            format!(
                "a decode pool ({ROLE_LABEL}: decode) with NixlConnector, but no pool is labelled {ROLE_LABEL}: prefill \
                 to prefill for it (add a prefill pool, or drop the connector and the role to serve aggregated)"
            ),
        ));
    }
    let Some((config, prefix)) = router else {
        // The baseline routes every request to any pool whole: none may be prefill-only.
        return match pools.iter().position(|p| p.role().is_some_and(|r| NOT_DECODE_ROLES.contains(&r))) {
            Some(i) => Err(FieldError::new(
                format!("cluster.pools[{i}].labels.{ROLE_LABEL}"),
                pools[i].role().unwrap_or_default(),
                "the round-robin baseline sends whole requests to every pool and cannot disaggregate; \
                 a prefill or encode pool needs llm-d's router with a disagg-profile-handler",
            )),
            None => Ok(()),
        };
    };
    let handler = &config.plugins[config.handler];
    let plugin_path = |field: &str| {
        let at = config.plugins.iter().position(|p| p.name == handler.name).unwrap_or(config.handler);
        join_path(prefix, &format!("plugins[{at}].parameters.{field}"))
    };
    let (primary, prefill) = match &handler.kind {
        PluginKind::DisaggProfileHandler(h) => {
            let [decode, prefill, encode] = h.stages.profiles;
            if let (Some(profile), Some(decider)) = (encode, h.stages.deciders[1]) {
                let d = &config.plugins[decider];
                return Err(FieldError::new(
                    plugin_path("deciders.encode"),
                    &d.name,
                    format!(
                        "the encode decider '{}' (type: {}) can send requests through the encode profile '{}'; \
                         encode/prefill/decode disaggregation is not modelled (drop the encode decider)",
                        d.name, d.type_name, config.profiles[profile].name
                    ),
                ));
            }
            let runs = match (prefill, h.stages.stage_order) {
                (Some(_), StageOrder::PrefillFirst) => true,
                (Some(_), StageOrder::DecodeFirst) => {
                    h.stages.deciders[0].is_some_and(|d| match &config.plugins[d].kind {
                        PluginKind::PrefixBasedPdDecider(d) => d.enabled(),
                        _ => true,
                    })
                }
                (None, _) => false,
            };
            (decode, prefill.filter(|_| runs))
        }
        _ => (Some(0), None),
    };
    let Some(primary) = primary else { return Ok(()) };
    // Roles the decode profile does not filter.
    for (i, pool) in pools.iter().enumerate() {
        let Some(role) = pool.role().filter(|r| NOT_DECODE_ROLES.contains(r)) else { continue };
        if keeps(config, primary, pool.labels) {
            let profile = &config.profiles[primary].name;
            return Err(FieldError::new(
                format!("cluster.pools[{i}].labels.{ROLE_LABEL}"),
                role,
                format!(
                    "a {role} pool the router's profile '{profile}' (the one every request runs) can route whole requests to: \
                     none of its label filters excludes it (add decode-filter to the profile, or drop the pool)"
                ),
            ));
        }
    }
    let Some(prefill) = prefill else { return Ok(()) };
    // NIXL on both sides of every pair the router can pick.
    let prefill_name = &config.profiles[prefill].name;
    let decode_name = &config.profiles[primary].name;
    for (i, pool) in pools.iter().enumerate() {
        if pool.nixl {
            continue;
        }
        let (side, profile) = if keeps(config, prefill, pool.labels) {
            ("prefill", prefill_name)
        } else if keeps(config, primary, pool.labels) {
            ("decode", decode_name)
        } else {
            continue;
        };
        let other = if side == "prefill" { "decode" } else { "prefill" };
        return Err(FieldError::new(
            format!("cluster.pools[{i}].engine.args.kv_transfer_config"),
            "absent (no NixlConnector)",
            format!(
                "the router's {side} profile '{profile}' can pick this pool for the {side} side of a disaggregated request, \
                 so it needs kv_transfer_config with kv_connector: NixlConnector like the {other} side: without it the \
                 KV cache cannot move between the two (give it NixlConnector, or exclude it from the profile by label)"
            ),
        ));
    }
    Ok(())
}
