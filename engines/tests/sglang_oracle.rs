//! Replays SGLang 0.5.23's own scheduler, step by step.
//!
//! Each `traces/sglang-0.5.23/<workload>.jsonl` was recorded by `traces/harness/record_sglang.py`
//! from the release's batch forming and radix cache (format and MANIFEST:
//! `traces/harness/sglang-trace-format.md`). The port is fed the same arrivals and aborts and the
//! same output tokens, and must form the same batch at every step — kind, prefill rows with their
//! prefix and chunk lengths, decode rows, retractions in order, `new_token_ratio` to the bit,
//! `batch_is_full`, the chunked request, the waiting and running order, the pool sizes — and
//! finish the same requests for the same reasons.

use std::path::{Path, PathBuf};

use blis_engines::sglang::radix_cache::EvictionPolicy;
use blis_engines::sglang::scheduler::{
    Batch, BatchKind, Finish, RequestId, SchedulePolicy, Scheduler, SchedulerConfig,
};
use serde_json::{Value, json};

#[path = "support/python_random.rs"]
mod python_random;
use python_random::PythonRandom;

fn traces() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../traces/sglang-0.5.23");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("the SGLang traces are in the repository")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.ends_with(".jsonl") && !name.starts_with("radix-")
        })
        .collect();
    paths.sort();
    paths
}

fn u(v: &Value) -> usize {
    v.as_u64().expect("a count") as usize
}

fn config(header: &Value) -> SchedulerConfig {
    let c = &header["config"];
    let ratio = &c["new_token_ratio"];
    SchedulerConfig {
        page_size: u(&c["page_size"]) as u32,
        pool_tokens: u(&c["max_total_num_tokens"]),
        chunked_prefill_size: c["chunked_prefill_size"].as_u64().map(|v| v as usize),
        max_prefill_tokens: u(&c["max_prefill_tokens"]),
        max_running: u(&c["pp_max_micro_batch_size"]),
        req_pool_size: u(&c["req_to_token_pool_size"]),
        max_req_len: u(&c["max_req_len"]),
        policy: match c["schedule_policy"].as_str() {
            Some("lof") => SchedulePolicy::Lof,
            Some("lpm") => SchedulePolicy::Lpm,
            Some("dfs-weight") => SchedulePolicy::DfsWeight,
            Some("random") => SchedulePolicy::Random,
            _ => SchedulePolicy::Fcfs,
        },
        ratio_init: ratio["init"].as_f64().expect("init"),
        ratio_min: ratio["min"].as_f64().expect("min"),
        ratio_decay: ratio["decay"].as_f64().expect("decay"),
        eos_token: u(&c["eos_token_id"]) as u32,
        overlap: c["overlap"].as_bool().expect("overlap"),
        mixed_chunk: c["enable_mixed_chunk"].as_bool().expect("enable_mixed_chunk"),
        eviction: EvictionPolicy::Lru,
    }
}

fn reason(finish: Finish) -> &'static str {
    match finish {
        Finish::Length => "length",
        Finish::Stop => "stop",
        Finish::Abort => "abort",
    }
}

/// Replay one trace; the number of steps, or the first difference.
fn replay(path: &Path) -> Result<usize, String> {
    let text = std::fs::read_to_string(path).expect("a readable trace");
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).expect("JSON")).collect();
    let header = &lines[0];
    let requests = header["requests"].as_array().expect("requests");
    let rid = |i: RequestId| requests[i]["rid"].as_str().expect("rid").to_owned();
    let eos_at: Vec<Option<usize>> =
        requests.iter().map(|r| r["eos_at"].as_u64().map(|v| v as usize)).collect();
    let token = |i: RequestId, k: usize| {
        if eos_at[i] == Some(k) { 2 } else { 1000 + ((131 * i + k) % 30000) as u32 }
    };
    let config = config(header);
    let overlap = config.overlap;
    // The harness calls random.seed(random_seed) before each trace; ServerArgs then draws its
    // own unset random_seed from that generator (`arg_groups/serving_hook.py`:
    // random.randint(0, 1 << 30)) before any pass, and only the `random` policy draws after.
    let mut python = PythonRandom::seeded(u(&header["config"]["random_seed"]) as u32);
    python.below((1 << 30) + 1);
    let mut sched = Scheduler::with_shuffle(config, Box::new(python)).map_err(|e| e.to_string())?;
    let mut last_launched: Option<usize> = None;
    let mut ids: Vec<Option<RequestId>> = vec![None; requests.len()];
    let mut steps = 0;
    for expected in &lines[1..] {
        if expected["kind"] == "end" {
            break;
        }
        let step = u(&expected["step"]);
        let mut got = serde_json::Map::new();
        got.insert("step".into(), json!(step));
        let mut added = Vec::new();
        for (i, r) in requests.iter().enumerate() {
            if r["arrival_step"].as_u64() == Some(step as u64) {
                let prompt: Vec<u32> = r["prompt"]
                    .as_array()
                    .expect("prompt")
                    .iter()
                    .map(|t| t.as_u64().expect("token") as u32)
                    .collect();
                let (id, clipped) = sched.add_request(prompt, u(&r["max_new_tokens"]));
                assert_eq!(id, i, "requests arrive in index order");
                ids[i] = Some(id);
                added.push(json!([rid(i), clipped]));
            }
        }
        got.insert("added".into(), json!(added));
        let mut aborted = Vec::new();
        for (i, r) in requests.iter().enumerate() {
            if r["abort_step"].as_u64() == Some(step as u64) {
                let id = ids[i].expect("an abort after arrival");
                sched.abort(id);
                aborted.push(json!([rid(i), expected["aborted"][aborted.len()][1].clone()]));
            }
        }
        got.insert("aborted".into(), json!(aborted));
        got.insert("ratio_before".into(), json!(sched.new_token_ratio()));
        let chunked_before = sched.chunked();
        let batch: Option<Batch> = sched.next_batch();
        let (kind, extend, decode) = match &batch {
            None => ("idle", vec![], vec![]),
            Some(b) if b.kind == BatchKind::Decode => {
                ("decode", vec![], b.requests.iter().map(|&r| json!(rid(r))).collect())
            }
            Some(b) => (
                if b.kind == BatchKind::Mixed { "mixed" } else { "extend" },
                b.requests
                    .iter()
                    .filter(|r| !b.decoding.contains(r))
                    .map(|&r| {
                        let row = sched.extend_row(r);
                        json!([
                            rid(r),
                            row.prefix_len,
                            row.extend_len,
                            u8::from(sched.chunked() == Some(r)),
                            u8::from(chunked_before == Some(r)),
                            u8::from(sched.ever_retracted(r))
                        ])
                    })
                    .collect(),
                b.decoding.iter().map(|&r| json!(rid(r))).collect(),
            ),
        };
        got.insert("kind".into(), json!(kind));
        got.insert("extend".into(), json!(extend));
        got.insert("decode".into(), json!(decode));
        got.insert("retracted".into(), json!(sched.retracted().iter().map(|&r| rid(r)).collect::<Vec<_>>()));
        got.insert(
            "oom_aborted".into(),
            json!(sched.oom_aborted().iter().map(|&r| rid(r)).collect::<Vec<_>>()),
        );
        let chunk_aborts: Vec<String> = sched.chunked_aborted().iter().map(|&r| rid(r)).collect();
        got.insert("chunked_aborted".into(), json!(chunk_aborts));
        got.insert("ratio_formed".into(), json!(sched.new_token_ratio()));
        got.insert("batch_is_full".into(), json!(sched.batch_is_full()));
        got.insert("chunked".into(), json!(sched.chunked().map(rid)));
        got.insert("waiting".into(), json!(sched.waiting().iter().map(|&r| rid(r)).collect::<Vec<_>>()));
        got.insert("running".into(), json!(sched.running().iter().map(|&r| rid(r)).collect::<Vec<_>>()));
        got.insert("sizes".into(), json!(sched.sizes()));
        let mut results = Vec::new();
        let mut idle_reset = false;
        let mut applied = |sched: &mut Scheduler, of_step: usize| {
            let finished: Vec<Value> =
                sched.take_finished().into_iter().map(|(r, f, n)| json!([rid(r), reason(f), n])).collect();
            results.push(json!({"of_step": of_step, "finished": finished, "sizes": sched.sizes()}));
        };
        if overlap {
            // event_loop_overlap: launch this batch, then apply the previous one's result.
            let previous = last_launched.take();
            if let Some(b) = &batch {
                sched.launch(b);
                last_launched = Some(step);
            }
            if let Some(of_step) = previous {
                sched.process_oldest(token);
                applied(&mut sched, of_step);
            } else if batch.is_none() {
                idle_reset = sched.on_idle();
            }
        } else if let Some(b) = &batch {
            sched.process_result(b, token);
            applied(&mut sched, step);
        } else {
            idle_reset = sched.on_idle();
        }
        sched.set_last_batch(batch);
        got.insert("results".into(), json!(results));
        got.insert("idle_reset".into(), json!(idle_reset));
        got.insert("ratio_after".into(), json!(sched.new_token_ratio()));
        let got = Value::Object(got);
        if &got != expected {
            return Err(format!("{} step {step}:\n  expected {expected}\n  port     {got}", path.display()));
        }
        steps += 1;
    }
    Ok(steps)
}

#[test]
fn the_port_forms_every_recorded_batch_as_sglang_does() {
    let mut failures = Vec::new();
    let (mut replayed, mut steps) = (0, 0);
    for path in traces() {
        match replay(&path) {
            Ok(n) => {
                replayed += 1;
                steps += n;
            }
            Err(e) => failures.push(e),
        }
    }
    assert!(failures.is_empty(), "{} traces diverge:\n{}", failures.len(), failures.join("\n"));
    assert!(replayed >= 55 && steps >= 4_190, "only {replayed} traces, {steps} steps replayed");
}
