//! The first line of `calls.jsonl`: who wrote the file (a simulation or a real-server
//! baseline), what served the calls and which workload they came from, so that `compare` can
//! refuse two files that did not run the same thing; and the reading of a whole file.

use serde::{Deserialize, Serialize};

use crate::call::CallRecord;
use crate::error::FieldError;

/// The value of the header's `calls` field, which tells a header line from a call record.
pub const CALLS_SCHEMA: &str = "blis-actor/calls/v1";

/// Who wrote a `calls.jsonl`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Writer {
    /// The simulator (`blis-actor run`).
    #[serde(rename = "blis-actor run")]
    Run,
    /// A replay against a real server (`blis-actor baseline`).
    #[serde(rename = "baseline")]
    Baseline,
}

/// The header record: the first line of every `calls.jsonl`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallsHeader {
    /// Always [`CALLS_SCHEMA`].
    pub calls: String,
    /// Who wrote the file.
    pub writer: Writer,
    /// The blis-actor release that wrote it.
    pub blis_actor_version: String,
    /// The server's base URL (a baseline only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// What served the calls, one entry per pool (a baseline has one).
    pub pools: Vec<ServedPool>,
    /// SHA-256 (hex) of the workload: the workload file's bytes for a replay of one file (so a
    /// baseline and a simulation of the same file agree), else of the scenario text as given
    /// followed by the run seed in decimal.
    pub workload_sha256: String,
}

/// One pool of identical engine instances.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServedPool {
    /// The model, by its catalog name.
    pub model: String,
    /// The accelerator, by its catalog name.
    pub chip: String,
    /// How the engines were configured.
    pub serving: ServingSettings,
}

/// The serving settings that decide latency, in vLLM's own argument names.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServingSettings {
    /// Engine kind (`vllm`).
    pub engine: String,
    /// Engine release, e.g. `0.15.1`.
    pub engine_version: String,
    /// Engine instances behind the endpoint.
    pub replicas: u32,
    /// `--tensor-parallel-size`.
    pub tensor_parallel_size: u32,
    /// `--max-num-seqs`.
    pub max_num_seqs: u32,
    /// `--max-num-batched-tokens`.
    pub max_num_batched_tokens: u32,
    /// `--max-model-len`.
    pub max_model_len: u32,
    /// `--block-size`.
    pub block_size: u32,
    /// `--enable-prefix-caching`.
    pub enable_prefix_caching: bool,
    /// `--enable-chunked-prefill`.
    pub enable_chunked_prefill: bool,
    /// `--gpu-memory-utilization`.
    pub gpu_memory_utilization: f64,
    /// `--scheduling-policy`.
    pub scheduling_policy: String,
}

impl CallsHeader {
    /// The first field (as a path from the header, fields in alphabetical order) where `other`
    /// names other hardware, model or serving settings than `self`, with both values; `None` if
    /// they agree.
    pub fn serving_difference(&self, other: &CallsHeader) -> Option<(String, String, String)> {
        let ours = serde_json::to_value(&self.pools).expect("headers serialise");
        let theirs = serde_json::to_value(&other.pools).expect("headers serialise");
        first_difference("pools", &ours, &theirs)
    }
}

/// The first path under `path` where `a` and `b` differ, with both values as JSON.
fn first_difference(
    path: &str,
    a: &serde_json::Value,
    b: &serde_json::Value,
) -> Option<(String, String, String)> {
    use serde_json::Value;
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            x.iter().find_map(|(k, v)| first_difference(&format!("{path}.{k}"), v, &y[k.as_str()]))
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (v, w))| first_difference(&format!("{path}[{i}]"), v, w)),
        (Value::Array(x), Value::Array(y)) => {
            Some((path.to_owned(), format!("{} entries", x.len()), format!("{} entries", y.len())))
        }
        _ if a == b => None,
        _ => Some((path.to_owned(), a.to_string(), b.to_string())),
    }
}

/// A whole `calls.jsonl`: its header and its call records in file order.
#[derive(Clone, Debug, PartialEq)]
pub struct CallsFile {
    /// The first line.
    pub header: CallsHeader,
    /// Every other line.
    pub calls: Vec<CallRecord>,
}

impl CallsFile {
    /// Read a file's text; `source` names it in refusals (`<source>:<line>`).
    pub fn parse(source: &str, text: &str) -> Result<CallsFile, FieldError> {
        let mut lines = text.lines().enumerate().filter(|(_, line)| !line.trim().is_empty());
        let Some((_, first)) = lines.next() else {
            return Err(FieldError::at(source, "empty: a calls.jsonl starts with its header line"));
        };
        let header: CallsHeader = serde_json::from_str(first).map_err(|e| {
            FieldError::at(
                format!("{source}:1"),
                format!(
                    "not a calls.jsonl header ({e}); files written before the header existed must be re-run"
                ),
            )
        })?;
        if header.calls != CALLS_SCHEMA {
            return Err(FieldError::new(
                format!("{source}:1.calls"),
                &header.calls,
                format!("this build reads `{CALLS_SCHEMA}`"),
            ));
        }
        let mut calls = Vec::new();
        for (index, line) in lines {
            let record: CallRecord = serde_json::from_str(line).map_err(|e| {
                FieldError::at(format!("{source}:{}", index + 1), format!("not a call record: {e}"))
            })?;
            calls.push(record);
        }
        Ok(CallsFile { header, calls })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> ServingSettings {
        ServingSettings {
            engine: "vllm".into(),
            engine_version: "0.15.1".into(),
            replicas: 1,
            tensor_parallel_size: 1,
            max_num_seqs: 256,
            max_num_batched_tokens: 8192,
            max_model_len: 4096,
            block_size: 16,
            enable_prefix_caching: true,
            enable_chunked_prefill: true,
            gpu_memory_utilization: 0.9,
            scheduling_policy: "fcfs".into(),
        }
    }

    fn header() -> CallsHeader {
        CallsHeader {
            calls: CALLS_SCHEMA.into(),
            writer: Writer::Baseline,
            blis_actor_version: "0.1.0".into(),
            server: Some("http://127.0.0.1:8000".into()),
            pools: vec![ServedPool {
                model: "Llama-3.1-8B".into(),
                chip: "H100-SXM".into(),
                serving: settings(),
            }],
            workload_sha256: "ab".into(),
        }
    }

    #[test]
    fn the_header_reads_back_and_the_first_serving_difference_is_named() {
        let line = serde_json::to_string(&header()).unwrap();
        assert!(line.starts_with(r#"{"calls":"blis-actor/calls/v1","writer":"baseline""#), "{line}");
        let file = CallsFile::parse("a.jsonl", &format!("{line}\n")).unwrap();
        assert_eq!((file.header, file.calls.len()), (header(), 0));
        let mut other = header();
        other.pools[0].serving.max_num_seqs = 128;
        other.pools[0].serving.block_size = 32;
        let (path, ours, theirs) = header().serving_difference(&other).unwrap();
        assert_eq!(
            (path.as_str(), ours.as_str(), theirs.as_str()),
            ("pools[0].serving.block_size", "16", "32")
        );
        assert_eq!(header().serving_difference(&header()), None);
    }

    #[test]
    fn a_file_without_a_header_or_with_a_bad_line_is_refused_by_line() {
        let record = r#"{"replication":0,"request_id":"r","request":"r","node":"llm","client":"c","arrival_us":0,"input_tokens":1,"output_tokens":1,"instance":"","cached_tokens":0,"preemptions":0,"fate":"completed","token_latency_us":[5]}"#;
        let e = CallsFile::parse("old.jsonl", record).unwrap_err();
        assert_eq!(e.path, "old.jsonl:1");
        let line = serde_json::to_string(&header()).unwrap();
        let e = CallsFile::parse("b.jsonl", &format!("{line}\n{record}\n{{}}\n")).unwrap_err();
        assert_eq!(e.path, "b.jsonl:3");
        assert_eq!(CallsFile::parse("c", &format!("{line}\n{record}\n")).unwrap().calls.len(), 1);
    }
}
