//! The workload a baseline replays: a workload JSONL file (the form `run --export-workload
//! --token-ids` writes) whose every request is one LLM call with its prompt as token ids; any
//! other request is refused by name, before anything is sent.

use blis_contracts::{FieldError, NodeKind, PromptPart, RequestSpec};

/// One call to replay.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayCall {
    /// The request's id (the call's name, as a simulation of the same file names it).
    pub id: String,
    /// Its node's id.
    pub node: String,
    /// When to send it, µs after the replay starts.
    pub arrival_us: u64,
    /// The prompt's token ids.
    pub prompt: Vec<u32>,
    /// Output tokens to generate.
    pub output_tokens: u32,
    /// Its own timeout, µs, if the file gives one.
    pub timeout_us: Option<u64>,
}

/// The calls of the workload file `text` (named `source`), in arrival order; refuses a request
/// of several nodes, an interval or tool node, a prompt part other than token ids, a priority,
/// a repeated id and a call longer than `max_model_len`, naming the line and field.
pub fn replay_calls(source: &str, text: &str, max_model_len: u32) -> Result<Vec<ReplayCall>, FieldError> {
    let mut calls: Vec<ReplayCall> = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = format!("{source}:{}", index + 1);
        let request: RequestSpec = serde_json::from_str(line)
            .map_err(|e| FieldError::at(at.as_str(), format!("not a request: {e}")))?;
        request.validate(&at)?;
        let [node] = request.nodes.as_slice() else {
            return Err(FieldError::new(
                format!("{at}.nodes"),
                format!("{} nodes", request.nodes.len()),
                "baseline replays requests of one LLM call only (a DAG's later nodes carry earlier answers, which a real server writes itself)",
            ));
        };
        let call = match &node.kind {
            NodeKind::Llm(call) => call,
            NodeKind::Interval(_) => {
                return Err(FieldError::new(
                    format!("{at}.nodes[0].kind"),
                    "interval",
                    "baseline replays LLM calls only, not intervals",
                ));
            }
            NodeKind::Tool(_) => {
                return Err(FieldError::new(
                    format!("{at}.nodes[0].kind"),
                    "tool",
                    "baseline replays LLM calls only, not tool calls",
                ));
            }
        };
        if call.priority != 0 {
            return Err(FieldError::new(
                format!("{at}.nodes[0].priority"),
                call.priority,
                "baseline sends no priorities (the server's order is its own)",
            ));
        }
        let mut prompt = Vec::new();
        for (k, part) in call.prompt.iter().enumerate() {
            match part {
                PromptPart::TokenIds(ids) => prompt.extend_from_slice(ids),
                other => {
                    let kind = match other {
                        PromptPart::Tokens(_) => "tokens",
                        PromptPart::Shared { .. } => "shared",
                        _ => "history",
                    };
                    return Err(FieldError::new(
                        format!("{at}.nodes[0].prompt[{k}]"),
                        kind,
                        "baseline sends token ids: write the workload with `run --export-workload DIR --token-ids`",
                    ));
                }
            }
        }
        let length = prompt.len() as u64 + u64::from(call.output_tokens);
        if length > u64::from(max_model_len) {
            return Err(FieldError::new(
                format!("{at}.nodes[0]"),
                format!("{} prompt + {} output tokens", prompt.len(), call.output_tokens),
                format!("longer than the server's serving.max_model_len ({max_model_len})"),
            ));
        }
        if calls.iter().any(|c| c.id == request.id) {
            return Err(FieldError::new(
                format!("{at}.id"),
                &request.id,
                "another request of the file has this id",
            ));
        }
        calls.push(ReplayCall {
            id: request.id,
            node: node.id.clone(),
            arrival_us: request.arrival_us,
            prompt,
            output_tokens: call.output_tokens,
            timeout_us: call.timeout_us,
        });
    }
    if calls.is_empty() {
        return Err(FieldError::at(source, "holds no request"));
    }
    calls.sort_by_key(|c| c.arrival_us);
    Ok(calls)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: &str = r#"{"id":"r0","arrival_us":5,"nodes":[{"kind":"llm","id":"llm","prompt":[{"token_ids":[1,2,3]}],"output_tokens":4}]}"#;

    #[test]
    fn single_calls_with_token_ids_are_replayed_and_anything_else_is_refused_by_name() {
        let calls = replay_calls("w.jsonl", ONE, 4096).unwrap();
        assert_eq!(
            (calls[0].prompt.as_slice(), calls[0].output_tokens, calls[0].arrival_us),
            (&[1, 2, 3][..], 4, 5)
        );
        let refused = |line: &str| replay_calls("w.jsonl", &format!("{ONE}\n{line}"), 4096).unwrap_err();
        let two = r#"{"id":"r1","arrival_us":0,"nodes":[{"kind":"llm","id":"a","prompt":[{"token_ids":[1]}],"output_tokens":1},{"kind":"llm","id":"b","parents":["a"],"prompt":[{"history":"a"}],"output_tokens":1}]}"#;
        let e = refused(two);
        assert_eq!((e.path.as_str(), e.value.as_deref()), ("w.jsonl:2.nodes", Some("2 nodes")));
        let interval =
            r#"{"id":"r1","arrival_us":0,"nodes":[{"kind":"interval","id":"think","duration_us":10}]}"#;
        let e = refused(interval);
        assert_eq!((e.path.as_str(), e.value.as_deref()), ("w.jsonl:2.nodes[0].kind", Some("interval")));
        let counted = ONE.replace(r#"{"token_ids":[1,2,3]}"#, r#"{"tokens":3}"#).replace("r0", "r1");
        let e = refused(&counted);
        assert_eq!((e.path.as_str(), e.value.as_deref()), ("w.jsonl:2.nodes[0].prompt[0]", Some("tokens")));
        assert!(e.cause.contains("--token-ids"), "{e}");
        let e = refused(ONE);
        assert_eq!(e.path, "w.jsonl:2.id");
        let e = replay_calls("w.jsonl", ONE, 6).unwrap_err();
        assert!(e.cause.contains("max_model_len"), "{e}");
        assert!(replay_calls("w.jsonl", "\n", 6).is_err());
    }
}
