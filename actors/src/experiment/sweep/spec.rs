//! A sweep's spec: a base scenario and the points to run, each a set of values at scenario
//! paths, checked before anything runs.
//!
//! ```yaml
//! base: scenario.yaml            # relative to the spec
//! seed: 7                        # optional: every point's seed (default: the base's)
//! replications: 5                # optional: every point's frame.replications
//! set:                           # optional: values every point carries
//!   workload.clients[0].requests: 500
//! axes:                          # the full grid, the first axis slowest ...
//!   cluster.pools[0].replicas: [1, 2, 4]
//!   workload.clients[0].arrival.rate_per_s: [10, 20]
//! points:                        # ... or a list of points (block style: in a flow
//!   - cluster.pools[0].replicas: 2 #  mapping `[` would open a list)
//!     cluster.pools[0].engine.args.max_num_seqs: 64
//! ```
//!
//! Every point's scenario is the base with its values put at their paths (and the spec's seed
//! and replications), written out as YAML: that text is the point's `scenario.yaml` and what its
//! Result records as given. A point whose scenario the parser refuses, or whose values the
//! engine's or router's own parser refuses as an unknown field or a wrong type, makes the spec
//! refused, naming the axis, the value and the cause; a point the upstream would refuse to start
//! (a model that does not fit, an argument out of its range) is kept as refused, with the reason.

use std::path::{Path, PathBuf};

use blis_contracts::yaml::{self, YamlValue};
use blis_contracts::{FieldError, Scenario, bounds};
use blis_costmodel::CostData;
use blis_kernel::HostKind;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::path::ScenarioPath;
use crate::DEFAULT_SEED;
use crate::assembly::{AssemblyOptions, assemble};

/// Most points one sweep may hold: each point is a full run.
pub const MAX_POINTS: usize = 10_000;

/// The spec file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SweepFile {
    base: String,
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default)]
    replications: Option<u32>,
    #[serde(default)]
    set: Option<YamlValue>,
    #[serde(default)]
    axes: Option<YamlValue>,
    #[serde(default)]
    points: Option<Vec<YamlValue>>,
}

/// The base scenario of a sweep or a capacity search.
#[derive(Clone, Debug)]
pub struct Base {
    /// Its path as the spec gives it.
    pub given: String,
    /// The folder its workload files are read from (its own).
    pub dir: PathBuf,
    /// Its document.
    doc: YamlValue,
    /// The seed every point runs on (common random numbers).
    pub seed: u64,
    /// Settings every point carries (the spec's seed and replications).
    common: Vec<(ScenarioPath, YamlValue)>,
}

impl Base {
    /// Read the base scenario `given` (at `field` of the spec at `spec_path`), with the spec's
    /// `seed`, `replications` and `set` values put into every point.
    pub fn load(
        spec_path: &Path,
        given: &str,
        field: &str,
        seed: Option<u64>,
        replications: Option<u32>,
        set: Option<&YamlValue>,
    ) -> Result<Base, FieldError> {
        let path = spec_path.parent().unwrap_or(Path::new("")).join(given);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| FieldError::new(field, given, format!("cannot read {}: {e}", path.display())))?;
        let scenario = Scenario::parse(&text).map_err(|e| FieldError::new(field, given, e.to_string()))?;
        let doc: YamlValue =
            yaml::from_str(&text).map_err(|e| FieldError::new(field, given, e.to_string()))?;
        let mut common = Vec::new();
        if let Some(seed) = seed {
            common.push((ScenarioPath::parse("seed").expect("a valid path"), YamlValue::from(seed)));
        }
        if let Some(replications) = replications {
            bounds::check_replications("replications", replications)?;
            common.push((
                ScenarioPath::parse("frame.replications").expect("a valid path"),
                YamlValue::from(replications),
            ));
        }
        if let Some(set) = set {
            let Some(map) = set.as_mapping() else {
                return Err(FieldError::new(
                    "set",
                    inline(set),
                    "map scenario paths to the values every point carries",
                ));
            };
            for (key, value) in map {
                let key = key.as_str().ok_or_else(|| {
                    FieldError::new("set", inline(key), "a value is keyed by a scenario path")
                })?;
                let path = ScenarioPath::parse(key)
                    .map_err(|cause| FieldError::new(format!("set.{key}"), key, cause))?;
                common.push((path, value.clone()));
            }
        }
        let base = Base {
            given: given.to_owned(),
            dir: path.parent().map(Path::to_path_buf).unwrap_or_default(),
            doc,
            seed: seed.or(scenario.seed).unwrap_or(DEFAULT_SEED),
            common,
        };
        let mut doc = base.doc.clone();
        for (path, value) in &base.common {
            path.set(&mut doc, value.clone())
                .map_err(|cause| FieldError::new(format!("set.{path}"), inline(value), cause))?;
        }
        let text = yaml::to_string(&doc).expect("a YAML document serialises");
        Scenario::parse(&text)
            .map_err(|e| FieldError::new("set", inline(set.unwrap_or(&YamlValue::Null)), e.to_string()))?;
        Ok(base)
    }

    /// The scenario text of the base with `settings` (and the common settings) put in; the
    /// error names the setting that could not be placed and why.
    pub fn text_with(&self, settings: &[(ScenarioPath, YamlValue)]) -> Result<String, (usize, String)> {
        let mut doc = self.doc.clone();
        for (path, value) in &self.common {
            path.set(&mut doc, value.clone()).map_err(|e| (usize::MAX, e))?;
        }
        for (k, (path, value)) in settings.iter().enumerate() {
            path.set(&mut doc, value.clone()).map_err(|e| (k, e))?;
        }
        Ok(yaml::to_string(&doc).expect("a YAML document serialises"))
    }

    /// Check a point's scenario: `Err` when it is refused as malformed (the spec is at fault,
    /// named by `origin` of the setting), `Ok(Some(reason))` when the upstream would refuse to
    /// start it, `Ok(None)` when it can run.
    pub fn check(
        &self,
        text: &str,
        settings: &[(ScenarioPath, YamlValue)],
        data: &CostData,
        origin: &dyn Fn(usize) -> String,
    ) -> Result<Option<String>, FieldError> {
        let blame = |error: &FieldError| {
            settings.iter().position(|(path, _)| {
                let (a, b) = (error.path.as_str(), path.as_str());
                within(a, b) || within(b, a)
            })
        };
        let refusal = |k: usize, error: &FieldError| {
            FieldError::new(origin(k), inline(&settings[k].1), error.to_string())
        };
        let scenario = match Scenario::parse(text) {
            Ok(scenario) => scenario,
            Err(error) => {
                return Err(match blame(&error) {
                    Some(k) => refusal(k, &error),
                    None => FieldError::new(origin(usize::MAX), &self.given, error.to_string()),
                });
            }
        };
        let options = AssemblyOptions {
            host: HostKind::Inline,
            base_dir: self.dir.clone(),
            keep_released: false,
            released_token_ids: false,
            fault: None,
            draw_ahead: false,
            lane_threads: 1,
            faithful_steps: false,
        };
        match assemble(&scenario, self.seed, data, &options) {
            Ok(_) => Ok(None),
            Err(error) => match blame(&error) {
                Some(k) if is_schema_refusal(&error) => Err(refusal(k, &error)),
                _ => Ok(Some(error.to_string())),
            },
        }
    }
}

/// Whether `path` is `prefix` or lies under it.
fn within(path: &str, prefix: &str) -> bool {
    path.strip_prefix(prefix).is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
}

/// Whether a refusal is a parser's (a field it does not know, a value of the wrong type) rather
/// than the upstream's judgement of a well-formed value.
fn is_schema_refusal(error: &FieldError) -> bool {
    ["unknown field", "invalid type", "unknown variant"].iter().any(|m| error.cause.contains(m))
}

/// A value as one line of YAML, for messages and tables.
pub fn inline(value: &YamlValue) -> String {
    match value {
        YamlValue::String(s) => s.clone(),
        other => serde_json::to_string(&yaml::to_json(other, "").unwrap_or(serde_json::Value::Null))
            .expect("JSON serialises"),
    }
}

/// One point of a sweep.
#[derive(Clone, Debug)]
pub struct Point {
    /// Its place in the sweep, from 0.
    pub index: usize,
    /// Its values, by axis.
    pub settings: Vec<(ScenarioPath, YamlValue)>,
    /// Its scenario text.
    pub text: String,
    /// Why the upstream would refuse to start it, if it would.
    pub refused: Option<String>,
}

/// A checked sweep spec.
#[derive(Clone, Debug)]
pub struct SweepSpec {
    /// The base scenario.
    pub base: Base,
    /// Every path any point sets, in first-seen order.
    pub axes: Vec<String>,
    /// The points, in order.
    pub points: Vec<Point>,
    /// SHA-256 (hex) of the spec and base texts: shards of one sweep share it.
    pub digest: String,
}

impl SweepSpec {
    /// Read and check the spec at `path`: every point's scenario is built and checked.
    pub fn load(path: &Path, data: &CostData) -> Result<SweepSpec, FieldError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| FieldError::new("(spec)", path.display(), format!("cannot read the spec: {e}")))?;
        let file: SweepFile = yaml::from_str(&text)?;
        let base = Base::load(path, &file.base, "base", file.seed, file.replications, file.set.as_ref())?;
        let (origins, settings) = match (&file.axes, &file.points) {
            (Some(axes), None) => grid(axes)?,
            (None, Some(points)) => listed(points)?,
            (Some(_), Some(_)) => {
                return Err(FieldError::at("points", "give either axes (a full grid) or points, not both"));
            }
            (None, None) => return Err(FieldError::at("axes", "give axes (a full grid) or points")),
        };
        let (axes, points) = build_points(&base, &origins, settings, data)?;
        let mut hasher = Sha256::new();
        hasher.update(text.as_bytes());
        hasher.update(b"\0");
        for point in &points {
            hasher.update(point.text.as_bytes());
            hasher.update(b"\0");
        }
        let digest = hasher.finalize().iter().map(|b| format!("{b:02x}")).collect();
        Ok(SweepSpec { base, axes, points, digest })
    }
}

/// Every point's scenario built from `base` and checked; and every path any point sets, in
/// first-seen order.
pub(crate) fn build_points(
    base: &Base,
    origins: &[Origin],
    settings: Vec<Settings>,
    data: &CostData,
) -> Result<(Vec<String>, Vec<Point>), FieldError> {
    let mut axes: Vec<String> = Vec::new();
    let mut points = Vec::with_capacity(settings.len());
    for (index, (origin, settings)) in origins.iter().zip(settings).enumerate() {
        for (path, _) in &settings {
            if !axes.iter().any(|a| a == path.as_str()) {
                axes.push(path.as_str().to_owned());
            }
        }
        let name = |k: usize| if k == usize::MAX { "base".to_owned() } else { origin(k) };
        let text = base.text_with(&settings).map_err(|(k, cause)| {
            FieldError::new(name(k), settings.get(k).map_or(String::new(), |s| inline(&s.1)), cause)
        })?;
        let refused = base.check(&text, &settings, data, &name)?;
        points.push(Point { index, settings, text, refused });
    }
    Ok((axes, points))
}

/// Names of a point's settings in the spec, for refusals.
pub(crate) type Origin = Box<dyn Fn(usize) -> String>;

/// A point's settings.
pub(crate) type Settings = Vec<(ScenarioPath, YamlValue)>;

/// The full grid of `axes` (a map from path to a list of values), the first axis slowest.
pub(crate) fn grid(axes: &YamlValue) -> Result<(Vec<Origin>, Vec<Settings>), FieldError> {
    let Some(map) = axes.as_mapping() else {
        return Err(FieldError::new("axes", inline(axes), "must map scenario paths to lists of values"));
    };
    if map.is_empty() {
        return Err(FieldError::at("axes", "give at least one axis"));
    }
    let mut columns: Vec<(ScenarioPath, Vec<YamlValue>)> = Vec::new();
    let mut total: usize = 1;
    for (key, values) in map {
        let key = key
            .as_str()
            .ok_or_else(|| FieldError::new("axes", inline(key), "an axis is named by a scenario path"))?;
        let path =
            ScenarioPath::parse(key).map_err(|cause| FieldError::new(format!("axes.{key}"), key, cause))?;
        let Some(values) = values.as_sequence() else {
            return Err(FieldError::new(
                format!("axes.{key}"),
                inline(values),
                "an axis is a list of values",
            ));
        };
        if values.is_empty() {
            return Err(FieldError::new(format!("axes.{key}"), "[]", "an axis needs at least one value"));
        }
        total = total.saturating_mul(values.len());
        columns.push((path, values.clone()));
    }
    if total > MAX_POINTS {
        return Err(FieldError::new(
            "axes",
            format!("{total} points"),
            format!("a sweep holds at most {MAX_POINTS} points"),
        ));
    }
    let mut origins: Vec<Origin> = Vec::with_capacity(total);
    let mut points = Vec::with_capacity(total);
    for n in 0..total {
        let mut rest = n;
        let mut picks = vec![0; columns.len()];
        for (a, (_, values)) in columns.iter().enumerate().rev() {
            picks[a] = rest % values.len();
            rest /= values.len();
        }
        let names: Vec<String> =
            columns.iter().zip(&picks).map(|((path, _), &i)| format!("axes.{path}[{i}]")).collect();
        points.push(
            columns
                .iter()
                .zip(&picks)
                .map(|((path, values), &i)| (path.clone(), values[i].clone()))
                .collect(),
        );
        origins.push(Box::new(move |k| names[k].clone()));
    }
    Ok((origins, points))
}

/// The listed `points`, each a map from path to value.
pub(crate) fn listed(points: &[YamlValue]) -> Result<(Vec<Origin>, Vec<Settings>), FieldError> {
    if points.is_empty() {
        return Err(FieldError::new("points", "[]", "give at least one point"));
    }
    if points.len() > MAX_POINTS {
        return Err(FieldError::new(
            "points",
            points.len(),
            format!("a sweep holds at most {MAX_POINTS} points"),
        ));
    }
    let mut origins: Vec<Origin> = Vec::with_capacity(points.len());
    let mut all = Vec::with_capacity(points.len());
    for (i, point) in points.iter().enumerate() {
        let Some(map) = point.as_mapping().filter(|m| !m.is_empty()) else {
            return Err(FieldError::new(
                format!("points[{i}]"),
                inline(point),
                "a point maps scenario paths to values",
            ));
        };
        let mut settings = Vec::with_capacity(map.len());
        let mut names = Vec::with_capacity(map.len());
        for (key, value) in map {
            let key = key.as_str().ok_or_else(|| {
                FieldError::new(format!("points[{i}]"), inline(key), "a value is keyed by a scenario path")
            })?;
            let path = ScenarioPath::parse(key)
                .map_err(|cause| FieldError::new(format!("points[{i}].{key}"), key, cause))?;
            names.push(format!("points[{i}].{key}"));
            settings.push((path, value.clone()));
        }
        all.push(settings);
        origins.push(Box::new(move |k| names[k].clone()));
    }
    Ok((origins, all))
}
