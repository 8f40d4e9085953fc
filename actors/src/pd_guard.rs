//! Refusing routes to prefill pools until the engines can execute P/D.
//!
//! llm-d's router selects P/D pairs (`blis_router::plugins::disagg`), but executing them — the
//! decode sidecar's prefill leg to the prefill engine, the KV transfer, the decode engine
//! resuming from remote KV — comes with a later issue. Until then a scenario whose router would
//! send work to a prefill (or encode) pool is refused by name rather than run as if the pool
//! were an ordinary one: a `disagg-profile-handler` that can run its prefill or encode profile,
//! or a pool labelled with a non-decode `llm-d.ai/role` that the profile every request runs
//! does not filter out by label.

use std::collections::BTreeMap;

use blis_contracts::{FieldError, join_path};
use blis_router::RouterConfig;
use blis_router::plugins::PluginKind;
use blis_router::plugins::disagg::StageOrder;
use blis_router::plugins::filters::ROLE_LABEL;

/// Role values of pools that only prefill (or encode) for a decode pod.
const NOT_DECODE_ROLES: [&str; 3] = ["prefill", "encode-prefill", "encode"];

const LATER: &str = "P/D execution on the engines (the decode sidecar's prefill leg and the KV transfer) comes with a later issue";

/// Refuse `config` (loaded from `prefix`) over pools with `pool_labels` if it would route to a
/// prefill or encode pool.
pub fn refuse_prefill_routes(
    config: &RouterConfig,
    pool_labels: &[&BTreeMap<String, String>],
    prefix: &str,
) -> Result<(), FieldError> {
    let handler = &config.plugins[config.handler];
    let plugin_path = |field: &str| {
        let at = config.plugins.iter().position(|p| p.name == handler.name).unwrap_or(config.handler);
        join_path(prefix, &format!("plugins[{at}].parameters.{field}"))
    };
    let primary = match &handler.kind {
        PluginKind::DisaggProfileHandler(h) => {
            let [decode, prefill, encode] = h.stages.profiles;
            if h.stages.stage_order == StageOrder::PrefillFirst
                && let Some(p) = prefill
            {
                return Err(FieldError::new(
                    plugin_path("stageOrder"),
                    "prefill-first",
                    format!(
                        "the prefill-first stage order runs the prefill profile '{}' for every request; {LATER}",
                        config.profiles[p].name
                    ),
                ));
            }
            for (k, (stage, profile)) in [("prefill", prefill), ("encode", encode)].into_iter().enumerate() {
                let (Some(profile), Some(decider)) = (profile, h.stages.deciders[k]) else { continue };
                let enabled = match &config.plugins[decider].kind {
                    PluginKind::PrefixBasedPdDecider(d) => d.enabled(),
                    _ => true,
                };
                if enabled {
                    let d = &config.plugins[decider];
                    return Err(FieldError::new(
                        plugin_path(&format!("deciders.{stage}")),
                        &d.name,
                        format!(
                            "the {stage} decider '{}' (type: {}) can send requests through the {stage} profile '{}'; {LATER}",
                            d.name, d.type_name, config.profiles[profile].name
                        ),
                    ));
                }
            }
            decode
        }
        _ => Some(0),
    };
    let Some(primary) = primary else { return Ok(()) };
    let profile = &config.profiles[primary];
    for (i, labels) in pool_labels.iter().enumerate() {
        let Some(role) = labels.get(ROLE_LABEL).filter(|r| NOT_DECODE_ROLES.contains(&r.as_str())) else {
            continue;
        };
        let excluded = profile.filters.iter().any(|&f| match &config.plugins[f].kind {
            PluginKind::ByLabelFilter(filter) => !filter.keeps_labels(labels),
            PluginKind::LabelSelectorFilter(selector) => !selector.matches(labels),
            _ => false,
        });
        if !excluded {
            return Err(FieldError::new(
                format!("cluster.pools[{i}].labels.{ROLE_LABEL}"),
                role,
                format!(
                    "a {role} pool the router's profile '{}' can route to (none of its label filters excludes it); \
                     {LATER} (add decode-filter to the profile, or drop the pool)",
                    profile.name
                ),
            ));
        }
    }
    Ok(())
}
