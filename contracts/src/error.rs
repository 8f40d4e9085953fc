//! The one shape of a refusal: which field, what value, why.

use std::fmt;

/// A user input refused: the field as a path (e.g. `cluster.pools[1].engine.args.max_num_seqs`),
/// the value found there, and the cause.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Where the bad value is, as a dotted path with `[i]` for list items.
    pub path: String,
    /// The value found, rendered for a person (absent when the field itself is missing).
    pub value: Option<String>,
    /// Why it is refused.
    pub cause: String,
}

impl FieldError {
    /// A refusal of `value` at `path` because of `cause`.
    ///
    /// The value and the cause are cut at [`MAX_SHOWN_CHARS`] characters, so that a huge
    /// offending value does not become a huge message.
    /// A float rendered in hundreds of digits (`1e300` displays in full) is shown in exponent
    /// form.
    pub fn new(path: impl Into<String>, value: impl fmt::Display, cause: impl Into<String>) -> FieldError {
        FieldError {
            path: path.into(),
            value: Some(cut(&readable(value.to_string()))),
            cause: cut(&cause.into()),
        }
    }

    /// A refusal at `path` where no single value is to blame (a missing field, a whole section).
    pub fn at(path: impl Into<String>, cause: impl Into<String>) -> FieldError {
        FieldError { path: path.into(), value: None, cause: cut(&cause.into()) }
    }

    /// The same refusal, with `prefix` put in front of its path.
    pub fn within(mut self, prefix: &str) -> FieldError {
        self.path = join_path(prefix, &self.path);
        self
    }
}

/// The longest value or cause a refusal shows, in characters; longer ones are cut with a note
/// of their length.
pub const MAX_SHOWN_CHARS: usize = 400;

/// `text` cut at [`MAX_SHOWN_CHARS`] characters, saying how long it was.
fn cut(text: &str) -> String {
    let length = text.chars().count();
    if length <= MAX_SHOWN_CHARS {
        return text.to_owned();
    }
    let kept: String = text.chars().take(MAX_SHOWN_CHARS).collect();
    format!("{kept}… ({length} characters in all)")
}

/// `text` in exponent form when it is a finite number displayed digit by digit: longer than
/// any integer of 128 bits, or a decimal fraction longer than 20 characters; anything else (a
/// 64-bit integer, a name of digits) as it is.
fn readable(text: String) -> String {
    if text.len() <= 20 || (text.len() <= 40 && !text.contains('.')) {
        return text;
    }
    match text.parse::<f64>() {
        Ok(value) if value.is_finite() => format!("{value:e}"),
        _ => text,
    }
}

/// A number as a person reads it: plain when short, in exponent form when long (`1e300`, not
/// three hundred digits).
pub fn number(value: f64) -> String {
    let plain = value.to_string();
    if plain.len() <= 16 { plain } else { format!("{value:e}") }
}

/// `prefix` and `rest` joined as a field path (`a.b` + `c[0]` = `a.b.c[0]`, `a` + `[2]` = `a[2]`).
pub fn join_path(prefix: &str, rest: &str) -> String {
    match (prefix.is_empty(), rest.is_empty() || rest == ".") {
        (true, _) => rest.to_owned(),
        (false, true) => prefix.to_owned(),
        (false, false) if rest.starts_with('[') => format!("{prefix}{rest}"),
        (false, false) => format!("{prefix}.{rest}"),
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() { "(document)" } else { &self.path };
        match &self.value {
            Some(value) => write!(f, "{path} = {value}: {}", self.cause),
            None => write!(f, "{path}: {}", self.cause),
        }
    }
}

impl std::error::Error for FieldError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_join_like_the_document_nests() {
        assert_eq!(join_path("cluster", "pools[0].name"), "cluster.pools[0].name");
        assert_eq!(join_path("cluster.pools", "[1]"), "cluster.pools[1]");
        assert_eq!(join_path("", "seed"), "seed");
        assert_eq!(join_path("engine.args", "."), "engine.args");
    }

    #[test]
    fn huge_values_and_causes_are_cut() {
        let digits = "9".repeat(5_000_000);
        let e = FieldError::new("workload.clients[0].requests", &digits, format!("invalid value {digits}"));
        let shown = e.to_string();
        assert!(shown.len() < 2 * MAX_SHOWN_CHARS + 200, "{} bytes", shown.len());
        assert!(shown.contains("(5000000 characters in all)"), "{shown:.200}");
        assert_eq!(number(1e300), "1e300");
        assert_eq!(number(2.5), "2.5");
    }

    #[test]
    fn floats_displayed_digit_by_digit_are_shown_in_exponent_form() {
        let value = |v: f64| FieldError::new("x", v, "c").value.unwrap();
        assert_eq!(value(1e300), "1e300");
        assert_eq!(value(1e-300), "1e-300");
        assert_eq!(value(0.25), "0.25");
        // Integers of 64 bits keep every digit.
        assert_eq!(FieldError::new("x", u64::MAX, "c").value.unwrap(), "18446744073709551615");
    }

    #[test]
    fn display_names_path_value_and_cause() {
        let e = FieldError::new("workload.clients[0].rate_per_s", -2.0, "must be positive");
        assert_eq!(e.to_string(), "workload.clients[0].rate_per_s = -2: must be positive");
    }
}
