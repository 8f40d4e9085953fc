//! The bounds numeric inputs are checked against, each from physics or from the model, so that
//! no value the parser accepts can exhaust memory, hang a run or saturate a conversion.
//!
//! `docs/RELIABILITY.md` lists every bound with its reason. Bounds that need the resolved
//! deployment (token counts against `max_model_len`, KV memory against the chip) are checked
//! where the deployment is resolved, with the constants here where one applies.

use crate::error::{FieldError, number};

/// Longest simulated span any time input may reach, seconds (10⁹ s, about 31.7 years): far
/// beyond any serving experiment, and small enough that sums of such spans in microseconds stay
/// well inside the clock's 64 bits (1.8·10¹³ s).
pub const MAX_SIMULATED_S: f64 = 1e9;

/// Highest arrival rate, requests per second: one per microsecond, the clock's resolution.
pub const MAX_RATE_PER_S: f64 = 1e6;

/// Most LLM calls one replication may hold (requests × turns, over all clients): each call's
/// record is kept for `calls.jsonl` and the statistics.
pub const MAX_CALLS: u64 = 10_000_000;

/// Most per-token latencies the replications of one run may hold together (calls × the largest
/// output length, over replications): 2³⁰ of them are 8 GiB.
pub const MAX_TOKEN_LATENCIES: u64 = 1 << 30;

/// Most replications of one run: an interval's half-width shrinks as `1/√n`, so 1000 already
/// give 3 % of one replication's spread, and every replication's records are held at once.
pub const MAX_REPLICATIONS: u32 = 1_000;

/// Most turns in one session: a call's key holds its node in 16 bits, and a session of `n`
/// turns has `2n − 1` nodes.
pub const MAX_TURNS: u32 = 32_768;

/// Most nodes in one request of a workload file: a call's key holds its node in 16 bits.
pub const MAX_NODES: usize = 65_535;

/// Most tokens in one call's prompt or output in a workload file (2²⁴): beyond the context of
/// any model in the catalog, and 64 MiB of token ids.
pub const MAX_CALL_TOKENS: u64 = 1 << 24;

/// Most engine instances in one cluster: each holds its own KV block tables and prefix index.
pub const MAX_INSTANCES: u32 = 4_096;

/// Refuse a time input of `seconds` at `path` beyond [`MAX_SIMULATED_S`] (finiteness and sign are
/// the caller's, with its own wording).
pub fn check_seconds(path: &str, seconds: f64) -> Result<(), FieldError> {
    if seconds > MAX_SIMULATED_S {
        return Err(FieldError::new(
            path,
            number(seconds),
            format!("must be at most {MAX_SIMULATED_S:e} s (about 31.7 years), the longest simulated span"),
        ));
    }
    Ok(())
}

/// Refuse a microsecond input beyond [`MAX_SIMULATED_S`].
pub fn check_micros(path: &str, micros: u64) -> Result<(), FieldError> {
    if micros as f64 > MAX_SIMULATED_S * 1e6 {
        return Err(FieldError::new(
            path,
            micros,
            format!(
                "must be at most {:e} µs (about 31.7 years), the longest simulated span",
                MAX_SIMULATED_S * 1e6
            ),
        ));
    }
    Ok(())
}

/// Refuse a replication count above [`MAX_REPLICATIONS`] at `path`.
pub fn check_replications(path: &str, replications: u32) -> Result<(), FieldError> {
    if replications == 0 {
        return Err(FieldError::new(path, 0, "must be at least 1"));
    }
    if replications > MAX_REPLICATIONS {
        return Err(FieldError::new(
            path,
            replications,
            format!(
                "must be at most {MAX_REPLICATIONS}: intervals are already 3% of one replication's spread there, and every replication's records are held at once"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_name_the_field_value_and_bound() {
        let e = check_seconds("workload.clients[0].timeout_s", 1e300).unwrap_err();
        assert_eq!(e.path, "workload.clients[0].timeout_s");
        assert!(e.to_string().contains("1e300") && e.cause.contains("1e9 s"), "{e}");
        assert!(check_seconds("x", 1e9).is_ok());
        let e = check_replications("--replications", 4_000_000_000).unwrap_err();
        assert!(e.cause.contains("at most 1000"), "{e}");
        assert!(check_replications("--replications", 0).is_err());
        assert!(check_micros("cluster.network.client_router_us", u64::MAX).is_err());
        assert!(check_micros("cluster.network.client_router_us", 1_000).is_ok());
    }
}
