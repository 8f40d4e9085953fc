//! The P/D oracle: every step of every prefill/decode pair recorded from two of vLLM 0.15.1's own
//! schedulers with its NixlConnector (`traces/vllm-0.15.1/nixl-*.jsonl`, recorded by
//! `traces/harness/record_nixl.py`; the format is in the traces' manifest, "NIXL") is replayed
//! through two ports wired the same way, which must make the same decision at every step on both
//! sides — the schedule, the reads D asks for and the sends P arms, the transfer parameters P
//! returns, the blocks each side holds and frees, the tokens, the statistics and the KV events.
//!
//! As in the harness, only the NIXL worker is emulated (a read completes at its N-th poll, a held
//! request is released by its reader's notification or after a number of global steps); the
//! scheduler side under test is the port's.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;

use blis_engines::vllm::connector::{Connector, KvTransferParams, NixlScheduler};
use blis_engines::vllm::{
    EngineRequest, FinishedRequest, KvCacheManager, Policy, Scheduler, SchedulerLimits, SchedulerOutput,
    Status, UpdateOutput,
};
use serde_json::{Value, json};

#[path = "support/nixl_worker.rs"]
mod nixl_worker;
#[path = "support/step_json.rs"]
mod step_json;

use nixl_worker::{ENGINES, FakeNixlWorker, Knobs, Wires};
use step_json::{expected_update, id, ids, index, reason};

const SIDES: [&str; 2] = ["P", "D"];

struct Trace {
    name: String,
    header: Value,
    steps: Vec<Value>,
    end: Value,
}

fn traces() -> Vec<Trace> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../traces/vllm-0.15.1");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("the oracle traces are in the repository")
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "jsonl")
                && p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("nixl-"))
        })
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let mut lines = text.lines().map(|l| serde_json::from_str::<Value>(l).unwrap());
            let header = lines.next().unwrap();
            let mut steps: Vec<Value> = lines.collect();
            let end =
                steps.pop().filter(|l| l["kind"] == "end").expect("a NIXL trace ends with its end line");
            Trace { name: path.file_stem().unwrap().to_string_lossy().into_owned(), header, steps, end }
        })
        .collect()
}

/// One engine of the pair.
struct Side {
    engine: usize,
    scheduler: Scheduler,
    worker: FakeNixlWorker,
    queue: VecDeque<(u64, SchedulerOutput)>,
    asynchronous: bool,
    /// Each request's finish reason and num_cached_tokens (−1: never admitted), as it ended here.
    ended: Vec<Option<(&'static str, i64)>>,
    added: Vec<bool>,
    delivered: Vec<u32>,
}

fn scheduler(c: &Value, engine: usize) -> Scheduler {
    let u = |k: &str| c[k].as_u64().unwrap_or_else(|| panic!("config.{k}")) as u32;
    assert_eq!(c["kv_connector"], "NixlConnector");
    assert_eq!(c["engine_id"], ENGINES[engine]);
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
    let connector = Connector::Nixl(NixlScheduler::new(Arc::from(ENGINES[engine]), 1));
    let mut scheduler = Scheduler::with_connector(limits, kv, Some(connector));
    scheduler.set_record_kv_events(true);
    scheduler
}

fn params_json(key: u64, p: &KvTransferParams) -> Value {
    json!([
        id(key),
        p.do_remote_prefill,
        p.do_remote_decode,
        p.remote_block_ids,
        p.remote_engine_id.as_deref(),
        p.remote_request_key.map(id),
        p.tp_size
    ])
}

impl Side {
    fn new(c: &Value, engine: usize, n: usize) -> Side {
        Side {
            engine,
            scheduler: scheduler(c, engine),
            worker: FakeNixlWorker::default(),
            queue: VecDeque::new(),
            asynchronous: c["async_scheduling"].as_bool().unwrap(),
            ended: vec![None; n],
            added: vec![false; n],
            delivered: vec![0; n],
        }
    }

    fn add(
        &mut self,
        i: usize,
        step: u64,
        prompt: &[u32],
        max_tokens: u32,
        params: Option<KvTransferParams>,
    ) {
        let outputs: Vec<u32> = (0..max_tokens).map(|k| 20_000 + 1_000 * i as u32 + k).collect();
        let request = EngineRequest {
            key: i as u64,
            name: Arc::from(id(i as u64)),
            priority: 0,
            prompt_token_ids: prompt.into(),
            output_token_ids: outputs.into(),
            arrival_us: step,
        };
        match params {
            Some(params) => self.scheduler.add_request_with_transfer(&request, params),
            None => self.scheduler.add_request(&request),
        }
        self.added[i] = true;
    }

    fn state(&self, key: u64) -> &'static str {
        match self.scheduler.status(key) {
            Some(Status::Waiting) => "waiting",
            Some(Status::Running) => "running",
            Some(Status::Preempted) => "preempted",
            Some(Status::WaitingForRemoteKvs) => "waiting_for_remote_kvs",
            Some(Status::Finished) => "finished",
            None if self.added[key as usize] => "finished",
            None => "not_added",
        }
    }

    fn schedule_json(&self, out: &SchedulerOutput) -> Value {
        let meta = out.connector_meta.as_ref().and_then(|m| m.nixl()).expect("a NIXL step has metadata");
        let mut recvs: Vec<_> = meta.reqs_to_recv.iter().collect();
        recvs.sort_by_key(|r| r.key);
        let sorted = |keys: &mut dyn Iterator<Item = u64>| {
            let mut keys: Vec<u64> = keys.collect();
            keys.sort_unstable();
            ids(&keys)
        };
        let mut got = step_json::schedule_json(&self.scheduler, out);
        got["recvs"] = json!(
            recvs.iter().map(|r| json!([id(r.key), r.local_blocks, r.remote_block_ids])).collect::<Vec<_>>()
        );
        got["sends"] = sorted(&mut meta.reqs_to_send.iter().map(|&(k, _)| k));
        got["in_batch"] = sorted(&mut meta.reqs_in_batch.iter().copied());
        got["not_processed"] = sorted(&mut meta.reqs_not_processed.iter().copied());
        got
    }

    fn update_json(&mut self, of_step: u64, update: &UpdateOutput) -> Value {
        let mut got = step_json::update_json(&self.scheduler, &mut self.delivered, of_step, update);
        got["params"] = json!(
            update
                .finished
                .iter()
                .filter_map(|f| f.kv_transfer.as_ref().map(|p| params_json(f.key, p)))
                .collect::<Vec<_>>()
        );
        got
    }

    /// One engine step at global `step` (EngineCore.step, or step_with_batch_queue when
    /// asynchronous), checked against the trace's side record; the requests it finished.
    fn step(&mut self, step: u64, line: &Value, wires: &mut Wires) -> Result<Vec<FinishedRequest>, String> {
        const SCHEDULE_FIELDS: [&str; 15] = [
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
            "recvs",
            "sends",
            "in_batch",
            "not_processed",
        ];
        let mut batch = None;
        if self.scheduler.has_requests() {
            let mut out = SchedulerOutput::default();
            self.scheduler.schedule(&mut out);
            let got = self.schedule_json(&out);
            for field in SCHEDULE_FIELDS {
                if got[field] != line[field] {
                    return Err(format!("{field}: port {} vs vLLM {}", got[field], line[field]));
                }
            }
            let total = out.total;
            self.queue.push_back((step, out));
            if !(self.asynchronous && total > 0 && self.queue.len() < 2) {
                batch = self.queue.pop_front();
            }
        } else {
            if !line["scheduled"].is_null() {
                return Err("the port has nothing to schedule, vLLM scheduled".into());
            }
            batch = self.queue.pop_front();
        }
        let Some((of_step, batch)) = batch else {
            return if line["update"].is_null() && line["xfer"].is_null() {
                Ok(Vec::new())
            } else {
                Err("vLLM ran an update, the port did not".into())
            };
        };
        if line["update"].is_null() {
            return Err("the port ran an update, vLLM did not".into());
        }
        let output = self.worker.execute(self.engine, &batch, step, wires);
        let got = output
            .as_ref()
            .map(|o| json!([ids(&o.finished_sending), ids(&o.finished_recving), o.invalid_block_ids]));
        if json!(got) != line["xfer"] {
            return Err(format!("xfer: port {} vs vLLM {}", json!(got), line["xfer"]));
        }
        let mut update = UpdateOutput::default();
        self.scheduler.update_from_output_with(&batch, step, output.as_ref(), &mut update);
        for f in &update.finished {
            self.ended[f.key as usize] = Some((reason(f.reason), i64::from(f.num_cached_tokens)));
        }
        let got = self.update_json(of_step, &update);
        let expected = expected_update(&line["update"]);
        for field in [
            "of_step",
            "tokens",
            "finished",
            "stats",
            "free_blocks",
            "free_q",
            "kv_events",
            "connector_pc",
            "cached_tokens",
            "params",
        ] {
            if got[field] != expected[field] {
                return Err(format!("update.{field}: port {} vs vLLM {}", got[field], expected[field]));
            }
        }
        Ok(std::mem::take(&mut update.finished))
    }

    fn end_json(&self, n: usize) -> Value {
        let requests: Vec<Value> = (0..n)
            .map(|i| match self.ended[i] {
                Some((reason, cached)) => json!([id(i as u64), reason, cached]),
                None if self.added[i] => json!([
                    id(i as u64),
                    null,
                    self.scheduler.num_cached_tokens(i as u64).map_or(-1, i64::from)
                ]),
                None => json!([id(i as u64), null, null]),
            })
            .collect();
        let mut held: Vec<u64> =
            self.scheduler.held().map(|(k, _)| k).chain(self.scheduler.held_by_connector()).collect();
        held.sort_unstable();
        json!({"requests": requests, "held": ids(&held), "free_blocks": self.scheduler.kv().pool().num_free()})
    }
}

fn replay(trace: &Trace) -> Result<usize, String> {
    let header = &trace.header;
    let requests = header["requests"].as_array().unwrap();
    let n = requests.len();
    let nixl = &header["nixl"];
    let mut wires = Wires {
        notifications: [Vec::new(), Vec::new()],
        expiry: BTreeMap::new(),
        knobs: Knobs {
            read_steps: nixl["read_steps"].as_u64().unwrap() as u32,
            expiry_steps: nixl["expiry_steps"].as_u64(),
            fail_reads: nixl["fail_reads"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(r, k)| (index(r), k.as_u64().unwrap() as usize))
                .collect(),
        },
    };
    let mut sides = [Side::new(&header["config"], 0, n), Side::new(&header["config_d"], 1, n)];
    let prompts: Vec<Vec<u32>> = requests
        .iter()
        .map(|r| r["prompt"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect())
        .collect();
    let mut returned: BTreeMap<usize, KvTransferParams> = BTreeMap::new();
    let mut pending_d: Vec<usize> = Vec::new();
    for line in &trace.steps {
        let step = line["step"].as_u64().unwrap();
        let mut touched = [false; 2];
        let mut added: [Vec<Value>; 2] = Default::default();
        // 1. Arrivals: prefill legs on P, then decode legs (P's finishes of the previous step)
        // and direct requests on D, in request order.
        for (i, r) in requests.iter().enumerate() {
            if !r["direct"].as_bool().unwrap() && r["arrival_step"].as_u64() == Some(step) {
                sides[0].add(i, step, &prompts[i], 1, Some(KvTransferParams::prefill_leg()));
                added[0].push(json!(id(i as u64)));
            }
        }
        let mut decode: Vec<usize> = std::mem::take(&mut pending_d);
        decode.extend((0..n).filter(|&i| {
            requests[i]["direct"].as_bool().unwrap() && requests[i]["arrival_step"].as_u64() == Some(step)
        }));
        decode.sort_unstable();
        for i in decode {
            let max_tokens = requests[i]["max_tokens"].as_u64().unwrap() as u32;
            let params = returned.remove(&i);
            sides[1].add(i, step, &prompts[i], max_tokens, params);
            added[1].push(json!(id(i as u64)));
        }
        // 2. Aborts due now, in request order, on the side named.
        let mut aborted: [Vec<Value>; 2] = Default::default();
        for (i, r) in requests.iter().enumerate() {
            if r["abort_step"].as_u64() != Some(step) {
                continue;
            }
            let s = SIDES.iter().position(|s| r["abort_side"] == *s).expect("abort_side P or D");
            let side = &mut sides[s];
            let state = side.state(i as u64);
            if let Some(f) = side.scheduler.abort(i as u64) {
                side.ended[i] = Some(("abort", if f.admitted { i64::from(f.num_cached_tokens) } else { -1 }));
            }
            aborted[s].push(json!([id(i as u64), state]));
        }
        // 3./4. P's engine step, then D's.
        for s in 0..2 {
            let record = &line[SIDES[s]];
            let steps = sides[s].scheduler.has_requests() || !sides[s].queue.is_empty();
            touched[s] = steps || !added[s].is_empty() || !aborted[s].is_empty();
            if touched[s] == record.is_null() {
                return Err(format!(
                    "step {step}: {}: the port stepped {}, vLLM {}",
                    SIDES[s],
                    touched[s],
                    !record.is_null()
                ));
            }
            if !touched[s] {
                continue;
            }
            for (field, got) in [("added", &added[s]), ("aborted", &aborted[s])] {
                if json!(got) != record[field] {
                    return Err(format!(
                        "step {step}: {}.{field}: port {} vs vLLM {}",
                        SIDES[s],
                        json!(got),
                        record[field]
                    ));
                }
            }
            if !steps {
                continue;
            }
            let finished = sides[s]
                .step(step, record, &mut wires)
                .map_err(|e| format!("step {step}: {}: {e}", SIDES[s]))?;
            if s == 0 {
                for f in finished {
                    if let Some(params) = f.kv_transfer {
                        let i = f.key as usize;
                        pending_d.push(i);
                        returned.insert(i, params);
                        if let Some(k) = wires.knobs.expiry_steps {
                            wires.expiry.insert(f.key, step + k);
                        }
                    }
                }
            }
        }
    }
    for s in 0..2 {
        let got = sides[s].end_json(n);
        for field in ["requests", "held", "free_blocks"] {
            if got[field] != trace.end[SIDES[s]][field] {
                return Err(format!(
                    "end: {}.{field}: port {} vs vLLM {}",
                    SIDES[s], got[field], trace.end[SIDES[s]][field]
                ));
            }
        }
    }
    // A trace of an upstream stall stops with requests still on D; every other trace ends with
    // all of them finished on both sides.
    let stall = header.get("stop_after_steps").is_some();
    if sides[1].scheduler.has_unfinished() != stall || sides[0].scheduler.has_unfinished() {
        return Err(format!(
            "unfinished requests after the last step: port P {} D {}, vLLM P false D {stall}",
            sides[0].scheduler.has_unfinished(),
            sides[1].scheduler.has_unfinished()
        ));
    }
    Ok(trace.steps.len())
}

#[test]
fn every_recorded_step_of_vllm_0_15_1_with_nixl_on_both_sides_is_matched() {
    let traces = traces();
    assert!(traces.len() >= 16, "at least 8 P/D workloads × sync/async: found {}", traces.len());
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
    assert!(steps > 2_000, "{steps} steps replayed");
    assert!(
        traces.iter().any(|t| t.header.get("stop_after_steps").is_some()),
        "the upstream stall on D is among the traces"
    );
    eprintln!("{} NIXL traces, {steps} steps, every step matched on both sides", traces.len());
}
