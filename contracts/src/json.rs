//! Reading one JSON document (a line of a JSONL file) into a typed value, with every refusal
//! naming its field path.

use serde::de::DeserializeOwned;

use crate::error::{FieldError, join_path};

/// Parse `text` as a `T`; a refusal's path starts with `prefix` (e.g. `trace.jsonl:12`).
pub fn from_str<T: DeserializeOwned>(text: &str, prefix: &str) -> Result<T, FieldError> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
        let inner = e.path().to_string();
        let inner = if inner == "." { String::new() } else { inner };
        FieldError::at(join_path(prefix, &inner), e.inner().to_string())
    })?;
    deserializer.end().map_err(|e| FieldError::at(prefix, format!("trailing characters: {e}")))?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use crate::RequestSpec;

    use super::*;

    #[test]
    fn a_missing_field_is_named_with_the_line() {
        let error = from_str::<RequestSpec>(r#"{"id":"r","nodes":[]}"#, "w.jsonl:3").unwrap_err();
        assert_eq!(error.path, "w.jsonl:3");
        assert!(error.cause.contains("missing field `arrival_us`"), "{error}");
        let error = from_str::<RequestSpec>(
            r#"{"id":"r","arrival_us":1,"nodes":[{"kind":"tool","id":"a","duration_us":-4}]}"#,
            "w.jsonl:9",
        )
        .unwrap_err();
        assert_eq!(error.path, "w.jsonl:9.nodes[0]");
        assert!(error.cause.contains("-4"), "{error}");
    }
}
