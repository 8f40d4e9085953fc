//! The `swarm` subcommand: a clean range exits 0 with its totals; an injected fault exits 1 and
//! prints, per seed, the line that reproduces it — and that line, run, fails the same way.

use std::process::{Command, Output};

fn blis_actor(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_blis-actor")).args(args).output().expect("the binary runs")
}

#[test]
fn a_clean_range_passes_with_its_totals() {
    let output = blis_actor(&["swarm", "--seed", "5", "--count", "3"]);
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(output.status.success(), "{stdout}");
    assert!(stdout.contains("swarm seeds 5..8: 3 seeds,") && stdout.contains("violations: 0"), "{stdout}");
}

#[test]
fn an_injected_leak_prints_the_line_that_reproduces_it() {
    let output = blis_actor(&["swarm", "--seed", "1", "--count", "2", "--fault", "leak-kv-block"]);
    assert_eq!(output.status.code(), Some(1));
    let stdout = String::from_utf8(output.stdout).unwrap();
    let line = stdout.lines().find(|l| l.starts_with("FAIL ")).expect("a failure line");
    assert!(
        line.starts_with("FAIL blis-actor swarm --seed 1 --count 1 --fault leak-kv-block  # I5 "),
        "{line}"
    );
    let command = line.trim_start_matches("FAIL blis-actor ").split("  #").next().unwrap();
    let again = blis_actor(&command.split(' ').collect::<Vec<_>>());
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8(again.stdout).unwrap().contains(line), "the reproduction differs");
}
