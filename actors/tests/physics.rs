//! The simulated engine respects physics at low load: a decode step of Llama-3.1-8B (BF16) on
//! one H100 streams 15.01 GB of weights at 3.35 TB/s, so no token comes faster than 4.48 ms, and
//! with nothing else running TPOT lies between that floor and twice it.

mod common;

use blis_actors::{RunOptions, run};

fn low_load() -> String {
    common::one_pool(
        None,
        Some("client_router_us: 300, router_engine_us: 50"),
        1,
        "",
        r#"
  clients:
    - name: a
      requests: 40
      arrival: { process: poisson, rate_per_s: 0.2 }
      input_tokens: { dist: uniform, min: 50, max: 500 }
      output_tokens: { dist: uniform, min: 50, max: 300 }
"#,
    )
}

/// Weight bytes ÷ HBM bandwidth, µs.
const FLOOR_US: f64 = 4_480.0;

#[test]
fn tokens_never_beat_the_weight_bandwidth_floor_and_tpot_stays_within_twice_it() {
    let output = run(&low_load(), RunOptions::default(), &mut |_| {}).unwrap();
    assert_eq!(output.result.fates.completed, 40);
    for call in &output.calls {
        assert!(call.token_latency_us[1..].iter().all(|&gap| gap as f64 >= FLOOR_US), "{}", call.request_id);
    }
    let metrics = output.result.metrics.clone().unwrap();
    let tpot = metrics.tpot_ms.unwrap();
    assert!(tpot.mean * 1_000.0 >= FLOOR_US && tpot.p99 * 1_000.0 <= 2.0 * FLOOR_US, "TPOT {tpot:?}");
    // TTFT covers the network both ways and at least one step over the whole prompt.
    let ttft = metrics.ttft_ms.unwrap();
    assert!(ttft.p50 * 1_000.0 > FLOOR_US + 2.0 * 350.0, "TTFT {ttft:?}");
}
