//! The data layer and request handling: the metrics source and extractor that scrape each
//! endpoint, and the request parsers.

use serde::Deserialize;
use serde_json::Value;

use super::{Built, PluginKind};
use crate::params::{GoDuration, ParamError, decode};

/// `metrics-data-source`: scrapes each endpoint's Prometheus metrics on its interval.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricsDataSource {
    /// The source's own interval, when set (rounded to whole base ticks at assembly).
    pub interval: Option<GoDuration>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct SourceParams {
    scheme: String,
    path: String,
    port: Option<i64>,
    insecure_skip_verify: bool,
    ca_cert_path: String,
    client_cert_path: String,
    client_key_path: String,
    interval: String,
}

impl Default for SourceParams {
    fn default() -> Self {
        SourceParams {
            scheme: "http".to_owned(),
            path: "/metrics".to_owned(),
            port: None,
            insecure_skip_verify: true,
            ca_cert_path: String::new(),
            client_cert_path: String::new(),
            client_key_path: String::new(),
            interval: String::new(),
        }
    }
}

impl MetricsDataSource {
    pub(super) fn build(params: Option<&Value>) -> Result<Built, ParamError> {
        let p: SourceParams = decode(params)?;
        if p.scheme != "http" && p.scheme != "https" {
            return Err(ParamError::invalid(params, "scheme", format!("unsupported scheme: {}", p.scheme)));
        }
        if let Some(port) = p.port
            && !(1..=65535).contains(&port)
        {
            return Err(ParamError::invalid(
                params,
                "port",
                format!("invalid port {port}: must be between 1 and 65535"),
            ));
        }
        let interval = if p.interval.is_empty() {
            None
        } else {
            Some(GoDuration::parse(&p.interval).map_err(|e| {
                ParamError::invalid(params, "interval", format!("invalid interval \"{}\": {e}", p.interval))
            })?)
        };
        let mut built = Built::plain(PluginKind::MetricsDataSource(MetricsDataSource { interval }));
        let transport = "how the scrape travels (HTTP, TLS, port) does not change what it reads";
        let defaults = SourceParams::default();
        for (field, changed) in [
            ("scheme", p.scheme != defaults.scheme),
            ("path", p.path != defaults.path),
            ("port", p.port.is_some()),
            ("insecureSkipVerify", !p.insecure_skip_verify),
            ("caCertPath", !p.ca_cert_path.is_empty()),
            ("clientCertPath", !p.client_cert_path.is_empty()),
            ("clientKeyPath", !p.client_key_path.is_empty()),
        ] {
            if changed {
                built.inert.push((field.to_owned(), transport.to_owned()));
            }
        }
        Ok(built)
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct ExtractorParams {
    engine_label_key: String,
    default_engine: String,
    engine_configs: Vec<Value>,
}

/// `core-metrics-extractor`: reads vLLM's metric names (the only engine simulated).
pub(super) fn build_extractor(params: Option<&Value>) -> Result<Built, ParamError> {
    let p: ExtractorParams = decode(params)?;
    if !p.default_engine.is_empty() && p.default_engine != "vllm" {
        return Err(ParamError::invalid(
            params,
            "defaultEngine",
            format!("engine `{}` is not simulated: every endpoint is a vLLM instance", p.default_engine),
        ));
    }
    if !p.engine_configs.is_empty() {
        return Err(ParamError::invalid(
            params,
            "engineConfigs",
            "custom engine metric mappings are not modelled yet; the built-in vLLM mapping is used as the release has it",
        ));
    }
    let mut built = Built::plain(PluginKind::CoreMetricsExtractor);
    if !p.engine_label_key.is_empty() {
        built.inert.push(("engineLabelKey".to_owned(), "every endpoint is a vLLM instance".to_owned()));
    }
    Ok(built)
}

/// A request parser and the paths it claims (`handlers/parsers.go`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parser {
    /// `openai-parser`.
    OpenAi,
    /// `anthropic-parser`.
    Anthropic,
    /// `vllmhttp-parser`.
    VllmHttp,
}

impl Parser {
    /// The parser of type `type_name` (one of the three modelled).
    pub fn of(type_name: &str) -> Parser {
        match type_name {
            "openai-parser" => Parser::OpenAi,
            "anthropic-parser" => Parser::Anthropic,
            _ => Parser::VllmHttp,
        }
    }

    /// The path suffixes it claims.
    pub fn claims(self) -> &'static [&'static str] {
        match self {
            Parser::OpenAi => &[
                "chat/completions",
                "completions",
                "embeddings",
                "responses",
                "conversations",
                "chat/completions/render",
                "completions/render",
                "images/generations",
            ],
            Parser::Anthropic => &["messages", "messages/count_tokens"],
            Parser::VllmHttp => &["inference/v1/generate"],
        }
    }
}
