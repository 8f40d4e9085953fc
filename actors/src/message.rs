//! The messages of a simulated cluster and their class table.
//!
//! Messages are per request, never per token: a request travels client → router → engine, and
//! its completion (with the exact time of every token) or its rejection travels back the same
//! way. A client that gives up on a call sends an abort the same way as the request.

use std::sync::Arc;

use blis_contracts::{Disaggregated, Endpoint};
use blis_engines::vllm::connector::KvTransferParams;
use blis_engines::vllm::{EngineRequest, KeysAhead};
use blis_kernel::{ActorId, Message, MessageClass};
use blis_router::Scrape;
use blis_router::approx_prefix::PromptDigests;
use blis_router::precise_prefix::KvEventBatch;
use serde::{Deserialize, Serialize};

/// Every message kind of the cluster.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ClusterMessage {
    /// A new LLM call, from a client towards an engine.
    Request(Box<CallRequest>),
    /// A finished call, from its engine back towards its client.
    Completion(Box<CallCompletion>),
    /// A call an engine refused, back towards its client.
    Rejection(Box<CallRejection>),
    /// A call its client gave up on (a timeout), towards the engine holding it.
    Abort(CallAbort),
    /// A call's first output token, from its engine to the router (sent only when the router
    /// asked for it: llm-d releases in-flight state on the first response chunk).
    FirstToken(CallAbort),
    /// A metrics scrape, from the router to an engine.
    Scrape,
    /// An engine's metrics, answering a scrape.
    Metrics(Box<Scrape>),
    /// The KV events one engine step published, from the engine to the router (sent only when
    /// the router's config reads them: llm-d's precise prefix cache).
    KvEvents(Box<KvEventBatch>),
    /// A client will send nothing more (so the router may stop scraping).
    ClientDone,
    /// A KV transfer its sender's request finished moving, from the fabric.
    TransferDone(TransferDone),
    /// A KV transfer to carry, from an engine host to the fabric.
    TransferStart(Box<TransferStart>),
    /// A KV transfer its sender no longer needs, to the fabric.
    TransferCancel(TransferDone),
    /// NIXL's notification, from a decode instance to the prefill instance it read from: the
    /// read of the prefill instance's blocks for one of its requests is done (or will never
    /// happen), so it may free them.
    KvNotify(KvNotify),
}

impl ClusterMessage {
    /// The classes of what an engine sends back and a client's end: with open-loop clients and
    /// a router that sends to engines only on requests, aborts and its own timers, their
    /// delivery leads to nothing sent to an engine (so engines may run in lanes).
    pub(crate) const QUIET_CLASSES: [MessageClass; 6] = [
        MessageClass(0),
        MessageClass(1),
        MessageClass(2),
        MessageClass(4),
        MessageClass(5),
        MessageClass(6),
    ];
}

impl Message for ClusterMessage {
    /// The class table: which message an actor sees first among those delivered at the same
    /// time. Answers before new work, so an actor settles what finished before it takes on more
    /// (a client or router frees its state first; nothing is decided on stale counts); metrics
    /// before the requests routed on them, and so are KV events (after the metrics, keeping the
    /// older kinds' relative order).
    fn class(&self) -> MessageClass {
        match self {
            ClusterMessage::Completion(_) => MessageClass(0),
            ClusterMessage::Rejection(_) => MessageClass(1),
            ClusterMessage::FirstToken(_) => MessageClass(2),
            ClusterMessage::Abort(_) => MessageClass(3),
            ClusterMessage::Metrics(_) => MessageClass(4),
            ClusterMessage::KvEvents(_) => MessageClass(5),
            ClusterMessage::ClientDone => MessageClass(6),
            ClusterMessage::Scrape => MessageClass(7),
            ClusterMessage::Request(_) => MessageClass(8),
            ClusterMessage::TransferDone(_) => MessageClass(9),
            ClusterMessage::TransferCancel(_) => MessageClass(10),
            ClusterMessage::TransferStart(_) => MessageClass(11),
            ClusterMessage::KvNotify(_) => MessageClass(12),
        }
    }

    fn label(&self) -> &'static str {
        match self {
            ClusterMessage::Completion(_) => "completion",
            ClusterMessage::Rejection(_) => "rejection",
            ClusterMessage::Abort(_) => "abort",
            ClusterMessage::Request(_) => "request",
            ClusterMessage::FirstToken(_) => "first-token",
            ClusterMessage::Scrape => "scrape",
            ClusterMessage::Metrics(_) => "metrics",
            ClusterMessage::KvEvents(_) => "kv-events",
            ClusterMessage::ClientDone => "client-done",
            ClusterMessage::TransferDone(_) => "transfer-done",
            ClusterMessage::TransferCancel(_) => "transfer-cancel",
            ClusterMessage::TransferStart(_) => "transfer-start",
            ClusterMessage::KvNotify(_) => "kv-notify",
        }
    }
}

/// A call on its way to an engine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallRequest {
    /// Where the answer goes.
    pub client: ActorId,
    /// The request as the engine receives it (its `arrival_us` is when the client sent it).
    pub request: EngineRequest,
    /// The model it names.
    pub model: Arc<str>,
    /// Whether the engine reports its first token to the router.
    pub report_first_token: bool,
    /// Its `x-llm-d-inference-fairness-id` header, when its client sets one (always encoded: the
    /// message log's bincode cannot skip fields).
    pub fairness_id: Option<Arc<str>>,
    /// Its `x-llm-d-slo-ttft-ms` header, when its client sets one.
    pub slo_ttft_ms: Option<u64>,
    /// Its part in prefill/decode disaggregation, if any.
    pub pd: Option<PdLeg>,
    /// Its blocks' keys, made as its ids were drawn (a vLLM instance of that block size copies
    /// them instead of hashing); never logged, since an instance makes the same keys without.
    #[serde(skip)]
    pub keys_ahead: Option<KeysAhead>,
    /// Its prompt's block digests, made as its ids were drawn (llm-d's approximate prefix
    /// producer chains them instead of hashing the ids); never logged, for the same reason.
    #[serde(skip)]
    pub digests_ahead: Option<PromptDigests>,
}

/// A request's part in prefill/decode disaggregation (llm-d's decode sidecar, NIXL).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum PdLeg {
    /// From the router to a decode instance's sidecar: the `x-prefiller-host-port` header, the
    /// prefill instance the router picked.
    Prefiller {
        /// Its engine host.
        engine: ActorId,
        /// Its name.
        name: Arc<str>,
    },
    /// The sidecar's prefill leg, to the prefill instance (one output token,
    /// `do_remote_decode`): answered to the sidecar, not the router.
    PrefillLeg {
        /// The decode instance's host, whose sidecar sent it.
        sidecar: ActorId,
    },
    /// The sidecar's decode leg, inside the decode instance (never sent): the original request
    /// with the `kv_transfer_params` the prefill instance returned.
    DecodeLeg(Box<KvTransferParams>),
}

/// A call an engine finished.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallCompletion {
    /// The request's key.
    pub key: u64,
    /// Where the answer goes.
    pub client: ActorId,
    /// The engine instance that served it.
    pub instance: Arc<str>,
    /// When the engine produced each output token, µs.
    pub token_times_us: Vec<u64>,
    /// How many times it was preempted.
    pub num_preemptions: u32,
    /// Prompt tokens found in the prefix cache at its first admission.
    pub cached_tokens: u32,
    /// A prefill leg's answer: the `kv_transfer_params` the prefill instance returned.
    pub kv_transfer: Option<Box<KvTransferParams>>,
    /// A disaggregated call's prefill side and KV transfer, for its record.
    pub disaggregated: Option<Box<Disaggregated>>,
}

/// NIXL's notification that a read of a prefill instance's blocks is done.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvNotify {
    /// The prefill instance's request whose blocks were read.
    pub remote_request_key: u64,
}

/// A KV transfer for the fabric to carry (DESIGN.md §5.1's Transfer, in bytes already).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransferStart {
    /// The sender's own id for it (unique among its transfers in progress).
    pub id: u64,
    /// Where the bytes are.
    pub from: Endpoint,
    /// Where they go.
    pub to: Endpoint,
    /// How many, in all (a multi-GPU end splits them over its GPUs).
    pub bytes: u64,
}

/// A KV transfer, by its sender's id: finished (from the fabric) or cancelled (to it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransferDone {
    /// The sender's id for it.
    pub id: u64,
}

/// A call its client gave up on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallAbort {
    /// The request's key.
    pub key: u64,
    /// The client that gave up.
    pub client: ActorId,
}

/// A call an engine refused.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallRejection {
    /// The request's key.
    pub key: u64,
    /// Where the answer goes.
    pub client: ActorId,
    /// The engine instance that refused it.
    pub instance: Arc<str>,
    /// Why, e.g. `exceeds_max_model_len`.
    pub reason: String,
}

impl ClusterMessage {
    /// The key of the call a message concerns.
    pub fn key(&self) -> u64 {
        match self {
            ClusterMessage::Request(m) => m.request.key,
            ClusterMessage::Completion(m) => m.key,
            ClusterMessage::Rejection(m) => m.key,
            ClusterMessage::Abort(m) | ClusterMessage::FirstToken(m) => m.key,
            ClusterMessage::Scrape
            | ClusterMessage::Metrics(_)
            | ClusterMessage::KvEvents(_)
            | ClusterMessage::ClientDone
            | ClusterMessage::TransferDone(_)
            | ClusterMessage::TransferCancel(_)
            | ClusterMessage::TransferStart(_)
            | ClusterMessage::KvNotify(_) => 0,
        }
    }

    /// The client a message concerns.
    pub fn client(&self) -> ActorId {
        match self {
            ClusterMessage::Request(m) => m.client,
            ClusterMessage::Completion(m) => m.client,
            ClusterMessage::Rejection(m) => m.client,
            ClusterMessage::Abort(m) | ClusterMessage::FirstToken(m) => m.client,
            ClusterMessage::Scrape
            | ClusterMessage::Metrics(_)
            | ClusterMessage::KvEvents(_)
            | ClusterMessage::ClientDone
            | ClusterMessage::TransferDone(_)
            | ClusterMessage::TransferCancel(_)
            | ClusterMessage::TransferStart(_)
            | ClusterMessage::KvNotify(_) => ActorId(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_class_table_orders_answers_before_new_work_and_is_one_to_one() {
        let request = ClusterMessage::Request(Box::new(CallRequest {
            client: ActorId(0),
            request: EngineRequest {
                key: 0,
                name: Arc::from("c-0"),
                priority: 0,
                prompt_token_ids: Arc::from(vec![1u32]),
                output_token_ids: Arc::from(vec![1u32]),
                arrival_us: 0,
            },
            model: Arc::from("m"),
            report_first_token: false,
            fairness_id: None,
            slo_ttft_ms: None,
            pd: None,
            keys_ahead: None,
            digests_ahead: None,
        }));
        let completion = ClusterMessage::Completion(Box::new(CallCompletion {
            key: 0,
            client: ActorId(0),
            instance: Arc::from("e"),
            token_times_us: vec![],
            num_preemptions: 0,
            cached_tokens: 0,
            kv_transfer: None,
            disaggregated: None,
        }));
        let rejection = ClusterMessage::Rejection(Box::new(CallRejection {
            key: 0,
            client: ActorId(0),
            instance: Arc::from("e"),
            reason: "x".to_owned(),
        }));
        let abort = ClusterMessage::Abort(CallAbort { key: 0, client: ActorId(0) });
        let first = ClusterMessage::FirstToken(CallAbort { key: 0, client: ActorId(0) });
        let metrics = ClusterMessage::Metrics(Box::default());
        let kv_events = ClusterMessage::KvEvents(Box::default());
        // The expected table, written out. The match is exhaustive: a new variant does not
        // compile until it is given its place here. An abort comes before new work, so an
        // engine frees what was given up before it admits more; a first token, fresh metrics and
        // KV events reach the router before the requests it routes at the same instant.
        let expected = |m: &ClusterMessage| match m {
            ClusterMessage::Completion(_) => 0,
            ClusterMessage::Rejection(_) => 1,
            ClusterMessage::FirstToken(_) => 2,
            ClusterMessage::Abort(_) => 3,
            ClusterMessage::Metrics(_) => 4,
            ClusterMessage::KvEvents(_) => 5,
            ClusterMessage::ClientDone => 6,
            ClusterMessage::Scrape => 7,
            ClusterMessage::Request(_) => 8,
            ClusterMessage::TransferDone(_) => 9,
            ClusterMessage::TransferCancel(_) => 10,
            ClusterMessage::TransferStart(_) => 11,
            ClusterMessage::KvNotify(_) => 12,
        };
        let all = [
            &completion,
            &rejection,
            &first,
            &abort,
            &metrics,
            &kv_events,
            &ClusterMessage::ClientDone,
            &ClusterMessage::Scrape,
            &request,
            &ClusterMessage::TransferDone(TransferDone { id: 0 }),
            &ClusterMessage::TransferCancel(TransferDone { id: 0 }),
            &ClusterMessage::TransferStart(Box::new(TransferStart {
                id: 0,
                from: Endpoint::Host { node: 0 },
                to: Endpoint::Gpus { first: 0, count: 1 },
                bytes: 1,
            })),
            &ClusterMessage::KvNotify(KvNotify { remote_request_key: 0 }),
        ];
        for message in all {
            assert_eq!(message.class().0, expected(message));
        }
        let mut classes: Vec<u16> = all.iter().map(|m| m.class().0).collect();
        classes.dedup();
        assert_eq!(classes.len(), 13, "two kinds share a class");
    }
}
