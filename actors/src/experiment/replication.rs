//! One replication: assemble the scenario with one seed, simulate it to its end (or horizon),
//! and account for every call.

use std::cell::Cell;
use std::rc::Rc;

use blis_contracts::{
    CallRecord, EngineIdentity, Fate, FateCounts, FieldError, InstanceRecord, RankShares, RequestSpec,
    Scenario, SimulationRecord,
};
use blis_costmodel::CostData;
use blis_kernel::{ActorId, Envelope, Observer, RunEnd, SimDuration, SimTime};
use sha2::{Digest, Sha256};

use crate::assembly::{AssemblyOptions, OVERLOAD_STOP_GRID, assemble};
use crate::calls_out::CallsOut;
use crate::client::Client;
use crate::engine_host::EngineHost;
use crate::message::ClusterMessage;
use crate::run::{Observers, Progress, RunError};
use crate::sglang_host::SglangHost;
use crate::stats::overload::OverloadWatch;
use crate::tally::Tally;

/// Kernel rounds between progress reports and stop-rule checks: simulated idle time costs
/// nothing, and progress is paced by the work done, not by simulated seconds.
const ROUNDS_PER_SLICE: u64 = 4_096;

/// The seed of replication `index` of a run seeded with `seed`: the seed itself for
/// replication 0, otherwise the first 8 bytes (little-endian) of
/// SHA-256("blis-actor/replication/v1" ‖ seed ‖ index), both as little-endian u64.
pub fn replication_seed(seed: u64, index: u32) -> u64 {
    if index == 0 {
        return seed;
    }
    let mut hasher = Sha256::new();
    hasher.update(b"blis-actor/replication/v1");
    hasher.update(seed.to_le_bytes());
    hasher.update(u64::from(index).to_le_bytes());
    let digest = hasher.finalize();
    u64::from_le_bytes(digest[..8].try_into().expect("a digest has 8 bytes"))
}

/// What one replication produced.
pub struct ReplicationRun {
    /// Its seed.
    pub seed: u64,
    /// Its calls, accounted as they settled.
    pub tally: Tally,
    /// Their fates.
    pub fates: FateCounts,
    /// The engine instances' counters.
    pub instances: Vec<InstanceRecord>,
    /// Priced step time by rank.
    pub priced: RankShares,
    /// What the kernel did.
    pub simulation: SimulationRecord,
    /// The requests each client released, when asked to keep them.
    pub workloads: Vec<(String, Vec<RequestSpec>)>,
    /// The resolved scenario.
    pub resolved: serde_json::Value,
    /// The upstream engines modelled.
    pub identities: Vec<EngineIdentity>,
    /// Requests the clients were to send, when known.
    pub expected_requests: Option<u64>,
    /// When the last request arrived, µs (the end of the offered load).
    pub last_arrival_us: u64,
    /// When the stop rule stopped the run as overloaded, µs.
    pub stopped_overloaded_us: Option<u64>,
}

/// Counts calls the clients sent, answers reaching them and calls they gave up on, for
/// progress and the stop rule.
struct AnswerCounter {
    clients: Vec<ActorId>,
    counts: Rc<Cell<CallCounts>>,
}

/// What [`AnswerCounter`] has counted.
#[derive(Clone, Copy, Debug, Default)]
struct CallCounts {
    sent: u64,
    answered: u64,
    abandoned: u64,
}

impl CallCounts {
    /// Calls sent and neither answered nor given up on.
    fn outstanding(self) -> u64 {
        self.sent.saturating_sub(self.answered + self.abandoned)
    }
}

impl Observer<ClusterMessage> for AnswerCounter {
    /// It counts what clients send and receive; engines are out of its sight.
    fn blind_to_detached(&self) -> bool {
        true
    }

    fn on_delivery(&mut self, envelope: &Envelope<ClusterMessage>) {
        let mut counts = self.counts.get();
        let from_client = self.clients.binary_search(&envelope.sender).is_ok();
        match envelope.payload {
            ClusterMessage::Request(_) if from_client => counts.sent += 1,
            ClusterMessage::Abort(_) if from_client => counts.abandoned += 1,
            ClusterMessage::Completion(_) | ClusterMessage::Rejection(_)
                if self.clients.binary_search(&envelope.to).is_ok() =>
            {
                counts.answered += 1;
            }
            _ => return,
        }
        self.counts.set(counts);
    }
}

/// Where a replication's settled records are accounted: tallied, then written to `calls.jsonl`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accounting {
    /// On the simulation's thread.
    Inline,
    /// On a second thread, when the run has a core to spare: the simulation hands each slice's
    /// records over and frees them when they come back (so the thread that allocated a record's
    /// strings and latencies frees them; only the batches' own buffers cross), the same records
    /// in the same order, so the outputs are the same bytes. The spare core also reads the
    /// clients' sources and draws their token ids ahead ([`AssemblyOptions::draw_ahead`]).
    Threaded,
}

/// Batches of records in flight between the simulation and the accounting thread.
const BATCHES_IN_FLIGHT: usize = 4;

/// The books a replication's records are accounted in.
struct Books<'a> {
    index: u32,
    tally: Tally,
    calls: Option<&'a mut CallsOut>,
}

impl Books<'_> {
    /// Tally and write `records` in order; those nothing keeps go to `spent`.
    fn account(&mut self, records: Vec<CallRecord>, spent: &mut Vec<CallRecord>) -> Result<(), RunError> {
        for mut record in records {
            record.replication = self.index;
            self.tally.add(&record);
            let done = match self.calls.as_deref_mut() {
                Some(out) => out.write(record).map_err(|e| RunError::Output(e.to_string()))?,
                None => Some(record),
            };
            spent.extend(done);
        }
        Ok(())
    }
}

/// Run replication `index` of `scenario` with `seed`; `observers` watch it and are handed back.
/// Its call records go to `calls` (if given) in file order as they settle, accounted as
/// `accounting` says.
#[allow(clippy::too_many_arguments)]
pub fn run_replication(
    scenario: &Scenario,
    index: u32,
    seed: u64,
    data: &CostData,
    options: &AssemblyOptions,
    observers: Observers,
    mut calls: Option<&mut CallsOut>,
    accounting: Accounting,
    progress: &mut dyn FnMut(Progress),
) -> Result<(ReplicationRun, Observers), RunError> {
    // A replication with a core to spare draws ahead; its engines run in the lanes the
    // options allow when nothing watches every actor.
    let spare = accounting == Accounting::Threaded;
    let blind = observers.iter().all(|o| o.blind_to_detached());
    let lane_threads = if spare && blind { options.lane_threads } else { 1 };
    let options = AssemblyOptions { draw_ahead: spare, lane_threads, ..options.clone() };
    let cluster = assemble(scenario, seed, data, &options).map_err(RunError::Input)?;
    if let Some(out) = calls.as_deref_mut() {
        out.begin(cluster.served.clone()).map_err(|e| RunError::Output(e.to_string()))?;
    }
    let frame = &scenario.frame;
    let books = Books { index, tally: Tally::new(frame.run_kind(), frame.warm_up(), frame.slo), calls };
    let ((simulated, observers), tally) = match accounting {
        Accounting::Inline => {
            let mut books = books;
            let mut spent = Vec::new();
            let simulated = simulate(cluster, scenario, observers, progress, &mut |records| {
                let result = books.account(records, &mut spent);
                spent.clear();
                result
            })?;
            (simulated, books.tally)
        }
        Accounting::Threaded => std::thread::scope(|scope| {
            let (to_books, from_simulation) =
                std::sync::mpsc::sync_channel::<Vec<CallRecord>>(BATCHES_IN_FLIGHT);
            let (to_simulation, spent) = std::sync::mpsc::channel::<Vec<CallRecord>>();
            let keeper = scope.spawn(move || -> Result<Tally, RunError> {
                let mut books = books;
                for records in from_simulation {
                    let mut done = Vec::with_capacity(records.len());
                    books.account(records, &mut done)?;
                    // The simulation's end of this channel lives until the join, so this send
                    // cannot fail; batches it never took back are freed on its thread then.
                    let _ = to_simulation.send(done);
                }
                Ok(books.tally)
            });
            let simulated = simulate(cluster, scenario, observers, progress, &mut |records| {
                spent.try_iter().for_each(drop);
                // A closed channel means the books failed: the simulation stops, and the books'
                // error is the one reported.
                to_books.send(records).map_err(|_| RunError::Output("the calls' writer stopped".to_owned()))
            });
            drop(to_books);
            let tally = keeper.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
            Ok::<_, RunError>((simulated?, tally))
        })?,
    };
    Ok((simulated.into_run(seed, tally), observers))
}

/// What a replication produced besides its books.
struct Simulated {
    instances: Vec<InstanceRecord>,
    priced: RankShares,
    simulation: SimulationRecord,
    workloads: Vec<(String, Vec<RequestSpec>)>,
    resolved: serde_json::Value,
    identities: Vec<EngineIdentity>,
    expected_requests: Option<u64>,
    last_arrival_us: u64,
    stopped_overloaded_us: Option<u64>,
}

impl Simulated {
    /// The replication's whole record, with its seed and its books' tally.
    fn into_run(self, seed: u64, tally: Tally) -> ReplicationRun {
        let fates = tally.fates();
        debug_assert!(fates.conserved());
        ReplicationRun {
            seed,
            tally,
            fates,
            instances: self.instances,
            priced: self.priced,
            simulation: self.simulation,
            workloads: self.workloads,
            resolved: self.resolved,
            identities: self.identities,
            expected_requests: self.expected_requests,
            last_arrival_us: self.last_arrival_us,
            stopped_overloaded_us: self.stopped_overloaded_us,
        }
    }
}

/// Simulate an assembled replication to its end, handing every settled record to `account`
/// in file order.
fn simulate(
    cluster: crate::assembly::AssembledCluster,
    scenario: &Scenario,
    observers: Observers,
    progress: &mut dyn FnMut(Progress),
    account: &mut dyn FnMut(Vec<CallRecord>) -> Result<(), RunError>,
) -> Result<(Simulated, Observers), RunError> {
    let mut simulation = cluster.simulation;
    let counts = Rc::new(Cell::new(CallCounts::default()));
    let mut clients_sorted = cluster.clients.clone();
    clients_sorted.sort();
    simulation.observe(AnswerCounter { clients: clients_sorted, counts: counts.clone() });
    for observer in observers {
        simulation.observe_boxed(observer);
    }
    let total = cluster.expected_requests.unwrap_or(0);
    let horizon = match scenario.horizon_s {
        Some(h) => SimDuration::from_secs_ceil(h)
            .map(|d| SimTime::ZERO.saturating_add(d))
            .map_err(|e| RunError::Input(FieldError::new("horizon_s", h, e.to_string())))?,
        None => SimTime::MAX,
    };
    let mut watch = OverloadWatch::new();
    let mut stopped_overloaded_us = None;
    let end = loop {
        let slice = simulation.run_rounds(horizon, ROUNDS_PER_SLICE).map_err(RunError::Kernel)?;
        account(cluster.ledger.drain())?;
        if let Some(end) = slice {
            break end;
        }
        let now = simulation.now().time;
        let seen = counts.get();
        progress(Progress { simulated: now, answered: seen.answered, total });
        if watch.observe(now.as_micros() as f64 / 1e6, seen.outstanding()) {
            // Stop as at a horizon just before the next multiple of the grid: engines running
            // ahead in lanes never pass one, so every path stops in the same state.
            let next = now.next_multiple_of(OVERLOAD_STOP_GRID).as_micros();
            let stop = SimTime::from_micros(next - 1).min(horizon);
            let ended = simulation.run_until(stop).map_err(RunError::Kernel)?;
            account(cluster.ledger.drain())?;
            if let RunEnd::Horizon { .. } = ended {
                stopped_overloaded_us = Some(stop.as_micros());
            }
            break ended;
        }
    };
    if let RunEnd::Halted { at, actor, reason } = &end
        && actor.as_str() != "observer"
    {
        return Err(RunError::Stalled {
            instance: actor.clone(),
            at_us: at.as_micros(),
            reason: reason.clone(),
        });
    }
    let end_time = match end {
        RunEnd::Horizon { at } | RunEnd::Quiescent { at } | RunEnd::Halted { at, .. } => at,
    };
    let kernel_stats = simulation.stats();
    let mut finished = simulation.finish();
    let observers: Observers = finished.observers.drain(1..).collect();

    let mut engine_steps = 0;
    let mut priced = RankShares::default();
    let mut started = Vec::new();
    let mut instances = Vec::new();
    for &id in &cluster.engines {
        if let Some(host) = finished.take_actor::<EngineHost>(id) {
            let counters = host.engine().counters();
            let metrics = host.engine().metrics();
            let (kv_usage_mean, kv_usage_peak) = host.kv_usage(end_time);
            instances.push(InstanceRecord {
                name: host.name().to_owned(),
                steps: counters.steps,
                preemptions: counters.preemptions,
                prefix_cache_queries: metrics.prefix_cache_queries,
                prefix_cache_hits: metrics.prefix_cache_hits,
                kv_usage_mean,
                kv_usage_peak,
                offload: host.engine().offload_record(),
                disaggregation: host.disaggregation_record(),
                sglang: None,
            });
            engine_steps += counters.steps;
            priced.merge(host.priced());
            started.extend(host.engine().scheduler().held().filter(|&(_, s)| s).map(|(key, _)| key));
            started.extend_from_slice(host.answered());
            continue;
        }
        let host = finished.take_actor::<SglangHost>(id).expect("engine ids hold engine hosts");
        let counters = host.engine().counters();
        let record = host.record();
        let steps = record.extend_batches + record.decode_batches + record.mixed_batches;
        let (kv_usage_mean, kv_usage_peak) = host.kv_usage(end_time);
        instances.push(InstanceRecord {
            name: host.name().to_owned(),
            steps,
            preemptions: counters.retractions,
            prefix_cache_queries: counters.prompt_tokens,
            prefix_cache_hits: counters.cached_tokens,
            kv_usage_mean,
            kv_usage_peak,
            offload: None,
            disaggregation: None,
            sglang: Some(record),
        });
        engine_steps += steps;
        priced.merge(host.priced());
        started.extend(host.engine().held().filter(|&(_, s)| s).map(|(key, _)| key));
        started.extend_from_slice(host.answered());
    }
    started.sort_unstable();
    account(cluster.ledger.drain())?;
    let mut workloads = Vec::new();
    let mut last_arrival_us = 0;
    for &id in &cluster.clients {
        let mut client = finished.take_actor::<Client>(id).expect("client ids hold clients");
        if let Some(error) = client.source_error() {
            return Err(RunError::Input(error.clone()));
        }
        last_arrival_us = last_arrival_us.max(client.last_arrival_us());
        if let Some(released) = client.take_released() {
            workloads.push((client.name().to_owned(), released));
        }
        let unended = client.unended_records(|key| {
            if started.binary_search(&key).is_ok() { Fate::InFlightAtHorizon } else { Fate::QueuedAtHorizon }
        });
        account(unended)?;
    }
    let run = Simulated {
        instances,
        priced,
        simulation: SimulationRecord {
            end_time_us: end_time.as_micros(),
            engine_steps,
            rounds: kernel_stats.rounds,
            messages: kernel_stats.messages,
        },
        workloads,
        resolved: cluster.resolved,
        identities: cluster.identities,
        expected_requests: cluster.expected_requests,
        last_arrival_us,
        stopped_overloaded_us,
    };
    Ok((run, observers))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replication_seeds_are_fixed_and_distinct() {
        assert_eq!(replication_seed(7, 0), 7);
        let seeds: Vec<u64> = (0..50).map(|r| replication_seed(7, r)).collect();
        let mut sorted = seeds.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 50);
        assert_ne!(replication_seed(7, 1), replication_seed(8, 1));
    }
}
