//! The oracle: every step of every trace recorded from vLLM 0.15.1's own scheduler
//! (`traces/vllm-0.15.1/`, recorded by `traces/harness/record.py`) is replayed through the port,
//! which must make the same decision at every step — what it schedules and how many tokens,
//! prefix hits and block ids, preemptions and their order, the queues, the free-block queue's
//! order, the tokens sampled, the finishes, the statistics and the KV events.

use std::path::PathBuf;
use std::sync::Arc;

use blis_engines::vllm::connector::{
    Connector, ConnectorOutput, Direction, Job, OffloadWorker, OffloadingScheduler, TransferSpec,
};
use blis_engines::vllm::{
    EngineRequest, KvCacheManager, Policy, Scheduler, SchedulerLimits, SchedulerOutput, Status, UpdateOutput,
};
use serde_json::{Value, json};

#[path = "support/step_json.rs"]
mod step_json;

use step_json::{expected_update, id};

struct Trace {
    name: String,
    header: Value,
    steps: Vec<Value>,
    /// The closing line of an offloading trace: requests still held, free blocks.
    end: Option<Value>,
}

fn traces() -> Vec<Trace> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../traces/vllm-0.15.1");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("the oracle traces are in the repository")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        // Prefill/decode pairs have their own replay (nixl_oracle.rs).
        .filter(|p| !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("nixl-")))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let mut lines = text.lines().map(|l| serde_json::from_str::<Value>(l).unwrap());
            let header = lines.next().unwrap();
            let mut steps: Vec<Value> = lines.collect();
            let end = if steps.last().is_some_and(|l| l["kind"] == "end") { steps.pop() } else { None };
            Trace { name: path.file_stem().unwrap().to_string_lossy().into_owned(), header, steps, end }
        })
        .collect()
}

/// The worker side of an offloading trace: vLLM's worker bookkeeping (ported) over the
/// harness's fake handlers, which complete a job at its N-th poll and report the first load of a
/// chosen request with one destination block invalid.
struct FakeWorker {
    worker: OffloadWorker,
    stores: Vec<(u64, u32)>,
    loads: Vec<(u64, u32, Job)>,
    store_polls: u32,
    load_polls: u32,
    fail_loads: Vec<(u64, usize)>,
    failed_once: Vec<u64>,
}

impl FakeWorker {
    fn submit(&mut self, jobs: Vec<Job>) {
        for job in jobs {
            match job.direction {
                Direction::Store => self.stores.push((job.id, self.store_polls)),
                Direction::Load => self.loads.push((job.id, self.load_polls, job)),
            }
        }
    }

    /// One engine step's worker calls, in gpu_model_runner's order; the connector output.
    fn step(&mut self, out: &SchedulerOutput) -> Option<ConnectorOutput> {
        let meta =
            out.connector_meta.as_ref().and_then(|m| m.offload()).expect("an offloading step has metadata");
        if !out.preempted.is_empty() {
            let (submitted, wait) = self.worker.handle_preemptions(&out.preempted);
            self.submit(submitted);
            for job in &mut self.stores {
                if wait.contains(&job.0) {
                    job.1 = 0;
                }
            }
        }
        let submitted = self.worker.start_kv_transfers(meta);
        self.submit(submitted);
        if out.total > 0 {
            self.worker.prepare_store_kv(meta);
        }
        let mut done = Vec::new();
        let mut invalid = Vec::new();
        for job in &mut self.stores {
            job.1 = job.1.saturating_sub(1);
        }
        done.extend(self.stores.iter().filter(|j| j.1 == 0).map(|j| j.0));
        self.stores.retain(|j| j.1 > 0);
        for job in &mut self.loads {
            job.1 = job.1.saturating_sub(1);
            if job.1 == 0 {
                done.push(job.0);
                let key = job.2.spec.key;
                if let Some(&(_, k)) = self.fail_loads.iter().find(|(r, _)| *r == key)
                    && !self.failed_once.contains(&key)
                {
                    self.failed_once.push(key);
                    invalid.push(job.2.spec.gpu_blocks[k]);
                }
            }
        }
        self.loads.retain(|j| j.1 > 0);
        let (sending, recving) = self.worker.get_finished(&done, &out.finished_prev);
        invalid.sort_unstable();
        let output = ConnectorOutput {
            finished_sending: sending,
            finished_recving: recving,
            invalid_block_ids: invalid,
        };
        (out.total > 0 || !output.is_empty()).then_some(output)
    }
}

fn specs_json(specs: &[TransferSpec], load: bool) -> Value {
    json!(
        specs
            .iter()
            .map(|t| if load {
                json!([id(t.key), t.cpu_blocks, t.gpu_blocks])
            } else {
                json!([id(t.key), t.gpu_blocks, t.cpu_blocks])
            })
            .collect::<Vec<_>>()
    )
}

struct Replay {
    scheduler: Scheduler,
    worker: Option<FakeWorker>,
    /// Each request's finish reason and num_cached_tokens (−1: never admitted), as it ended.
    ended: Vec<Option<(&'static str, i64)>>,
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
        let offload = c["kv_connector"] == "OffloadingConnector";
        let connector = offload.then(|| {
            Connector::Offloading(Box::new(OffloadingScheduler::new(
                u("block_size"),
                u("offloaded_block_size"),
                u("cpu_blocks"),
                c["enable_prefix_caching"].as_bool().unwrap(),
                true,
            )))
        });
        let worker = offload.then(|| FakeWorker {
            worker: OffloadWorker::new(),
            stores: Vec::new(),
            loads: Vec::new(),
            store_polls: u("store_polls"),
            load_polls: u("load_polls"),
            fail_loads: c["fail_loads"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(r, k)| (step_json::index(r), k.as_u64().unwrap() as usize))
                .collect(),
            failed_once: Vec::new(),
        });
        let mut scheduler = Scheduler::with_connector(limits, kv, connector);
        if offload {
            scheduler.set_record_kv_events(true);
        }
        Replay {
            ended: vec![None; n],
            worker,
            scheduler,
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

    fn update_json(&mut self, of_step: u64, update: &UpdateOutput) -> Value {
        let mut got = step_json::update_json(&self.scheduler, &mut self.delivered, of_step, update);
        got["cpu_events"] = json!(
            update
                .connector_events
                .iter()
                .map(|e| {
                    let mut hashes: Vec<String> = e.hashes.iter().map(|h| format!("{h:016x}")).collect();
                    hashes.sort();
                    json!([if e.stored { "S" } else { "R" }, hashes])
                })
                .collect::<Vec<_>>()
        );
        got
    }
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
                    r.finished_at[step_json::index(parent) as usize].is_some_and(|f| f + 1 == step)
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
                    Some(Status::WaitingForRemoteKvs) => "waiting_for_remote_kvs",
                    Some(Status::Finished) | None => "finished",
                };
                if let Some(f) = r.scheduler.abort(i as u64) {
                    r.finished_at[i].get_or_insert(step);
                    r.ended[i] =
                        Some(("abort", if f.admitted { i64::from(f.num_cached_tokens) } else { -1 }));
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
            let got = step_json::schedule_json(&r.scheduler, &out);
            for field in fields {
                if got[field] != line[field] {
                    return Err(format!("step {step}: {field}: port {} vs vLLM {}", got[field], line[field]));
                }
            }
            if r.worker.is_some() {
                let meta = out.connector_meta.as_ref().and_then(|m| m.offload()).unwrap();
                for (field, got) in
                    [("loads", specs_json(&meta.loads, true)), ("stores", specs_json(&meta.stores, false))]
                {
                    if got != line[field] {
                        return Err(format!("step {step}: {field}: port {got} vs vLLM {}", line[field]));
                    }
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
                // The worker runs each batch's execute_model just before its update, in batch order.
                let output = r.worker.as_mut().and_then(|w| w.step(&batch));
                if r.worker.is_some() {
                    let got = output.as_ref().map(|o| {
                        json!([
                            o.finished_sending.iter().map(|k| id(*k)).collect::<Vec<_>>(),
                            o.finished_recving.iter().map(|k| id(*k)).collect::<Vec<_>>(),
                            o.invalid_block_ids
                        ])
                    });
                    if json!(got) != line["xfer"] {
                        return Err(format!(
                            "step {step}: xfer: port {} vs vLLM {}",
                            json!(got),
                            line["xfer"]
                        ));
                    }
                }
                r.scheduler.update_from_output_with(&batch, step, output.as_ref(), &mut update);
                for f in &update.finished {
                    r.finished_at[f.key as usize] = Some(step);
                    r.ended[f.key as usize] = Some(("length", i64::from(f.num_cached_tokens)));
                }
                let got = r.update_json(of_step, &update);
                let expected = expected_update(&line["update"]);
                let offload_fields: &[&str] = if r.worker.is_some() {
                    &["cpu_events", "connector_pc", "cached_tokens"]
                } else {
                    &["cached_tokens"]
                };
                for &field in ["of_step", "tokens", "finished", "stats", "free_blocks", "free_q", "kv_events"]
                    .iter()
                    .chain(offload_fields)
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
    if let Some(end) = &trace.end {
        let requests: Vec<Value> = (0..n)
            .map(|i| match r.ended[i] {
                Some((reason, cached)) => json!([id(i as u64), reason, cached]),
                None if r.added[i] => {
                    json!([id(i as u64), null, r.scheduler.num_cached_tokens(i as u64).map_or(-1, i64::from)])
                }
                None => json!([id(i as u64), null, null]),
            })
            .collect();
        if json!(requests) != end["requests"] {
            return Err(format!("end: requests: port {} vs vLLM {}", json!(requests), end["requests"]));
        }
    }
    if let Some(end) = trace.end.as_ref().filter(|e| e.get("held").is_some()) {
        let mut held: Vec<u64> =
            r.scheduler.held().map(|(k, _)| k).chain(r.scheduler.held_by_connector()).collect();
        held.sort_unstable();
        let held: Vec<Value> = held.into_iter().map(|k| json!(id(k))).collect();
        let got = json!({"held": held, "free_blocks": r.scheduler.kv().pool().num_free(),
            "cpu_blocks_present": r.scheduler.connector().and_then(|c| c.offloading()).map_or(0, |o| o.manager().len())});
        for field in ["held", "free_blocks", "cpu_blocks_present"] {
            if got[field] != end[field] {
                return Err(format!("end: {field}: port {} vs vLLM {}", got[field], end[field]));
            }
        }
    }
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
    let offload = traces.iter().filter(|t| t.name.starts_with("offload-")).count();
    assert!(offload >= 8, "at least 8 offloading workloads: found {offload}");
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
