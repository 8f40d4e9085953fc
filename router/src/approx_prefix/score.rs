//! The `prefix-cache-scorer`: a candidate's score from its [`PrefixMatchInfo`].
//!
//! Upstream: `scheduling/scorer/prefix/plugin.go` (`PrefixCachePluginFactory`, `Score`). The score
//! is the matched fraction of the request's blocks, optionally blended with the matched length in
//! tokens against a scale: `w·min(1, m·b/scale)² + (1−w)·m/T`.

use serde::Deserialize;
use serde_json::Value;

use super::PrefixMatchInfo;
use super::config::APPROX_PREFIX_PRODUCER_TYPE;
use crate::params::{self, ParamError};

/// The plugin type name upstream registers.
pub const PREFIX_SCORER_TYPE: &str = "prefix-cache-scorer";
/// Default `matchLengthScaleTokens`.
pub const DEFAULT_MATCH_LENGTH_SCALE_TOKENS: i64 = 8192;

/// The scorer's parameters.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct PrefixScorerConfig {
    /// `prefixMatchInfoProducerName`: whose match info to read (empty: the approx producer's).
    pub prefix_match_info_producer_name: String,
    /// `matchLengthWeight` in [0, 1]: the share of the score given to match length.
    pub match_length_weight: f64,
    /// `matchLengthScaleTokens`: the match length, tokens, that earns the full length term.
    pub match_length_scale_tokens: i64,
}

impl Default for PrefixScorerConfig {
    fn default() -> Self {
        PrefixScorerConfig {
            prefix_match_info_producer_name: String::new(),
            match_length_weight: 0.0,
            match_length_scale_tokens: DEFAULT_MATCH_LENGTH_SCALE_TOKENS,
        }
    }
}

impl PrefixScorerConfig {
    /// Build the config from a plugin's `parameters` with upstream's factory checks.
    pub fn from_params(params: Option<&Value>) -> Result<PrefixScorerConfig, ParamError> {
        let config: PrefixScorerConfig = params::decode(params).map_err(|e| ParamError {
            reason: format!("failed to decode prefix cache scorer parameters: {}", e.reason),
            ..e
        })?;
        let weight = config.match_length_weight;
        if !(0.0..=1.0).contains(&weight) {
            return Err(ParamError {
                path: "matchLengthWeight".into(),
                value: Some(weight.to_string()),
                reason: format!("matchLengthWeight must be between 0.0 and 1.0, got {weight:.6}"),
            });
        }
        let scale = config.match_length_scale_tokens;
        if weight > 0.0 && scale <= 0 {
            return Err(ParamError {
                path: "matchLengthScaleTokens".into(),
                value: Some(scale.to_string()),
                reason: format!(
                    "matchLengthScaleTokens must be greater than 0 when matchLengthWeight is greater than 0, got {scale}"
                ),
            });
        }
        Ok(config)
    }

    /// The producer whose [`PrefixMatchInfo`] this scorer reads (an empty name means the approx
    /// producer, as upstream's `WithNonEmptyProducerName`).
    pub fn producer_name(&self) -> &str {
        if self.prefix_match_info_producer_name.is_empty() {
            APPROX_PREFIX_PRODUCER_TYPE
        } else {
            &self.prefix_match_info_producer_name
        }
    }

    /// The candidate's score: 0 without info or with no blocks (upstream logs an error there).
    pub fn score(&self, info: Option<&PrefixMatchInfo>) -> f64 {
        let Some(info) = info.filter(|i| i.total_blocks > 0) else { return 0.0 };
        let matched = info.match_blocks as f64;
        let ratio = matched / info.total_blocks as f64;
        let weight = self.match_length_weight;
        let length = if weight > 0.0 && info.block_size_tokens > 0 {
            let normalized = (matched * f64::from(info.block_size_tokens)
                / self.match_length_scale_tokens as f64)
                .min(1.0);
            normalized * normalized
        } else {
            0.0
        };
        weight * length + (1.0 - weight) * ratio
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn info(match_blocks: u64, total_blocks: u64, block_size_tokens: u32) -> PrefixMatchInfo {
        PrefixMatchInfo { match_blocks, total_blocks, block_size_tokens, cached_block_count: match_blocks }
    }

    /// upstream: scorer/prefix/plugin_test.go::TestPrefixPluginScore
    #[test]
    fn prefix_plugin_score() {
        let scorer = PrefixScorerConfig::default();
        assert_eq!(scorer.score(Some(&info(5, 10, 1))), 0.5);
        assert_eq!(scorer.score(Some(&info(2, 10, 1))), 0.2);
    }

    /// upstream: scorer/prefix/plugin_test.go::TestPrefixPluginScoreWithWeights
    #[test]
    fn prefix_plugin_score_with_weights() {
        let scorer = PrefixScorerConfig {
            match_length_weight: 0.5,
            match_length_scale_tokens: 100,
            ..Default::default()
        };
        assert!((scorer.score(Some(&info(5, 10, 1))) - 0.25125).abs() < 1e-6);
        assert!((scorer.score(Some(&info(50, 100, 1))) - 0.375).abs() < 1e-6);
    }

    /// Missing info and zero total blocks score 0; the length term saturates at the scale and is
    /// skipped for a zero block size.
    #[test]
    fn degenerate_inputs() {
        let scorer = PrefixScorerConfig {
            match_length_weight: 0.5,
            match_length_scale_tokens: 100,
            ..Default::default()
        };
        assert_eq!(scorer.score(None), 0.0);
        assert_eq!(scorer.score(Some(&info(0, 0, 64))), 0.0);
        assert_eq!(scorer.score(Some(&info(4, 4, 64))), 1.0);
        assert_eq!(scorer.score(Some(&info(2, 4, 0))), 0.25);
    }

    /// upstream: scorer/prefix/plugin_test.go::TestPrefixPluginFactoryValidation (every case)
    #[test]
    fn prefix_plugin_factory_validation() {
        let ok = |p: Value| PrefixScorerConfig::from_params(Some(&p)).unwrap();
        let err = |p: Value| PrefixScorerConfig::from_params(Some(&p)).unwrap_err();
        // "valid config with defaults"
        let c = ok(json!({}));
        assert_eq!((c.match_length_weight, c.match_length_scale_tokens), (0.0, 8192));
        // "valid config with custom values"
        let c = ok(json!({"matchLengthWeight": 0.5, "matchLengthScaleTokens": 100}));
        assert_eq!((c.match_length_weight, c.match_length_scale_tokens), (0.5, 100));
        // "invalid matchLengthWeight < 0"
        let e = err(json!({"matchLengthWeight": -0.1, "matchLengthScaleTokens": 100}));
        assert_eq!(e.path, "matchLengthWeight");
        assert_eq!(e.reason, "matchLengthWeight must be between 0.0 and 1.0, got -0.100000");
        // "invalid matchLengthWeight > 1"
        let e = err(json!({"matchLengthWeight": 1.1, "matchLengthScaleTokens": 100}));
        assert_eq!(e.reason, "matchLengthWeight must be between 0.0 and 1.0, got 1.100000");
        // "invalid matchLengthScaleTokens <= 0"
        let e = err(json!({"matchLengthWeight": 0.5, "matchLengthScaleTokens": 0}));
        assert_eq!(e.path, "matchLengthScaleTokens");
        assert_eq!(
            e.reason,
            "matchLengthScaleTokens must be greater than 0 when matchLengthWeight is greater than 0, got 0"
        );
        // "missing matchLengthScaleTokens when matchLengthWeight > 0 uses default"
        let c = ok(json!({"matchLengthWeight": 0.5}));
        assert_eq!((c.match_length_weight, c.match_length_scale_tokens), (0.5, 8192));
        // "zero matchLengthWeight doesn't require matchLengthScaleTokens"
        let c = ok(json!({"matchLengthWeight": 0.0}));
        assert_eq!((c.match_length_weight, c.match_length_scale_tokens), (0.0, 8192));
    }

    /// The factory's strict decoder refuses unknown fields; a zero weight leaves the scale
    /// unchecked, as upstream; the producer name defaults to the approx producer.
    #[test]
    fn strict_decoding_and_producer_name() {
        let e = PrefixScorerConfig::from_params(Some(&json!({"matchLengthWieght": 0.5}))).unwrap_err();
        assert_eq!(
            e.reason,
            "failed to decode prefix cache scorer parameters: json: unknown field \"matchLengthWieght\""
        );
        let c = PrefixScorerConfig::from_params(Some(&json!({"matchLengthScaleTokens": -4}))).unwrap();
        assert_eq!(c.match_length_scale_tokens, -4);
        assert_eq!(c.producer_name(), "approx-prefix-cache-producer");
        let c = PrefixScorerConfig::from_params(Some(&json!({"prefixMatchInfoProducerName": "precise"})))
            .unwrap();
        assert_eq!(c.producer_name(), "precise");
    }
}
