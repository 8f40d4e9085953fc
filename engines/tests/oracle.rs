//! The oracle: every step of every trace recorded from vLLM 0.15.1's own scheduler
//! (`traces/vllm-0.15.1/`, recorded by `traces/harness/record.py`) is replayed through the port,
//! which must make the same decision at every step — what it schedules and how many tokens,
//! prefix hits and block ids, preemptions and their order, the queues, the free-block queue's
//! order, the tokens sampled, the finishes, the statistics and the KV events.

use std::path::PathBuf;
use std::sync::Arc;

use blis_engines::vllm::{
    Admission, BlockSpan, EngineRequest, KvCacheManager, KvEvent, Policy, Scheduler, SchedulerLimits,
    SchedulerOutput, Status, UpdateOutput,
};
use serde_json::{Value, json};

struct Trace {
    name: String,
    header: Value,
    steps: Vec<Value>,
}

fn traces() -> Vec<Trace> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../traces/vllm-0.15.1");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("the oracle traces are in the repository")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let mut lines = text.lines().map(|l| serde_json::from_str::<Value>(l).unwrap());
            let header = lines.next().unwrap();
            Trace {
                name: path.file_stem().unwrap().to_string_lossy().into_owned(),
                header,
                steps: lines.collect(),
            }
        })
        .collect()
}

fn id(i: u64) -> String {
    format!("r{i}")
}

fn index(name: &Value) -> u64 {
    name.as_str().unwrap()[1..].parse().unwrap()
}

/// FNV-1a 64 of the free queue's ids joined by commas, as the harness digests it.
fn free_queue_digest(queue: &[u32]) -> String {
    let text = queue.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x100_0000_01b3);
    }
    format!("{hash:016x}")
}

struct Replay {
    scheduler: Scheduler,
    requests: Vec<Value>,
    delivered: Vec<u32>,
    finished_at: Vec<Option<u64>>,
    added: Vec<bool>,
    queue: std::collections::VecDeque<(u64, SchedulerOutput)>,
    asynchronous: bool,
}

impl Replay {
    fn new(header: &Value) -> Replay {
        let c = &header["config"];
        let u = |k: &str| c[k].as_u64().unwrap_or_else(|| panic!("config.{k}")) as u32;
        let limits = SchedulerLimits {
            max_num_seqs: u("max_num_seqs"),
            max_num_batched_tokens: u("max_num_batched_tokens"),
            max_model_len: u("max_model_len"),
            enable_chunked_prefill: c["enable_chunked_prefill"].as_bool().unwrap(),
            long_prefill_token_threshold: u("long_prefill_token_threshold"),
            policy: if c["policy"] == "priority" { Policy::Priority } else { Policy::Fcfs },
            async_scheduling: c["async_scheduling"].as_bool().unwrap(),
        };
        let kv = KvCacheManager::new(
            u("num_gpu_blocks"),
            u("block_size"),
            u("max_model_len"),
            c["enable_prefix_caching"].as_bool().unwrap(),
        );
        let requests = header["requests"].as_array().unwrap().clone();
        let n = requests.len();
        Replay {
            scheduler: Scheduler::new(limits, kv),
            requests,
            delivered: vec![0; n],
            finished_at: vec![None; n],
            added: vec![false; n],
            queue: Default::default(),
            asynchronous: limits.async_scheduling,
        }
    }

    fn add(&mut self, i: usize, step: u64) {
        let r = &self.requests[i];
        let prompt: Vec<u32> =
            r["prompt"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect();
        let max_tokens = r["max_tokens"].as_u64().unwrap() as u32;
        let outputs: Vec<u32> = (0..max_tokens).map(|k| 20_000 + 1_000 * i as u32 + k).collect();
        self.scheduler.add_request(&EngineRequest {
            key: i as u64,
            name: Arc::from(id(i as u64)),
            priority: r["priority"].as_i64().unwrap_or(0),
            prompt_token_ids: prompt.into(),
            output_token_ids: outputs.into(),
            arrival_us: step,
        });
        self.added[i] = true;
    }

    fn schedule_json(&self, out: &SchedulerOutput) -> Value {
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
            "preempted": out.preempted.iter().map(|k| id(*k)).collect::<Vec<_>>(),
            "finished_prev": out.finished_prev.iter().map(|k| id(*k)).collect::<Vec<_>>(),
            "common_prefix": out.common_prefix_blocks,
            "running": self.scheduler.running_keys().map(id).collect::<Vec<_>>(),
            "waiting": self.scheduler.waiting_keys().map(id).collect::<Vec<_>>(),
            "free_blocks": self.scheduler.kv().pool().num_free(),
            "free_q": free_queue_digest(&self.scheduler.kv().pool().free_queue()),
        })
    }

    fn update_json(&mut self, of_step: u64, update: &UpdateOutput) -> Value {
        let tokens: Vec<Value> = update
            .tokens
            .iter()
            .map(|&(key, token)| {
                let i = key as usize;
                let value = token.unwrap_or(20_000 + 1_000 * i as u32 + self.delivered[i]);
                if token.is_some() {
                    self.delivered[i] += 1;
                }
                json!([id(key), value])
            })
            .collect();
        let s = &update.stats;
        let p = &s.prefix_cache;
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
            "finished": update.finished.iter().map(|f| json!([id(f.key), "length"])).collect::<Vec<_>>(),
            "stats": [s.num_running, s.num_waiting, s.kv_cache_usage, p.requests, p.queries, p.hits,
                      p.preempted_requests, p.preempted_queries, p.preempted_hits],
            "free_blocks": self.scheduler.kv().pool().num_free(),
            "free_q": free_queue_digest(&self.scheduler.kv().pool().free_queue()),
            "kv_events": events,
        })
    }
}

/// The trace's update object, with the request id dropped from BlockStored events (with
/// identical content in several requests the harness names the first it saw; equal hashes
/// already pin the tokens).
fn expected_update(update: &Value) -> Value {
    let mut update = update.clone();
    if let Some(events) = update["kv_events"].as_array_mut() {
        for event in events {
            if event[0] == "S" {
                let a = event.as_array_mut().unwrap();
                a.remove(1);
            }
        }
    }
    update
}

fn replay(trace: &Trace) -> Result<usize, String> {
    let mut r = Replay::new(&trace.header);
    let n = r.requests.len();
    let fields = [
        "scheduled",
        "total",
        "new",
        "cached",
        "preempted",
        "finished_prev",
        "common_prefix",
        "running",
        "waiting",
        "free_blocks",
        "free_q",
    ];
    for line in &trace.steps {
        let step = line["step"].as_u64().unwrap();
        // 1. Arrivals: scheduled ones and follow-ups of requests finished in the previous step.
        let mut added = Vec::new();
        for i in 0..n {
            let req = &r.requests[i];
            let due = match (req["arrival_step"].as_u64(), req["after"].as_str()) {
                (Some(s), _) => s == step,
                (None, Some(parent)) => {
                    r.finished_at[index(&json!(parent)) as usize].is_some_and(|f| f + 1 == step)
                }
                _ => false,
            };
            if due && !r.added[i] {
                r.add(i, step);
                added.push(json!(id(i as u64)));
            }
        }
        if json!(added) != line["added"] {
            return Err(format!("step {step}: added {:?}, trace {}", added, line["added"]));
        }
        // 2. Aborts, one at a time, in index order.
        let mut aborted = Vec::new();
        for i in 0..n {
            if r.requests[i]["abort_step"].as_u64() == Some(step) {
                let state = match r.scheduler.status(i as u64) {
                    Some(Status::Waiting) => "waiting",
                    Some(Status::Running) => "running",
                    Some(Status::Preempted) => "preempted",
                    None => "finished",
                };
                if r.scheduler.abort(i as u64).is_some() {
                    r.finished_at[i].get_or_insert(step);
                }
                aborted.push(json!([id(i as u64), state]));
            }
        }
        if json!(aborted) != line["aborted"] {
            return Err(format!("step {step}: aborted {:?}, trace {}", aborted, line["aborted"]));
        }
        // 3. The engine step.
        let mut update_to_run = None;
        if r.scheduler.has_requests() {
            let mut out = SchedulerOutput::default();
            r.scheduler.schedule(&mut out);
            let got = r.schedule_json(&out);
            for field in fields {
                if got[field] != line[field] {
                    return Err(format!("step {step}: {field}: port {} vs vLLM {}", got[field], line[field]));
                }
            }
            let total = out.total;
            r.queue.push_back((step, out));
            if !(r.asynchronous && total > 0 && r.queue.len() < 2) {
                update_to_run = r.queue.pop_front();
            }
        } else {
            if !line["scheduled"].is_null() {
                return Err(format!("step {step}: the port has nothing to schedule, vLLM scheduled"));
            }
            if r.asynchronous {
                update_to_run = r.queue.pop_front();
            }
        }
        match (update_to_run, line["update"].is_null()) {
            (None, true) => {}
            (Some((of_step, batch)), false) => {
                let mut update = UpdateOutput::default();
                r.scheduler.update_from_output(&batch, step, &mut update);
                for f in &update.finished {
                    r.finished_at[f.key as usize] = Some(step);
                }
                let got = r.update_json(of_step, &update);
                let expected = expected_update(&line["update"]);
                for field in ["of_step", "tokens", "finished", "stats", "free_blocks", "free_q", "kv_events"]
                {
                    if got[field] != expected[field] {
                        return Err(format!(
                            "step {step}: update.{field}: port {} vs vLLM {}",
                            got[field], expected[field]
                        ));
                    }
                }
            }
            (mine, _) => {
                return Err(format!(
                    "step {step}: update ran in the port: {}, in vLLM: {}",
                    mine.is_some(),
                    !line["update"].is_null()
                ));
            }
        }
    }
    // A trace of an upstream livelock stops with its requests still there; every other trace
    // ends with all of them finished.
    let livelock = trace.header.get("stop_after_steps").is_some();
    if r.scheduler.has_unfinished() != livelock {
        return Err(format!(
            "unfinished requests after the last step: port {}, vLLM {livelock}",
            r.scheduler.has_unfinished()
        ));
    }
    Ok(trace.steps.len())
}

#[test]
fn every_recorded_step_of_vllm_0_15_1_is_matched() {
    let traces = traces();
    assert!(traces.len() >= 40, "at least 20 workloads × sync/async: found {}", traces.len());
    let mut failures = Vec::new();
    let mut steps = 0;
    for trace in &traces {
        match replay(trace) {
            Ok(n) => steps += n,
            Err(e) => failures.push(format!("{}: {e}", trace.name)),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} traces diverge:\n{}",
        failures.len(),
        traces.len(),
        failures.join("\n")
    );
    assert!(steps > 20_000, "{steps} steps replayed");
    assert!(
        traces.iter().any(|t| t.header.get("stop_after_steps").is_some()),
        "the upstream livelock is among the traces"
    );
    eprintln!("{} traces, {steps} steps, every step matched", traces.len());
}
