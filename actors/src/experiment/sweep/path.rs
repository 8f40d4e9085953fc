//! A scenario path (`cluster.pools[0].engine.args.max_num_seqs`), as refusals name fields, and
//! setting the value a path names in a scenario document.

use std::fmt;

use blis_contracts::yaml::YamlValue;

/// One step of a path: a field of a section, or an item of a list.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

/// A field of a scenario named by its path: dotted fields, `[i]` for list items.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScenarioPath {
    text: String,
    steps: Vec<Step>,
}

impl ScenarioPath {
    /// Read `text` as a path; the error says what is malformed.
    pub fn parse(text: &str) -> Result<ScenarioPath, String> {
        let mut steps = Vec::new();
        for part in text.split('.') {
            let (key, mut rest) = part.split_at(part.find('[').unwrap_or(part.len()));
            if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                return Err(format!(
                    "`{part}` is not a field name (letters, digits, `_` and `-`, then any `[i]`)"
                ));
            }
            steps.push(Step::Key(key.to_owned()));
            while !rest.is_empty() {
                let index = rest
                    .strip_prefix('[')
                    .and_then(|r| r.split_once(']'))
                    .and_then(|(i, r)| i.parse::<usize>().ok().map(|i| (i, r)));
                let Some((index, after)) = index else {
                    return Err(format!("`{part}`: a list item is written `[i]` with i a whole number"));
                };
                steps.push(Step::Index(index));
                rest = after;
            }
        }
        Ok(ScenarioPath { text: text.to_owned(), steps })
    }

    /// The path as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Put `value` at this path of `doc`. A missing field is added (the scenario's own parser
    /// then refuses a field it does not know); a list item must exist.
    pub fn set(&self, doc: &mut YamlValue, value: YamlValue) -> Result<(), String> {
        let mut node = doc;
        let mut walked = String::new();
        for (k, step) in self.steps.iter().enumerate() {
            let last = k + 1 == self.steps.len();
            node = match step {
                Step::Key(key) => {
                    if node.is_null() {
                        *node = YamlValue::Mapping(Default::default());
                    }
                    let Some(map) = node.as_mapping_mut() else {
                        return Err(format!(
                            "`{}` is not a section, so it has no field `{key}`",
                            shown(&walked)
                        ));
                    };
                    let key_value = YamlValue::String(key.clone());
                    if !map.contains_key(&key_value) {
                        let next = if last || matches!(self.steps[k + 1], Step::Key(_)) {
                            YamlValue::Null
                        } else {
                            return Err(format!(
                                "the base scenario has no list `{}`",
                                shown(&format!("{walked}{}{key}", if walked.is_empty() { "" } else { "." }))
                            ));
                        };
                        map.insert(key_value.clone(), next);
                    }
                    if !walked.is_empty() {
                        walked.push('.');
                    }
                    walked.push_str(key);
                    map.get_mut(&key_value).expect("the field was just ensured")
                }
                Step::Index(index) => {
                    let Some(items) = node.as_sequence_mut() else {
                        return Err(format!(
                            "`{}` is not a list, so it has no item [{index}]",
                            shown(&walked)
                        ));
                    };
                    let len = items.len();
                    let Some(item) = items.get_mut(*index) else {
                        return Err(format!(
                            "`{walked}` has {len} item{} in the base scenario, so no item [{index}]",
                            if len == 1 { "" } else { "s" }
                        ));
                    };
                    walked.push_str(&format!("[{index}]"));
                    item
                }
            };
        }
        *node = value;
        Ok(())
    }
}

/// A walked path for a message (`(document)` when empty).
fn shown(walked: &str) -> &str {
    if walked.is_empty() { "(document)" } else { walked }
}

impl fmt::Display for ScenarioPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(text: &str) -> YamlValue {
        blis_contracts::yaml::from_str(text).unwrap()
    }

    #[test]
    fn a_path_sets_nested_fields_and_list_items() {
        let mut d = doc("cluster:\n  pools:\n    - name: a\n      replicas: 1\n      engine: {args: {}}\n");
        ScenarioPath::parse("cluster.pools[0].replicas").unwrap().set(&mut d, YamlValue::from(4)).unwrap();
        ScenarioPath::parse("cluster.pools[0].engine.args.max_num_seqs")
            .unwrap()
            .set(&mut d, YamlValue::from(64))
            .unwrap();
        assert_eq!(
            d,
            doc(
                "cluster:\n  pools:\n    - name: a\n      replicas: 4\n      engine: {args: {max_num_seqs: 64}}\n"
            )
        );
    }

    #[test]
    fn a_missing_list_item_or_a_field_of_a_number_is_refused() {
        let mut d = doc("cluster:\n  pools:\n    - replicas: 1\n");
        let e = ScenarioPath::parse("cluster.pools[2].replicas").unwrap().set(&mut d, YamlValue::from(1));
        assert_eq!(e.unwrap_err(), "`cluster.pools` has 1 item in the base scenario, so no item [2]");
        let e = ScenarioPath::parse("cluster.pools[0].replicas.x").unwrap().set(&mut d, YamlValue::from(1));
        assert!(e.unwrap_err().contains("`cluster.pools[0].replicas` is not a section"));
        let e = ScenarioPath::parse("cluster.pool[0]").unwrap().set(&mut d, YamlValue::from(1));
        assert_eq!(e.unwrap_err(), "the base scenario has no list `cluster.pool`");
    }

    #[test]
    fn malformed_paths_are_refused() {
        assert!(ScenarioPath::parse("cluster..pools").is_err());
        assert!(ScenarioPath::parse("cluster.pools[x]").is_err());
        assert!(ScenarioPath::parse("cluster.pools[0").is_err());
        assert!(ScenarioPath::parse("").is_err());
    }
}
