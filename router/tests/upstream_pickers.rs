//! Upstream's picker tests (`pkg/epp/framework/plugins/scheduling/picker/…`). Upstream draws
//! from a wall-clock-seeded generator; here every draw comes from the fixed-seed
//! `router`/`tie-break` substream, and the frequency tests keep upstream's 10,000 draws and
//! ±0.05 absolute tolerance.

mod common;

use blis_kernel::{Streams, Substream};
use blis_router::plugins::PluginKind;
use blis_router::plugins::pickers::Picker;
use common::*;
use serde_json::json;

fn picker(type_name: &str, max: i64) -> Picker {
    match build(type_name, Some(json!({"maxNumOfEndpoints": max}))) {
        PluginKind::Picker(p) => p,
        other => panic!("{other:?}"),
    }
}

fn tie_break(seed: u64) -> Substream {
    Streams::new(seed).stream("router", "tie-break", "")
}

/// One pick: the targets as (endpoint, score), in order.
fn pick(p: &Picker, scored: &mut [(u32, f64)], rng: &mut Substream) -> Vec<(u32, f64)> {
    let mut keys = Vec::new();
    let n = p.pick(scored, rng, &mut keys);
    scored[..n].to_vec()
}

/// Each endpoint's share of 10,000 picks of `p` over `input`.
fn frequencies(p: &Picker, input: &[(u32, f64)], seed: u64) -> Vec<f64> {
    let mut rng = tie_break(seed);
    let mut counts = vec![0u32; input.len()];
    let mut scored = input.to_vec();
    for _ in 0..10_000 {
        for (e, _) in pick(p, &mut scored, &mut rng) {
            counts[e as usize] += 1;
        }
    }
    counts.iter().map(|&c| f64::from(c) / 10_000.0).collect()
}

/// upstream: maxscore/picker_test.go::TestPickMaxScorePicker (all five cases; ties compared as a
/// set, the rest in order).
#[test]
fn max_score_picker() {
    let mut rng = tie_break(7);
    // "Single max score"
    let got = pick(&picker("max-score-picker", 1), &mut [(1, 10.0), (2, 25.0), (3, 15.0)], &mut rng);
    assert_eq!(got, vec![(2, 25.0)]);
    // "Multiple max scores, all are equally scored"
    let mut got = pick(&picker("max-score-picker", 2), &mut [(1, 50.0), (2, 50.0), (3, 30.0)], &mut rng);
    got.sort_by_key(|&(e, _)| e);
    assert_eq!(got, vec![(1, 50.0), (2, 50.0)]);
    // "Multiple results sorted by highest score, more pods than needed"
    let got = pick(&picker("max-score-picker", 2), &mut [(1, 20.0), (2, 25.0), (3, 30.0)], &mut rng);
    assert_eq!(got, vec![(3, 30.0), (2, 25.0)]);
    // "Multiple results sorted by highest score, less pods than needed"
    let got = pick(&picker("max-score-picker", 4), &mut [(1, 20.0), (2, 25.0), (3, 30.0)], &mut rng);
    assert_eq!(got, vec![(3, 30.0), (2, 25.0), (1, 20.0)]);
    // "Multiple results sorted by highest score, num of pods exactly needed"
    let got = pick(&picker("max-score-picker", 3), &mut [(1, 30.0), (2, 25.0), (3, 30.0)], &mut rng);
    let mut ties = got[..2].to_vec();
    ties.sort_by_key(|&(e, _)| e);
    assert_eq!(ties, vec![(1, 30.0), (3, 30.0)]);
    assert_eq!(got[2], (2, 25.0));
}

/// upstream: random/picker_test.go::TestPickRandomPicker (all four cases): one pick returns
/// `numPods` endpoints, and over 10,000 picks each is chosen with frequency
/// min(numPods/candidates, 1) ± 0.05, whatever the scores.
#[test]
fn random_picker() {
    let three = [(0, 10.0), (1, 20.0), (2, 30.0)];
    // (case, maxNumOfEndpoints, candidates, numPods)
    type Case<'a> = (&'static str, i64, &'a [(u32, f64)], usize);
    let cases: [Case; 4] = [
        ("Single endpoint returned from multiple candidates", 1, &three, 1),
        ("Multiple endpoints returned, more candidates than needed", 2, &three, 2),
        ("Fewer candidates than maxNumOfEndpoints", 5, &three[..2], 2),
        ("Exact number of candidates as maxNumOfEndpoints", 3, &three, 3),
    ];
    for (name, max, input, num_pods) in cases {
        let p = picker("random-picker", max);
        assert_eq!(pick(&p, &mut input.to_vec(), &mut tie_break(1)).len(), num_pods, "{name}");
        let expected = (num_pods as f64 / input.len() as f64).min(1.0);
        for (e, f) in frequencies(&p, input, 11).iter().enumerate() {
            assert!((f - expected).abs() <= 0.05, "{name}: endpoint {e} chosen {f}, expected {expected}");
        }
    }
}

/// upstream: weightedrandom/picker_test.go::TestPickWeightedRandomPicker (all four cases, N = 1):
/// over 10,000 picks each endpoint's frequency is score/Σscore ± 0.05; a zero score is never
/// picked while any score is positive.
#[test]
fn weighted_random_picker() {
    let cases: [(&str, &[f64]); 4] = [
        ("High weight dominance test", &[10.0, 90.0]),
        ("Equal weights test - A-Res uniform distribution", &[100.0, 100.0, 100.0]),
        ("Zero weight exclusion test - A-Res edge case", &[30.0, 0.0]),
        ("Multi-tier weighted test - A-Res complex distribution", &[100.0, 90.0, 50.0, 30.0, 20.0]),
    ];
    let p = picker("weighted-random-picker", 1);
    for (name, weights) in cases {
        let input: Vec<(u32, f64)> = weights.iter().enumerate().map(|(i, &w)| (i as u32, w)).collect();
        let total: f64 = weights.iter().sum();
        let got = frequencies(&p, &input, 5);
        for (e, (f, w)) in got.iter().zip(weights).enumerate() {
            assert!((f - w / total).abs() <= 0.05, "{name}: endpoint {e} chosen {f}, expected {}", w / total);
        }
        if let Some(zero) = weights.iter().position(|&w| w == 0.0) {
            assert_eq!(got[zero], 0.0, "{name}");
        }
    }
}

/// upstream's shared picker factory: `maxNumOfEndpoints` ≤ 0 is 1, silently; a value of the
/// wrong type is refused with the picker's own prefix.
#[test]
fn picker_factory() {
    for type_name in ["max-score-picker", "random-picker", "weighted-random-picker"] {
        assert_eq!(picker(type_name, 0).max_endpoints, 1);
        assert_eq!(picker(type_name, -4).max_endpoints, 1);
        assert_eq!(picker(type_name, 3).max_endpoints, 3);
        let e = refusal(type_name, json!({"maxNumOfEndpoints": "two"}));
        assert_eq!(e.path, "maxNumOfEndpoints");
        assert!(
            e.reason
                .starts_with(&format!("failed to parse the parameters of the '{type_name}' picker - json:")),
            "{e}"
        );
    }
}

/// A weighted-random picker with more targets than positive scores returns the zero-scored
/// endpoint last (its key is 0), as upstream's A-Res sort does.
#[test]
fn weighted_random_zero_score_sorts_last() {
    let p = picker("weighted-random-picker", 2);
    let mut rng = tie_break(9);
    for _ in 0..100 {
        let got = pick(&p, &mut [(0, 0.0), (1, 5.0)], &mut rng);
        assert_eq!(got, vec![(1, 5.0), (0, 0.0)]);
    }
}
