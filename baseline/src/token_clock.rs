//! Turning a stream's chunks into the per-token latency array of `calls.jsonl`, counting tokens
//! exactly: a chunk may carry several tokens (the server batched them into one write, or the
//! network coalesced writes), and every token of a chunk is attributed the chunk's arrival
//! time — the moment the client could first see it. The first token's element is its arrival
//! minus the send; the later tokens of a chunk get gaps of 0.

/// The tokens seen so far of one call, with the times the client saw them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenClock {
    latency_us: Vec<u64>,
    last_us: u64,
}

impl TokenClock {
    /// A chunk of `tokens` tokens seen `at_us` after the send.
    pub fn chunk(&mut self, at_us: u64, tokens: usize) {
        for _ in 0..tokens {
            let since = at_us.saturating_sub(self.last_us);
            self.latency_us.push(since);
            self.last_us = at_us;
        }
    }

    /// Tokens seen.
    pub fn tokens(&self) -> usize {
        self.latency_us.len()
    }

    /// The latency array: element 0 the time to first token, element k the gap before token k.
    pub fn into_latency(self) -> Vec<u64> {
        self.latency_us
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_token_of_a_chunk_is_attributed_its_arrival() {
        let mut clock = TokenClock::default();
        clock.chunk(100_000, 1);
        clock.chunk(160_000, 2);
        clock.chunk(160_000, 0);
        clock.chunk(230_000, 1);
        assert_eq!(clock.tokens(), 4);
        assert_eq!(clock.into_latency(), [100_000, 60_000, 0, 70_000]);
    }
}
