//! Mooncake's trace format: JSONL lines `{"timestamp": 27482, "input_length": 6955,
//! "output_length": 52, "hash_ids": [46, 47, 48]}`, one request per line, no other fields.
//!
//! Line `k` (counting non-blank lines from 0) becomes request `<client>-<k>`: one LLM call that
//! generates `output_length` tokens. `timestamp` is in milliseconds (fractions allowed); arrivals
//! are microseconds after the first line's timestamp, rounded to the nearest. Each hash id names a
//! block of 512 tokens shared by every request naming it: the prompt is the block
//! `Shared{name: "mooncake/<id>", tokens: 512}` for each hash id in order, the last block shortened
//! so the prompt holds exactly `input_length` tokens (a shortened block is the first tokens of the
//! same block, so it shares them with every request holding the whole block). When
//! `input_length` exceeds the blocks' 512 tokens each, the hash ids cover only the first tokens
//! and the rest are the request's own (unshared) tokens after the blocks; without hash ids the
//! whole prompt is the request's own. A line whose `input_length` cannot reach its last block
//! (at most `512 × (n − 1)` tokens for `n` hash ids) is refused, as are empty prompts and outputs.

use blis_contracts::{FieldError, PromptPart, RequestSpec, json};
use serde::Deserialize;

use super::trace_file::{LineFormat, single_call};

/// Tokens in the block a hash id names.
pub const BLOCK_TOKENS: u32 = 512;

/// One line as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    timestamp: f64,
    input_length: u32,
    output_length: u32,
    hash_ids: Vec<u64>,
}

/// Lines of a Mooncake trace, read as requests of one client.
pub struct Mooncake {
    client: String,
    first_us: Option<i64>,
    lines: u64,
}

impl Mooncake {
    /// Lines read as requests of `client`.
    pub fn new(client: &str) -> Mooncake {
        Mooncake { client: client.to_owned(), first_us: None, lines: 0 }
    }
}

/// The prompt of `input_length` tokens over the blocks `hash_ids`, or why there is none.
fn prompt(input_length: u32, hash_ids: &[u64]) -> Result<Vec<PromptPart>, String> {
    if input_length == 0 {
        return Err("must be at least 1 token: a prompt needs at least one token".into());
    }
    let blocks = hash_ids.len() as u64;
    let covered = blocks * u64::from(BLOCK_TOKENS);
    if blocks > 0 && u64::from(input_length) <= covered - u64::from(BLOCK_TOKENS) {
        return Err(format!(
            "{blocks} hash ids of {BLOCK_TOKENS}-token blocks need {} to {covered} tokens \
             (the last block holds at least one)",
            covered - u64::from(BLOCK_TOKENS) + 1
        ));
    }
    let mut parts = Vec::with_capacity(hash_ids.len() + 1);
    let mut left = input_length;
    for id in hash_ids {
        let tokens = left.min(BLOCK_TOKENS);
        parts.push(PromptPart::Shared { name: format!("mooncake/{id}"), tokens });
        left -= tokens;
    }
    if left > 0 {
        parts.push(PromptPart::Tokens(left));
    }
    Ok(parts)
}

impl LineFormat for Mooncake {
    const ARRIVAL_FIELD: &'static str = "timestamp";

    fn parse(&mut self, at: &str, text: &str) -> Result<Option<RequestSpec>, FieldError> {
        let line: Line = json::from_str(text, at)?;
        if !(line.timestamp.is_finite() && line.timestamp >= 0.0 && line.timestamp <= 1e15) {
            return Err(FieldError::new(
                format!("{at}.timestamp"),
                line.timestamp,
                "must be a number of milliseconds in [0, 10¹⁵]",
            ));
        }
        let stamp_us = libm::round(line.timestamp * 1e3) as i64;
        let first_us = *self.first_us.get_or_insert(stamp_us);
        let arrival_us = u64::try_from(stamp_us - first_us).map_err(|_| {
            FieldError::new(
                format!("{at}.timestamp"),
                line.timestamp,
                "earlier than the first line: arrivals must not go back in time",
            )
        })?;
        let prompt = prompt(line.input_length, &line.hash_ids)
            .map_err(|cause| FieldError::new(format!("{at}.input_length"), line.input_length, cause))?;
        if line.output_length == 0 {
            return Err(FieldError::new(
                format!("{at}.output_length"),
                0,
                "must be at least 1 token: the engine generates exactly this many tokens",
            ));
        }
        let id = format!("{}-{}", self.client, self.lines);
        self.lines += 1;
        Ok(Some(single_call(id, arrival_us, prompt, line.output_length)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared(id: u64, tokens: u32) -> PromptPart {
        PromptPart::Shared { name: format!("mooncake/{id}"), tokens }
    }

    #[test]
    fn blocks_cover_the_prompt_with_the_last_one_shortened() {
        assert_eq!(prompt(1100, &[4, 9, 2]), Ok(vec![shared(4, 512), shared(9, 512), shared(2, 76)]));
        assert_eq!(prompt(1024, &[4, 9]), Ok(vec![shared(4, 512), shared(9, 512)]));
        assert_eq!(prompt(1030, &[4, 9]), Ok(vec![shared(4, 512), shared(9, 512), PromptPart::Tokens(6)]));
        assert_eq!(prompt(7, &[]), Ok(vec![PromptPart::Tokens(7)]));
        assert!(prompt(1024, &[1, 2, 3]).unwrap_err().contains("need 1025 to 1536 tokens"));
        assert!(prompt(0, &[]).is_err());
    }
}
