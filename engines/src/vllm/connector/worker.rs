//! The offloading connector's worker-side bookkeeping (`OffloadingConnectorWorker` in vLLM
//! 0.15.1): which copy jobs run for which request, and when a request's stores or its load
//! are reported finished. The copies themselves are not here: each submitted job is handed to
//! whoever drives the engine (the engine host prices it and the fabric carries it; a replay
//! completes it after a set number of polls), who reports it done.
//!
//! Stores planned in step k are submitted at the start of step k+1 (or at a preemption, which
//! then waits for the preempted requests' stores); loads at the start of their own step. A load
//! done reports its request as finished receiving. A request's stores are reported (finished
//! sending) only once the request has finished and its last store job is done; a finished
//! request that never stored is not reported.

use std::collections::{BTreeMap, BTreeSet};

use super::offloading::{OffloadMeta, TransferSpec};

/// The direction of a copy job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Direction {
    /// GPU → CPU.
    Store,
    /// CPU → GPU.
    Load,
}

/// A copy job submitted to the transport.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Job {
    /// Its id, counting from 0 in creation order.
    pub id: u64,
    /// Which way.
    pub direction: Direction,
    /// What it copies.
    pub spec: TransferSpec,
}

/// The worker side of the offloading connector.
#[derive(Clone, Debug, Default)]
pub struct OffloadWorker {
    next_job: u64,
    jobs: BTreeMap<u64, (u64, Direction)>,
    load_job: BTreeMap<u64, u64>,
    store_jobs: BTreeMap<u64, BTreeSet<u64>>,
    unsubmitted: Vec<Job>,
    finished_waiting_for_store: BTreeSet<u64>,
}

impl OffloadWorker {
    /// A worker with no jobs.
    pub fn new() -> OffloadWorker {
        OffloadWorker::default()
    }

    fn job(&mut self, direction: Direction, spec: TransferSpec) -> Job {
        let id = self.next_job;
        self.next_job += 1;
        self.jobs.insert(id, (spec.key, direction));
        Job { id, direction, spec }
    }

    /// `handle_preemptions`: submit the pending stores; returns them and the ids of the store
    /// jobs of `preempted` requests the step must wait for.
    pub fn handle_preemptions(&mut self, preempted: &[u64]) -> (Vec<Job>, Vec<u64>) {
        let submitted = std::mem::take(&mut self.unsubmitted);
        let wait = preempted
            .iter()
            .filter_map(|k| self.store_jobs.get(k))
            .flat_map(|jobs| jobs.iter().copied())
            .collect();
        (submitted, wait)
    }

    /// `start_kv_transfers`: submit the pending stores, then this step's loads.
    pub fn start_kv_transfers(&mut self, meta: &OffloadMeta) -> Vec<Job> {
        let mut submitted = std::mem::take(&mut self.unsubmitted);
        for spec in &meta.loads {
            let job = self.job(Direction::Load, spec.clone());
            debug_assert!(!self.load_job.contains_key(&spec.key), "one load per request at a time");
            self.load_job.insert(spec.key, job.id);
            submitted.push(job);
        }
        submitted
    }

    /// `prepare_store_kv` (in `wait_for_save`, after a forward): queue this step's stores for
    /// the next step.
    pub fn prepare_store_kv(&mut self, meta: &OffloadMeta) {
        for spec in &meta.stores {
            let job = self.job(Direction::Store, spec.clone());
            self.store_jobs.entry(spec.key).or_default().insert(job.id);
            self.unsubmitted.push(job);
        }
    }

    /// `get_finished`: apply the jobs `done` since the last poll and the requests that finished
    /// (`finished_req_ids`); returns (finished sending, finished receiving), in key order.
    pub fn get_finished(&mut self, done: &[u64], finished_req_ids: &[u64]) -> (Vec<u64>, Vec<u64>) {
        let mut sending = BTreeSet::new();
        let mut recving = BTreeSet::new();
        for job in done {
            let (key, direction) = self.jobs.remove(job).expect("a finished job was submitted");
            match direction {
                Direction::Store => {
                    let jobs = self.store_jobs.get_mut(&key).expect("a store job's request has its set");
                    jobs.remove(job);
                    if !jobs.is_empty() {
                        continue;
                    }
                    if self.finished_waiting_for_store.remove(&key) {
                        sending.insert(key);
                        self.store_jobs.remove(&key);
                    }
                }
                Direction::Load => {
                    let load = self.load_job.remove(&key);
                    debug_assert_eq!(load, Some(*job));
                    recving.insert(key);
                }
            }
        }
        for key in finished_req_ids {
            match self.store_jobs.get(key) {
                Some(jobs) if !jobs.is_empty() => {
                    self.finished_waiting_for_store.insert(*key);
                }
                Some(_) => {
                    sending.insert(*key);
                    self.store_jobs.remove(key);
                }
                None => {}
            }
        }
        (sending.into_iter().collect(), recving.into_iter().collect())
    }

    /// Jobs submitted or queued and not yet reported done.
    pub fn jobs_in_flight(&self) -> usize {
        self.jobs.len()
    }
}
