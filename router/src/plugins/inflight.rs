//! `inflight-load-producer`: the router's own count of requests and uncached prompt tokens it
//! has sent to each endpoint and not yet seen answered (`dataproducer/inflightload/`).
//!
//! Counters rise when a request is routed (for every profile's first target) and fall as its
//! response passes back: at the first chunk the prefill target is released and every other
//! target's tokens (or only the prefill target, when output tokens are estimated too); at the
//! end of the stream everything left. Releases never go below zero.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::{Built, DataKey, DataType, PluginKind};
use crate::endpoint::EndpointIndex;
use crate::params::{ParamError, decode};
use crate::plugins::prefix::PrefixMatchInfo;

/// The registered type name.
pub const TYPE: &str = "inflight-load-producer";

/// The producer's settings and live state.
#[derive(Clone, Debug, PartialEq)]
pub struct InFlightLoad {
    /// Add an estimate of the output to each request's tokens.
    pub add_estimated_output_tokens: bool,
    /// Output estimate as a multiple of the input.
    pub output_ratio: f64,
    /// An operator cap on the output estimate.
    pub max_estimated_output_tokens: Option<u64>,
    /// The prefix producer whose match info discounts cached tokens.
    pub prefix_producer_name: String,
    /// That producer's plugin index, resolved after loading.
    pub prefix_producer: Option<usize>,
    /// Per endpoint: (requests, tokens) in flight.
    counters: Vec<(u64, u64)>,
    /// Per request key: what it added where.
    held: BTreeMap<u64, Vec<Held>>,
}

/// What one request added on one endpoint for one profile.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Held {
    endpoint: EndpointIndex,
    prefill_profile: bool,
    tokens: u64,
    request_held: bool,
    tokens_held: bool,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct Params {
    add_estimated_output_tokens: bool,
    output_ratio: Option<f64>,
    max_estimated_output_tokens: Option<i64>,
    prefix_match_info_producer_name: String,
    sync_cross_replica_state: Option<bool>,
}

impl InFlightLoad {
    /// A producer with the release's defaults.
    pub fn new() -> InFlightLoad {
        InFlightLoad {
            add_estimated_output_tokens: false,
            output_ratio: 1.5,
            max_estimated_output_tokens: None,
            prefix_producer_name: String::new(),
            prefix_producer: None,
            counters: Vec::new(),
            held: BTreeMap::new(),
        }
    }

    pub(super) fn build(params: Option<&Value>) -> Result<Built, ParamError> {
        let p: Params = decode(params).map_err(|mut e| {
            e.reason = format!("failed to decode inflight-load-producer parameters: {}", e.reason);
            e
        })?;
        let mut producer = InFlightLoad::new();
        producer.add_estimated_output_tokens = p.add_estimated_output_tokens;
        if let Some(ratio) = p.output_ratio {
            if ratio < 0.0 || ratio.is_nan() {
                return Err(ParamError::invalid(
                    params,
                    "outputRatio",
                    format!("outputRatio must be non-negative, got {ratio}"),
                ));
            }
            producer.output_ratio = ratio;
        }
        if let Some(cap) = p.max_estimated_output_tokens {
            if cap < 0 {
                return Err(ParamError::invalid(
                    params,
                    "maxEstimatedOutputTokens",
                    format!("maxEstimatedOutputTokens must be non-negative, got {cap}"),
                ));
            }
            producer.max_estimated_output_tokens = Some(cap as u64);
        }
        producer.prefix_producer_name = p.prefix_match_info_producer_name;
        let mut built = Built::plain(PluginKind::InFlightLoadProducer(producer));
        if p.sync_cross_replica_state.is_some() {
            built.inert.push((
                "syncCrossReplicaState".to_owned(),
                "one router replica is simulated, so there is no cross-replica state".to_owned(),
            ));
        }
        Ok(built)
    }

    /// The optional prefix key it reads.
    pub fn prefix_key(&self) -> DataKey {
        DataKey::new(DataType::PrefixCacheMatchInfo, &self.prefix_producer_name)
    }

    /// Size the counters for `endpoints` endpoints (when the table is known).
    pub fn register_endpoints(&mut self, endpoints: usize) {
        self.counters.resize(endpoints, (0, 0));
    }

    /// (requests, tokens) in flight on `endpoint`.
    pub fn load(&self, endpoint: EndpointIndex) -> (u64, u64) {
        self.counters.get(endpoint as usize).copied().unwrap_or((0, 0))
    }

    /// The output estimate for `input` prompt tokens (`SimpleTokenEstimator.EstimateOutput`).
    pub fn estimate_output(&self, input: u64, client_max: Option<u64>) -> u64 {
        if input == 0 {
            return 0;
        }
        let mut estimate = (input as f64 * self.output_ratio).round() as u64;
        if let Some(cap) = client_max
            && cap < estimate
        {
            estimate = cap;
        }
        if let Some(cap) = self.max_estimated_output_tokens
            && cap < estimate
        {
            estimate = cap;
        }
        estimate
    }

    /// The request's tokens on an endpoint with match info `info` (`estimateRequestTokens`).
    pub fn estimate(&self, input: u64, info: Option<PrefixMatchInfo>, client_max: Option<u64>) -> u64 {
        let uncached = match info {
            Some(i) if i.block_size_tokens > 0 => {
                let b = u64::from(i.block_size_tokens);
                i.total_blocks.saturating_sub(i.match_blocks) * b + input.saturating_sub(i.total_blocks * b)
            }
            _ => input,
        };
        let output =
            if self.add_estimated_output_tokens { self.estimate_output(input, client_max) } else { 0 };
        uncached + output
    }

    /// A routed request: one request and its estimated tokens on each (target, is the prefill
    /// profile, tokens) (`PreRequest`).
    pub fn add(&mut self, key: u64, targets: &[(EndpointIndex, bool, u64)]) {
        let entries = self.held.entry(key).or_default();
        for &(endpoint, prefill_profile, tokens) in targets {
            let counter = &mut self.counters[endpoint as usize];
            counter.0 += 1;
            counter.1 += tokens;
            entries.push(Held { endpoint, prefill_profile, tokens, request_held: true, tokens_held: true });
        }
    }

    /// The response's first chunk passed back (`ResponseBody` with `StartOfStream`).
    pub fn first_chunk(&mut self, key: u64) {
        let add_output = self.add_estimated_output_tokens;
        let Some(entries) = self.held.get_mut(&key) else { return };
        for held in entries.iter_mut() {
            let counter = &mut self.counters[held.endpoint as usize];
            if held.prefill_profile {
                release(counter, held, true);
            } else if !add_output {
                release(counter, held, false);
            }
        }
    }

    /// The response ended, or the request was given up (`EndOfStream`, or its state reaped).
    pub fn end(&mut self, key: u64) {
        let Some(mut entries) = self.held.remove(&key) else { return };
        for held in &mut entries {
            release(&mut self.counters[held.endpoint as usize], held, true);
        }
    }
}

impl Default for InFlightLoad {
    fn default() -> Self {
        InFlightLoad::new()
    }
}

/// Release what `held` still holds: its tokens, and its request too when `request`.
fn release(counter: &mut (u64, u64), held: &mut Held, request: bool) {
    if held.tokens_held {
        counter.1 = counter.1.saturating_sub(held.tokens);
        held.tokens_held = false;
    }
    if request && held.request_held {
        counter.0 = counter.0.saturating_sub(1);
        held.request_held = false;
    }
}
