//! Decision-level tests of the SGLang scheduler's subtle rules, each outcome written out
//! (SGLang 0.5.23; the same rules are recorded from the release in `traces/sglang-0.5.23/`).

use blis_engines::sglang::scheduler::{
    BatchKind, Finish, RequestId, SchedulePolicy, Scheduler, SchedulerConfig,
};

#[path = "support/sglang_config.rs"]
mod sglang_config;
use sglang_config::Knobs;

fn config(pool: usize, policy: SchedulePolicy, max_running: usize, decay_steps: f64) -> SchedulerConfig {
    sglang_config::config(Knobs {
        page_size: 1,
        pool_tokens: pool,
        chunked_prefill_size: Some(64),
        max_running,
        policy,
        decay_steps,
        overlap: false,
        mixed_chunk: false,
    })
}

/// Run one normal-loop step: form, apply (outputs never EOS), record; the batch's requests.
fn step(sched: &mut Scheduler) -> Option<(BatchKind, Vec<RequestId>)> {
    let batch = sched.next_batch();
    let seen = batch.as_ref().map(|b| (b.kind.clone(), b.requests.clone()));
    match &batch {
        Some(b) => sched.process_result(b, |_, k| 1000 + k as u32),
        None => {
            sched.on_idle();
        }
    }
    sched.set_last_batch(batch);
    seen
}

fn tokens(start: u32, count: u32) -> Vec<u32> {
    (start..start + count).collect()
}

#[test]
fn retraction_takes_the_fewest_outputs_first_and_on_a_tie_the_longest_prompt() {
    // `retract-ties`: request 0 runs alone; 1 and 2 are admitted together in step 10 under the
    // decayed ratio, overcommitting the 200-token pool. When decode stops fitting, 1 and 2 have
    // equally few outputs, and 2 (20 prompt tokens against 12) is retracted.
    let mut sched = Scheduler::new(config(200, SchedulePolicy::Fcfs, 16, 2.0)).expect("valid");
    sched.add_request(tokens(3, 10), 100);
    let mut first_retraction = None;
    for n in 0..200 {
        if n == 10 {
            sched.add_request(tokens(100, 12), 60);
            sched.add_request(tokens(200, 20), 60);
        }
        step(&mut sched);
        if first_retraction.is_none() && !sched.retracted().is_empty() {
            first_retraction = Some((n, sched.retracted().to_vec()));
        }
    }
    assert_eq!(first_retraction, Some((60, vec![2])));
    // The retracted request re-prefills its prompt and outputs later and still finishes.
    assert_eq!(sched.finish_of(2), Some(Finish::Length));
    assert!(sched.ever_retracted(2) && !sched.ever_retracted(1));
}

#[test]
fn lpm_admits_the_longest_cached_prefix_first_but_behaves_as_fcfs_above_128_waiting() {
    for (waiting, expected_head) in [(128, 127), (129, 0)] {
        let mut sched = Scheduler::new(config(4_000, SchedulePolicy::Lpm, 1, 600.0)).expect("valid");
        // Cache a 40-token prompt, then queue requests whose last one extends it.
        let cached = tokens(3, 40);
        let (warm, _) = sched.add_request(cached.clone(), 1);
        while sched.finish_of(warm).is_none() {
            step(&mut sched);
        }
        let mut last = RequestId::MAX;
        for i in 0..waiting {
            let prompt = if i + 1 == waiting {
                [cached.clone(), vec![900]].concat()
            } else {
                tokens(1_000 + 8 * i as u32, 8)
            };
            last = sched.add_request(prompt, 1).0;
        }
        let (kind, admitted) = step(&mut sched).expect("a prefill");
        assert_eq!(kind, BatchKind::Extend);
        let head = if expected_head == 0 { last + 1 - waiting } else { last };
        assert_eq!(admitted, vec![head], "{waiting} waiting");
    }
}

#[test]
fn a_request_whose_reservation_equals_what_remains_is_refused() {
    // `admission-boundary`: 100 slots. Request 0 reserves 20 + 1 + 10 = 31, leaving 69; request 1
    // needs 30 + 38 + 1 = 69, which is not below 69: it waits for the next pass, and the batch
    // is full until request 0 has run.
    let mut sched = Scheduler::new(config(100, SchedulePolicy::Fcfs, 16, 600.0)).expect("valid");
    sched.add_request(tokens(3, 20), 10);
    sched.add_request(tokens(100, 30), 38);
    let (_, first) = step(&mut sched).expect("a prefill");
    assert_eq!(first, vec![0]);
    assert!(sched.batch_is_full());
    assert_eq!(sched.waiting(), &[1]);
    let (kind, second) = step(&mut sched).expect("a prefill");
    assert_eq!((kind, second), (BatchKind::Extend, vec![1]));
}

#[test]
fn under_lpm_a_request_sharing_a_new_prefix_with_one_ahead_waits_behind_an_unrelated_one() {
    // `lpm-in-batch-dedup`: three requests share a new 40-token prefix, an unrelated one arrives
    // last; with two running slots the first sharer and the unrelated one go first.
    let mut sched = Scheduler::new(config(400, SchedulePolicy::Lpm, 2, 600.0)).expect("valid");
    let prefix = tokens(3, 40);
    for i in 0..3 {
        sched.add_request([prefix.clone(), tokens(500 + 10 * i, 6)].concat(), 8);
    }
    sched.add_request(tokens(700, 20), 8);
    let (_, admitted) = step(&mut sched).expect("a prefill");
    assert_eq!(admitted, vec![0, 3]);
    assert_eq!(sched.waiting(), &[1, 2]);
}

#[test]
fn the_random_policy_is_refused_without_a_shuffle_source() {
    let refused =
        Scheduler::new(config(100, SchedulePolicy::Random, 4, 600.0)).expect_err("no shuffle source");
    assert_eq!(refused.to_string(), "the random schedule policy needs a shuffle source");
}

#[test]
fn steps_are_shaped_as_the_release_runs_them_chunks_not_sampling_and_graphs_padding() {
    use blis_contracts::{StepGraph, StepRequest, StepShape};
    use blis_engines::sglang::defaults::{decode_graph_batch_sizes, prefill_graph_token_buckets};
    use blis_engines::sglang::scheduler::GraphPolicy;

    let mut c = config(400, SchedulePolicy::Fcfs, 16, 600.0);
    c.chunked_prefill_size = Some(16);
    let mut sched = Scheduler::new(c).expect("valid");
    let graphs = GraphPolicy {
        decode_sizes: decode_graph_batch_sizes(8, false),
        prefill_buckets: prefill_graph_token_buckets(16),
    };
    sched.add_request(tokens(3, 20), 3);
    sched.add_request(tokens(100, 10), 3);
    let row = |new_tokens, context_tokens, samples| StepRequest { new_tokens, context_tokens, samples };
    let mut shapes = Vec::new();
    for _ in 0..3 {
        let batch = sched.next_batch().expect("a batch");
        let mut shape = StepShape::default();
        sched.step_shape(&batch, &graphs, &mut shape);
        shapes.push((shape.requests.clone(), shape.padded_tokens, shape.graph));
        sched.process_result(&batch, |_, k| 1000 + k as u32);
        sched.set_last_batch(Some(batch));
    }
    assert_eq!(
        shapes,
        vec![
            // The first 16 of 20 prompt tokens: a middle chunk samples nothing; bucket 16.
            (vec![row(16, 0, false)], 16, StepGraph::Piecewise),
            // The last 4 tokens, then the second prompt whole in the 12 the chunk has left;
            // 14 tokens replay the 16-token bucket.
            (vec![row(4, 16, true), row(10, 0, true)], 16, StepGraph::Piecewise),
            // Both decode their first output over their prompts; two rows replay size 2.
            (vec![row(1, 20, true), row(1, 10, true)], 2, StepGraph::Full),
        ]
    );
}
