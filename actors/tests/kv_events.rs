//! KV events end to end: with a config whose precise producer subscribes to them, every engine
//! step that cached or evicted blocks publishes one batch to the router, which arrives exactly
//! the network delay plus `kv_events_delay_s` after the step ended and never before the request
//! whose blocks it reports reached the engine; with no such config no engine publishes any; and
//! runs that route on them are byte-identical on both hosts and any thread count.

mod byte_identity;

use std::collections::BTreeMap;
use std::path::PathBuf;

use blis_actors::{ClusterMessage, RunOptions, run_observed};
use blis_costmodel::CostData;
use blis_kernel::Mark;
use blis_kernel::{Envelope, Observer, TransitionRecord};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

const ROUTER_ENGINE_US: u64 = 100;
const KV_EVENTS_DELAY_US: u64 = 2_000;

/// Two instances behind `router`, one client whose sessions share system prompts.
fn scenario(router: &str) -> String {
    format!(
        "seed: 5\nframe: {{ replications: 1 }}\ncluster:\n  network: {{ client_router_us: 500, router_engine_us: \
         {ROUTER_ENGINE_US} }}\n  router: {router}\n  pools:\n    - name: h100\n      replicas: 2\n      hardware: {{ \
         chip: H100-SXM }}\n      model: Llama-3.1-8B\n      engine: {{ kind: vllm, version: \"0.15.1\", args: {{ \
         num_gpu_blocks_override: 400, max_model_len: 2048 }} }}\nworkload:\n  clients:\n    - name: chat\n      requests: 60\n      \
         arrival: {{ process: poisson, rate_per_s: 20 }}\n      shared_prefix: {{ groups: 3, tokens: 256 }}\n      \
         input_tokens: {{ dist: uniform, min: 50, max: 300 }}\n      output_tokens: {{ dist: uniform, min: 10, max: \
         40 }}\n"
    )
}

/// What the test watches: each engine's step ends, each request's arrival at its engine (with
/// its prompt), and each KV-event batch's delivery to the router.
#[derive(Default)]
struct Watch {
    names: Vec<String>,
    step_ends: BTreeMap<String, Vec<u64>>,
    transitions: BTreeMap<String, Vec<u64>>,
    arrivals: Vec<(String, u64, Vec<u32>)>,
    batches: Vec<(String, u64, blis_router::precise_prefix::KvEventBatch)>,
}

impl Observer<ClusterMessage> for Watch {
    fn wants_descriptions(&self) -> bool {
        true
    }

    fn on_start(&mut self, actors: &[&str]) {
        self.names = actors.iter().map(|a| (*a).to_owned()).collect();
    }

    fn on_delivery(&mut self, envelope: &Envelope<ClusterMessage>) {
        let to = self.names[envelope.to.0 as usize].clone();
        let from = self.names[envelope.sender.0 as usize].clone();
        let at = envelope.key.time.as_micros();
        match &envelope.payload {
            ClusterMessage::Request(call) if to.starts_with("engine/") => {
                let mut sequence = call.request.prompt_token_ids.to_vec();
                sequence.extend_from_slice(&call.request.output_token_ids);
                self.arrivals.push((to, at, sequence));
            }
            ClusterMessage::KvEvents(batch) => {
                assert_eq!(to, "router", "KV events go to the router");
                self.batches.push((from, at, (**batch).clone()));
            }
            _ => {}
        }
    }

    fn on_transition(&mut self, record: &TransitionRecord<'_>) {
        self.transitions.entry(record.name.to_owned()).or_default().push(record.now.time.as_micros());
        let Some(notes) = record.notes else { return };
        for mark in notes.marks() {
            if let Mark::Span { lane: "steps", end, .. } = mark {
                self.step_ends.entry(record.name.to_owned()).or_default().push(end.as_micros());
            }
        }
    }
}

fn watch(router: &str) -> Watch {
    let (_, mut observers) = run_observed(
        &scenario(router),
        RunOptions { base_dir: Some(root()), threads: Some(1), ..RunOptions::default() },
        &CostData::embedded(),
        vec![Box::new(Watch::default())],
        &mut |_| {},
    )
    .unwrap();
    let observer: Box<dyn std::any::Any> = observers.remove(0);
    *observer.downcast::<Watch>().unwrap()
}

#[test]
fn kv_events_reach_the_router_after_the_step_plus_the_configured_delay() {
    let w = watch(&format!(
        "{{ config_file: fixtures/router-configs/precise-default.yaml, kv_events_delay_s: {} }}",
        KV_EVENTS_DELAY_US as f64 / 1e6
    ));
    assert!(w.batches.len() > 20, "only {} batches", w.batches.len());
    let mut stored = 0;
    for (engine, delivered, batch) in &w.batches {
        assert!(!batch.is_empty(), "vLLM publishes no empty batch");
        assert_eq!(*delivered, batch.ts_us + ROUTER_ENGINE_US + KV_EVENTS_DELAY_US, "{engine}");
        // Published as a step's outputs are applied: in one of the engine's transitions, at a
        // step's end or later (asynchronously, outputs wait until the host has launched the next
        // step when that takes longer than the device).
        assert!(
            w.transitions[engine].contains(&batch.ts_us),
            "{engine}: a batch stamped {} µs is no transition of the engine",
            batch.ts_us
        );
        assert!(
            w.step_ends[engine].iter().any(|&end| end <= batch.ts_us),
            "{engine}: a batch stamped {} µs before any step ended",
            batch.ts_us
        );
        for event in &batch.events {
            let blis_router::precise_prefix::KvEvent::BlockStored { tokens, block_size, medium, .. } = event
            else {
                continue;
            };
            assert_eq!((*block_size, medium.as_deref()), (16, Some("GPU")));
            // The blocks' tokens are a block-aligned run of some request's tokens: published only
            // after such a request reached this engine, and no earlier than the end of the first
            // step that ended after it had.
            let tokens = batch.tokens_of(*tokens);
            let holds = |sequence: &[u32]| {
                (0..sequence.len()).step_by(16).any(|at| sequence[at..].starts_with(tokens))
            };
            let arrived = w
                .arrivals
                .iter()
                .filter(|(e, _, sequence)| e == engine && holds(sequence))
                .map(|&(_, at, _)| at)
                .min()
                .unwrap_or_else(|| panic!("{engine} stored blocks no request brought"));
            assert!(
                batch.ts_us > arrived,
                "{engine}: stored at {} before the request arrived at {arrived}",
                batch.ts_us
            );
            let first_step_end = w.step_ends[engine].iter().copied().find(|&end| end > arrived).unwrap();
            assert!(
                batch.ts_us >= first_step_end,
                "{engine}: published before any step after the arrival ended"
            );
            stored += 1;
        }
    }
    assert!(stored > 100, "{stored}");
    let removed = w
        .batches
        .iter()
        .flat_map(|(_, _, b)| &b.events)
        .filter(|e| matches!(e, blis_router::precise_prefix::KvEvent::BlockRemoved { .. }))
        .count();
    assert!(removed > 0, "400 blocks per instance are too few to keep every prefix: evictions are reported");
}

#[test]
fn without_a_precise_producer_no_engine_publishes_kv_events() {
    let w = watch("{ config: {}, kv_events_delay_s: 0.002 }");
    assert!(w.batches.is_empty());
    assert!(!w.arrivals.is_empty());
}

#[test]
fn routing_on_kv_events_is_byte_identical_across_hosts_and_thread_counts() {
    let text =
        scenario("{ config_file: fixtures/router-configs/precise-default.yaml, kv_events_delay_s: 0.001 }");
    let reference = byte_identity::identical_across_hosts_and_threads(&text, Some(root()));
    // And the events change decisions: the approximate default routes differently.
    let approx = blis_actors::run(
        &scenario("{ config: {} }"),
        RunOptions { threads: Some(1), base_dir: Some(root()), ..RunOptions::default() },
        &mut |_| {},
    )
    .unwrap();
    assert!(approx.calls_jsonl() != reference.1);
}

#[test]
fn bad_kv_event_settings_are_refused_by_path_value_and_cause() {
    let refusal = |router: &str| match blis_actors::run(
        &scenario(router),
        RunOptions { threads: Some(1), base_dir: Some(root()), ..RunOptions::default() },
        &mut |_| {},
    ) {
        Err(blis_actors::RunError::Input(e)) => e,
        Err(other) => panic!("expected a refusal, got {other}"),
        Ok(_) => panic!("expected a refusal of {router}"),
    };
    let e = refusal("{ config: {}, kv_events_delay_s: 61 }");
    assert_eq!((e.path.as_str(), e.value.as_deref()), ("cluster.router.kv_events_delay_s", Some("61")));
    assert!(e.cause.contains("between 0 and 60 s"), "{e}");
    let e = refusal("{ policy: round-robin, kv_events_delay_s: 0.001 }");
    assert_eq!(e.path, "cluster.router.kv_events_delay_s");
    let e = refusal(
        "{ config: { apiVersion: llm-d.ai/v1alpha1, kind: EndpointPickerConfig, plugins: [ { type: \
         precise-prefix-cache-producer, parameters: { tokenProcessorConfig: { blockSizeTokens: -16 } } } ] } }",
    );
    assert_eq!(
        (e.path.as_str(), e.value.as_deref()),
        ("cluster.router.config.plugins[0].parameters.tokenProcessorConfig.blockSizeTokens", Some("-16"))
    );
    assert!(e.cause.contains("blockSizeTokens must be greater than 0, got -16"), "{e}");
}
