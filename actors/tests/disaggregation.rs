//! Prefill/decode disaggregation end to end: pools labelled as llm-d labels them, vLLM's
//! NixlConnector on both, llm-d's disagg profile handler picking the pairs, the decode sidecar
//! running the prefill leg and the decode leg, and the KV cache read over the fabric (NVLink
//! within a node, the NICs between nodes).

use std::cell::RefCell;
use std::rc::Rc;

use blis_actors::{ClusterMessage, RunError, RunOptions, RunOutput, assemble, run};
use blis_contracts::{CallRecord, Scenario};
use blis_costmodel::CostData;
use blis_kernel::{HostKind, Instant, Observer};

/// llm-d's P/D router: decode first, then prefill when at least `non_cached` prompt tokens are
/// not cached at the decode winner.
fn router(non_cached: u32) -> String {
    format!(
        "{{ config: {{ apiVersion: llm-d.ai/v1alpha1, kind: EndpointPickerConfig, plugins: [\
         {{type: prefix-based-pd-decider, parameters: {{nonCachedTokens: {non_cached}}}}}, {{type: decode-filter}}, \
         {{type: prefill-filter}}, {{type: queue-scorer}}, \
         {{type: disagg-profile-handler, parameters: {{deciders: {{prefill: prefix-based-pd-decider}}}}}}], \
         schedulingProfiles: [\
         {{name: decode, plugins: [{{pluginRef: decode-filter}}, {{pluginRef: queue-scorer}}]}}, \
         {{name: prefill, plugins: [{{pluginRef: prefill-filter}}, {{pluginRef: queue-scorer}}]}}] }} }}"
    )
}

const NIXL: &str = "kv_transfer_config: { kv_connector: NixlConnector, kv_role: kv_both }";

/// A pool of `replicas` H100s serving Llama-3.1-8B with `role` and engine `args`.
fn pool(name: &str, replicas: u32, role: Option<&str>, args: &str) -> String {
    let labels = role.map_or_else(String::new, |r| format!("      labels: {{ llm-d.ai/role: {r} }}\n"));
    format!(
        "    - name: {name}\n      replicas: {replicas}\n{labels}      hardware: {{ chip: H100-SXM }}\n      \
         model: Llama-3.1-8B\n      engine: {{ kind: vllm, version: \"0.15.1\", args: {{ {args} }} }}\n"
    )
}

/// A client `name` sending `requests` calls of 50–3000 prompt tokens at 6 per second, each
/// given up on after `timeout_s` if set.
fn client(name: &str, requests: u32, timeout_s: Option<f64>) -> String {
    let timeout = timeout_s.map_or_else(String::new, |t| format!("      timeout_s: {t}\n"));
    format!(
        "    - name: {name}\n      requests: {requests}\n      arrival: {{ process: poisson, rate_per_s: 6 }}\n{timeout}      \
         input_tokens: {{ dist: uniform, min: 50, max: 3000 }}\n      output_tokens: {{ dist: uniform, min: 10, max: 120 }}\n"
    )
}

/// `pools` behind `router` on `fabric`, with `clients`.
fn scenario(router: &str, fabric: &str, pools: &str, clients: &str) -> String {
    format!(
        "seed: 3\nframe: {{ replications: 1 }}\ncluster:\n  network: {{ client_router_us: 200, router_engine_us: 50 }}\n  \
         fabric: {fabric}\n  router: {router}\n  pools:\n{pools}workload:\n  clients:\n{clients}"
    )
}

fn one_p_two_d(fabric: &str) -> String {
    let pools = pool("prefill", 1, Some("prefill"), NIXL) + &pool("decode", 2, Some("decode"), NIXL);
    scenario(&router(256), fabric, &pools, &client("a", 60, None))
}

fn options() -> RunOptions {
    RunOptions { threads: Some(1), ..RunOptions::default() }
}

/// KV bytes of one 16-token block of Llama-3.1-8B: 32 layers × K,V × 8 heads × 128 × 2 B × 16.
const BLOCK_BYTES: u64 = 2 << 20;

fn disaggregated(out: &RunOutput) -> Vec<&CallRecord> {
    out.calls.iter().filter(|c| c.disaggregated.is_some()).collect()
}

#[test]
fn a_pd_run_records_prefill_instance_decode_instance_and_transfer_with_ttft_within_e2e() {
    let out = run(&one_p_two_d("{ nodes: 1, gpus_per_node: 8 }"), options(), &mut |_| {}).unwrap();
    assert_eq!(out.result.fates.completed, 60, "{:?}", out.result.fates);
    let pd = disaggregated(&out);
    assert!(pd.len() > 30, "long prompts are disaggregated: {} of 60", pd.len());
    for call in &out.calls {
        let (ttft, e2e) = (call.ttft_us().unwrap(), call.e2e_us().unwrap());
        assert!(ttft <= e2e, "{}: TTFT {ttft} > E2E {e2e}", call.request_id);
        assert!(call.instance.starts_with("engine/decode-"), "{call:?}");
        match &call.disaggregated {
            Some(d) => {
                assert!(d.prefill_instance.starts_with("engine/prefill-"), "{call:?}");
                // The decode side reads the prompt's blocks it does not hold, whole blocks.
                let blocks = u64::from(call.input_tokens).div_ceil(16);
                assert!(d.kv_bytes > 0 && d.kv_bytes <= blocks * BLOCK_BYTES, "{call:?}");
                assert_eq!(d.kv_bytes % BLOCK_BYTES, 0, "{call:?}");
                // NVLink 4 at 450 GB/s: 2 MiB takes ~4.7 µs; a whole prompt well under a millisecond.
                let us = d.transfer_us.expect("the read finished");
                assert!(us > 0 && us < 1_000, "{call:?}");
                // The first token comes from the decode side after the prefill leg and the read.
                assert!(ttft > us, "{call:?}");
            }
            // Short prompts (< 256 uncached tokens) run on the decode instance alone.
            None => assert!(call.input_tokens < 256 + 16 || call.cached_tokens > 0, "{call:?}"),
        }
    }
    assert!(out.calls.iter().any(|c| c.disaggregated.is_none()), "short prompts are served aggregated");
    // The instances' records add up to the calls'.
    let records: Vec<_> =
        out.result.instances.iter().map(|i| (i.name.as_str(), i.disaggregation.clone().unwrap())).collect();
    let sum = |f: fn(&blis_contracts::DisaggregationRecord) -> u64, prefix: &str| -> u64 {
        records.iter().filter(|(n, _)| n.starts_with(prefix)).map(|(_, r)| f(r)).sum()
    };
    assert_eq!(sum(|r| r.prefill_legs, "engine/prefill-"), pd.len() as u64);
    assert_eq!(sum(|r| r.decoded, "engine/decode-"), pd.len() as u64);
    assert_eq!(sum(|r| r.reads, "engine/decode-"), pd.len() as u64);
    let bytes: u64 = pd.iter().map(|c| c.disaggregated.as_ref().unwrap().kv_bytes).sum();
    assert_eq!(sum(|r| r.bytes_read, "engine/decode-"), bytes);
    assert_eq!(sum(|r| r.prefill_legs, "engine/decode-") + sum(|r| r.reads, "engine/prefill-"), 0);
    // Same seed, same bytes.
    let again = run(&one_p_two_d("{ nodes: 1, gpus_per_node: 8 }"), options(), &mut |_| {}).unwrap();
    assert_eq!(serde_json::to_string(&out.calls).unwrap(), serde_json::to_string(&again.calls).unwrap());
}

#[test]
fn reads_between_nodes_cross_the_nics_and_take_longer_than_over_nvlink() {
    let nvlink = run(&one_p_two_d("{ nodes: 1, gpus_per_node: 8 }"), options(), &mut |_| {}).unwrap();
    // One GPU per node: every read leaves its node, over 400 Gb/s NICs.
    let rdma = run(&one_p_two_d("{ nodes: 3, gpus_per_node: 1 }"), options(), &mut |_| {}).unwrap();
    assert_eq!(rdma.result.fates.completed, 60);
    let mean = |out: &RunOutput| {
        let pd = disaggregated(out);
        let per_mib: f64 = pd
            .iter()
            .map(|c| {
                let d = c.disaggregated.as_ref().unwrap();
                d.transfer_us.unwrap() as f64 / (d.kv_bytes as f64 / f64::from(1 << 20))
            })
            .sum();
        per_mib / pd.len() as f64
    };
    let (fast, slow) = (mean(&nvlink), mean(&rdma));
    // 450 GB/s vs 50 GB/s (bounded by PCIe Gen5 at 64 GB/s): ~2.3 vs ~21 µs per MiB.
    assert!(fast < 4.0 && slow > 15.0 && slow < 30.0, "µs per MiB: NVLink {fast}, RDMA {slow}");
}

fn take<T: Observer<ClusterMessage>>(observer: Box<dyn Observer<ClusterMessage>>) -> T {
    let observer: Box<dyn std::any::Any> = observer;
    *observer.downcast::<T>().expect("the observer comes back as attached")
}

#[test]
fn a_pd_run_is_the_same_on_the_parity_host_draws_a_valid_timeline_and_replays_without_divergence() {
    use blis_actors::{run_observed, timeline_group};
    use blis_kernel::SimTime;
    use blis_kernel::record::{MessageLog, RecordedRun, ReplayCheck};
    use blis_kernel::timeline::{TimelineFilter, TimelineWriter, check};

    let text = one_p_two_d("{ nodes: 3, gpus_per_node: 1 }");
    let inline = run(&text, options(), &mut |_| {}).unwrap();
    let tasks = run(&text, RunOptions { host: HostKind::Tasks, ..options() }, &mut |_| {}).unwrap();
    assert_eq!(inline.result_json(), tasks.result_json());
    assert_eq!(inline.calls_jsonl(), tasks.calls_jsonl());
    // The timeline (with the prefill legs and the reads noted) passes Perfetto's rules.
    let writer = TimelineWriter::new(Vec::new(), TimelineFilter::default(), Box::new(timeline_group), &[]);
    let data = CostData::embedded();
    let (out, mut observers) =
        run_observed(&text, options(), &data, vec![Box::new(writer)], &mut |_| {}).unwrap();
    let writer = take::<TimelineWriter<Vec<u8>>>(observers.remove(0));
    let trace = writer.finish(SimTime::from_micros(out.result.simulation.end_time_us)).unwrap();
    let trace = String::from_utf8(trace).unwrap();
    assert!(trace.contains("prefill-leg") && trace.contains("kv-read"));
    let violations = check(&trace);
    assert!(violations.is_empty(), "{:?}", &violations[..violations.len().min(5)]);
    // Record, then replay against the recording.
    let log = MessageLog::new(Vec::new(), &text);
    let (out, mut observers) =
        run_observed(&text, options(), &data, vec![Box::new(log)], &mut |_| {}).unwrap();
    let bytes = take::<MessageLog<Vec<u8>>>(observers.remove(0))
        .finish(&out.comparable_digest().expect("the digest is computed"))
        .unwrap();
    let recorded = RecordedRun::read(bytes.as_slice()).unwrap();
    let replay: Box<dyn Observer<ClusterMessage>> =
        Box::new(ReplayCheck::<ClusterMessage>::new(recorded.deliveries.clone()));
    let (replayed, mut observers) =
        run_observed(&recorded.inputs, options(), &data, vec![replay], &mut |_| {}).unwrap();
    let replay = take::<ReplayCheck<ClusterMessage>>(observers.remove(0));
    assert_eq!(replay.outcome(), None);
    assert_eq!(
        recorded.trailer.as_deref(),
        Some(replayed.comparable_digest().expect("a replay computes the digest").as_str())
    );
}

/// Collects the violations the actors' own checks find (a checked run).
#[derive(Default)]
struct Violations {
    found: Rc<RefCell<Vec<String>>>,
}

impl Observer<ClusterMessage> for Violations {
    fn wants_checks(&self) -> bool {
        true
    }

    fn on_violation(&mut self, now: Instant, actor: &str, violation: &str) {
        self.found.borrow_mut().push(format!("{actor} at {now:?}: {violation}"));
    }
}

/// Run `text` checked (every engine's invariants after each of its transitions, KV blocks
/// conserved among them); returns the engine hosts at the end.
fn checked(text: &str) -> Vec<blis_actors::EngineHost> {
    let scenario = Scenario::parse(text).unwrap();
    let mut cluster = assemble(
        &scenario,
        11,
        &CostData::embedded(),
        &blis_actors::AssemblyOptions {
            host: HostKind::Inline,
            base_dir: ".".into(),
            keep_released: false,
            released_token_ids: false,
            fault: None,
            draw_ahead: false,
            lane_threads: 1,
            faithful_steps: false,
        },
    )
    .unwrap();
    let violations = Violations::default();
    let found = violations.found.clone();
    cluster.simulation.observe(violations);
    cluster.simulation.run().unwrap();
    assert!(found.borrow().is_empty(), "{:#?}", found.borrow());
    let mut finished = cluster.simulation.finish();
    cluster.engines.iter().map(|&id| finished.take_actor::<blis_actors::EngineHost>(id).unwrap()).collect()
}

#[test]
fn kv_blocks_are_conserved_and_none_leak_when_calls_are_aborted_before_during_or_after_their_transfer() {
    // Client timeouts spread over the life of a disaggregated call: the shortest fire during the
    // prefill leg, the longer ones while the decode side waits for or reads the KV, or while it
    // decodes. Slow cross-node reads (1 GPU a node) widen the transfer window.
    let clients: String = [0.01, 0.03, 0.05, 0.07, 0.09, 0.12, 0.2]
        .iter()
        .enumerate()
        .map(|(i, &t)| client(&format!("t{i}"), 30, Some(t)))
        .collect();
    let mut phases = [0u64; 3];
    for fabric in ["{ nodes: 3, gpus_per_node: 1 }", "{ nodes: 1, gpus_per_node: 8 }"] {
        let pools = pool("prefill", 1, Some("prefill"), NIXL) + &pool("decode", 2, Some("decode"), NIXL);
        let text = scenario(&router(256), fabric, &pools, &clients);
        let out = run(&text, options(), &mut |_| {}).unwrap();
        let f = &out.result.fates;
        assert!(f.conserved() && f.timed_out > 0 && f.completed > 0, "{fabric}: {f:?}");
        for host in checked(&text) {
            let aborts = host.pd_aborts();
            (0..3).for_each(|k| phases[k] += aborts[k]);
            let scheduler = host.engine().scheduler();
            let pool = scheduler.kv().pool();
            // Nothing is left running, and every block is back in the free pool except the ones
            // a prefill instance still holds for a read that will never come: a call given up
            // on after its prefill leg ended and before its decode leg reached the engine
            // (upstream frees those at the prefill instance's first step after 480 s,
            // VLLM_NIXL_ABORT_REQUEST_TIMEOUT).
            assert_eq!(scheduler.held().count(), 0, "{}", host.name());
            if host.name().starts_with("engine/decode-") {
                assert_eq!(scheduler.held_by_connector().count(), 0, "{}", host.name());
                assert_eq!(u64::from(pool.num_free()) + 1, u64::from(pool.num_blocks()), "{}", host.name());
            }
        }
    }
    assert!(phases.iter().all(|&n| n > 0), "aborts before, during and after the read: {phases:?}");
}

fn refusal(text: &str) -> blis_contracts::FieldError {
    match run(text, options(), &mut |_| {}) {
        Err(RunError::Input(e)) => e,
        Err(other) => panic!("expected a refusal, got {other}"),
        Ok(_) => panic!("expected a refusal, the run succeeded"),
    }
}

#[test]
fn misconfigured_pd_deployments_are_refused_with_path_value_and_cause() {
    let fabric = "{ nodes: 1, gpus_per_node: 8 }";
    // A decode pool with NixlConnector and no prefill pool.
    let pools = pool("decode", 2, Some("decode"), NIXL);
    let e = refusal(&scenario(&router(256), fabric, &pools, &client("a", 4, None)));
    assert_eq!(
        (e.path.as_str(), e.value.as_deref()),
        ("cluster.pools[0].engine.args.kv_transfer_config.kv_connector", Some("NixlConnector"))
    );
    assert!(e.cause.contains("no pool is labelled llm-d.ai/role: prefill"), "{e}");
    // The connector on one side only: a prefill pool without it...
    let pools = pool("prefill", 1, Some("prefill"), "") + &pool("decode", 2, Some("decode"), NIXL);
    let e = refusal(&scenario(&router(256), fabric, &pools, &client("a", 4, None)));
    assert_eq!(
        (e.path.as_str(), e.value.as_deref()),
        ("cluster.pools[0].engine.args.kv_transfer_config", Some("absent (no NixlConnector)"))
    );
    assert!(e.cause.contains("prefill profile 'prefill' can pick this pool"), "{e}");
    // ...or a decode pool without it.
    let pools = pool("prefill", 1, Some("prefill"), NIXL) + &pool("decode", 2, Some("decode"), "");
    let e = refusal(&scenario(&router(256), fabric, &pools, &client("a", 4, None)));
    assert_eq!(e.path, "cluster.pools[1].engine.args.kv_transfer_config");
    assert!(e.cause.contains("decode profile 'decode' can pick this pool"), "{e}");
    // Roles the router does not filter: a prefill pool the only profile can route whole
    // requests to.
    let pools = pool("prefill", 1, Some("prefill"), NIXL) + &pool("decode", 2, Some("decode"), NIXL);
    let e = refusal(&scenario("{ config: {} }", fabric, &pools, &client("a", 4, None)));
    assert_eq!(
        (e.path.as_str(), e.value.as_deref()),
        ("cluster.pools[0].labels.llm-d.ai/role", Some("prefill"))
    );
    assert!(e.cause.contains("profile 'default'") && e.cause.contains("add decode-filter"), "{e}");
    // Nor can the round-robin baseline disaggregate.
    let e = refusal(&scenario("{ policy: round-robin }", fabric, &pools, &client("a", 4, None)));
    assert_eq!(e.path, "cluster.pools[0].labels.llm-d.ai/role");
    assert!(e.cause.contains("round-robin baseline"), "{e}");
    // One engine id for several instances.
    let shared = "kv_transfer_config: { kv_connector: NixlConnector, kv_role: kv_both, engine_id: p }";
    let pools = pool("prefill", 2, Some("prefill"), shared) + &pool("decode", 2, Some("decode"), NIXL);
    let e = refusal(&scenario(&router(256), fabric, &pools, &client("a", 4, None)));
    assert_eq!(
        (e.path.as_str(), e.value.as_deref()),
        ("cluster.pools[0].engine.args.kv_transfer_config.engine_id", Some("\"p\""))
    );
}

#[test]
fn instances_that_both_prefill_and_decode_serve_either_side_and_never_read_from_themselves() {
    let pools = pool("both", 3, Some("both"), NIXL);
    let text = scenario(&router(256), "{ nodes: 1, gpus_per_node: 8 }", &pools, &client("a", 60, None));
    let out = run(&text, options(), &mut |_| {}).unwrap();
    assert_eq!(out.result.fates.completed, 60);
    let pd = disaggregated(&out);
    assert!(!pd.is_empty());
    for call in &pd {
        let d = call.disaggregated.as_ref().unwrap();
        assert_ne!(d.prefill_instance, call.instance, "{call:?}");
        assert!(d.kv_bytes > 0);
    }
    // Every instance took both sides.
    for i in &out.result.instances {
        let r = i.disaggregation.as_ref().unwrap();
        assert!(r.prefill_legs > 0 && r.decoded > 0, "{}: {r:?}", i.name);
    }
}

#[test]
fn every_pd_example_scenario_assembles() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/scenarios/pd");
    let mut names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    names.sort();
    assert!(names.len() >= 10, "{names:?}");
    for path in names {
        let text = std::fs::read_to_string(&path).unwrap();
        let scenario = Scenario::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let options = blis_actors::AssemblyOptions {
            host: HostKind::Inline,
            base_dir: dir.clone(),
            keep_released: false,
            released_token_ids: false,
            fault: None,
            draw_ahead: false,
            lane_threads: 1,
            faithful_steps: false,
        };
        if let Err(e) = assemble(&scenario, 1, &CostData::embedded(), &options) {
            panic!("{}: {e}", path.display());
        }
    }
}

#[test]
fn a_decode_instance_that_livelocks_as_vllm_does_stops_the_run_naming_it() {
    // The upstream stall of `traces/vllm-0.15.1/nixl-d-stall-*`: on a decode instance with one
    // sequence slot and too few blocks, parked and ready requests hold their prompts' blocks, and
    // the head of the queue cannot get the blocks it needs (here it is never admitted after one
    // preemption), and the instance polls every millisecond forever. Before the livelock rule
    // counted empty steps this run never ended (4 of 30 calls answered at 210,000 s simulated);
    // now it stops at 10.2 s simulated, after 16 × max_model_len empty polls.
    let decode = "kv_transfer_config: { kv_connector: NixlConnector, kv_role: kv_both }, max_num_seqs: 1, \
                  num_gpu_blocks_override: 40, max_model_len: 512, max_num_batched_tokens: 512, \
                  enable_prefix_caching: false";
    let pools = pool("prefill", 1, Some("prefill"), NIXL) + &pool("decode", 1, Some("decode"), decode);
    let clients = "    - name: a\n      requests: 30\n      arrival: { process: poisson, rate_per_s: 40 }\n      \
                   input_tokens: { dist: uniform, min: 200, max: 400 }\n      output_tokens: { dist: uniform, min: 50, max: 100 }\n";
    let text = scenario(&router(16), "{ nodes: 1, gpus_per_node: 8 }", &pools, clients);
    match run(&text, options(), &mut |_| {}) {
        Err(RunError::Stalled { instance, reason, .. }) => {
            assert_eq!(instance, "engine/decode-0");
            assert!(reason.contains("livelock"), "reason: {reason}");
        }
        Err(other) => panic!("expected a livelock, got {other}"),
        Ok(out) => panic!("expected a livelock, the run finished with {} calls", out.calls.len()),
    }
}
