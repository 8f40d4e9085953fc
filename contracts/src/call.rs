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
    /// Not answered within its timeout; the client aborted it (the engine freed its blocks).
    TimedOut,
    /// Never sent: a node it depends on failed, or was unfinished when the run stopped.
    NotStarted,
}

/// One LLM call as the client saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallRecord {
    /// The replication it belongs to (`calls.jsonl` holds replication 0).
    pub replication: u32,
    /// The call's name: its request's id for a request of one LLM call, else `<request>/<node>`.
    pub request_id: String,
    /// The request it belongs to.
    pub request: String,
    /// Its node in the request.
    pub node: String,
    /// The nodes it waited for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parents: Vec<String>,
    /// The client that sent it.
    pub client: String,
    /// When the client sent it (or, if never sent, when its request arrived), µs of simulated
    /// time.
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
    /// When the client stopped waiting for it (its answer arrived, or its timeout fired), µs
    /// of simulated time; absent if it was still outstanding at the end or never sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settled_us: Option<u64>,
    /// Per output token, µs: element 0 is the time to first token (arrival → first token at
    /// the client), element k the gap between tokens k−1 and k. Empty unless completed.
    pub token_latency_us: Vec<u64>,
    /// For the request's last call to finish: the request's end to end time (its arrival to
    /// its last node's end), µs; absent on other calls and on requests that did not complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_e2e_us: Option<u64>,
    /// For a call served disaggregated (prefill on one instance, decode on another, the KV
    /// cache moved between them): the prefill side and the transfer; absent otherwise. The
    /// decode instance is [`CallRecord::instance`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disaggregated: Option<Disaggregated>,
}

/// The prefill side of a disaggregated call, and the KV transfer from it to the decode side.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Disaggregated {
    /// The instance that ran the prefill leg (its one output token is discarded). The call's
    /// `cached_tokens` are this instance's, as llm-d's sidecar reports them.
    pub prefill_instance: String,
    /// KV bytes the decode instance read from the prefill instance (over all its GPUs); 0 when
    /// the read had not started or the decode instance had every block.
    pub kv_bytes: u64,
    /// The read's time on the fabric, µs: from the decode worker starting it to its last byte
    /// arriving; absent when no read finished for the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer_us: Option<u64>,
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
