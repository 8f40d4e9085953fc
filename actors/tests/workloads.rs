//! Workloads end to end: export and replay, common random numbers, DAG release order, a
//! session's later turn hitting the prefix cache, conservation under timeouts, and refusals of
//! bad workload files by file, line and field.

mod common;

use std::path::PathBuf;

use blis_actors::{AssemblyOptions, EngineHost, RunError, RunOptions, RunOutput, assemble, run};
use blis_contracts::{CallRecord, Fate, Scenario};
use blis_costmodel::CostData;
use blis_kernel::HostKind;
use tempfile::TempDir;

/// One instance serving `workload` (YAML, indented under `workload:`), with extra engine args.
fn scenario(args: &str, workload: &str) -> String {
    common::one_pool(
        Some(21),
        Some("client_router_us: 200, router_engine_us: 50"),
        1,
        &format!("max_model_len: 16384 {args}"),
        &format!("\n{workload}"),
    )
}

const MIXED: &str = r#"
  clients:
    - name: chat
      requests: 30
      arrival: { process: gamma, rate_per_s: 3, cv: 2 }
      shared_prefix: { groups: 2, tokens: 400 }
      input_tokens: { dist: lognormal, mean: 200, std: 150, min: 10, max: 2000 }
      output_tokens: { dist: normal, mean: 60, std: 20, min: 5, max: 200 }
      session: { turns: { dist: uniform, min: 1, max: 3 }, think_time_s: { dist: exponential, mean: 2 } }
    - name: agents
      requests: 12
      arrival: { process: closed, concurrency: 2, think_time_s: { dist: constant, value: 0.25 } }
      slo_class: batch
      input_tokens: { dist: constant, value: 800 }
      output_tokens: { dist: exponential, mean: 50, min: 1, max: 300 }
"#;

fn run_text(text: &str, base_dir: Option<PathBuf>, export_workload: bool) -> Result<RunOutput, RunError> {
    run_exporting(text, base_dir, export_workload, false)
}

fn run_exporting(
    text: &str,
    base_dir: Option<PathBuf>,
    export_workload: bool,
    export_token_ids: bool,
) -> Result<RunOutput, RunError> {
    run(
        text,
        RunOptions {
            seed: None,
            host: HostKind::Inline,
            base_dir,
            export_workload,
            export_token_ids,
            replications: Some(1),
            threads: None,
            build: None,
            coefficient_spread: false,
            ..RunOptions::default()
        },
        &mut |_| {},
    )
}

/// A fresh folder for `name`, removed when dropped, even when the test fails.
fn scratch(name: &str) -> TempDir {
    tempfile::Builder::new().prefix(&format!("blis-workloads-{name}-")).tempdir().unwrap()
}

/// The calls without the fields that name where a workload came from.
fn comparable(calls: &[CallRecord]) -> String {
    calls.iter().map(|c| serde_json::to_string(c).unwrap()).collect::<Vec<_>>().join("\n")
}

#[test]
fn an_exported_workload_replays_to_the_same_calls_and_metrics() {
    let original = run_text(&scenario("", MIXED), None, true).unwrap();
    assert!(original.result.fates.completed > 40);
    let dir = scratch("export-replay");
    let mut replays = String::from("  replays:\n");
    for (client, requests) in &original.workloads {
        let lines: Vec<String> = requests.iter().map(|r| serde_json::to_string(r).unwrap()).collect();
        std::fs::write(dir.path().join(format!("{client}.jsonl")), lines.join("\n") + "\n").unwrap();
        replays.push_str(&format!("    - {{ name: {client}, path: {client}.jsonl }}\n"));
    }
    let replayed = run_text(&scenario("", &replays), Some(dir.path().to_path_buf()), false).unwrap();
    assert_eq!(comparable(&replayed.calls), comparable(&original.calls));
    assert_eq!(replayed.result.metrics, original.result.metrics);
    assert_eq!(replayed.result.fates, original.result.fates);
}

#[test]
fn a_workload_exported_as_token_ids_replays_to_the_same_calls() {
    let original = run_exporting(&scenario("", MIXED), None, true, true).unwrap();
    let dir = scratch("export-token-ids");
    let mut replays = String::from("  replays:\n");
    let mut histories = 0;
    for (client, requests) in &original.workloads {
        for request in requests {
            for (node, call) in request.calls() {
                let [blis_contracts::PromptPart::TokenIds(ids)] = call.prompt.as_slice() else {
                    panic!("{}/{}: the prompt is not one part of token ids", request.id, node.id)
                };
                // Llama-3.1-8B's vocabulary (common::one_pool's model) bounds every id.
                assert!(ids.iter().all(|&id| id < 128_256));
                histories += usize::from(!node.parents.is_empty());
            }
        }
        let lines: Vec<String> = requests.iter().map(|r| serde_json::to_string(r).unwrap()).collect();
        std::fs::write(dir.path().join(format!("{client}.jsonl")), lines.join("\n") + "\n").unwrap();
        replays.push_str(&format!("    - {{ name: {client}, path: {client}.jsonl }}\n"));
    }
    assert!(histories > 0, "later turns (history parts) were exported as ids too");
    let replayed = run_text(&scenario("", &replays), Some(dir.path().to_path_buf()), false).unwrap();
    assert_eq!(comparable(&replayed.calls), comparable(&original.calls));
    assert_eq!(replayed.result.metrics, original.result.metrics);
}

#[test]
fn common_random_numbers_give_two_configurations_the_same_requests() {
    let one = run_text(&scenario("", MIXED), None, true).unwrap();
    let other =
        run_text(&scenario(", enable_prefix_caching: false, max_num_seqs: 8", MIXED), None, true).unwrap();
    // The open-loop client releases the same requests at the same times with the same prompts;
    // the closed loop releases the same requests, later or earlier as the cluster answers.
    assert_eq!(one.workloads[0], other.workloads[0]);
    let strip = |w: &[blis_contracts::RequestSpec]| -> Vec<_> {
        w.iter().map(|r| blis_contracts::RequestSpec { arrival_us: 0, ..r.clone() }).collect()
    };
    assert_eq!(strip(&one.workloads[1].1), strip(&other.workloads[1].1));
    assert_ne!(comparable(&one.calls), comparable(&other.calls), "the configurations do differ");
    // calls.jsonl is in the order requests end, which the configurations change; compare by id.
    let inputs = |o: &RunOutput| -> Vec<(String, u32, u32)> {
        let mut inputs: Vec<_> =
            o.calls.iter().map(|c| (c.request_id.clone(), c.input_tokens, c.output_tokens)).collect();
        inputs.sort();
        inputs
    };
    assert_eq!(inputs(&one), inputs(&other));
}

/// Writes `lines` as a workload file and returns the scenario that replays it, and its folder.
fn replay_scenario(name: &str, lines: &[&str], args: &str) -> (String, TempDir) {
    let dir = scratch(name);
    std::fs::write(dir.path().join("w.jsonl"), lines.join("\n") + "\n").unwrap();
    (scenario(args, "  replays:\n    - { name: dag, path: w.jsonl }\n"), dir)
}

#[test]
fn a_dag_releases_parallel_branches_together_and_a_join_after_both() {
    // a → (b, tool c of 300 ms) → d joins both; e runs in parallel with a from the start.
    let line = r#"{"id":"r","arrival_us":1000,"nodes":[{"kind":"llm","id":"a","prompt":[{"tokens":300}],"output_tokens":20},{"kind":"llm","id":"e","prompt":[{"tokens":50}],"output_tokens":5},{"kind":"llm","id":"b","parents":["a"],"prompt":[{"history":"a"},{"tokens":30}],"output_tokens":40},{"kind":"tool","id":"c","parents":["a"],"duration_us":300000},{"kind":"llm","id":"d","parents":["b","c"],"prompt":[{"history":"b"},{"tokens":10}],"output_tokens":3}]}"#;
    let (text, dir) = replay_scenario("dag", &[line], "");
    let output = run_text(&text, Some(dir.path().to_path_buf()), false).unwrap();
    let call = |node: &str| output.calls.iter().find(|c| c.node == node).unwrap();
    let end = |c: &CallRecord| c.arrival_us + c.e2e_us().unwrap();
    let (a, b, d, e) = (call("a"), call("b"), call("d"), call("e"));
    assert_eq!((a.arrival_us, e.arrival_us), (1000, 1000), "roots leave together");
    assert_eq!(b.arrival_us, end(a), "b leaves when a's answer arrives");
    let c_end = end(a) + 300_000;
    assert_eq!(d.arrival_us, end(b).max(c_end), "the join waits for both branches");
    assert_eq!(d.parents, ["b", "c"]);
    assert_eq!(d.request_id, "r/d");
    // The prompts carry their history: b = a's prompt and output + 30; d = b's + 10.
    assert_eq!(b.input_tokens, 300 + 20 + 30);
    assert_eq!(d.input_tokens, 350 + 40 + 10);
    assert_eq!(d.request_e2e_us, Some(end(d) - 1000), "the request ends with its last node");
    assert!(output.result.fates.conserved() && output.result.fates.completed == 4);
}

#[test]
fn a_lone_client_drawing_its_token_ids_ahead_sends_the_same_calls() {
    // With a core to spare (one replication, two threads or more) a lone client reads its
    // source and draws its ids on a thread of its own; with one thread it draws each call's ids
    // as it sends it. Every prompt part is here: drawn tokens, given ids, a shared part, a
    // history (of a call that timed out, too), a tool between calls; the prefix hits, the
    // timeouts and the input lengths all depend on the ids.
    let lines: Vec<String> = (0..80)
        .map(|i| {
            let arrival = 1000 + i * 150_000;
            format!(
                r#"{{"id":"r{i}","arrival_us":{arrival},"nodes":[{{"kind":"llm","id":"a","prompt":[{{"shared":{{"name":"system-{}","tokens":{}}}}},{{"tokens":{}}},{{"token_ids":[1,2,3,{i}]}}],"output_tokens":{},"timeout_us":{}}},{{"kind":"tool","id":"t","parents":["a"],"duration_us":20000}},{{"kind":"llm","id":"b","parents":["t"],"prompt":[{{"history":"a"}},{{"tokens":{}}}],"output_tokens":{}}}]}}"#,
                i % 3,
                64 + 16 * (i % 5),
                100 + 37 * i,
                10 + i % 50,
                if i % 7 == 0 { 30_000 } else { 60_000_000 },
                5 + i % 11,
                3 + i % 13,
            )
        })
        .collect();
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    let (text, dir) = replay_scenario("draw-ahead", &lines, "");
    let with = |threads: usize| {
        let options = RunOptions {
            base_dir: Some(dir.path().to_path_buf()),
            threads: Some(threads),
            ..RunOptions::default()
        };
        run(&text, options, &mut |_| {}).unwrap()
    };
    let one = with(1);
    let f = one.result.fates;
    assert!(f.conserved() && f.completed > 100 && f.timed_out > 0 && f.not_started > 0, "{f:?}");
    assert!(one.calls.iter().any(|c| c.cached_tokens > 0), "later calls hit the shared parts and histories");
    for threads in [2, 3] {
        let other = with(threads);
        assert!(one.calls_jsonl() == other.calls_jsonl(), "calls on one thread against {threads}");
        assert!(one.result_json() == other.result_json(), "result on one thread against {threads}");
    }
}

#[test]
fn clients_drawing_their_token_ids_ahead_send_the_same_calls() {
    // Two clients, one with sessions and shared prefixes, one a closed loop: each draws ahead
    // on its own thread when the run has a core to spare.
    let text = scenario("", MIXED);
    let with = |threads: usize| {
        run(&text, RunOptions { threads: Some(threads), ..RunOptions::default() }, &mut |_| {}).unwrap()
    };
    let one = with(1);
    assert!(one.calls.iter().any(|c| c.cached_tokens > 0), "the shared prefixes and histories hit");
    let two = with(2);
    assert!(one.calls_jsonl() == two.calls_jsonl() && one.result_json() == two.result_json());
}

#[test]
fn a_later_turn_hits_the_prefix_cache_on_the_earlier_prompt_and_output() {
    let workload = r#"
  clients:
    - name: chat
      requests: 20
      arrival: { process: poisson, rate_per_s: 0.5 }
      input_tokens: { dist: uniform, min: 100, max: 900 }
      output_tokens: { dist: uniform, min: 20, max: 200 }
      session: { turns: { dist: constant, value: 2 }, think_time_s: { dist: constant, value: 1 } }
"#;
    let output = run_text(&scenario("", workload), None, false).unwrap();
    let mut checked = 0;
    for second in output.calls.iter().filter(|c| c.node == "t1") {
        let first = output.calls.iter().find(|c| c.request == second.request && c.node == "t0").unwrap();
        // The first turn computed its prompt and all but its last output token; every full
        // 16-token block of those is cached and hit by the second turn.
        let computed = first.input_tokens + first.output_tokens - 1;
        assert_eq!(second.cached_tokens, computed / 16 * 16, "{}", second.request_id);
        assert!(second.input_tokens > first.input_tokens + first.output_tokens, "the history comes first");
        checked += 1;
    }
    assert_eq!(checked, 20);
}

#[test]
fn timeouts_abort_at_the_engine_and_free_its_blocks_and_every_call_has_one_fate() {
    // A small cache and long prompts: calls wait, and a 2 s timeout gives up on many of them.
    // Client b's prompts exceed max_model_len and are dropped; sessions whose first turn times
    // out never send the second.
    let workload = r#"
  clients:
    - name: a
      requests: 60
      arrival: { process: poisson, rate_per_s: 8 }
      input_tokens: { dist: uniform, min: 1000, max: 6000 }
      output_tokens: { dist: uniform, min: 50, max: 400 }
      session: { turns: { dist: constant, value: 2 }, think_time_s: { dist: constant, value: 0.1 } }
      timeout_s: 2
    - name: b
      requests: 5
      arrival: { process: poisson, rate_per_s: 2 }
      input_tokens: { dist: constant, value: 20000 }
      output_tokens: { dist: constant, value: 10 }
"#;
    let text = scenario(", num_gpu_blocks_override: 1100", workload);
    let output = run_text(&text, None, false).unwrap();
    let f = output.result.fates;
    assert!(f.conserved(), "{f:?}");
    assert_eq!(f.arrivals, 125);
    assert!(f.timed_out > 0 && f.completed > 0 && f.not_started > 0 && f.dropped == 5, "{f:?}");
    for call in output.calls.iter().filter(|c| c.fate == Fate::NotStarted) {
        let first = output.calls.iter().find(|c| c.request == call.request && c.node == "t0").unwrap();
        assert_eq!(
            first.fate,
            Fate::TimedOut,
            "{} never started because its first turn timed out",
            call.request_id
        );
    }
    // Run the same cluster to its end and look inside the engine: nothing is held.
    let scenario = Scenario::parse(&text).unwrap();
    let options = AssemblyOptions {
        host: HostKind::Inline,
        base_dir: ".".into(),
        keep_released: false,
        released_token_ids: false,
        fault: None,
        draw_ahead: false,
        lane_threads: 1,
        faithful_steps: false,
    };
    let mut cluster = assemble(&scenario, 21, &CostData::embedded(), &options).unwrap();
    cluster.simulation.run().unwrap();
    let mut finished = cluster.simulation.finish();
    let host = finished.take_actor::<EngineHost>(cluster.engines[0]).unwrap();
    let scheduler = host.engine().scheduler();
    assert_eq!(scheduler.blocks_held(), 0);
    assert_eq!(scheduler.kv().pool().num_free(), scheduler.kv().pool().num_blocks() - 1);
    assert_eq!(scheduler.num_running() + scheduler.num_waiting(), 0);
}

#[test]
fn bad_workload_files_are_refused_by_file_line_and_field() {
    let good = r#"{"id":"r0","arrival_us":0,"nodes":[{"kind":"llm","id":"a","prompt":[{"tokens":10}],"output_tokens":2}]}"#;
    let cases = [
        (
            r#"{"id":"r1","arrival_us":5,"nodes":[{"kind":"llm","id":"a","parents":["b"],"prompt":[{"tokens":3}],"output_tokens":2},{"kind":"llm","id":"b","parents":["a"],"prompt":[{"tokens":3}],"output_tokens":2}]}"#,
            "w.jsonl:2.nodes[0].parents[0]",
            "no cycles",
        ),
        (
            r#"{"id":"r1","arrival_us":5,"nodes":[{"kind":"llm","id":"a","parents":["zz"],"prompt":[{"tokens":3}],"output_tokens":2}]}"#,
            "w.jsonl:2.nodes[0].parents[0]",
            "no node of the request has this id",
        ),
        (
            r#"{"id":"r1","arrival_us":5,"nodes":[{"kind":"tool","id":"t","duration_us":-3}]}"#,
            "w.jsonl:2.nodes[0]",
            "-3",
        ),
        (r#"{"id":"r1","nodes":[]}"#, "w.jsonl:2", "missing field `arrival_us`"),
        (
            r#"{"id":"r0","arrival_us":9,"nodes":[{"kind":"tool","id":"t","duration_us":3}]}"#,
            "w.jsonl:2.id",
            "another request",
        ),
    ];
    for (i, (line, path, cause)) in cases.iter().enumerate() {
        let (text, dir) = replay_scenario(&format!("bad-{i}"), &[good, line], "");
        match run_text(&text, Some(dir.path().to_path_buf()), false) {
            Err(RunError::Input(error)) => {
                assert_eq!(
                    error.path,
                    format!("workload.replays[0].path (w.jsonl):{}", &path[8..]),
                    "{error}"
                );
                assert!(error.to_string().contains(cause), "{error}");
            }
            other => panic!("case {i}: expected a refusal, got {:?}", other.map(|o| o.result.fates)),
        }
    }
    // A CV out of range in a synthetic client.
    let workload = r#"
  clients:
    - name: a
      requests: 5
      arrival: { process: weibull, rate_per_s: 2, cv: 40 }
      input_tokens: { dist: constant, value: 10 }
      output_tokens: { dist: constant, value: 10 }
"#;
    match run_text(&scenario("", workload), None, false) {
        Err(RunError::Input(error)) => assert_eq!(error.path, "workload.clients[0].arrival.cv"),
        other => panic!("expected a refusal, got {:?}", other.map(|o| o.result.fates)),
    }
}
