//! Decision-level tests of the NIXL port: a prefill and a decode scheduler wired by hand, every
//! step written out as `../shared/reference/vllm-kv-connectors.md` §4 records vLLM 0.15.1
//! doing it (§4.8's timeline, §4.7's partial prefix, §4.5's decision table, §4.10's aborts).

use std::sync::Arc;

use blis_engines::vllm::connector::{Connector, ConnectorOutput, KvTransferParams, NixlScheduler};
use blis_engines::vllm::{
    EngineRequest, FinishedRequest, KvCacheManager, Policy, Scheduler, SchedulerLimits, SchedulerOutput,
    Status, UpdateOutput,
};

fn request(key: u64, prompt: Vec<u32>, max_tokens: u32) -> EngineRequest {
    EngineRequest {
        key,
        name: Arc::from(format!("r{key}")),
        priority: 0,
        prompt_token_ids: prompt.into(),
        output_token_ids: Arc::from(vec![7u32; max_tokens as usize]),
        arrival_us: 0,
    }
}

fn instance(engine_id: &str) -> Scheduler {
    let limits = SchedulerLimits {
        max_num_seqs: 8,
        max_num_batched_tokens: 256,
        max_model_len: 1024,
        enable_chunked_prefill: true,
        long_prefill_token_threshold: 0,
        policy: Policy::Fcfs,
        async_scheduling: false,
    };
    let nixl = Connector::Nixl(NixlScheduler::new(Arc::from(engine_id), 1));
    Scheduler::with_connector(limits, KvCacheManager::new(32, 16, 1024, true), Some(nixl))
}

/// One step of `s` at `now`: the schedule, then the update with the worker's report, which
/// `worker` builds from the step's metadata. Returns (key, new tokens) scheduled and the finishes.
fn step(
    s: &mut Scheduler,
    now: u64,
    worker: impl FnOnce(&SchedulerOutput) -> ConnectorOutput,
) -> (SchedulerOutput, Vec<(u64, u32)>, Vec<FinishedRequest>) {
    let mut out = SchedulerOutput::default();
    s.schedule(&mut out);
    let scheduled = out.scheduled.iter().map(|e| (e.key, e.tokens)).collect();
    let report = worker(&out);
    let mut update = UpdateOutput::default();
    let report = (out.total > 0 || !report.is_empty()).then_some(report);
    s.update_from_output_with(&out, now, report.as_ref(), &mut update);
    (out, scheduled, std::mem::take(&mut update.finished))
}

fn nothing(_: &SchedulerOutput) -> ConnectorOutput {
    ConnectorOutput::default()
}

fn prompt(n: u32) -> Vec<u32> {
    (0..n).map(|t| 100 + t).collect()
}

#[test]
fn a_prefill_leg_returns_its_blocks_and_holds_them_until_the_decode_side_has_read_them() {
    let (mut p, mut d) = (instance("oracle-p"), instance("oracle-d"));
    // Step 0, P: the 50-token prompt is prefilled and its one token sampled; length-capped, it
    // returns its four blocks and keeps them (free 27 of 31).
    p.add_request_with_transfer(&request(1, prompt(50), 1), KvTransferParams::prefill_leg());
    let (_, scheduled, finished) = step(&mut p, 1, nothing);
    assert_eq!(scheduled, vec![(1, 50)]);
    let params = finished[0].kv_transfer.clone().expect("a length-capped prefill leg returns params");
    assert_eq!(params.remote_block_ids, vec![1, 2, 3, 4]);
    assert_eq!(params.remote_engine_id.as_deref(), Some("oracle-p"));
    assert_eq!(params.remote_request_key, Some(1));
    assert!(params.do_remote_prefill && !params.do_remote_decode);
    assert_eq!(p.kv().pool().num_free(), 27);
    assert_eq!(p.held_by_connector().collect::<Vec<_>>(), vec![1]);

    // Step 0, D: the decode leg parks with four fresh blocks and asks for the read; the read
    // finishes within the step. Nothing is scheduled.
    d.add_request_with_transfer(&request(1, prompt(50), 3), params);
    let mut read = None;
    let (_, scheduled, _) = step(&mut d, 1, |out| {
        let meta = out.connector_meta.as_ref().and_then(|m| m.nixl()).expect("NIXL metadata");
        assert_eq!(meta.reqs_to_recv.len(), 1);
        read = Some(meta.reqs_to_recv[0].clone());
        ConnectorOutput { finished_recving: vec![1], ..ConnectorOutput::default() }
    });
    let read = read.unwrap();
    assert_eq!(
        (read.local_blocks.clone(), read.remote_block_ids.clone()),
        (vec![1, 2, 3, 4], vec![1, 2, 3, 4])
    );
    assert!(scheduled.is_empty());
    assert_eq!(d.status(1), Some(Status::WaitingForRemoteKvs));
    assert_eq!(d.kv().pool().num_free(), 27);

    // Step 1, P: a zero-token step carries the finished id; the worker reports the send done
    // (D's read notified it) and the four blocks return (free 31).
    let (out, scheduled, _) = step(&mut p, 2, |out| {
        let meta = out.connector_meta.as_ref().and_then(|m| m.nixl()).unwrap();
        assert_eq!(meta.reqs_to_send.iter().map(|&(k, _)| k).collect::<Vec<_>>(), vec![1]);
        ConnectorOutput { finished_sending: vec![1], ..ConnectorOutput::default() }
    });
    assert!(scheduled.is_empty());
    assert_eq!(out.finished_prev, vec![1]);
    assert_eq!(p.kv().pool().num_free(), 31);
    assert!(!p.has_requests());

    // Steps 1–3, D: ready with 49 tokens computed (all it holds less the last token), one token
    // scheduled and the first output; then two decode steps, and it finishes.
    let (_, s1, _) = step(&mut d, 2, nothing);
    assert_eq!(s1, vec![(1, 1)]);
    assert_eq!(d.num_cached_tokens(1), Some(49));
    let (_, s2, _) = step(&mut d, 3, nothing);
    let (_, s3, finished) = step(&mut d, 4, nothing);
    assert_eq!((s2, s3), (vec![(1, 1)], vec![(1, 1)]));
    assert_eq!(finished[0].token_times_us, vec![2, 3, 4]);
    assert_eq!(finished[0].kv_transfer, None);
}

#[test]
fn a_decode_side_prefix_hit_reads_only_the_blocks_after_it() {
    let mut d = instance("oracle-d");
    // An earlier plain request caches the first two blocks (32 tokens) of the prompt.
    let shared = prompt(50);
    d.add_request(&request(9, shared[..40].to_vec(), 1));
    step(&mut d, 1, nothing);
    step(&mut d, 2, nothing);
    let params = KvTransferParams {
        do_remote_prefill: true,
        remote_block_ids: vec![100, 101, 102, 103],
        remote_engine_id: Some(Arc::from("oracle-p")),
        remote_request_key: Some(1),
        remote_address: true,
        tp_size: 1,
        ..KvTransferParams::default()
    };
    d.add_request_with_transfer(&request(1, shared, 2), params);
    let mut read = None;
    step(&mut d, 3, |out| {
        read = out.connector_meta.as_ref().and_then(|m| m.nixl()).unwrap().reqs_to_recv.first().cloned();
        ConnectorOutput::default()
    });
    // Blocks [1, 2 | 4, 5]: the hit, then two fresh ones (block 3 went back to the free queue
    // behind them); only those two are read, from the tail of P's four.
    assert_eq!(read.expect("a read").local_blocks, vec![4, 5]);
}

#[test]
fn an_unadmitted_decode_leg_aborted_still_frees_the_prefill_side_and_a_parked_one_frees_at_once() {
    let params = || KvTransferParams {
        do_remote_prefill: true,
        remote_block_ids: vec![1, 2],
        remote_engine_id: Some(Arc::from("oracle-p")),
        remote_request_key: Some(7),
        remote_address: true,
        tp_size: 1,
        ..KvTransferParams::default()
    };
    // Aborted before its first schedule: the next metadata carries an empty read, which only
    // tells P it may free.
    let mut d = instance("oracle-d");
    d.add_request_with_transfer(&request(1, prompt(20), 2), params());
    assert!(d.abort(1).is_some());
    let mut read = None;
    step(&mut d, 1, |out| {
        read = out.connector_meta.as_ref().and_then(|m| m.nixl()).unwrap().reqs_to_recv.first().cloned();
        ConnectorOutput::default()
    });
    let read = read.expect("a notification to P");
    assert!(read.local_blocks.is_empty());
    assert_eq!(read.remote_request_key, 7);

    // Aborted while parked with its read in flight: its blocks are freed at once and P is told
    // nothing (P frees when the read in flight completes, or at expiry).
    let mut d = instance("oracle-d");
    d.add_request_with_transfer(&request(1, prompt(20), 2), params());
    step(&mut d, 1, nothing);
    assert_eq!(d.kv().pool().num_free(), 29);
    assert!(d.abort(1).is_some());
    assert_eq!(d.kv().pool().num_free(), 31);
    let mut recvs = 1;
    step(&mut d, 2, |out| {
        recvs = out.connector_meta.as_ref().and_then(|m| m.nixl()).unwrap().reqs_to_recv.len();
        ConnectorOutput::default()
    });
    assert_eq!(recvs, 0);
}

#[test]
fn a_prefill_leg_that_does_not_end_length_capped_returns_nothing_and_frees_at_once() {
    let mut p = instance("oracle-p");
    p.add_request_with_transfer(&request(1, prompt(40), 1), KvTransferParams::prefill_leg());
    let record = p.abort(1).expect("held");
    assert_eq!(record.kv_transfer, None);
    assert_eq!(p.kv().pool().num_free(), 31);
    let mut not_processed = Vec::new();
    step(&mut p, 1, |out| {
        not_processed =
            out.connector_meta.as_ref().and_then(|m| m.nixl()).unwrap().reqs_not_processed.clone();
        ConnectorOutput::default()
    });
    assert_eq!(not_processed, vec![1]);
}
