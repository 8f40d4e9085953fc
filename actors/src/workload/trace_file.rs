//! Line-oriented trace files: the reading every replayed format shares, whatever one line holds.
//!
//! A [`TraceSource`] reads its file lazily, one line at a time, and turns each non-blank line into
//! a request with its [`LineFormat`]. [`TraceSource::check`] reads the whole file once before the
//! run and refuses the first bad line by file, line and field (`<file>:<line>.<field>`), so the
//! run, which reads the file again as it goes, only meets lines already accepted.

use std::fs::File;
use std::io::{BufRead, BufReader, Lines};
use std::path::Path;

use blis_contracts::{FieldError, LlmCall, NodeKind, NodeSpec, PromptPart, RequestSpec};

use super::{Pacing, Planned, RequestSource};

/// How the lines of one file format become requests.
pub trait LineFormat: Send {
    /// The field of a line that sets its arrival time, named in refusals.
    const ARRIVAL_FIELD: &'static str;

    /// The request of the non-blank line `text`, or `None` for a line that holds none (a
    /// header); `at` is `<file>:<line>` for refusals.
    fn parse(&mut self, at: &str, text: &str) -> Result<Option<RequestSpec>, FieldError>;

    /// Checks across lines that only the check pass makes (unique ids, say); none by default.
    fn check_across(&mut self, _at: &str, _spec: &RequestSpec) -> Result<(), FieldError> {
        Ok(())
    }
}

/// What the check pass found in a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checked {
    /// Its requests.
    pub requests: u64,
    /// Whether no prompt in it gives token ids or a history ([`gives_ids`]).
    pub prompts_hold_no_outputs: bool,
}

/// Requests read lazily from a trace file in one format.
pub struct TraceSource<F> {
    label: String,
    lines: Lines<BufReader<File>>,
    line: u64,
    format: F,
    error: Option<FieldError>,
    /// Whether it vouches that no prompt gives token ids or a history, as its check found.
    prompts_hold_no_outputs: bool,
}

impl<F: LineFormat> TraceSource<F> {
    /// Read every line of `path` and refuse the first bad one (or a file without requests);
    /// `label` names the file in messages. Returns what it found.
    pub fn check(path: &Path, label: &str, format: F) -> Result<Checked, FieldError> {
        let mut source = TraceSource::open(path, label, format)?;
        let mut requests = 0;
        let mut prompts_hold_no_outputs = true;
        let mut last_arrival = 0;
        while let Some(read) = source.read() {
            let Some(spec) = read else {
                return Err(source.error.take().expect("a failed read keeps its error"));
            };
            let at = format!("{label}:{}", source.line);
            if spec.arrival_us < last_arrival {
                return Err(FieldError::new(
                    format!("{at}.{}", F::ARRIVAL_FIELD),
                    spec.arrival_us,
                    format!(
                        "arrivals must not go back in time \
                         (the previous request arrives at {last_arrival} µs)"
                    ),
                ));
            }
            last_arrival = spec.arrival_us;
            // Every format's requests meet the same bounds (token counts, nodes, times).
            spec.validate(&at)?;
            source.format.check_across(&at, &spec)?;
            prompts_hold_no_outputs &= !gives_ids(&spec);
            requests += 1;
            if requests > blis_contracts::bounds::MAX_CALLS {
                return Err(FieldError::new(
                    label,
                    path.display(),
                    format!(
                        "more than {} requests: a run holds at most that many calls",
                        blis_contracts::bounds::MAX_CALLS
                    ),
                ));
            }
        }
        if requests == 0 {
            return Err(FieldError::new(label, path.display(), "the workload file holds no request"));
        }
        Ok(Checked { requests, prompts_hold_no_outputs })
    }

    /// The source of `path`, read with `format`.
    pub fn open(path: &Path, label: &str, format: F) -> Result<TraceSource<F>, FieldError> {
        let file = File::open(path)
            .map_err(|e| FieldError::new(label, path.display(), format!("cannot read: {e}")))?;
        Ok(TraceSource {
            label: label.to_owned(),
            lines: BufReader::new(file).lines(),
            line: 0,
            format,
            error: None,
            prompts_hold_no_outputs: false,
        })
    }

    /// The source of a file whose check found what `checked` says: when no prompt gave token
    /// ids or a history, it vouches for that, and refuses a line that does as a change to the
    /// file since.
    pub fn vouching(mut self, checked: Checked) -> TraceSource<F> {
        self.prompts_hold_no_outputs = checked.prompts_hold_no_outputs;
        self
    }

    /// The next request, `None` at the end; `Some(None)` is a bad line, kept in `error`, which
    /// ends the stream.
    fn read(&mut self) -> Option<Option<RequestSpec>> {
        if self.error.is_some() {
            return None;
        }
        loop {
            self.line += 1;
            let at = format!("{}:{}", self.label, self.line);
            let text = match self.lines.next()? {
                Ok(text) => text,
                Err(e) => {
                    self.error = Some(FieldError::at(at, format!("cannot read: {e}")));
                    return Some(None);
                }
            };
            if text.trim().is_empty() {
                continue;
            }
            match self.format.parse(&at, &text) {
                Ok(Some(spec)) => return Some(Some(spec)),
                Ok(None) => continue,
                Err(error) => {
                    self.error = Some(error);
                    return Some(None);
                }
            }
        }
    }
}

impl<F: LineFormat> RequestSource for TraceSource<F> {
    fn pacing(&self) -> Pacing {
        Pacing::Open
    }

    fn prompts_hold_no_outputs(&self) -> bool {
        self.prompts_hold_no_outputs
    }

    fn next_request(&mut self) -> Option<Planned> {
        let spec = self.read()??;
        if self.prompts_hold_no_outputs && gives_ids(&spec) {
            self.error = Some(FieldError::at(
                format!("{}:{}", self.label, self.line),
                "the file changed after it was checked: this line gives token ids or a history, \
                 which no line did when it was checked",
            ));
            return None;
        }
        Some(Planned { spec, stage: 0 })
    }

    fn error(&self) -> Option<&FieldError> {
        self.error.as_ref()
    }
}

/// Whether a prompt of `spec` gives token ids or the history of an earlier call: ids the run
/// does not draw for it, which may be another call's output.
fn gives_ids(spec: &RequestSpec) -> bool {
    spec.nodes.iter().any(|node| match &node.kind {
        NodeKind::Llm(call) => {
            call.prompt.iter().any(|part| matches!(part, PromptPart::TokenIds(_) | PromptPart::History(_)))
        }
        NodeKind::Tool(_) | NodeKind::Interval(_) => false,
    })
}

/// A request of one LLM call named `llm` (priority 0, no timeout): what one row of a public trace
/// describes.
pub fn single_call(id: String, arrival_us: u64, prompt: Vec<PromptPart>, output_tokens: u32) -> RequestSpec {
    let call = LlmCall { prompt, output_tokens, priority: 0, timeout_us: None };
    RequestSpec {
        id,
        arrival_us,
        nodes: vec![NodeSpec { id: "llm".to_owned(), parents: Vec::new(), kind: NodeKind::Llm(call) }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::jsonl::Jsonl;

    /// A line of request `id` at `arrival_us` with one call whose prompt is `parts`.
    fn line(id: &str, arrival_us: u64, parts: &str) -> String {
        format!(
            r#"{{"id":"{id}","arrival_us":{arrival_us},"nodes":[{{"kind":"llm","id":"a","prompt":[{parts}],"output_tokens":4}}]}}"#
        )
    }

    fn file(folder: &tempfile::TempDir, name: &str, lines: &[String]) -> std::path::PathBuf {
        let path = folder.path().join(name);
        std::fs::write(&path, lines.join("\n")).unwrap();
        path
    }

    #[test]
    fn a_file_vouches_that_prompts_hold_no_outputs_only_without_token_ids_or_history() {
        let folder = tempfile::tempdir().unwrap();
        let drawn = [
            line("r1", 0, r#"{"tokens":7}"#),
            line("r2", 5, r#"{"shared":{"name":"sys","tokens":16}},{"tokens":3}"#),
        ];
        let path = file(&folder, "drawn.jsonl", &drawn);
        let checked = TraceSource::check(&path, "drawn", Jsonl::default()).unwrap();
        assert_eq!(checked, Checked { requests: 2, prompts_hold_no_outputs: true });
        let source = TraceSource::open(&path, "drawn", Jsonl::default()).unwrap();
        assert!(!source.prompts_hold_no_outputs(), "a source vouches only for what a check found");
        assert!(source.vouching(checked).prompts_hold_no_outputs());

        let ids = line("r3", 9, r#"{"tokens":2},{"token_ids":[1,2,3]}"#);
        let history = r#"{"id":"r3","arrival_us":9,"nodes":[{"kind":"llm","id":"a","prompt":[{"tokens":2}],"output_tokens":4},{"kind":"llm","id":"b","parents":["a"],"prompt":[{"history":"a"},{"tokens":1}],"output_tokens":4}]}"#;
        for (name, given) in [("ids.jsonl", ids), ("history.jsonl", history.to_owned())] {
            let path = file(&folder, name, &[drawn[0].clone(), drawn[1].clone(), given]);
            let checked = TraceSource::check(&path, name, Jsonl::default()).unwrap();
            assert_eq!(checked, Checked { requests: 3, prompts_hold_no_outputs: false }, "{name}");
        }
    }

    #[test]
    fn a_vouching_source_refuses_a_line_with_token_ids_as_a_change_since_its_check() {
        let folder = tempfile::tempdir().unwrap();
        let path = file(&folder, "trace.jsonl", &[line("r1", 0, r#"{"tokens":7}"#)]);
        let checked = TraceSource::check(&path, "trace", Jsonl::default()).unwrap();
        file(
            &folder,
            "trace.jsonl",
            &[line("r1", 0, r#"{"tokens":7}"#), line("r2", 1, r#"{"token_ids":[5]}"#)],
        );
        let mut source = TraceSource::open(&path, "trace", Jsonl::default()).unwrap().vouching(checked);
        assert_eq!(source.next_request().unwrap().spec.id, "r1");
        assert!(source.next_request().is_none());
        let error = source.error().expect("the changed line is refused").to_string();
        assert!(error.starts_with("trace:2"), "{error}");
        assert!(error.contains("changed after it was checked"), "{error}");
    }
}
