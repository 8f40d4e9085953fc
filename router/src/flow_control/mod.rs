//! llm-d-router v0.10.0's flow control (the `flowControl` feature gate, off by default): requests
//! wait in priority bands of per-flow queues and leave one per dispatch cycle while the pool's
//! saturation stays under the band's ceiling; the rest are refused at capacity, or expire.
//!
//! [`config`] builds the section as the release's loader does, [`policies`] holds the ordering,
//! fairness and usage-limit policies, [`controller`] the queues and the dispatch cycle, and
//! [`outcome`] what a client sees of a request that was not dispatched (or was evicted in
//! flight: [`eviction`], with `enableEviction`). Everything here is a
//! plain state machine over times the caller gives; the router host drives it (after each
//! arrival, on the 1 ms dispatch tick, at TTL deadlines, on the 1 s sweep tick).

pub mod config;
pub mod controller;
pub mod eviction;
pub mod outcome;
pub mod policies;
mod quantity;

pub use config::{BandConfig, FlowControlConfig};
pub use controller::{DEFAULT_FAIRNESS_ID, Finished, FlowController, Occupancy, Ticket, has_capacity};
pub use eviction::{Eviction, Lease, ReclamationConfig};
pub use outcome::{Cause, QueueOutcome, Refusal, evicted_in_flight, translate, translate_error};
pub use policies::{Fairness, Ordering, StaticUsageLimit};

/// The byte size upstream's capacity limits count for a request: its body as the client sends
/// it, `{"model":"<model>","prompt":[<ids>],"max_tokens":<n>}` (compact JSON, ids in decimal).
pub fn body_bytes(model: &str, prompt_token_ids: &[u32], max_tokens: Option<u64>) -> u64 {
    let digits = |v: u64| v.checked_ilog10().map_or(1, |d| d as u64 + 1);
    let ids: u64 = prompt_token_ids.iter().map(|&t| digits(u64::from(t))).sum::<u64>()
        + prompt_token_ids.len().saturating_sub(1) as u64;
    let max = max_tokens.map_or(0, |n| r#","max_tokens":"#.len() as u64 + digits(n));
    r#"{"model":"","prompt":[]}"#.len() as u64 + model.len() as u64 + ids + max
}

#[cfg(test)]
mod tests {
    #[test]
    fn body_bytes_is_the_length_of_the_compact_json_body() {
        let body = r#"{"model":"m1","prompt":[1,22,333],"max_tokens":16}"#;
        assert_eq!(super::body_bytes("m1", &[1, 22, 333], Some(16)), body.len() as u64);
        assert_eq!(super::body_bytes("m", &[], None), r#"{"model":"m","prompt":[]}"#.len() as u64);
        assert_eq!(
            super::body_bytes("m", &[0], Some(0)),
            r#"{"model":"m","prompt":[0],"max_tokens":0}"#.len() as u64
        );
    }
}
