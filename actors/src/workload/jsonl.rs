//! The workload-file format: one [`RequestSpec`] per line, the form `--export-workload` writes.
//!
//! Each line is checked as a request DAG; the check pass also refuses a request id used twice.

use std::collections::BTreeSet;

use blis_contracts::{FieldError, RequestSpec, json};

use super::trace_file::LineFormat;

/// Lines that are request DAGs.
#[derive(Default)]
pub struct Jsonl {
    ids: BTreeSet<String>,
}

impl LineFormat for Jsonl {
    const ARRIVAL_FIELD: &'static str = "arrival_us";

    fn parse(&mut self, at: &str, text: &str) -> Result<Option<RequestSpec>, FieldError> {
        let spec = json::from_str::<RequestSpec>(text, at)?;
        spec.validate(at)?;
        Ok(Some(spec))
    }

    fn check_across(&mut self, at: &str, spec: &RequestSpec) -> Result<(), FieldError> {
        if !self.ids.insert(spec.id.clone()) {
            return Err(FieldError::new(
                format!("{at}.id"),
                &spec.id,
                "another request of the file has this id",
            ));
        }
        Ok(())
    }
}
