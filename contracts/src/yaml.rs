//! Reading YAML into typed documents, with every refusal naming its field path.
//!
//! All documents reject unknown fields (`#[serde(deny_unknown_fields)]` on every struct); this
//! module turns the parser's errors into [`FieldError`]s.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{FieldError, join_path};

/// A YAML value kept unparsed, for a section whose schema belongs to another crate (an engine's
/// arguments, say); that crate parses it with [`from_value`].
pub type YamlValue = serde_norway::Value;

/// Parse `text` as a `T`, refusing unknown fields, wrong types and malformed YAML by path.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, FieldError> {
    let deserializer = serde_norway::Deserializer::from_str(text);
    serde_path_to_error::deserialize(deserializer).map_err(|e| refusal("", e))
}

/// Parse an already-read YAML value found at `path` as a `T`.
pub fn from_value<T: DeserializeOwned>(value: &YamlValue, path: &str) -> Result<T, FieldError> {
    serde_path_to_error::deserialize(value.clone()).map_err(|e| refusal(path, e))
}

/// `value` written as YAML (block style, fields in declaration order).
pub fn to_string<T: Serialize>(value: &T) -> Result<String, serde_norway::Error> {
    serde_norway::to_string(value)
}

fn refusal(prefix: &str, error: serde_path_to_error::Error<serde_norway::Error>) -> FieldError {
    let inner_path = error.path().to_string();
    let mut cause = error.inner().to_string();
    // The parser repeats the path at the front of its message; say it once.
    if let Some(rest) = cause.strip_prefix(&format!("{inner_path}: ")) {
        cause = rest.to_owned();
    }
    FieldError::at(join_path(prefix, &inner_path), cause)
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Doc {
        #[allow(dead_code)]
        items: Vec<Item>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Item {
        #[allow(dead_code)]
        n: u32,
    }

    #[test]
    fn unknown_fields_and_wrong_types_name_their_path() {
        let e = from_str::<Doc>("items:\n  - n: 1\n  - m: 2\n").unwrap_err();
        assert_eq!(e.path, "items[1].m");
        assert!(e.cause.contains("unknown field `m`"), "{e}");
        let e = from_str::<Doc>("items:\n  - n: -1\n").unwrap_err();
        assert_eq!(e.path, "items[0].n");
        assert!(e.cause.contains("-1"), "{e}");
    }

    #[test]
    fn values_parsed_later_keep_their_outer_path() {
        let value: YamlValue = serde_norway::from_str("n: x").unwrap();
        let e = from_value::<Item>(&value, "cluster.pools[0].engine.args").unwrap_err();
        assert_eq!(e.path, "cluster.pools[0].engine.args.n");
    }
}
