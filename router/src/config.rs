//! The `EndpointPickerConfig` of llm-d-router v0.10.0, loaded as the release loads it.
//!
//! [`load`] follows `pkg/epp/config/loader`: strict decoding of the document, static defaults
//! (a plugin's name defaults to its type), feature-gate validation, plugin validation and
//! instantiation (each factory decoding its parameters strictly or ignoring them, as upstream's
//! does), the system defaults upstream injects (default profile, single-profile handler,
//! max-score picker and scorer weight 1, the flow-control policies, the three parsers, the
//! utilization detector, the metrics data source), deep validation, profile assembly, the
//! `flowControl` section when its gate is on (`crate::flow_control::config`), data
//! producers created for required data keys, and the Alpha-stability check. Where upstream's
//! choice depends on Go map order (the default profile's plugin order, the picker injected into
//! a picker-less profile), the first in configuration order is taken. Every refusal names its
//! path below the config, the value and upstream's own words.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::params::{ParamError, drop_null_keys, render};
use crate::plugins::{self, DataKey, PluginKind};
use crate::precise_prefix::{PRECISE_PRODUCER_TYPE, PRECISE_SCORER_TYPE};
use crate::registry::{self, Stability, Support};
use crate::view::PluginInstance;

/// The apiVersion the release writes.
pub const API_VERSION: &str = "llm-d.ai/v1alpha1";
/// The deprecated apiVersion it still decodes.
pub const DEPRECATED_API_VERSION: &str = "inference.networking.x-k8s.io/v1alpha1";
/// The feature gates the release registers, with their defaults.
pub const FEATURE_GATES: [(&str, bool); 2] = [("flowControl", false), ("haPopulateNonLeaderDatastore", true)];

/// A refused config: where (a path below the config document), the value, why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The path below the config, e.g. `plugins[2].parameters.blockSizeTokens`.
    pub path: String,
    /// The value found there.
    pub value: Option<String>,
    /// Why, in upstream's words where it has words.
    pub reason: String,
}

impl ConfigError {
    pub(crate) fn at(path: impl Into<String>, reason: impl Into<String>) -> ConfigError {
        ConfigError { path: path.into(), value: None, reason: reason.into() }
    }

    pub(crate) fn value(path: impl Into<String>, value: &str, reason: impl Into<String>) -> ConfigError {
        ConfigError { path: path.into(), value: Some(format!("{value:?}")), reason: reason.into() }
    }
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.value {
            Some(v) => write!(f, "{} = {v}: {}", self.path, self.reason),
            None => write!(f, "{}: {}", self.path, self.reason),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Command-line flags of the router that bear on loading.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// Upstream's `--allow-experimental-plugins`.
    pub allow_experimental_plugins: bool,
}

/// A setting accepted and without effect in this simulation, with why.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct InertSetting {
    /// Its path below the config.
    pub path: String,
    /// Why it has no effect.
    pub reason: String,
}

/// A scheduling profile, assembled.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    /// Its name.
    pub name: String,
    /// Filters in order (plugin indexes).
    pub filters: Vec<usize>,
    /// Scorers in order, with their weights.
    pub scorers: Vec<(usize, f64)>,
    /// The picker.
    pub picker: usize,
}

/// A data source and its extractors (plugin indexes).
#[derive(Clone, Debug, PartialEq)]
pub struct DataSource {
    /// The source.
    pub source: usize,
    /// Its extractors, in order.
    pub extractors: Vec<usize>,
}

/// A loaded, validated and instantiated config.
#[derive(Clone, Debug)]
pub struct RouterConfig {
    /// The apiVersion as given.
    pub api_version: String,
    /// Every plugin instance: configured ones in order, then those injected.
    pub plugins: Vec<PluginInstance>,
    /// The scheduling profiles, in configured order.
    pub profiles: Vec<Profile>,
    /// The profile handler.
    pub handler: usize,
    /// The saturation detector (used by admission).
    pub saturation_detector: usize,
    /// The request parsers, in order.
    pub parsers: Vec<usize>,
    /// The data sources and their extractors.
    pub data_sources: Vec<DataSource>,
    /// The data producers in dependency order.
    pub producers: Vec<usize>,
    /// Feature gates with their values.
    pub feature_gates: BTreeMap<String, bool>,
    /// The flow-control layer, when the `flowControl` gate is on (otherwise the legacy
    /// admission runs).
    pub flow_control: Option<std::sync::Arc<crate::flow_control::FlowControlConfig>>,
    /// Lines upstream would log: deprecations, ignored sections, clamps.
    pub warnings: Vec<String>,
    /// Settings accepted but without effect here.
    pub inert: Vec<InertSetting>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawConfig {
    api_version: Option<String>,
    kind: Option<String>,
    #[serde(default)]
    feature_gates: Option<Vec<String>>,
    #[serde(default)]
    plugins: Vec<RawPlugin>,
    #[serde(default)]
    scheduling_profiles: Vec<RawProfile>,
    #[serde(default)]
    data_layer: Option<RawDataLayer>,
    #[serde(default)]
    flow_control: Option<RawFlowControl>,
    #[serde(default)]
    request_handler: Option<RawRequestHandler>,
    #[serde(default)]
    saturation_detector: Option<RawRef>,
    #[serde(default)]
    parser: Option<RawRef>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlugin {
    #[serde(default)]
    name: String,
    #[serde(default, rename = "type")]
    type_name: String,
    #[serde(default)]
    parameters: Option<Value>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProfile {
    #[serde(default)]
    name: String,
    #[serde(default)]
    plugins: Vec<RawProfilePlugin>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawProfilePlugin {
    #[serde(default)]
    plugin_ref: String,
    #[serde(default)]
    weight: Option<f64>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawRef {
    #[serde(default)]
    plugin_ref: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawDataLayer {
    inject_defaults: Option<bool>,
    #[serde(default)]
    sources: Vec<RawSource>,
    discovery: Option<RawRef>,
    #[serde(default)]
    cross_replica_syncer_plugin_ref: String,
    cross_replica_sync_interval: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawSource {
    #[serde(default)]
    plugin_ref: String,
    #[serde(default)]
    extractors: Vec<RawRef>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawRequestHandler {
    #[serde(default)]
    parsers: Vec<RawRef>,
}

/// The `flowControl` section as written (bands and limits kept raw: the flow-control builder
/// decodes them with their paths).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct RawFlowControl {
    pub(crate) max_bytes: Option<Value>,
    pub(crate) max_requests: Option<Value>,
    #[serde(rename = "defaultRequestTTL")]
    pub(crate) default_request_ttl: Option<Value>,
    pub(crate) default_priority_band: Option<Value>,
    pub(crate) default_negative_priority_band: Option<Value>,
    #[serde(default)]
    pub(crate) priority_bands: Vec<Value>,
    #[serde(default)]
    pub(crate) usage_limit_policy_plugin_ref: String,
    saturation_detector: Option<RawRef>,
    #[serde(default)]
    pub(crate) enable_eviction: bool,
}

/// The built-in default config (`defaults.go::loadDefaultConfig`), as YAML a user could write.
pub const DEFAULT_CONFIG_YAML: &str = "\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
featureGates: []
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
- type: metrics-data-source
- type: core-metrics-extractor
schedulingProfiles:
- name: default
  plugins:
  - {pluginRef: queue-scorer, weight: 2}
  - {pluginRef: kv-cache-utilization-scorer, weight: 2}
  - {pluginRef: prefix-cache-scorer, weight: 3}
dataLayer:
  sources:
  - pluginRef: metrics-data-source
    extractors: [{pluginRef: core-metrics-extractor}]
";

fn default_config() -> RawConfig {
    let plugin = |t: &str| RawPlugin { name: String::new(), type_name: t.to_owned(), parameters: None };
    let weighted = |r: &str, w: f64| RawProfilePlugin { plugin_ref: r.to_owned(), weight: Some(w) };
    RawConfig {
        api_version: Some(API_VERSION.to_owned()),
        kind: Some("EndpointPickerConfig".to_owned()),
        feature_gates: Some(Vec::new()),
        plugins: [
            "queue-scorer",
            "kv-cache-utilization-scorer",
            "prefix-cache-scorer",
            "metrics-data-source",
            "core-metrics-extractor",
        ]
        .map(plugin)
        .to_vec(),
        scheduling_profiles: vec![RawProfile {
            name: "default".to_owned(),
            plugins: vec![
                weighted("queue-scorer", 2.0),
                weighted("kv-cache-utilization-scorer", 2.0),
                weighted("prefix-cache-scorer", 3.0),
            ],
        }],
        data_layer: Some(RawDataLayer {
            sources: vec![RawSource {
                plugin_ref: "metrics-data-source".to_owned(),
                extractors: vec![RawRef { plugin_ref: "core-metrics-extractor".to_owned() }],
            }],
            ..RawDataLayer::default()
        }),
        ..RawConfig::default()
    }
}

/// Load `document` (`None`, or an empty mapping, for the built-in default) as llm-d-router
/// v0.10.0 would load it.
pub fn load(document: Option<&Value>, options: LoadOptions) -> Result<RouterConfig, ConfigError> {
    let mut warnings = Vec::new();
    let empty = match document {
        None | Some(Value::Null) => true,
        Some(Value::Object(map)) => map.is_empty(),
        Some(_) => false,
    };
    let mut raw = if empty {
        default_config()
    } else {
        decode(document.expect("a non-empty document"), &mut warnings)?
    };
    // applyStaticDefaults: a plugin's name defaults to its type.
    for plugin in &mut raw.plugins {
        if plugin.name.is_empty() {
            plugin.name = plugin.type_name.clone();
        }
    }
    let feature_gates = feature_gates(raw.feature_gates.as_deref().unwrap_or_default())?;
    Loader { raw, options, warnings, inert: Vec::new(), plugins: Vec::new(), feature_gates }.run()
}

fn decode(document: &Value, warnings: &mut Vec<String>) -> Result<RawConfig, ConfigError> {
    let mut raw: RawConfig = serde_path_to_error::deserialize(&drop_null_keys(document)).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        let (path, reason) = match inner.strip_prefix("unknown field `") {
            Some(rest) => {
                let name = rest.split('`').next().unwrap_or_default().to_owned();
                let path =
                    if path.rsplit('.').next() == Some(name.as_str()) { path } else { join(&path, &name) };
                (path, format!("strict decoding error: unknown field \"{name}\""))
            }
            None => (if path == "." { String::new() } else { path }, inner),
        };
        ConfigError::at(path, format!("failed to decode configuration JSON/YAML: {reason}"))
    })?;
    let kind = raw.kind.clone().unwrap_or_default();
    let api_version = raw.api_version.clone().unwrap_or_default();
    if kind.is_empty() {
        return Err(ConfigError::at("kind", format!("Object 'Kind' is missing in '{}'", render(document))));
    }
    if api_version != API_VERSION && api_version != DEPRECATED_API_VERSION {
        return Err(ConfigError::value(
            "apiVersion",
            &api_version,
            format!(
                "no kind \"{kind}\" is registered for version \"{api_version}\" (llm-d-router 0.10.0 decodes \
                 {API_VERSION} and the deprecated {DEPRECATED_API_VERSION})"
            ),
        ));
    }
    if kind != "EndpointPickerConfig" {
        return Err(ConfigError::value(
            "kind",
            &kind,
            format!("no kind \"{kind}\" is registered for version \"{api_version}\""),
        ));
    }
    if api_version == DEPRECATED_API_VERSION {
        warnings.push(format!(
            "DEPRECATION: apiVersion {DEPRECATED_API_VERSION}/EndpointPickerConfig is deprecated (replacement: \
             {API_VERSION}/EndpointPickerConfig)"
        ));
    }
    if let Some(detector) = raw.saturation_detector.clone() {
        warnings.push(
            "DEPRECATION: top-level saturationDetector is deprecated, use flowControl.saturationDetector instead. \
             If both are set, the new field is used."
                .to_owned(),
        );
        let flow = raw.flow_control.get_or_insert_with(RawFlowControl::default);
        if flow.saturation_detector.is_none() {
            flow.saturation_detector = Some(detector);
        }
    }
    if let Some(parser) = raw.parser.clone() {
        warnings.push(
            "DEPRECATION: top-level parser is deprecated, use requestHandler.parsers instead. If both are set, the \
             new field is used."
                .to_owned(),
        );
        let handler = raw.request_handler.get_or_insert_with(RawRequestHandler::default);
        if handler.parsers.is_empty() {
            handler.parsers = vec![parser];
        }
    }
    Ok(raw)
}

fn feature_gates(gates: &[String]) -> Result<BTreeMap<String, bool>, ConfigError> {
    let mut values: BTreeMap<String, bool> =
        FEATURE_GATES.iter().map(|(g, d)| ((*g).to_owned(), *d)).collect();
    for (i, gate) in gates.iter().enumerate() {
        let path = format!("featureGates[{i}]");
        let mut parts = gate.split('=');
        let name = parts.next().unwrap_or_default();
        if !values.contains_key(name) {
            return Err(ConfigError::value(
                path,
                gate,
                format!("feature gate validation failed: feature gate '{name}' is unknown or unregistered"),
            ));
        }
        let value = match parts.next() {
            None => true,
            Some(text) => parse_bool(&text.trim().to_lowercase()).ok_or_else(|| {
                ConfigError::value(
                    &path,
                    gate,
                    format!(
                        "feature gate validation failed: {text} is not a valid value for the feature gate {name} \
                         (error: strconv.ParseBool: parsing {:?}: invalid syntax)",
                        text.trim().to_lowercase()
                    ),
                )
            })?,
        };
        values.insert(name.to_owned(), value);
    }
    Ok(values)
}

/// Go's `strconv.ParseBool`.
fn parse_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "true" => Some(true),
        "0" | "f" | "false" => Some(false),
        _ => None,
    }
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() || path == "." {
        name.to_owned()
    } else if name.is_empty() {
        path.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

struct Loader {
    raw: RawConfig,
    options: LoadOptions,
    warnings: Vec<String>,
    inert: Vec<InertSetting>,
    plugins: Vec<PluginInstance>,
    feature_gates: BTreeMap<String, bool>,
}

impl Loader {
    fn run(mut self) -> Result<RouterConfig, ConfigError> {
        self.validate_plugins()?;
        self.check_plugin_dependencies()?;
        for i in 0..self.raw.plugins.len() {
            let spec = self.raw.plugins[i].clone();
            let instance = self.instantiate(
                &spec.name,
                &spec.type_name,
                spec.parameters.as_ref(),
                &format!("plugins[{i}]"),
            )?;
            self.plugins.push(instance);
        }
        self.ensure_scheduling_layer()?;
        for policy in ["fcfs-ordering-policy", "global-strict-fairness-policy", "static-usage-limit-policy"] {
            if self.index(policy).is_none() {
                self.register_default(policy, "flowControl")?;
            }
        }
        self.ensure_parsers()?;
        self.ensure_saturation_detector()?;
        self.ensure_data_layer()?;
        self.validate_profiles()?;
        let detector_ref = self.saturation_detector_ref();
        if detector_ref.is_empty() {
            return Err(ConfigError::at(
                "flowControl.saturationDetector.pluginRef",
                "saturation detector plugin reference is empty",
            ));
        }
        if self.index(&detector_ref).is_none() {
            return Err(ConfigError::value(
                "flowControl.saturationDetector.pluginRef",
                &detector_ref,
                format!("saturation detector references undefined plugin '{detector_ref}'"),
            ));
        }
        let parser_refs: Vec<String> = self.parser_refs();
        for (i, r) in parser_refs.iter().enumerate() {
            if self.index(r).is_none() {
                return Err(ConfigError::value(
                    format!("requestHandler.parsers[{i}].pluginRef"),
                    r,
                    format!("parser references undefined plugin '{r}'"),
                ));
            }
        }
        let (profiles, handler) = self.build_profiles()?;
        self.resolve_handler(handler, &profiles)?;
        let data_sources = self.build_data_layer()?;
        let flow_control = if self.feature_gates.get("flowControl") == Some(&true) {
            let raw = self.raw.flow_control.clone().unwrap_or_default();
            Some(std::sync::Arc::new(crate::flow_control::config::build(&raw, &self.plugins)?))
        } else {
            self.note_flow_control();
            None
        };
        let mut parsers = Vec::new();
        for (i, r) in parser_refs.iter().enumerate() {
            let at = self.index(r).expect("parsers were validated");
            if !self.plugins[at].kind.is_parser() {
                return Err(ConfigError::value(
                    format!("requestHandler.parsers[{i}].pluginRef"),
                    r,
                    format!("the plugin \"{r}\" is not a parser plugin"),
                ));
            }
            parsers.push(at);
        }
        self.check_parsers_claim_completions(&parsers)?;
        let saturation_detector = self.index(&detector_ref).expect("the detector was validated");
        if !self.plugins[saturation_detector].kind.is_saturation_detector() {
            return Err(ConfigError::value(
                "flowControl.saturationDetector.pluginRef",
                &detector_ref,
                format!("plugin '{detector_ref}' is not a fwkfc.SaturationDetector"),
            ));
        }
        self.note_unsubscribed_producers();
        self.create_missing_producers()?;
        self.check_stability()?;
        let producers = self.order_producers()?;
        self.resolve_consumers();
        Ok(RouterConfig {
            api_version: self.raw.api_version.clone().unwrap_or_else(|| API_VERSION.to_owned()),
            plugins: self.plugins,
            profiles,
            handler,
            saturation_detector,
            parsers,
            data_sources,
            producers,
            feature_gates: self.feature_gates,
            flow_control,
            warnings: self.warnings,
            inert: self.inert,
        })
    }

    fn index(&self, name: &str) -> Option<usize> {
        self.plugins.iter().position(|p| p.name == name)
    }

    fn validate_plugins(&self) -> Result<(), ConfigError> {
        for (i, spec) in self.raw.plugins.iter().enumerate() {
            if spec.type_name.is_empty() {
                return Err(ConfigError::at(
                    format!("plugins[{i}].type"),
                    format!("plugin '{}' is missing a type", spec.name),
                ));
            }
            if self.raw.plugins[..i].iter().any(|p| p.name == spec.name) {
                return Err(ConfigError::value(
                    format!("plugins[{i}].name"),
                    &spec.name,
                    format!("duplicate plugin name '{}'", spec.name),
                ));
            }
            if registry::plugin_type(&spec.type_name).is_none() {
                return Err(ConfigError::value(
                    format!("plugins[{i}].type"),
                    &spec.type_name,
                    format!("plugin type '{}' is not registered", spec.type_name),
                ));
            }
        }
        Ok(())
    }

    /// Instantiate `type_name` as upstream's factory would; `path` names the plugin's entry.
    fn instantiate(
        &mut self,
        name: &str,
        type_name: &str,
        params: Option<&Value>,
        path: &str,
    ) -> Result<PluginInstance, ConfigError> {
        let registered = registry::plugin_type(type_name).expect("types were validated");
        if let Support::NotModelled(why) = registered.support {
            return Err(ConfigError::value(
                format!("{path}.type"),
                type_name,
                format!("plugin type `{type_name}` is not modelled yet ({why})"),
            ));
        }
        if registered.deprecated {
            self.warnings
                .push(format!("DEPRECATION warning: plugin is deprecated (plugin {name}, type {type_name})"));
        }
        let built = if type_name == PRECISE_SCORER_TYPE {
            let producers: Vec<&str> = self
                .raw
                .plugins
                .iter()
                .filter(|p| p.type_name == PRECISE_PRODUCER_TYPE)
                .map(|p| p.name.as_str())
                .collect();
            plugins::precise::build_legacy_scorer(name, params, &producers)
        } else {
            plugins::build(type_name, params).expect("every modelled type has a factory")
        }
        .map_err(|e| plugin_error(path, name, type_name, e))?;
        for (field, reason) in built.inert {
            self.inert.push(InertSetting { path: join(&format!("{path}.parameters"), &field), reason });
        }
        self.warnings.extend(built.warnings.into_iter().map(|w| format!("{name}: {w}")));
        Ok(PluginInstance { name: name.to_owned(), type_name: type_name.to_owned(), kind: built.kind })
    }

    /// `registerDefaultPlugin`: instantiate `type_name` with no parameters, named after its
    /// type, and add it to the plugin list; `why` says which default injected it. Upstream
    /// stores instances in a map by name, so a configured plugin that already bears the name
    /// (say a scorer named `max-score-picker`) is replaced by the default, as there.
    fn register_default(&mut self, type_name: &str, why: &str) -> Result<usize, ConfigError> {
        if registry::plugin_type(type_name).is_none() {
            return Err(ConfigError::value(
                why,
                type_name,
                format!("plugin type '{type_name}' not found in registry"),
            ));
        }
        let instance = self.instantiate(type_name, type_name, None, why)?;
        if let Some(at) = self.index(type_name) {
            self.inert.push(InertSetting {
                path: format!("plugins[{at}]"),
                reason: format!(
                    "replaced by the default {type_name} upstream injects under the same name (its instances are kept \
                     in a map by name)"
                ),
            });
            self.plugins[at] = instance;
            return Ok(at);
        }
        self.plugins.push(instance);
        Ok(self.plugins.len() - 1)
    }

    fn ensure_scheduling_layer(&mut self) -> Result<(), ConfigError> {
        let snapshot = self.plugins.len();
        if self.raw.scheduling_profiles.is_empty() {
            let plugins = self.plugins[..snapshot]
                .iter()
                .filter(|p| p.kind.is_filter() || p.kind.is_scorer() || p.kind.is_picker())
                .map(|p| RawProfilePlugin { plugin_ref: p.name.clone(), weight: None })
                .collect();
            self.raw.scheduling_profiles = vec![RawProfile { name: "default".to_owned(), plugins }];
        }
        if self.raw.scheduling_profiles.len() == 1
            && !self.plugins[..snapshot].iter().any(|p| p.kind.is_profile_handler())
        {
            self.register_default("single-profile-handler", "schedulingProfiles")?;
        }
        let picker = match self.plugins[..snapshot].iter().find(|p| p.kind.is_picker()) {
            Some(p) => p.name.clone(),
            None => {
                self.register_default("max-score-picker", "schedulingProfiles")?;
                "max-score-picker".to_owned()
            }
        };
        for i in 0..self.raw.scheduling_profiles.len() {
            let mut has_picker = false;
            for j in 0..self.raw.scheduling_profiles[i].plugins.len() {
                let r = self.raw.scheduling_profiles[i].plugins[j].plugin_ref.clone();
                let Some(at) = self.index(&r) else { continue };
                if self.plugins[at].kind.is_scorer()
                    && self.raw.scheduling_profiles[i].plugins[j].weight.is_none()
                {
                    self.raw.scheduling_profiles[i].plugins[j].weight = Some(1.0);
                }
                has_picker |= self.plugins[at].kind.is_picker();
            }
            if !has_picker {
                self.raw.scheduling_profiles[i]
                    .plugins
                    .push(RawProfilePlugin { plugin_ref: picker.clone(), weight: None });
            }
        }
        Ok(())
    }

    fn parser_refs(&self) -> Vec<String> {
        self.raw
            .request_handler
            .as_ref()
            .map(|h| h.parsers.iter().map(|p| p.plugin_ref.clone()).collect())
            .unwrap_or_default()
    }

    fn ensure_parsers(&mut self) -> Result<(), ConfigError> {
        let handler = self.raw.request_handler.get_or_insert_with(RawRequestHandler::default);
        if handler.parsers.is_empty() {
            handler.parsers = ["openai-parser", "anthropic-parser", "vllmhttp-parser"]
                .iter()
                .map(|p| RawRef { plugin_ref: (*p).to_owned() })
                .collect();
        }
        for (i, r) in self.parser_refs().into_iter().enumerate() {
            if self.index(&r).is_none() {
                self.register_default(&r, &format!("requestHandler.parsers[{i}].pluginRef"))?;
            }
        }
        Ok(())
    }

    fn saturation_detector_ref(&self) -> String {
        self.raw
            .flow_control
            .as_ref()
            .and_then(|f| f.saturation_detector.as_ref())
            .map(|d| d.plugin_ref.clone())
            .unwrap_or_default()
    }

    fn ensure_saturation_detector(&mut self) -> Result<(), ConfigError> {
        let flow = self.raw.flow_control.get_or_insert_with(RawFlowControl::default);
        let detector = flow.saturation_detector.get_or_insert_with(RawRef::default);
        if detector.plugin_ref.is_empty() {
            detector.plugin_ref = "utilization-detector".to_owned();
        }
        if detector.plugin_ref == "utilization-detector" && self.index("utilization-detector").is_none() {
            self.register_default("utilization-detector", "flowControl.saturationDetector")?;
        }
        Ok(())
    }

    fn ensure_data_layer(&mut self) -> Result<(), ConfigError> {
        if let Some(layer) = &self.raw.data_layer
            && (layer.inject_defaults == Some(false)
                || layer.sources.iter().any(|s| s.plugin_ref == "metrics-data-source"))
        {
            return Ok(());
        }
        for type_name in ["metrics-data-source", "core-metrics-extractor"] {
            if self.index(type_name).is_none() {
                self.register_default(type_name, "dataLayer")?;
            }
        }
        self.raw.data_layer.get_or_insert_with(RawDataLayer::default).sources.push(RawSource {
            plugin_ref: "metrics-data-source".to_owned(),
            extractors: vec![RawRef { plugin_ref: "core-metrics-extractor".to_owned() }],
        });
        Ok(())
    }

    fn validate_profiles(&self) -> Result<(), ConfigError> {
        for (i, profile) in self.raw.scheduling_profiles.iter().enumerate() {
            let path = format!("schedulingProfiles[{i}]");
            if profile.name.is_empty() {
                return Err(ConfigError::at(
                    format!("{path}.name"),
                    format!("schedulingProfiles[{i}] is missing a name"),
                ));
            }
            if self.raw.scheduling_profiles[..i].iter().any(|p| p.name == profile.name) {
                return Err(ConfigError::value(
                    format!("{path}.name"),
                    &profile.name,
                    format!("schedulingProfiles[{i}] has duplicate name '{}'", profile.name),
                ));
            }
            for (j, plugin) in profile.plugins.iter().enumerate() {
                if plugin.plugin_ref.is_empty() {
                    return Err(ConfigError::at(
                        format!("{path}.plugins[{j}].pluginRef"),
                        format!("schedulingProfiles[{}].plugins[{j}] is missing a 'pluginRef'", profile.name),
                    ));
                }
                if self.index(&plugin.plugin_ref).is_none() {
                    return Err(ConfigError::value(
                        format!("{path}.plugins[{j}].pluginRef"),
                        &plugin.plugin_ref,
                        format!(
                            "schedulingProfiles[{}] references undefined plugin '{}'",
                            profile.name, plugin.plugin_ref
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    fn build_profiles(&self) -> Result<(Vec<Profile>, usize), ConfigError> {
        let mut profiles = Vec::new();
        for (i, raw) in self.raw.scheduling_profiles.iter().enumerate() {
            let mut profile = Profile {
                name: raw.name.clone(),
                filters: Vec::new(),
                scorers: Vec::new(),
                picker: usize::MAX,
            };
            for (j, entry) in raw.plugins.iter().enumerate() {
                let at = self.index(&entry.plugin_ref).expect("profiles were validated");
                let kind = &self.plugins[at].kind;
                if kind.is_scorer() {
                    profile.scorers.push((at, entry.weight.unwrap_or(1.0)));
                }
                if kind.is_filter() {
                    profile.filters.push(at);
                }
                if kind.is_picker() {
                    if profile.picker != usize::MAX {
                        let old = &self.plugins[profile.picker];
                        let new = &self.plugins[at];
                        return Err(ConfigError::value(
                            format!("schedulingProfiles[{i}].plugins[{j}].pluginRef"),
                            &entry.plugin_ref,
                            format!(
                                "failed to add plugin '{}' to profile '{}': failed to set '{}/{}' as picker, already have a \
                                 registered picker plugin '{}/{}'",
                                entry.plugin_ref, raw.name, new.name, new.type_name, old.name, old.type_name
                            ),
                        ));
                    }
                    profile.picker = at;
                }
            }
            profiles.push(profile);
        }
        let handlers: Vec<usize> =
            (0..self.plugins.len()).filter(|&i| self.plugins[i].kind.is_profile_handler()).collect();
        let handler = match handlers.as_slice() {
            [] => return Err(ConfigError::at("schedulingProfiles", "no profile handler configured")),
            [one] => *one,
            [a, b, ..] => {
                return Err(ConfigError::at(
                    "plugins",
                    format!(
                        "multiple profile handlers found ('{}', '{}'); only one is allowed",
                        self.plugins[*a].name, self.plugins[*b].name
                    ),
                ));
            }
        };
        if profiles.len() > 1 && matches!(self.plugins[handler].kind, PluginKind::SingleProfileHandler) {
            return Err(ConfigError::at(
                "schedulingProfiles",
                "SingleProfileHandler cannot support multiple scheduling profiles",
            ));
        }
        Ok((profiles, handler))
    }

    /// `buildPluginDAG`: the plugin references in parameters (`disagg-profile-handler`'s
    /// deciders) are parsed before any plugin is built, and must name configured plugins.
    fn check_plugin_dependencies(&self) -> Result<(), ConfigError> {
        for (i, spec) in self.raw.plugins.iter().enumerate() {
            if spec.type_name != plugins::disagg::HANDLER_TYPE {
                continue;
            }
            let (handler, _) =
                plugins::disagg::DisaggHandler::parse(spec.parameters.as_ref()).map_err(|e| ConfigError {
                    path: join(&format!("plugins[{i}].parameters"), &e.path),
                    value: e.value,
                    reason: format!(
                        "failed to build plugin dependency graph: failed to parse plugin parameters for {} (type: \
                         {}): {}",
                        spec.name, spec.type_name, e.reason
                    ),
                })?;
            for (stage, name) in ["prefill", "encode"].iter().zip(&handler.decider_names) {
                if !name.is_empty() && !self.raw.plugins.iter().any(|p| p.name == *name) {
                    return Err(ConfigError::value(
                        format!("plugins[{i}].parameters.deciders.{stage}"),
                        name,
                        format!("a plugin has a dependency on the unregistered plugin {name}"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Point a `disagg-profile-handler` at its profiles and deciders (its factory's
    /// `handle.Plugin` lookups: a reference to a plugin that is not a decider is refused).
    fn resolve_handler(&mut self, handler: usize, profiles: &[Profile]) -> Result<(), ConfigError> {
        let PluginKind::DisaggProfileHandler(h) = &self.plugins[handler].kind else { return Ok(()) };
        let mut resolved = (**h).clone();
        resolved.resolve_profiles(profiles);
        for (k, stage) in ["prefill", "encode"].iter().enumerate() {
            let name = &resolved.decider_names[k];
            if name.is_empty() {
                continue;
            }
            let at = self.index(name).expect("dependencies were checked");
            if !self.plugins[at].kind.is_decider() {
                let path = if handler < self.raw.plugins.len() {
                    format!("plugins[{handler}].parameters.deciders.{stage}")
                } else {
                    "plugins".to_owned()
                };
                let h = &self.plugins[handler];
                return Err(ConfigError::value(
                    path,
                    name,
                    format!(
                        "failed to create plugin '{}' (type: {}): plugin {name} does not implement {stage}DeciderPlugin",
                        h.name, h.type_name
                    ),
                ));
            }
            resolved.stages.deciders[k] = Some(at);
        }
        self.plugins[handler].kind = PluginKind::DisaggProfileHandler(Box::new(resolved));
        Ok(())
    }

    fn build_data_layer(&mut self) -> Result<Vec<DataSource>, ConfigError> {
        let Some(layer) = self.raw.data_layer.clone() else { return Ok(Vec::new()) };
        if !layer.cross_replica_syncer_plugin_ref.is_empty() {
            return Err(ConfigError::value(
                "dataLayer.crossReplicaSyncerPluginRef",
                &layer.cross_replica_syncer_plugin_ref,
                "cross-replica syncing is not modelled: one router replica is simulated",
            ));
        }
        if layer.cross_replica_sync_interval.is_some() {
            self.inert.push(InertSetting {
                path: "dataLayer.crossReplicaSyncInterval".to_owned(),
                reason: "one router replica is simulated".to_owned(),
            });
        }
        if let Some(discovery) = &layer.discovery {
            return Err(ConfigError::value(
                "dataLayer.discovery.pluginRef",
                &discovery.plugin_ref,
                "endpoint discovery is not modelled: the endpoints are the scenario's pools",
            ));
        }
        let mut sources = Vec::new();
        for (i, source) in layer.sources.iter().enumerate() {
            let path = format!("dataLayer.sources[{i}]");
            let at = self
                .index(&source.plugin_ref)
                .filter(|&at| self.plugins[at].kind.is_data_source())
                .ok_or_else(|| {
                    ConfigError::value(
                        format!("{path}.pluginRef"),
                        &source.plugin_ref,
                        format!("the plugin {} is not a fwkdl.DataSource", source.plugin_ref),
                    )
                })?;
            let mut extractors = Vec::new();
            for (j, extractor) in source.extractors.iter().enumerate() {
                let e = self.index(&extractor.plugin_ref).ok_or_else(|| {
                    ConfigError::value(
                        format!("{path}.extractors[{j}].pluginRef"),
                        &extractor.plugin_ref,
                        format!("the plugin {} is not registered", extractor.plugin_ref),
                    )
                })?;
                extractors.push(e);
            }
            if matches!(self.plugins[at].kind, PluginKind::EndpointNotificationSource) {
                self.wire_endpoint_extractors(&path, at, &extractors)?;
            }
            sources.push(DataSource { source: at, extractors });
        }
        Ok(sources)
    }

    /// The gate is off: settings other than the detector are ignored, as upstream warns.
    fn note_flow_control(&mut self) {
        let Some(flow) = &self.raw.flow_control else { return };
        let set = [
            ("maxBytes", flow.max_bytes.is_some()),
            ("maxRequests", flow.max_requests.is_some()),
            ("defaultRequestTTL", flow.default_request_ttl.is_some()),
            ("defaultPriorityBand", flow.default_priority_band.is_some()),
            ("defaultNegativePriorityBand", flow.default_negative_priority_band.is_some()),
            ("priorityBands", !flow.priority_bands.is_empty()),
            ("usageLimitPolicyPluginRef", !flow.usage_limit_policy_plugin_ref.is_empty()),
        ];
        let configured: Vec<&str> = set.iter().filter(|(_, s)| *s).map(|(f, _)| *f).collect();
        if !configured.is_empty() {
            self.warnings.push(
                "WARNING: the flowControl config section is set but the flowControl feature gate is disabled; its \
                 settings (other than saturationDetector) are ignored"
                    .to_owned(),
            );
        }
        let reason = "the flowControl feature gate is off, so upstream ignores it";
        for field in configured {
            self.inert.push(InertSetting { path: format!("flowControl.{field}"), reason: reason.to_owned() });
        }
        if flow.enable_eviction {
            self.inert.push(InertSetting {
                path: "flowControl.enableEviction".to_owned(),
                reason: reason.to_owned(),
            });
        }
    }

    /// An `endpoint-notification-source`'s extractors (`datalayer/runtime.go::validateSourceExtractors`):
    /// each must be an endpoint extractor, no type twice; each precise producer among them
    /// subscribes to every endpoint's KV events.
    fn wire_endpoint_extractors(
        &mut self,
        path: &str,
        source: usize,
        extractors: &[usize],
    ) -> Result<(), ConfigError> {
        for (j, &e) in extractors.iter().enumerate() {
            let at = format!("{path}.extractors[{j}].pluginRef");
            let (src, ext) = (&self.plugins[source], &self.plugins[e]);
            if extractors[..j].iter().any(|&d| self.plugins[d].type_name == ext.type_name) {
                return Err(ConfigError::value(
                    at,
                    &ext.name,
                    format!(
                        "duplicate extractor type configured for the same source: source={}/{}, extractor type={}",
                        src.name, src.type_name, ext.type_name
                    ),
                ));
            }
            match &mut self.plugins[e].kind {
                PluginKind::PrecisePrefixProducer(p) => p.inner.wire_endpoint_notifications(),
                PluginKind::PrecisePrefixScorer(s) => s.producer.inner.wire_endpoint_notifications(),
                PluginKind::InFlightLoadProducer(_) => {}
                _ => {
                    let (src, ext) = (&self.plugins[source], &self.plugins[e]);
                    return Err(ConfigError::value(
                        at,
                        &ext.name,
                        format!(
                            "endpoint source {}/{} requires an EndpointExtractor; extractor {}/{} does not implement it",
                            src.name, src.type_name, ext.name, ext.type_name
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// A precise producer neither on a global socket nor an extractor of an
    /// `endpoint-notification-source` subscribes to no engine, as upstream's does: its index
    /// stays empty. Upstream says nothing; we warn.
    fn note_unsubscribed_producers(&mut self) {
        for plugin in &self.plugins {
            let producer = match &plugin.kind {
                PluginKind::PrecisePrefixProducer(p) => &p.inner,
                PluginKind::PrecisePrefixScorer(s) => &s.producer.inner,
                _ => continue,
            };
            if !producer.subscribed() {
                self.warnings.push(format!(
                    "{}: no KV events will reach it (no kvEventsConfig.zmqEndpoint, and it is not an extractor of an \
                     endpoint-notification-source with discoverPods on), so its index stays empty",
                    plugin.name
                ));
            }
        }
    }

    /// Every request blis-actor's clients send is an OpenAI completion (`/v1/completions`), so
    /// a parser list with none claiming it would fail every request; that is refused here.
    fn check_parsers_claim_completions(&self, parsers: &[usize]) -> Result<(), ConfigError> {
        let claims = parsers.iter().any(|&p| match &self.plugins[p].kind {
            PluginKind::Parser(parser) => parser.claims().iter().any(|c| "v1/completions".ends_with(c)),
            _ => false,
        });
        if claims {
            Ok(())
        } else {
            Err(ConfigError::at(
                "requestHandler.parsers",
                "no parser claims /v1/completions, the path blis-actor's clients send to, so upstream would fail \
                 every request; add openai-parser",
            ))
        }
    }

    /// `CreateMissingDataProducers`: for each required key nobody produces, its registered
    /// default producer, with no parameters, until nothing more can be added.
    fn create_missing_producers(&mut self) -> Result<(), ConfigError> {
        loop {
            let produced: Vec<DataKey> = self.plugins.iter().flat_map(|p| p.kind.produces(&p.name)).collect();
            let mut missing: Vec<(DataKey, String)> = Vec::new();
            for plugin in &self.plugins {
                for key in plugin.kind.requires() {
                    if !produced.contains(&key) && !missing.iter().any(|(k, _)| *k == key) {
                        missing.push((key, plugin.name.clone()));
                    }
                }
            }
            if missing.is_empty() {
                return Ok(());
            }
            let mut created = 0;
            for (key, consumer) in missing {
                let default = key.data_type.default_producer();
                if key.producer != default {
                    return Err(ConfigError::value(
                        "plugins",
                        &key.to_string(),
                        format!(
                            "no default producer found for missing data key {key}, consumed by {consumer}"
                        ),
                    ));
                }
                if self.index(default).is_some() {
                    continue;
                }
                self.register_default(default, &format!("plugins (data key {key} consumed by {consumer})"))?;
                created += 1;
            }
            if created == 0 {
                return Ok(());
            }
        }
    }

    fn check_stability(&self) -> Result<(), ConfigError> {
        if self.options.allow_experimental_plugins {
            return Ok(());
        }
        for (i, plugin) in self.plugins.iter().enumerate() {
            let stability = registry::plugin_type(&plugin.type_name).map(|t| t.stability);
            if stability == Some(Stability::Alpha) {
                let path = if i < self.raw.plugins.len() {
                    format!("plugins[{i}].type")
                } else {
                    "plugins".to_owned()
                };
                return Err(ConfigError::value(
                    path,
                    &plugin.type_name,
                    format!(
                        "plugin '{}' (type: '{}') has Alpha stability level, but command line flag \
                         --allow-experimental-plugins is not set (cluster.router.allow_experimental_plugins)",
                        plugin.name, plugin.type_name
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Producers in data-dependency order (a producer after those whose keys it requires or
    /// reads); ties in plugin order.
    fn order_producers(&self) -> Result<Vec<usize>, ConfigError> {
        let producers: Vec<usize> = (0..self.plugins.len())
            .filter(|&i| !self.plugins[i].kind.produces(&self.plugins[i].name).is_empty())
            .collect();
        let depends_on = |a: usize, b: usize| {
            let produced = self.plugins[b].kind.produces(&self.plugins[b].name);
            let kind = &self.plugins[a].kind;
            kind.requires().iter().chain(kind.optional().iter()).any(|k| produced.contains(k))
        };
        let mut order = Vec::new();
        let mut left = producers.clone();
        while !left.is_empty() {
            let Some(pos) = left.iter().position(|&a| !left.iter().any(|&b| b != a && depends_on(a, b)))
            else {
                return Err(ConfigError::at("plugins", "the data producers' dependencies form a cycle"));
            };
            order.push(left.remove(pos));
        }
        Ok(order)
    }

    /// Point every consumer at the plugin producing the key it reads; the P/D decider reads the
    /// default approximate prefix key, and session-affinity attribute sources the session-id
    /// producer writing their key.
    fn resolve_consumers(&mut self) {
        let default_prefix = DataKey::new(plugins::DataType::PrefixCacheMatchInfo, "");
        let prefix_producer =
            self.plugins.iter().position(|p| p.kind.produces(&p.name).contains(&default_prefix));
        let session_producers: Vec<(String, usize)> = (0..self.plugins.len())
            .filter(|&i| matches!(self.plugins[i].kind, PluginKind::SessionIdProducer(_)))
            .map(|i| (plugins::session::SessionIdProducer::key(&self.plugins[i].name).to_string(), i))
            .collect();
        for plugin in &mut self.plugins {
            match &mut plugin.kind {
                PluginKind::PrefixBasedPdDecider(d) => d.producer = prefix_producer,
                PluginKind::SessionAffinity(s) => {
                    s.resolve_sources(|key| session_producers.iter().find(|(k, _)| k == key).map(|&(_, i)| i))
                }
                _ => {}
            }
        }
        let find = |plugins: &[PluginInstance], key: &DataKey| {
            plugins.iter().position(|p| p.kind.produces(&p.name).contains(key))
        };
        for i in 0..self.plugins.len() {
            let keys: Vec<DataKey> = {
                let k = &self.plugins[i].kind;
                k.requires().into_iter().chain(k.optional()).collect()
            };
            let resolved: Vec<Option<usize>> = keys.iter().map(|k| find(&self.plugins, k)).collect();
            let first = |t: plugins::DataType| {
                keys.iter().zip(&resolved).find(|(k, _)| k.data_type == t).and_then(|(_, r)| *r)
            };
            use plugins::DataType::{InFlightLoad, PrefixCacheMatchInfo};
            match &mut self.plugins[i].kind {
                PluginKind::PrefixCacheScorer(s) => s.producer = first(PrefixCacheMatchInfo),
                PluginKind::TokenLoadScorer(s) => s.producer = first(InFlightLoad),
                PluginKind::ActiveRequestScorer(s) => s.producer = first(InFlightLoad),
                PluginKind::NoHitLruScorer(s) => s.producer = first(PrefixCacheMatchInfo),
                PluginKind::UtilizationFilter(f) => f.producer = first(InFlightLoad),
                PluginKind::PrefixCacheAffinityFilter(f) => {
                    f.prefix_producer = first(PrefixCacheMatchInfo);
                    f.in_flight_producer = first(InFlightLoad);
                }
                PluginKind::ConcurrencyDetector(d) => d.producer = first(InFlightLoad),
                PluginKind::InFlightLoadProducer(p) => p.prefix_producer = first(PrefixCacheMatchInfo),
                PluginKind::PrecisePrefixScorer(s) => s.scorer.producer = first(PrefixCacheMatchInfo),
                _ => {}
            }
        }
    }
}

/// A factory's refusal, placed under the plugin's `parameters` and worded as upstream wraps it.
fn plugin_error(path: &str, name: &str, type_name: &str, e: ParamError) -> ConfigError {
    ConfigError {
        path: join(&format!("{path}.parameters"), &e.path),
        value: e.value,
        reason: format!("failed to create plugin '{name}' (type: {type_name}): {}", e.reason),
    }
}
