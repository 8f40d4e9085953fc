//! Whether two files of calls describe the same work: the same calls (by name), each of the
//! same request and node with the same parents and token counts, and every root node (one
//! without parents) sent at the same scheduled arrival. Calls are matched by name, so the files'
//! orders (the order calls ended) may differ.

use std::collections::BTreeMap;

use blis_contracts::{CallRecord, Fate, FieldError};

/// Refuse `calls` (of the run `name`) unless they describe the reference's work, naming the
/// first difference: the first call (in name order) missing from either file, or the first
/// field of the first call that differs.
pub fn same_work(
    reference_name: &str,
    reference: &[CallRecord],
    name: &str,
    calls: &[CallRecord],
) -> Result<(), FieldError> {
    let ours = index(reference_name, reference)?;
    let theirs = index(name, calls)?;
    for (id, r) in &ours {
        let Some(o) = theirs.get(id) else {
            return Err(FieldError::at(
                format!("{name}.calls[{id}]"),
                format!(
                    "missing: the reference {reference_name} has this call, so the files describe other work"
                ),
            ));
        };
        let sent = |c: &CallRecord| c.fate != Fate::NotStarted;
        let mut fields: Vec<(&str, String, String)> = vec![
            ("request", r.request.clone(), o.request.clone()),
            ("node", r.node.clone(), o.node.clone()),
            ("parents", format!("{:?}", r.parents), format!("{:?}", o.parents)),
            ("output_tokens", r.output_tokens.to_string(), o.output_tokens.to_string()),
        ];
        // A call never sent has no prompt yet (its history was never made).
        if sent(r) && sent(o) {
            fields.push(("input_tokens", r.input_tokens.to_string(), o.input_tokens.to_string()));
        }
        if r.parents.is_empty() {
            fields.push(("arrival_us", r.arrival_us.to_string(), o.arrival_us.to_string()));
        }
        if let Some((field, want, got)) = fields.into_iter().find(|(_, want, got)| want != got) {
            return Err(FieldError::new(
                format!("{name}.calls[{id}].{field}"),
                got,
                format!("the reference {reference_name} has {want}: the files must describe the same work"),
            ));
        }
    }
    if let Some(id) = theirs.keys().find(|id| !ours.contains_key(*id)) {
        return Err(FieldError::at(
            format!("{name}.calls[{id}]"),
            format!("not in the reference {reference_name}, so the files describe other work"),
        ));
    }
    Ok(())
}

/// The calls by name; refuses a name that appears twice.
fn index<'a>(name: &str, calls: &'a [CallRecord]) -> Result<BTreeMap<&'a str, &'a CallRecord>, FieldError> {
    let mut by_name = BTreeMap::new();
    for call in calls {
        if by_name.insert(call.request_id.as_str(), call).is_some() {
            return Err(FieldError::at(
                format!("{name}.calls[{}]", call.request_id),
                "appears twice: a file holds one record per call (one replication)",
            ));
        }
    }
    Ok(by_name)
}
