//! Settled calls on their way out of a replication, in the documented order of `calls.jsonl`.
//!
//! A client hands each request's call records to its ledger when the request ends (its last
//! node settles), so a record leaves the client as soon as nothing can change it any more. The
//! ledger is write-only for the clients — no decision reads it — and the run drains it between
//! stretches of simulated time. Records are ordered by the key `(end µs, client index, the
//! client's count of ended requests)`, then by node within a request; every record drained at a
//! checkpoint ended at or before it and every later one ends after, so the order never depends
//! on where the checkpoints fall.

use std::cell::RefCell;
use std::rc::Rc;

use blis_contracts::CallRecord;

/// Where a request's records sort: when it ended (µs), its client's index, and the client's
/// running count of ended requests.
pub type SettleKey = (u64, u32, u64);

/// A shared, write-only queue of settled call records (cloning shares it).
#[derive(Clone, Debug, Default)]
pub struct CallLedger {
    settled: Rc<RefCell<Vec<(SettleKey, CallRecord)>>>,
}

impl CallLedger {
    /// An empty ledger.
    pub fn new() -> CallLedger {
        CallLedger::default()
    }

    /// One settled record; a request's records are handed over in node order under one key.
    pub(crate) fn settle(&self, key: SettleKey, record: CallRecord) {
        self.settled.borrow_mut().push((key, record));
    }

    /// Every record settled so far, in file order; the ledger is left empty.
    pub fn drain(&self) -> Vec<CallRecord> {
        let mut kept = self.settled.borrow_mut();
        // The queue keeps its room for the next stretch, which settles about as many.
        let room = kept.capacity();
        let mut settled = std::mem::replace(&mut *kept, Vec::with_capacity(room));
        // Stable: a request's records keep their node order under their shared key. Records
        // mostly settle in key order already (by end time), and then need no sort.
        if !settled.is_sorted_by_key(|(key, _)| *key) {
            settled.sort_by_key(|(key, _)| *key);
        }
        settled.into_iter().map(|(_, record)| record).collect()
    }
}

#[cfg(test)]
mod tests {
    use blis_contracts::Fate;

    use super::*;

    fn record(request_id: &str, node: &str) -> CallRecord {
        CallRecord {
            replication: 0,
            request_id: request_id.into(),
            request: request_id.into(),
            node: node.into(),
            parents: Vec::new(),
            client: "c".into(),
            arrival_us: 0,
            input_tokens: 1,
            output_tokens: 1,
            instance: "e".into(),
            cached_tokens: 0,
            preemptions: 0,
            fate: Fate::Completed,
            settled_us: None,
            token_latency_us: vec![1],
            request_e2e_us: None,
            disaggregated: None,
        }
    }

    fn names(records: &[CallRecord]) -> Vec<String> {
        records.iter().map(|r| format!("{}/{}", r.request_id, r.node)).collect()
    }

    #[test]
    fn records_drain_in_key_order_a_requests_nodes_in_the_order_settled() {
        let ledger = CallLedger::new();
        // Settled out of key order (a later client's request ending at the same time first),
        // with one request's two nodes under one key.
        ledger.settle((20, 1, 0), record("b-0", "llm"));
        ledger.settle((20, 0, 0), record("a-0", "x"));
        ledger.settle((20, 0, 0), record("a-0", "y"));
        ledger.settle((10, 0, 1), record("a-1", "llm"));
        assert_eq!(names(&ledger.drain()), ["a-1/llm", "a-0/x", "a-0/y", "b-0/llm"]);
        // Already in order: the same order, and only what settled since the last drain.
        ledger.settle((30, 0, 2), record("a-2", "x"));
        ledger.settle((30, 0, 2), record("a-2", "y"));
        ledger.settle((31, 1, 1), record("b-1", "llm"));
        assert_eq!(names(&ledger.drain()), ["a-2/x", "a-2/y", "b-1/llm"]);
        assert!(ledger.drain().is_empty());
    }
}
