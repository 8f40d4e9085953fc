//! One LLM call's record, a line of `calls.jsonl`, and its fate.

use serde::{Deserialize, Serialize};

/// How a request ended; written once per request, and every latency derives from it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "fate", rename_all = "snake_case")]
pub enum Fate {
    /// Every output token reached the client.
    Completed,
    /// Refused without being served.
    Dropped {
        /// Why, e.g. `exceeds_max_model_len`.
        reason: String,
    },
    /// Still being computed, or its answer still travelling, when the run stopped at its
    /// horizon.
    InFlightAtHorizon,
    /// Waiting for its first step (or travelling to the engine) when the run stopped at its
    /// horizon.
    QueuedAtHorizon,
}

/// One LLM call as the client saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallRecord {
    /// Request id, `<client>-<index>`.
    pub request_id: String,
    /// The client that sent it.
    pub client: String,
    /// When the client sent it, µs of simulated time.
    pub arrival_us: u64,
    /// Prompt tokens.
    pub input_tokens: u32,
    /// Output tokens requested (and generated, if completed).
    pub output_tokens: u32,
    /// The engine instance that served it (empty if it never reached one).
    pub instance: String,
    /// Prompt tokens the engine found in its prefix cache when it first admitted the call.
    pub cached_tokens: u32,
    /// Times the engine preempted it.
    pub preemptions: u32,
    /// How it ended.
    #[serde(flatten)]
    pub fate: Fate,
    /// Per output token, µs: element 0 is the time to first token (arrival → first token at
    /// the client), element k the gap between tokens k−1 and k. Empty unless completed.
    pub token_latency_us: Vec<u64>,
}

impl CallRecord {
    /// Time to first token, µs, if completed.
    pub fn ttft_us(&self) -> Option<u64> {
        self.token_latency_us.first().copied()
    }

    /// Arrival to last token, µs, if completed.
    pub fn e2e_us(&self) -> Option<u64> {
        (!self.token_latency_us.is_empty()).then(|| self.token_latency_us.iter().sum())
    }
}
