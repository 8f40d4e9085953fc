//! `baseline` end to end against an OpenAI-compatible streaming server started here on
//! 127.0.0.1: a mock that emits tokens at known times (gaps of 60 ms, some chunks carrying two
//! tokens) and, chosen by each prompt's first token id, fails in each way a real server can.
//! The recorded latency arrays must match the mock's schedule; every failure must become a
//! fate; bad inputs and a mismatched server must be refused by name.

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::time::Duration;

use blis_baseline::{BaselineConfig, BaselineError, run_baseline};
use blis_contracts::{CallsFile, Fate, Writer};
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

/// Time to first token and the gap between chunks, ms, from the request's receipt.
const FIRST_MS: u64 = 100;
const GAP_MS: u64 = 60;

/// How a call's stream goes, by its prompt's first token id.
const NORMAL: u32 = 1;
const ERROR_MID_STREAM: u32 = 2;
const HTTP_500: u32 = 3;
const CLOSED_EARLY: u32 = 4;
const SLOW: u32 = 5;

/// The chunks of a stream of `n` tokens: sizes 1, 2, 1, 2, … (the last one cut to fit).
fn chunk_sizes(n: u32) -> Vec<u32> {
    let mut sizes = Vec::new();
    let mut left = n;
    while left > 0 {
        let size = if sizes.len() % 2 == 0 { 1 } else { 2 }.min(left);
        sizes.push(size);
        left -= size;
    }
    sizes
}

/// The latency array the client should record for `n` tokens, ms: every token of a chunk at
/// the chunk's time.
fn schedule_ms(n: u32) -> Vec<u64> {
    let mut out = Vec::new();
    for (k, size) in chunk_sizes(n).into_iter().enumerate() {
        out.push(if k == 0 { FIRST_MS } else { GAP_MS });
        out.extend(std::iter::repeat_n(0, size as usize - 1));
    }
    out
}

fn sse(data: &Value) -> Frame<Bytes> {
    Frame::data(Bytes::from(format!("data: {data}\n\n")))
}

fn chunk(ids: &[u32]) -> Value {
    json!({"object": "text_completion", "choices": [{"index": 0, "text": "x".repeat(ids.len()), "token_ids": ids, "finish_reason": null}]})
}

type Body = BoxBody<Bytes, Infallible>;

/// One request to the mock, whose `/v1/models` reports `max_model_len`.
async fn handle(request: Request<Incoming>, max_model_len: u32) -> Result<Response<Body>, Infallible> {
    let path = request.uri().path().to_owned();
    if path == "/v1/models" {
        let models = json!({"object": "list", "data": [{"id": "mock-model", "object": "model", "max_model_len": max_model_len}]});
        return Ok(Response::new(Full::new(Bytes::from(models.to_string())).boxed()));
    }
    let body = request.into_body().collect().await.unwrap().to_bytes();
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["model"], "mock-model");
    assert_eq!((body["stream"].as_bool(), body["ignore_eos"].as_bool()), (Some(true), Some(true)));
    let kind = body["prompt"][0].as_u64().unwrap() as u32;
    let max_tokens = body["max_tokens"].as_u64().unwrap() as u32;
    if kind == HTTP_500 {
        let mut response = Response::new(Full::new(Bytes::from("{\"error\":\"engine dead\"}")).boxed());
        *response.status_mut() = hyper::StatusCode::INTERNAL_SERVER_ERROR;
        return Ok(response);
    }
    let (frames, rx) = tokio::sync::mpsc::unbounded_channel::<Frame<Bytes>>();
    tokio::spawn(async move {
        let origin = tokio::time::Instant::now();
        let first = if kind == SLOW { 2_000 } else { FIRST_MS };
        let mut at = Duration::from_millis(first);
        let mut next_id = 100;
        for (k, size) in chunk_sizes(max_tokens).into_iter().enumerate() {
            if k == 2 && kind == ERROR_MID_STREAM {
                let _ = frames.send(sse(
                    &json!({"error": {"object": "error", "message": "engine crashed", "code": 500}}),
                ));
                let _ = frames.send(Frame::data(Bytes::from("data: [DONE]\n\n")));
                return;
            }
            if k == 2 && kind == CLOSED_EARLY {
                return;
            }
            tokio::time::sleep_until(origin + at).await;
            let ids: Vec<u32> = (next_id..next_id + size).collect();
            next_id += size;
            if frames.send(sse(&chunk(&ids))).is_err() {
                return;
            }
            at += Duration::from_millis(GAP_MS);
        }
        let usage = json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": max_tokens}});
        let _ = frames.send(sse(&usage));
        let _ = frames.send(Frame::data(Bytes::from("data: [DONE]\n\n")));
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|frame| (Ok::<_, Infallible>(frame), rx))
    });
    let mut response = Response::new(StreamBody::new(stream).boxed());
    response.headers_mut().insert("content-type", "text/event-stream".parse().unwrap());
    Ok(response)
}

/// Start the mock on a free port of 127.0.0.1, on a thread of its own, reporting
/// `max_model_len`; its base URL.
fn start_mock(max_model_len: u32) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| handle(request, max_model_len));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
    });
    url
}

fn config(url: &str, max_model_len: u32) -> BaselineConfig {
    let text = format!(
        r#"
url = "{url}"
model = "Llama-3.1-8B"
served_model = "mock-model"
chip = "H100-SXM"
request_timeout_s = 5

[serving]
engine = "vllm"
engine_version = "0.15.1"
replicas = 1
tensor_parallel_size = 1
max_num_seqs = 256
max_num_batched_tokens = 8192
max_model_len = {max_model_len}
block_size = 16
enable_prefix_caching = true
enable_chunked_prefill = true
gpu_memory_utilization = 0.9
scheduling_policy = "fcfs"
"#
    );
    BaselineConfig::parse("baseline.toml", &text).unwrap()
}

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("baseline").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A request of one call, its prompt starting with `kind`.
fn line(id: &str, arrival_ms: u64, kind: u32, output_tokens: u32, timeout_ms: Option<u64>) -> String {
    let timeout = timeout_ms.map_or(String::new(), |t| format!(",\"timeout_us\":{}", t * 1000));
    format!(
        r#"{{"id":"{id}","arrival_us":{},"nodes":[{{"kind":"llm","id":"llm","prompt":[{{"token_ids":[{kind},7,9]}}],"output_tokens":{output_tokens}{timeout}}}]}}"#,
        arrival_ms * 1000
    )
}

#[test]
fn a_replay_records_the_servers_schedule_and_every_failure_as_a_fate() {
    let url = start_mock(4096);
    let dir = scratch("replay");
    let workload = dir.join("w.jsonl");
    let lines = [
        line("r0", 0, NORMAL, 5, None),
        line("r1", 50, NORMAL, 4, None),
        line("r2", 100, ERROR_MID_STREAM, 5, None),
        line("r3", 100, HTTP_500, 5, None),
        line("r4", 150, CLOSED_EARLY, 5, None),
        line("r5", 0, SLOW, 3, Some(400)),
    ];
    std::fs::write(&workload, lines.join("\n") + "\n").unwrap();
    let output = dir.join("real.jsonl");
    let summary = run_baseline(&config(&url, 4096), &workload, &output).unwrap();
    assert_eq!((summary.sent, summary.completed, summary.timed_out, summary.dropped), (6, 2, 1, 3));
    assert!(summary.max_send_lag_us < 50_000, "the driver sent {} µs late", summary.max_send_lag_us);

    let file = CallsFile::parse("real.jsonl", &std::fs::read_to_string(&output).unwrap()).unwrap();
    assert_eq!((file.header.writer, file.header.server.as_deref()), (Writer::Baseline, Some(url.as_str())));
    assert_eq!(file.header.pools[0].serving.max_model_len, 4096);
    let expected_hash: String = sha2_hex(&std::fs::read(&workload).unwrap());
    assert_eq!(file.header.workload_sha256, expected_hash);
    let call = |id: &str| file.calls.iter().find(|c| c.request_id == id).unwrap();
    for (id, n, arrival_us) in [("r0", 5, 0), ("r1", 4, 50_000)] {
        let record = call(id);
        assert_eq!(
            (&record.fate, record.output_tokens, record.input_tokens, record.arrival_us),
            (&Fate::Completed, n, 3, arrival_us)
        );
        let want = schedule_ms(n);
        assert_eq!(
            record.token_latency_us.len(),
            want.len(),
            "{id}: every token counted, two per second chunk"
        );
        for (k, (got, want)) in record.token_latency_us.iter().zip(&want).enumerate() {
            if *want == 0 {
                assert_eq!(*got, 0, "{id}: token {k} came in the same chunk as the one before");
            } else {
                // Wide: the schedule is the mock's; the client sees it through loopback and a
                // shared machine. Gaps are 60 ms, so 25 ms still tells a gap from a shared chunk.
                let (low, high) = (want * 1000, want * 1000 + 25_000);
                let low = if k == 0 { low } else { low - 25_000 };
                assert!(
                    (low..=high).contains(got),
                    "{id}: token {k} at {got} µs, the mock's schedule says {want} ms"
                );
            }
        }
        assert_eq!(record.request_e2e_us, Some(record.token_latency_us.iter().sum()));
    }
    let reason = |id: &str| match &call(id).fate {
        Fate::Dropped { reason } => reason.clone(),
        other => panic!("{id}: {other:?}"),
    };
    assert!(reason("r2").starts_with("server_error: engine crashed"), "{}", reason("r2"));
    assert!(reason("r3").starts_with("http_500:"), "{}", reason("r3"));
    assert!(reason("r4").starts_with("stream_closed_early: 3 of 5 tokens"), "{}", reason("r4"));
    assert_eq!(call("r5").fate, Fate::TimedOut);
    for id in ["r2", "r3", "r4", "r5"] {
        assert!(call(id).token_latency_us.is_empty() && call(id).settled_us.is_some(), "{id}");
    }
    let r5 = call("r5").settled_us.unwrap();
    assert!(
        (400_000..1_000_000).contains(&r5),
        "the slow call was given up at its 400 ms timeout, not at {r5} µs"
    );

    // A second replay to the same output is refused, and the recorded run stays as it was.
    let before = std::fs::read(&output).unwrap();
    let error = run_baseline(&config(&url, 4096), &workload, &output).unwrap_err();
    assert!(
        matches!(&error, BaselineError::Input(e) if e.path == "--output-jsonl" && e.cause.contains("never overwrites")),
        "{error}"
    );
    assert_eq!(std::fs::read(&output).unwrap(), before);
}

#[test]
fn a_simulations_token_id_export_replays_against_the_server_and_compares_with_the_simulation() {
    // One instance at its defaults (max_model_len 131072, as the mock now reports); six single
    // calls of 2 to 5 output tokens, prompts exported as token ids (their first id, drawn at
    // random, picks no failure mode of the mock: every call streams normally).
    let url = start_mock(131_072);
    let scenario = r#"
seed: 4
cluster:
  network: { client_router_us: 200, router_engine_us: 50 }
  router: { policy: round-robin }
  pools:
    - name: p
      replicas: 1
      hardware: { chip: H100-SXM }
      model: Llama-3.1-8B
      engine: { kind: vllm, version: "0.15.1", args: {} }
workload:
  clients:
    - name: chat
      requests: 6
      arrival: { process: poisson, rate_per_s: 20 }
      input_tokens: { dist: uniform, min: 20, max: 60 }
      output_tokens: { dist: uniform, min: 2, max: 5 }
"#;
    let options = blis_actors::RunOptions {
        replications: Some(1),
        export_workload: true,
        export_token_ids: true,
        ..blis_actors::RunOptions::default()
    };
    let simulated = blis_actors::run(scenario, options, &mut |_| {}).unwrap();
    let dir = scratch("export");
    let workload = dir.join("chat.jsonl");
    let lines: Vec<String> =
        simulated.workloads[0].1.iter().map(|r| serde_json::to_string(r).unwrap()).collect();
    let first_ids = simulated.workloads[0].1.iter().map(|r| match &r.nodes[0].kind {
        blis_contracts::NodeKind::Llm(call) => match call.prompt.as_slice() {
            [blis_contracts::PromptPart::TokenIds(ids)] => ids[0],
            other => panic!("not exported as token ids: {other:?}"),
        },
        other => panic!("not an LLM call: {other:?}"),
    });
    assert!(first_ids.collect::<Vec<_>>().iter().all(|id| !(ERROR_MID_STREAM..=SLOW).contains(id)));
    std::fs::write(&workload, lines.join("\n") + "\n").unwrap();
    let mut config = config(&url, 131_072);
    config.serving = simulated.calls_header.pools[0].serving.clone();
    let real = dir.join("real.jsonl");
    let summary = run_baseline(&config, &workload, &real).unwrap();
    assert_eq!((summary.sent, summary.completed), (6, 6));
    let sim_path = dir.join("sim.jsonl");
    std::fs::write(&sim_path, simulated.calls_jsonl()).unwrap();
    let read = |path: &Path| {
        CallsFile::parse(&path.display().to_string(), &std::fs::read_to_string(path).unwrap()).unwrap()
    };
    let runs = vec![
        ("real".to_owned(), blis_actors::calls_comparison::Run::Calls(read(&real))),
        ("sim".to_owned(), blis_actors::calls_comparison::Run::Calls(read(&sim_path))),
    ];
    // Same calls, arrivals and token counts, same serving settings: compared, not refused.
    let comparison = blis_actors::calls_comparison::compare_runs(&runs, &[50.0]).unwrap();
    let ttft = comparison.rows.iter().find(|r| r.metric == "ttft_ms" && r.statistic == "mean").unwrap();
    let real_ttft = ttft.values[0].0.unwrap();
    assert!(
        (100.0..150.0).contains(&real_ttft),
        "the mock's first token comes after 100 ms, not {real_ttft} ms"
    );
    assert!(ttft.values[1].1.unwrap() < -0.5, "the simulated H100 answers far sooner than the mock");
    assert_eq!(comparison.paired.iter().find(|p| p.metric == "ttft_ms").unwrap().pairs, 6);
}

fn sha2_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn workloads_it_cannot_replay_and_a_server_started_otherwise_are_refused_by_name() {
    let url = start_mock(4096);
    let dir = scratch("refusals");
    let refused = |name: &str, text: &str, max_model_len: u32| {
        let workload = dir.join(format!("{name}.jsonl"));
        std::fs::write(&workload, text).unwrap();
        let output = dir.join(format!("{name}-out.jsonl"));
        let error = run_baseline(&config(&url, max_model_len), &workload, &output).unwrap_err();
        assert!(!output.exists(), "{name}: a refused baseline writes nothing");
        match error {
            BaselineError::Input(e) => e,
            other => panic!("{name}: {other}"),
        }
    };
    let dag = r#"{"id":"d","arrival_us":0,"nodes":[{"kind":"llm","id":"a","prompt":[{"token_ids":[1]}],"output_tokens":2},{"kind":"llm","id":"b","parents":["a"],"prompt":[{"history":"a"}],"output_tokens":2}]}"#;
    let e = refused("dag", dag, 4096);
    assert_eq!(
        (e.path.as_str(), e.value.as_deref()),
        (format!("{}:1.nodes", dir.join("dag.jsonl").display()).as_str(), Some("2 nodes"))
    );
    let interval =
        r#"{"id":"i","arrival_us":0,"nodes":[{"kind":"interval","id":"think","duration_us":1000}]}"#;
    let e = refused("interval", interval, 4096);
    assert!(
        e.path.ends_with("interval.jsonl:1.nodes[0].kind") && e.value.as_deref() == Some("interval"),
        "{e}"
    );
    let counts = line("c", 0, NORMAL, 2, None).replace("{\"token_ids\":[1,7,9]}", "{\"tokens\":3}");
    let e = refused("counts", &counts, 4096);
    assert!(e.path.ends_with("counts.jsonl:1.nodes[0].prompt[0]"), "{e}");
    // The server says it was started with max_model_len 4096; the config says 8192.
    let e = refused("mismatch", &line("m", 0, NORMAL, 2, None), 8192);
    assert_eq!((e.path.as_str(), e.value.as_deref()), ("serving.max_model_len", Some("8192")));
    assert!(e.cause.contains("reports max_model_len 4096"), "{e}");
    let mut other_model = config(&url, 4096);
    other_model.served_model = Some("another-model".into());
    let workload = dir.join("model.jsonl");
    std::fs::write(&workload, line("m", 0, NORMAL, 2, None)).unwrap();
    let error = run_baseline(&other_model, &workload, &dir.join("model-out.jsonl")).unwrap_err();
    assert!(matches!(&error, BaselineError::Input(e) if e.path == "served_model"), "{error}");
}
