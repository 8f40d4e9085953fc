//! A step of the port in the oracle traces' JSON (`traces/harness/record.py`'s step and update
//! records), shared by the single-engine and the P/D oracle replays.

// Each test crate that includes this module uses a part of it.
#![allow(dead_code)]

use blis_engines::vllm::{
    Admission, BlockSpan, FinishReason, KvEvent, Scheduler, SchedulerOutput, UpdateOutput,
};
use serde_json::{Value, json};

/// Request `i`'s id in the traces.
pub fn id(i: u64) -> String {
    format!("r{i}")
}

/// The ids of `keys`, in their order.
pub fn ids(keys: &[u64]) -> Value {
    json!(keys.iter().map(|&k| id(k)).collect::<Vec<_>>())
}

/// The index of request id `name` ("r12" → 12).
pub fn index(name: &str) -> u64 {
    name[1..].parse().unwrap()
}

/// FNV-1a 64 of the free queue's ids joined by commas, as the harness digests it.
pub fn free_queue_digest(queue: &[u32]) -> String {
    let text = queue.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// The trace's name of a finish reason.
pub fn reason(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Length => "length",
        FinishReason::Abort => "abort",
    }
}

/// The schedule fields every step record has: what `out` scheduled and the queues after it.
pub fn schedule_json(scheduler: &Scheduler, out: &SchedulerOutput) -> Value {
    let blocks = |b: &BlockSpan| json!(out.block_ids(*b));
    json!({
        "scheduled": out.scheduled.iter().map(|s| json!([id(s.key), s.tokens])).collect::<Vec<_>>(),
        "total": out.total,
        "new": out.new.iter().map(|a| match a {
            Admission::New { key, computed, blocks: b } => json!([id(*key), computed, blocks(b)]),
            Admission::Cached { .. } => unreachable!(),
        }).collect::<Vec<_>>(),
        "cached": out.cached.iter().map(|a| match a {
            Admission::Cached { key, resumed, computed, outputs, new_blocks } => json!([
                id(*key), u8::from(*resumed), computed, outputs,
                new_blocks.as_ref().map(blocks)
            ]),
            Admission::New { .. } => unreachable!(),
        }).collect::<Vec<_>>(),
        "preempted": ids(&out.preempted),
        "finished_prev": ids(&out.finished_prev),
        "common_prefix": out.common_prefix_blocks,
        "running": ids(&scheduler.running_keys().collect::<Vec<_>>()),
        "waiting": ids(&scheduler.waiting_keys().collect::<Vec<_>>()),
        "free_blocks": scheduler.kv().pool().num_free(),
        "free_q": free_queue_digest(&scheduler.kv().pool().free_queue()),
    })
}

/// The update fields every update record has. `delivered` counts each request's tokens so
/// far (the output rule: request i's k-th token is 20000 + 1000·i + k).
pub fn update_json(
    scheduler: &Scheduler,
    delivered: &mut [u32],
    of_step: u64,
    update: &UpdateOutput,
) -> Value {
    let tokens: Vec<Value> = update
        .tokens
        .iter()
        .map(|&(key, token)| {
            let i = key as usize;
            let value = token.unwrap_or(20_000 + 1_000 * i as u32 + delivered[i]);
            if token.is_some() {
                delivered[i] += 1;
            }
            json!([id(key), value])
        })
        .collect();
    let s = &update.stats;
    let p = &s.prefix_cache;
    let c = &s.connector_prefix_cache;
    let events: Vec<Value> = update
        .kv_events
        .iter()
        .map(|e| match e {
            KvEvent::BlockStored { request: _, first_block, hashes, parent, tokens: _ } => json!([
                "S",
                first_block,
                hashes.len,
                update.kv_events.hashes(*hashes).iter().map(|h| format!("{h:016x}")).collect::<Vec<_>>(),
                parent.map(|h| format!("{h:016x}"))
            ]),
            KvEvent::BlockRemoved { hash } => json!(["R", [format!("{hash:016x}")]]),
        })
        .collect();
    json!({
        "of_step": of_step,
        "tokens": tokens,
        "finished": update.finished.iter().map(|f| json!([id(f.key), reason(f.reason)])).collect::<Vec<_>>(),
        "stats": [s.num_running, s.num_waiting, s.kv_cache_usage, p.requests, p.queries, p.hits,
                  p.preempted_requests, p.preempted_queries, p.preempted_hits],
        "free_blocks": scheduler.kv().pool().num_free(),
        "free_q": free_queue_digest(&scheduler.kv().pool().free_queue()),
        "kv_events": events,
        "connector_pc": [c.requests, c.queries, c.hits, c.preempted_requests, c.preempted_queries, c.preempted_hits],
        "cached_tokens": update.finished.iter().map(|f| json!([id(f.key), f.num_cached_tokens])).collect::<Vec<_>>(),
    })
}

/// The trace's update object, with the request id dropped from BlockStored events (with
/// identical content in several requests the harness names the first it saw; equal hashes
/// already pin the tokens).
pub fn expected_update(update: &Value) -> Value {
    let mut update = update.clone();
    if let Some(events) = update["kv_events"].as_array_mut() {
        for event in events {
            if event[0] == "S" {
                event.as_array_mut().unwrap().remove(1);
            }
        }
    }
    update
}
