//! Pickers: the highest score with random tie-breaks, uniformly random, or weighted random
//! (`scheduling/picker/`).
//!
//! Upstream draws from one process-wide generator seeded from the wall clock; here every draw
//! comes from the router's `tie-break` substream, and candidates arrive in the router's fixed
//! endpoint order instead of Go map order.

use blis_kernel::Substream;
use serde::Deserialize;
use serde_json::Value;

use super::scorers::prefixed;
use super::{Built, PluginKind};
use crate::endpoint::EndpointIndex;
use crate::params::{ParamError, decode};

/// A picker and how many endpoints it returns.
#[derive(Clone, Debug, PartialEq)]
pub struct Picker {
    /// Which picking rule.
    pub rule: PickRule,
    /// How many targets it returns (`maxNumOfEndpoints`, at least 1).
    pub max_endpoints: usize,
}

/// The picking rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PickRule {
    /// `max-score-picker`: shuffle, then a stable sort by score, highest first.
    MaxScore,
    /// `random-picker`: shuffle.
    Random,
    /// `weighted-random-picker`: A-Res keys `u^(1/score)`, highest first.
    WeightedRandom,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct PickerParams {
    max_num_of_endpoints: i64,
}

impl Default for PickerParams {
    fn default() -> Self {
        PickerParams { max_num_of_endpoints: 1 }
    }
}

impl Picker {
    pub(super) fn build(type_name: &str, params: Option<&Value>) -> Result<Built, ParamError> {
        let p: PickerParams = decode(params).map_err(|e| prefixed(e, type_name, "picker"))?;
        let rule = match type_name {
            "max-score-picker" => PickRule::MaxScore,
            "random-picker" => PickRule::Random,
            _ => PickRule::WeightedRandom,
        };
        let max_endpoints = if p.max_num_of_endpoints <= 0 { 1 } else { p.max_num_of_endpoints as usize };
        Ok(Built::plain(PluginKind::Picker(Picker { rule, max_endpoints })))
    }

    /// Pick from `scored` (endpoint, total score), which it reorders; the targets are its first
    /// entries after the call, and their number is returned.
    pub fn pick(
        &self,
        scored: &mut [(EndpointIndex, f64)],
        rng: &mut Substream,
        keys: &mut Vec<f64>,
    ) -> usize {
        match self.rule {
            PickRule::MaxScore if self.max_endpoints == 1 => {
                // Upstream shuffles, then sorts by score, stably: the winner is a uniformly
                // random one of the highest scores. Drawn directly, with one draw.
                let best =
                    scored.iter().map(|&(_, s)| s).fold(f64::NEG_INFINITY, |a, b| if b > a { b } else { a });
                let ties = scored.iter().filter(|&&(_, s)| s == best).count();
                if ties == 0 {
                    // Every score is NaN: upstream's comparisons leave the shuffled order.
                    shuffle(scored, rng);
                } else {
                    let nth = rng.below(ties as u64) as usize;
                    let at = scored.iter().enumerate().filter(|(_, e)| e.1 == best).nth(nth).map(|(i, _)| i);
                    scored.swap(0, at.expect("the nth tie exists"));
                }
            }
            PickRule::MaxScore => {
                shuffle(scored, rng);
                // A stable sort on exact float order, highest first (NaN sorts as equal).
                scored.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap_or(std::cmp::Ordering::Equal));
            }
            PickRule::Random => shuffle(scored, rng),
            PickRule::WeightedRandom => {
                if !scored.iter().any(|&(_, s)| s > 0.0) {
                    shuffle(scored, rng);
                } else {
                    keys.clear();
                    for &(_, score) in scored.iter() {
                        keys.push(if score > 0.0 {
                            let u = rng.unit();
                            let u = if u == 0.0 { 1e-10 } else { u };
                            libm::pow(u, 1.0 / score)
                        } else {
                            0.0
                        });
                    }
                    // Sort entries by key, highest first; equal keys keep their order.
                    let mut order: Vec<usize> = (0..scored.len()).collect();
                    order
                        .sort_by(|&a, &b| keys[b].partial_cmp(&keys[a]).unwrap_or(std::cmp::Ordering::Equal));
                    let sorted: Vec<(EndpointIndex, f64)> = order.iter().map(|&i| scored[i]).collect();
                    scored.copy_from_slice(&sorted);
                }
            }
        }
        self.max_endpoints.min(scored.len())
    }
}

/// Fisher–Yates, as Go's `rand.Shuffle` walks it (from the end).
fn shuffle<T>(items: &mut [T], rng: &mut Substream) {
    for i in (1..items.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        items.swap(i, j);
    }
}
