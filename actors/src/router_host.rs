//! The router host: adapts a router — llm-d's ([`blis_router::Router`]) or the round-robin
//! baseline — to messages and simulated time.
//!
//! Requests from clients go to the endpoint the router picks among those serving the request's
//! model; completions and rejections pass back through to their client (releasing the router's
//! in-flight state as upstream's response hooks do); an abort goes to the engine the call was
//! sent to. llm-d's router learns of the engines only by scrape: each endpoint is scraped on the
//! metrics source's interval, on its own phase (drawn once per endpoint), by a message the engine
//! answers with its Prometheus gauges, so every decision rests on figures as old as the last
//! scrape that came back. With llm-d's `flowControl` gate on, a request first waits in its pool's
//! flow controller (`blis_router::flow_control`): the host offers it on arrival, runs the
//! dispatch cycle after each arrival and on every whole millisecond while anything waits,
//! answers TTL expiries at their deadlines, sweeps finalized items every second, and schedules
//! each dispatched request at once — all in its own time advance, no extra message kind.
//! Scraping stops once every client has said it is done and nothing waits in flow control.
//! With `enableEviction`, a dispatched call is tracked until its answer passes back; when the
//! controller revokes it, the host aborts it at its engine (as a client's abort is forwarded),
//! answers its client 429 `evicted` at once, and drops whatever the engine still sends for it.
//! The revocation is confirmed at that instant: upstream confirms when the request's ext_proc
//! stream ends, which the same handler that sends the 429 does.
//!
//! Sessions: every call carries the header `x-session-id` naming its workload request (a
//! multi-turn conversation is one request, so all its turns share it), and echoes the session
//! tokens the router wrote on the previous response of the same request, as a client keeping
//! its session headers does. Headers are built only when a configured plugin reads them.
//!
//! When the config indexes KV events (llm-d's precise prefix cache), each engine's per-step
//! event batches are handed to the router as they arrive, tagged with the endpoint and the model
//! it serves (the `kv@<pod>@<model>` topic upstream reads them under).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use blis_kernel::{
    Actor, ActorId, Context, Event, KeyTable, Outbox, SimDuration, SimTime, Streams, TimeAdvance,
};
use blis_router::flow_control::config::{CLEANUP_SWEEP_INTERVAL_US, DISPATCH_TICK_US};
use blis_router::flow_control::{DEFAULT_FAIRNESS_ID, Finished, FlowController, ReclamationConfig, Ticket};
use blis_router::plugins::PluginKind;
use blis_router::{Decision, EndpointIndex, RoundRobin, Router, RouterRng, RoutingRequest};

use crate::client::REQUEST_KEY_MASK;
use crate::message::{CallAbort, CallRejection, CallRequest, ClusterMessage, PdLeg};

/// The header carrying a call's session id (its workload request).
pub const SESSION_ID_HEADER: &str = "x-session-id";

/// The router in front of the engines.
pub struct RouterHost {
    engines: Vec<ActorId>,
    engine_names: Vec<Arc<str>>,
    /// Each endpoint's served model (a KV-event topic's model).
    engine_models: Vec<Arc<str>>,
    endpoint_of: BTreeMap<ActorId, EndpointIndex>,
    /// Per served model, the endpoints serving it, in name order.
    models: Vec<(Arc<str>, Vec<EndpointIndex>)>,
    policy: Policy,
    delay_to_engine: SimDuration,
    delay_to_client: SimDuration,
    routed: u64,
    refused: u64,
    /// Where each unanswered call went, for its abort.
    destinations: KeyTable<ActorId>,
    /// Calls evicted in flight (already answered): whatever their engine still sends is dropped.
    evicted: BTreeSet<u64>,
    last_transition: SimTime,
}

/// How the host picks.
enum Policy {
    /// One round-robin cycle per model.
    RoundRobin(Vec<RoundRobin>),
    /// llm-d's router.
    Llmd(Box<Llmd>),
}

/// llm-d's router with its random streams and scrape schedule.
struct Llmd {
    router: Router,
    rng: RouterRng,
    scrapes: ScrapeSchedule,
    clients_left: usize,
    report_first_token: bool,
    /// Flow control, when its gate is on.
    flow: Option<FlowState>,
    /// Whether a plugin reads request headers.
    reads_headers: bool,
    /// Per session (a call key's request bits), the session tokens written on its last
    /// response, which its next call sends back.
    echoed: BTreeMap<u64, Vec<(String, String)>>,
    /// The headers of the call being routed, and the tokens a response hook writes (reused).
    headers: Vec<(String, String)>,
    written: Vec<(String, String)>,
}

impl Llmd {
    /// The response's headers passed back for call `key`: keep the tokens the router writes for
    /// the call's session.
    fn response_header(&mut self, key: u64) {
        self.written.clear();
        self.router.response_header(key, &mut self.written);
        if self.written.is_empty() {
            return;
        }
        let echoed = self.echoed.entry(key & REQUEST_KEY_MASK).or_default();
        for (name, value) in self.written.drain(..) {
            match echoed.iter_mut().find(|(n, _)| *n == name) {
                Some(slot) => slot.1 = value,
                None => echoed.push((name, value)),
            }
        }
    }

    /// The headers `call` carries: its session id and the session tokens echoed back.
    fn build_headers(&mut self, call: &CallRequest) {
        self.headers.clear();
        if self.reads_headers {
            let session = call.request.key & REQUEST_KEY_MASK;
            self.headers.push((SESSION_ID_HEADER.to_owned(), format!("{session:016x}")));
            if let Some(echoed) = self.echoed.get(&session) {
                self.headers.extend(echoed.iter().cloned());
            }
        }
    }
}

/// Flow control's state in the host: one controller per InferencePool (per served model, as
/// the gateway picks a pool by model), the calls waiting in them, and the ticks already run.
struct FlowState {
    /// Per model (in `models` order), its pool's controller.
    controllers: Vec<FlowController>,
    /// The waiting calls, with their model's index.
    held: BTreeMap<u64, (Box<CallRequest>, usize)>,
    /// The last dispatch tick run, µs.
    last_tick_us: Option<u64>,
    /// The last cleanup sweep run, µs.
    last_sweep_us: u64,
    /// Scratch for expiries.
    finished: Vec<Finished>,
    /// The fairness id of a request whose client sets none (`default-flow`).
    default_flow: Arc<str>,
    /// With eviction on, each dispatched call in flight: its model's index and its client.
    leases: BTreeMap<u64, (usize, ActorId)>,
    /// Scratch for the calls a reclamation decision revokes.
    revoked: Vec<u64>,
}

impl FlowState {
    /// When the host must next act for flow control: the next 1 ms dispatch tick while any
    /// queue holds an item (finalized ones included: a cycle takes them off), and the earliest
    /// TTL deadline.
    fn next_wake_us(&self, now_us: u64) -> Option<u64> {
        let busy = self.controllers.iter().any(|c| !c.is_empty());
        let tick = busy.then(|| (now_us / DISPATCH_TICK_US + 1) * DISPATCH_TICK_US);
        let deadline = self.controllers.iter().filter_map(FlowController::next_deadline_us).min();
        match (tick, deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// When each endpoint is scraped next: base ticks at `phase + k·base` (k ≥ 1, the first one
/// tick after the endpoint appears, as upstream's collector starts), each metrics source firing
/// on its first tick and then every `period` ticks (`datalayer/interval_dispatcher.go`).
struct ScrapeSchedule {
    base_us: u64,
    phases_us: Vec<u64>,
    /// Per extracting metrics source, its period in base ticks.
    periods: Vec<u64>,
    /// (time, endpoint, tick) of each endpoint's next firing.
    next: BTreeSet<(u64, EndpointIndex, u64)>,
}

impl ScrapeSchedule {
    fn new(base_us: u64, phases_us: Vec<u64>, periods: Vec<u64>) -> ScrapeSchedule {
        let mut schedule = ScrapeSchedule { base_us, phases_us, periods, next: BTreeSet::new() };
        if !schedule.periods.is_empty() {
            for e in 0..schedule.phases_us.len() {
                schedule.plan(e as EndpointIndex, 0);
            }
        }
        schedule
    }

    /// Plan `endpoint`'s first firing after tick `after`.
    fn plan(&mut self, endpoint: EndpointIndex, after: u64) {
        // The smallest k > after with (k − 1) a multiple of some period.
        let tick = self
            .periods
            .iter()
            .map(|&p| {
                let k = after + 1;
                let offset = (k - 1) % p;
                if offset == 0 { k } else { k + p - offset }
            })
            .min()
            .expect("a schedule has sources");
        let at = self.phases_us[endpoint as usize].saturating_add(tick.saturating_mul(self.base_us));
        self.next.insert((at, endpoint, tick));
    }

    /// How many sources fire at `tick`.
    fn firing(&self, tick: u64) -> usize {
        self.periods.iter().filter(|&&p| (tick - 1).is_multiple_of(p)).count()
    }
}

/// Everything llm-d's router host needs beyond the engines.
pub struct LlmdWiring {
    /// The router, over the endpoints in name order.
    pub router: Router,
    /// The scenario's streams (the router draws from `router/*` substreams).
    pub streams: Streams,
    /// `--refresh-metrics-interval`, µs.
    pub refresh_interval_us: u64,
    /// Each extracting metrics source's period in base ticks.
    pub source_periods: Vec<u64>,
    /// How many clients will say they are done.
    pub clients: usize,
}

impl RouterHost {
    /// A router over `engines` (with their names and served models, in name order) with
    /// one-way delays to each side; `llmd` selects llm-d's router, `None` the round-robin
    /// baseline.
    pub fn new(
        engines: Vec<(ActorId, Arc<str>, Arc<str>)>,
        llmd: Option<LlmdWiring>,
        delay_to_engine: SimDuration,
        delay_to_client: SimDuration,
    ) -> RouterHost {
        let mut models: Vec<(Arc<str>, Vec<EndpointIndex>)> = Vec::new();
        for (i, (_, _, model)) in engines.iter().enumerate() {
            match models.iter_mut().find(|(m, _)| m == model) {
                Some((_, list)) => list.push(i as EndpointIndex),
                None => models.push((model.clone(), vec![i as EndpointIndex])),
            }
        }
        let endpoint_of =
            engines.iter().enumerate().map(|(i, (id, _, _))| (*id, i as EndpointIndex)).collect();
        let engine_names: Vec<Arc<str>> = engines.iter().map(|(_, n, _)| n.clone()).collect();
        let engine_models: Vec<Arc<str>> = engines.iter().map(|(_, _, m)| m.clone()).collect();
        let policy = match llmd {
            None => Policy::RoundRobin(vec![RoundRobin::default(); models.len()]),
            Some(wiring) => {
                let phases = engine_names
                    .iter()
                    .map(|name| {
                        wiring
                            .streams
                            .stream("router", "scrape-phase", name)
                            .below(wiring.refresh_interval_us)
                    })
                    .collect();
                let report_first_token = wiring.router.wants_first_chunk();
                let reads_headers = wiring.router.reads_headers();
                let router_config = wiring.router.config();
                let concurrency = matches!(
                    router_config.plugins[router_config.saturation_detector].kind,
                    PluginKind::ConcurrencyDetector(_)
                );
                let reclamation = ReclamationConfig::derived(concurrency, wiring.refresh_interval_us);
                let flow = router_config.flow_control.clone().map(|config| FlowState {
                    controllers: models
                        .iter()
                        .map(|_| {
                            let mut controller = FlowController::new(config.clone());
                            if config.enable_eviction {
                                controller.enable_eviction(reclamation);
                            }
                            controller
                        })
                        .collect(),
                    held: BTreeMap::new(),
                    last_tick_us: None,
                    last_sweep_us: 0,
                    finished: Vec::new(),
                    default_flow: Arc::from(DEFAULT_FAIRNESS_ID),
                    leases: BTreeMap::new(),
                    revoked: Vec::new(),
                });
                Policy::Llmd(Box::new(Llmd {
                    router: wiring.router,
                    rng: RouterRng {
                        tie_break: wiring.streams.stream("router", "tie-break", ""),
                        exploration: wiring.streams.stream("router", "exploration", ""),
                    },
                    scrapes: ScrapeSchedule::new(wiring.refresh_interval_us, phases, wiring.source_periods),
                    clients_left: wiring.clients,
                    report_first_token,
                    flow,
                    reads_headers,
                    echoed: BTreeMap::new(),
                    headers: Vec::new(),
                    written: Vec::new(),
                }))
            }
        };
        RouterHost {
            engines: engines.iter().map(|(id, _, _)| *id).collect(),
            engine_names,
            engine_models,
            endpoint_of,
            models,
            policy,
            delay_to_engine,
            delay_to_client,
            routed: 0,
            refused: 0,
            destinations: KeyTable::new(),
            evicted: BTreeSet::new(),
            last_transition: SimTime::ZERO,
        }
    }

    /// llm-d's router, when it is the one running (for its state after a run).
    pub fn llmd(&self) -> Option<&Router> {
        match &self.policy {
            Policy::Llmd(l) => Some(&l.router),
            Policy::RoundRobin(_) => None,
        }
    }

    fn route(&mut self, mut call: Box<CallRequest>, now: SimTime, out: &mut Outbox<ClusterMessage>) {
        let candidates = self.models.iter().position(|(m, _)| *m == call.model);
        let (picked, policy, score) = match (&mut self.policy, candidates) {
            (Policy::RoundRobin(cycles), Some(m)) => {
                let list = &self.models[m].1;
                (Ok(list[cycles[m].pick(list.len())]), "round-robin", None)
            }
            (Policy::RoundRobin(_), None) => {
                (Err((503, "no endpoint serves the model".to_owned())), "round-robin", None)
            }
            (Policy::Llmd(llmd), Some(m)) if llmd.flow.is_some() => {
                call.report_first_token = llmd.report_first_token;
                self.enqueue(call, m, now, out);
                return;
            }
            (Policy::Llmd(llmd), m) => {
                let candidates: &[EndpointIndex] = m.map_or(&[], |m| &self.models[m].1);
                call.report_first_token = llmd.report_first_token;
                llmd.build_headers(&call);
                let decision = llmd.router.route(
                    &routing_request(&call, &llmd.headers),
                    candidates,
                    now.as_micros(),
                    &mut llmd.rng,
                );
                let (picked, score) = decided(decision);
                if picked.is_ok() {
                    call.pd = prefiller(&llmd.router, &self.engines, &self.engine_names);
                }
                (picked, "llm-d", score)
            }
        };
        self.deliver(call, picked, policy, score, out);
    }

    /// Send `call` where the router picked, or answer it with the refusal.
    fn deliver(
        &mut self,
        call: Box<CallRequest>,
        picked: Result<EndpointIndex, (u16, String)>,
        policy: &str,
        score: Option<f64>,
        out: &mut Outbox<ClusterMessage>,
    ) {
        match picked {
            Ok(endpoint) => {
                self.routed += 1;
                if let Some(notes) = out.notes() {
                    let mut note = notes
                        .decision("decisions", "route")
                        .arg("request", call.request.key)
                        .arg("picked", &*self.engine_names[endpoint as usize])
                        .arg("policy", policy)
                        .arg("endpoints", self.engines.len());
                    if let Some(PdLeg::Prefiller { name, .. }) = &call.pd {
                        note = note.arg("prefill", &**name);
                    }
                    if let Some(score) = score {
                        note.arg("score", score);
                    }
                }
                let engine = self.engines[endpoint as usize];
                self.destinations.insert(call.request.key, engine);
                out.send(engine, self.delay_to_engine, ClusterMessage::Request(call));
            }
            Err((status, reason)) => self.refuse(call.request.key, call.client, status, &reason, out),
        }
    }

    /// Answer call `key` with a refusal: `router_<status>: <reason>`.
    fn refuse(
        &mut self,
        key: u64,
        client: ActorId,
        status: u16,
        reason: &str,
        out: &mut Outbox<ClusterMessage>,
    ) {
        self.refused += 1;
        if let Some(notes) = out.notes() {
            notes
                .decision("decisions", "refuse")
                .arg("request", key)
                .arg("status", u64::from(status))
                .arg("reason", reason);
        }
        let rejection = CallRejection {
            key,
            client,
            instance: Arc::from("router"),
            reason: format!("router_{status}: {reason}"),
        };
        out.send(client, self.delay_to_client, ClusterMessage::Rejection(Box::new(rejection)));
    }

    /// Flow control on: offer `call` to its pool's controller, then run the dispatch cycle the
    /// enqueue triggers.
    fn enqueue(
        &mut self,
        call: Box<CallRequest>,
        model: usize,
        now: SimTime,
        out: &mut Outbox<ClusterMessage>,
    ) {
        let Policy::Llmd(llmd) = &mut self.policy else { unreachable!("flow control is llm-d's") };
        let flow = llmd.flow.as_mut().expect("flow control is on");
        let ticket = Ticket {
            key: call.request.key,
            priority: -call.request.priority,
            fairness_id: call.fairness_id.clone().unwrap_or_else(|| flow.default_flow.clone()),
            byte_size: blis_router::flow_control::body_bytes(
                &call.model,
                &call.request.prompt_token_ids,
                Some(call.request.output_token_ids.len() as u64),
            ),
            received_us: now.as_micros(),
            slo_ttft_ms: call.slo_ttft_ms,
        };
        let (key, client) = (call.request.key, call.client);
        match flow.controllers[model].enqueue(ticket, now.as_micros()) {
            Ok(()) => {
                if let Some(notes) = out.notes() {
                    notes
                        .decision("decisions", "enqueue")
                        .arg("request", key)
                        .arg("priority", -call.request.priority);
                }
                flow.held.insert(key, (call, model));
            }
            Err(finished) => self.finish(finished, client, out),
        }
        self.dispatch_cycle(model, now, out);
    }

    /// One dispatch cycle of `model`'s pool; a dispatched call is scheduled at once.
    fn dispatch_cycle(&mut self, model: usize, now: SimTime, out: &mut Outbox<ClusterMessage>) {
        let Policy::Llmd(llmd) = &mut self.policy else { unreachable!("flow control is llm-d's") };
        let flow = llmd.flow.as_mut().expect("flow control is on");
        let pool = &self.models[model].1;
        let saturation = llmd.router.saturation(pool, now.as_micros());
        let Some(key) = flow.controllers[model].dispatch_cycle(saturation, pool.is_empty()) else {
            self.reclaim(model, saturation, now, out);
            return;
        };
        let (mut call, _) = flow.held.remove(&key).expect("a dispatched call was held");
        if let Some(notes) = out.notes() {
            notes.decision("decisions", "dispatch").arg("request", key).arg("saturation", saturation);
        }
        llmd.build_headers(&call);
        let decision = llmd.router.schedule(
            &routing_request(&call, &llmd.headers),
            pool,
            now.as_micros(),
            &mut llmd.rng,
        );
        let (picked, score) = decided(decision);
        if picked.is_ok() {
            call.pd = prefiller(&llmd.router, &self.engines, &self.engine_names);
        }
        let flow = llmd.flow.as_mut().expect("flow control is on");
        if picked.is_ok() && flow.controllers[model].eviction().is_some() {
            flow.controllers[model].track_in_flight(key, -call.request.priority, now.as_micros());
            flow.leases.insert(key, (model, call.client));
        }
        self.deliver(call, picked, "llm-d", score, out);
    }

    /// After a cycle of `model`'s pool that dispatched nothing: the reclamation decision, and
    /// each revocation carried out — the engine told to abort, the client answered 429
    /// `evicted`, the router's in-flight state released, the revocation confirmed.
    fn reclaim(&mut self, model: usize, saturation: f64, now: SimTime, out: &mut Outbox<ClusterMessage>) {
        let Policy::Llmd(llmd) = &mut self.policy else { unreachable!("flow control is llm-d's") };
        let flow = llmd.flow.as_mut().expect("flow control is on");
        let mut revoked = std::mem::take(&mut flow.revoked);
        flow.controllers[model].reclaim(now.as_micros(), &mut revoked);
        for &key in &revoked {
            let Policy::Llmd(llmd) = &mut self.policy else { unreachable!() };
            let flow = llmd.flow.as_mut().expect("flow control is on");
            let (_, client) = flow.leases.remove(&key).expect("a revoked call is in flight");
            flow.controllers[model].stream_ended(key, now.as_micros());
            llmd.router.end(key);
            if let Some(notes) = out.notes() {
                notes.decision("decisions", "evict").arg("request", key).arg("saturation", saturation);
            }
            let engine = self.destinations.remove(key).expect("a revoked call went to an engine");
            out.send(engine, self.delay_to_engine, ClusterMessage::Abort(CallAbort { key, client }));
            self.evicted.insert(key);
            let refusal = blis_router::flow_control::evicted_in_flight();
            self.refuse(key, client, refusal.status, &refusal.reason(), out);
        }
        revoked.clear();
        let Policy::Llmd(llmd) = &mut self.policy else { unreachable!() };
        llmd.flow.as_mut().expect("flow control is on").revoked = revoked;
    }

    /// Answer a call flow control finished without dispatching.
    fn finish(&mut self, finished: Finished, client: ActorId, out: &mut Outbox<ClusterMessage>) {
        let refusal = blis_router::flow_control::translate(finished.outcome, Some(finished.cause), false)
            .expect("a finished call was not dispatched");
        self.refuse(finished.key, client, refusal.status, &refusal.reason(), out);
    }

    /// Flow control's timed work at `now`: TTL expiries (answered at once), then the cleanup
    /// sweep on its 1 s tick.
    fn flow_timers(&mut self, now: SimTime, out: &mut Outbox<ClusterMessage>) {
        let Policy::Llmd(llmd) = &mut self.policy else { return };
        let Some(flow) = llmd.flow.as_mut() else { return };
        let now_us = now.as_micros();
        let mut finished = std::mem::take(&mut flow.finished);
        for controller in &mut flow.controllers {
            controller.expire(now_us, &mut finished);
        }
        if now_us > 0 && now_us.is_multiple_of(CLEANUP_SWEEP_INTERVAL_US) && flow.last_sweep_us != now_us {
            flow.last_sweep_us = now_us;
            flow.controllers.iter_mut().for_each(FlowController::sweep);
        }
        for f in finished.drain(..) {
            let Policy::Llmd(llmd) = &mut self.policy else { unreachable!() };
            let flow = llmd.flow.as_mut().expect("flow control is on");
            let (call, _) = flow.held.remove(&f.key).expect("an expired call was held");
            self.finish(f, call.client, out);
        }
        let Policy::Llmd(llmd) = &mut self.policy else { unreachable!() };
        llmd.flow.as_mut().expect("flow control is on").finished = finished;
    }

    /// The 1 ms dispatch tick: one cycle per pool holding items.
    fn dispatch_tick(&mut self, now: SimTime, out: &mut Outbox<ClusterMessage>) {
        let now_us = now.as_micros();
        if now_us == 0 || !now_us.is_multiple_of(DISPATCH_TICK_US) {
            return;
        }
        let Policy::Llmd(llmd) = &mut self.policy else { return };
        let Some(flow) = llmd.flow.as_mut() else { return };
        if flow.last_tick_us == Some(now_us) {
            return;
        }
        flow.last_tick_us = Some(now_us);
        for model in 0..flow.controllers.len() {
            let Policy::Llmd(llmd) = &self.policy else { unreachable!() };
            if !llmd.flow.as_ref().expect("flow control is on").controllers[model].is_empty() {
                self.dispatch_cycle(model, now, out);
            }
        }
    }

    /// The client gave up on a call still waiting in flow control: finalize it there (it never
    /// reached an engine, so nothing is forwarded). Whether it was waiting.
    fn cancel_held(&mut self, key: u64) -> bool {
        let Policy::Llmd(llmd) = &mut self.policy else { return false };
        let Some(flow) = llmd.flow.as_mut() else { return false };
        let Some((_, model)) = flow.held.remove(&key) else { return false };
        flow.controllers[model].cancel(key).expect("a held call waits in its controller");
        true
    }

    /// Call `key`'s stream ended (answered or abandoned): the router's response hooks, and
    /// eviction's tracking.
    fn settled(&mut self, key: u64, now: SimTime) {
        if let Policy::Llmd(llmd) = &mut self.policy {
            llmd.router.end(key);
            if let Some(flow) = llmd.flow.as_mut()
                && let Some((model, _)) = flow.leases.remove(&key)
            {
                flow.controllers[model].stream_ended(key, now.as_micros());
            }
        }
    }

    /// An engine's answer (or its first token) for `key` passed back: the response-header hook.
    fn response_header(&mut self, key: u64) {
        if let Policy::Llmd(llmd) = &mut self.policy {
            llmd.response_header(key);
        }
    }
}

/// What the router reads of a call, with the headers it carries.
fn routing_request<'a>(call: &'a CallRequest, headers: &'a [(String, String)]) -> RoutingRequest<'a> {
    RoutingRequest {
        key: call.request.key,
        model: &call.model,
        prompt_token_ids: &call.request.prompt_token_ids,
        priority: -call.request.priority,
        cache_salt: &[],
        max_tokens: Some(call.request.output_token_ids.len() as u64),
        headers,
        prompt_digests: call.digests_ahead.as_ref(),
    }
}

/// The prefill instance the router's last decision picked (the disagg handler's
/// `x-prefiller-host-port`), for the decode sidecar.
fn prefiller(router: &Router, engines: &[ActorId], names: &[Arc<str>]) -> Option<PdLeg> {
    let p = router.result().prefill? as usize;
    Some(PdLeg::Prefiller { engine: engines[p], name: names[p].clone() })
}

/// A decision as the host delivers it: the endpoint or the refusal, and the winner's score.
fn decided(decision: Decision) -> (Result<EndpointIndex, (u16, String)>, Option<f64>) {
    match decision {
        Decision::Routed { endpoint, score, .. } => (Ok(endpoint), Some(score)),
        Decision::Refused { status, reason } => (Err((status, reason)), None),
    }
}

impl Actor<ClusterMessage> for RouterHost {
    fn time_advance(&self) -> TimeAdvance {
        match &self.policy {
            Policy::Llmd(llmd) => {
                let scrape = llmd.scrapes.next.first().map(|&(at, _, _)| at);
                let flow = llmd.flow.as_ref().and_then(|f| f.next_wake_us(self.last_transition.as_micros()));
                match (scrape, flow) {
                    (Some(a), Some(b)) => {
                        TimeAdvance::until(self.last_transition, SimTime::from_micros(a.min(b)))
                    }
                    (Some(at), None) | (None, Some(at)) => {
                        TimeAdvance::until(self.last_transition, SimTime::from_micros(at))
                    }
                    (None, None) => TimeAdvance::Passive,
                }
            }
            Policy::RoundRobin(_) => TimeAdvance::Passive,
        }
    }

    fn transition(
        &mut self,
        ctx: &Context,
        event: Event<'_, ClusterMessage>,
        out: &mut Outbox<ClusterMessage>,
    ) {
        let now = ctx.now.time;
        self.flow_timers(now, out);
        if let Event::External(bag) | Event::Confluent(bag) = event {
            for envelope in bag {
                let sender = envelope.sender;
                match envelope.payload {
                    ClusterMessage::Request(call) => self.route(call, now, out),
                    ClusterMessage::Abort(abort) if self.cancel_held(abort.key) => {}
                    ClusterMessage::Abort(abort) => {
                        // An abort for a call already answered has nowhere to go.
                        if let Some(engine) = self.destinations.remove(abort.key) {
                            self.settled(abort.key, now);
                            out.send(engine, self.delay_to_engine, ClusterMessage::Abort(abort));
                        }
                    }
                    // An evicted call was answered already: what its engine sent before the abort
                    // reached it goes nowhere.
                    answer @ (ClusterMessage::Completion(_) | ClusterMessage::Rejection(_))
                        if self.evicted.remove(&answer.key()) => {}
                    ClusterMessage::FirstToken(first) if self.evicted.contains(&first.key) => {}
                    answer @ (ClusterMessage::Completion(_) | ClusterMessage::Rejection(_)) => {
                        self.destinations.remove(answer.key());
                        self.response_header(answer.key());
                        self.settled(answer.key(), now);
                        out.send(answer.client(), self.delay_to_client, answer);
                    }
                    ClusterMessage::FirstToken(first) => {
                        if let Policy::Llmd(llmd) = &mut self.policy {
                            llmd.response_header(first.key);
                            llmd.router.first_chunk(first.key);
                        }
                    }
                    ClusterMessage::Metrics(scrape) => {
                        if let (Policy::Llmd(llmd), Some(&endpoint)) =
                            (&mut self.policy, self.endpoint_of.get(&sender))
                        {
                            llmd.router.record_scrape(endpoint, &scrape, now.as_micros());
                        }
                    }
                    ClusterMessage::KvEvents(batch) => {
                        if let (Policy::Llmd(llmd), Some(&endpoint)) =
                            (&mut self.policy, self.endpoint_of.get(&sender))
                        {
                            let model = &self.engine_models[endpoint as usize];
                            llmd.router.record_kv_events(endpoint, model, &batch);
                        }
                    }
                    ClusterMessage::ClientDone => {
                        if let Policy::Llmd(llmd) = &mut self.policy {
                            llmd.clients_left = llmd.clients_left.saturating_sub(1);
                        }
                    }
                    ClusterMessage::Scrape
                    | ClusterMessage::TransferDone(_)
                    | ClusterMessage::TransferCancel(_)
                    | ClusterMessage::TransferStart(_)
                    | ClusterMessage::KvNotify(_) => {}
                }
            }
        }
        self.dispatch_tick(now, out);
        if let Policy::Llmd(llmd) = &mut self.policy {
            // Scraping stops once every client is done and no call waits in flow control (a
            // waiting call needs fresh figures to be dispatched).
            if llmd.clients_left == 0 && llmd.flow.as_ref().is_none_or(|f| f.held.is_empty()) {
                llmd.scrapes.next.clear();
            }
            while let Some(&(at, endpoint, tick)) = llmd.scrapes.next.first()
                && at <= now.as_micros()
            {
                llmd.scrapes.next.pop_first();
                for _ in 0..llmd.scrapes.firing(tick) {
                    out.send(self.engines[endpoint as usize], self.delay_to_engine, ClusterMessage::Scrape);
                }
                llmd.scrapes.plan(endpoint, tick);
            }
        }
        self.last_transition = now;
    }

    fn describe(&self, description: &mut blis_kernel::Description) {
        description.arg("routed", self.routed);
        description.arg("refused", self.refused);
    }
}
