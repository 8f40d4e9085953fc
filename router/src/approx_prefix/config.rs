//! The approx producer's parameters, their defaults and the factory's checks.
//!
//! Upstream: `approximateprefix/types.go::defaultConfig` (names and defaults),
//! `plugin.go::ApproxPrefixCacheFactory` (decode, then the deprecated `blockSize` mapping) and
//! `plugin.go::newDataProducer` (the two refusals and the block-size-floor warning). The fields
//! keep Go's `int` range (`i64`) because upstream gives meaning to values a narrower type could
//! not hold: a non-positive `blockSizeTokens` is valid under autoTune (the floor replaces it), and a
//! negative `maxPrefixBlocksToMatch` is accepted and hashes nothing.

use blis_kernel::SimDuration;
use serde::Deserialize;
use serde_json::Value;

use crate::params::{self, ParamError};

/// The plugin type name upstream registers.
pub const APPROX_PREFIX_PRODUCER_TYPE: &str = "approx-prefix-cache-producer";

/// Default `blockSizeTokens` (vLLM's default block size; the floor raises it to 64).
pub const DEFAULT_BLOCK_SIZE_TOKENS: i64 = 16;
/// Default `maxPrefixBlocksToMatch` (consulted only when `maxPrefixTokensToMatch` is 0).
pub const DEFAULT_MAX_PREFIX_BLOCKS: i64 = 2048;
/// Default `maxPrefixTokensToMatch` (128K tokens).
pub const DEFAULT_MAX_PREFIX_TOKENS: i64 = 131_072;
/// Default `lruCapacityPerServer`, and the capacity used when no other source gives one.
pub const DEFAULT_LRU_CAPACITY_PER_SERVER: i64 = 31_250;
/// The floor upstream applies to every block size at request time (`minBlockSizeTokens`, #1158).
pub const MIN_BLOCK_SIZE_TOKENS: u32 = 64;
/// How often upstream drops endpoints that left the pool from the index
/// (`podActiveCheckInterval`, 2 min, a wall-clock ticker started with the plugin): the caller's
/// sweep calls [`super::ApproxPrefixProducer::remove_endpoint`] on that cadence.
pub const INACTIVE_ENDPOINT_SWEEP: SimDuration = SimDuration::from_micros(120_000_000);

/// Largest block size or LRU capacity we accept: block sizes are `u32` token counts and LRU
/// slots are `u32` indices (4.3 billion entries would need well over 100 GiB of index).
const MAX_U32_PARAM: i64 = u32::MAX as i64;

/// The approx producer's parameters after upstream's deprecation mapping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApproxPrefixConfig {
    /// `autoTune`: take the block size from the first candidate's `CacheBlockSize` and an LRU's
    /// capacity from its endpoint's `CacheNumBlocks` when those metrics are positive.
    pub auto_tune: bool,
    /// `blockSizeTokens`: the block size when autoTune has no metric (always floored to 64).
    pub block_size_tokens: i64,
    /// `maxPrefixBlocksToMatch` (deprecated): the per-prompt block cap when the token cap is 0.
    pub max_prefix_blocks_to_match: i64,
    /// `maxPrefixTokensToMatch`: when > 0 the per-prompt block cap is ⌊this / block size⌋.
    pub max_prefix_tokens_to_match: i64,
    /// `lruCapacityPerServer`: a new LRU's capacity when autoTune gives none (≤ 0 → 31250).
    pub lru_capacity_per_server: i64,
}

impl Default for ApproxPrefixConfig {
    fn default() -> Self {
        ApproxPrefixConfig {
            auto_tune: true,
            block_size_tokens: DEFAULT_BLOCK_SIZE_TOKENS,
            max_prefix_blocks_to_match: DEFAULT_MAX_PREFIX_BLOCKS,
            max_prefix_tokens_to_match: DEFAULT_MAX_PREFIX_TOKENS,
            lru_capacity_per_server: DEFAULT_LRU_CAPACITY_PER_SERVER,
        }
    }
}

/// The parameters as written, with the deprecated `blockSize` still separate.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct RawParams {
    auto_tune: bool,
    block_size_tokens: i64,
    block_size: i64,
    max_prefix_blocks_to_match: i64,
    max_prefix_tokens_to_match: i64,
    lru_capacity_per_server: i64,
}

impl Default for RawParams {
    fn default() -> Self {
        let d = ApproxPrefixConfig::default();
        RawParams {
            auto_tune: d.auto_tune,
            block_size_tokens: d.block_size_tokens,
            block_size: 0,
            max_prefix_blocks_to_match: d.max_prefix_blocks_to_match,
            max_prefix_tokens_to_match: d.max_prefix_tokens_to_match,
            lru_capacity_per_server: d.lru_capacity_per_server,
        }
    }
}

impl ApproxPrefixConfig {
    /// Build the config from a plugin's `parameters` as upstream's factory does, returning the
    /// warnings upstream logs (deprecated `blockSize`, block size below the 64 floor).
    pub fn from_params(params: Option<&Value>) -> Result<(ApproxPrefixConfig, Vec<String>), ParamError> {
        let raw: RawParams = params::decode(params).map_err(|e| ParamError {
            reason: format!("failed to unmarshal prefix cache parameters: {}", e.reason),
            ..e
        })?;
        if raw.block_size > MAX_U32_PARAM {
            return Err(refuse(
                "blockSize",
                raw.block_size,
                format!("must be at most {MAX_U32_PARAM} tokens"),
            ));
        }
        let mut warnings = Vec::new();
        let mut config = ApproxPrefixConfig {
            auto_tune: raw.auto_tune,
            block_size_tokens: raw.block_size_tokens,
            max_prefix_blocks_to_match: raw.max_prefix_blocks_to_match,
            max_prefix_tokens_to_match: raw.max_prefix_tokens_to_match,
            lru_capacity_per_server: raw.lru_capacity_per_server,
        };
        if raw.block_size > 0 {
            warnings.push(format!(
                "'blockSize' is deprecated; use 'blockSizeTokens' instead (blockSize: {})",
                raw.block_size
            ));
            // Mapped only when blockSizeTokens is at its default, so an explicit 16 loses too.
            if config.block_size_tokens == DEFAULT_BLOCK_SIZE_TOKENS {
                config.block_size_tokens = raw.block_size;
            }
        }
        warnings.extend(config.validate()?);
        Ok((config, warnings))
    }

    /// Upstream's `newDataProducer` checks, returning its start-up warning when the configured
    /// block size is below the floor (the default 16 is).
    pub fn validate(&self) -> Result<Vec<String>, ParamError> {
        if !self.auto_tune && self.block_size_tokens <= 0 {
            return Err(refuse(
                "blockSizeTokens",
                self.block_size_tokens,
                format!(
                    "invalid configuration: BlockSizeTokens must be > 0 when AutoTune is disabled (current value: {})",
                    self.block_size_tokens
                ),
            ));
        }
        if self.max_prefix_tokens_to_match < 0 {
            return Err(refuse(
                "maxPrefixTokensToMatch",
                self.max_prefix_tokens_to_match,
                format!(
                    "invalid configuration: MaxPrefixTokensToMatch must be >= 0 (current value: {})",
                    self.max_prefix_tokens_to_match
                ),
            ));
        }
        if self.block_size_tokens > MAX_U32_PARAM {
            return Err(refuse(
                "blockSizeTokens",
                self.block_size_tokens,
                format!("must be at most {MAX_U32_PARAM} tokens"),
            ));
        }
        if self.lru_capacity_per_server > MAX_U32_PARAM {
            return Err(refuse(
                "lruCapacityPerServer",
                self.lru_capacity_per_server,
                format!("must be at most {MAX_U32_PARAM} entries per endpoint"),
            ));
        }
        let mut warnings = Vec::new();
        if self.block_size_tokens > 0 && self.block_size_tokens < i64::from(MIN_BLOCK_SIZE_TOKENS) {
            warnings.push(format!(
                "WARNING: configured blockSizeTokens is below the recommended minimum, overriding it. \
                 (blockSizeTokens: {}, minimum: {MIN_BLOCK_SIZE_TOKENS}, issue: https://github.com/llm-d/llm-d-router/issues/1158)",
                self.block_size_tokens
            ));
        }
        Ok(warnings)
    }
}

fn refuse(path: &str, value: i64, reason: String) -> ParamError {
    ParamError { path: path.to_owned(), value: Some(value.to_string()), reason }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn config(params: Value) -> Result<(ApproxPrefixConfig, Vec<String>), ParamError> {
        ApproxPrefixConfig::from_params(Some(&params))
    }

    /// Defaults as `types.go::defaultConfig`; the default 16 draws the floor warning.
    #[test]
    fn absent_parameters_give_upstreams_defaults_and_the_floor_warning() {
        let (c, warnings) = ApproxPrefixConfig::from_params(None).unwrap();
        assert_eq!(
            c,
            ApproxPrefixConfig {
                auto_tune: true,
                block_size_tokens: 16,
                max_prefix_blocks_to_match: 2048,
                max_prefix_tokens_to_match: 131_072,
                lru_capacity_per_server: 31_250,
            }
        );
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("below the recommended minimum"), "{warnings:?}");
        assert!(warnings[0].contains("blockSizeTokens: 16, minimum: 64"), "{warnings:?}");
    }

    /// upstream: approximateprefix/plugin_test.go::TestFactory_RejectsUnknownField
    #[test]
    fn factory_rejects_unknown_field() {
        let e = config(json!({"unknownField": "value"})).unwrap_err();
        assert_eq!(e.path, "unknownField");
        assert_eq!(
            e.reason,
            "failed to unmarshal prefix cache parameters: json: unknown field \"unknownField\""
        );
        assert!(e.to_string().contains("unknownField"), "{e}");
    }

    /// upstream: approximateprefix/plugin_test.go::TestFactory_DeprecatedBlockSizeMapped
    #[test]
    fn factory_deprecated_block_size_mapped() {
        let (c, warnings) = config(json!({"autoTune": false, "blockSize": 24})).unwrap();
        assert_eq!(c.block_size_tokens, 24);
        assert!(!c.auto_tune);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert_eq!(warnings[0], "'blockSize' is deprecated; use 'blockSizeTokens' instead (blockSize: 24)");
        assert!(warnings[1].contains("blockSizeTokens: 24, minimum: 64"), "{warnings:?}");
    }

    /// The alias maps only while blockSizeTokens is at its default; a non-positive alias is
    /// ignored without a warning (`ApproxPrefixCacheFactory` tests `BlockSize > 0`).
    #[test]
    fn deprecated_block_size_loses_to_an_explicit_block_size_tokens() {
        let (c, warnings) = config(json!({"blockSize": 24, "blockSizeTokens": 128})).unwrap();
        assert_eq!(c.block_size_tokens, 128);
        assert_eq!(
            warnings,
            vec!["'blockSize' is deprecated; use 'blockSizeTokens' instead (blockSize: 24)"]
        );
        // An explicit 16 cannot be told from the default, so the alias wins.
        let (c, _) = config(json!({"blockSize": 128, "blockSizeTokens": 16})).unwrap();
        assert_eq!(c.block_size_tokens, 128);
        let (c, warnings) = config(json!({"blockSize": -3, "blockSizeTokens": 100})).unwrap();
        assert_eq!(c.block_size_tokens, 100);
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    /// upstream: approximateprefix/plugin_test.go::TestDataProducerValidation (the configs
    /// written as parameters; each Go literal's omitted fields are Go zero values).
    #[test]
    fn data_producer_validation() {
        for valid in [
            json!({"autoTune": false, "blockSizeTokens": 1}),
            json!({"autoTune": false, "blockSize": 1, "blockSizeTokens": 1}),
            json!({"autoTune": true, "blockSizeTokens": 0}),
        ] {
            assert!(config(valid.clone()).is_ok(), "{valid}");
        }
        let e = config(json!({"autoTune": false, "blockSize": 1, "blockSizeTokens": 0})).unwrap_err();
        assert_eq!(e.path, "blockSizeTokens");
        let e = config(json!({"autoTune": false, "blockSizeTokens": 0})).unwrap_err();
        assert_eq!(e.path, "blockSizeTokens");
        assert_eq!(e.value.as_deref(), Some("0"));
        assert_eq!(
            e.reason,
            "invalid configuration: BlockSizeTokens must be > 0 when AutoTune is disabled (current value: 0)"
        );
    }

    /// upstream: approximateprefix/plugin_test.go::TestNewDataProducer_AcceptsLowManualBlockSize
    #[test]
    fn new_data_producer_accepts_low_manual_block_size() {
        let (c, warnings) = config(json!({"autoTune": false, "blockSizeTokens": 32})).unwrap();
        assert_eq!(c.block_size_tokens, 32);
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("blockSizeTokens: 32"), "{warnings:?}");
    }

    #[test]
    fn negative_token_cap_is_refused_in_upstreams_words() {
        let e = config(json!({"maxPrefixTokensToMatch": -1})).unwrap_err();
        assert_eq!(e.path, "maxPrefixTokensToMatch");
        assert_eq!(
            e.reason,
            "invalid configuration: MaxPrefixTokensToMatch must be >= 0 (current value: -1)"
        );
    }

    /// Upstream accepts these silently; they are part of its behaviour, so we do too.
    #[test]
    fn values_upstream_leaves_unchecked_are_accepted() {
        let (c, warnings) =
            config(json!({"maxPrefixBlocksToMatch": -5, "lruCapacityPerServer": -1, "blockSizeTokens": 64}))
                .unwrap();
        assert_eq!(c.max_prefix_blocks_to_match, -5);
        assert_eq!(c.lru_capacity_per_server, -1);
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn values_beyond_u32_are_refused_with_the_bound() {
        let e = config(json!({"blockSizeTokens": 5_000_000_000_i64})).unwrap_err();
        assert_eq!((e.path.as_str(), e.value.as_deref()), ("blockSizeTokens", Some("5000000000")));
        assert_eq!(e.reason, "must be at most 4294967295 tokens");
        let e = config(json!({"blockSize": 5_000_000_000_i64})).unwrap_err();
        assert_eq!(e.path, "blockSize");
        let e = config(json!({"lruCapacityPerServer": 5_000_000_000_i64})).unwrap_err();
        assert_eq!(e.path, "lruCapacityPerServer");
    }

    #[test]
    fn wrong_types_are_refused_with_the_factorys_prefix() {
        let e = config(json!({"blockSizeTokens": "64"})).unwrap_err();
        assert_eq!(e.path, "blockSizeTokens");
        assert!(e.reason.starts_with("failed to unmarshal prefix cache parameters: json: "), "{e}");
        let e = config(json!({"autoTune": 1})).unwrap_err();
        assert_eq!(e.path, "autoTune");
    }
}
