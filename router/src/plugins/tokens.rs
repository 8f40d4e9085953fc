//! `token-producer`: the request's `TokenizedPrompt` (`dataproducer/tokenizer/`).
//!
//! blis-actor's requests are completions whose prompt is token ids, which every backend passes
//! through unchanged (the estimate backend's pre-tokenized path; the vLLM render endpoint returns
//! the ids it is given), so the backend chosen changes nothing here; its settings are validated
//! as upstream validates them and reported inert.

use serde::Deserialize;
use serde_json::Value;

use super::scorers::prefixed;
use super::{Built, PluginKind};
use crate::params::{ParamError, decode};

/// The registered type name.
pub const TYPE: &str = "token-producer";

/// A token producer (no state: the prompt ids pass through).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TokenProducer;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct Params {
    estimate: Option<Estimate>,
    vllm: Option<Value>,
    uds_tokenizer_config: Option<Value>,
    model_name: String,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct Estimate {
    image: Option<Value>,
    video: Option<Value>,
}

impl TokenProducer {
    pub(super) fn build(params: Option<&Value>) -> Result<Built, ParamError> {
        let p: Params = decode(params).map_err(|e| prefixed(e, TYPE, "plugin"))?;
        let invalid = |path: &str, why: &str| {
            ParamError::invalid(
                params,
                path,
                format!("invalid configuration for 'token-producer' plugin: {why}"),
            )
        };
        let vllm = p.vllm.is_some() || !p.model_name.is_empty();
        let backends = usize::from(p.estimate.is_some())
            + usize::from(vllm)
            + usize::from(p.uds_tokenizer_config.is_some());
        if backends > 1 {
            return Err(invalid("", "only one of 'estimate', 'vllm', or 'udsTokenizerConfig' may be set"));
        }
        if (p.vllm.is_some() || p.uds_tokenizer_config.is_some()) && p.model_name.is_empty() {
            return Err(invalid("modelName", "'modelName' must be specified"));
        }
        if let Some(estimate) = &p.estimate {
            let mode = |v: &Option<Value>, pointer: &str| {
                v.as_ref().and_then(|v| v.pointer(pointer)).and_then(Value::as_str).map(str::to_owned)
            };
            if let Some(m) = mode(&estimate.image, "/mode")
                && m != "dynamic"
                && m != "static"
            {
                return Err(invalid(
                    "estimate.image.mode",
                    "estimate.image.mode must be \"dynamic\" or \"static\"",
                ));
            }
            if let Some(m) = mode(&estimate.video, "/tokensPerFrame/mode")
                && m != "dynamic"
                && m != "static"
            {
                return Err(invalid(
                    "estimate.video.tokensPerFrame.mode",
                    "estimate.video.tokensPerFrame.mode must be \"dynamic\" or \"static\"",
                ));
            }
            if let Some(m) = mode(&estimate.video, "/frames/mode")
                && m != "sampled"
                && m != "strided"
            {
                return Err(invalid(
                    "estimate.video.frames.mode",
                    "estimate.video.frames.mode must be \"sampled\" or \"strided\"",
                ));
            }
        }
        let mut built = Built::plain(PluginKind::TokenProducer(TokenProducer));
        let why = "prompts are token ids, which every backend passes through unchanged";
        for (field, set) in [
            ("estimate", p.estimate.is_some()),
            ("vllm", p.vllm.is_some()),
            ("udsTokenizerConfig", p.uds_tokenizer_config.is_some()),
            ("modelName", !p.model_name.is_empty()),
        ] {
            if set {
                built.inert.push((field.to_owned(), why.to_owned()));
            }
        }
        Ok(built)
    }
}
