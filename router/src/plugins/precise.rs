//! The precise prefix-cache producer and the deprecated precise scorer, adapted to the cycle.
//!
//! The index, keys and scoring live in [`crate::precise_prefix`]; this module wires them to the
//! plugin table. `precise-prefix-cache-producer` writes match info on every candidate from the
//! KV events the engines sent; a `prefix-cache-scorer` pointed at it
//! (`prefixMatchInfoProducerName`) reads it. The deprecated `precise-prefix-cache-scorer`
//! (`scheduling/scorer/preciseprefixcache/precise_prefix_cache.go::PluginFactory`) becomes a plain
//! `prefix-cache-scorer` reading the configured producer when there is one, is refused when there
//! are two, and otherwise hosts its own producer under its own name. Upstream decides "there is
//! one" by the plugins instantiated before it, an order that among independent plugins follows Go
//! map iteration ([Q]); we count every producer in the config, as if they came first.

use serde_json::Value;

use super::prefix::Scorer as PrefixScorer;
use super::{Built, PluginKind};
use crate::approx_prefix::PrefixScorerConfig;
use crate::params::ParamError;
use crate::precise_prefix::{
    PRECISE_PRODUCER_TYPE, PRECISE_SCORER_TYPE, PreciseConfig, PreciseMatch, PrecisePrefixProducer,
};

/// `precise-prefix-cache-producer` with its per-request output buffer.
#[derive(Clone, Debug)]
pub struct Producer {
    /// The index and its settings.
    pub inner: PrecisePrefixProducer,
    /// The current request's match per candidate.
    pub matches: Vec<PreciseMatch>,
}

impl Producer {
    fn new(params: Option<&Value>, type_name: &str) -> Result<(Producer, Vec<(String, String)>), ParamError> {
        let (config, inert) = PreciseConfig::from_params(params, type_name)?;
        Ok((Producer { inner: PrecisePrefixProducer::new(config), matches: Vec::new() }, inert))
    }

    pub(super) fn build(params: Option<&Value>) -> Result<Built, ParamError> {
        let (producer, inert) = Producer::new(params, PRECISE_PRODUCER_TYPE)?;
        Ok(Built { kind: PluginKind::PrecisePrefixProducer(Box::new(producer)), inert, warnings: Vec::new() })
    }
}

/// The deprecated `precise-prefix-cache-scorer` hosting its own producer.
#[derive(Clone, Debug)]
pub struct LegacyScorer {
    /// The hosted producer (its match info is keyed by the wrapper's name).
    pub producer: Producer,
    /// The inner `prefix-cache-scorer`, reading the hosted producer.
    pub scorer: PrefixScorer,
}

const DEPRECATION: &str = "DEPRECATION: precise-prefix-cache-scorer is deprecated; configure \
                           precise-prefix-cache-producer + prefix-cache-scorer with prefixMatchInfoProducerName: \
                           precise-prefix-cache-producer";

/// Build the deprecated wrapper named `name`, given the names of the config's
/// `precise-prefix-cache-producer` instances.
pub fn build_legacy_scorer(
    name: &str,
    params: Option<&Value>,
    producers: &[&str],
) -> Result<Built, ParamError> {
    let mut warnings = vec![DEPRECATION.to_owned()];
    match producers {
        [] => {
            let (producer, inert) = Producer::new(params, PRECISE_SCORER_TYPE)?;
            let config = PrefixScorerConfig {
                prefix_match_info_producer_name: name.to_owned(),
                ..PrefixScorerConfig::default()
            };
            let scorer = PrefixScorer { config, producer: None };
            Ok(Built {
                kind: PluginKind::PrecisePrefixScorer(Box::new(LegacyScorer { producer, scorer })),
                inert,
                warnings,
            })
        }
        [existing] => {
            warnings.push(format!(
                "deferring precise-prefix-cache-scorer to existing precise-prefix-cache-producer (producer \
                 {existing}/{PRECISE_PRODUCER_TYPE})"
            ));
            let inert = params
                .and_then(Value::as_object)
                .map(|m| {
                    m.keys()
                        .map(|k| {
                            (k.clone(), "ignored: the scorer defers to the configured producer".to_owned())
                        })
                        .collect()
                })
                .unwrap_or_default();
            let config = PrefixScorerConfig {
                prefix_match_info_producer_name: (*existing).to_owned(),
                ..PrefixScorerConfig::default()
            };
            Ok(Built {
                kind: PluginKind::PrefixCacheScorer(PrefixScorer { config, producer: None }),
                inert,
                warnings,
            })
        }
        [first, second, ..] => Err(ParamError {
            path: String::new(),
            value: None,
            reason: format!(
                "multiple precise-prefix-cache-producer instances configured ({first}/{PRECISE_PRODUCER_TYPE}, \
                 {second}/{PRECISE_PRODUCER_TYPE}); precise-prefix-cache-scorer cannot disambiguate — configure \
                 prefix-cache-scorer directly with an explicit prefixMatchInfoProducerName"
            ),
        }),
    }
}
