//! Scoring one prompt's lookup: the medium-weighted longest prefix, and the unweighted counts.
//!
//! Upstream: `pkg/kvcache/kvblock_scorer.go::LongestPrefixScorer.Score` (with `fillMaxWeights`)
//! and `preciseprefixcache/utils.go::matchedBlockCount`, `::matchedBlockCountByTier`. Upstream
//! keeps its active set in a Go map; every endpoint's score is accumulated on its own, in key
//! order, so the map's order reaches no result.

use super::index::PodEntry;

/// One prompt's lookup: per key, in key order, the candidates' entries found under it.
#[derive(Clone, Debug, Default)]
pub struct Lookup {
    /// Every key's entries, one key after another.
    pub entries: Vec<PodEntry>,
    /// Each key's end offset in `entries`.
    pub ends: Vec<usize>,
}

impl Lookup {
    /// How many keys.
    pub fn keys(&self) -> usize {
        self.ends.len()
    }

    /// The entries under key `i`.
    pub fn at(&self, i: usize) -> &[PodEntry] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.entries[start..self.ends[i]]
    }

    /// A lookup from per-key entry lists (for tests).
    pub fn of(keys: &[&[PodEntry]]) -> Lookup {
        let mut lookup = Lookup::default();
        for entries in keys {
            lookup.entries.extend_from_slice(entries);
            lookup.ends.push(lookup.entries.len());
        }
        lookup
    }
}

/// Buffers for [`longest_prefix`], dense by endpoint key.
#[derive(Clone, Debug, Default)]
pub struct PrefixScratch {
    weight_now: Vec<Option<f64>>,
    active: Vec<u32>,
    score: Vec<f64>,
}

/// `LongestPrefixScorer.Score`: the endpoints at key 0 start with the best weight among their
/// entries there (`weight(tier)`); at each next key an endpoint still present adds its best
/// weight, one absent drops out, until none is left. Adds each starting endpoint's score to
/// `scores[endpoint]` (grown as needed) and returns them in `started`, in first-entry order.
pub fn longest_prefix(
    lookup: &Lookup,
    weight: impl Fn(u16) -> f64,
    scratch: &mut PrefixScratch,
    started: &mut Vec<u32>,
    scores: &mut Vec<f64>,
) {
    started.clear();
    let PrefixScratch { weight_now, active, score } = scratch;
    active.clear();
    for i in 0..lookup.keys() {
        if i > 0 && active.is_empty() {
            break;
        }
        for entry in lookup.at(i) {
            let e = entry.endpoint as usize;
            if e >= weight_now.len() {
                weight_now.resize(e + 1, None);
                score.resize(e + 1, 0.0);
            }
            let w = weight(entry.tier);
            weight_now[e] = Some(weight_now[e].map_or(w, |cur| if w > cur { w } else { cur }));
            if i == 0 && !active.contains(&entry.endpoint) {
                active.push(entry.endpoint);
                started.push(entry.endpoint);
            }
        }
        active.retain(|&e| match weight_now[e as usize] {
            Some(w) => {
                score[e as usize] += w;
                true
            }
            None => false,
        });
        for entry in lookup.at(i) {
            weight_now[entry.endpoint as usize] = None;
        }
    }
    for &e in started.iter() {
        let e = e as usize;
        if e >= scores.len() {
            scores.resize(e + 1, 0.0);
        }
        scores[e] += score[e];
        score[e] = 0.0;
    }
}

/// `matchedBlockCount`: the leading keys `endpoint` holds, on any medium.
pub fn matched_block_count(lookup: &Lookup, endpoint: u32) -> u64 {
    (0..lookup.keys()).take_while(|&i| lookup.at(i).iter().any(|e| e.endpoint == endpoint)).count() as u64
}

/// `matchedBlockCountByTier`: per medium, the leading keys `endpoint` holds on that medium,
/// counted while at least one medium still runs unbroken from key 0; added to `out`.
pub fn matched_block_count_by_tier(
    lookup: &Lookup,
    endpoint: u32,
    out: &mut smallvec::SmallVec<[(u16, u64); 2]>,
) {
    let mut alive: smallvec::SmallVec<[u16; 4]> = smallvec::SmallVec::new();
    for i in 0..lookup.keys() {
        let here = lookup.at(i).iter().filter(|e| e.endpoint == endpoint).map(|e| e.tier);
        if i == 0 {
            for tier in here {
                if !alive.contains(&tier) {
                    alive.push(tier);
                }
            }
        } else {
            let present: smallvec::SmallVec<[u16; 4]> = here.collect();
            alive.retain(|t| present.contains(t));
        }
        if alive.is_empty() {
            break;
        }
        for &tier in &alive {
            match out.iter_mut().find(|(t, _)| *t == tier) {
                Some((_, n)) => *n += 1,
                None => out.push((tier, 1)),
            }
        }
    }
}
