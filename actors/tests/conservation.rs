//! Conservation: every arrival has exactly one fate (also when a horizon cuts the run), and the
//! KV blocks of every engine are conserved after every step.

use std::cell::RefCell;
use std::rc::Rc;

use blis_actors::{ClusterMessage, RunOptions, assemble, run};
use blis_contracts::{Fate, Scenario};
use blis_costmodel::CostData;
use blis_kernel::{HostKind, Observer, TransitionRecord, Value};

fn scenario(horizon: &str, rate: u32, requests: u32, extra_args: &str) -> String {
    format!(
        r#"
{horizon}
cluster:
  router: {{ policy: round-robin }}
  pools:
    - name: p
      replicas: 2
      hardware: {{ chip: H100-SXM }}
      model: Llama-3.1-8B
      engine:
        kind: vllm
        version: "0.15.1"
        args:
          max_model_len: 4096
{extra_args}
workload:
  clients:
    - name: a
      requests: {requests}
      arrival: {{ process: poisson, rate_per_s: {rate} }}
      input_tokens: {{ dist: uniform, min: 16, max: 2000 }}
      output_tokens: {{ dist: uniform, min: 1, max: 600 }}
    - name: b
      requests: {requests}
      arrival: {{ process: poisson, rate_per_s: {rate} }}
      input_tokens: {{ dist: constant, value: 3000 }}
      output_tokens: {{ dist: constant, value: 2000 }}
"#
    )
}

#[test]
fn a_horizon_cut_leaves_every_arrival_with_one_fate() {
    // Overloaded (a 24,000-token cache for ~1,000 tokens a request at 40 per second), cut at
    // 20 s, so requests wait at the horizon; client b's requests (3000 + 2000 > 4096) are all
    // dropped.
    let text = scenario("horizon_s: 20", 40, 1_000, "          num_gpu_blocks_override: 1500");
    let output = run(&text, RunOptions::default(), &mut |_| {}).unwrap();
    let f = output.result.fates;
    assert!(f.conserved(), "{f:?}");
    assert_eq!(f.arrivals, output.calls.len() as u64);
    assert!(
        f.dropped > 0 && f.completed > 0 && f.in_flight_at_horizon > 0 && f.queued_at_horizon > 0,
        "{f:?}"
    );
    // (A call sent in the last instants may still be in the API server at the horizon.)
    assert!(
        output
            .calls
            .iter()
            .filter(|c| c.client == "b" && c.arrival_us < 19_000_000)
            .all(|c| c.fate == Fate::Dropped { reason: "exceeds_max_model_len".into() })
    );
    assert_eq!(output.result.simulation.end_time_us, 20_000_000);
    // Every arrival happened before the horizon.
    assert!(output.calls.iter().all(|c| c.arrival_us <= 20_000_000));
}

/// Checks, after every engine transition, that free + held + null = all blocks.
#[derive(Default)]
struct BlockAudit {
    checked: Rc<RefCell<u64>>,
}

impl Observer<ClusterMessage> for BlockAudit {
    fn wants_descriptions(&self) -> bool {
        true
    }

    fn on_transition(&mut self, record: &TransitionRecord<'_>) {
        if !record.name.starts_with("engine/") {
            return;
        }
        let entries = record.description.expect("descriptions were asked for").entries();
        let get = |key: &str| match entries.iter().find(|(k, _)| *k == key) {
            Some((_, Value::U64(v))) => *v,
            other => panic!("{key}: {other:?}"),
        };
        assert_eq!(
            get("kv_blocks_free") + get("kv_blocks_held") + 1,
            get("kv_blocks_total"),
            "{} at {}",
            record.name,
            record.now
        );
        *self.checked.borrow_mut() += 1;
    }
}

#[test]
fn kv_blocks_are_conserved_after_every_step_under_preemption() {
    // A tiny KV cache (1,200 blocks of 16 tokens) under load forces preemptions.
    let text = scenario("", 30, 300, "          num_gpu_blocks_override: 1200");
    let scenario = Scenario::parse(&text).unwrap();
    let mut cluster = assemble(
        &scenario,
        7,
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
    let audit = BlockAudit::default();
    let checked = audit.checked.clone();
    cluster.simulation.observe(audit);
    cluster.simulation.run().unwrap();
    assert!(*checked.borrow() > 1_000, "the audit ran on {} transitions", checked.borrow());
    let mut finished = cluster.simulation.finish();
    let preemptions: u64 = cluster
        .engines
        .iter()
        .map(|&id| {
            finished.take_actor::<blis_actors::EngineHost>(id).unwrap().engine().counters().preemptions
        })
        .sum();
    assert!(preemptions > 0, "the tiny cache must force preemptions");
}
