//! The approximate prefix-cache producer and the prefix-cache scorer, adapted to the cycle.
//!
//! The index, hashing and match rules live in [`crate::approx_prefix`]; this module wires them to
//! the plugin table: the producer hashes the request once per cycle, writes match info on every
//! candidate, and learns the routing decision in its pre-request hook; the scorer turns match
//! info into a score.

use serde_json::Value;

use super::{Built, DataKey, DataType, PluginKind};
pub use crate::approx_prefix::PrefixMatchInfo;
use crate::approx_prefix::{ApproxPrefixConfig, ApproxPrefixProducer, PrefixScorerConfig, RequestHashes};
use crate::params::ParamError;

/// The producer's registered type name.
pub const PRODUCER_TYPE: &str = "approx-prefix-cache-producer";

/// `approx-prefix-cache-producer` with its per-request hash buffer.
#[derive(Clone, Debug)]
pub struct Producer {
    /// The index and its settings.
    pub inner: ApproxPrefixProducer,
    /// The current request's hashes (from `produce` to `pre_request`).
    pub hashes: RequestHashes,
}

impl Producer {
    pub(super) fn build(params: Option<&Value>) -> Result<Built, ParamError> {
        let (config, warnings) = ApproxPrefixConfig::from_params(params)?;
        let producer =
            Producer { inner: ApproxPrefixProducer::new(config), hashes: RequestHashes::default() };
        Ok(Built { kind: PluginKind::ApproxPrefixProducer(Box::new(producer)), inert: Vec::new(), warnings })
    }
}

/// `prefix-cache-scorer`: the share of the prompt's blocks an endpoint holds, optionally
/// blended with the matched length.
#[derive(Clone, Debug)]
pub struct Scorer {
    /// Its settings.
    pub config: PrefixScorerConfig,
    /// The producer it reads, resolved after loading.
    pub producer: Option<usize>,
}

impl Scorer {
    pub(super) fn build(params: Option<&Value>) -> Result<Built, ParamError> {
        let config = PrefixScorerConfig::from_params(params)?;
        Ok(Built {
            kind: PluginKind::PrefixCacheScorer(Scorer { config, producer: None }),
            inert: Vec::new(),
            warnings: Vec::new(),
        })
    }

    /// The key it requires.
    pub fn key(&self) -> DataKey {
        DataKey::new(DataType::PrefixCacheMatchInfo, self.config.producer_name())
    }

    /// The score of an endpoint with match info `info`.
    pub fn score(&self, info: Option<&PrefixMatchInfo>) -> f64 {
        self.config.score(info)
    }
}
