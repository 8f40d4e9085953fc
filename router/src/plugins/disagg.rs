//! P/D selection: `disagg-profile-handler` and its deciders `prefix-based-pd-decider` and
//! `always-disagg-pd-decider` (`scheduling/profilehandler/disagg/`).
//!
//! The handler runs the decode profile, then (decode-first, the default) asks the prefill
//! decider about the decode winner and runs the prefill profile when it says yes; prefill-first
//! runs the prefill profile unconditionally, then decode. The encode stage works the same way
//! with its own decider. The decode result is primary; the pre-request hook writes the headers
//! the decode sidecar reads (`x-prefiller-host-port`, `x-encoder-hosts-ports`). The prefix-based
//! decider disaggregates when the prompt's tokens not cached at the decode winner reach
//! `nonCachedTokens` (and the prompt reaches `promptTokens`, when set).

use serde::Deserialize;
use serde_json::Value;

use super::{Built, PluginKind};
use crate::approx_prefix::PrefixMatchInfo;
use crate::config::Profile;
use crate::cycle::Targets;
use crate::endpoint::EndpointIndex;
use crate::params::{ParamError, decode};

/// The handler's registered type name.
pub const HANDLER_TYPE: &str = "disagg-profile-handler";
/// The header naming the prefill endpoint for the decode sidecar.
pub const PREFILL_HEADER: &str = "x-prefiller-host-port";
/// The header naming the encode endpoints.
pub const ENCODE_HEADER: &str = "x-encoder-hosts-ports";
/// The port written beside an endpoint's address in the sidecar headers. Simulated endpoints
/// have no network address: the endpoint's name stands for it, on vLLM's serving port.
pub const MODEL_SERVER_PORT: &str = "8000";

/// The order the stages run in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StageOrder {
    /// Decode, then encode, then prefill (each optional after decode).
    DecodeFirst,
    /// Prefill (whenever its profile exists), then encode, then decode.
    PrefillFirst,
}

impl StageOrder {
    /// `ParseStageOrder`: case, `-` and `_` ignored; `decode`/`prefill` accepted; empty is
    /// decode-first.
    pub fn parse(text: &str) -> Result<StageOrder, String> {
        match text.replace(['-', '_'], "").to_lowercase().as_str() {
            "" | "decodefirst" | "decode" => Ok(StageOrder::DecodeFirst),
            "prefillfirst" | "prefill" => Ok(StageOrder::PrefillFirst),
            _ => Err(format!("invalid stage order {text:?}, must be \"decode-first\" or \"prefill-first\"")),
        }
    }

    /// Upstream's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            StageOrder::DecodeFirst => "decode-first",
            StageOrder::PrefillFirst => "prefill-first",
        }
    }
}

/// A profile's outcome within one cycle: not run yet (`None`), run and failed or skipped
/// (`Some(None)`), or run with its targets.
pub type ProfileRun = Option<Option<Targets>>;

/// The stage a decider is asked about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Whether to run the prefill profile.
    Prefill,
    /// Whether to run the encode profile.
    Encode,
}

/// `disagg-profile-handler`.
#[derive(Clone, Debug, PartialEq)]
pub struct DisaggHandler {
    /// Profile names: decode, prefill, encode.
    pub profile_names: [String; 3],
    /// The decider plugin names for prefill and encode (empty: that stage never runs).
    pub decider_names: [String; 2],
    /// The stage machine, over resolved indexes.
    pub stages: Stages,
}

/// The handler's stage machine: the order, and the profiles and deciders by index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stages {
    /// The stage order.
    pub stage_order: StageOrder,
    /// The decode, prefill and encode profiles' indexes (`None`: no such profile).
    pub profiles: [Option<usize>; 3],
    /// The prefill and encode deciders' plugin indexes (`None`: that stage never runs).
    pub deciders: [Option<usize>; 2],
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct Nested {
    stage_order: String,
    profiles: NestedProfiles,
    deciders: NestedDeciders,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct NestedProfiles {
    decode: String,
    prefill: String,
    encode: String,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct NestedDeciders {
    prefill: String,
    encode: String,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct Legacy {
    stage_order: String,
    decode_profile: String,
    prefill_profile: String,
    encode_profile: String,
    prefill_decider_plugin_name: String,
    encode_decider_plugin_name: String,
    decider_plugin_name: String,
}

impl DisaggHandler {
    /// `DisaggProfileHandlerConfigParser`: the nested form strictly, else the deprecated flat
    /// form strictly (with its deprecation lines), else both errors; then the stage order and
    /// the profile defaults. Returns the handler (unresolved) and the lines upstream logs.
    pub fn parse(params: Option<&Value>) -> Result<(DisaggHandler, Vec<String>), ParamError> {
        let mut warnings = Vec::new();
        let nested = match decode::<Nested>(params) {
            Ok(nested) => nested,
            Err(new) => {
                let legacy: Legacy = decode(params).map_err(|old| ParamError {
                    path: new.path.clone(),
                    value: new.value.clone(),
                    reason: format!(
                        "failed to parse parameters of the disagg-profile-handler: nested schema error: {}; legacy \
                         schema error: {} (use one format exclusively: either nested profiles/deciders or the \
                         deprecated flat fields)",
                        new.reason, old.reason
                    ),
                })?;
                warnings.push(
                    "Deprecated: using flat parameter format, migrate to nested profiles/deciders format"
                        .to_owned(),
                );
                legacy.into_nested(&mut warnings)
            }
        };
        let stage_order = StageOrder::parse(&nested.stage_order)
            .map_err(|why| ParamError::invalid(params, "stageOrder", why))?;
        if stage_order == StageOrder::PrefillFirst && !nested.deciders.prefill.is_empty() {
            return Err(ParamError::invalid(
                params,
                "deciders.prefill",
                "prefill decider is not supported in prefill-first stage order",
            ));
        }
        let or = |name: String, default: &str| if name.is_empty() { default.to_owned() } else { name };
        let handler = DisaggHandler {
            profile_names: [
                or(nested.profiles.decode, "decode"),
                or(nested.profiles.prefill, "prefill"),
                or(nested.profiles.encode, "encode"),
            ],
            decider_names: [nested.deciders.prefill, nested.deciders.encode],
            stages: Stages { stage_order, profiles: [None; 3], deciders: [None; 2] },
        };
        Ok((handler, warnings))
    }

    pub(super) fn build(params: Option<&Value>) -> Result<Built, ParamError> {
        let (handler, warnings) = Self::parse(params)?;
        let mut built = Built::plain(PluginKind::DisaggProfileHandler(Box::new(handler)));
        built.warnings = warnings;
        Ok(built)
    }

    /// The plugin names it depends on (its `pluginRef` fields), non-empty ones.
    pub fn dependencies(&self) -> impl Iterator<Item = &str> {
        self.decider_names.iter().map(String::as_str).filter(|n| !n.is_empty())
    }

    /// Point the handler at its profiles (by name) in `profiles`.
    pub fn resolve_profiles(&mut self, profiles: &[Profile]) {
        for (slot, name) in self.stages.profiles.iter_mut().zip(&self.profile_names) {
            *slot = profiles.iter().position(|p| p.name == *name);
        }
    }
}

impl Stages {
    /// `Pick`: the next profile to run given the results so far (`results[i]` for profile `i`),
    /// or `None` when done. `decide(stage, decider, decode winner)` asks a decider. A decider's
    /// "no" is recorded as a nil result so it is not asked again. (Upstream also publishes the
    /// earlier winner as the `peer-endpoint` attribute; only the topology plugins read it, and
    /// they are not modelled.)
    pub fn pick(
        &self,
        results: &mut [ProfileRun],
        decide: &mut dyn FnMut(Stage, usize, Option<EndpointIndex>) -> bool,
    ) -> Option<usize> {
        let [decode, prefill, encode] = self.profiles;
        let [prefill_decider, encode_decider] = self.deciders;
        match self.stage_order {
            StageOrder::DecodeFirst => {
                let d = decode?;
                let Some(decode_result) = &results[d] else { return Some(d) };
                let winner = decode_result.as_ref().and_then(|t| t.first().copied())?;
                if let Some(e) = encode
                    && results[e].is_none()
                {
                    if encode_decider.is_some_and(|x| decide(Stage::Encode, x, Some(winner))) {
                        return Some(e);
                    }
                    results[e] = Some(None);
                }
                if let Some(p) = prefill
                    && results[p].is_none()
                {
                    if prefill_decider.is_some_and(|x| decide(Stage::Prefill, x, Some(winner))) {
                        return Some(p);
                    }
                    results[p] = Some(None);
                }
                None
            }
            StageOrder::PrefillFirst => {
                if decode.is_some_and(|d| results[d].is_some()) {
                    return None;
                }
                if let Some(p) = prefill
                    && results[p].is_none()
                {
                    return Some(p);
                }
                if let Some(e) = encode
                    && results[e].is_none()
                {
                    if encode_decider.is_some_and(|x| decide(Stage::Encode, x, None)) {
                        return Some(e);
                    }
                    results[e] = Some(None);
                }
                decode
            }
        }
    }

    /// `ProcessResults`: the decode result must have a target ("failed to find available decode
    /// workers" otherwise); the result holds decode (primary), and prefill and encode when they
    /// ran (an encode result with no targets included).
    pub fn process_results(&self, results: &[ProfileRun]) -> Result<[Option<usize>; 3], &'static str> {
        let [decode, prefill, encode] = self.profiles;
        let ran = |p: Option<usize>| p.filter(|&p| matches!(results[p], Some(Some(_))));
        let d = decode
            .filter(|&d| matches!(&results[d], Some(Some(t)) if !t.is_empty()))
            .ok_or("failed to find available decode workers")?;
        Ok([Some(d), ran(prefill), ran(encode)])
    }
}

impl Legacy {
    fn into_nested(self, warnings: &mut Vec<String>) -> Nested {
        let mut n = Nested { stage_order: self.stage_order, ..Nested::default() };
        let mut take = |value: String, old: &str, new: &str, slot: &mut String| {
            if !value.is_empty() {
                warnings.push(format!("Deprecated parameter '{old}', use '{new}' instead"));
                *slot = value;
            }
        };
        take(self.decode_profile, "decodeProfile", "profiles.decode", &mut n.profiles.decode);
        take(self.prefill_profile, "prefillProfile", "profiles.prefill", &mut n.profiles.prefill);
        take(self.encode_profile, "encodeProfile", "profiles.encode", &mut n.profiles.encode);
        take(
            self.prefill_decider_plugin_name,
            "prefillDeciderPluginName",
            "deciders.prefill",
            &mut n.deciders.prefill,
        );
        if n.deciders.prefill.is_empty() {
            take(self.decider_plugin_name, "deciderPluginName", "deciders.prefill", &mut n.deciders.prefill);
        }
        take(
            self.encode_decider_plugin_name,
            "encodeDeciderPluginName",
            "deciders.encode",
            &mut n.deciders.encode,
        );
        n
    }
}

/// `prefix-based-pd-decider`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrefixDecider {
    /// Uncached prompt tokens at the decode winner from which prefill is disaggregated (0:
    /// never).
    pub non_cached_tokens: i64,
    /// Prompt tokens below which it never disaggregates (0: no such gate).
    pub prompt_tokens: i64,
    /// The producer writing the default approximate prefix key, resolved after loading.
    pub producer: Option<usize>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct DeciderParams {
    non_cached_tokens: i64,
    prompt_tokens: i64,
}

impl PrefixDecider {
    pub(super) fn build(params: Option<&Value>) -> Result<Built, ParamError> {
        let p: DeciderParams = decode(params).map_err(|mut e| {
            e.reason = format!("failed to parse prefix-based-pd-decider plugin config: {}", e.reason);
            e
        })?;
        let invalid = |path: &str, why: &str| {
            ParamError::invalid(
                params,
                path,
                format!("failed to create prefix-based-pd-decider plugin: {why}"),
            )
        };
        if p.non_cached_tokens < 0 {
            return Err(invalid(
                "nonCachedTokens",
                "nonCachedTokens parameter of prefix disaggregation decider cannot be negative",
            ));
        }
        if p.prompt_tokens < 0 {
            return Err(invalid(
                "promptTokens",
                "promptTokens parameter of prefix disaggregation decider cannot be negative",
            ));
        }
        let decider = PrefixDecider {
            non_cached_tokens: p.non_cached_tokens,
            prompt_tokens: p.prompt_tokens,
            producer: None,
        };
        let mut built = Built::plain(PluginKind::PrefixBasedPdDecider(decider));
        if p.non_cached_tokens == 0 {
            built.warnings.push("Prefix-based PD disabled (NonCachedTokens=0)".to_owned());
        }
        Ok(built)
    }

    /// Whether it can ever say yes.
    pub fn enabled(&self) -> bool {
        self.non_cached_tokens > 0
    }

    /// `disaggregate`: for a prompt of `input_tokens` tokens (0 without a tokenized prompt),
    /// the decode winner `endpoint` and the match info the default prefix producer wrote on
    /// it (its unweighted cached blocks: medium weights do not make a block less cached).
    pub fn disaggregate(
        &self,
        input_tokens: u64,
        endpoint: Option<EndpointIndex>,
        info: Option<PrefixMatchInfo>,
    ) -> bool {
        if self.non_cached_tokens == 0 || endpoint.is_none() {
            return false;
        }
        let input = i64::try_from(input_tokens).unwrap_or(i64::MAX);
        if self.prompt_tokens > 0 && input < self.prompt_tokens {
            return false;
        }
        if input < self.non_cached_tokens {
            return false;
        }
        let Some(info) = info else { return false };
        let cached = i64::try_from(info.cached_block_count)
            .unwrap_or(i64::MAX)
            .saturating_mul(i64::from(info.block_size_tokens));
        input.saturating_sub(cached) >= self.non_cached_tokens
    }
}
