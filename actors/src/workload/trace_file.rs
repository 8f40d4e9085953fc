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

/// Requests read lazily from a trace file in one format.
pub struct TraceSource<F> {
    label: String,
    lines: Lines<BufReader<File>>,
    line: u64,
    format: F,
    error: Option<FieldError>,
}

impl<F: LineFormat> TraceSource<F> {
    /// Read every line of `path` and refuse the first bad one (or a file without requests);
    /// `label` names the file in messages. Returns the number of requests.
    pub fn check(path: &Path, label: &str, format: F) -> Result<u64, FieldError> {
        let mut source = TraceSource::open(path, label, format)?;
        let mut requests = 0;
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
        Ok(requests)
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
        })
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

    fn next_request(&mut self) -> Option<Planned> {
        self.read()?.map(|spec| Planned { spec, stage: 0 })
    }

    fn error(&self) -> Option<&FieldError> {
        self.error.as_ref()
    }
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
