//! The NIXL worker as the P/D harness emulates it (`traces/harness/record_nixl.py`,
//! `FakeNixlWorker`): what vLLM's `NixlConnectorWorker` does that the scheduler can see, with time
//! counted in polls and global steps. Shared by the P/D oracle and the P/D property tests.

// Each test crate that includes this module uses a part of it.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

use blis_engines::vllm::SchedulerOutput;
use blis_engines::vllm::connector::ConnectorOutput;

/// The two engines' ids: P (prefill) is 0, D (decode) is 1.
pub const ENGINES: [&str; 2] = ["oracle-p", "oracle-d"];

/// The engine (index into [`ENGINES`]) named `engine_id`.
pub fn engine_of(engine_id: &str) -> usize {
    ENGINES.iter().position(|e| *e == engine_id).unwrap_or_else(|| panic!("unknown engine {engine_id}"))
}

/// The harness's NIXL knobs (header `nixl`).
pub struct Knobs {
    /// A read completes at its N-th poll of the reading worker.
    pub read_steps: u32,
    /// P releases a held request this many global steps after it finished, if unread.
    pub expiry_steps: Option<u64>,
    /// Requests whose first read reports its k-th local block invalid.
    pub fail_reads: BTreeMap<u64, usize>,
}

/// One read a D worker has started.
struct Read {
    key: u64,
    polls_left: u32,
    local_blocks: Vec<u32>,
    remote_engine: usize,
    remote_key: u64,
}

/// What the NIXL worker does that the scheduler can see, per executed batch (`start_load_kv`,
/// then `get_finished`), with time in polls and global steps — the harness's `FakeNixlWorker`.
#[derive(Default)]
pub struct FakeNixlWorker {
    to_process: BTreeSet<u64>,
    /// Armed holds in arming order, each with the global step its hold expires at.
    to_send: Vec<(u64, Option<u64>)>,
    reads: Vec<Read>,
    failed_once: BTreeSet<u64>,
}

/// State the two sides share: notification queues by engine, and P's hold expiries.
pub struct Wires {
    /// Notifications queued for each engine, by the remote request they name.
    pub notifications: [Vec<u64>; 2],
    /// The global step each P request's hold expires at.
    pub expiry: BTreeMap<u64, u64>,
    /// The workload's knobs.
    pub knobs: Knobs,
}

impl FakeNixlWorker {
    /// Whether a read is in flight or a hold armed.
    pub fn busy(&self) -> bool {
        !self.reads.is_empty() || !self.to_send.is_empty()
    }

    /// One executed batch of `engine` at global `step`: `start_load_kv`, then `get_finished`;
    /// the connector output to hand to the update (none for an empty zero-token step).
    pub fn execute(
        &mut self,
        engine: usize,
        batch: &SchedulerOutput,
        step: u64,
        wires: &mut Wires,
    ) -> Option<ConnectorOutput> {
        let meta = batch.connector_meta.as_ref().and_then(|m| m.nixl()).expect("a NIXL step has metadata");
        for recv in &meta.reqs_to_recv {
            assert_eq!(recv.tp_size, 1);
            let remote_engine = engine_of(&recv.remote_engine_id);
            if recv.local_blocks.is_empty() {
                wires.notifications[remote_engine].push(recv.remote_request_key);
            } else {
                self.reads.push(Read {
                    key: recv.key,
                    polls_left: wires.knobs.read_steps,
                    local_blocks: recv.local_blocks.clone(),
                    remote_engine,
                    remote_key: recv.remote_request_key,
                });
            }
        }
        self.to_process.extend(meta.reqs_in_batch.iter().copied());
        for key in &meta.reqs_not_processed {
            self.to_process.remove(key);
            assert!(!self.to_send.iter().any(|(k, _)| k == key));
        }
        let mut arming: Vec<u64> = meta.reqs_to_send.iter().map(|&(k, _)| k).collect();
        arming.sort_unstable();
        for key in arming {
            if self.to_process.contains(&key) {
                let expiry = wires.expiry.get(&key).copied();
                match self.to_send.iter_mut().find(|(k, _)| *k == key) {
                    Some(entry) => entry.1 = expiry,
                    None => self.to_send.push((key, expiry)),
                }
            }
        }
        let mut sending = BTreeSet::new();
        for key in std::mem::take(&mut wires.notifications[engine]) {
            let armed = self.to_send.iter().position(|(k, _)| *k == key);
            if armed.is_none() && !self.to_process.contains(&key) {
                continue;
            }
            sending.insert(key);
            self.to_process.remove(&key);
            if let Some(i) = armed {
                self.to_send.remove(i);
            }
        }
        let mut recving = BTreeSet::new();
        let mut invalid = BTreeSet::new();
        for read in &mut self.reads {
            read.polls_left -= 1;
            if read.polls_left > 0 {
                continue;
            }
            recving.insert(read.key);
            if let Some(&k) = wires.knobs.fail_reads.get(&read.key)
                && let Some(&block) = read.local_blocks.get(k)
                && self.failed_once.insert(read.key)
            {
                invalid.insert(block);
            }
            wires.notifications[read.remote_engine].push(read.remote_key);
        }
        self.reads.retain(|r| r.polls_left > 0);
        while let Some(&(key, expiry)) = self.to_send.first() {
            if expiry.is_none_or(|e| step < e) {
                break;
            }
            self.to_process.remove(&key);
            self.to_send.remove(0);
            sending.insert(key);
        }
        let output = ConnectorOutput {
            finished_sending: sending.into_iter().collect(),
            finished_recving: recving.into_iter().collect(),
            invalid_block_ids: invalid.into_iter().collect(),
        };
        (batch.total > 0 || !output.is_empty()).then_some(output)
    }
}
