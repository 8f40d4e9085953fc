//! The byte gate: fixed scenarios whose `result.json`, `calls.jsonl` and timeline must stay
//! byte-identical across refactors, whose timelines pass the checker, and whose recordings
//! replay without divergence.
//!
//! Golden files live in `fixtures/gate/<name>/`: `result.json`, `calls.jsonl` and
//! `trace.sha256` (the timeline's SHA-256 and size; the timeline itself is megabytes). To
//! regenerate after a deliberate change, run with `UPDATE_GOLDEN=1` and commit the golden files
//! on their own, saying why they changed. On a mismatch the new outputs are written to
//! `target/gate-actual/<name>/` for diffing.

use std::path::PathBuf;

use blis_actors::{ClusterMessage, RunOptions, RunOutput, run_observed, timeline_group};
use blis_costmodel::CostData;
use blis_kernel::record::{MessageLog, RecordedRun, ReplayCheck};
use blis_kernel::timeline::{TimelineFilter, TimelineWriter, check};
use blis_kernel::{Observer, SimTime, TransitionRecord};
use sha2::{Digest, Sha256};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn scenario(name: &str) -> String {
    std::fs::read_to_string(root().join(format!("fixtures/gate/{name}.yaml")))
        .expect("the gate scenario exists")
}

fn take<T: Observer<ClusterMessage>>(observer: Box<dyn Observer<ClusterMessage>>) -> T {
    let observer: Box<dyn std::any::Any> = observer;
    *observer.downcast::<T>().expect("the observer comes back as attached")
}

/// Run a gate scenario with its timeline; returns the outputs and the timeline bytes.
fn run_with_timeline(name: &str, options: RunOptions) -> (RunOutput, Vec<u8>) {
    let writer = TimelineWriter::new(
        Vec::new(),
        TimelineFilter::default(),
        Box::new(timeline_group),
        &[("scenario", name.to_owned())],
    );
    let (output, mut observers) =
        run_observed(&scenario(name), options, &CostData::embedded(), vec![Box::new(writer)], &mut |_| {})
            .unwrap();
    let writer = take::<TimelineWriter<Vec<u8>>>(observers.remove(0));
    let trace = writer.finish(SimTime::from_micros(output.result.simulation.end_time_us)).unwrap();
    (output, trace)
}

fn gate(name: &str) {
    gate_with(name, RunOptions::default());
}

/// [`gate`] with `options`; golden files are written only by a run with the default options.
fn gate_with(name: &str, options: RunOptions) {
    let default_options = !options.faithful_steps;
    let (output, trace) = run_with_timeline(name, options);
    let violations = check(std::str::from_utf8(&trace).unwrap());
    assert!(
        violations.is_empty(),
        "{name}: the timeline breaks Perfetto's rules: {:?}",
        &violations[..violations.len().min(5)]
    );
    assert!(output.result.fates.conserved());
    let digest: String = Sha256::digest(&trace).iter().map(|b| format!("{b:02x}")).collect();
    let actual = [
        ("result.json", output.result_json()),
        ("calls.jsonl", output.calls_jsonl()),
        ("trace.sha256", format!("{digest} {} bytes\n", trace.len()).into_bytes()),
    ];
    let golden = root().join(format!("fixtures/gate/{name}"));
    if default_options && std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(&golden).unwrap();
        for (file, bytes) in &actual {
            std::fs::write(golden.join(file), bytes).unwrap();
        }
        return;
    }
    let mut changed = Vec::new();
    for (file, bytes) in &actual {
        let expected = std::fs::read(golden.join(file))
            .unwrap_or_else(|_| panic!("{name}: no golden {file}; run with UPDATE_GOLDEN=1 and commit it"));
        if &expected != bytes {
            changed.push(*file);
        }
    }
    if !changed.is_empty() {
        let dump = root().join(format!("target/gate-actual/{name}"));
        std::fs::create_dir_all(&dump).unwrap();
        for (file, bytes) in &actual {
            std::fs::write(dump.join(file), bytes).unwrap();
        }
        std::fs::write(dump.join("trace.json"), &trace).unwrap();
        panic!("{name}: {changed:?} changed; the new outputs are in {}", dump.display());
    }
}

fn replays(name: &str) {
    let text = scenario(name);
    let log = MessageLog::new(Vec::new(), &text);
    let (output, mut observers) =
        run_observed(&text, RunOptions::default(), &CostData::embedded(), vec![Box::new(log)], &mut |_| {})
            .unwrap();
    let bytes = take::<MessageLog<Vec<u8>>>(observers.remove(0))
        .finish(&output.comparable_digest().expect("the digest is computed"))
        .unwrap();
    let recorded = RecordedRun::read(bytes.as_slice()).unwrap();
    assert_eq!(recorded.inputs, text);
    let check: Box<dyn Observer<ClusterMessage>> =
        Box::new(ReplayCheck::<ClusterMessage>::new(recorded.deliveries.clone()));
    let (replayed, mut observers) = run_observed(
        &recorded.inputs,
        RunOptions::default(),
        &CostData::embedded(),
        vec![check],
        &mut |_| {},
    )
    .unwrap();
    let check = take::<ReplayCheck<ClusterMessage>>(observers.remove(0));
    assert_eq!(check.outcome(), None, "{name}");
    assert_eq!(check.matched(), recorded.deliveries.len() as u64);
    assert_eq!(
        recorded.trailer.as_deref(),
        Some(replayed.comparable_digest().expect("a replay computes the digest").as_str()),
        "{name}: comparable result"
    );
}

#[test]
fn gate_default_cluster() {
    gate("default-cluster");
}

#[test]
fn gate_tiny_kv_preemption() {
    gate("tiny-kv-preemption");
}

#[test]
fn gate_overload_horizon() {
    gate("overload-horizon");
}

#[test]
fn gate_prefix_heavy() {
    gate("prefix-heavy");
}

#[test]
fn gate_llmd_chat() {
    gate("llmd-chat");
}

/// The vLLM engines' reference path, walking every running request every step, gives the same
/// bytes as the decode cohort the default runs use (issue 13: advancing steps in one go is
/// allowed only if the outputs are identical).
#[test]
fn every_gate_scenario_gives_its_golden_bytes_walking_every_request() {
    for name in ["default-cluster", "tiny-kv-preemption", "overload-horizon", "prefix-heavy", "llmd-chat"] {
        gate_with(name, RunOptions { faithful_steps: true, ..RunOptions::default() });
    }
}

/// Counts the transitions it is shown; blind to the engines (detached), it leaves them free to
/// run ahead, and sees a run ahead as one transition.
#[derive(Default)]
struct TransitionCount(u64);

impl Observer<ClusterMessage> for TransitionCount {
    fn blind_to_detached(&self) -> bool {
        true
    }

    fn on_transition(&mut self, _: &TransitionRecord<'_>) {
        self.0 += 1;
    }
}

/// The transitions a run of gate scenario `name` on one thread shows a [`TransitionCount`],
/// after checking its `result.json` and `calls.jsonl` against the golden files (made with a
/// timeline, which sees every transition, so one round at a time).
fn transitions_shown_giving_golden_bytes(name: &str, faithful_steps: bool) -> u64 {
    let options = RunOptions { threads: Some(1), faithful_steps, ..RunOptions::default() };
    let count: Box<dyn Observer<ClusterMessage>> = Box::new(TransitionCount::default());
    let (output, mut observers) =
        run_observed(&scenario(name), options, &CostData::embedded(), vec![count], &mut |_| {}).unwrap();
    let golden = root().join(format!("fixtures/gate/{name}"));
    for (file, bytes) in [("result.json", output.result_json()), ("calls.jsonl", output.calls_jsonl())] {
        assert!(
            std::fs::read(golden.join(file)).unwrap() == bytes,
            "{name}: {file} (faithful {faithful_steps})"
        );
    }
    take::<TransitionCount>(observers.remove(0)).0
}

/// Engines run ahead through their next steps while nothing else can happen before them
/// (issue 13: advancing steps in one go is allowed only if the outputs are identical); the
/// faithful path takes every step in a round of its own.
#[test]
fn every_gate_scenario_gives_its_golden_bytes_with_engines_running_ahead() {
    for name in ["default-cluster", "tiny-kv-preemption", "overload-horizon", "prefix-heavy", "llmd-chat"] {
        let ran_ahead = transitions_shown_giving_golden_bytes(name, false);
        let round_by_round = transitions_shown_giving_golden_bytes(name, true);
        assert!(ran_ahead < round_by_round, "{name}: {ran_ahead} transitions shown against {round_by_round}");
    }
}

/// The tiny-KV gate scenario with vLLM's defaults (prefix caching, asynchronous scheduling),
/// one replication: it preempts often.
fn tiny_kv_with_caching() -> String {
    scenario("tiny-kv-preemption")
        .replace("enable_prefix_caching: false", "enable_prefix_caching: true")
        .replace("async_scheduling: false", "async_scheduling: true")
        .replace("seed: 12", "seed: 12\nframe: { replications: 1 }")
}

/// Run `text` (files relative to `base_dir`) on one thread caching output blocks late and on
/// the faithful path, which caches every block as it fills; asserts that some call was
/// preempted and that both give the same bytes. Returns the first run.
fn late_caching_against_faithful(text: &str, base_dir: Option<PathBuf>) -> RunOutput {
    let with = |faithful_steps| {
        let options = RunOptions {
            threads: Some(1),
            faithful_steps,
            base_dir: base_dir.clone(),
            ..RunOptions::default()
        };
        run_observed(text, options, &CostData::embedded(), vec![], &mut |_| {}).unwrap().0
    };
    let (deferred, faithful) = (with(false), with(true));
    assert!(
        deferred.calls_jsonl().windows(16).any(|w| w == b"\"preemptions\":1,"),
        "some call was preempted"
    );
    assert!(deferred.result_json() == faithful.result_json(), "result.json");
    assert!(deferred.calls_jsonl() == faithful.calls_jsonl(), "calls.jsonl");
    deferred
}

/// Where no prompt can hold another call's outputs, an instance caches its requests' output
/// blocks in the block pool only when one is preempted; a preempted request, resumed, may hit
/// them. On the tiny-KV scenario, which preempts often, its outputs are the faithful path's.
/// (Dropping the caching at preemption changes them.)
#[test]
fn output_blocks_cached_at_preemption_give_the_bytes_of_caching_them_as_they_fill() {
    let deferred = late_caching_against_faithful(&tiny_kv_with_caching(), None);
    assert!(deferred.result.fates.completed > 0);
}

/// The same for a replayed trace whose prompts are token counts and shared blocks (its check
/// finds no token ids or history, so the file vouches that no prompt holds another call's
/// output): the tiny-KV gate's instance under a trace of long prompts that preempts.
#[test]
fn a_trace_of_drawn_prompts_caches_output_blocks_at_preemption_with_the_same_bytes() {
    let folder = tempfile::tempdir().unwrap();
    let lines: Vec<String> = (0..150u64)
        .map(|k| {
            let (own, output) = (200 + (k * 7_919) % 2_600, 30 + (k * 104_729) % 700);
            let shared = if k % 3 == 0 { r#"{"shared":{"name":"sys","tokens":480}},"# } else { "" };
            format!(
                r#"{{"id":"r{k}","arrival_us":{},"nodes":[{{"kind":"llm","id":"a","prompt":[{shared}{{"tokens":{own}}}],"output_tokens":{output}}}]}}"#,
                k * 150_000
            )
        })
        .collect();
    std::fs::write(folder.path().join("trace.jsonl"), lines.join("\n")).unwrap();
    let text = tiny_kv_with_caching();
    let text = format!(
        "{}workload:\n  replays:\n    - {{ name: trace, path: trace.jsonl, format: jsonl }}\n",
        &text[..text.find("workload:").expect("the gate scenario has a workload")]
    );
    let deferred = late_caching_against_faithful(&text, Some(folder.path().to_owned()));
    assert_eq!(deferred.result.fates.completed, 150);
}

#[test]
fn every_gate_scenario_replays_without_divergence() {
    for name in ["default-cluster", "tiny-kv-preemption", "overload-horizon", "prefix-heavy", "llmd-chat"] {
        replays(name);
    }
}

#[test]
fn an_altered_delivery_in_a_cluster_recording_is_caught_at_its_instant() {
    let text = scenario("tiny-kv-preemption");
    let log = MessageLog::new(Vec::new(), &text);
    let (output, mut observers) =
        run_observed(&text, RunOptions::default(), &CostData::embedded(), vec![Box::new(log)], &mut |_| {})
            .unwrap();
    let bytes = take::<MessageLog<Vec<u8>>>(observers.remove(0))
        .finish(&output.comparable_digest().expect("the digest is computed"))
        .unwrap();
    let mut recorded = RecordedRun::read(bytes.as_slice()).unwrap();
    let target = recorded.deliveries.len() / 2;
    let (original, _): (blis_kernel::record::Delivery<ClusterMessage>, usize) =
        bincode::serde::decode_from_slice(&recorded.deliveries[target], bincode::config::standard()).unwrap();
    let mut altered = original.clone();
    altered.send_count += 1;
    recorded.deliveries[target] =
        bincode::serde::encode_to_vec(&altered, bincode::config::standard()).unwrap();
    let check: Box<dyn Observer<ClusterMessage>> =
        Box::new(ReplayCheck::<ClusterMessage>::new(recorded.deliveries));
    let (_, mut observers) =
        run_observed(&text, RunOptions::default(), &CostData::embedded(), vec![check], &mut |_| {}).unwrap();
    let divergence = take::<ReplayCheck<ClusterMessage>>(observers.remove(0)).outcome().expect("it diverges");
    assert_eq!(divergence.index, target as u64);
    assert_eq!(
        (divergence.instant.time.as_micros(), divergence.instant.round),
        (original.time_us, original.round)
    );
}
