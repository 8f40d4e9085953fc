//! `BASELINE.toml`: the server to replay against and what it is, for the `calls.jsonl` header.
//!
//! ```toml
//! url = "http://127.0.0.1:8000"        # the server's base URL (plain HTTP)
//! model = "Llama-3.1-8B"                # the catalog name of its model (for the header)
//! served_model = "meta-llama/Llama-3.1-8B"  # the name requests carry (default: model)
//! chip = "H100-SXM"                     # the catalog name of its accelerator
//! request_timeout_s = 600               # a call not finished this long after its send times out
//!
//! [serving]                             # as the server was started (vllm serve flags)
//! engine = "vllm"
//! engine_version = "0.15.1"
//! replicas = 1
//! tensor_parallel_size = 1
//! max_num_seqs = 256
//! max_num_batched_tokens = 8192
//! max_model_len = 4096
//! block_size = 16
//! enable_prefix_caching = true
//! enable_chunked_prefill = true
//! gpu_memory_utilization = 0.9
//! scheduling_policy = "fcfs"
//! ```

use blis_contracts::{FieldError, ServingSettings, bounds, number};
use serde::Deserialize;

/// The longest request timeout, seconds: a day.
pub const MAX_TIMEOUT_S: f64 = 86_400.0;

/// A baseline's configuration.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BaselineConfig {
    /// The server's base URL, e.g. `http://127.0.0.1:8000` (the API is under `/v1`).
    pub url: String,
    /// The model's catalog name, for the header.
    pub model: String,
    /// The model name requests carry (default: `model`).
    #[serde(default)]
    pub served_model: Option<String>,
    /// The accelerator's catalog name, for the header.
    pub chip: String,
    /// Seconds after its send a call is given up as timed out.
    pub request_timeout_s: f64,
    /// How the server was started.
    pub serving: ServingSettings,
}

impl BaselineConfig {
    /// Read `text` (TOML); `source` names the file in refusals, which name the field.
    pub fn parse(source: &str, text: &str) -> Result<BaselineConfig, FieldError> {
        let deserializer = toml::Deserializer::parse(text)
            .map_err(|e| FieldError::at(source, format!("not TOML: {}", e.message())))?;
        let config: BaselineConfig = serde_path_to_error::deserialize(deserializer).map_err(|e| {
            let path = e.path().to_string();
            let field = if path == "." { source.to_owned() } else { format!("{source}.{path}") };
            FieldError::at(field, e.inner().message().to_owned())
        })?;
        config.validate().map_err(|e| e.within(source))?;
        Ok(config)
    }

    /// The name requests carry.
    pub fn served_model(&self) -> &str {
        self.served_model.as_deref().unwrap_or(&self.model)
    }

    fn validate(&self) -> Result<(), FieldError> {
        let rest = self.url.strip_prefix("http://").ok_or_else(|| {
            FieldError::new(
                "url",
                &self.url,
                "must start with http:// (this client speaks plain HTTP; put a TLS proxy in front for https)",
            )
        })?;
        if rest.trim_end_matches('/').is_empty() {
            return Err(FieldError::new("url", &self.url, "names no host"));
        }
        let timeout = self.request_timeout_s;
        if !(timeout > 0.0 && timeout <= MAX_TIMEOUT_S) {
            return Err(FieldError::new(
                "request_timeout_s",
                number(timeout),
                format!("must be more than 0 and at most {MAX_TIMEOUT_S} s (a day)"),
            ));
        }
        let s = &self.serving;
        for (field, value) in [
            ("replicas", s.replicas),
            ("tensor_parallel_size", s.tensor_parallel_size),
            ("max_num_seqs", s.max_num_seqs),
            ("max_num_batched_tokens", s.max_num_batched_tokens),
            ("max_model_len", s.max_model_len),
            ("block_size", s.block_size),
        ] {
            if value == 0 {
                return Err(FieldError::new(format!("serving.{field}"), 0, "must be at least 1"));
            }
        }
        if s.replicas > bounds::MAX_INSTANCES {
            return Err(FieldError::new(
                "serving.replicas",
                s.replicas,
                format!("at most {} instances", bounds::MAX_INSTANCES),
            ));
        }
        if u64::from(s.max_model_len) > bounds::MAX_CALL_TOKENS {
            return Err(FieldError::new(
                "serving.max_model_len",
                s.max_model_len,
                format!("at most {} tokens", bounds::MAX_CALL_TOKENS),
            ));
        }
        let share = s.gpu_memory_utilization;
        if !(share > 0.0 && share <= 1.0) {
            return Err(FieldError::new(
                "serving.gpu_memory_utilization",
                number(share),
                "must be in (0, 1]",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) const CONFIG: &str = r#"
url = "http://127.0.0.1:8000"
model = "Llama-3.1-8B"
chip = "H100-SXM"
request_timeout_s = 600

[serving]
engine = "vllm"
engine_version = "0.15.1"
replicas = 1
tensor_parallel_size = 1
max_num_seqs = 256
max_num_batched_tokens = 8192
max_model_len = 4096
block_size = 16
enable_prefix_caching = true
enable_chunked_prefill = true
gpu_memory_utilization = 0.9
scheduling_policy = "fcfs"
"#;

    #[test]
    fn a_config_reads_and_bad_fields_are_refused_by_path() {
        let config = BaselineConfig::parse("b.toml", CONFIG).unwrap();
        assert_eq!((config.served_model(), config.serving.max_model_len), ("Llama-3.1-8B", 4096));
        let refused =
            |from: &str, to: &str| BaselineConfig::parse("b.toml", &CONFIG.replace(from, to)).unwrap_err();
        let e = refused("max_num_seqs = 256", "max_num_seqs = 0");
        assert_eq!(e.path, "b.toml.serving.max_num_seqs");
        let e = refused("max_num_seqs = 256", "max_num_seqs = 256\nmax_num_seq = 3");
        assert!(e.path.starts_with("b.toml.serving") && e.cause.contains("unknown field"), "{e}");
        let e = refused("http://", "https://");
        assert_eq!(e.path, "b.toml.url");
        let e = refused("request_timeout_s = 600", "request_timeout_s = -1");
        assert_eq!(e.path, "b.toml.request_timeout_s");
        let e = refused("chip = \"H100-SXM\"\n", "");
        assert!(e.cause.contains("chip"), "{e}");
        let e = refused("gpu_memory_utilization = 0.9", "gpu_memory_utilization = 1.5");
        assert_eq!(e.path, "b.toml.serving.gpu_memory_utilization");
    }
}
