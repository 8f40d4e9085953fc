//! The ported plugins, one enum over every modelled type, and what each implements.
//!
//! Upstream discovers a plugin's roles by Go interface assertions (Filter, Scorer, Picker,
//! ProfileHandler, DataProducer, SaturationDetector, Parser, DataSource); here each instance is a
//! [`PluginKind`] and the role predicates say the same. Factories decode their parameters as
//! upstream's do (strictly, or ignoring them where upstream's factory ignores its decoder, in
//! which case the parameters are reported inert).

pub mod data_layer;
pub mod disagg;
pub mod filters;
pub mod inflight;
pub mod pickers;
pub mod precise;
pub mod prefix;
pub mod saturation;
pub mod scorers;
pub mod session;
pub mod tokens;

use serde_json::Value;

use crate::params::ParamError;

/// A data attribute's type, as upstream's `DataKey` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum DataType {
    /// The request's prompt as token ids.
    TokenizedPrompt,
    /// Per endpoint: how much of the prompt its prefix index matches.
    PrefixCacheMatchInfo,
    /// Per endpoint: the router's live in-flight counters.
    InFlightLoad,
    /// Per endpoint: the request's uncached prompt tokens there.
    UncachedRequestTokens,
    /// The request's session identifier.
    SessionId,
}

impl DataType {
    /// Upstream's name of the type.
    pub fn as_str(self) -> &'static str {
        match self {
            DataType::TokenizedPrompt => "TokenizedPrompt",
            DataType::PrefixCacheMatchInfo => "PrefixCacheMatchInfo",
            DataType::InFlightLoad => "InFlightLoad",
            DataType::UncachedRequestTokens => "UncachedRequestTokens",
            DataType::SessionId => "SessionIDDataKey",
        }
    }

    /// The registered default producer of the type's default key, if the release has one.
    pub fn default_producer(self) -> &'static str {
        match self {
            DataType::TokenizedPrompt => tokens::TYPE,
            DataType::PrefixCacheMatchInfo => prefix::PRODUCER_TYPE,
            DataType::InFlightLoad | DataType::UncachedRequestTokens => inflight::TYPE,
            DataType::SessionId => session::PRODUCER_TYPE,
        }
    }
}

/// A data key: `<type>/<producer name>`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct DataKey {
    /// The attribute's type.
    pub data_type: DataType,
    /// The producer that writes it.
    pub producer: String,
}

impl DataKey {
    /// The key of `data_type` written by `producer` (the type's default producer when empty).
    pub fn new(data_type: DataType, producer: &str) -> DataKey {
        let producer = if producer.is_empty() { data_type.default_producer() } else { producer };
        DataKey { data_type, producer: producer.to_owned() }
    }
}

impl std::fmt::Display for DataKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.data_type.as_str(), self.producer)
    }
}

/// One plugin instance's behaviour and state.
#[derive(Clone, Debug)]
pub enum PluginKind {
    /// `queue-scorer`.
    QueueScorer,
    /// `kv-cache-utilization-scorer`.
    KvCacheUtilizationScorer,
    /// `running-requests-size-scorer`.
    RunningRequestsSizeScorer,
    /// `load-aware-scorer`.
    LoadAwareScorer(scorers::LoadAware),
    /// `prefix-cache-scorer`.
    PrefixCacheScorer(prefix::Scorer),
    /// `token-load-scorer`.
    TokenLoadScorer(scorers::TokenLoad),
    /// `active-request-scorer`.
    ActiveRequestScorer(scorers::ActiveRequest),
    /// `no-hit-lru-scorer`.
    NoHitLruScorer(scorers::NoHitLru),
    /// `decode-filter`, `prefill-filter`, `encode-filter`, `by-label`.
    ByLabelFilter(filters::ByLabel),
    /// `label-selector-filter`, `by-label-selector`.
    LabelSelectorFilter(filters::LabelSelector),
    /// `utilization-filter`.
    UtilizationFilter(filters::Utilization),
    /// `prefix-cache-affinity-filter`.
    PrefixCacheAffinityFilter(filters::PrefixCacheAffinity),
    /// `utilization-detector` (a saturation detector and a filter).
    UtilizationDetector(saturation::UtilizationDetector),
    /// `concurrency-detector` (a saturation detector and a filter).
    ConcurrencyDetector(saturation::ConcurrencyDetector),
    /// `max-score-picker`, `random-picker`, `weighted-random-picker`.
    Picker(pickers::Picker),
    /// `session-affinity-scorer`, `session-affinity-filter`.
    SessionAffinity(Box<session::SessionAffinity>),
    /// `single-profile-handler`.
    SingleProfileHandler,
    /// `disagg-profile-handler`.
    DisaggProfileHandler(Box<disagg::DisaggHandler>),
    /// `prefix-based-pd-decider`.
    PrefixBasedPdDecider(disagg::PrefixDecider),
    /// `always-disagg-pd-decider`.
    AlwaysDisaggPdDecider,
    /// `session-id-producer`.
    SessionIdProducer(session::SessionIdProducer),
    /// `token-producer` (and its deprecated alias `tokenizer`).
    TokenProducer(tokens::TokenProducer),
    /// `approx-prefix-cache-producer`.
    ApproxPrefixProducer(Box<prefix::Producer>),
    /// `inflight-load-producer`.
    InFlightLoadProducer(inflight::InFlightLoad),
    /// `precise-prefix-cache-producer`.
    PrecisePrefixProducer(Box<precise::Producer>),
    /// The deprecated `precise-prefix-cache-scorer` hosting its own producer (when it defers to
    /// a configured producer it is a [`PluginKind::PrefixCacheScorer`]).
    PrecisePrefixScorer(Box<precise::LegacyScorer>),
    /// `endpoint-notification-source`: tells its extractors of endpoints joining and leaving.
    EndpointNotificationSource,
    /// `metrics-data-source`.
    MetricsDataSource(data_layer::MetricsDataSource),
    /// `core-metrics-extractor`.
    CoreMetricsExtractor,
    /// `openai-parser`, `anthropic-parser`, `vllmhttp-parser`.
    Parser(data_layer::Parser),
    /// `fcfs-ordering-policy`, `edf-ordering-policy`, `slo-deadline-ordering-policy` (used by
    /// flow control when its gate is on).
    OrderingPolicy(crate::flow_control::Ordering),
    /// `global-strict-fairness-policy`, `round-robin-fairness-policy`.
    FairnessPolicy(crate::flow_control::Fairness),
    /// `static-usage-limit-policy`.
    UsageLimitPolicy(crate::flow_control::StaticUsageLimit),
}

/// What a factory made of a plugin's parameters.
pub struct Built {
    /// The instance.
    pub kind: PluginKind,
    /// Settings accepted and ignored, as (path below `parameters`, why), for the Result.
    pub inert: Vec<(String, String)>,
    /// Lines upstream would log (deprecations, clamps).
    pub warnings: Vec<String>,
}

impl Built {
    fn plain(kind: PluginKind) -> Built {
        Built { kind, inert: Vec::new(), warnings: Vec::new() }
    }

    /// An instance whose factory ignores its parameters: any given are inert.
    fn ignoring(kind: PluginKind, params: Option<&Value>) -> Built {
        let inert = match params {
            Some(Value::Object(map)) => map
                .keys()
                .map(|k| (k.clone(), "the release's factory ignores its parameters".to_owned()))
                .collect(),
            Some(Value::Null) | None => Vec::new(),
            Some(_) => vec![(String::new(), "the release's factory ignores its parameters".to_owned())],
        };
        Built { kind, inert, warnings: Vec::new() }
    }
}

/// Build an instance of the modelled type `type_name` from its parameters, as the release's
/// factory does; `None` for a type this build does not model.
pub fn build(type_name: &str, params: Option<&Value>) -> Option<Result<Built, ParamError>> {
    let built = match type_name {
        "queue-scorer" => Ok(Built::ignoring(PluginKind::QueueScorer, params)),
        "kv-cache-utilization-scorer" => Ok(Built::ignoring(PluginKind::KvCacheUtilizationScorer, params)),
        "running-requests-size-scorer" => Ok(Built::ignoring(PluginKind::RunningRequestsSizeScorer, params)),
        "load-aware-scorer" => scorers::LoadAware::build(params),
        "prefix-cache-scorer" => prefix::Scorer::build(params),
        "token-load-scorer" => scorers::TokenLoad::build(params),
        "active-request-scorer" => scorers::ActiveRequest::build(params),
        "no-hit-lru-scorer" => scorers::NoHitLru::build(params),
        "decode-filter" | "prefill-filter" | "encode-filter" => {
            Ok(Built::ignoring(PluginKind::ByLabelFilter(filters::ByLabel::role(type_name)), params))
        }
        "by-label" => filters::ByLabel::build(params),
        "label-selector-filter" | "by-label-selector" => filters::LabelSelector::build(type_name, params),
        "utilization-filter" => filters::Utilization::build(params),
        "prefix-cache-affinity-filter" => filters::PrefixCacheAffinity::build(params),
        "utilization-detector" => saturation::UtilizationDetector::build(params),
        "concurrency-detector" => saturation::ConcurrencyDetector::build(params),
        "max-score-picker" | "random-picker" | "weighted-random-picker" => {
            pickers::Picker::build(type_name, params)
        }
        "single-profile-handler" => Ok(Built::ignoring(PluginKind::SingleProfileHandler, params)),
        "session-affinity-scorer" => session::SessionAffinity::build(session::Role::Scorer, params),
        "session-affinity-filter" => session::SessionAffinity::build(session::Role::Filter, params),
        "session-id-producer" => session::SessionIdProducer::build(params),
        "disagg-profile-handler" => disagg::DisaggHandler::build(params),
        "prefix-based-pd-decider" => disagg::PrefixDecider::build(params),
        "always-disagg-pd-decider" => Ok(Built::ignoring(PluginKind::AlwaysDisaggPdDecider, params)),
        "token-producer" | "tokenizer" => tokens::TokenProducer::build(params),
        "approx-prefix-cache-producer" => prefix::Producer::build(params),
        "inflight-load-producer" => inflight::InFlightLoad::build(params),
        "metrics-data-source" => data_layer::MetricsDataSource::build(params),
        "precise-prefix-cache-producer" => precise::Producer::build(params),
        "endpoint-notification-source" => Ok(Built::ignoring(PluginKind::EndpointNotificationSource, params)),
        "core-metrics-extractor" => data_layer::build_extractor(params),
        "openai-parser" | "anthropic-parser" | "vllmhttp-parser" => {
            Ok(Built::ignoring(PluginKind::Parser(data_layer::Parser::of(type_name)), params))
        }
        "fcfs-ordering-policy" | "edf-ordering-policy" | "slo-deadline-ordering-policy" => {
            let ordering = crate::flow_control::Ordering::of(type_name).expect("an ordering type");
            Ok(Built::ignoring(PluginKind::OrderingPolicy(ordering), params))
        }
        "global-strict-fairness-policy" | "round-robin-fairness-policy" => {
            let fairness = crate::flow_control::Fairness::of(type_name).expect("a fairness type");
            Ok(Built::ignoring(PluginKind::FairnessPolicy(fairness), params))
        }
        "static-usage-limit-policy" => crate::flow_control::StaticUsageLimit::build(params)
            .map(|policy| Built::plain(PluginKind::UsageLimitPolicy(policy))),
        _ => return None,
    };
    Some(built)
}

impl PluginKind {
    /// Whether it runs in a profile's filter slot.
    pub fn is_filter(&self) -> bool {
        matches!(
            self,
            PluginKind::ByLabelFilter(_)
                | PluginKind::LabelSelectorFilter(_)
                | PluginKind::UtilizationFilter(_)
                | PluginKind::PrefixCacheAffinityFilter(_)
                | PluginKind::UtilizationDetector(_)
                | PluginKind::ConcurrencyDetector(_)
        ) || matches!(self, PluginKind::SessionAffinity(s) if s.role == session::Role::Filter)
    }

    /// Whether it runs in a profile's scorer slot.
    pub fn is_scorer(&self) -> bool {
        matches!(
            self,
            PluginKind::QueueScorer
                | PluginKind::KvCacheUtilizationScorer
                | PluginKind::RunningRequestsSizeScorer
                | PluginKind::LoadAwareScorer(_)
                | PluginKind::PrefixCacheScorer(_)
                | PluginKind::TokenLoadScorer(_)
                | PluginKind::ActiveRequestScorer(_)
                | PluginKind::NoHitLruScorer(_)
                | PluginKind::PrecisePrefixScorer(_)
        ) || matches!(self, PluginKind::SessionAffinity(s) if s.role == session::Role::Scorer)
    }

    /// Whether it is a picker.
    pub fn is_picker(&self) -> bool {
        matches!(self, PluginKind::Picker(_))
    }

    /// Whether it is a profile handler.
    pub fn is_profile_handler(&self) -> bool {
        matches!(self, PluginKind::SingleProfileHandler | PluginKind::DisaggProfileHandler(_))
    }

    /// Whether it is a P/D decider.
    pub fn is_decider(&self) -> bool {
        matches!(self, PluginKind::PrefixBasedPdDecider(_) | PluginKind::AlwaysDisaggPdDecider)
    }

    /// Whether it is a saturation detector.
    pub fn is_saturation_detector(&self) -> bool {
        matches!(self, PluginKind::UtilizationDetector(_) | PluginKind::ConcurrencyDetector(_))
    }

    /// Whether it is a request parser.
    pub fn is_parser(&self) -> bool {
        matches!(self, PluginKind::Parser(_))
    }

    /// Whether it is a data source.
    pub fn is_data_source(&self) -> bool {
        matches!(self, PluginKind::MetricsDataSource(_) | PluginKind::EndpointNotificationSource)
    }

    /// The data keys it writes, for an instance named `name`.
    pub fn produces(&self, name: &str) -> Vec<DataKey> {
        match self {
            PluginKind::TokenProducer(_) => vec![DataKey::new(DataType::TokenizedPrompt, name)],
            PluginKind::ApproxPrefixProducer(_)
            | PluginKind::PrecisePrefixProducer(_)
            | PluginKind::PrecisePrefixScorer(_) => vec![DataKey::new(DataType::PrefixCacheMatchInfo, name)],
            PluginKind::InFlightLoadProducer(_) => vec![
                DataKey::new(DataType::InFlightLoad, name),
                DataKey::new(DataType::UncachedRequestTokens, name),
            ],
            PluginKind::SessionIdProducer(_) => vec![session::SessionIdProducer::key(name)],
            _ => Vec::new(),
        }
    }

    /// The data keys it requires (their producers are created when missing).
    pub fn requires(&self) -> Vec<DataKey> {
        let tokens = DataKey::new(DataType::TokenizedPrompt, "");
        match self {
            PluginKind::PrefixCacheScorer(s) => vec![s.key()],
            PluginKind::TokenLoadScorer(s) => s.keys(),
            PluginKind::ActiveRequestScorer(s) => vec![s.key()],
            PluginKind::NoHitLruScorer(s) => vec![s.key()],
            PluginKind::UtilizationFilter(f) => f.keys(),
            PluginKind::PrefixCacheAffinityFilter(f) => f.keys(),
            PluginKind::ConcurrencyDetector(d) => vec![d.key()],
            PluginKind::ApproxPrefixProducer(_)
            | PluginKind::InFlightLoadProducer(_)
            | PluginKind::PrecisePrefixProducer(_) => vec![tokens],
            PluginKind::PrecisePrefixScorer(s) => vec![tokens, s.scorer.key()],
            PluginKind::DisaggProfileHandler(_) => {
                vec![DataKey::new(DataType::PrefixCacheMatchInfo, ""), tokens]
            }
            _ => Vec::new(),
        }
    }

    /// The data keys it reads when present.
    pub fn optional(&self) -> Vec<DataKey> {
        match self {
            PluginKind::InFlightLoadProducer(p) => vec![p.prefix_key()],
            _ => Vec::new(),
        }
    }
}
