//! The engine host: adapts one vLLM instance to messages and simulated time, as vLLM's engine
//! core loop drives it.
//!
//! Each step costs host (CPU) time — scheduling, preparing inputs, processing outputs — and
//! device time; the cost model prices both. The loop is vLLM's:
//!
//! - **Synchronous** (one step in flight): schedule at `t`, launch after the host time, wait for
//!   the device, apply the outputs at `t + host + device`, loop.
//! - **Asynchronous** (two in flight, `step_with_batch_queue`): schedule and launch; if the
//!   batch ran tokens, fewer than two are in flight and the oldest is still running, loop again
//!   at once (the next batch is scheduled while the device works, before the previous outputs
//!   are known); otherwise block until the oldest batch ends, apply its outputs, loop. The device
//!   runs batches one after another: a batch starts when both its inputs are ready and the
//!   previous batch is done.
//!
//! Requests arriving while the loop is busy join at its next `schedule()`. A request arriving
//! exactly when outputs are applied joins after them (outputs first, then arrivals, then the
//! next schedule — the order of vLLM's loop).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use blis_contracts::{Disaggregated, Endpoint, Rank, RankShares, StepGraph, StepMode};
use blis_engines::vllm::connector::KvTransferParams;
use blis_engines::vllm::{EngineRequest, FinishedRequest, KvEvent, SchedulerEvent, VllmEngine};
use blis_kernel::{
    Actor, ActorId, Bag, Context, Description, Event, KeyTable, Outbox, SimDuration, SimTime, TimeAdvance,
};

use blis_router::Scrape;
use blis_router::precise_prefix::KvEventBatch;

use crate::instance::{ApiServer, UsageMeter, ceil_micros, next_act, step_times};
use crate::message::{
    CallAbort, CallCompletion, CallRejection, CallRequest, ClusterMessage, KvNotify, PdLeg, TransferStart,
};

/// vLLM's engine core sleeps this long after a step that ran no model while requests are
/// unfinished (`_process_engine_step`: a request waiting for its KV, say), µs.
const IDLE_POLL_US: u64 = 1_000;

/// A scheduled step that waits, before it can run, for the stores of the requests it preempted
/// (the offloading worker's `handle_preemptions` blocks on them).
#[derive(Clone, Copy, Debug)]
struct HeldLaunch {
    ready: SimTime,
    device: SimDuration,
    ran_tokens: bool,
}

/// Where an instance's copy jobs go: the fabric, and the instance's two ends.
#[derive(Clone, Copy, Debug)]
pub struct FabricWiring {
    /// The fabric actor.
    pub fabric: ActorId,
    /// The instance's GPUs.
    pub gpus: Endpoint,
    /// Its node's host memory.
    pub host: Endpoint,
}

/// The bit that marks a NIXL read's transfer id (copy jobs' ids, the engine's, stay below it).
const READ_ID_BIT: u64 = 1 << 63;

/// How a NIXL instance reaches its peers: the decode sidecar's legs and NIXL's reads and
/// notifications.
#[derive(Clone, Debug)]
pub struct PdWiring {
    /// The instance's own host (where a prefill instance answers the sidecar's prefill leg).
    pub me: ActorId,
    /// One-way delay between two pods (the sidecar's HTTP legs, NIXL's notifications).
    pub pod_delay: SimDuration,
    /// Every NIXL instance of the cluster by its engine id: its host and its GPUs.
    pub peers: BTreeMap<Arc<str>, (ActorId, Endpoint)>,
}

/// A NIXL read the decode instance's worker started, carried by the fabric.
#[derive(Clone, Debug)]
struct Read {
    /// The decode instance's request.
    key: u64,
    /// The prefill instance's host, and its request.
    prefill: ActorId,
    remote_request_key: u64,
    bytes: u64,
    started: SimTime,
}

/// Prefill/decode disaggregation on a NIXL instance: llm-d's decode sidecar in front of it (the
/// decode side), and the answers to other sidecars' prefill legs (the prefill side).
struct PdSide {
    wiring: PdWiring,
    /// Calls whose prefill leg is out, by key: the call as the router sent it, and the prefill
    /// instance's host.
    prefilling: BTreeMap<u64, (Box<CallRequest>, ActorId)>,
    /// Disaggregated calls on the decode side, by key: their record so far, and the prompt
    /// tokens the prefill instance found cached (what the sidecar reports as the call's).
    records: BTreeMap<u64, (Disaggregated, u32)>,
    /// Reads in flight, by transfer id.
    reads: BTreeMap<u64, Read>,
    next_read: u64,
    /// Prefill legs on the prefill side, by key: the sidecar that sent each.
    legs: BTreeMap<u64, ActorId>,
    /// Disaggregated calls aborted here before their read, during it and after it.
    aborts: [u64; 3],
    /// Prefill legs answered here.
    legs_answered: u64,
    /// Calls served disaggregated here as the decode side, reads completed, bytes read.
    decoded: u64,
    reads_done: u64,
    bytes_read: u64,
}

/// What the engine loop does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Loop {
    /// Nothing to do until a request arrives.
    Idle,
    /// At the top of the loop at this time: schedule if there is anything to schedule.
    Top(SimTime),
    /// Blocked until the oldest in-flight batch ends at this time.
    Await(SimTime),
    /// A scheduled step waits for copy jobs (a preemption's stores) before it runs.
    Held,
}

/// One engine instance.
pub struct EngineHost {
    name: Arc<str>,
    router: ActorId,
    delay_to_router: SimDuration,
    engine: VllmEngine,
    steps_in_flight: usize,
    next: Loop,
    device_free: SimTime,
    batch_ends: VecDeque<SimTime>,
    last_transition: SimTime,
    clients: KeyTable<ActorId>,
    /// Requests whose first token the router wants to hear of, not yet produced.
    first_token_pending: BTreeSet<u64>,
    finished: Vec<FinishedRequest>,
    /// Keys of the requests answered, kept only when the run stops at a horizon (they tell an
    /// answer still travelling from a request never scheduled).
    answered: Option<Vec<u64>>,
    aborted: u64,
    /// Requests in the API server.
    api_server: ApiServer,
    priced: RankShares,
    /// The KV usage over the run.
    kv_usage: UsageMeter,
    /// Where the step's KV events go, when the router reads them.
    kv_events: Option<KvEventsOut>,
    /// Where copy jobs go, when the instance offloads.
    fabric: Option<FabricWiring>,
    /// A step waiting for a preemption's stores.
    held_launch: Option<HeldLaunch>,
    /// Prefill/decode disaggregation, when the instance runs NIXL.
    pd: Option<Box<PdSide>>,
    /// Whether to run ahead through the next steps when the coordinator offers it.
    run_ahead: bool,
}

/// How an engine publishes its KV events: one batch per step that recorded any, to the router,
/// after the network delay plus the configured publishing lag.
struct KvEventsOut {
    delay: SimDuration,
    block_size: u32,
    /// vLLM's medium for its own cache, `GPU`.
    medium: Arc<str>,
}

impl EngineHost {
    /// A host for `engine`, named `name`, answering through `router`; it keeps the keys of the
    /// requests it answered if `keep_answered` (a run with a horizon needs them).
    pub fn new(
        name: &str,
        engine: VllmEngine,
        router: ActorId,
        delay_to_router: SimDuration,
        keep_answered: bool,
    ) -> EngineHost {
        let steps_in_flight = engine.plan().pool.steps_in_flight.max(1) as usize;
        EngineHost {
            name: Arc::from(name),
            router,
            delay_to_router,
            engine,
            steps_in_flight,
            next: Loop::Idle,
            device_free: SimTime::ZERO,
            batch_ends: VecDeque::new(),
            last_transition: SimTime::ZERO,
            clients: KeyTable::new(),
            first_token_pending: BTreeSet::new(),
            finished: Vec::new(),
            answered: keep_answered.then(Vec::new),
            aborted: 0,
            api_server: ApiServer::default(),
            priced: RankShares::default(),
            kv_usage: UsageMeter::default(),
            kv_events: None,
            fabric: None,
            held_launch: None,
            pd: None,
            run_ahead: true,
        }
    }

    /// Run ahead through the next steps when the coordinator offers it (the default), or
    /// take every step in a round of its own (the faithful reference path).
    pub fn set_run_ahead(&mut self, on: bool) {
        self.run_ahead = on;
    }

    /// Take part in prefill/decode disaggregation over `wiring` (a NIXL instance; it needs the
    /// fabric too, for its reads).
    pub fn disaggregate(&mut self, wiring: PdWiring) {
        self.pd = Some(Box::new(PdSide {
            wiring,
            prefilling: BTreeMap::new(),
            records: BTreeMap::new(),
            reads: BTreeMap::new(),
            next_read: 0,
            legs: BTreeMap::new(),
            aborts: [0; 3],
            legs_answered: 0,
            decoded: 0,
            reads_done: 0,
            bytes_read: 0,
        }));
    }

    /// Disaggregation's totals here: calls decoded with a prefill leg, reads completed, KV bytes
    /// read (all 0 on an instance without NIXL).
    pub fn pd_totals(&self) -> (u64, u64, u64) {
        self.pd.as_ref().map_or((0, 0, 0), |pd| (pd.decoded, pd.reads_done, pd.bytes_read))
    }

    /// What the instance did for disaggregation over the run (none without NixlConnector).
    pub fn disaggregation_record(&self) -> Option<blis_contracts::DisaggregationRecord> {
        let pd = self.pd.as_ref()?;
        let (_, _, expired) = self.engine.nixl_totals().unwrap_or_default();
        Some(blis_contracts::DisaggregationRecord {
            prefill_legs: pd.legs_answered,
            decoded: pd.decoded,
            reads: pd.reads_done,
            bytes_read: pd.bytes_read,
            holds_expired: expired,
            aborts_by_phase: pd.aborts,
        })
    }

    /// Disaggregated calls aborted on this decode instance before their KV read, during it and
    /// after it.
    pub fn pd_aborts(&self) -> [u64; 3] {
        self.pd.as_ref().map_or([0; 3], |pd| pd.aborts)
    }

    /// Hand the reads the decode worker started to the fabric, each starting `delay` from now
    /// (when the step that issues it starts); a read of nothing (the decode request gone before
    /// it was admitted) is only the notification that the prefill side may free its blocks.
    fn send_pulls(&mut self, now: SimTime, delay: SimDuration, out: &mut Outbox<ClusterMessage>) {
        let pulls = self.engine.take_pulls();
        if pulls.is_empty() {
            return;
        }
        let pd = self.pd.as_mut().expect("only a NIXL instance reads");
        let wiring = self.fabric.expect("a NIXL instance is placed on the fabric");
        for pull in pulls {
            let &(prefill, from) = pd
                .wiring
                .peers
                .get(&pull.remote_engine_id)
                .expect("a read names the engine id of an instance that returned it");
            if pull.bytes == 0 || pull.local_blocks == 0 {
                let notify = KvNotify { remote_request_key: pull.remote_request_key };
                out.send(prefill, pd.wiring.pod_delay, ClusterMessage::KvNotify(notify));
                self.engine.pull_done(pull.key);
                continue;
            }
            let id = READ_ID_BIT | pd.next_read;
            pd.next_read += 1;
            let started = now.saturating_add(delay);
            pd.reads.insert(
                id,
                Read {
                    key: pull.key,
                    prefill,
                    remote_request_key: pull.remote_request_key,
                    bytes: pull.bytes,
                    started,
                },
            );
            if let Some(notes) = out.notes() {
                notes.decision("transfers", "kv-read").arg("request", pull.key).arg("bytes", pull.bytes);
            }
            let start = TransferStart { id, from, to: wiring.gpus, bytes: pull.bytes };
            out.send(wiring.fabric, delay, ClusterMessage::TransferStart(Box::new(start)));
        }
    }

    /// A read's last byte arrived: the worker reports it at its next poll, and NIXL notifies
    /// the prefill instance, which frees its blocks.
    fn read_done(&mut self, id: u64, now: SimTime, out: &mut Outbox<ClusterMessage>) {
        let pd = self.pd.as_mut().expect("only a NIXL instance reads");
        let read = pd.reads.remove(&id).expect("a finished read was started here");
        pd.reads_done += 1;
        pd.bytes_read += read.bytes;
        if let Some((record, _)) = pd.records.get_mut(&read.key) {
            record.kv_bytes = read.bytes;
            record.transfer_us = Some(now.as_micros() - read.started.as_micros());
        }
        let notify = KvNotify { remote_request_key: read.remote_request_key };
        out.send(read.prefill, pd.wiring.pod_delay, ClusterMessage::KvNotify(notify));
        self.engine.pull_done(read.key);
        self.wake(now);
    }

    /// Start the loop if it is idle and the engine has something to do.
    fn wake(&mut self, now: SimTime) {
        if self.next == Loop::Idle && self.engine.has_requests() {
            self.next = Loop::Top(now);
        }
    }

    /// The decode sidecar takes a call the router sent with a prefill instance: it sends the
    /// prefill leg (the same prompt, one output token, `do_remote_decode`) and keeps the call
    /// for the decode leg. Returns the call back when it is to run here alone.
    fn sidecar(
        &mut self,
        call: Box<CallRequest>,
        out: &mut Outbox<ClusterMessage>,
    ) -> Option<Box<CallRequest>> {
        let Some(PdLeg::Prefiller { engine, name }) = &call.pd else { return Some(call) };
        let (engine, name) = (*engine, name.clone());
        let Some(pd) = self.pd.as_mut() else { return Some(call) };
        if engine == pd.wiring.me || *name == *self.name {
            // Picked as its own prefiller: vLLM would read from itself; it prefills locally.
            let mut call = call;
            call.pd = None;
            return Some(call);
        }
        let request = &call.request;
        let leg = CallRequest {
            client: call.client,
            request: EngineRequest {
                output_token_ids: Arc::from(
                    &request.output_token_ids[..request.output_token_ids.len().min(1)],
                ),
                ..request.clone()
            },
            model: call.model.clone(),
            report_first_token: false,
            fairness_id: call.fairness_id.clone(),
            slo_ttft_ms: call.slo_ttft_ms,
            pd: Some(PdLeg::PrefillLeg { sidecar: pd.wiring.me }),
            // Its one output token is not the call's: its keys would not match.
            keys_ahead: None,
            digests_ahead: None,
        };
        if let Some(notes) = out.notes() {
            notes.decision("decisions", "prefill-leg").arg("request", request.key).arg("prefiller", &*name);
        }
        out.send(engine, pd.wiring.pod_delay, ClusterMessage::Request(Box::new(leg)));
        pd.prefilling.insert(call.request.key, (call, engine));
        None
    }

    /// The prefill leg of a call came back to this sidecar: the decode leg enters this
    /// instance's API server with the `kv_transfer_params` the prefill instance returned (or, if
    /// it returned none, the call runs here alone); a refusal goes back to the client.
    fn prefill_answered(
        &mut self,
        answer: ClusterMessage,
        out: &mut Outbox<ClusterMessage>,
    ) -> Option<Box<CallRequest>> {
        let pd = self.pd.as_mut()?;
        // A leg whose call was given up on meanwhile: the prefill instance holds its blocks until
        // they expire, as upstream (nobody will read them).
        let (mut call, _) = pd.prefilling.remove(&answer.key())?;
        match answer {
            ClusterMessage::Completion(m) => {
                let record = Disaggregated {
                    prefill_instance: m.instance.to_string(),
                    kv_bytes: 0,
                    transfer_us: None,
                };
                pd.records.insert(call.request.key, (record, m.cached_tokens));
                pd.decoded += 1;
                call.pd = m.kv_transfer.map(PdLeg::DecodeLeg);
                Some(call)
            }
            ClusterMessage::Rejection(m) => {
                out.send(self.router, self.delay_to_router, ClusterMessage::Rejection(m));
                None
            }
            _ => None,
        }
    }

    /// Carry the instance's KV copy jobs over `wiring` (an offloading instance needs it).
    pub fn carry_transfers(&mut self, wiring: FabricWiring) {
        self.fabric = Some(wiring);
    }

    /// Hand the copy jobs the engine submitted to the fabric.
    fn send_copy_jobs(&mut self, out: &mut Outbox<ClusterMessage>) {
        let jobs = self.engine.take_copy_jobs();
        let Some(wiring) = self.fabric else { return };
        for job in jobs {
            let (from, to) = if job.store { (wiring.gpus, wiring.host) } else { (wiring.host, wiring.gpus) };
            let start = TransferStart { id: job.id, from, to, bytes: job.bytes };
            out.send(wiring.fabric, SimDuration::ZERO, ClusterMessage::TransferStart(Box::new(start)));
        }
    }

    /// Publish the engine's KV events to the router, each step's batch arriving `lag` after the
    /// network delay (vLLM's `--kv-events-config`, for a router that indexes them).
    pub fn publish_kv_events(&mut self, lag: SimDuration) {
        self.engine.set_record_kv_events(true);
        let block_size = self.engine.plan().config.block_size;
        self.kv_events = Some(KvEventsOut {
            delay: SimDuration::from_micros(self.delay_to_router.as_micros().saturating_add(lag.as_micros())),
            block_size,
            medium: Arc::from("GPU"),
        });
    }

    /// The instance's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The engine.
    pub fn engine(&self) -> &VllmEngine {
        &self.engine
    }

    /// Priced step time so far, by the rank of the coefficients that priced it.
    pub fn priced(&self) -> &RankShares {
        &self.priced
    }

    /// Time average of the KV usage from the start to `end`, and its peak.
    pub fn kv_usage(&self, end: SimTime) -> (f64, f64) {
        self.kv_usage.mean_and_peak(self.engine.scheduler().kv().pool().usage(), end)
    }

    /// What a scrape of `/metrics` reads now: vLLM's gauges as of its latest step, and
    /// `vllm:cache_config_info`.
    fn scrape(&self) -> Scrape {
        let metrics = self.engine.metrics();
        Scrape {
            samples: metrics.samples().iter().map(|&(name, value)| (name.into(), value)).collect(),
            cache_config: Some((
                u64::from(metrics.cache_config.block_size),
                metrics.cache_config.num_gpu_blocks,
            )),
        }
    }

    /// Keys of the requests this instance finished and answered (none unless kept).
    pub fn answered(&self) -> &[u64] {
        self.answered.as_deref().unwrap_or_default()
    }

    fn accept(&mut self, message: ClusterMessage, now: SimTime, out: &mut Outbox<ClusterMessage>) {
        match message {
            ClusterMessage::Request(call) => {
                if let Some(call) = self.sidecar(call, out) {
                    self.send_to_frontend(call, now, out);
                }
            }
            // Only a sidecar is answered by an engine: its prefill legs.
            answer @ (ClusterMessage::Completion(_) | ClusterMessage::Rejection(_)) => {
                if let Some(call) = self.prefill_answered(answer, out) {
                    self.send_to_frontend(call, now, out);
                }
            }
            ClusterMessage::KvNotify(notify) => {
                self.engine.notify_sent(notify.remote_request_key);
                self.wake(now);
            }
            ClusterMessage::Abort(abort) => self.abort(abort, now, out),
            ClusterMessage::Scrape => {
                out.send(self.router, self.delay_to_router, ClusterMessage::Metrics(Box::new(self.scrape())));
            }
            ClusterMessage::TransferDone(done) if done.id & READ_ID_BIT != 0 => {
                self.read_done(done.id, now, out)
            }
            ClusterMessage::TransferDone(done) => {
                self.engine.job_done(done.id);
                if let Some(held) = self.held_launch
                    && !self.engine.waiting_for_jobs()
                {
                    self.held_launch = None;
                    self.next = self.run_step(now, held, out);
                }
            }
            ClusterMessage::FirstToken(_)
            | ClusterMessage::Metrics(_)
            | ClusterMessage::KvEvents(_)
            | ClusterMessage::ClientDone
            | ClusterMessage::TransferCancel(_)
            | ClusterMessage::TransferStart(_) => {}
        }
    }

    /// A request enters the API server, which works on it first (HTTP, tokenization).
    fn send_to_frontend(&mut self, call: Box<CallRequest>, now: SimTime, out: &mut Outbox<ClusterMessage>) {
        if let Some(PdLeg::PrefillLeg { sidecar }) = call.pd
            && let Some(pd) = self.pd.as_mut()
        {
            pd.legs.insert(call.request.key, sidecar);
        }
        let delay = self.engine.frontend_micros(call.request.prompt_token_ids.len() as u32);
        let ready = match ceil_micros(delay) {
            Ok(delay) => now.saturating_add(delay),
            Err(unpriceable) => return out.halt(format!("{}: {unpriceable}", self.name)),
        };
        if ready > now {
            self.api_server.enter(call, ready);
            return;
        }
        self.admit(&call, now, out);
    }

    /// A call its client gave up on. The decode sidecar cancels a prefill leg still out (vLLM
    /// aborts it on the prefill instance, freeing its blocks); a read already started still runs
    /// to its end and notifies the prefill instance, as NIXL's does.
    fn abort(&mut self, abort: CallAbort, now: SimTime, out: &mut Outbox<ClusterMessage>) {
        // Where a disaggregated call stood: 0 before its read (prefill leg, decode leg in the
        // API server, parked), 1 during it, 2 after it (decoding).
        let mut phase = None;
        if let Some(pd) = self.pd.as_mut() {
            let record = pd.records.remove(&abort.key);
            if let Some((_, prefill)) = pd.prefilling.remove(&abort.key) {
                pd.aborts[0] += 1;
                out.send(prefill, pd.wiring.pod_delay, ClusterMessage::Abort(abort));
                return;
            }
            pd.legs.remove(&abort.key);
            phase = record.map(|(r, _)| {
                if pd.reads.values().any(|read| read.key == abort.key) {
                    1
                } else if r.transfer_us.is_some() {
                    2
                } else {
                    0
                }
            });
        }
        // A request still in the API server never reaches the engine.
        if self.api_server.cancel(abort.key) {
            if let (Some(pd), Some(_)) = (self.pd.as_mut(), phase) {
                pd.aborts[0] += 1;
            }
            return;
        }
        // vLLM frees an aborted request's blocks at once; a request already finished (its
        // answer on the way) is unknown to the scheduler and nothing happens.
        if self.engine.abort(abort.key).is_some() {
            self.clients.remove(abort.key);
            self.first_token_pending.remove(&abort.key);
            self.aborted += 1;
            if let Some(notes) = out.notes() {
                notes.phase_end("request", abort.key);
                notes.phase_begin("request", abort.key, "aborted");
            }
            if let (Some(pd), Some(phase)) = (self.pd.as_mut(), phase) {
                pd.aborts[phase] += 1;
            }
            // NIXL's side of an abort (a notification owed to the prefill instance) is sent at
            // the engine's next step.
            if self.engine.nixl() {
                self.wake(now);
            }
        }
    }

    /// Hand a request to the engine (or refuse it as the API server would).
    fn admit(&mut self, call: &CallRequest, now: SimTime, out: &mut Outbox<ClusterMessage>) {
        let key = call.request.key;
        let added = match &call.pd {
            Some(PdLeg::PrefillLeg { .. }) => {
                self.engine.add_request_with_transfer(&call.request, KvTransferParams::prefill_leg())
            }
            Some(PdLeg::DecodeLeg(params)) => {
                self.engine.add_request_with_transfer(&call.request, KvTransferParams::clone(params))
            }
            Some(PdLeg::Prefiller { .. }) | None => match &call.keys_ahead {
                Some(ahead) => self.engine.add_request_with_keys(&call.request, ahead),
                None => self.engine.add_request(&call.request),
            },
        };
        match added {
            Ok(()) => {
                self.clients.insert(key, call.client);
                if call.report_first_token {
                    self.first_token_pending.insert(key);
                }
                if self.next == Loop::Idle {
                    self.next = Loop::Top(now);
                }
            }
            Err(rejection) => {
                let answer = CallRejection {
                    key,
                    client: call.client,
                    instance: self.name.clone(),
                    reason: rejection.reason().to_owned(),
                };
                let (to, delay) = self.answer_to(key);
                out.send(to, delay, ClusterMessage::Rejection(Box::new(answer)));
            }
        }
    }

    /// Where the answer for `key` goes: a prefill leg's to its sidecar (forgotten here), any
    /// other's to the router.
    fn answer_to(&mut self, key: u64) -> (ActorId, SimDuration) {
        if let Some(pd) = self.pd.as_mut()
            && let Some(sidecar) = pd.legs.remove(&key)
        {
            pd.legs_answered += 1;
            return (sidecar, pd.wiring.pod_delay);
        }
        (self.router, self.delay_to_router)
    }

    /// Apply the outputs of the oldest batch, which ended at `now`, and answer for the requests
    /// it finished.
    fn complete(&mut self, now: SimTime, out: &mut Outbox<ClusterMessage>) {
        self.batch_ends.pop_front();
        self.engine.complete_oldest(now.as_micros(), &mut self.finished);
        // Under asynchronous scheduling the next batch's copies (and reads) start as this one
        // ends.
        self.send_copy_jobs(out);
        if self.pd.is_some() {
            self.send_pulls(now, SimDuration::ZERO, out);
        }
        if !self.first_token_pending.is_empty() {
            for &(key, token) in &self.engine.last_update().tokens {
                if token.is_some() && self.first_token_pending.remove(&key) {
                    let client = *self.clients.get(key).expect("a request accepted here has a client");
                    out.send(
                        self.router,
                        self.delay_to_router,
                        ClusterMessage::FirstToken(CallAbort { key, client }),
                    );
                }
            }
        }
        self.publish(now, out);
        if self.finished.is_empty() {
            return;
        }
        let mut finished = std::mem::take(&mut self.finished);
        for done in finished.drain(..) {
            let client = self.clients.remove(done.key).expect("a finished request was accepted here");
            if let Some(answered) = &mut self.answered {
                answered.push(done.key);
            }
            // llm-d's sidecar reports the prefill instance's cached tokens in the usage (#916).
            let (disaggregated, cached_tokens) =
                match self.pd.as_mut().and_then(|pd| pd.records.remove(&done.key)) {
                    Some((record, cached)) => (Some(Box::new(record)), cached),
                    None => (None, done.num_cached_tokens),
                };
            let answer = CallCompletion {
                key: done.key,
                client,
                instance: self.name.clone(),
                token_times_us: done.token_times_us,
                num_preemptions: done.num_preemptions,
                cached_tokens,
                kv_transfer: done.kv_transfer.map(Box::new),
                disaggregated,
            };
            let (to, delay) = self.answer_to(done.key);
            out.send(to, delay, ClusterMessage::Completion(Box::new(answer)));
        }
        self.finished = finished;
    }

    /// Send the KV events the update just applied published, as one `KVEventBatch` stamped
    /// `now` (vLLM publishes none for a step without events).
    fn publish(&mut self, now: SimTime, out: &mut Outbox<ClusterMessage>) {
        let Some(publish) = &self.kv_events else { return };
        let events = &self.engine.last_update().kv_events;
        if events.is_empty() {
            return;
        }
        let (hashes, tokens) = events.iter().fold((0, 0), |(h, t), e| match e {
            KvEvent::BlockStored { hashes, tokens, .. } => (h + hashes.len as usize, t + tokens.len as usize),
            KvEvent::BlockRemoved { .. } => (h + 1, t),
        });
        let mut batch = KvEventBatch::with_capacity(now.as_micros(), events.len(), hashes, tokens);
        for event in events.iter() {
            match *event {
                KvEvent::BlockStored { hashes, parent, tokens, .. } => batch.push_stored(
                    events.hashes(hashes),
                    parent,
                    events.tokens(tokens),
                    publish.block_size,
                    Some(publish.medium.clone()),
                ),
                KvEvent::BlockRemoved { hash } => batch.push_removed(&[hash], Some(publish.medium.clone())),
            }
        }
        out.send(self.router, publish.delay, ClusterMessage::KvEvents(Box::new(batch)));
    }

    /// Schedule and launch one batch at `now`; returns when the loop comes back to its top
    /// (`Top`) or what it blocks on (`Await`, or `Held` while a preemption's stores finish).
    fn launch(&mut self, now: SimTime, out: &mut Outbox<ClusterMessage>) -> Loop {
        let (price, shape) = self.engine.schedule();
        self.priced.merge(&price.by_rank);
        let ran_tokens = shape.totals.requests > 0;
        let (host, device) = match step_times(&price) {
            Ok(times) => times,
            Err(unpriceable) => {
                out.halt(format!("{}: {unpriceable}", self.name));
                return Loop::Idle;
            }
        };
        let ready = now.saturating_add(host);
        let t = shape.totals;
        tracing::debug!(engine = %self.name, requests = t.requests, tokens = t.new_tokens, "step");
        if ran_tokens && let Some(notes) = out.notes() {
            let mode = match shape.mode() {
                StepMode::Mixed => "mixed",
                StepMode::DecodeOnly => "decode-only",
            };
            let graph = match shape.graph {
                StepGraph::Eager => "eager",
                StepGraph::Piecewise => "piecewise",
                StepGraph::Full => "full",
            };
            let start = ready.max(self.device_free);
            notes
                .span(
                    "steps",
                    "step",
                    start,
                    start.saturating_add(device).max(now.saturating_add(SimDuration::from_micros(1))),
                )
                .arg("requests", u64::from(t.requests))
                .arg("prefill_requests", u64::from(t.prefill_requests))
                .arg("prefill_tokens", t.prefill_tokens)
                .arg("decode_tokens", u64::from(t.decode_requests))
                .arg("padded_tokens", shape.padded_tokens)
                .arg("graph", graph)
                .arg("mode", mode)
                .arg("priced_us", price.micros)
                .arg("host_us", price.host_micros)
                .arg("rank", dominant_rank(&price.by_rank));
        }
        self.send_copy_jobs(out);
        if self.pd.is_some() {
            // NIXL's reads start with the step's execution (`start_load_kv`).
            self.send_pulls(now, SimDuration::from_micros(ready.as_micros() - now.as_micros()), out);
        }
        let held = HeldLaunch { ready, device, ran_tokens };
        if self.engine.waiting_for_jobs() {
            self.held_launch = Some(held);
            return Loop::Held;
        }
        self.run_step(now, held, out)
    }

    /// Run a scheduled step on the device once it may start; returns what the loop does next.
    fn run_step(&mut self, now: SimTime, step: HeldLaunch, out: &mut Outbox<ClusterMessage>) -> Loop {
        let HeldLaunch { ready, device, ran_tokens } = step;
        let _ = out;
        let start = ready.max(self.device_free).max(now);
        // A step always takes time, so the loop cannot spin at one instant.
        let end = start.saturating_add(device).max(now.saturating_add(SimDuration::from_micros(1)));
        if ran_tokens {
            self.device_free = end;
        }
        // vLLM sleeps 1 ms after a step that ran no model while requests are unfinished (one
        // waiting for its KV, say); only an offloading or NIXL instance can be in that state
        // without either preempting or being stalled.
        let ready = if !ran_tokens
            && (self.engine.offloads() || self.engine.nixl())
            && self.engine.has_unfinished()
        {
            ready.max(now).saturating_add(SimDuration::from_micros(IDLE_POLL_US))
        } else {
            ready
        };
        self.batch_ends.push_back(if ran_tokens { end } else { ready });
        let oldest_end = self.batch_ends[0];
        if ran_tokens && self.batch_ends.len() < self.steps_in_flight && oldest_end > ready {
            Loop::Top(ready)
        } else {
            Loop::Await(oldest_end.max(ready))
        }
    }

    /// Run the loop at `now` until it waits for a later time or for a request.
    fn run_loop(&mut self, now: SimTime, out: &mut Outbox<ClusterMessage>) {
        loop {
            match self.next {
                Loop::Idle | Loop::Held => return,
                Loop::Top(at) | Loop::Await(at) if at > now => return,
                Loop::Await(_) => {
                    self.complete(now, out);
                    self.next = Loop::Top(now);
                }
                Loop::Top(_) => {
                    if self.engine.stall().is_some() {
                        return;
                    }
                    self.next = if self.engine.has_requests() {
                        self.launch(now, out)
                    } else if let Some(&oldest_end) = self.batch_ends.front() {
                        Loop::Await(oldest_end.max(now))
                    } else {
                        Loop::Idle
                    };
                }
            }
        }
    }

    /// One transition at `now`, with the messages of `bag` if any.
    fn act(&mut self, now: SimTime, bag: Option<Bag<'_, ClusterMessage>>, out: &mut Outbox<ClusterMessage>) {
        // The usage held since the last transition.
        self.kv_usage.observe(self.engine.scheduler().kv().pool().usage(), now);
        // Outputs due now are applied before the arrivals join.
        if let Loop::Await(at) = self.next
            && at <= now
        {
            self.complete(now, out);
            self.next = Loop::Top(now);
        }
        if let Some(bag) = bag {
            for envelope in bag {
                self.accept(envelope.payload, now, out);
            }
        }
        // Requests leaving the API server now, in the order they entered it.
        while let Some(call) = self.api_server.leave(now) {
            self.admit(&call, now, out);
        }
        self.run_loop(now, out);
        if let Some(stall) = self.engine.stall() {
            out.halt(format!("{}: {stall}", self.name));
            self.next = Loop::Idle;
        }
        self.note(out);
        self.engine.clear_events();
        self.last_transition = now;
    }

    /// When the host next acts on its own (the engine loop's time or the API server's next
    /// exit), if it will.
    fn next_internal(&self) -> Option<SimTime> {
        let engine = match self.next {
            Loop::Idle | Loop::Held => None,
            Loop::Top(at) | Loop::Await(at) => Some(at),
        };
        next_act(engine, self.api_server.next_exit())
    }

    /// Note the requests' phase changes of this transition and the engine's counters.
    fn note(&self, out: &mut Outbox<ClusterMessage>) {
        let Some(notes) = out.notes() else { return };
        for &(key, event) in self.engine.events() {
            notes.phase_end("request", key);
            let next = match event {
                SchedulerEvent::Admitted { .. } => "prefill",
                SchedulerEvent::Preempted => "preempted",
                SchedulerEvent::PrefillDone => "decode",
                SchedulerEvent::Finished => "returning",
            };
            notes.phase_begin("request", key, next);
        }
        let scheduler = self.engine.scheduler();
        notes.counter("engine", "running", scheduler.num_running() as f64);
        notes.counter("engine", "waiting", scheduler.num_waiting() as f64);
        notes.counter("engine", "kv_usage", scheduler.kv().pool().usage());
        let metrics = self.engine.metrics();
        if metrics.prefix_cache_queries > 0 {
            notes.counter("engine", "prefix_hit_rate", metrics.prefix_cache_hit_rate());
        }
    }
}

impl Actor<ClusterMessage> for EngineHost {
    fn time_advance(&self) -> TimeAdvance {
        match self.next_internal() {
            Some(at) => TimeAdvance::until(self.last_transition, at),
            None => TimeAdvance::Passive,
        }
    }

    fn transition(
        &mut self,
        ctx: &Context,
        event: Event<'_, ClusterMessage>,
        out: &mut Outbox<ClusterMessage>,
    ) {
        let mut bag = match event {
            Event::Internal => None,
            Event::External(bag) | Event::Confluent(bag) => Some(bag),
        };
        let mut now = ctx.now.time;
        loop {
            self.act(now, bag.take(), out);
            // The next step, while the coordinator says nothing else happens before it: the
            // internal transition its own round would have made.
            if !(self.run_ahead && out.run_ahead_offered()) {
                return;
            }
            match self.next_internal() {
                Some(next) if out.run_ahead_to(next) => now = next,
                _ => return,
            }
        }
    }

    fn check(&self, violations: &mut Vec<String>) {
        self.engine.check_invariants(violations);
        for (key, _) in self.engine.scheduler().held() {
            if !self.clients.contains_key(key) {
                violations.push(format!("I4 request {key} is held with no client to answer"));
            }
        }
    }

    fn describe(&self, description: &mut Description) {
        let scheduler = self.engine.scheduler();
        let pool = scheduler.kv().pool();
        description.arg("running", scheduler.num_running());
        description.arg("waiting", scheduler.num_waiting());
        description.arg("in_flight", self.engine.in_flight());
        description.arg("aborted", self.aborted);
        description.arg("kv_blocks_total", u64::from(pool.num_blocks()));
        description.arg("kv_blocks_free", u64::from(pool.num_free()));
        description.arg("kv_blocks_held", scheduler.blocks_held());
        description.arg("kv_usage", pool.usage());
        for (name, value) in self.engine.metrics().samples() {
            description.arg(name, value);
        }
    }
}

/// The rank that priced most of a step.
fn dominant_rank(shares: &RankShares) -> &'static str {
    Rank::ALL
        .iter()
        .max_by(|a, b| shares.get(**a).total_cmp(&shares.get(**b)))
        .map_or("roofline", |r| r.as_str())
}
