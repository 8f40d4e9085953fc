//! Upstream's config-loader tests (`pkg/epp/config/loader/configloader_test.go`, fixtures in
//! `testdata_test.go`) and the metrics data-source factory tests
//! (`datalayer/source/metrics/datasource_test.go`), through `blis_router::load`.
//!
//! Upstream registers fake plugin types for these tests; each is re-expressed with a modelled
//! type of the same role, keeping what the case checks: `test-plugin` → `load-aware-scorer`
//! (`threshold: 10`), `test-scorer` (int `blockSize`) → `token-load-scorer`
//! (`queueThresholdTokens`), `test-picker` → `random-picker`, `test-profile-handler` →
//! `single-profile-handler`, `test-source`/`test-extractor` → `metrics-data-source`/
//! `core-metrics-extractor` under the test's names, `test-alpha-plugin` → `utilization-filter`,
//! `test-order-filter` → `label-selector-filter`. The test gate `test-feature-gate` is
//! re-expressed with the release's other registered gate, `haPopulateNonLeaderDatastore`
//! (default true). The cases that turn the `flowControl` gate on load the flow-control section
//! (`blis_router::flow_control`); `upstream_flow_control.rs` ports the section's own tests.

mod common;

use blis_router::plugins::PluginKind;
use blis_router::{ConfigError, LoadOptions, RouterConfig};
use common::*;
use serde_json::json;

const HEAD: &str = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n";

fn ok(yaml: &str) -> RouterConfig {
    load_yaml(&format!("{HEAD}{yaml}"), LoadOptions::default()).unwrap_or_else(|e| panic!("{e}"))
}

fn err(yaml: &str) -> ConfigError {
    match load_yaml(&format!("{HEAD}{yaml}"), LoadOptions::default()) {
        Ok(_) => panic!("accepted:\n{yaml}"),
        Err(e) => e,
    }
}

fn names(config: &RouterConfig, indexes: &[usize]) -> Vec<String> {
    indexes.iter().map(|&i| config.plugins[i].name.clone()).collect()
}

fn index(config: &RouterConfig, name: &str) -> usize {
    config.plugins.iter().position(|p| p.name == name).unwrap_or_else(|| panic!("no plugin {name}"))
}

fn has(config: &RouterConfig, name: &str) -> bool {
    config.plugins.iter().any(|p| p.name == name)
}

fn gates(config: &RouterConfig) -> Vec<(String, bool)> {
    config.feature_gates.iter().map(|(k, v)| (k.clone(), *v)).collect()
}

const FULL: &str = "\
plugins:
- name: test1
  type: load-aware-scorer
  parameters:
    threshold: 10
- name: profileHandler
  type: single-profile-handler
- type: token-load-scorer
  parameters:
    queueThresholdTokens: 32
- name: testPicker
  type: random-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: test1
  - pluginRef: token-load-scorer
    weight: 50
  - pluginRef: testPicker
featureGates:
- haPopulateNonLeaderDatastore
flowControl:
  saturationDetector:
    pluginRef: utilization-detector
";

/// upstream: configloader_test.go::TestLoadRawConfiguration "Success - Full Configuration"
/// (the unnamed plugin is named after its type; weights as given, 1 where absent; gates as
/// listed over their defaults; nothing deprecated) and "Success - using deprecated Groupname"
/// (the apiVersion is kept; a DEPRECATION line). The fixture's `flowControl` gate is refused
/// here: see `flow_control_gate_cases_are_refused`.
#[test]
fn load_raw_full_configuration() {
    let config = ok(FULL);
    assert!(has(&config, "token-load-scorer"));
    let profile = &config.profiles[0];
    assert_eq!(profile.name, "default");
    assert_eq!(
        profile.scorers.iter().map(|&(i, w)| (config.plugins[i].name.clone(), w)).collect::<Vec<_>>(),
        [("test1".to_owned(), 1.0), ("token-load-scorer".to_owned(), 50.0)]
    );
    assert_eq!(config.plugins[profile.picker].name, "testPicker");
    assert_eq!(config.plugins[config.handler].name, "profileHandler");
    assert_eq!(config.plugins[config.saturation_detector].name, "utilization-detector");
    assert_eq!(
        gates(&config),
        [("flowControl".to_owned(), false), ("haPopulateNonLeaderDatastore".to_owned(), true)]
    );
    assert!(!config.warnings.iter().any(|w| w.contains("deprecated")), "{:?}", config.warnings);
    let deprecated = load_yaml(
        &format!("apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n{FULL}"),
        LoadOptions::default(),
    )
    .unwrap();
    assert_eq!(deprecated.api_version, "inference.networking.x-k8s.io/v1alpha1");
    assert!(deprecated.warnings.iter().any(|w| w.contains("deprecated")), "{:?}", deprecated.warnings);
}

/// upstream: configloader_test.go::TestLoadRawConfiguration "Success - No Profiles" (a gate set
/// false; the default profile is then built from the plugins).
#[test]
fn load_raw_no_profiles() {
    let config = ok("plugins:\n- name: test1\n  type: load-aware-scorer\n  parameters: {threshold: 10}\n\
                     featureGates:\n- haPopulateNonLeaderDatastore=false\n");
    assert_eq!(
        gates(&config),
        [("flowControl".to_owned(), false), ("haPopulateNonLeaderDatastore".to_owned(), false)]
    );
    assert_eq!(config.profiles.len(), 1);
    assert_eq!(config.profiles[0].name, "default");
    assert_eq!(names(&config, &[config.profiles[0].scorers[0].0]), ["test1"]);
}

/// upstream: configloader_test.go::TestLoadRawConfiguration "Success - Default configuration"
/// (no document, a null one, or an empty mapping: the built-in default).
#[test]
fn load_raw_default_configuration() {
    for document in [None, Some(json!(null)), Some(json!({}))] {
        let config = blis_router::load(document.as_ref(), LoadOptions::default()).unwrap();
        let first: Vec<&str> = config.plugins[..5].iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            first,
            [
                "queue-scorer",
                "kv-cache-utilization-scorer",
                "prefix-cache-scorer",
                "metrics-data-source",
                "core-metrics-extractor"
            ]
        );
        assert!(config.plugins[..5].iter().all(|p| p.name == p.type_name));
        let profile = &config.profiles[0];
        assert_eq!(profile.name, "default");
        assert_eq!(
            profile.scorers.iter().map(|&(i, w)| (config.plugins[i].name.as_str(), w)).collect::<Vec<_>>(),
            [("queue-scorer", 2.0), ("kv-cache-utilization-scorer", 2.0), ("prefix-cache-scorer", 3.0)]
        );
        assert_eq!(config.data_sources.len(), 1);
        assert_eq!(names(&config, &[config.data_sources[0].source]), ["metrics-data-source"]);
        assert_eq!(names(&config, &config.data_sources[0].extractors), ["core-metrics-extractor"]);
        assert_eq!(
            gates(&config),
            [("flowControl".to_owned(), false), ("haPopulateNonLeaderDatastore".to_owned(), true)]
        );
    }
}

/// upstream: configloader_test.go::TestLoadRawConfiguration and ::TestInstantiateAndConfigure
/// "Success - Deprecated Top-level SaturationDetector" (copied into flowControl; the detector
/// instance is `utilization-detector`; a DEPRECATION line) and "Success - Deprecated Top-level
/// Parser" (copied into requestHandler.parsers: one parser, openai-parser). The detector
/// fixture's `flowControl` gate is dropped (it is refused here).
#[test]
fn deprecated_top_level_saturation_detector_and_parser() {
    let config = ok("plugins:\n- {name: maxScore, type: max-score-picker}\n\
                     schedulingProfiles:\n- name: default\n  plugins: [{pluginRef: maxScore}]\n\
                     saturationDetector:\n  pluginRef: utilization-detector\n");
    assert_eq!(config.plugins[config.saturation_detector].name, "utilization-detector");
    assert!(config.warnings.iter().any(|w| w.contains("top-level saturationDetector is deprecated")));
    let config = ok("plugins:\n- {name: maxScore, type: max-score-picker}\n- {type: openai-parser}\n\
                     schedulingProfiles:\n- name: default\n  plugins: [{pluginRef: maxScore}]\n\
                     parser:\n  pluginRef: openai-parser\n");
    assert_eq!(names(&config, &config.parsers), ["openai-parser"]);
    assert!(config.warnings.iter().any(|w| w.contains("top-level parser is deprecated")));
}

/// upstream: configloader_test.go::TestLoadRawConfiguration "Error - Invalid YAML" (a plugin
/// written as a string), "Error - Unknown Feature Gate" and "Error - Bad Feature Gate".
#[test]
fn load_raw_errors() {
    let e = err("plugins:\n- testing 1 2 3\n");
    assert_eq!(e.path, "plugins[0]");
    assert!(e.reason.starts_with("failed to decode configuration JSON/YAML: invalid type: string"), "{e}");
    let e = err("featureGates:\n- unknown-gate\n");
    assert_eq!((e.path.as_str(), e.value.as_deref()), ("featureGates[0]", Some("\"unknown-gate\"")));
    assert_eq!(
        e.reason,
        "feature gate validation failed: feature gate 'unknown-gate' is unknown or unregistered"
    );
    let e = err("featureGates:\n- flowControl=qwerty\n");
    assert_eq!(e.path, "featureGates[0]");
    assert_eq!(
        e.reason,
        "feature gate validation failed: qwerty is not a valid value for the feature gate flowControl (error: \
         strconv.ParseBool: parsing \"qwerty\": invalid syntax)"
    );
}

/// upstream: configloader_test.go::TestInstantiateAndConfigure "Success - Complex Scheduler"
/// (named plugins exist, the profile keeps its two entries and weight 50, a saturation
/// detector is defaulted; the fixture's gates are dropped: flowControl is refused here).
#[test]
fn complex_scheduler() {
    let config = ok("\
plugins:
- {name: testScorer, type: token-load-scorer, parameters: {queueThresholdTokens: 32}}
- {name: maxScorePicker, type: max-score-picker}
- {name: profileHandler, type: single-profile-handler}
- {name: testSource, type: metrics-data-source}
- {name: testExtractor, type: core-metrics-extractor}
schedulingProfiles:
- name: default
  plugins:
  - {pluginRef: testScorer, weight: 50}
  - {pluginRef: maxScorePicker}
dataLayer:
  sources:
  - pluginRef: testSource
    extractors: [{pluginRef: testExtractor}]
");
    for name in ["testScorer", "maxScorePicker", "profileHandler"] {
        assert!(has(&config, name), "{name}");
    }
    let profile = &config.profiles[0];
    assert_eq!((profile.filters.len(), profile.scorers.len()), (0, 1));
    assert_eq!(profile.scorers[0], (index(&config, "testScorer"), 50.0));
    assert_eq!(profile.picker, index(&config, "maxScorePicker"));
    assert_eq!(config.plugins[config.saturation_detector].type_name, "utilization-detector");
}

/// upstream: configloader_test.go::TestInstantiateAndConfigure "Success - Default Scorer Weight"
/// (a picker is appended; weight 1.0), "Success - Default Profile Handler Injection" and
/// "Success - Picker Before Scorer" (order kept, the scorer's weight defaulted).
#[test]
fn default_weight_handler_and_picker_before_scorer() {
    let config = ok("plugins:\n- {name: profileHandler, type: single-profile-handler}\n\
                     - {name: testScorer, type: token-load-scorer, parameters: {queueThresholdTokens: 32}}\n\
                     schedulingProfiles:\n- name: default\n  plugins: [{pluginRef: testScorer}]\n");
    assert_eq!(config.profiles[0].scorers, [(index(&config, "testScorer"), 1.0)]);
    assert_eq!(config.plugins[config.profiles[0].picker].name, "max-score-picker");
    let config = ok("plugins:\n- {name: maxScore, type: max-score-picker}\n\
                     schedulingProfiles:\n- name: default\n  plugins: [{pluginRef: maxScore}]\n");
    assert_eq!(config.plugins[config.handler].type_name, "single-profile-handler");
    assert_eq!(config.plugins[config.profiles[0].picker].name, "maxScore");
    let config = ok(
        "plugins:\n- {type: single-profile-handler}\n- {type: random-picker}\n- {type: token-load-scorer}\n\
                     schedulingProfiles:\n- name: default\n  plugins: [{pluginRef: random-picker}, {pluginRef: token-load-scorer}]\n",
    );
    assert_eq!(config.plugins[config.profiles[0].picker].name, "random-picker");
    assert_eq!(config.profiles[0].scorers, [(index(&config, "token-load-scorer"), 1.0)]);
}

/// upstream: configloader_test.go::TestInstantiateAndConfigure "Success - Flow Control Config"
/// (maxBytes 1024, TTL 1m, the default policies injected and used by the default band),
/// "Success - Complex Flow Control Config" (band 100 with its own named fcfs and global-strict
/// instances), "Error (FlowControl) - Missing Policy Plugin" and "Error (FlowControl) - Wrong
/// Plugin Type", and ::TestFlowControlConfigIgnoredWarning "settings honored when the gate is on"
/// (no warning).
#[test]
fn flow_control_gate_cases() {
    let base = "plugins:\n- {name: maxScore, type: max-score-picker}\n\
                schedulingProfiles:\n- name: default\n  plugins: [{pluginRef: maxScore}]\nfeatureGates:\n- flowControl\n";
    let config = ok(&format!("{base}flowControl:\n  maxBytes: \"1024\"\n  defaultRequestTTL: 1m\n"));
    let flow = config.flow_control.as_ref().expect("the gate is on");
    assert_eq!((flow.max_bytes, flow.default_request_ttl_us), (1024, 60_000_000));
    assert_eq!(config.plugins[flow.default_band.ordering_plugin].name, "fcfs-ordering-policy");
    assert_eq!(config.plugins[flow.default_band.fairness_plugin].name, "global-strict-fairness-policy");
    assert!(!config.warnings.iter().any(|w| w.contains("feature gate is disabled")), "{:?}", config.warnings);
    let config = ok("plugins:\n- {name: maxScore, type: max-score-picker}\n\
                     - {name: customFCFS, type: fcfs-ordering-policy}\n- {name: customFairness, type: global-strict-fairness-policy}\n\
                     schedulingProfiles:\n- name: default\n  plugins: [{pluginRef: maxScore}]\nfeatureGates:\n- flowControl\n\
                     flowControl:\n  priorityBands:\n  - {priority: 100, orderingPolicyRef: customFCFS, fairnessPolicyRef: customFairness}\n");
    let band = &config.flow_control.as_ref().unwrap().bands[&100];
    assert_eq!(config.plugins[band.ordering_plugin].name, "customFCFS");
    assert_eq!(config.plugins[band.ordering_plugin].type_name, "fcfs-ordering-policy");
    assert_eq!(config.plugins[band.fairness_plugin].name, "customFairness");
    assert_eq!(config.plugins[band.fairness_plugin].type_name, "global-strict-fairness-policy");
    let e = err(&format!(
        "{base}flowControl:\n  priorityBands:\n  - {{priority: 100, orderingPolicyRef: non-existent-policy}}\n"
    ));
    assert_eq!(
        (e.path.as_str(), e.value.as_deref()),
        ("flowControl.priorityBands[0].orderingPolicyRef", Some("\"non-existent-policy\""))
    );
    assert_eq!(
        e.reason,
        "failed to load flow control config: failed to create registry config: plugin \"non-existent-policy\" not found"
    );
    let e = err(&format!(
        "{base}flowControl:\n  priorityBands:\n  - {{priority: 100, orderingPolicyRef: maxScore}}\n"
    ));
    assert_eq!(e.path, "flowControl.priorityBands[0].orderingPolicyRef");
    assert_eq!(
        e.reason,
        "failed to load flow control config: failed to create registry config: plugin \"maxScore\" does not implement \
         flowcontrol.OrderingPolicy (actual type: max-score-picker)"
    );
}

/// upstream: configloader_test.go::TestInstantiateAndConfigure "Ignored - Flow Control Config
/// Present but FeatureGate Disabled" and ::TestFlowControlConfigIgnoredWarning (the warning
/// for settings under an explicit opt-out or the disabled default; none for an opt-out with no
/// section or with only a saturation detector). The flow-control policies are injected
/// whatever the gate.
#[test]
fn flow_control_config_ignored_warning() {
    let base = "plugins:\n- {name: maxScore, type: max-score-picker}\n\
                schedulingProfiles:\n- name: default\n  plugins: [{pluginRef: maxScore}]\n";
    let warned = |config: &RouterConfig| {
        config.warnings.iter().any(|w| w.contains("flowControl feature gate is disabled"))
    };
    let explicit =
        ok(&format!("{base}featureGates: [\"flowControl=false\"]\nflowControl:\n  maxBytes: \"1024\"\n"));
    assert!(warned(&explicit));
    assert!(explicit.inert.iter().any(|s| s.path == "flowControl.maxBytes"));
    assert!(warned(&ok(&format!("{base}flowControl:\n  maxBytes: \"1024\"\n"))));
    assert!(!warned(&ok(&format!("{base}featureGates: [\"flowControl=false\"]\n"))));
    let detector_only = ok(&format!(
        "{base}featureGates: [\"flowControl=false\"]\nsaturationDetector:\n  pluginRef: utilization-detector\n"
    ));
    assert!(!warned(&detector_only));
    for policy in ["fcfs-ordering-policy", "global-strict-fairness-policy", "static-usage-limit-policy"] {
        assert!(has(&explicit, policy), "{policy}");
    }
}

/// upstream: configloader_test.go::TestInstantiateAndConfigure "Success - Parser Config",
/// "Success - Config without parser and default parsers are injected", "Success - Parser
/// Config With Name" and "Success - Multiple Parsers Config".
#[test]
fn parsers() {
    let base = "schedulingProfiles:\n- name: default\n  plugins: [{pluginRef: maxScore}]\n";
    let config = ok(&format!(
        "plugins:\n- {{name: maxScore, type: max-score-picker}}\n- {{type: openai-parser}}\n{base}\
         requestHandler:\n  parsers: [{{pluginRef: openai-parser}}]\n"
    ));
    assert_eq!(names(&config, &config.parsers), ["openai-parser"]);
    assert_eq!(config.plugins[config.parsers[0]].type_name, "openai-parser");
    let config = ok(&format!("plugins:\n- {{name: maxScore, type: max-score-picker}}\n{base}"));
    assert_eq!(names(&config, &config.parsers), ["openai-parser", "anthropic-parser", "vllmhttp-parser"]);
    let config = ok(&format!(
        "plugins:\n- {{name: maxScore, type: max-score-picker}}\n- {{name: openaiParser, type: openai-parser}}\n{base}\
         requestHandler:\n  parsers: [{{pluginRef: openaiParser}}]\n"
    ));
    assert_eq!(names(&config, &config.parsers), ["openaiParser"]);
    let config = ok(&format!(
        "plugins:\n- {{name: maxScore, type: max-score-picker}}\n- {{type: openai-parser}}\n\
         - {{name: secondParser, type: anthropic-parser}}\n{base}\
         requestHandler:\n  parsers: [{{pluginRef: openai-parser}}, {{pluginRef: secondParser}}]\n"
    ));
    assert_eq!(names(&config, &config.parsers), ["openai-parser", "secondParser"]);
}

/// upstream: configloader_test.go::TestInstantiateAndConfigure "Success (DataLayer) - Enabled
/// by default with no feature gates", "… - Empty dataLayer section injects defaults
/// (additive)", "… - injectDefaults: false suppresses injection" and "… - Explicit
/// non-metrics source gets defaults injected too" (the user's source is named testSource; the
/// default one is added beside it).
#[test]
fn data_layer_defaults() {
    let base = "plugins:\n- {name: maxScore, type: max-score-picker}\n";
    let profile = "schedulingProfiles:\n- name: default\n  plugins: [{pluginRef: maxScore}]\n";
    for extra in ["", "dataLayer: {}\n"] {
        let config = ok(&format!("{base}{profile}{extra}"));
        assert_eq!(config.data_sources.len(), 1);
        assert_eq!(names(&config, &[config.data_sources[0].source]), ["metrics-data-source"]);
        assert_eq!(names(&config, &config.data_sources[0].extractors), ["core-metrics-extractor"]);
    }
    let opted_out = load_yaml(
        &format!(
            "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n{base}{profile}\
             dataLayer:\n  injectDefaults: false\n"
        ),
        LoadOptions::default(),
    )
    .unwrap();
    assert!(opted_out.data_sources.is_empty());
    assert!(!has(&opted_out, "metrics-data-source") && !has(&opted_out, "core-metrics-extractor"));
    let explicit = ok(&format!(
        "{base}- {{name: testSource, type: metrics-data-source}}\n- {{name: testExtractor, type: core-metrics-extractor}}\n\
         {profile}dataLayer:\n  sources:\n  - pluginRef: testSource\n    extractors: [{{pluginRef: testExtractor}}]\n"
    ));
    let sources: Vec<String> =
        explicit.data_sources.iter().map(|s| explicit.plugins[s.source].name.clone()).collect();
    assert_eq!(sources, ["testSource", "metrics-data-source"]);
}

/// upstream: configloader_test.go::TestInstantiateAndConfigure, the "Error (Instantiation)",
/// "Error (Deep Validation)", "Error (Scheduling)", "Error (DataLayer)" and "Error (Parser)"
/// cases, each with its path, value and upstream's message (upstream asserts only that an
/// error occurs).
#[test]
fn instantiate_and_configure_errors() {
    let handler = "- {name: profileHandler, type: single-profile-handler}\n";
    let cases: Vec<(&str, String, &str, Option<&str>, &str)> = vec![
        (
            "Missing Type Field",
            "plugins:\n- parameters: {a: 1234}\n".into(),
            "plugins[0].type",
            None,
            "plugin '' is missing a type",
        ),
        (
            "Unknown Plugin Type",
            format!("plugins:\n- {{name: testx, type: unknown-plugin-type}}\n{handler}"),
            "plugins[0].type",
            Some("\"unknown-plugin-type\""),
            "plugin type 'unknown-plugin-type' is not registered",
        ),
        (
            "Duplicate Plugin Name",
            format!(
                "plugins:\n- {{name: test1, type: load-aware-scorer, parameters: {{threshold: 10}}}}\n\
                 - {{name: test1, type: load-aware-scorer, parameters: {{threshold: 20}}}}\n{handler}\
                 schedulingProfiles:\n- name: default\n  plugins: [{{pluginRef: test1}}]\n"
            ),
            "plugins[1].name",
            Some("\"test1\""),
            "duplicate plugin name 'test1'",
        ),
        (
            "Missing Profile Name",
            format!(
                "plugins:\n- {{name: test1, type: load-aware-scorer}}\n{handler}schedulingProfiles:\n- plugins: [{{pluginRef: test1}}]\n"
            ),
            "schedulingProfiles[0].name",
            None,
            "schedulingProfiles[0] is missing a name",
        ),
        (
            "Missing PluginRef in Profile",
            format!("plugins:\n{handler}schedulingProfiles:\n- name: default\n  plugins: [{{weight: 10}}]\n"),
            "schedulingProfiles[0].plugins[0].pluginRef",
            None,
            "schedulingProfiles[default].plugins[0] is missing a 'pluginRef'",
        ),
        (
            "Profile References Undefined Plugin",
            format!("plugins:\n{handler}schedulingProfiles:\n- name: default\n  plugins: [{{pluginRef: non-existent-plugin}}]\n"),
            "schedulingProfiles[0].plugins[0].pluginRef",
            Some("\"non-existent-plugin\""),
            "schedulingProfiles[default] references undefined plugin 'non-existent-plugin'",
        ),
        (
            "Duplicate Profile Name",
            format!(
                "plugins:\n- {{name: test1, type: load-aware-scorer}}\n- {{name: test2, type: load-aware-scorer}}\n{handler}\
                 schedulingProfiles:\n- name: default\n  plugins: [{{pluginRef: test1}}]\n\
                 - name: default\n  plugins: [{{pluginRef: test2}}]\n"
            ),
            "schedulingProfiles[1].name",
            Some("\"default\""),
            "schedulingProfiles[1] has duplicate name 'default'",
        ),
        (
            "Two Pickers in One Profile",
            format!(
                "plugins:\n{handler}- {{name: maxScore, type: max-score-picker}}\n- {{name: random, type: random-picker}}\n\
                 schedulingProfiles:\n- name: default\n  plugins: [{{pluginRef: maxScore}}, {{pluginRef: random}}]\n"
            ),
            "schedulingProfiles[0].plugins[1].pluginRef",
            Some("\"random\""),
            "failed to add plugin 'random' to profile 'default': failed to set 'random/random-picker' as picker, already \
             have a registered picker plugin 'maxScore/max-score-picker'",
        ),
        (
            "Multiple Profile Handlers",
            format!(
                "plugins:\n{handler}- {{name: secondProfileHandler, type: single-profile-handler}}\n\
                 - {{name: maxScore, type: max-score-picker}}\n\
                 schedulingProfiles:\n- name: default\n  plugins: [{{pluginRef: maxScore}}]\n"
            ),
            "plugins",
            None,
            "multiple profile handlers found ('profileHandler', 'secondProfileHandler'); only one is allowed",
        ),
        (
            "Missing Profile Handler",
            "plugins:\n- {name: maxScore, type: max-score-picker}\nschedulingProfiles:\n\
             - name: default\n  plugins: [{pluginRef: maxScore}]\n- name: prof2\n  plugins: [{pluginRef: maxScore}]\n"
                .into(),
            "schedulingProfiles",
            None,
            "no profile handler configured",
        ),
        (
            "Multi-Profile with Single Handler",
            format!(
                "plugins:\n{handler}- {{name: maxScore, type: max-score-picker}}\nschedulingProfiles:\n\
                 - name: default\n  plugins: [{{pluginRef: maxScore}}]\n- name: prof2\n  plugins: [{{pluginRef: maxScore}}]\n"
            ),
            "schedulingProfiles",
            None,
            "SingleProfileHandler cannot support multiple scheduling profiles",
        ),
        (
            "Bad Source Reference",
            "plugins:\n- {name: test1, type: metrics-data-source}\ndataLayer:\n  sources:\n  - pluginRef: test-one\n".into(),
            "dataLayer.sources[0].pluginRef",
            Some("\"test-one\""),
            "the plugin test-one is not a fwkdl.DataSource",
        ),
        (
            "Parser - Wrong Plugin Type",
            "plugins:\n- {name: maxScore, type: max-score-picker}\nrequestHandler:\n  parsers: [{pluginRef: maxScore}]\n".into(),
            "requestHandler.parsers[0].pluginRef",
            Some("\"maxScore\""),
            "the plugin \"maxScore\" is not a parser plugin",
        ),
        (
            "Parser - Wrong Parser Name",
            "plugins:\n- {name: maxScore, type: max-score-picker}\nrequestHandler:\n  parsers: [{pluginRef: wrongParser}]\n"
                .into(),
            "requestHandler.parsers[0].pluginRef",
            Some("\"wrongParser\""),
            "plugin type 'wrongParser' not found in registry",
        ),
    ];
    for (name, yaml, path, value, reason) in cases {
        let e = err(&yaml);
        assert_eq!((e.path.as_str(), e.value.as_deref(), e.reason.as_str()), (path, value, reason), "{name}");
    }
}

/// upstream: configloader_test.go::TestInstantiateAndConfigure "Error (Instantiation) - Invalid
/// JSON Parameters" (a string for an int parameter) and "Error (DataLayer) - Bad Extractor
/// Reference" (an extractor written as a bare string): both decode errors at their path.
#[test]
fn decode_errors_at_their_path() {
    let e = err("plugins:\n- {name: profileHandler, type: single-profile-handler}\n\
                 - {name: testScorer, type: token-load-scorer, parameters: {queueThresholdTokens: asdf}}\n\
                 schedulingProfiles:\n- name: default\n  plugins: [{pluginRef: testScorer, weight: 50}]\n");
    assert_eq!(
        (e.path.as_str(), e.value.as_deref()),
        ("plugins[1].parameters.queueThresholdTokens", Some("\"asdf\""))
    );
    assert!(
        e.reason.starts_with(
            "failed to create plugin 'testScorer' (type: token-load-scorer): failed to unmarshal token load scorer config: json:"
        ),
        "{e}"
    );
    let e = err("plugins:\n- {name: test-source, type: metrics-data-source}\n\
                 dataLayer:\n  sources:\n  - pluginRef: test-source\n    extractors: [test-one]\n");
    assert_eq!(e.path, "dataLayer.sources[0].extractors[0]");
    assert!(
        e.reason.starts_with("failed to decode configuration JSON/YAML: invalid type: string \"test-one\""),
        "{e}"
    );
}

/// upstream: configloader_test.go::TestFilterExecutionOrderFromYAML (the profile's entries keep
/// the YAML's order: filters A, B, C, then scorers X (w10), Y (w20), then the picker).
#[test]
fn filter_execution_order_from_yaml() {
    let config = ok("\
plugins:
- {name: filter-A, type: label-selector-filter}
- {name: filter-B, type: label-selector-filter}
- {name: filter-C, type: label-selector-filter}
- {name: scorer-X, type: queue-scorer}
- {name: scorer-Y, type: kv-cache-utilization-scorer}
- {name: profileHandler, type: single-profile-handler}
- {name: maxScorePicker, type: max-score-picker}
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: filter-A
  - pluginRef: filter-B
  - pluginRef: filter-C
  - {pluginRef: scorer-X, weight: 10}
  - {pluginRef: scorer-Y, weight: 20}
  - pluginRef: maxScorePicker
");
    let profile = &config.profiles[0];
    assert_eq!(names(&config, &profile.filters), ["filter-A", "filter-B", "filter-C"]);
    assert_eq!(
        profile.scorers.iter().map(|&(i, w)| (config.plugins[i].name.as_str(), w)).collect::<Vec<_>>(),
        [("scorer-X", 10.0), ("scorer-Y", 20.0)]
    );
    assert_eq!(config.plugins[profile.picker].name, "maxScorePicker");
}

/// upstream: configloader_test.go::TestAllowExperimentalPluginsFlag with utilization-filter
/// (Alpha) as the experimental type: refused without the flag, loaded with it.
#[test]
fn allow_experimental_plugins_flag() {
    let yaml = format!(
        "{HEAD}plugins:\n- name: alpha-inst\n  type: utilization-filter\n  parameters:\n    conditions: [{{metric: waiting-queue, maxValue: 4}}]\n\
         - {{name: ph, type: single-profile-handler}}\n- {{name: sat, type: utilization-detector}}\n\
         schedulingProfiles:\n- name: default\n  plugins: [{{pluginRef: ph}}]\n\
         flowControl:\n  saturationDetector: {{pluginRef: sat}}\n"
    );
    let e = load_yaml(&yaml, LoadOptions::default()).unwrap_err();
    assert_eq!((e.path.as_str(), e.value.as_deref()), ("plugins[0].type", Some("\"utilization-filter\"")));
    assert!(
        e.reason.starts_with(
            "plugin 'alpha-inst' (type: 'utilization-filter') has Alpha stability level, but command line flag \
             --allow-experimental-plugins is not set"
        ),
        "{e}"
    );
    let config = load_yaml(&yaml, LoadOptions { allow_experimental_plugins: true }).unwrap();
    assert_eq!(config.plugins[config.saturation_detector].name, "sat");
    assert!(matches!(config.plugins[index(&config, "alpha-inst")].kind, PluginKind::UtilizationFilter(_)));
}

fn metrics_source(params: serde_json::Value) -> Result<RouterConfig, ConfigError> {
    load_json(json!({"apiVersion": "llm-d.ai/v1alpha1", "kind": "EndpointPickerConfig",
        "plugins": [{"type": "metrics-data-source", "parameters": params}, {"type": "queue-scorer"}]}))
}

/// upstream: datasource_test.go::TestMetricsDataSourceFactory_PortOverride (7080 and none
/// accepted; 0, −1, 65536 refused with upstream's text; `prt` is an unknown field) and
/// ::TestMetricsDataSourceFactory_TLS "https" accepted. The client-cert and CA-file cases read
/// files upstream; the simulation never opens a connection, so TLS paths are inert here.
#[test]
fn metrics_data_source_factory() {
    metrics_source(json!({"port": 7080})).unwrap();
    metrics_source(json!({})).unwrap();
    metrics_source(json!({"scheme": "https"})).unwrap();
    for port in [0, -1, 65536] {
        let e = metrics_source(json!({"port": port})).unwrap_err();
        assert_eq!(
            (e.path.as_str(), e.value.as_deref()),
            ("plugins[0].parameters.port", Some(port.to_string().as_str()))
        );
        assert_eq!(
            e.reason,
            format!(
                "failed to create plugin 'metrics-data-source' (type: metrics-data-source): invalid port {port}: must be \
                 between 1 and 65535"
            )
        );
    }
    let e = metrics_source(json!({"prt": 7080})).unwrap_err();
    assert_eq!(e.path, "plugins[0].parameters.prt");
    assert!(e.reason.ends_with("json: unknown field \"prt\""), "{e}");
    let e = metrics_source(json!({"scheme": "ftp"})).unwrap_err();
    assert!(e.reason.ends_with("unsupported scheme: ftp"), "{e}");
    let e = metrics_source(json!({"interval": "5"})).unwrap_err();
    assert!(e.reason.ends_with("invalid interval \"5\": time: missing unit in duration \"5\""), "{e}");
}

/// upstream: configloader_test.go::TestValidateSaturationDetector ("Valid PluginRef", "Invalid
/// PluginRef"; "Empty PluginRef" cannot reach validation through the loader, because
/// ::TestEnsureSaturationDetector's defaulting turns an empty ref into `utilization-detector`
/// first) and the loader's type check on the referenced plugin.
#[test]
fn saturation_detector_references() {
    let config = ok("plugins:\n- {name: valid-plugin, type: utilization-detector}\n\
                     flowControl:\n  saturationDetector: {pluginRef: valid-plugin}\n");
    assert_eq!(config.plugins[config.saturation_detector].name, "valid-plugin");
    let config =
        ok("plugins:\n- {type: queue-scorer}\nflowControl:\n  saturationDetector: {pluginRef: \"\"}\n");
    assert_eq!(config.plugins[config.saturation_detector].name, "utilization-detector");
    let e = err("plugins:\n- {name: other-plugin, type: utilization-detector}\n\
                 flowControl:\n  saturationDetector: {pluginRef: valid-plugin}\n");
    assert_eq!(
        (e.path.as_str(), e.value.as_deref(), e.reason.as_str()),
        (
            "flowControl.saturationDetector.pluginRef",
            Some("\"valid-plugin\""),
            "saturation detector references undefined plugin 'valid-plugin'"
        )
    );
    let e = err(
        "plugins:\n- {name: q, type: queue-scorer}\nflowControl:\n  saturationDetector: {pluginRef: q}\n",
    );
    assert_eq!(e.reason, "plugin 'q' is not a fwkfc.SaturationDetector");
}
