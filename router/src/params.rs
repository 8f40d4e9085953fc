//! Plugin parameters decoded as llm-d decodes them.
//!
//! Upstream hands each plugin factory its `parameters` through Go's `encoding/json` decoder with
//! `DisallowUnknownFields` (`pkg/epp/framework/interface/plugin/registry.go::StrictDecoder`):
//! absent or empty parameters give the factory's defaults, an unknown field is an error, a value
//! of the wrong JSON type is an error, and — a Go subtlety we keep — a field name matches its
//! struct field case-insensitively when no exact match exists, at every depth. [`decode`] does
//! the same for a serde struct with `#[serde(deny_unknown_fields, default)]`. Go durations
//! (`"200ms"`, `"1m30s"`) are read by [`GoDuration`].

use std::fmt;

use serde::de::{self, DeserializeOwned, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// A refused parameter: where inside `parameters` (a dotted path, empty for the whole object),
/// the value found, and upstream's reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamError {
    /// The path below `parameters`, e.g. `blockSizeTokens` or `indexerConfig.size`.
    pub path: String,
    /// The value found there, rendered as JSON (absent when no one value is to blame).
    pub value: Option<String>,
    /// Why it is refused, in upstream's words where upstream has words.
    pub reason: String,
}

impl ParamError {
    /// A refusal of the value at `path` (found in `params`) for `reason`.
    pub fn invalid(params: Option<&Value>, path: &str, reason: impl Into<String>) -> ParamError {
        let value = params.and_then(|p| lookup(p, path)).map(render);
        ParamError { path: path.to_owned(), value, reason: reason.into() }
    }
}

impl fmt::Display for ParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.value {
            Some(v) => write!(f, "{} = {v}: {}", self.path, self.reason),
            None => write!(f, "{}: {}", self.path, self.reason),
        }
    }
}

/// Decode `params` into `T` as upstream's strict decoder would; `None` or `null` gives
/// `T::default()`, and a `null`-valued key anywhere is as if absent ([`drop_null_keys`]).
pub fn decode<T: DeserializeOwned + Default>(params: Option<&Value>) -> Result<T, ParamError> {
    let Some(value) = params.filter(|v| !v.is_null()) else { return Ok(T::default()) };
    let value = drop_null_keys(value);
    if !value.is_object() {
        return Err(ParamError {
            path: String::new(),
            value: Some(render(&value)),
            reason: format!("json: cannot unmarshal {} into the plugin's parameters", json_kind(&value)),
        });
    }
    serde_path_to_error::deserialize(GoJson(&value)).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." { String::new() } else { path };
        let inner = e.into_inner().to_string();
        let reason = match inner.strip_prefix("unknown field `") {
            Some(rest) => {
                let name = rest.split('`').next().unwrap_or_default();
                // The path already ends at the unknown field.
                let path = if path.rsplit('.').next() == Some(name) { path } else { join(&path, name) };
                return ParamError { path, value: None, reason: format!("json: unknown field \"{name}\"") };
            }
            None => format!("json: {inner}"),
        };
        let value = lookup(&value, &path).map(render);
        ParamError { path, value, reason }
    })
}

/// `value` without its `null`-valued object keys, at every depth (inside arrays too).
///
/// Go's `encoding/json` leaves a value field at its default when given `null`, and sets a
/// pointer, slice or map field to nil, which every factory reads as "not set"; either way the
/// key might as well be absent. (One difference is not kept: a `null` *entry* of a map-typed
/// field, e.g. `matchLabels: {app: null}`, is stored by Go as the empty string and is dropped
/// here.)
pub fn drop_null_keys(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.clone(), drop_null_keys(v))).collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(drop_null_keys).collect()),
        other => other.clone(),
    }
}

/// A JSON value read as Go's `encoding/json` reads it into structs: a key matches its struct
/// field exactly, or else case-insensitively, at every depth (map keys are never folded).
struct GoJson<'de>(&'de Value);

impl<'de> Deserializer<'de> for GoJson<'de> {
    type Error = serde_json::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Array(items) => visitor.visit_seq(GoSeq(items.iter())),
            Value::Object(map) => visitor.visit_map(GoMap { entries: map.iter(), fields: &[], value: None }),
            other => other.deserialize_any(visitor),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        if self.0.is_null() { visitor.visit_none() } else { visitor.visit_some(self) }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Array(items) => visitor.visit_seq(GoSeq(items.iter())),
            other => other.deserialize_seq(visitor),
        }
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Object(map) => visitor.visit_map(GoMap { entries: map.iter(), fields: &[], value: None }),
            other => other.deserialize_map(visitor),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Object(map) => visitor.visit_map(GoMap { entries: map.iter(), fields, value: None }),
            other => other.deserialize_struct(name, fields, visitor),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.deserialize_enum(name, variants, visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct tuple tuple_struct identifier ignored_any
    }
}

/// The elements of a JSON array, each read as [`GoJson`].
struct GoSeq<'de>(std::slice::Iter<'de, Value>);

impl<'de> de::SeqAccess<'de> for GoSeq<'de> {
    type Error = serde_json::Error;

    fn next_element_seed<T: de::DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Self::Error> {
        self.0.next().map(|v| seed.deserialize(GoJson(v))).transpose()
    }
}

/// The entries of a JSON object, keys folded onto `fields` (a struct's) as Go matches them.
struct GoMap<'de> {
    entries: serde_json::map::Iter<'de>,
    fields: &'static [&'static str],
    value: Option<&'de Value>,
}

impl<'de> de::MapAccess<'de> for GoMap<'de> {
    type Error = serde_json::Error;

    fn next_key_seed<K: de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Self::Error> {
        let Some((key, value)) = self.entries.next() else { return Ok(None) };
        self.value = Some(value);
        let name: &'de str = if self.fields.contains(&key.as_str()) {
            key
        } else {
            self.fields.iter().copied().find(|f| f.eq_ignore_ascii_case(key)).unwrap_or(key)
        };
        seed.deserialize(de::value::BorrowedStrDeserializer::new(name)).map(Some)
    }

    fn next_value_seed<T: de::DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, Self::Error> {
        let value = self.value.take().ok_or_else(|| de::Error::custom("a value without its key"))?;
        seed.deserialize(GoJson(value))
    }
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() { name.to_owned() } else { format!("{path}.{name}") }
}

fn lookup<'a>(value: &'a Value, path: &str) -> Option<&'a Value> {
    if path.is_empty() {
        return Some(value);
    }
    let mut current = value;
    for part in path.split('.') {
        current = match part.split_once('[') {
            Some((name, index)) => {
                let index: usize = index.trim_end_matches(']').parse().ok()?;
                let base = if name.is_empty() { current } else { field(current, name)? };
                base.get(index)?
            }
            None => field(current, part)?,
        };
    }
    Some(current)
}

/// The member `name` of an object: the exact key, else one matching case-insensitively.
fn field<'a>(value: &'a Value, name: &str) -> Option<&'a Value> {
    let map = value.as_object()?;
    map.get(name).or_else(|| map.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v))
}

/// A JSON value for a message, cut to a readable length.
pub fn render(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 80 { format!("{}…", text.chars().take(80).collect::<String>()) } else { text }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A Go `time.Duration` written as Go's `time.ParseDuration` reads it (`"300ms"`, `"1.5s"`,
/// `"1m30s"`, `"0"`), held in whole microseconds (the simulator's unit; finer parts round up).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct GoDuration {
    /// The duration, µs (negative durations are kept: some factories test the sign).
    pub micros: i64,
}

impl GoDuration {
    /// A duration of `micros` µs.
    pub const fn from_micros(micros: i64) -> GoDuration {
        GoDuration { micros }
    }

    /// Parse Go's duration syntax.
    pub fn parse(text: &str) -> Result<GoDuration, String> {
        let invalid = || format!("time: invalid duration \"{text}\"");
        let (negative, mut rest) = match text.as_bytes().first() {
            Some(b'-') => (true, &text[1..]),
            Some(b'+') => (false, &text[1..]),
            _ => (false, text),
        };
        if rest == "0" {
            return Ok(GoDuration { micros: 0 });
        }
        if rest.is_empty() {
            return Err(invalid());
        }
        let mut nanos: f64 = 0.0;
        while !rest.is_empty() {
            let number_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
            let number = &rest[..number_end];
            if number.is_empty() || number == "." {
                return Err(invalid());
            }
            let value: f64 = number.parse().map_err(|_| invalid())?;
            rest = &rest[number_end..];
            let unit_end = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
            let scale = match &rest[..unit_end] {
                "ns" => 1.0,
                "us" | "µs" | "μs" => 1e3,
                "ms" => 1e6,
                "s" => 1e9,
                "m" => 60e9,
                "h" => 3600e9,
                "" => return Err(format!("time: missing unit in duration \"{text}\"")),
                unit => return Err(format!("time: unknown unit \"{unit}\" in duration \"{text}\"")),
            };
            nanos += value * scale;
            rest = &rest[unit_end..];
        }
        // Go's durations are int64 nanoseconds: about 292 years.
        if nanos > 9.223_372_036_854_775e18 {
            return Err(format!("time: invalid duration \"{text}\""));
        }
        let micros = (nanos / 1e3).ceil() as i64;
        Ok(GoDuration { micros: if negative { -micros } else { micros } })
    }
}

impl fmt::Display for GoDuration {
    /// As Go's `time.Duration.String` prints it (`0s`, `1.5ms`, `-2m30s`, `1h0m0s`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.micros == 0 {
            return f.write_str("0s");
        }
        let sign = if self.micros < 0 { "-" } else { "" };
        let nanos = u128::from(self.micros.unsigned_abs()) * 1000;
        let fraction = |value: u128, scale: u128| {
            let whole = value / scale;
            let digits = scale.ilog10() as usize;
            let rest = format!("{:0digits$}", value % scale);
            let rest = rest.trim_end_matches('0');
            if rest.is_empty() { whole.to_string() } else { format!("{whole}.{rest}") }
        };
        if nanos < 1_000_000 {
            return write!(f, "{sign}{}µs", fraction(nanos, 1000));
        }
        if nanos < 1_000_000_000 {
            return write!(f, "{sign}{}ms", fraction(nanos, 1_000_000));
        }
        let seconds = fraction(nanos % 60_000_000_000, 1_000_000_000);
        let minutes = nanos / 60_000_000_000;
        match (minutes / 60, minutes % 60) {
            (0, 0) => write!(f, "{sign}{seconds}s"),
            (0, m) => write!(f, "{sign}{m}m{seconds}s"),
            (h, m) => write!(f, "{sign}{h}h{m}m{seconds}s"),
        }
    }
}

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<GoDuration, D::Error> {
        let text = String::deserialize(deserializer)?;
        GoDuration::parse(&text).map_err(de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields, default, rename_all = "camelCase")]
    struct Sample {
        block_size_tokens: i64,
        auto_tune: bool,
        ratio: f64,
    }

    impl Default for Sample {
        fn default() -> Self {
            Sample { block_size_tokens: 16, auto_tune: true, ratio: 1.5 }
        }
    }

    #[test]
    fn absent_null_and_empty_parameters_give_the_defaults() {
        assert_eq!(decode::<Sample>(None).unwrap(), Sample::default());
        assert_eq!(decode::<Sample>(Some(&Value::Null)).unwrap(), Sample::default());
        assert_eq!(decode::<Sample>(Some(&json!({}))).unwrap(), Sample::default());
    }

    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields, default, rename_all = "camelCase")]
    struct Nested {
        inner: Sample,
        list: Vec<Sample>,
        cap: Option<i64>,
    }

    #[test]
    fn null_valued_keys_keep_their_defaults_at_every_depth() {
        // A value field keeps its default; an Option (Go's pointer) stays unset.
        let s = decode::<Sample>(Some(&json!({"blockSizeTokens": null, "ratio": 2.0}))).unwrap();
        assert_eq!(s, Sample { block_size_tokens: 16, auto_tune: true, ratio: 2.0 });
        let n = decode::<Nested>(Some(&json!({
            "inner": {"autoTune": null, "blockSizeTokens": 4},
            "list": [{"ratio": null}, {"autoTune": false, "ratio": null}],
            "cap": null,
        })))
        .unwrap();
        assert_eq!(n.inner, Sample { block_size_tokens: 4, ..Sample::default() });
        assert_eq!(n.list, vec![Sample::default(), Sample { auto_tune: false, ..Sample::default() }]);
        assert_eq!(n.cap, None);
        // A null key does not hide an unknown field.
        let e = decode::<Sample>(Some(&json!({"ratio": null, "bogus": 1}))).unwrap_err();
        assert_eq!(e.path, "bogus");
    }

    #[test]
    fn unknown_fields_are_refused_by_name_as_go_words_it() {
        let e = decode::<Sample>(Some(&json!({"blockSizeTokens": 4, "prt": 7080}))).unwrap_err();
        assert_eq!(e.path, "prt");
        assert_eq!(e.reason, "json: unknown field \"prt\"");
    }

    #[test]
    fn field_names_match_case_insensitively_as_in_encoding_json() {
        let s = decode::<Sample>(Some(&json!({"BlockSizeTokens": 4, "autotune": false}))).unwrap();
        assert_eq!(s, Sample { block_size_tokens: 4, auto_tune: false, ratio: 1.5 });
    }

    #[test]
    fn nested_field_names_match_case_insensitively_too() {
        let n = decode::<Nested>(Some(&json!({
            "Inner": {"BLOCKSIZETOKENS": 8},
            "list": [{"AutoTune": false}],
        })))
        .unwrap();
        assert_eq!(n.inner.block_size_tokens, 8);
        assert!(!n.list[0].auto_tune);
        let e = decode::<Nested>(Some(&json!({"list": [{"Ratio": "x"}]}))).unwrap_err();
        assert_eq!((e.path.as_str(), e.value.as_deref()), ("list[0].ratio", Some("\"x\"")));
        let e = decode::<Nested>(Some(&json!({"inner": {"blockSize": 1}}))).unwrap_err();
        assert_eq!(
            (e.path.as_str(), e.reason.as_str()),
            ("inner.blockSize", "json: unknown field \"blockSize\"")
        );
    }

    #[test]
    fn wrong_types_name_the_field_and_value() {
        let e = decode::<Sample>(Some(&json!({"blockSizeTokens": "x"}))).unwrap_err();
        assert_eq!(e.path, "blockSizeTokens");
        assert_eq!(e.value.as_deref(), Some("\"x\""));
        let e = decode::<Sample>(Some(&json!({"blockSizeTokens": 1.5}))).unwrap_err();
        assert_eq!(e.path, "blockSizeTokens");
        let e = decode::<Sample>(Some(&json!([1, 2]))).unwrap_err();
        assert_eq!(e.path, "");
        assert!(e.reason.contains("cannot unmarshal array"), "{e}");
    }

    #[test]
    fn go_durations_parse_as_time_parse_duration_does() {
        assert_eq!(GoDuration::parse("200ms"), Ok(GoDuration::from_micros(200_000)));
        assert_eq!(GoDuration::parse("1.5s"), Ok(GoDuration::from_micros(1_500_000)));
        assert_eq!(GoDuration::parse("1m30s"), Ok(GoDuration::from_micros(90_000_000)));
        assert_eq!(GoDuration::parse("0"), Ok(GoDuration::from_micros(0)));
        assert_eq!(GoDuration::parse("0s"), Ok(GoDuration::from_micros(0)));
        assert_eq!(GoDuration::parse("-2s"), Ok(GoDuration::from_micros(-2_000_000)));
        assert_eq!(GoDuration::parse("1500ns"), Ok(GoDuration::from_micros(2)));
        assert!(GoDuration::parse("5").unwrap_err().contains("missing unit"));
        assert!(GoDuration::parse("5d").unwrap_err().contains("unknown unit"));
        assert!(GoDuration::parse("").is_err());
        assert!(GoDuration::parse("s").is_err());
    }

    #[test]
    fn go_durations_print_as_go_prints_them() {
        let shown = |text: &str| GoDuration::parse(text).unwrap().to_string();
        assert_eq!(shown("0s"), "0s");
        assert_eq!(shown("-0s"), "0s");
        assert_eq!(shown("1.5ms"), "1.5ms");
        assert_eq!(shown("200ms"), "200ms");
        assert_eq!(shown("7us"), "7µs");
        assert_eq!(shown("-5s"), "-5s");
        assert_eq!(shown("1.25s"), "1.25s");
        assert_eq!(shown("90s"), "1m30s");
        assert_eq!(shown("2m"), "2m0s");
        assert_eq!(shown("-1h"), "-1h0m0s");
        assert_eq!(shown("1h2m3.5s"), "1h2m3.5s");
    }
}
