//! The workload section of a scenario: who sends what, when.

use serde::{Deserialize, Serialize};

use crate::error::FieldError;
use crate::scenario::check_name;

/// All traffic of a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// The clients; each generates its own requests.
    pub clients: Vec<ClientSpec>,
}

/// One open-loop client.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientSpec {
    /// The client's name; its requests are named `<client>-<index>`.
    pub name: String,
    /// How many requests it sends.
    pub requests: u64,
    /// When it sends them.
    pub arrival: Arrival,
    /// Prompt length of each request, in tokens.
    pub input_tokens: LengthDist,
    /// Tokens each request generates (the engine stops at exactly this many).
    pub output_tokens: LengthDist,
    /// A system prompt shared by groups of requests, placed before the `input_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_prefix: Option<SharedPrefix>,
    /// The engine scheduling priority of its requests (lower runs first under the `priority`
    /// policy; ignored under `fcfs`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub priority: i64,
}

fn is_zero(value: &i64) -> bool {
    *value == 0
}

/// System prompts shared by groups of requests, written `{groups: 4, tokens: 512}`: each
/// request draws one of `groups` prompts of `tokens` tokens uniformly and puts it before its own
/// `input_tokens`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SharedPrefix {
    /// How many distinct system prompts.
    pub groups: u32,
    /// Tokens in each.
    pub tokens: u32,
}

/// Arrival processes, written `{process: poisson, rate_per_s: 20}`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, tag = "process", rename_all = "kebab-case")]
pub enum Arrival {
    /// Exponential gaps at a mean rate; the first request arrives after the first gap.
    Poisson {
        /// Mean requests per second.
        rate_per_s: f64,
    },
}

/// Distributions of a token count, written `{dist: constant, value: 256}` or
/// `{dist: uniform, min: 128, max: 2048}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, tag = "dist", rename_all = "kebab-case")]
pub enum LengthDist {
    /// Always this many.
    Constant {
        /// The count.
        value: u32,
    },
    /// Uniform on the integers `min..=max`.
    Uniform {
        /// Smallest value.
        min: u32,
        /// Largest value.
        max: u32,
    },
}

impl LengthDist {
    /// The largest value it can take.
    pub fn max(self) -> u32 {
        match self {
            LengthDist::Constant { value } => value,
            LengthDist::Uniform { max, .. } => max,
        }
    }

    fn validate(self, path: &str) -> Result<(), FieldError> {
        match self {
            LengthDist::Constant { value: 0 } => {
                Err(FieldError::new(format!("{path}.value"), 0, "must be at least 1 token"))
            }
            LengthDist::Uniform { min: 0, .. } => {
                Err(FieldError::new(format!("{path}.min"), 0, "must be at least 1 token"))
            }
            LengthDist::Uniform { min, max } if min > max => {
                Err(FieldError::new(format!("{path}.max"), max, format!("must not be below min ({min})")))
            }
            _ => Ok(()),
        }
    }
}

impl Workload {
    /// Refuse empty or duplicate client names, zero request counts, non-positive rates and
    /// impossible lengths.
    pub fn validate(&self) -> Result<(), FieldError> {
        if self.clients.is_empty() {
            return Err(FieldError::new("workload.clients", "[]", "at least one client is needed"));
        }
        for (i, client) in self.clients.iter().enumerate() {
            let path = format!("workload.clients[{i}]");
            check_name(&client.name, &format!("{path}.name"))?;
            if self.clients[..i].iter().any(|c| c.name == client.name) {
                return Err(FieldError::new(
                    format!("{path}.name"),
                    &client.name,
                    "another client has this name",
                ));
            }
            if client.requests == 0 {
                return Err(FieldError::new(format!("{path}.requests"), 0, "must be at least 1"));
            }
            match client.arrival {
                Arrival::Poisson { rate_per_s } if !(rate_per_s.is_finite() && rate_per_s > 0.0) => {
                    return Err(FieldError::new(
                        format!("{path}.arrival.rate_per_s"),
                        rate_per_s,
                        "must be a positive number of requests per second",
                    ));
                }
                Arrival::Poisson { .. } => {}
            }
            client.input_tokens.validate(&format!("{path}.input_tokens"))?;
            client.output_tokens.validate(&format!("{path}.output_tokens"))?;
            if let Some(prefix) = client.shared_prefix {
                if prefix.groups == 0 {
                    return Err(FieldError::new(
                        format!("{path}.shared_prefix.groups"),
                        0,
                        "must be at least 1",
                    ));
                }
                if prefix.tokens == 0 {
                    return Err(FieldError::new(
                        format!("{path}.shared_prefix.tokens"),
                        0,
                        "must be at least 1 token",
                    ));
                }
            }
        }
        Ok(())
    }
}
