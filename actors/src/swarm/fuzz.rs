//! The fuzzer: structure-aware mutations of the fixtures — scenario YAML, workload JSONL and
//! the Mooncake and Azure traces — each input parsed and, when accepted, simulated under a
//! budget of kernel rounds. A panic anywhere is a failure; a refusal must be a clean
//! `FieldError`. Run from the `fuzz` subcommand, never in CI.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use blis_contracts::{FieldError, Scenario};
use blis_costmodel::CostData;
use blis_kernel::{Streams, Substream};

use crate::assembly::{AssemblyOptions, assemble};

/// Kernel rounds an accepted input may run; beyond it the input is counted as cut, not hung.
pub const ROUND_BUDGET: u64 = 20_000;

/// Engine instances beyond which an accepted input is not assembled (each holds its own KV
/// block tables; thousands of GPU-sized pools would fill this machine's memory, not find bugs).
pub const MAX_FUZZED_INSTANCES: u64 = 16;

const SCENARIOS: [&str; 7] = [
    include_str!("../../../fixtures/gate/default-cluster.yaml"),
    include_str!("../../../fixtures/gate/overload-horizon.yaml"),
    include_str!("../../../fixtures/gate/prefix-heavy.yaml"),
    include_str!("../../../fixtures/gate/tiny-kv-preemption.yaml"),
    include_str!("../../../fixtures/tests/small.yaml"),
    include_str!("../../../fixtures/scenarios/routing/chat-8-default.yaml"),
    include_str!("../../../fixtures/scenarios/routing/chat-8-epp-config.yaml"),
];

const JSONL: &str = concat!(
    r#"{"id":"r0","arrival_us":0,"nodes":[{"kind":"llm","id":"a","prompt":[{"tokens":300}],"output_tokens":20}]}"#,
    "\n",
    r#"{"id":"r1","arrival_us":1000,"nodes":[{"kind":"llm","id":"a","prompt":[{"tokens":300}],"output_tokens":20},{"kind":"tool","id":"c","parents":["a"],"duration_us":300000},{"kind":"llm","id":"b","parents":["a","c"],"prompt":[{"history":"a"},{"tokens":30}],"output_tokens":40}]}"#,
    "\n",
);

const MOONCAKE: &str = include_str!("../../../fixtures/workloads/mooncake.jsonl");

/// The Azure trace's first lines (the whole file is large).
fn azure() -> String {
    include_str!("../../../fixtures/workloads/azure-code.csv").lines().take(40).collect::<Vec<_>>().join("\n")
}

/// The scenario a fuzzed workload file is replayed by.
fn replay_scenario(format: &str, file: &str) -> String {
    format!(
        "seed: 3\ncluster:\n  router: {{ policy: round-robin }}\n  pools:\n    - name: p\n      replicas: 1\n      hardware: {{ chip: H100-SXM }}\n      model: Llama-3.1-8B\n      engine: {{ kind: vllm, version: \"0.15.1\", args: {{ max_model_len: 8192 }} }}\nworkload:\n  clients: []\n  replays:\n    - {{ name: r, path: {file}, format: {format} }}\n"
    )
}

/// How one fuzzed input fared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FuzzOutcome {
    /// Refused with a message naming the field.
    Refused,
    /// Accepted and simulated to its end within the budget.
    Simulated,
    /// Accepted and simulated for the whole budget of rounds (or too large to assemble here).
    Cut,
    /// A panic, with its message and the input.
    Panicked(String),
    /// A refusal that names no field.
    Unnamed(String),
}

/// One mutation of a text, chosen from `s`.
fn mutate(text: &str, s: &mut Substream) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    if lines.is_empty() {
        lines.push(String::new());
    }
    let rounds = 1 + s.below(3);
    for _ in 0..rounds {
        let i = s.below(lines.len() as u64) as usize;
        match s.below(8) {
            // A field dropped.
            0 if lines.len() > 1 => {
                lines.remove(i);
            }
            // A field duplicated.
            1 => {
                let line = lines[i].clone();
                lines.insert(i, line);
            }
            // A number pushed to a bound, or a type swapped.
            2..=4 => lines[i] = replace_number(&lines[i], s),
            5 => lines[i] = swap_type(&lines[i], s),
            // Bytes corrupted.
            6 => lines[i] = corrupt(&lines[i], s),
            // A line from elsewhere.
            _ => {
                let j = s.below(lines.len() as u64) as usize;
                lines.swap(i, j);
            }
        }
    }
    lines.join("\n")
}

const BOUNDARY_NUMBERS: [&str; 16] = [
    "0",
    "-1",
    "1",
    "2",
    "4096",
    "65535",
    "65536",
    "4294967295",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "1e9",
    "1e300",
    "-0.0",
    "0.000001",
    "9007199254740993",
];

fn replace_number(line: &str, s: &mut Substream) -> String {
    let digits: Vec<usize> =
        line.char_indices().filter(|(_, c)| c.is_ascii_digit()).map(|(i, _)| i).collect();
    let Some(&start) = digits.get(s.below(digits.len().max(1) as u64) as usize) else {
        return line.to_owned();
    };
    let bytes = line.as_bytes();
    let mut a = start;
    while a > 0 && (bytes[a - 1].is_ascii_digit() || bytes[a - 1] == b'.') {
        a -= 1;
    }
    let mut b = start;
    while b < bytes.len() && (bytes[b].is_ascii_digit() || bytes[b] == b'.' || bytes[b] == b'e') {
        b += 1;
    }
    format!("{}{}{}", &line[..a], pick(s, &BOUNDARY_NUMBERS), &line[b..])
}

fn swap_type(line: &str, s: &mut Substream) -> String {
    let value = ["[]", "{}", "\"text\"", "true", "null", "~", "[1, 2]", "{a: 1}"];
    match line.find(':') {
        Some(at) => format!("{}: {}", &line[..at], pick(s, &value)),
        None => format!("{line} {}", pick(s, &value)),
    }
}

fn corrupt(line: &str, s: &mut Substream) -> String {
    let mut bytes = line.as_bytes().to_vec();
    let noise =
        [b'{', b'}', b'[', b']', b':', b',', b'"', b'\'', b'\t', 0xff, 0xc3, b'-', b'#', b'&', b'*', b'\\'];
    let at = s.below(bytes.len() as u64 + 1) as usize;
    match s.below(3) {
        0 if at < bytes.len() => bytes[at] = *pick(s, &noise),
        1 if at < bytes.len() => {
            bytes.truncate(at);
        }
        _ => bytes.insert(at.min(bytes.len()), *pick(s, &noise)),
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

fn pick<'a, T>(s: &mut Substream, options: &'a [T]) -> &'a T {
    &options[s.below(options.len() as u64) as usize]
}

/// The input of fuzz seed `seed`: which kind it is, the scenario text, and a workload file's
/// name and content when it replays one.
pub fn input(seed: u64) -> (&'static str, String, Option<(String, String)>) {
    let mut s = Streams::new(seed).stream("fuzz", "mutation", "");
    match s.below(4) {
        0 | 1 => {
            let fixture = *pick(&mut s, &SCENARIOS);
            ("scenario", mutate(fixture, &mut s), None)
        }
        2 => (
            "jsonl",
            replay_scenario("jsonl", "fuzz.jsonl"),
            Some(("fuzz.jsonl".into(), mutate(JSONL, &mut s))),
        ),
        _ => {
            let (format, name, text) = if s.below(2) == 0 {
                ("mooncake", "fuzz-mooncake.jsonl", MOONCAKE.to_owned())
            } else {
                ("azure-csv", "fuzz-azure.csv", azure())
            };
            (format, replay_scenario(format, name), Some((name.into(), mutate(&text, &mut s))))
        }
    }
}

/// Parse and (if accepted) simulate the input of fuzz seed `seed`, writing its workload file
/// (if any) into `dir`.
pub fn fuzz_one(seed: u64, data: &CostData, dir: &Path) -> FuzzOutcome {
    let (_, text, file) = input(seed);
    if let Some((name, content)) = &file
        && let Err(e) = std::fs::write(dir.join(name), content)
    {
        return FuzzOutcome::Panicked(format!("cannot write the fuzzed file: {e}"));
    }
    let outcome = catch_unwind(AssertUnwindSafe(|| simulate(&text, data, dir)));
    match outcome {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(e)) if e.path.is_empty() => FuzzOutcome::Unnamed(e.to_string()),
        Ok(Err(_)) => FuzzOutcome::Refused,
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            FuzzOutcome::Panicked(message)
        }
    }
}

fn simulate(text: &str, data: &CostData, dir: &Path) -> Result<FuzzOutcome, FieldError> {
    let scenario = Scenario::parse(text)?;
    let instances: u64 = scenario.cluster.pools.iter().map(|p| u64::from(p.replicas)).sum();
    if instances > MAX_FUZZED_INSTANCES {
        return Ok(FuzzOutcome::Cut);
    }
    let options = AssemblyOptions {
        host: blis_kernel::HostKind::Inline,
        base_dir: dir.to_path_buf(),
        keep_released: false,
        released_token_ids: false,
        fault: None,
        draw_ahead: false,
        lane_threads: 1,
        faithful_steps: false,
    };
    let mut cluster = assemble(&scenario, scenario.seed.unwrap_or(1), data, &options)?;
    match cluster.simulation.run_rounds(blis_kernel::SimTime::MAX, ROUND_BUDGET) {
        Ok(Some(_)) => Ok(FuzzOutcome::Simulated),
        Ok(None) => Ok(FuzzOutcome::Cut),
        Err(e) => Ok(FuzzOutcome::Panicked(format!("kernel error on an accepted input: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inputs_that_found_the_empty_key_bug_are_refused_by_path() {
        // I11: fuzz seeds 23826, 30293, 33042 and 504132 turned a key into an anchor before its
        // colon (the key ""), once refused with an empty path; each must now name its field.
        let data = CostData::embedded();
        let dir = tempfile::Builder::new().prefix("blis-fuzz-regression-").tempdir().unwrap();
        for seed in [23_826, 30_293, 33_042, 504_132] {
            let (_, text, _) = input(seed);
            assert!(
                text.lines().any(|l| l.trim_start().starts_with('&')),
                "seed {seed} no longer makes an anchor key"
            );
            assert_eq!(fuzz_one(seed, &data, dir.path()), FuzzOutcome::Refused, "seed {seed}");
        }
    }
}
