//! Engines in lanes end to end (vLLM's and SGLang's): where the engines may run ahead of the router and the clients
//! (open-loop clients of one call per request, a router that sends to engines only on requests,
//! aborts and its own timers), they do — on two threads, sharing windows — and every call
//! settles as in a sequential run; `run` writes the same bytes on one and three threads, for
//! a run to its end and for one the overload watch stops; and where an answer could lead to a
//! message to an engine, the engines stay attached.

use blis_actors::{AssemblyOptions, RunOptions, assemble, run};
use blis_contracts::{CallRecord, Scenario};
use blis_costmodel::CostData;
use blis_kernel::HostKind;

fn scenario(router: &str, arrival: &str, extra: &str) -> String {
    format!(
        r#"
seed: 11
frame: {{ replications: 1 }}
cluster:
  network: {{ client_router_us: 500, router_engine_us: 100 }}
  router: {router}
  pools:
    - name: p
      replicas: 4
      hardware: {{ chip: H100-SXM }}
      model: Llama-3.1-8B
      engine: {{ kind: vllm, version: "0.15.1", args: {{ max_num_seqs: 64 }} }}
workload:
  clients:
    - name: a
      requests: 400
      arrival: {arrival}
      input_tokens: {{ dist: uniform, min: 50, max: 1500 }}
      output_tokens: {{ dist: uniform, min: 50, max: 600 }}
{extra}"#
    )
}

const ROUND_ROBIN: &str = "{ policy: round-robin }";
const LLMD: &str = "{ config: {} }";
const POISSON: &str = "{ process: poisson, rate_per_s: 12 }";

fn options(lane_threads: usize) -> AssemblyOptions {
    AssemblyOptions {
        host: HostKind::Inline,
        base_dir: ".".into(),
        keep_released: false,
        released_token_ids: false,
        fault: None,
        draw_ahead: false,
        lane_threads,
        faithful_steps: false,
    }
}

/// Every settled call in file order, whether the engines ran in lanes, and the windows shared.
fn simulate(text: &str, lane_threads: usize) -> (Vec<CallRecord>, bool, u64) {
    let scenario = Scenario::parse(text).unwrap();
    let mut cluster = assemble(&scenario, 3, &CostData::embedded(), &options(lane_threads)).unwrap();
    let in_lanes = cluster.simulation.in_lanes();
    cluster.simulation.run().unwrap();
    (cluster.ledger.drain(), in_lanes, cluster.simulation.stats().shared_windows)
}

const VLLM_ENGINE: &str = r#"engine: { kind: vllm, version: "0.15.1", args: { max_num_seqs: 64 } }"#;

#[test]
fn engines_in_lanes_settle_every_call_as_a_sequential_run_does() {
    let sglang = scenario(ROUND_ROBIN, POISSON, "")
        .replace(VLLM_ENGINE, r#"engine: { kind: sglang, version: "0.5.23", args: {} }"#);
    assert!(sglang.contains("kind: sglang"));
    for (router, text) in [
        (ROUND_ROBIN, scenario(ROUND_ROBIN, POISSON, "")),
        (LLMD, scenario(LLMD, POISSON, "")),
        ("SGLang engines behind round-robin", sglang),
    ] {
        let (expected, attached, _) = simulate(&text, 1);
        assert!(!attached, "{router}: one thread keeps the engines attached");
        assert_eq!(expected.len(), 400);
        let (calls, in_lanes, shared) = simulate(&text, 2);
        assert!(in_lanes, "{router}");
        // llm-d's scrapes (every 50 ms to each engine) cut its windows below the grain from
        // which they are shared.
        if router != LLMD {
            assert!(shared > 50, "{router}: {shared} windows shared");
        }
        assert!(calls == expected, "{router}: the calls differ in lanes");
    }
}

#[test]
fn run_writes_the_same_bytes_with_its_engines_in_lanes() {
    // Three threads and one replication: one spare core accounts and draws, the second runs
    // the engines' lanes. The second scenario is overloaded (3,000 requests/s on four
    // engines) and stopped by the overload watch.
    let overloaded = scenario(ROUND_ROBIN, "{ process: poisson, rate_per_s: 3000 }", "")
        .replace("requests: 400", "requests: 60000");
    let sglang = scenario(ROUND_ROBIN, POISSON, "")
        .replace(VLLM_ENGINE, r#"engine: { kind: sglang, version: "0.5.23", args: {} }"#);
    for (what, text) in
        [("to its end", scenario(LLMD, POISSON, "")), ("SGLang to its end", sglang), ("stopped", overloaded)]
    {
        let with = |threads: usize| {
            let options = RunOptions { threads: Some(threads), ..RunOptions::default() };
            let out = run(&text, options, &mut |_| {}).unwrap();
            (out.result.replications[0].overload.stopped_at_us, out.result_json(), out.calls_jsonl())
        };
        let one = with(1);
        assert_eq!(one.0.is_some(), what == "stopped", "{what}: {:?}", one.0);
        assert!(one == with(3), "{what}: one thread against three");
    }
}

#[test]
fn engines_stay_attached_where_an_answer_could_reach_them() {
    let closed = "{ process: closed, concurrency: 8 }";
    let sessions = "      session: { turns: { dist: constant, value: 2 }, think_time_s: { dist: constant, value: 0.5 } }\n";
    let flow_control = "{ config: { apiVersion: llm-d.ai/v1alpha1, kind: EndpointPickerConfig, featureGates: [flowControl], \
                        plugins: [ { type: queue-scorer } ], schedulingProfiles: [ { name: default, plugins: [ { pluginRef: queue-scorer } ] } ] } }";
    for (what, text) in [
        ("closed loop", scenario(ROUND_ROBIN, closed, "")),
        ("sessions", scenario(ROUND_ROBIN, POISSON, sessions)),
        ("flow control", scenario(flow_control, POISSON, "")),
        (
            "no delay to the engines",
            scenario(ROUND_ROBIN, POISSON, "").replace("router_engine_us: 100", "router_engine_us: 0"),
        ),
    ] {
        let Ok(scenario) = Scenario::parse(&text) else { panic!("{what}: {text}") };
        let cluster = assemble(&scenario, 3, &CostData::embedded(), &options(2)).unwrap();
        assert!(!cluster.simulation.in_lanes(), "{what}");
    }
    let open = Scenario::parse(&scenario(ROUND_ROBIN, POISSON, "")).unwrap();
    assert!(assemble(&open, 3, &CostData::embedded(), &options(2)).unwrap().simulation.in_lanes());
}
