//! How a request leaves the flow controller, and what a client sees when it does not leave for
//! scheduling (`flowcontrol/types/outcomes.go`, `types/errors.go`,
//! `requestcontrol/admission.go::translateFlowControlOutcome`).

/// A queued request's final state (`QueueOutcome`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum QueueOutcome {
    /// Sent on to scheduling.
    Dispatched,
    /// Refused at enqueue: a global or band capacity limit.
    RejectedCapacity,
    /// Refused at enqueue at capacity while the last dispatch cycle saw no endpoints.
    RejectedNoEndpoints,
    /// Refused before queueing for another reason.
    RejectedOther,
    /// Its TTL ran out while it waited.
    EvictedTtl,
    /// The client went away while it waited.
    EvictedContextCancelled,
    /// Removed from its queue for another reason (shutdown).
    EvictedOther,
}

/// Why an outcome other than dispatch happened: upstream's sentinel errors the message is built
/// from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// `ErrQueueAtCapacity`.
    QueueAtCapacity,
    /// `ErrNoEndpoints`.
    NoEndpoints,
    /// `ErrTTLExpired`.
    TtlExpired,
    /// `ErrContextCancelled` (wrapping Go's `context canceled`).
    ContextCancelled,
    /// `ErrFlowControllerNotRunning`.
    NotRunning,
    /// Anything else, with its text.
    Other(&'static str),
}

impl Cause {
    fn text(self) -> &'static str {
        match self {
            Cause::QueueAtCapacity => "queue at capacity",
            Cause::NoEndpoints => "no endpoints available",
            Cause::TtlExpired => "request TTL expired",
            Cause::ContextCancelled => "request context cancelled: context canceled",
            Cause::NotRunning => "flow controller is not running",
            Cause::Other(text) => text,
        }
    }
}

/// The error text upstream's flow controller returns with `outcome` for `cause`: a rejection
/// wraps `request rejected pre-queue`, an eviction `request evicted from queue`.
pub fn error_text(outcome: QueueOutcome, cause: Cause) -> String {
    let wrapper = match outcome {
        QueueOutcome::EvictedTtl | QueueOutcome::EvictedContextCancelled | QueueOutcome::EvictedOther => {
            "request evicted from queue"
        }
        _ => "request rejected pre-queue",
    };
    format!("{wrapper}: {}", cause.text())
}

/// What the client sees of a request flow control did not dispatch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The HTTP status.
    pub status: u16,
    /// The response message.
    pub message: String,
    /// The `x-llm-d-request-dropped-reason` header, when upstream sets one.
    pub dropped_reason: Option<&'static str>,
}

impl Refusal {
    /// The reason a dropped call is recorded with: the header's value (when set), then the
    /// message.
    pub fn reason(&self) -> String {
        match self.dropped_reason {
            Some(header) => format!("{header}: {}", self.message),
            None => self.message.clone(),
        }
    }
}

/// An in-flight request the reclamation controller revoked: the ext_proc server answers it
/// with an `ImmediateResponse` of 429, body `request evicted by flow control`, and the reason the
/// `ImmediateResponseEvictor` recorded, `evicted` (`handlers/server.go`, `eviction/evictor.go`).
pub fn evicted_in_flight() -> Refusal {
    Refusal {
        status: 429,
        message: "request evicted by flow control".to_owned(),
        dropped_reason: Some("evicted"),
    }
}

/// `translateFlowControlOutcome`: `None` for a dispatched request, else the status, message
/// and dropped-reason header the client gets. `pool_empty` is whether the pool had no endpoints
/// when a TTL expiry was reported.
pub fn translate(outcome: QueueOutcome, cause: Option<Cause>, pool_empty: bool) -> Option<Refusal> {
    let message =
        cause.map_or_else(|| "request rejected by flow control".to_owned(), |c| error_text(outcome, c));
    translate_error(outcome, cause, &message, pool_empty)
}

/// The mapping over the error's own text `message` (what `err.Error()` gives upstream; a
/// re-mapped outcome keeps it).
pub fn translate_error(
    outcome: QueueOutcome,
    cause: Option<Cause>,
    message: &str,
    pool_empty: bool,
) -> Option<Refusal> {
    let refusal = |status: u16, prefix: &str, header: Option<&'static str>| Refusal {
        status,
        message: format!("{prefix}{message}"),
        dropped_reason: header,
    };
    Some(match outcome {
        QueueOutcome::Dispatched => return None,
        QueueOutcome::RejectedCapacity => refusal(429, "", Some("rejected-saturated")),
        QueueOutcome::RejectedNoEndpoints => {
            refusal(503, "no endpoints available: ", Some("rejected-no-endpoints"))
        }
        QueueOutcome::EvictedTtl if pool_empty => refusal(
            503,
            "request timed out in queue and no endpoints are available: ",
            Some("rejected-no-endpoints"),
        ),
        QueueOutcome::EvictedTtl => {
            refusal(429, "request timed out in queue: ", Some("rejected-ttl-expired"))
        }
        QueueOutcome::EvictedContextCancelled => {
            refusal(503, "client disconnected: ", Some("rejected-context-cancelled"))
        }
        QueueOutcome::RejectedOther | QueueOutcome::EvictedOther => match cause {
            Some(Cause::NotRunning) => {
                refusal(503, "flow controller shutting down: ", Some("rejected-shutting-down"))
            }
            Some(Cause::TtlExpired) => {
                return translate_error(QueueOutcome::EvictedTtl, cause, message, pool_empty);
            }
            Some(Cause::ContextCancelled) => {
                return translate_error(QueueOutcome::EvictedContextCancelled, cause, message, pool_empty);
            }
            _ => refusal(500, "internal flow control error: ", None),
        },
    })
}
