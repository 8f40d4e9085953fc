//! Public traces replayed through a scenario: the Azure LLM inference CSV and Mooncake's JSONL,
//! read from the fixtures in `fixtures/workloads/` into requests with the right arrivals, token
//! counts and shared blocks, and bad lines refused by file, line and field.

mod common;

use std::path::{Path, PathBuf};

use blis_actors::{RunError, RunOptions, RunOutput, run};
use blis_contracts::{NodeKind, PromptPart, RequestSpec};
use blis_kernel::HostKind;
use tempfile::TempDir;

/// One instance replaying `path` in `format` as client `trace`.
fn scenario(path: &str, format: &str) -> String {
    common::one_pool(
        Some(5),
        Some("client_router_us: 200, router_engine_us: 50"),
        1,
        "max_model_len: 16384",
        &format!("\n  replays:\n    - {{ name: trace, path: {path}, format: {format} }}\n"),
    )
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/workloads")
}

fn replay(dir: PathBuf, path: &str, format: &str) -> Result<RunOutput, RunError> {
    let options = RunOptions {
        seed: None,
        host: HostKind::Inline,
        base_dir: Some(dir),
        export_workload: true,
        replications: Some(1),
        threads: None,
        build: None,
        coefficient_spread: false,
        ..RunOptions::default()
    };
    run(&scenario(path, format), options, &mut |_| {})
}

/// The released requests of the only client.
fn requests(output: &RunOutput) -> &[RequestSpec] {
    assert_eq!(output.workloads.len(), 1);
    &output.workloads[0].1
}

/// The prompt and output of a single-call request.
fn call(request: &RequestSpec) -> (&[PromptPart], u32) {
    assert_eq!(request.nodes.len(), 1, "{}", request.id);
    let NodeKind::Llm(call) = &request.nodes[0].kind else { panic!("{} is not an LLM call", request.id) };
    (&call.prompt, call.output_tokens)
}

fn shared(id: u32, tokens: u32) -> PromptPart {
    PromptPart::Shared { name: format!("mooncake/{id}"), tokens }
}

/// Writes `text` to `name` in a fresh folder, removed when dropped, and returns the folder.
fn scratch(test: &str, name: &str, text: &str) -> TempDir {
    let dir = tempfile::Builder::new().prefix(&format!("blis-public-traces-{test}-")).tempdir().unwrap();
    std::fs::write(dir.path().join(name), text).unwrap();
    dir
}

#[test]
fn an_azure_trace_replays_one_call_per_row_at_its_time_after_the_first_row() {
    let output = replay(fixtures(), "azure-code.csv", "azure-csv").unwrap();
    let requests = requests(&output);
    assert_eq!(requests.len(), 12);
    let arrivals: Vec<u64> = requests.iter().map(|r| r.arrival_us).collect();
    // The trace crosses midnight between rows 4 and 5; row 7's 1.2000005 s rounds up to 1.200001.
    assert_eq!(&arrivals[..8], [0, 208_327, 521_874, 521_874, 1_096_134, 1_503_346, 2_045_874, 2_691_875]);
    assert_eq!(arrivals[11], 6_615_331);
    assert_eq!(requests[0].id, "trace-0");
    assert_eq!(requests[11].id, "trace-11");
    assert_eq!(call(&requests[0]), (&[PromptPart::Tokens(4808)][..], 10));
    assert_eq!(call(&requests[11]), (&[PromptPart::Tokens(18)][..], 250));
    let calls = &output.calls;
    assert_eq!(calls.len(), 12);
    assert_eq!((calls[6].input_tokens, calls[6].output_tokens), (8225, 4));
    assert!(output.result.fates.conserved() && output.result.fates.completed == 12);
}

#[test]
fn an_azure_trace_may_give_its_times_in_seconds() {
    let csv = "GeneratedTokens,TIMESTAMP,ContextTokens\n7,100.5,30\n\n2,101.25,40\n";
    let dir = scratch("azure-seconds", "s.csv", csv);
    let output = replay(dir.path().to_path_buf(), "s.csv", "azure-csv").unwrap();
    let requests = requests(&output);
    assert_eq!(requests.iter().map(|r| r.arrival_us).collect::<Vec<_>>(), [0, 750_000]);
    assert_eq!(call(&requests[1]), (&[PromptPart::Tokens(40)][..], 2));
}

#[test]
fn a_mooncake_trace_shares_its_hash_blocks_across_requests() {
    let output = replay(fixtures(), "mooncake.jsonl", "mooncake").unwrap();
    let requests = requests(&output);
    assert_eq!(requests.len(), 12);
    let arrivals: Vec<u64> = requests.iter().map(|r| r.arrival_us).collect();
    assert_eq!(
        arrivals,
        [
            0, 0, 1_250_000, 1_250_000, 3_052_000, 4_000_000, 4_000_500, 5_120_000, 6_001_000, 7_500_000,
            9_000_000, 10_240_000
        ]
    );
    // The last block is shortened to the input length.
    assert_eq!(call(&requests[0]), (&[shared(0, 512), shared(1, 512), shared(2, 76)][..], 52));
    assert_eq!(
        call(&requests[4]).0,
        [shared(0, 512), shared(6, 512), shared(7, 512), shared(8, 512), shared(9, 239)]
    );
    // More tokens than the blocks hold: the rest are the request's own.
    assert_eq!(call(&requests[7]).0, [shared(10, 512), shared(11, 512), PromptPart::Tokens(276)]);
    assert_eq!(call(&requests[10]).0, [PromptPart::Tokens(40)]);
    assert_eq!(requests.len(), output.calls.len());
    for request in requests.iter() {
        // calls.jsonl is in the order requests end; find each request's record by its id.
        let record = output.calls.iter().find(|c| c.request_id == request.id).unwrap();
        let tokens: u32 = call(request)
            .0
            .iter()
            .map(|p| match p {
                PromptPart::Shared { tokens, .. } | PromptPart::Tokens(tokens) => *tokens,
                other => panic!("unexpected part {other:?}"),
            })
            .sum();
        assert_eq!(record.input_tokens, tokens);
    }
    // Request 5 repeats request 0's blocks after it finished: every full 16-token block of its
    // prompt but the last token is a cache hit. Request 3's block 5 is the start of request 11's.
    let cached = |id: &str| output.calls.iter().find(|c| c.request_id == id).unwrap().cached_tokens;
    assert_eq!(cached("trace-5"), 1088);
    assert_eq!(cached("trace-11"), 288);
    assert_eq!(cached("trace-6"), 0);
    assert!(output.result.fates.conserved() && output.result.fates.completed == 12);
}

/// The refusal of a run replaying `text` as `name` in `format`.
fn refusal(test: &str, name: &str, format: &str, text: &str) -> blis_contracts::FieldError {
    let dir = scratch(test, name, text);
    match replay(dir.path().to_path_buf(), name, format) {
        Err(RunError::Input(error)) => error,
        other => panic!("{test}: expected a refusal, got {:?}", other.map(|o| o.result.fates)),
    }
}

#[test]
fn bad_azure_rows_are_refused_by_file_line_and_column() {
    let header = "TIMESTAMP,ContextTokens,GeneratedTokens\n";
    let good = "2023-11-16 18:15:46.6805900,100,10\n";
    let cases = [
        (
            "zero-output",
            format!("{header}{good}2023-11-16 18:15:47.0,100,0\n"),
            "3.GeneratedTokens",
            "= 0: must be at least 1 token",
        ),
        (
            "zero-prompt",
            format!("{header}{good}2023-11-16 18:15:47.0,0,4\n"),
            "3.ContextTokens",
            "at least 1 token",
        ),
        (
            "not-a-number",
            format!("{header}{good}2023-11-16 18:15:47.0,1e3,4\n"),
            "3.ContextTokens",
            "whole number",
        ),
        (
            "bad-date",
            format!("{header}{good}2023-11-31 18:15:47.0,10,4\n"),
            "3.TIMESTAMP",
            "day 31 of month 11",
        ),
        (
            "back-in-time",
            format!("{header}{good}2023-11-16 18:15:46.0,10,4\n"),
            "3.TIMESTAMP",
            "earlier than the first row",
        ),
        (
            "out-of-order",
            format!("{header}{good}2023-11-16 18:15:49,10,4\n2023-11-16 18:15:48,10,4\n"),
            "4.TIMESTAMP",
            "go back in time",
        ),
        (
            "mixed-clocks",
            format!("{header}{good}17.5,10,4\n"),
            "3.TIMESTAMP",
            "a number of seconds, but the first row",
        ),
        ("short-row", format!("{header}{good}\n2023-11-16 18:15:47.0,10\n"), "4", "the header has 3 columns"),
        (
            "unknown-column",
            format!("TIMESTAMP,ContextTokens,GeneratedTokens,Model\n{good}"),
            "1",
            "unknown column",
        ),
        ("missing-column", format!("TIMESTAMP,ContextTokens\n{good}"), "1", "no GeneratedTokens column"),
        ("header-only", header.to_owned(), "", "holds no request"),
    ];
    for (test, text, line, cause) in cases {
        let error = refusal(test, "t.csv", "azure-csv", &text);
        let path = if line.is_empty() { String::new() } else { format!(":{line}") };
        assert_eq!(error.path, format!("workload.replays[0].path (t.csv){path}"), "{test}: {error}");
        assert!(error.to_string().contains(cause), "{test}: {error}");
    }
}

#[test]
fn bad_mooncake_lines_are_refused_by_file_line_and_field() {
    let good = r#"{"timestamp": 10, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}"#;
    let cases = [
        (
            r#"{"timestamp": 20, "input_length": 512, "output_length": 5, "hash_ids": [0, 1]}"#,
            "2.input_length",
            "need 513 to 1024 tokens",
        ),
        (
            r#"{"timestamp": 20, "input_length": 0, "output_length": 5, "hash_ids": []}"#,
            "2.input_length",
            "at least 1 token",
        ),
        (
            r#"{"timestamp": 20, "input_length": 9, "output_length": 0, "hash_ids": []}"#,
            "2.output_length",
            "at least 1 token",
        ),
        (
            r#"{"timestamp": 5, "input_length": 9, "output_length": 3, "hash_ids": []}"#,
            "2.timestamp",
            "earlier than the first line",
        ),
        (
            r#"{"timestamp": 20, "input_length": -9, "output_length": 3, "hash_ids": []}"#,
            "2.input_length",
            "-9",
        ),
        (
            r#"{"timestamp": 20, "input_length": 9, "output_length": 3, "hash_ids": [], "text": "x"}"#,
            "2.text",
            "unknown field `text`",
        ),
        (r#"{"timestamp": 20, "input_length": 9, "output_length": 3}"#, "2", "missing field `hash_ids`"),
    ];
    for (i, (line, path, cause)) in cases.iter().enumerate() {
        let error = refusal(&format!("mooncake-{i}"), "m.jsonl", "mooncake", &format!("{good}\n{line}\n"));
        assert_eq!(error.path, format!("workload.replays[0].path (m.jsonl):{path}"), "case {i}: {error}");
        assert!(error.to_string().contains(cause), "case {i}: {error}");
    }
}

#[test]
fn a_trace_row_no_model_could_serve_is_refused_with_the_bound() {
    let dir = scratch(
        "azure-huge",
        "huge.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 23:59:58.5081260,4294967295,10\n",
    );
    match replay(dir.path().to_path_buf(), "huge.csv", "azure-csv") {
        Err(RunError::Input(e)) => {
            assert!(e.path.ends_with("huge.csv):2.nodes[0].prompt"), "{e}");
            assert!(e.cause.contains("at most 16777216 tokens"), "{e}");
        }
        other => panic!("{:?}", other.map(|o| o.result.fates)),
    }
}
