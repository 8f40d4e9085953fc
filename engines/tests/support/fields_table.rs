//! The argument table of a port's FIELDS.md: one row per upstream argument with its treatment.

use std::fmt::Write;

use blis_engines::fields::Treatment;

/// Append the table's rows for `arguments` to `out`.
pub fn rows(arguments: &[(&str, Treatment)], out: &mut String) {
    for &(name, treatment) in arguments {
        let (kind, detail) = match treatment {
            Treatment::Modelled => ("modelled", String::new()),
            Treatment::Limited { why } => ("modelled in part", why.to_owned()),
            Treatment::Inert { why, sample } => ("inert", format!("{why} (sample `{sample}`)")),
            Treatment::Refused { why } => ("refused", why.to_owned()),
        };
        let _ = writeln!(out, "| `{name}` | {kind} | {} |", detail.replace('|', "\\|"));
    }
}
