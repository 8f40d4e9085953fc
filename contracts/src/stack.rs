//! The upstream releases this build models, from `stack.json` at the repository root: the one
//! place that names them, embedded in the binary, printed by `--version` and recorded in every
//! Result.

use std::collections::BTreeMap;

/// `stack.json` as embedded at build time.
pub const STACK_JSON: &str = include_str!("../../stack.json");

/// Every modelled upstream and its release, by name (`vllm`, `llm-d-router`, …).
pub fn stack() -> BTreeMap<String, String> {
    serde_json::from_str(STACK_JSON).expect("stack.json is a map of names to versions")
}

/// The release of `upstream` this build models.
pub fn version_of(upstream: &str) -> Option<String> {
    stack().remove(upstream)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stack_names_the_engine_and_the_router() {
        let stack = stack();
        assert_eq!(stack.get("vllm").map(String::as_str), Some("0.15.1"));
        assert_eq!(stack.get("llm-d-router").map(String::as_str), Some("0.10.0"));
    }
}
