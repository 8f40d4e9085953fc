//! The engine host's loop in simulated time: synchronously every step costs its host (CPU) time
//! plus its device time; asynchronously the next step is scheduled while the device runs, so a
//! lone decoding request's tokens come one device step apart and the host time disappears from
//! the token gaps — but not from the first token, whose step nothing precedes.

mod common;

use blis_actors::{RunOptions, RunOutput, run};
use blis_costmodel::{CostData, Family};

/// One instance, requests far apart (each runs alone), CUDA graphs off so both modes price the
/// same shapes.
fn lone_requests() -> String {
    common::one_pool(
        Some(3),
        None,
        1,
        "enforce_eager: true, async_scheduling: ASYNC",
        r#"
  clients:
    - name: a
      requests: 12
      arrival: { process: poisson, rate_per_s: 0.05 }
      input_tokens: { dist: uniform, min: 50, max: 900 }
      output_tokens: { dist: uniform, min: 2, max: 120 }
"#,
    )
}

/// The embedded registry's CPU time on H100 of a step that runs one request and samples one
/// token (`host.step_us` + `request_us` + `sampled_token_us`), µs, rounded up as the engine
/// host rounds it.
fn host_step_us() -> u64 {
    let resolved = CostData::embedded().registry.resolve("H100-SXM");
    let host = resolved.get(Family::Host);
    (host.param("step_us") + host.param("request_us") + host.param("sampled_token_us")).ceil() as u64
}

fn run_mode(asynchronous: bool) -> RunOutput {
    let text = lone_requests().replace("ASYNC", &asynchronous.to_string());
    run(&text, RunOptions::default(), &mut |_| {}).unwrap()
}

#[test]
fn asynchronous_scheduling_hides_the_host_time_between_tokens_and_not_before_the_first() {
    let (synchronous, asynchronous) = (run_mode(false), run_mode(true));
    assert_eq!(synchronous.calls.len(), 12);
    let host = host_step_us();
    assert!(host > 0);
    let mut gaps = 0;
    for (sync_call, async_call) in synchronous.calls.iter().zip(&asynchronous.calls) {
        assert_eq!(sync_call.request_id, async_call.request_id);
        let (s, a) = (&sync_call.token_latency_us, &async_call.token_latency_us);
        assert_eq!(s.len(), a.len());
        // The first token: host time then the prefill, in both modes.
        assert_eq!(s[0], a[0], "{}", sync_call.request_id);
        // Every later token: the same device step, plus the host time only when synchronous.
        for k in 1..s.len() {
            assert_eq!(s[k], a[k] + host, "{} token {k}", sync_call.request_id);
            gaps += 1;
        }
    }
    assert!(gaps > 300, "{gaps} gaps compared");
}
