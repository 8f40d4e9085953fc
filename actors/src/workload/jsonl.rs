//! The workload-file source: one [`RequestSpec`] per line (the form `--export-workload`
//! writes), read lazily so a long trace streams in bounded memory.
//!
//! [`JsonlSource::check`] reads the whole file once before the run and refuses the first bad
//! line by file, line and field; the run then reads it again as it goes.

use std::fs::File;
use std::io::{BufRead, BufReader, Lines};
use std::path::Path;

use blis_contracts::{FieldError, RequestSpec, json};

use super::{Pacing, Planned, RequestSource};

/// Requests read from a JSONL file.
pub struct JsonlSource {
    label: String,
    lines: Lines<BufReader<File>>,
    line: u64,
    error: Option<FieldError>,
}

impl JsonlSource {
    /// Read every line of `path` and refuse the first bad one; `label` names the file in
    /// messages. Returns the number of requests.
    pub fn check(path: &Path, label: &str) -> Result<u64, FieldError> {
        let mut source = JsonlSource::open(path, label)?;
        let mut requests = 0;
        let mut last_arrival = 0;
        let mut ids = std::collections::BTreeSet::new();
        while let Some(read) = source.read() {
            let spec = read.map_err(|()| source.error.take().expect("a failed read keeps its error"))?;
            if spec.arrival_us < last_arrival {
                return Err(FieldError::new(
                    format!("{label}:{}.arrival_us", source.line),
                    spec.arrival_us,
                    format!(
                        "arrivals must not go back in time (the previous request arrives at {last_arrival})"
                    ),
                ));
            }
            last_arrival = spec.arrival_us;
            if !ids.insert(spec.id.clone()) {
                return Err(FieldError::new(
                    format!("{label}:{}.id", source.line),
                    &spec.id,
                    "another request of the file has this id",
                ));
            }
            requests += 1;
        }
        if requests == 0 {
            return Err(FieldError::new(label, path.display(), "the workload file holds no request"));
        }
        Ok(requests)
    }

    /// The source of `path`.
    pub fn open(path: &Path, label: &str) -> Result<JsonlSource, FieldError> {
        let file = File::open(path)
            .map_err(|e| FieldError::new(label, path.display(), format!("cannot read: {e}")))?;
        Ok(JsonlSource { label: label.to_owned(), lines: BufReader::new(file).lines(), line: 0, error: None })
    }

    /// The next request, `Ok(None)` at the end; a bad line is kept in `error` and ends the
    /// stream.
    fn read(&mut self) -> Option<Result<RequestSpec, ()>> {
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
                    return Some(Err(()));
                }
            };
            if text.trim().is_empty() {
                continue;
            }
            let parsed = json::from_str::<RequestSpec>(&text, &at).and_then(|spec| {
                spec.validate(&at)?;
                Ok(spec)
            });
            return Some(parsed.map_err(|error| self.error = Some(error)));
        }
    }

    /// Why the stream ended early, if it did.
    pub fn error(&self) -> Option<&FieldError> {
        self.error.as_ref()
    }
}

impl RequestSource for JsonlSource {
    fn pacing(&self) -> Pacing {
        Pacing::Open
    }

    fn next_request(&mut self) -> Option<Planned> {
        match self.read()? {
            Ok(spec) => Some(Planned { spec, stage: 0 }),
            Err(()) => None,
        }
    }

    fn error(&self) -> Option<&FieldError> {
        self.error.as_ref()
    }
}
