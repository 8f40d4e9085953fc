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
    serde_path_to_error::deserialize(deserializer).map_err(|e| relocated(text, refusal("", e)))
}

/// Parse an already-read YAML value found at `path` as a `T`.
pub fn from_value<T: DeserializeOwned>(value: &YamlValue, path: &str) -> Result<T, FieldError> {
    serde_path_to_error::deserialize(value.clone()).map_err(|e| refusal(path, e))
}

/// `value` as the JSON document a Kubernetes-style loader would see (YAML converted to JSON
/// first, as `sigs.k8s.io/yaml` does): refused at its path where JSON cannot hold it — a
/// non-finite number, a non-string key, a tagged value — instead of silently becoming `null`.
pub fn to_json(value: &YamlValue, path: &str) -> Result<serde_json::Value, FieldError> {
    use serde_json::Value as Json;
    Ok(match value {
        YamlValue::Null => Json::Null,
        YamlValue::Bool(b) => Json::Bool(*b),
        YamlValue::Number(n) => {
            if let Some(i) = n.as_i64() {
                Json::from(i)
            } else if let Some(u) = n.as_u64() {
                Json::from(u)
            } else {
                let f = n.as_f64().unwrap_or(f64::NAN);
                match serde_json::Number::from_f64(f) {
                    Some(number) => Json::Number(number),
                    None => return Err(FieldError::new(path, n, "JSON cannot hold a non-finite number")),
                }
            }
        }
        YamlValue::String(s) => Json::String(s.clone()),
        YamlValue::Sequence(items) => Json::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, item)| to_json(item, &format!("{path}[{i}]")))
                .collect::<Result<_, _>>()?,
        ),
        YamlValue::Mapping(map) => {
            let mut object = serde_json::Map::new();
            for (key, item) in map {
                let YamlValue::String(key) = key else {
                    return Err(FieldError::at(
                        path,
                        "every key must be a string (the document is read as JSON)",
                    ));
                };
                object.insert(key.clone(), to_json(item, &join_path(path, key))?);
            }
            Json::Object(object)
        }
        YamlValue::Tagged(tagged) => {
            return Err(FieldError::new(path, &tagged.tag, "a tagged YAML value has no JSON form"));
        }
    })
}

/// `value` written as YAML (block style, fields in declaration order).
pub fn to_string<T: Serialize>(value: &T) -> Result<String, serde_norway::Error> {
    serde_norway::to_string(value)
}

fn refusal(prefix: &str, error: serde_path_to_error::Error<serde_norway::Error>) -> FieldError {
    let mut inner_path = error.path().to_string();
    let mut cause = error.inner().to_string();
    // An empty key (`"": 1`, or an anchor right before its colon: `&x: 1`) is named `""`, so the
    // refusal still points at a field (found by the fuzzer: the path was empty or ended in `.`).
    if cause.contains("unknown field ``") && (inner_path.is_empty() || inner_path.ends_with('.')) {
        inner_path.push_str("\"\"");
    }
    // The parser puts the path it knows at the front of its message (for a tagged section, the
    // enclosing list item's); the refusal's path says it once.
    if let Some((head, rest)) = cause.split_once(": ")
        && !head.is_empty()
        && !head.contains(' ')
        && inner_path.starts_with(head.trim_end_matches('.'))
    {
        cause = rest.to_owned();
    }
    FieldError::at(join_path(prefix, &inner_path), cause)
}

/// A refusal inside a tagged section (an arrival process, a distribution) placed at the value
/// itself: the parser reads such a section whole and reports the enclosing list item's line, so
/// the offending value (quoted in the cause) is found in the section's lines of `text`, and the
/// key holding it joins the path and its line the cause.
fn relocated(text: &str, refusal: FieldError) -> FieldError {
    let Some(key) = refusal.path.rsplit('.').next().filter(|k| !k.is_empty() && !k.contains('[')) else {
        return refusal;
    };
    let Some((message, line)) = split_location(&refusal.cause) else { return refusal };
    let lines: Vec<&str> = text.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let bare = |l: &str| l.trim_start().trim_start_matches("- ").trim_start().to_owned();
    // Only a location at a list item's start can be the enclosing item's; the section's key line
    // is then searched within that item.
    let origin = line.saturating_sub(1);
    if !lines.get(origin).is_some_and(|l| l.trim_start().starts_with("- ")) {
        return refusal;
    }
    let item_end = (origin + 1..lines.len())
        .find(|&i| !lines[i].trim().is_empty() && indent(lines[i]) <= indent(lines[origin]))
        .unwrap_or(lines.len());
    let Some(start) = (origin..item_end).find(|&i| bare(lines[i]).starts_with(&format!("{key}:"))) else {
        return refusal;
    };
    let depth = indent(lines[start]);
    let end = (start + 1..lines.len())
        .find(|&i| !lines[i].trim().is_empty() && indent(lines[i]) <= depth)
        .unwrap_or(lines.len());
    let found = quoted(message).and_then(|value| {
        (start..end).find_map(|i| {
            let after_key = if i == start { lines[i].find(':').map_or(0, |c| c + 1) } else { 0 };
            value_key(&lines[i][after_key..], value).map(|(field, column)| (i, field, column + after_key))
        })
    });
    match found {
        Some((i, field, column)) if field != key => FieldError::at(
            format!("{}.{field}", refusal.path),
            format!("{message} at line {} column {}", i + 1, column + 1),
        ),
        // Already at the right line: nothing to move.
        _ if start + 1 == line => refusal,
        _ => FieldError::at(
            refusal.path,
            format!("{message} at line {} column {}", start + 1, indent(lines[start]) + 1),
        ),
    }
}

/// The cause without its trailing ` at line L column C`, and L.
fn split_location(cause: &str) -> Option<(&str, usize)> {
    let (message, location) = cause.rsplit_once(" at line ")?;
    let line = location.split_whitespace().next()?.parse().ok()?;
    Some((message, line))
}

/// The first value quoted in a parser message (`` `-5` `` or `"x"`).
fn quoted(message: &str) -> Option<&str> {
    let start = message.find(['`', '"'])?;
    let close = message[start..].chars().next()?;
    let rest = &message[start + 1..];
    rest.find(close).map(|end| &rest[..end]).filter(|value| !value.is_empty())
}

/// In `line`, the key whose value is `value` (`key: value`), and the value's column.
fn value_key(line: &str, value: &str) -> Option<(String, usize)> {
    // An empty value matches everywhere; searching for it would never advance.
    if value.is_empty() {
        return None;
    }
    let mut from = 0;
    while let Some(offset) = line[from..].find(value) {
        let column = from + offset;
        let before = line[..column].trim_end();
        let after = line[column + value.len()..].chars().next();
        let whole = after.is_none_or(|c| matches!(c, ',' | '}' | ']' | ' ' | '#'));
        if let Some(head) = before.strip_suffix(':')
            && whole
        {
            let field: String = head.chars().rev().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if !field.is_empty() {
                return Some((field.chars().rev().collect(), column));
            }
        }
        from = column + value.len();
    }
    None
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
    fn an_empty_key_is_named_by_its_path() {
        // Found by the fuzzer (`blis-actor fuzz --seed 23826`): an anchor before a colon.
        let e = from_str::<Doc>("&tems:\n  - n: 1\n").unwrap_err();
        assert_eq!(e.path, "\"\"");
        assert!(e.cause.contains("unknown field ``"), "{e}");
        let e = from_str::<Doc>("items:\n  - \"\": 1\n").unwrap_err();
        assert_eq!(e.path, "items[0].\"\"");
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Tagged {
        items: Vec<TaggedItem>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct TaggedItem {
        name: String,
        length: Length,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, tag = "dist", rename_all = "kebab-case")]
    #[allow(dead_code)]
    enum Length {
        Uniform { min: u32, max: u32 },
    }

    #[test]
    fn a_precise_location_is_kept() {
        // Outside a tagged section the parser's location is the value's own, and stays.
        let doc = "items:\n  - name: a\n    length: { dist: uniform, min: 1, max: 2 }\n    max: 3\n";
        let e = from_str::<Tagged>(doc).unwrap_err();
        assert_eq!(e.path, "items[0].max", "{e}");
        assert!(e.cause.contains("at line 4"), "{e}");
    }

    #[test]
    fn a_bad_value_in_a_tagged_section_is_reported_at_its_own_line() {
        let block = "items:\n  - name: a\n    length:\n      dist: uniform\n      min: 5\n      max: -5\n";
        let e = from_str::<Tagged>(block).unwrap_err();
        assert_eq!(e.path, "items[0].length.max");
        assert!(e.cause.ends_with("at line 6 column 12"), "{e}");
        assert!(!e.cause.contains("items[0]:"), "the path is said once: {e}");
        let flow = "items:\n  - name: a\n    length: { dist: uniform, min: x, max: 5 }\n";
        let e = from_str::<Tagged>(flow).unwrap_err();
        assert_eq!(e.path, "items[0].length.min");
        assert!(e.cause.ends_with("at line 3 column 35"), "{e}");
    }

    #[test]
    fn yaml_becomes_json_or_is_refused_where_json_cannot_hold_it() {
        let value: YamlValue = serde_norway::from_str("a: [1, 2.5, x, {b: true}]\nc: null\n").unwrap();
        let json = to_json(&value, "doc").unwrap();
        assert_eq!(json, serde_json::json!({"a": [1, 2.5, "x", {"b": true}], "c": null}));
        let value: YamlValue = serde_norway::from_str("a: [{w: .nan}]\n").unwrap();
        let e = to_json(&value, "doc").unwrap_err();
        assert_eq!(e.path, "doc.a[0].w");
        let value: YamlValue = serde_norway::from_str("1: x\n").unwrap();
        assert_eq!(to_json(&value, "doc").unwrap_err().path, "doc");
    }

    #[test]
    fn values_parsed_later_keep_their_outer_path() {
        let value: YamlValue = serde_norway::from_str("n: x").unwrap();
        let e = from_value::<Item>(&value, "cluster.pools[0].engine.args").unwrap_err();
        assert_eq!(e.path, "cluster.pools[0].engine.args.n");
    }
}
