//! One request of a workload as a DAG of nodes: the line format of a workload file
//! (`--export-workload`, trace replay) and the form every client source is compiled to.
//!
//! A request arrives at `arrival_us` and holds nodes — LLM calls, tool calls, intervals — with
//! edges to their parents; the client releases a node when all its parents have finished.
//! Prompts are lists of parts, so a later turn can carry an earlier node's prompt and output
//! and requests can share named system prompts, with token ids that are fixed in advance.

use serde::{Deserialize, Serialize};

use crate::bounds;
use crate::error::FieldError;

/// One request (a line of a workload JSONL file).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestSpec {
    /// Unique within its client; calls are named `<id>` (one node) or `<id>/<node>`.
    pub id: String,
    /// When the client sends its first nodes, µs after the client starts.
    pub arrival_us: u64,
    /// The nodes, each after its parents (a node's parents appear before it).
    pub nodes: Vec<NodeSpec>,
}

/// One node of a request, written `{"id": "a", "parents": [...], "kind": "llm", ...}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(from = "NodeLine", into = "NodeLine")]
pub struct NodeSpec {
    /// Unique within the request.
    pub id: String,
    /// Nodes that must finish before this one starts.
    pub parents: Vec<String>,
    /// What the node does.
    pub kind: NodeKind,
}

/// What a node does.
#[derive(Clone, Debug, PartialEq)]
pub enum NodeKind {
    /// An LLM call sent through the router.
    Llm(LlmCall),
    /// A tool call that takes this long, µs.
    Tool(u64),
    /// A pause (a user's think time) this long, µs.
    Interval(u64),
}

/// One LLM call.
#[derive(Clone, Debug, PartialEq)]
pub struct LlmCall {
    /// The prompt, part after part.
    pub prompt: Vec<PromptPart>,
    /// Tokens to generate (the engine stops at exactly this many).
    pub output_tokens: u32,
    /// Engine scheduling priority (lower first under the `priority` policy).
    pub priority: i64,
    /// Abort the call if it is not answered this long after it was sent, µs.
    pub timeout_us: Option<u64>,
}

/// A node as a line holds it (one flat object, tagged by `kind`, unknown fields refused).
#[derive(Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
enum NodeLine {
    Llm {
        id: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        parents: Vec<String>,
        prompt: Vec<PromptPart>,
        output_tokens: u32,
        #[serde(default, skip_serializing_if = "is_zero")]
        priority: i64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_us: Option<u64>,
    },
    Tool {
        id: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        parents: Vec<String>,
        duration_us: u64,
    },
    Interval {
        id: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        parents: Vec<String>,
        duration_us: u64,
    },
}

fn is_zero(value: &i64) -> bool {
    *value == 0
}

impl From<NodeLine> for NodeSpec {
    fn from(line: NodeLine) -> NodeSpec {
        match line {
            NodeLine::Llm { id, parents, prompt, output_tokens, priority, timeout_us } => NodeSpec {
                id,
                parents,
                kind: NodeKind::Llm(LlmCall { prompt, output_tokens, priority, timeout_us }),
            },
            NodeLine::Tool { id, parents, duration_us } => {
                NodeSpec { id, parents, kind: NodeKind::Tool(duration_us) }
            }
            NodeLine::Interval { id, parents, duration_us } => {
                NodeSpec { id, parents, kind: NodeKind::Interval(duration_us) }
            }
        }
    }
}

impl From<NodeSpec> for NodeLine {
    fn from(node: NodeSpec) -> NodeLine {
        let NodeSpec { id, parents, kind } = node;
        match kind {
            NodeKind::Llm(LlmCall { prompt, output_tokens, priority, timeout_us }) => {
                NodeLine::Llm { id, parents, prompt, output_tokens, priority, timeout_us }
            }
            NodeKind::Tool(duration_us) => NodeLine::Tool { id, parents, duration_us },
            NodeKind::Interval(duration_us) => NodeLine::Interval { id, parents, duration_us },
        }
    }
}

/// A piece of a prompt.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum PromptPart {
    /// This many tokens of the call's own, with ids drawn from the substream of the request,
    /// node and part.
    Tokens(u32),
    /// These token ids.
    TokenIds(Vec<u32>),
    /// A named block of tokens shared by every prompt that names it (a system prompt, a
    /// document), `tokens` long, its ids drawn from the substream of the name.
    Shared {
        /// The name.
        name: String,
        /// Its length in tokens.
        tokens: u32,
    },
    /// The whole prompt and output of an earlier LLM node of the same request (a conversation's
    /// history).
    History(String),
}

impl RequestSpec {
    /// Refuse a request whose nodes are not a DAG in order: duplicate ids, unknown parents,
    /// parents after their children (which also rules out cycles), history of a node that is
    /// not an ancestor LLM node, or an empty LLM call. `path` names the request for messages.
    pub fn validate(&self, path: &str) -> Result<(), FieldError> {
        if self.nodes.is_empty() {
            return Err(FieldError::new(format!("{path}.nodes"), "[]", "a request needs at least one node"));
        }
        if self.nodes.len() > bounds::MAX_NODES {
            return Err(FieldError::new(
                format!("{path}.nodes"),
                format!("{} nodes", self.nodes.len()),
                format!(
                    "a request has at most {} nodes (a call's key holds its node in 16 bits)",
                    bounds::MAX_NODES
                ),
            ));
        }
        bounds::check_micros(&format!("{path}.arrival_us"), self.arrival_us)?;
        for (i, node) in self.nodes.iter().enumerate() {
            let at = format!("{path}.nodes[{i}]");
            if self.nodes[..i].iter().any(|n| n.id == node.id) {
                return Err(FieldError::new(
                    format!("{at}.id"),
                    &node.id,
                    "another node of the request has this id",
                ));
            }
            for (j, parent) in node.parents.iter().enumerate() {
                match self.nodes.iter().position(|n| &n.id == parent) {
                    None => {
                        return Err(FieldError::new(
                            format!("{at}.parents[{j}]"),
                            parent,
                            "no node of the request has this id",
                        ));
                    }
                    Some(p) if p >= i => {
                        return Err(FieldError::new(
                            format!("{at}.parents[{j}]"),
                            parent,
                            "a parent must come before its child (nodes in order; no cycles)",
                        ));
                    }
                    Some(_) => {}
                }
            }
            if let NodeKind::Interval(duration_us) = node.kind {
                bounds::check_micros(&format!("{at}.duration_us"), duration_us)?;
            }
            if let NodeKind::Llm(call) = &node.kind {
                let tokens: u64 = call
                    .prompt
                    .iter()
                    .map(|p| match p {
                        PromptPart::Tokens(n) | PromptPart::Shared { tokens: n, .. } => u64::from(*n),
                        PromptPart::TokenIds(ids) => ids.len() as u64,
                        PromptPart::History(_) => 1,
                    })
                    .sum();
                if tokens == 0 {
                    return Err(FieldError::new(
                        format!("{at}.prompt"),
                        "[]",
                        "a prompt needs at least one token",
                    ));
                }
                for (field, count) in [("prompt", tokens), ("output_tokens", u64::from(call.output_tokens))] {
                    if count > bounds::MAX_CALL_TOKENS {
                        return Err(FieldError::new(
                            format!("{at}.{field}"),
                            format!("{count} tokens"),
                            format!(
                                "at most {} tokens, beyond the context of any model in the catalog",
                                bounds::MAX_CALL_TOKENS
                            ),
                        ));
                    }
                }
                if let Some(timeout) = call.timeout_us {
                    bounds::check_micros(&format!("{at}.timeout_us"), timeout)?;
                }
                if call.output_tokens == 0 {
                    return Err(FieldError::new(
                        format!("{at}.output_tokens"),
                        0,
                        "must be at least 1 token",
                    ));
                }
                for (k, part) in call.prompt.iter().enumerate() {
                    if let PromptPart::History(of) = part
                        && !self.is_llm_ancestor(of, i)
                    {
                        return Err(FieldError::new(
                            format!("{at}.prompt[{k}].history"),
                            of,
                            "must name an LLM node this node depends on",
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether the node `id` is an LLM node and an ancestor of node `index`.
    fn is_llm_ancestor(&self, id: &str, index: usize) -> bool {
        let mut pending: Vec<&str> = self.nodes[index].parents.iter().map(String::as_str).collect();
        let mut seen: Vec<&str> = Vec::new();
        while let Some(current) = pending.pop() {
            if seen.contains(&current) {
                continue;
            }
            seen.push(current);
            let Some(node) = self.nodes.iter().find(|n| n.id == current) else { continue };
            if current == id {
                return matches!(node.kind, NodeKind::Llm(_));
            }
            pending.extend(node.parents.iter().map(String::as_str));
        }
        false
    }

    /// The request's LLM calls.
    pub fn calls(&self) -> impl Iterator<Item = (&NodeSpec, &LlmCall)> {
        self.nodes.iter().filter_map(|n| match &n.kind {
            NodeKind::Llm(call) => Some((n, call)),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn llm(id: &str, parents: &[&str], prompt: Vec<PromptPart>) -> NodeSpec {
        NodeSpec {
            id: id.to_owned(),
            parents: parents.iter().map(|p| (*p).to_owned()).collect(),
            kind: NodeKind::Llm(LlmCall { prompt, output_tokens: 4, priority: 0, timeout_us: None }),
        }
    }

    #[test]
    fn a_line_reads_and_writes_in_its_documented_form() {
        let line = r#"{"id":"r1","arrival_us":5,"nodes":[{"kind":"llm","id":"a","prompt":[{"shared":{"name":"sys","tokens":100}},{"tokens":20}],"output_tokens":8},{"kind":"tool","id":"t","parents":["a"],"duration_us":300},{"kind":"llm","id":"b","parents":["t"],"prompt":[{"history":"a"},{"token_ids":[1,2,3]}],"output_tokens":2}]}"#;
        let request: RequestSpec = serde_json::from_str(line).unwrap();
        request.validate("r").unwrap();
        assert_eq!(serde_json::to_string(&request).unwrap(), line);
        assert_eq!(request.calls().count(), 2);
        let unknown = line.replace("\"duration_us\":300", "\"duration_us\":300,\"durations\":1");
        assert!(serde_json::from_str::<RequestSpec>(&unknown).is_err(), "unknown node fields are refused");
    }

    #[test]
    fn bad_dags_are_refused_by_path() {
        let unknown = RequestSpec {
            id: "r".into(),
            arrival_us: 0,
            nodes: vec![llm("a", &["zz"], vec![PromptPart::Tokens(3)])],
        };
        assert_eq!(unknown.validate("w[3]").unwrap_err().path, "w[3].nodes[0].parents[0]");
        let cycle = RequestSpec {
            id: "r".into(),
            arrival_us: 0,
            nodes: vec![
                llm("a", &["b"], vec![PromptPart::Tokens(3)]),
                llm("b", &["a"], vec![PromptPart::Tokens(3)]),
            ],
        };
        assert!(cycle.validate("w").unwrap_err().cause.contains("no cycles"));
        let history = RequestSpec {
            id: "r".into(),
            arrival_us: 0,
            nodes: vec![
                llm("a", &[], vec![PromptPart::Tokens(3)]),
                llm("b", &[], vec![PromptPart::History("a".into())]),
            ],
        };
        assert_eq!(history.validate("w").unwrap_err().path, "w.nodes[1].prompt[0].history");
    }

    #[test]
    fn counts_no_run_could_hold_are_refused_with_the_bound() {
        let huge = RequestSpec {
            id: "r".into(),
            arrival_us: 0,
            nodes: vec![llm("a", &[], vec![PromptPart::Tokens(u32::MAX)])],
        };
        let e = huge.validate("w[0]").unwrap_err();
        assert_eq!(e.path, "w[0].nodes[0].prompt");
        assert!(e.cause.contains("at most 16777216 tokens"), "{e}");
        let late = RequestSpec { arrival_us: u64::MAX, ..huge };
        assert_eq!(late.validate("w[0]").unwrap_err().path, "w[0].arrival_us");
    }
}
