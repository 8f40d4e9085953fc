//! Decision-level tests of the vLLM port: for small hand-made cases, the schedule of every step
//! written out, as `../shared/reference/vllm-sglang.md` §A–B derives it.

use std::sync::Arc;

use blis_engines::vllm::{
    Admission, EngineRequest, FinishedRequest, KvCacheManager, Policy, Scheduler, SchedulerLimits,
    SchedulerOutput, UpdateOutput,
};

/// One scheduled request in a step: (key, new tokens, context tokens, samples a token).
type Slice = (u64, u32, u32, bool);

fn request(key: u64, prompt: u32, max_tokens: u32) -> EngineRequest {
    request_with(key, (0..prompt).collect(), max_tokens)
}

fn request_with(key: u64, prompt: Vec<u32>, max_tokens: u32) -> EngineRequest {
    EngineRequest {
        key,
        name: Arc::from(format!("r{key}")),
        priority: 0,
        prompt_token_ids: prompt.into(),
        output_token_ids: Arc::from(vec![7u32; max_tokens as usize]),
        arrival_us: 0,
    }
}

/// A manager without prefix caching (the rules below do not depend on it).
fn kv(blocks: u32, block_size: u32, max_model_len: u32) -> KvCacheManager {
    KvCacheManager::new(blocks, block_size, max_model_len, false)
}

fn limits(max_num_seqs: u32, max_num_batched_tokens: u32, max_model_len: u32) -> SchedulerLimits {
    SchedulerLimits {
        max_num_seqs,
        max_num_batched_tokens,
        max_model_len,
        enable_chunked_prefill: true,
        long_prefill_token_threshold: 0,
        policy: Policy::Fcfs,
        async_scheduling: false,
    }
}

/// Runs steps at times 1, 2, 3, … until idle; returns each step's slices, in schedule order, and
/// the finished requests.
fn run(scheduler: &mut Scheduler) -> (Vec<Vec<Slice>>, Vec<FinishedRequest>) {
    let mut steps = Vec::new();
    let mut finished = Vec::new();
    let mut now = 0;
    let (mut out, mut update) = (SchedulerOutput::default(), UpdateOutput::default());
    while scheduler.has_unfinished() {
        now += 1;
        assert!(now < 1_000, "no progress");
        scheduler.schedule(&mut out);
        steps.push(out.scheduled.iter().map(|s| (s.key, s.tokens, s.context, s.samples)).collect());
        scheduler.update_from_output(&out, now, &mut update);
        finished.append(&mut update.finished);
    }
    (steps, finished)
}

fn times(finished: &[FinishedRequest], key: u64) -> Vec<u64> {
    finished.iter().find(|f| f.key == key).expect("finished").token_times_us.clone()
}

#[test]
fn a_long_prompt_is_chunked_by_the_token_budget() {
    let mut s = Scheduler::new(limits(4, 8, 100), kv(20, 16, 100));
    s.add_request(&request(1, 20, 2));
    let (steps, finished) = run(&mut s);
    assert_eq!(
        steps,
        vec![vec![(1, 8, 0, false)], vec![(1, 8, 8, false)], vec![(1, 4, 16, true)], vec![(1, 1, 20, true)],]
    );
    assert_eq!(times(&finished, 1), vec![3, 4]);
}

#[test]
fn running_requests_come_first_and_a_new_prompt_gets_what_budget_is_left() {
    let mut s = Scheduler::new(limits(4, 10, 100), kv(20, 16, 100));
    s.add_request(&request(1, 6, 2));
    s.add_request(&request(2, 6, 2));
    let (steps, finished) = run(&mut s);
    assert_eq!(
        steps,
        vec![
            vec![(1, 6, 0, true), (2, 4, 0, false)],
            vec![(1, 1, 6, true), (2, 2, 4, true)],
            vec![(2, 1, 6, true)],
        ]
    );
    assert_eq!(times(&finished, 1), vec![1, 2]);
    assert_eq!(times(&finished, 2), vec![2, 3]);
}

#[test]
fn the_long_prefill_threshold_caps_each_request_per_step() {
    let mut limits = limits(4, 100, 100);
    limits.long_prefill_token_threshold = 3;
    let mut s = Scheduler::new(limits, kv(20, 16, 100));
    s.add_request(&request(1, 7, 1));
    let (steps, _) = run(&mut s);
    assert_eq!(steps, vec![vec![(1, 3, 0, false)], vec![(1, 3, 3, false)], vec![(1, 1, 6, true)]]);
}

#[test]
fn without_chunked_prefill_a_prompt_that_does_not_fit_the_budget_waits() {
    let mut limits = limits(4, 8, 8);
    limits.enable_chunked_prefill = false;
    let mut s = Scheduler::new(limits, kv(20, 16, 8));
    s.add_request(&request(1, 6, 1));
    s.add_request(&request(2, 6, 1));
    let (steps, _) = run(&mut s);
    assert_eq!(steps, vec![vec![(1, 6, 0, true)], vec![(2, 6, 0, true)]]);
}

#[test]
fn max_num_seqs_stops_admission_with_budget_left() {
    let mut s = Scheduler::new(limits(1, 100, 100), kv(20, 16, 100));
    s.add_request(&request(1, 4, 2));
    s.add_request(&request(2, 4, 1));
    let (steps, _) = run(&mut s);
    assert_eq!(steps, vec![vec![(1, 4, 0, true)], vec![(1, 1, 4, true)], vec![(2, 4, 0, true)]]);
}

#[test]
fn admission_stops_at_the_first_request_whose_blocks_are_not_free() {
    // Null block + 3 usable blocks of 4 tokens.
    let mut s = Scheduler::new(limits(8, 100, 64), kv(4, 4, 64));
    s.add_request(&request(1, 8, 4)); // 2 blocks, grows to a third
    s.add_request(&request(2, 8, 1)); // needs 2 blocks: waits
    s.add_request(&request(3, 2, 1)); // would fit, but waits behind request 2
    let (steps, finished) = run(&mut s);
    assert_eq!(
        steps,
        vec![
            vec![(1, 8, 0, true)],
            vec![(1, 1, 8, true)],
            vec![(1, 1, 9, true)],
            vec![(1, 1, 10, true)],
            vec![(2, 8, 0, true), (3, 2, 0, true)],
        ]
    );
    assert_eq!(times(&finished, 1), vec![1, 2, 3, 4]);
}

#[test]
fn a_running_request_that_cannot_grow_preempts_the_tail_and_nothing_is_admitted() {
    // Null block + 3 usable blocks of 4 tokens; each request is 4 prompt + 6 output tokens.
    let mut s = Scheduler::new(limits(8, 100, 12), kv(4, 4, 12));
    s.add_request(&request(1, 4, 6));
    s.add_request(&request(2, 4, 6));
    let (steps, finished) = run(&mut s);
    assert_eq!(
        steps,
        vec![
            vec![(1, 4, 0, true), (2, 4, 0, true)],
            // Request 2 cannot get its second block: it is the tail, so it preempts itself; no
            // waiting request is admitted in a step with a preemption.
            vec![(1, 1, 4, true)],
            // Request 2 is at the front of the waiting queue, recomputing prompt + 1 output
            // (5 tokens, 2 blocks), but only one block is free.
            vec![(1, 1, 5, true)],
            vec![(1, 1, 6, true)],
            vec![(1, 1, 7, true)],
            vec![(1, 1, 8, true)],
            vec![(2, 5, 0, true)],
            vec![(2, 1, 5, true)],
            vec![(2, 1, 6, true)],
            vec![(2, 1, 7, true)],
            vec![(2, 1, 8, true)],
        ]
    );
    assert_eq!(s.counters().preemptions, 1);
    let second = finished.iter().find(|f| f.key == 2).unwrap();
    assert_eq!(second.token_times_us, vec![1, 7, 8, 9, 10, 11]);
    assert_eq!(second.num_preemptions, 1);
}

#[test]
fn a_fully_cached_prompt_of_whole_blocks_recomputes_its_entire_last_block() {
    // Prefix caching on, blocks of 4. The second request has the same 8-token prompt: both its
    // blocks are cached, but a hit is capped at num_tokens − 1 = 7 tokens, in whole blocks: one
    // block (4 tokens). It recomputes the whole second block, not just one token.
    let mut s = Scheduler::new(limits(4, 100, 64), KvCacheManager::new(16, 4, 64, true));
    let prompt: Vec<u32> = (100..108).collect();
    s.add_request(&request_with(1, prompt.clone(), 1));
    let (mut out, mut update) = (SchedulerOutput::default(), UpdateOutput::default());
    s.schedule(&mut out);
    s.update_from_output(&out, 1, &mut update);
    s.add_request(&request_with(2, prompt, 1));
    s.schedule(&mut out);
    assert_eq!(
        out.scheduled.iter().map(|x| (x.key, x.tokens, x.context)).collect::<Vec<_>>(),
        vec![(2, 4, 4)]
    );
}

#[test]
fn freed_blocks_are_reused_least_recently_freed_first_and_a_chain_from_its_tail() {
    // Null block + 6 usable blocks of 4 tokens, prefix caching on. Request 1 (8 tokens, 2
    // blocks) finishes first, then request 2 (8 tokens): each frees its blocks last first, so the
    // free queue holds [unused…, 2, 1, 4, 3] and a new request reuses blocks in that order,
    // evicting request 1's tail before its head.
    let mut s = Scheduler::new(limits(4, 100, 64), KvCacheManager::new(7, 4, 64, true));
    let (mut out, mut update) = (SchedulerOutput::default(), UpdateOutput::default());
    s.add_request(&request_with(1, (0..7).collect(), 1));
    s.schedule(&mut out);
    s.update_from_output(&out, 1, &mut update);
    s.add_request(&request_with(2, (50..57).collect(), 1));
    s.schedule(&mut out);
    s.update_from_output(&out, 2, &mut update);
    assert_eq!(s.kv().pool().free_queue(), vec![5, 6, 2, 1, 4, 3]);
    s.add_request(&request_with(3, (200..220).collect(), 1));
    s.schedule(&mut out);
    match &out.new[0] {
        blis_engines::vllm::Admission::New { blocks, .. } => {
            assert_eq!(out.block_ids(*blocks), [5, 6, 2, 1, 4])
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_scheduler_not_describing_its_running_requests_lists_only_resumed_ones_and_schedules_the_same() {
    // The preemption case above: each step's running requests, then request 2 resuming.
    /// One step: its slices, and its cached-request list as (key, resumed).
    type Described = (Vec<Slice>, Vec<(u64, bool)>);
    let describe = |on: bool| -> Vec<Described> {
        let mut s = Scheduler::new(limits(8, 100, 12), kv(4, 4, 12));
        s.describe_running_requests(on);
        // Every slice listed, so both lists compare (the cohort's own test is vllm_cohort.rs).
        s.set_decode_cohort(false);
        s.add_request(&request(1, 4, 6));
        s.add_request(&request(2, 4, 6));
        let (mut out, mut update) = (SchedulerOutput::default(), UpdateOutput::default());
        let mut steps = Vec::new();
        for now in 1..=11 {
            s.schedule(&mut out);
            let cached: Vec<(u64, bool)> = out
                .cached
                .iter()
                .map(|a| match a {
                    Admission::Cached { key, resumed, .. } => (*key, *resumed),
                    Admission::New { .. } => unreachable!("cached lists hold cached requests"),
                })
                .collect();
            let slices: Vec<Slice> =
                out.scheduled.iter().map(|s| (s.key, s.tokens, s.context, s.samples)).collect();
            steps.push((slices, cached));
            s.update_from_output(&out, now, &mut update);
        }
        steps
    };
    let (on, off) = (describe(true), describe(false));
    let slices = |steps: &[Described]| steps.iter().map(|s| s.0.clone()).collect::<Vec<_>>();
    assert_eq!(slices(&on), slices(&off), "the same schedule either way");
    let cached = |steps: &[Described]| steps.iter().map(|s| s.1.clone()).collect::<Vec<_>>();
    assert_eq!(
        cached(&on),
        vec![
            vec![],
            vec![(1, false)],
            vec![(1, false)],
            vec![(1, false)],
            vec![(1, false)],
            vec![(1, false)],
            vec![(2, true)],
            vec![(2, false)],
            vec![(2, false)],
            vec![(2, false)],
            vec![(2, false)],
        ]
    );
    assert_eq!(
        cached(&off),
        vec![vec![], vec![], vec![], vec![], vec![], vec![], vec![(2, true)], vec![], vec![], vec![], vec![]],
        "only the resumed request is listed"
    );
}
