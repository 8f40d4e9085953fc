//! The baseline policy: each request to the next endpoint in turn.

/// Picks endpoints in turn: each call returns the next index, wrapping around.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RoundRobin {
    next: usize,
}

impl RoundRobin {
    /// The index of the endpoint for the next request among `endpoints` (which must be
    /// non-empty).
    pub fn pick(&mut self, endpoints: usize) -> usize {
        assert!(endpoints > 0, "round robin needs at least one endpoint");
        let picked = self.next % endpoints;
        self.next = (picked + 1) % endpoints;
        picked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_in_turn_and_wraps() {
        let mut rr = RoundRobin::default();
        let picks: Vec<usize> = (0..7).map(|_| rr.pick(3)).collect();
        assert_eq!(picks, vec![0, 1, 2, 0, 1, 2, 0]);
    }
}
