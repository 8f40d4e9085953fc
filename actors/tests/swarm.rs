//! The short swarm: random valid scenarios with every invariant checked after every instant
//! (docs/INVARIANTS.md), a deliberately leaked KV block caught with its reproduction line, and
//! the invariant registry's page kept current.

use blis_actors::Fault;
use blis_actors::swarm::{CheckOptions, invariants_markdown, run_swarm};
use blis_costmodel::CostData;

/// Seeds of the short swarm (the `swarm` subcommand runs any number).
const SHORT_SWARM: u64 = 300;

#[test]
fn the_short_swarm_finds_no_violation() {
    // I1–I11: every generated scenario is accepted and keeps every invariant.
    let data = CostData::embedded();
    let options = CheckOptions { fault: None, determinism: true };
    let summary = run_swarm(1, SHORT_SWARM, &data, options, &mut |_| {});
    assert_eq!(summary.seeds, SHORT_SWARM);
    assert!(summary.failures.is_empty(), "{}", summary.failures.join("\n"));
    assert!(summary.instants > 10 * SHORT_SWARM, "{summary:?}");
    assert!(summary.endings.get("settled").is_some_and(|&n| n > SHORT_SWARM / 2), "{:?}", summary.endings);
}

#[test]
fn a_leaked_kv_block_is_caught_with_its_reproduction_line() {
    // I5: every engine leaks one block before the run; the first engine transition sees it.
    let data = CostData::embedded();
    let options = CheckOptions { fault: Some(Fault::LeakKvBlock), determinism: false };
    let summary = run_swarm(1, 20, &data, options, &mut |_| {});
    // (A seed whose every call is refused by the router never runs an engine transition.)
    assert!(summary.failures.len() >= 15, "{summary:?}");
    assert!(summary.failures.iter().all(|f| f.contains("--fault leak-kv-block  # I5 ")), "{summary:?}");
    let first = &summary.failures[0];
    assert!(first.starts_with("blis-actor swarm --seed 1 --count 1 --fault leak-kv-block  # I5 "), "{first}");
    assert!(first.contains("1 leaked"), "{first}");
}

#[test]
fn invariants_md_is_current() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/INVARIANTS.md");
    let generated = invariants_markdown();
    if std::env::var_os("UPDATE_INVARIANTS").is_some() {
        std::fs::write(path, &generated).unwrap();
    }
    let written = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        written == generated,
        "docs/INVARIANTS.md is stale: UPDATE_INVARIANTS=1 cargo test -p blis-actors --test swarm"
    );
}

#[test]
fn every_invariant_is_numbered_once_and_cited_by_a_test() {
    let ids: Vec<&str> = blis_actors::swarm::INVARIANTS.iter().map(|i| i.id).collect();
    let expected: Vec<String> = (1..=ids.len()).map(|n| format!("I{n}")).collect();
    assert_eq!(ids, expected);
    assert!(blis_actors::swarm::INVARIANTS.iter().all(|i| !i.tests.is_empty() && !i.check.is_empty()));
}

#[test]
fn every_cited_test_exists_in_the_file_it_names() {
    // A citation is `path::[module::]test`: the file must hold `fn test(`.
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    for invariant in blis_actors::swarm::INVARIANTS {
        for citation in invariant.tests {
            let (path, rest) = citation
                .split_once("::")
                .unwrap_or_else(|| panic!("{}: `{citation}` names no test", invariant.id));
            let test = rest.rsplit("::").next().unwrap();
            let source = std::fs::read_to_string(format!("{root}/{path}"))
                .unwrap_or_else(|e| panic!("{}: `{citation}`: {path}: {e}", invariant.id));
            assert!(
                source.contains(&format!("fn {test}(")),
                "{}: `{citation}`: no test {test} in {path}",
                invariant.id
            );
        }
    }
}
