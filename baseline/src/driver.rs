//! The replay: each call sent at its scheduled arrival through the completions API, streamed,
//! and recorded as its client saw it.
//!
//! This is the second documented exception to the wall-clock ban (beside the progress
//! display): a real server runs in real time, so the driver reads `Instant::now` to pace the
//! sends and to stamp the chunks, each use marked with its reason. Nothing here runs on a
//! simulation path, and nothing the simulator decides depends on it.
//!
//! Each call is one POST to `/v1/completions` with the prompt as token ids, `max_tokens` the
//! call's output tokens, `ignore_eos` (so exactly that many are generated), `stream` with the
//! usage chunk, and `return_token_ids` (vLLM ≥ 0.10.2), whose per-chunk `token_ids` count the
//! tokens of each chunk exactly. A call ends in one fate, never lost: `completed` when the
//! stream delivered every token and `[DONE]`; `timed_out` when it was not done within its
//! timeout; `dropped` with the reason otherwise — `connection: …`, `http_<status>: …`,
//! `server_error: …` (an error event in the stream), `stream_closed_early: k of n tokens`,
//! `token_count: …` (more tokens than asked, or the usage chunk disagreeing), `no_token_ids`
//! (a server that does not report them), `bad_chunk: …`.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use blis_contracts::{CALLS_SCHEMA, CallRecord, CallsHeader, Fate, FieldError, ServedPool, Writer};
use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::config::BaselineConfig;
use crate::token_clock::TokenClock;
use crate::workload::{ReplayCall, replay_calls};

/// The longest server message a fate's reason keeps, in characters.
const REASON_CHARS: usize = 200;

/// Why a baseline did not run.
#[derive(Debug)]
pub enum BaselineError {
    /// A bad config, workload or output path, or a server that is not the one configured.
    Input(FieldError),
    /// The server could not be asked what it serves.
    Server(String),
    /// The output could not be written.
    Output(String),
}

impl std::fmt::Display for BaselineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BaselineError::Input(e) => write!(f, "{e}"),
            BaselineError::Server(reason) | BaselineError::Output(reason) => write!(f, "{reason}"),
        }
    }
}

/// What a finished baseline did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BaselineSummary {
    /// Calls sent.
    pub sent: u64,
    /// Calls completed.
    pub completed: u64,
    /// Calls timed out.
    pub timed_out: u64,
    /// Calls dropped (HTTP errors, errors in the stream, streams closed early).
    pub dropped: u64,
    /// The latest a call left after its scheduled arrival, µs (the driver's own lag).
    pub max_send_lag_us: u64,
}

/// Replay `workload` against the server `config` names and write what its client saw to
/// `output` (`calls.jsonl` format, header first, then each call as it settles), which must not
/// exist.
pub fn run_baseline(
    config: &BaselineConfig,
    workload: &Path,
    output: &Path,
) -> Result<BaselineSummary, BaselineError> {
    if output.exists() {
        return Err(BaselineError::Input(FieldError::new(
            "--output-jsonl",
            output.display(),
            "exists: a baseline never overwrites a recorded run; name a new file",
        )));
    }
    let source = workload.display().to_string();
    let bytes = std::fs::read(workload).map_err(|e| {
        BaselineError::Input(FieldError::new("--workload", &source, format!("cannot read: {e}")))
    })?;
    let text = String::from_utf8(bytes.clone())
        .map_err(|_| BaselineError::Input(FieldError::new("--workload", &source, "not UTF-8 text")))?;
    let calls = replay_calls(&source, &text, config.serving.max_model_len).map_err(BaselineError::Input)?;
    let client_name =
        workload.file_stem().map_or_else(|| "baseline".to_owned(), |s| s.to_string_lossy().into_owned());
    let header = CallsHeader {
        calls: CALLS_SCHEMA.to_owned(),
        writer: Writer::Baseline,
        blis_actor_version: env!("CARGO_PKG_VERSION").to_owned(),
        server: Some(config.url.clone()),
        pools: vec![ServedPool {
            model: config.model.clone(),
            chip: config.chip.clone(),
            serving: config.serving.clone(),
        }],
        workload_sha256: Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| BaselineError::Server(format!("cannot start the HTTP client: {e}")))?;
    runtime.block_on(replay(config, &header, calls, &client_name, output))
}

/// Check the server, then send every call at its time and write the records as they settle.
async fn replay(
    config: &BaselineConfig,
    header: &CallsHeader,
    calls: Vec<ReplayCall>,
    client_name: &str,
    output: &Path,
) -> Result<BaselineSummary, BaselineError> {
    let http = reqwest::Client::builder()
        .build()
        .map_err(|e| BaselineError::Server(format!("cannot start the HTTP client: {e}")))?;
    let base = config.url.trim_end_matches('/').to_owned();
    check_server(&http, &base, config).await?;
    let write_error =
        |e: std::io::Error| BaselineError::Output(format!("cannot write {}: {e}", output.display()));
    let file = File::options().write(true).create_new(true).open(output).map_err(write_error)?;
    let mut out = BufWriter::new(file);
    serde_json::to_writer(&mut out, header).map_err(|e| write_error(e.into()))?;
    out.write_all(b"\n").map_err(write_error)?;

    let total = calls.len();
    let (records, mut settled) = tokio::sync::mpsc::unbounded_channel::<(CallRecord, u64)>();
    #[allow(clippy::disallowed_methods)]
    // wall clock: a real server runs in real time; sends are paced from here
    let start = Instant::now();
    let endpoint = format!("{base}/v1/completions");
    let context = std::sync::Arc::new(CallContext {
        http,
        endpoint,
        model: config.served_model().to_owned(),
        instance: base,
        client: client_name.to_owned(),
        default_timeout: Duration::from_secs_f64(config.request_timeout_s),
        start,
    });
    tokio::spawn(async move {
        for call in calls {
            tokio::time::sleep_until(tokio::time::Instant::from_std(
                start + Duration::from_micros(call.arrival_us),
            ))
            .await;
            let context = context.clone();
            let records = records.clone();
            tokio::spawn(async move {
                let settled = replay_call(&context, call).await;
                let _ = records.send(settled);
            });
        }
    });
    let mut summary = BaselineSummary::default();
    for _ in 0..total {
        let Some((record, lag_us)) = settled.recv().await else { break };
        summary.sent += 1;
        summary.max_send_lag_us = summary.max_send_lag_us.max(lag_us);
        match record.fate {
            Fate::Completed => summary.completed += 1,
            Fate::TimedOut => summary.timed_out += 1,
            _ => summary.dropped += 1,
        }
        serde_json::to_writer(&mut out, &record).map_err(|e| write_error(e.into()))?;
        out.write_all(b"\n").map_err(write_error)?;
    }
    out.flush().map_err(write_error)?;
    Ok(summary)
}

/// What every call's task shares.
struct CallContext {
    http: reqwest::Client,
    endpoint: String,
    model: String,
    instance: String,
    client: String,
    default_timeout: Duration,
    start: Instant,
}

/// Refuse a server that does not serve the configured model, or reports another
/// `max_model_len` than the config's.
async fn check_server(
    http: &reqwest::Client,
    base: &str,
    config: &BaselineConfig,
) -> Result<(), BaselineError> {
    let url = format!("{base}/v1/models");
    let unreachable =
        |e: String| BaselineError::Server(format!("cannot ask {url} what the server serves: {e}"));
    let response = http.get(&url).send().await.map_err(|e| unreachable(e.to_string()))?;
    if !response.status().is_success() {
        return Err(unreachable(format!("HTTP {}", response.status())));
    }
    let models: Value = serde_json::from_str(&response.text().await.map_err(|e| unreachable(e.to_string()))?)
        .map_err(|e| unreachable(format!("not JSON: {e}")))?;
    let served: Vec<&Value> = models["data"].as_array().map(|m| m.iter().collect()).unwrap_or_default();
    let wanted = config.served_model();
    let Some(entry) = served.iter().find(|m| m["id"].as_str() == Some(wanted)) else {
        let names: Vec<&str> = served.iter().filter_map(|m| m["id"].as_str()).collect();
        return Err(BaselineError::Input(FieldError::new(
            if config.served_model.is_some() { "served_model" } else { "model" },
            wanted,
            format!("the server serves {names:?}, not this model"),
        )));
    };
    if let Some(reported) = entry["max_model_len"].as_u64()
        && reported != u64::from(config.serving.max_model_len)
    {
        return Err(BaselineError::Input(FieldError::new(
            "serving.max_model_len",
            config.serving.max_model_len,
            format!(
                "the server reports max_model_len {reported}: the config must say how the server was started"
            ),
        )));
    }
    Ok(())
}

/// Send one call at once and follow its stream; its record and how late it left, µs.
async fn replay_call(context: &CallContext, call: ReplayCall) -> (CallRecord, u64) {
    #[allow(clippy::disallowed_methods)] // wall clock: the send, from which the client's latencies count
    let sent = Instant::now();
    let sent_us = micros(sent - context.start);
    let timeout = call.timeout_us.map_or(context.default_timeout, Duration::from_micros);
    let body = json!({
        "model": context.model,
        "prompt": call.prompt,
        "max_tokens": call.output_tokens,
        "ignore_eos": true,
        "stream": true,
        "stream_options": { "include_usage": true },
        "return_token_ids": true,
    });
    let outcome = tokio::time::timeout(timeout, stream_call(context, body, sent, call.output_tokens)).await;
    #[allow(clippy::disallowed_methods)] // wall clock: when the client stopped waiting
    let settled = Instant::now();
    let (fate, token_latency_us, cached_tokens) = match outcome {
        Err(_) => (Fate::TimedOut, Vec::new(), 0),
        Ok(Err(reason)) => (Fate::Dropped { reason }, Vec::new(), 0),
        Ok(Ok((latency, cached))) => (Fate::Completed, latency, cached),
    };
    let request_e2e_us = (fate == Fate::Completed).then(|| token_latency_us.iter().sum());
    let record = CallRecord {
        replication: 0,
        request_id: call.id.clone(),
        request: call.id,
        node: call.node,
        parents: Vec::new(),
        client: context.client.clone(),
        arrival_us: call.arrival_us,
        input_tokens: call.prompt.len() as u32,
        output_tokens: call.output_tokens,
        instance: context.instance.clone(),
        cached_tokens,
        preemptions: 0,
        fate,
        settled_us: Some(micros(settled - context.start)),
        token_latency_us,
        request_e2e_us,
        disaggregated: None,
    };
    (record, sent_us.saturating_sub(call.arrival_us))
}

/// POST the call and read its stream to the end: the latency array and the prompt tokens the
/// server found cached (0 unless it reports them), or why the call failed.
async fn stream_call(
    context: &CallContext,
    body: Value,
    sent: Instant,
    expected: u32,
) -> Result<(Vec<u64>, u32), String> {
    let response = context
        .http
        .post(&context.endpoint)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| format!("connection: {e}"))?;
    let status = response.status();
    if !status.is_success() {
        let text = response.text().await.unwrap_or_default();
        return Err(format!("http_{}: {}", status.as_u16(), cut(&text)));
    }
    let mut events = response.bytes_stream().eventsource();
    let mut clock = TokenClock::default();
    let mut usage_tokens = None;
    let mut cached = 0;
    let mut done = false;
    while let Some(event) = events.next().await {
        #[allow(clippy::disallowed_methods)] // wall clock: when the client saw this chunk
        let at = Instant::now();
        let event = event
            .map_err(|e| format!("stream_closed_early: {} of {expected} tokens ({e})", clock.tokens()))?;
        if event.data.trim() == "[DONE]" {
            done = true;
            break;
        }
        let chunk: Value = serde_json::from_str(&event.data).map_err(|e| format!("bad_chunk: {e}"))?;
        if let Some(error) = chunk.get("error") {
            let message = error["message"].as_str().map_or_else(|| error.to_string(), str::to_owned);
            return Err(format!("server_error: {}", cut(&message)));
        }
        let mut tokens = 0;
        for choice in chunk["choices"].as_array().map(Vec::as_slice).unwrap_or_default() {
            match choice["token_ids"].as_array() {
                Some(ids) => tokens += ids.len(),
                None if choice["text"].as_str().is_some_and(|t| !t.is_empty()) => {
                    return Err("no_token_ids: the server does not report each chunk's token ids (vLLM does from 0.10.2 with return_token_ids)".to_owned());
                }
                None => {}
            }
        }
        clock.chunk(micros(at - sent), tokens);
        let usage = &chunk["usage"];
        if let Some(n) = usage["completion_tokens"].as_u64() {
            usage_tokens = Some(n);
            cached = usage["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap_or(0) as u32;
        }
    }
    let seen = clock.tokens();
    if !done {
        return Err(format!("stream_closed_early: {seen} of {expected} tokens"));
    }
    if seen != expected as usize {
        return Err(format!("token_count: {seen} of {expected} tokens streamed"));
    }
    if let Some(n) = usage_tokens.filter(|n| *n != u64::from(expected)) {
        return Err(format!("token_count: the usage chunk says {n} of {expected} tokens"));
    }
    Ok((clock.into_latency(), cached))
}

/// A duration in whole µs.
fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// `text` cut to [`REASON_CHARS`] characters, on one line.
fn cut(text: &str) -> String {
    text.chars().take(REASON_CHARS).map(|c| if c.is_control() { ' ' } else { c }).collect()
}
